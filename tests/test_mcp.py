"""The MCP server, driven by the official SDK's own client, over both transports.

Two real `pitfalls serve` for the module, started together: a public site and a private one
(PITFALLS_PUBLIC_READ=false). stdio: `pitfalls mcp` as a subprocess on the public one's data
dir (every tool: typed, concise, linking the whole entry as a resource) and `pitfalls mcp
--server` asking either site. Streamable HTTP: `/mcp` of each site with the API's rights and
the API's sentences: anyone reads a public site, a private one refuses anonymous callers and a
disabled account's token, and outcome reports need the answer's token. In process, the
refusals a report and a token can meet, on both databases.
"""

import contextlib
import json
import os
import urllib.error
import urllib.request
from pathlib import Path

import anyio
import pytest

from tests import test_wiki
from tests.conftest import REPO, Served, entry_text, pitfalls_command, write_token

# A real OOM as torch 2.x prints it, library frames and all.
OOM = (REPO / "tests/data/tracebacks/gpu--cuda-out-of-memory--1.txt").read_text(encoding="utf-8")
PUBLIC_URL = "https://kb.example.org/kb"
# An error no entry explains: no match (entries sharing its words come as related, linked).
UNKNOWN = "RuntimeError: the dataloader worker saw a contiguous tensor on the wrong cuda device"


def _post(url: str, body: dict, headers: dict | None = None) -> tuple[int, dict, dict]:
    request = urllib.request.Request(
        url,
        json.dumps(body).encode(),
        {"Content-Type": "application/json", **(headers or {})},
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read()), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"{}"), dict(error.headers)


def _size(value) -> int:
    """Bytes of a value as JSON, as a client reads it into an agent's context."""
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json", by_alias=True, exclude_none=True)
    return len(json.dumps(value, ensure_ascii=False).encode())


class Site:
    def __init__(self, served: Served) -> None:
        self.base, self.folder = served.base, served.folder

    def api_refusal(self, headers: dict | None = None) -> tuple[int, str]:
        """What `POST /api/v1/match` answers these headers: its status and sentence."""
        status, body, _ = _post(self.base + "/api/v1/match", {"text": OOM}, headers)
        return status, body["error"]["message"] if status >= 400 else ""


@pytest.fixture(scope="module")
def sites(tmp_path_factory):
    public = Served(tmp_path_factory.mktemp("public"), None, True)
    private = Served(tmp_path_factory.mktemp("private"), {"PITFALLS_PUBLIC_READ": "false"}, True)
    try:
        for served in (public, private):
            served.start()
        for served in (public, private):
            served.wait_ready()
        yield Site(public), Site(private)
    finally:
        for served in (public, private):
            served.stop()


def _stdio(folder: Path, *args: str, public_url: str = ""):
    from mcp.client.stdio import StdioServerParameters

    env = {"PATH": "/usr/bin:/bin"}
    if "PYTHONPATH" in os.environ:  # the code under test, not an installed copy
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    if public_url:
        env["PITFALLS_PUBLIC_URL"] = public_url
    return StdioServerParameters(
        command=pitfalls_command(), args=["mcp", *args], cwd=str(folder), env=env
    )


@contextlib.asynccontextmanager
async def _http(base: str, token: str | None = None):
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(base + "/mcp", http_client=http)) as client,
    ):
        yield client


async def _refused(connect) -> str:
    """The message of the MCP error that connecting (and listing the tools) ended with."""
    from mcp.shared.exceptions import MCPError

    def find(error: BaseException) -> MCPError | None:
        if isinstance(error, MCPError):
            return error
        for inner in getattr(error, "exceptions", ()):
            if (found := find(inner)) is not None:
                return found
        return None

    try:
        async with connect as client:
            await client.list_tools()
    except Exception as error:  # the SDK's task groups wrap it
        found = find(error)
        assert found is not None, repr(error)
        return found.error.message
    raise AssertionError("the client was let in")


def _check_structured(tools: dict, name: str, result) -> dict:
    """The result's structured content, valid against the tool's own output schema."""
    import jsonschema

    assert not result.is_error, result.content[0].text
    jsonschema.validate(result.structured_content, tools[name].output_schema)
    text = json.loads(result.content[0].text)  # the same JSON, for clients that read text
    assert text == result.structured_content
    return result.structured_content


