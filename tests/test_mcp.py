"""The MCP server, driven by the official SDK's own client, over both transports.

stdio: `pitfalls mcp` started as a subprocess on the data dir of a running server, every tool
called; its answers equal `/api/v1/match` and `/api/v1/search` for the same input. Streamable
HTTP: `/mcp` of a real `pitfalls serve`, with the API's rights (anyone on a public site, a bad
token refused), and an outcome only with the answer's token; in process, the refusals a report
and a token can meet, each a sentence.
"""

import contextlib
import json
import os
import urllib.error
import urllib.request

import anyio
import pytest

from tests import test_wiki
from tests.conftest import entry_text, get, pitfalls_command, running_server, write_token

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
    token = out["match"].structured_content["answer_token"]
    out["outcome"] = await client.call_tool(
        "report_outcome",
        {
            "fingerprint": fingerprint,
            "id": first,
            "worked": True,
            "answer_token": token,
            "note": "smaller batch",
        },
    )
    out["resource"] = await client.read_resource("pitfall://view-non-contiguous")
    return out


@pytest.mark.e2e
def test_pitfalls_mcp_over_stdio_answers_as_the_api_does(served):
    from mcp import Client
    from mcp.client.stdio import StdioServerParameters

    base, clone = served
    env = {"PATH": "/usr/bin:/bin"}
    if "PYTHONPATH" in os.environ:  # the code under test, not an installed copy
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    parameters = StdioServerParameters(
        command=pitfalls_command(), args=["mcp"], cwd=str(clone), env=env
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

    for answer in (out["match"].structured_content, api_answer):
        answer.pop("answer_token")  # signed with the time it was issued
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


@pytest.mark.e2e
def test_mcp_over_http_has_the_apis_rights_and_reports_need_the_answers_token(served):
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    base, clone = served
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    accept = {"Accept": "application/json, text/event-stream"}
    assert _post(base + "/mcp", listing, accept)[0] == 200  # a public site, as the API
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
            answer = (await session.call_tool("match_traceback", {"text": OOM})).structured_content
            report = {
                "fingerprint": answer["fingerprint"],
                "id": answer["matches"][0]["id"],
                "worked": False,
            }
            refused = await session.call_tool(
                "report_outcome", {**report, "answer_token": "made-up"}
            )
            # A read token may report, as anyone may through the API, with the answer's token.
            taken = await session.call_tool(
                "report_outcome", {**report, "answer_token": answer["answer_token"]}
            )
        return written, refused, taken

    _, before = _post(base + "/api/v1/match", {"text": OOM})
    written, refused, taken = anyio.run(run)
    # The same answer, apart from the reports the first test and this one made meanwhile.
    for answer in (before, written["match"].structured_content):
        answer.pop("answer_token")
        for match in answer["matches"]:
            match.pop("outcomes"), match.pop("outcomes_all")
    assert written["match"].structured_content == before
    assert not written["outcome"].is_error
    assert refused.is_error and "answer_token is not one this server issued" in (
        refused.content[0].text
    )
    assert not taken.is_error, taken.content[0].text


# ---- in process: /mcp of an app, called as JSON-RPC ------------------------------------------

ACCEPT = {"Accept": "application/json, text/event-stream"}


def _mcp_app(make_settings, content_dir, **overrides):
    for entry_id in ("first-entry", "second-entry", "third-entry"):
        (content_dir / f"{entry_id}.md").write_text(entry_text(entry_id), encoding="utf-8")
    from fastapi.testclient import TestClient

    from app.web import create_app

    # The host is one DNS-rebinding protection accepts.
    return TestClient(create_app(make_settings(content_dir, **overrides)), "http://127.0.0.1")


def _call(client, tool: str, arguments: dict, headers: dict | None = None):
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    return client.post("/mcp", json=body, headers={**ACCEPT, **(headers or {})})


@pytest.mark.both_databases
def test_mcp_reports_as_the_api_does_and_a_long_note_is_a_sentence(make_settings, content_dir):
    with _mcp_app(make_settings, content_dir) as client:
        text = "RuntimeError: failure in first-entry number 3"
        answer = _call(client, "match_traceback", {"text": text}).json()["result"]
        answer = answer["structuredContent"]
        report = {
            "fingerprint": answer["fingerprint"],
            "id": "first-entry",
            "worked": False,
            "answer_token": answer["answer_token"],
        }
        long_note = _call(client, "report_outcome", {**report, "note": "x" * 2001})
        # Anonymous on a public site, with a note the API takes (past the 500 that are kept).
        taken = _call(client, "report_outcome", {**report, "note": "tried it " * 70})
        forged = _call(client, "report_outcome", {**report, "fingerprint": "0123456789abcdef"})
    result = long_note.json()["result"]
    assert result["isError"]
    assert "note is longer than 2000 characters" in result["content"][0]["text"]
    assert "Traceback" not in result["content"][0]["text"]
    assert not taken.json()["result"]["isError"], taken.text
    assert taken.json()["result"]["structuredContent"]["for_this_error"]["reports"] == 1
    assert forged.json()["result"]["isError"]
    assert "another error" in forged.json()["result"]["content"][0]["text"]


@pytest.mark.both_databases
def test_mcp_refuses_a_disabled_accounts_token_and_anonymous_on_a_private_site(
    make_settings, content_dir
):
    from sqlmodel import Session

    from app.accounts import CLI, create_token, disable_user, get_user, user_principal

    with _mcp_app(make_settings, content_dir, public_read=False) as client:
        wiki = test_wiki.Wiki(client, content_dir)
        with Session(wiki.engine) as session:
            bob = user_principal(get_user(session, "bob"))
            _, secret = create_token(
                session, name="bob-bot", scope="write", expires_in=None, owner=bob
            )
            session.commit()
            disable_user(session, name="bob", actor=CLI)
            session.commit()
        arguments = {"text": "RuntimeError: failure in first-entry number 3"}
        disabled = _call(
            client, "match_traceback", arguments, {"Authorization": f"Bearer {secret}"}
        )
        anonymous = _call(client, "match_traceback", arguments)
        reader = _call(client, "match_traceback", arguments, wiki.bearer("reader-bot"))
    assert disabled.status_code == 403
    assert "is disabled" in disabled.json()["error"]["message"]
    assert anonymous.status_code == 401 and "Bearer" in anonymous.json()["error"]["message"]
    assert reader.status_code == 200 and not reader.json()["result"]["isError"]
