"""Bounded work and no 500s: the parser stays linear, budgets stop work, odd input gets a 4xx."""

import asyncio
import json
import logging
import time
import urllib.parse

import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from app.budget import Budget, BudgetExceeded
from app.settings import load_settings
from app.tracebacks import parse_traceback
from app.web.http import form_fields_of, unquote_form_value
from tests.conftest import REPO_CONTENT
from tests.prepared import prepare_data_dir


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    """One app over the repository's entries for the read-only tests of this module."""
    from app.web import create_app

    data = tmp_path_factory.mktemp("bounded")
    settings = load_settings(data_dir=data / "data", content_dir=REPO_CONTENT)
    prepare_data_dir(settings, tmp_path_factory)
    app = create_app(settings)
    with TestClient(app) as started:
        yield started


# Pieces of the parser's own patterns: repeating them is what made the old patterns backtrack.
PIECES = [
    'File "a.py", line 1, in f',
    " ",
    "<http://",
    "[W] Warning: ",
    " (function ",
    "[a](http://",
    "torch ",
    "torch.Size([",
    "[1,",
    "frame #0: ",
    " (0x1 in ",
    "a:1: ",
    "xWarning: ",
    "│",
    "╭",
    "Cell In[1], line 2",
    ", in ",
    "ValueError: ",
    "Exception raised from ",
    " at ",
    "\t",
    '"',
    "(",
    ")",
    "E   ",
    "[rank0]: ",
    "2024-01-01 00:00:00 ",
    "Traceback (most recent call last): ",
    'File "',
    "a.",
    "RuntimeError ",
]


def _parse_seconds(text: str) -> float:
    """CPU seconds of this thread, the best of three: another process busy on the same cores
    does not add to them, and noise only ever adds time."""
    best = float("inf")
    for _ in range(3):
        started = time.thread_time()
        parse_traceback(text)
        best = min(best, time.thread_time() - started)
    return best