async def _session_calls(client) -> dict:
    from mcp_types import ResourceLink

    tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    out: dict = {"tools": tools, "protocol": client.protocol_version}
    out["match_result"] = match = await client.call_tool("match_traceback", {"text": OOM})
    out["match"] = _check_structured(tools, "match_traceback", match)
    unknown = await client.call_tool("match_traceback", {"text": UNKNOWN})
    out["unknown"] = _check_structured(tools, "match_traceback", unknown)
    out["unknown_links"] = [c.uri for c in unknown.content if isinstance(c, ResourceLink)]
    out["links"] = [c for c in match.content if isinstance(c, ResourceLink)]
    out["resources"] = [await client.read_resource(link.uri) for link in out["links"]]
    first = out["match"]["matches"][0]["id"]
    out["entry_result"] = entry = await client.call_tool("get_pitfall", {"id": first})
    out["entry"] = _check_structured(tools, "get_pitfall", entry)
    search = await client.call_tool("search_pitfalls", {"query": "batches tracked", "limit": 5})
    out["search"] = _check_structured(tools, "search_pitfalls", search)
    out["missing"] = await client.call_tool("get_pitfall", {"id": "no-such-entry"})
    report = await client.call_tool(
        "report_outcome",
        {
            "fingerprint": out["match"]["fingerprint"],
            "id": first,
            "worked": True,
            "answer_token": out["match"]["answer_token"],
            "note": "smaller batch",
        },
    )
    out["outcome"] = _check_structured(tools, "report_outcome", report)
    return out


def _assert_concise_and_linked(out: dict, api_answer: dict, link_base: str) -> None:
    from mcp_types.version import LATEST_PROTOCOL_VERSION

    assert out["protocol"] == LATEST_PROTOCOL_VERSION  # the SDK's newest revision
    assert set(out["tools"]) == {
        "match_traceback", "search_pitfalls", "get_pitfall", "report_outcome",
    }  # fmt: skip
    for name, tool in out["tools"].items():
        assert tool.output_schema and tool.output_schema.get("properties"), name
        assert tool.annotations.read_only_hint is (name != "report_outcome")
    schema = out["tools"]["match_traceback"].output_schema
    assert {"known", "fingerprint", "answer_token", "matches"} <= set(schema["properties"])

    # Per match: what the API's answer says of it, less the rest.
    answer, api_matches = out["match"], api_answer["matches"]
    assert answer["known"] and [m["id"] for m in answer["matches"]] == [
        m["id"] for m in api_matches
    ]
    for mine, api in zip(answer["matches"], api_matches, strict=True):
        assert (mine["title"], mine["captures"], mine["tier"]) == (
            api["title"], api["captures"], api["tier"],
        )  # fmt: skip
        assert mine["fix"] == api["fix_markdown"] and "```python" in mine["fix"]
        assert mine["url"] == link_base + api["url"]
        assert mine["resource"] == f"pitfall://{mine['id']}"
    assert answer["matches"][0]["captures"]["requested"] == "20.00 MiB"
    assert not {"parsed", "snippets", "fix_html", "why"} & set(json.dumps(answer).split('"'))

    # Concise: a fraction of the whole entry and of the API's whole answer, measured here.
    concise, entry = _size(out["match_result"]), _size(out["entry_result"])
    assert concise * 3 < entry, (concise, entry)
    assert concise * 2 < _size(api_answer), (concise, _size(api_answer))

    # The resource links name the matches and resolve to the whole entry's Markdown.
    assert [link.uri for link in out["links"]] == [m["resource"] for m in answer["matches"]]
    markdown = out["resources"][0].contents[0].text
    assert markdown == out["entry"]["markdown"] and answer["matches"][0]["fix"] in markdown
    assert "html" not in out["entry"] and out["entry"]["url"] == answer["matches"][0]["url"]

    unknown = out["unknown"]
    assert not unknown["known"] and not unknown["matches"]
    assert out["unknown_links"] == [r["resource"] for r in unknown["related"]]
    assert out["search"]["hits"] and out["search"]["hits"][0]["resource"].startswith("pitfall://")
    assert out["missing"].is_error and "no entry" in out["missing"].content[0].text
    assert out["outcome"]["for_this_error"]["reports"] >= 1


