"""The MCP server, driven by the official SDK's own client, over both transports.

stdio: `pitfalls mcp` started as a subprocess on the data dir of a running server, every tool
called; its answers equal `/api/v1/match` and `/api/v1/search` for the same input. Streamable
HTTP: `/mcp` of a real `pitfalls serve`, 401 without a token, lookups with a read token, an
outcome only with a write token.
"""

import contextlib
import json
import urllib.error
import urllib.request

import anyio
import pytest

from tests.conftest import get, pitfalls_command, running_server, write_token

pytestmark = pytest.mark.e2e

OOM = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 40, in <module>\n'
    "    loss.backward()\n"
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.79 GiB "
    "total capacity; 6.80 GiB already allocated; 12.00 MiB free; 7.00 GiB reserved in total by "
    "PyTorch)\n"
)


def _post(url: str, body: dict, headers: dict | None = None) -> tuple[int, dict]:
    request = urllib.request.Request(
        url,
        json.dumps(body).encode(),
        {"Content-Type": "application/json", **(headers or {})},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    with running_server(tmp_path_factory.mktemp("mcp")) as started:
        yield started


async def _session_calls(client) -> dict:
    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    out = {"tools": tools}
    out["match"] = await client.call_tool("match_traceback", {"text": OOM})
    out["search"] = await client.call_tool(
        "search_pitfalls", {"query": "batches tracked", "limit": 5}
    )
    out["entry"] = await client.call_tool("get_pitfall", {"id": "view-non-contiguous"})
    out["missing"] = await client.call_tool("get_pitfall", {"id": "no-such-entry"})
    fingerprint = out["match"].structured_content["fingerprint"]
    first = out["match"].structured_content["matches"][0]["id"]
    out["outcome"] = await client.call_tool(
        "report_outcome",
        {"fingerprint": fingerprint, "id": first, "worked": True, "note": "smaller batch"},
    )
    out["resource"] = await client.read_resource("pitfall://view-non-contiguous")
    return out


def test_pitfalls_mcp_over_stdio_answers_as_the_api_does(served):
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    base, clone = served
    parameters = StdioServerParameters(
        command=pitfalls_command(), args=["mcp"], cwd=str(clone), env={"PATH": "/usr/bin:/bin"}
    )

    async def run():
        async with Client(parameters) as client:
            return await _session_calls(client)

    status, api_answer = _post(base + "/api/v1/match", {"text": OOM})  # before any report
    assert status == 200
    out = anyio.run(run)
    assert set(out["tools"]) == {
        "match_traceback", "search_pitfalls", "get_pitfall", "report_outcome",
    }  # fmt: skip
    for name in ("match_traceback", "search_pitfalls", "get_pitfall"):
        assert out["tools"][name].annotations.read_only_hint is True
    assert out["tools"]["report_outcome"].annotations.read_only_hint is False
    schema = out["tools"]["match_traceback"].output_schema
    assert {"known", "fingerprint", "matches"} <= set(schema["properties"])  # typed, not any

    assert out["match"].structured_content == api_answer
    assert api_answer["matches"] and api_answer["fingerprint"]
    status, body = get(base + "/api/v1/search?q=batches+tracked&limit=5")
    assert status == 200 and out["search"].structured_content == json.loads(body)
    assert out["entry"].structured_content["id"] == "view-non-contiguous"
    assert "## Fix" in out["entry"].structured_content["markdown"]
    assert out["missing"].is_error
    outcome = out["outcome"].structured_content
    assert outcome["for_this_error"]["worked"] == 1
    assert "## Fix" in out["resource"].contents[0].text


def test_mcp_over_http_needs_a_token_and_a_write_scope_for_outcomes(served):
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    base, clone = served
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    accept = {"Accept": "application/json, text/event-stream"}
    assert _post(base + "/mcp", listing, accept)[0] == 401
    assert _post(base + "/mcp", listing, {**accept, "Authorization": "Bearer wrong"})[0] == 401

    @contextlib.asynccontextmanager
    async def client(token: str):
        headers = {"Authorization": f"Bearer {token}"}
        async with (
            httpx2.AsyncClient(headers=headers, timeout=30) as http,
            Client(streamable_http_client(base + "/mcp", http_client=http)) as c,
        ):
            yield c

    writer = write_token(clone)
    reader = write_token(clone, scope="read")

    async def run():
        async with client(writer) as session:
            written = await _session_calls(session)
        async with client(reader) as session:
            answer = await session.call_tool("match_traceback", {"text": OOM})
            refused = await session.call_tool(
                "report_outcome",
                {
                    "fingerprint": answer.structured_content["fingerprint"],
                    "id": answer.structured_content["matches"][0]["id"],
                    "worked": False,
                },
            )
        return written, refused

    _, before = _post(base + "/api/v1/match", {"text": OOM})
    written, refused = anyio.run(run)
    # The same answer, apart from the reports the first test and this one made meanwhile.
    for answer in (before, written["match"].structured_content):
        for match in answer["matches"]:
            match.pop("outcomes"), match.pop("outcomes_all")
    assert written["match"].structured_content == before
    assert not written["outcome"].is_error
    assert refused.is_error and "write" in refused.content[0].text