@settings(
    max_examples=15,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
@given(
    prefix=st.sampled_from(
        [
            "",
            'File "a.py", line 1, in f',
            "ValueError: ",
            "[W] Warning: ",
            'Traceback (most recent call last): File "a.py", line 1, in f ',  # flattened
        ]
    ),
    unit=st.lists(st.sampled_from(PIECES), min_size=1, max_size=3).map("".join),
    suffix=st.sampled_from(["", "x", ")", "\n"]),
)
@example(prefix='File "a.py", line 1, in f', unit=" ", suffix="x")  # the audit's 22 s case
@example(prefix="", unit="<http://", suffix="")
@example(prefix="[W] Warning: ", unit="x (function ", suffix="")
@example(prefix="", unit="torch ", suffix="x")
@example(
    prefix='Traceback (most recent call last): File "a.py", line 1, in f ', unit="a.", suffix=""
)
@example(prefix="Traceback (most recent call last): ", unit='File "', suffix="")
def test_doubling_an_adversarial_line_doubles_the_parse_time(prefix, unit, suffix):
    repeat = max(1, 16_000 // len(unit))
    once = _parse_seconds(prefix + unit * repeat + suffix)
    twice = _parse_seconds(prefix + unit * (2 * repeat) + suffix)
    # Linear work doubles (2x); quadratic quadruples (4x). A floor keeps timer noise out.
    assert twice < 3.0 * max(once, 0.005), (prefix, unit, suffix, once, twice)


def test_a_budget_stops_the_parser_part_way():
    paste = "ValueError: \n[1,\n" * 100_000
    budget = Budget(0.02)
    started = time.thread_time()
    with pytest.raises(BudgetExceeded):
        budget.run(parse_traceback, paste)
    # The whole parse takes seconds; stopped at its 20 ms budget, it used a small part of that.
    assert time.thread_time() - started < 0.5


def test_without_a_budget_a_crafted_line_parses_at_once():
    started = time.thread_time()
    parsed = parse_traceback('  File "x.py", line 1, in f' + " " * 64_000 + "x\nValueError: boom")
    assert time.thread_time() - started < 0.5  # CPU time: a busy machine does not add to it
    assert parsed.final is not None and parsed.final.message == "boom"


@pytest.mark.slow  # a 55,000-line paste and its own app: the full suite runs it
def test_a_paste_past_its_budget_is_a_503_with_a_sentence(
    make_settings, repo_content, tmp_path_factory
):
    from app.web import create_app

    settings = make_settings(repo_content, match_budget_ms=50)
    prepare_data_dir(settings, tmp_path_factory)
    app = create_app(settings)
    with TestClient(app) as client:
        response = client.post(
            "/api/v1/match", content=("ValueError: \n[1,\n" * 55_000).encode(), headers={}
        )
        assert response.status_code == 503
        assert "took longer than the server allows (50 ms)" in response.json()["error"]["message"]
        assert client.post("/api/v1/match", content=b"RuntimeError: boom").status_code == 200


@pytest.mark.parametrize(
    ("method", "url", "body"),
    [
        ("GET", "/api/v1/search?page=9223372036854775808", None),
        ("GET", "/api/v1/search?limit=99999999999999999999999", None),
        ("GET", "/api/v1/changes?before=9223372036854775808", None),
        ("GET", "/api/v1/entries/cuda-out-of-memory/revisions/9223372036854775808", None),
        ("GET", "/entries/cuda-out-of-memory/revisions/99999999999999999999", None),
        ("GET", "/entries/cuda-out-of-memory/snippets/99999999999999999999.py", None),
        ("GET", "/search?q=x&page=9223372036854775808", None),
        ("POST", "/api/v1/match", "[" * 100_000 + "]" * 100_000),
        ("POST", "/api/v1/match", '{"text": ' + "[" * 50_000 + "]" * 50_000 + "}"),
    ],
)
def test_odd_input_gets_a_4xx_never_a_500(client, method, url, body):
    headers = {"Content-Type": "application/json"} if body else {}
    response = client.request(method, url, content=body, headers=headers)
    assert 400 <= response.status_code < 500, response.text[:300]


@pytest.mark.parametrize("query", ["NOT NOT cuda", '"out of memory"', "a* b* c*", "[a TO z]", ")("])
def test_a_query_whose_syntax_fails_is_searched_as_words(client, query):
    response = client.get("/api/v1/search", params={"q": query})
    assert response.status_code == 200, response.text[:300]


def test_a_lone_surrogate_in_a_paste_is_replaced_not_a_500(client):
    body = '{"text": "RuntimeError: CUDA out of memory. \\ud800 Tried to allocate 2.00 GiB"}'
    response = client.post(
        "/api/v1/match", content=body, headers={"Content-Type": "application/json"}
    )
    assert response.status_code == 200
    assert response.json()["known"]


def test_a_500_page_still_carries_the_security_headers(make_settings, content_dir):
    from app.web import create_app

    app = create_app(make_settings(content_dir))

    @app.get("/boom")
    def boom():
        raise RuntimeError("a bug")

    with TestClient(app, raise_server_exceptions=False) as client:
        response = client.get("/boom")
    assert response.status_code == 500
    assert "default-src 'self'" in response.headers["content-security-policy"]
    assert response.headers["x-frame-options"] == "DENY"


def test_a_client_that_leaves_mid_body_is_one_info_line(make_settings, content_dir, caplog):
    from app.web import create_app

    app = create_app(make_settings(content_dir))
    messages = [
        {"type": "http.request", "body": b'{"text": "Runtime', "more_body": True},
        {"type": "http.disconnect"},
    ]
    sent = []

    async def receive():
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/api/v1/match",
        "raw_path": b"/api/v1/match",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"host", b"test")],
        "client": ("127.0.0.1", 1234),
        "server": ("test", 80),
    }

    async def run():
        async with app.router.lifespan_context(app):
            await app(scope, receive, send)

    with caplog.at_level(logging.INFO, logger="pitfalls"):
        asyncio.run(run())
    records = [r for r in caplog.records if r.name == "pitfalls"]
    assert [r.levelno for r in records] == [logging.INFO], [r.getMessage() for r in records]
    assert "went away" in records[0].getMessage() and not records[0].exc_info
    assert json.dumps(sent[0]["status"]) == "499"