@pytest.mark.e2e
def test_pitfalls_mcp_over_stdio_is_typed_concise_and_links_the_whole_entry(sites):
    from mcp import Client

    public, _ = sites
    status, api_answer, _ = _post(public.base + "/api/v1/match", {"text": OOM})
    assert status == 200

    async def run():
        async with Client(_stdio(public.folder, public_url=PUBLIC_URL)) as client:
            return await _session_calls(client)

    out = anyio.run(run)
    _assert_concise_and_linked(out, api_answer, PUBLIC_URL)  # links on the site's address
    with urllib.request.urlopen(public.base + "/api/v1/search?q=batches+tracked&limit=5") as r:
        api_search = json.loads(r.read())
    assert [h["id"] for h in out["search"]["hits"]] == [h["id"] for h in api_search["hits"]]


@pytest.mark.e2e
def test_pitfalls_mcp_server_reads_a_public_site_and_says_why_a_private_one_refuses(sites):
    from mcp import Client

    public, private = sites
    _, sentence = private.api_refusal()

    async def run():
        async with Client(_stdio(public.folder, "--server", public.base)) as client:
            found = await client.call_tool("match_traceback", {"text": OOM})
        async with Client(_stdio(public.folder, "--server", private.base)) as client:
            refused = await client.call_tool("match_traceback", {"text": OOM})
        return found, refused

    found, refused = anyio.run(run)
    assert not found.is_error and found.structured_content["known"]
    first = found.structured_content["matches"][0]
    assert first["url"] == f"{public.base}/entries/{first['id']}"
    assert refused.is_error
    assert refused.content[0].text.endswith(f"the server answered 401: {sentence}")


@pytest.mark.e2e
def test_mcp_over_http_on_a_public_site_answers_anyone_as_the_api_does(sites):
    from mcp_types.version import LATEST_HANDSHAKE_VERSION

    public, _ = sites
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    accept = {"Accept": "application/json, text/event-stream"}
    assert _post(public.base + "/mcp", listing, accept)[0] == 200
    bad = {"Authorization": "Bearer wrong"}
    api_status, api_sentence = public.api_refusal(bad)
    status, body, headers = _post(public.base + "/mcp", listing, {**accept, **bad})
    assert (status, body["error"]["message"]) == (api_status, api_sentence) == (
        401, "The token is unknown, expired or revoked.",
    )  # fmt: skip
    assert "Bearer" in headers["www-authenticate"]
    _, api_answer, _ = _post(public.base + "/api/v1/match", {"text": OOM})

    async def run():
        from mcp import Client

        async with _http(public.base) as client:  # no token at all
            out = await _session_calls(client)
        # A client of the handshake revisions (2025-11-25) gets the same typed answer.
        async with Client(public.base + "/mcp", mode="legacy") as client:
            legacy = (
                client.protocol_version,
                await client.call_tool("match_traceback", {"text": OOM}),
            )
        return out, legacy, await _refused(_http(public.base, "wrong"))

    out, (version, legacy), refused = anyio.run(run)
    _assert_concise_and_linked(out, api_answer, public.base)  # the request's own address
    assert refused == api_sentence  # what the official client shows
    assert version == LATEST_HANDSHAKE_VERSION
    assert [m["id"] for m in legacy.structured_content["matches"]] == [
        m["id"] for m in out["match"]["matches"]
    ]
    assert [c.type for c in legacy.content] == [c.type for c in out["match_result"].content]