def test_a_lone_surrogate_in_an_entry_is_a_400_and_nothing_is_saved(
    make_settings, repo_content, tmp_path_factory
):
    from sqlmodel import Session

    from app import storage
    from app.accounts import CLI, create_token
    from app.storage import create_db_engine
    from app.web import create_app

    settings = make_settings(repo_content)
    prepare_data_dir(settings, tmp_path_factory)
    with TestClient(create_app(settings)) as client:
        engine = create_db_engine(settings)
        with Session(engine) as session:
            _, token = create_token(session, name="t", scope="write", expires_in=None, owner=CLI)
            session.commit()
        markdown = (repo_content / "view-non-contiguous.md").read_text(encoding="utf-8")
        markdown = markdown.replace("view-non-contiguous", "lone-surrogate")
        body = json.dumps({"markdown": markdown + "\n@@\n", "message": "x"})
        body = body.replace("@@", "\\ud800")  # JSON's escape for a lone surrogate
        headers = {"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
        for url in ("/api/v1/drafts/check", "/api/v1/entries"):
            response = client.post(url, content=body, headers=headers)
            assert response.status_code == 400, response.text[:300]
            assert "not valid Unicode" in response.json()["error"]["message"]
        with Session(engine) as session:
            assert storage.get_entry(session, "lone-surrogate") is None
        engine.dispose()


# ---- form bodies ---------------------------------------------------------------------------------

_FORM_ALPHABET = st.sampled_from([*"%+&=abcXYZ019fF\\x ", "%4", "%E4%B8%AD", "%zz", "%%"])


@given(st.text(max_size=200))
@settings(max_examples=300, deadline=None)
def test_a_form_value_decodes_as_the_standard_library_decodes_it(text):
    body = urllib.parse.urlencode({"text": text, "empty": ""}).encode()
    assert form_fields_of(body) == {"text": text, "empty": ""}


@given(st.lists(_FORM_ALPHABET, max_size=60).map("".join))
@settings(max_examples=500, deadline=None)
def test_any_ascii_form_body_reads_as_parse_qs_reads_it(body):
    expected = {k: v[0] for k, v in urllib.parse.parse_qs(body, keep_blank_values=True).items()}
    assert form_fields_of(body.encode()) == expected
    assert unquote_form_value(body.encode()) == urllib.parse.unquote_plus(body)


def test_a_retyped_message_after_a_long_word_is_matched_in_linear_time():
    """The case-ignoring pass looks for a retyped exception type just before its match; over a
    line of word characters that look-back must not start again from every position."""
    from app.checker import collect_entry_files, entry_texts, load_entry_files, signature_records
    from app.matching.paste_matcher import PasteMatcher

    docs = load_entry_files(collect_entry_files([REPO_CONTENT]))
    matcher = PasteMatcher.build(signature_records(docs), entry_texts(docs))

    def seconds(n: int) -> float:
        paste = "a" * n + ": CUDNN rnn Backward can only be called in Training Mode"
        best = float("inf")
        for _ in range(3):  # CPU seconds of this thread: other processes do not add to them
            started = time.thread_time()
            matcher.match(parse_traceback(paste))
            best = min(best, time.thread_time() - started)
        return best

    once, twice = seconds(8_000), seconds(16_000)
    assert twice < 3.0 * max(once, 0.005), (once, twice)


def test_start_up_objects_are_kept_out_of_the_collectors_full_passes(tmp_path, tmp_path_factory):
    """A full collection over everything start-up built took 130 ms, holding the GIL; frozen,
    they are not walked again, until the app shuts down."""
    import gc

    from app.web import create_app

    settings = load_settings(data_dir=tmp_path / "data", content_dir=REPO_CONTENT)
    prepare_data_dir(settings, tmp_path_factory)
    app = create_app(settings)
    with TestClient(app):
        assert gc.get_freeze_count() > 50_000
    assert gc.get_freeze_count() == 0