@pytest.mark.e2e
def test_mcp_over_http_on_a_private_site_refuses_as_the_api_does(sites):
    from sqlmodel import Session

    from app.accounts import CLI, add_user, create_token, disable_user, user_principal
    from app.settings import Settings
    from app.storage import create_db_engine

    _, private = sites
    reader = write_token(private.folder, {"PITFALLS_PUBLIC_READ": "false"}, scope="read")
    data = private.folder / "data"
    settings = Settings(_env_file=None, data_dir=data, database_url=f"sqlite:///{data}/pitfalls.db")
    engine = create_db_engine(settings)
    with Session(engine) as session:
        bob = add_user(session, name="bob", role="editor", password="a long password", actor=CLI)
        session.commit()
        _, disabled = create_token(
            session, name="bob-bot", scope="write", expires_in=None, owner=user_principal(bob)
        )
        session.commit()
        disable_user(session, name="bob", actor=CLI)
        session.commit()
    engine.dispose()

    anonymous_api = private.api_refusal()
    disabled_api = private.api_refusal({"Authorization": f"Bearer {disabled}"})
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    accept = {"Accept": "application/json, text/event-stream"}
    raw_anonymous = _post(private.base + "/mcp", listing, accept)
    raw_disabled = _post(
        private.base + "/mcp", listing, {**accept, "Authorization": f"Bearer {disabled}"}
    )

    async def run():
        anonymous = await _refused(_http(private.base))
        refused = await _refused(_http(private.base, disabled))
        async with _http(private.base, reader) as client:
            answer = (await client.call_tool("match_traceback", {"text": OOM})).structured_content
            # A read token may report, as it may through the API, with the answer's token.
            taken = await client.call_tool(
                "report_outcome",
                {
                    "fingerprint": answer["fingerprint"],
                    "id": answer["matches"][0]["id"],
                    "worked": False,
                    "answer_token": answer["answer_token"],
                },
            )
            forged = await client.call_tool(
                "report_outcome",
                {
                    "fingerprint": answer["fingerprint"],
                    "id": answer["matches"][0]["id"],
                    "worked": False,
                    "answer_token": "made-up",
                },
            )
        return anonymous, refused, answer, taken, forged

    anonymous, refused, answer, taken, forged = anyio.run(run)
    assert anonymous_api[0] == 401 and anonymous == anonymous_api[1]
    assert "Authorization: Bearer" in anonymous
    assert disabled_api[0] == 403 and refused == disabled_api[1]
    assert "'bob' that owns this token is disabled" in refused
    assert raw_anonymous[0] == 401 and raw_anonymous[2]["www-authenticate"] == "Bearer"
    assert raw_disabled[0] == 403 and raw_disabled[1]["error"]["data"] == {"status": 403}
    assert answer["known"] and not taken.is_error, taken.content[0].text
    assert forged.is_error and "answer_token is not one this server issued" in (
        forged.content[0].text
    )


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


# ---- /mcp is built after the app is ready --------------------------------------------------


@pytest.mark.slow  # starts a real process
def test_the_web_app_imports_the_mcp_sdk_only_once_it_serves(make_settings, content_dir):
    import subprocess
    import sys

    probe = "import sys, app.web; print(sorted(m for m in sys.modules if m.split('.')[0] == 'mcp'))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    # Once it serves, /mcp answers (the first request waits for the build, briefly).
    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    with _mcp_app(make_settings, content_dir) as client:
        listed = client.post("/mcp", json=listing, headers=ACCEPT)
        health = client.get("/api/v1/health")
    assert listed.status_code == 200, listed.text
    assert "match_traceback" in {tool["name"] for tool in listed.json()["result"]["tools"]}
    assert health.status_code == 200


@pytest.mark.slow  # waits on a slow build on purpose: the full suite runs it
def test_mcp_still_starting_or_broken_answers_503_without_hanging(
    make_settings, content_dir, monkeypatch
):
    import time

    from app.web import mcp_loading

    listing = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    real_build = mcp_loading.LazyMcp._build

    def slow_build(self):
        time.sleep(1.5)
        return real_build(self)

    monkeypatch.setattr(mcp_loading, "LOAD_WAIT_S", 0.2)
    monkeypatch.setattr(mcp_loading.LazyMcp, "_build", slow_build)
    with _mcp_app(make_settings, content_dir) as client:
        started = time.monotonic()
        early = client.post("/mcp", json=listing, headers=ACCEPT)
        waited = time.monotonic() - started
        time.sleep(2)
        later = client.post("/mcp", json=listing, headers=ACCEPT)
    assert early.status_code == 503 and early.headers["retry-after"] == "5"
    assert early.json()["error"]["message"] == mcp_loading.STILL_STARTING
    assert waited < 1.2
    assert later.status_code == 200, later.text

    def broken_build(self):
        raise ImportError("no MCP SDK here")

    monkeypatch.setattr(mcp_loading.LazyMcp, "_build", broken_build)
    with _mcp_app(make_settings, content_dir) as client:
        refused = client.post("/mcp", json=listing, headers=ACCEPT)
        health = client.get("/api/v1/health")
    assert refused.status_code == 503
    assert refused.json()["error"]["message"] == mcp_loading.UNAVAILABLE
    assert health.status_code == 200  # the rest of the site is unaffected
