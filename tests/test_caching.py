"""Readers' pages and JSON kept in memory under the content mark: ETags, 304s, and nothing stale
after a write, an outcome report or a new entry; the answer's parts kept per revision."""

import dataclasses
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session

from app import storage
from app.accounts import CLI, create_token
from app.answers import entry_parts
from app.matching import SignatureMatcher
from app.matching.paste_matcher import PasteMatcher
from app.tracebacks import parse_traceback
from app.web.middleware.caching import Kept, ResponseCache
from tests.conftest import entry_text

pytestmark = pytest.mark.both_databases

READER_URLS = [
    "/",
    "/search?q=failure",
    "/tags/tensor",
    "/entries/first-entry",
    "/api/v1/search?q=failure",
    "/api/v1/overview",
    "/api/v1/tags/tensor",
    "/api/v1/entries/first-entry",
]


class Site:
    def __init__(self, client: TestClient) -> None:
        self.app = client.app
        with Session(client.app.state.runtime.engine) as session:
            _, self.token = create_token(
                session, name="ci-bot", scope="write", expires_in=None, owner=CLI
            )
            session.commit()
        self.writer = {"Authorization": f"Bearer {self.token}"}

    def anonymous(self) -> TestClient:
        return TestClient(self.app)

    def cache(self) -> ResponseCache:
        return self.layer().cache

    def layer(self):
        layer = self.app.middleware_stack
        while not hasattr(layer, "cache"):
            layer = layer.app
        return layer


def _make_site(make_settings, content_dir: Path, **settings) -> Iterator[Site]:
    for entry_id in ("first-entry", "second-entry"):
        (content_dir / f"{entry_id}.md").write_text(entry_text(entry_id), encoding="utf-8")
    from app.web import create_app

    with TestClient(create_app(make_settings(content_dir, **settings))) as client:
        yield Site(client)


@pytest.fixture
def site(make_settings, content_dir: Path) -> Iterator[Site]:
    yield from _make_site(make_settings, content_dir)


def test_reader_pages_and_json_carry_an_etag_and_answer_304(site: Site):
    client = site.anonymous()
    for url in READER_URLS:
        first = client.get(url)
        assert first.status_code == 200, url
        etag = first.headers["etag"]
        again = client.get(url)
        assert again.text == first.text and again.headers["etag"] == etag, url
        assert again.headers["content-security-policy"], url  # kept with the security headers
        assert again.headers["x-request-id"] != first.headers["x-request-id"], url
        unchanged = client.get(url, headers={"If-None-Match": etag})
        assert unchanged.status_code == 304 and unchanged.content == b"", url
        assert unchanged.headers["etag"] == etag, url
        other = client.get(url, headers={"If-None-Match": 'W/"something-else"'})
        assert other.status_code == 200 and other.text == first.text, url
    # The entry's JSON keeps its revision as ETag: If-Match compares it strongly.
    assert client.get("/api/v1/entries/first-entry").headers["etag"] == '"1"'
    assert site.cache().hits >= len(READER_URLS)


def _edited(text: str) -> str:
    return text.replace("Because.", "Because the second revision says so.")


def test_an_edit_gives_the_new_text_and_a_new_etag_and_the_old_one_gets_200(site: Site):
    client = site.anonymous()
    page, twin = client.get("/entries/first-entry"), client.get("/api/v1/entries/first-entry")
    assert "second revision" not in page.text
    markdown = twin.json()["markdown"]
    saved = client.put(
        "/api/v1/entries/first-entry",
        json={"markdown": _edited(markdown), "message": "say why"},
        headers={**site.writer, "If-Match": twin.headers["etag"]},
    )
    assert saved.status_code == 200, saved.text
    for url, old in (("/entries/first-entry", page), ("/api/v1/entries/first-entry", twin)):
        fresh = client.get(url, headers={"If-None-Match": old.headers["etag"]})
        assert fresh.status_code == 200, url
        assert "second revision says so" in fresh.text, url
        assert fresh.headers["etag"] != old.headers["etag"], url
        assert client.get(url, headers={"If-None-Match": fresh.headers["etag"]}).status_code == 304
    assert client.get("/api/v1/entries/first-entry").headers["etag"] == '"2"'


def test_a_new_entry_is_found_at_once_by_a_search_that_was_kept(site: Site):
    client = site.anonymous()
    before = client.get("/api/v1/search?q=zebrafish")
    assert before.json()["total"] == 0
    assert client.get("/api/v1/search?q=zebrafish").json()["total"] == 0  # now kept
    body = (
        "## What you see\n\nA zebrafish error.\n\n## Why it happens\n\nBecause.\n\n## Fix\n\nDo.\n"
    )
    created = client.post(
        "/api/v1/entries",
        json={"markdown": entry_text("third-entry", body=body), "message": "new"},
        headers=site.writer,
    )
    assert created.status_code == 201, created.text
    after = client.get(
        "/api/v1/search?q=zebrafish", headers={"If-None-Match": before.headers["etag"]}
    )
    assert after.status_code == 200 and after.json()["total"] == 1
    assert (
        "third-entry" in client.get("/").text or client.get("/api/v1/overview").status_code == 200
    )


def test_an_outcome_report_shows_on_the_kept_entry_page_at_once(site: Site):
    client = site.anonymous()
    page = client.get("/entries/first-entry")
    twin = client.get("/api/v1/entries/first-entry").json()
    assert twin["outcomes"]["reports"] == 0
    answer = client.post(
        "/api/v1/match", json={"text": "RuntimeError: failure in first-entry number 3"}
    )
    fingerprint, token = answer.json()["fingerprint"], answer.json()["answer_token"]
    report = {
        "fingerprint": fingerprint,
        "id": "first-entry",
        "worked": True,
        "answer_token": token,
    }
    assert client.post("/api/v1/outcomes", json=report, headers=site.writer).status_code == 200
    fresh = client.get("/entries/first-entry", headers={"If-None-Match": page.headers["etag"]})
    assert fresh.status_code == 200 and "Fixed it for 1 of 1" in fresh.text
    assert client.get("/api/v1/entries/first-entry").json()["outcomes"]["reports"] == 1
    # A report replaced by the same voter moves the mark too (its time is the newest).
    report["worked"] = False
    assert client.post("/api/v1/outcomes", json=report, headers=site.writer).status_code == 200
    assert "Fixed it for 0 of 1" in client.get("/entries/first-entry").text


def test_signed_in_callers_and_pages_that_set_a_cookie_are_never_kept(site: Site):
    client = site.anonymous()
    cache = site.cache()
    client.get("/entries/first-entry")
    kept = len(cache)
    with_token = client.get("/entries/first-entry", headers=site.writer)
    assert with_token.status_code == 200 and "etag" not in with_token.headers
    cookie = client.get("/entries/first-entry", headers={"Cookie": "pitfalls_session=x"})
    assert cookie.status_code == 200 and "etag" not in cookie.headers
    # An entry page opened from an answer holds the outcome form, whose CSRF token starts a
    # session: that answer carries a cookie and is not kept (each visitor gets a token of its own).
    url = "/entries/first-entry?error=0123456789abcdef&answer=the-answers-token"
    first, second = site.anonymous().get(url), site.anonymous().get(url)
    assert "set-cookie" in first.headers and "set-cookie" in second.headers
    assert first.cookies["pitfalls_session"] != second.cookies["pitfalls_session"]
    assert len(cache) == kept
    assert client.get("/entries/no-such-entry").status_code == 404
    assert len(cache) == kept  # only 200s are kept


@pytest.fixture
def private_site(make_settings, content_dir: Path) -> Iterator[Site]:
    yield from _make_site(make_settings, content_dir, public_read=False)


def test_a_private_site_never_serves_a_kept_page_to_anonymous_visitors(private_site: Site):
    client = private_site.anonymous()
    for url in ("/api/v1/entries/first-entry", "/api/v1/search?q=failure"):
        assert client.get(url).status_code == 401
        reader = client.get(url, headers=private_site.writer)
        assert reader.status_code == 200
        assert client.get(url).status_code == 401
    assert len(private_site.cache()) == 0


def _kept(size: int) -> Kept:
    return Kept(200, [], b"x" * size, b'"e"')


def test_the_response_cache_is_bounded_by_count_and_by_bytes():
    cache = ResponseCache(max_entries=3, max_bytes=8000)
    for n in range(5):
        cache.put(("k", n), _kept(10))
    assert len(cache) == 3 and cache.get(("k", 0)) is None and cache.get(("k", 4)) is not None
    cache.get(("k", 2))  # used: the least recently used one goes first
    cache.put(("k", 5), _kept(10))
    assert cache.get(("k", 2)) is not None and cache.get(("k", 3)) is None
    cache.put(("big", 0), _kept(900))
    cache.put(("big", 1), _kept(900))
    assert cache.bytes <= 8000
    cache.put(("huge", 0), _kept(5000))  # larger than an eighth of the budget: not kept
    assert cache.get(("huge", 0)) is None and cache.bytes <= 8000


def test_the_answer_renders_an_entrys_fix_once_per_revision(site: Site):
    client = site.anonymous()
    paste = {"text": "RuntimeError: failure in first-entry number 3"}
    first = client.post("/api/v1/match", json=paste).json()["matches"][0]
    assert "fixed" in first["fix_html"] and first["snippets"][0]["code"] == "print('fixed')\n"
    with Session(site.app.state.runtime.engine) as session:
        entry = storage.get_entry(session, "first-entry")
        assert entry_parts.get(session, entry) is entry_parts.get(session, entry)  # kept
    twin = client.get("/api/v1/entries/first-entry")
    edited = twin.json()["markdown"].replace("print('fixed')", "print('fixed again')")
    saved = client.put(
        "/api/v1/entries/first-entry",
        json={"markdown": edited, "message": "a better fix"},
        headers={**site.writer, "If-Match": twin.headers["etag"]},
    )
    assert saved.status_code == 200, saved.text
    second = client.post("/api/v1/match", json=paste).json()["matches"][0]
    assert "fixed again" in second["fix_html"]
    assert second["snippets"][0]["code"] == "print('fixed again')\n"


def test_the_same_paste_is_answered_from_memory_until_the_content_moves(site: Site):
    client = site.anonymous()
    paste = {"text": "RuntimeError: failure in first-entry number 3"}
    first = client.post("/api/v1/match", json=paste)
    answers = site.app.state.runtime.answers
    (kept,) = answers._items.values()
    assert client.post("/api/v1/match", json=paste).content == kept.json() == first.content
    assert len(answers) == 1 and next(iter(answers._items.values())) is kept
    # A report that the fix worked is part of the answer: the next answer counts it.
    fingerprint, token = first.json()["fingerprint"], first.json()["answer_token"]
    reported = client.post(
        "/api/v1/outcomes",
        json={
            "fingerprint": fingerprint,
            "id": "first-entry",
            "worked": True,
            "answer_token": token,
        },
        headers=site.writer,
    )
    assert reported.status_code in (200, 201), reported.text
    again = client.post("/api/v1/match", json=paste).json()
    assert again["matches"][0] != first.json()["matches"][0] and len(answers) == 2


# ---- a save recompiles only what changed -----------------------------------------------------


def _examples(records) -> list[str]:
    return [r.example for r in records]


def test_a_matcher_built_beside_another_reuses_its_sets_and_matches_as_a_fresh_one(real_client):
    with Session(real_client.app.state.runtime.engine) as session:
        records = storage.active_signature_records(session)
    base = SignatureMatcher(records, chunk_size=40, reuse=False)
    changed = [
        dataclasses.replace(records[3], message=records[3].message + " and more"),
        *records[5:],
        dataclasses.replace(records[0], entry_id="a-new-entry", position=0, message="brand new"),
    ]
    reused = SignatureMatcher(changed, chunk_size=40)
    fresh = SignatureMatcher(changed, chunk_size=40, reuse=False)
    # Only the changed and the new signature were compiled; a set that held the old version of
    # the changed one (or the dropped ones) is reused with those slots dead.
    compiled_here = [c for c in reused._chunks if c.records[0] in changed[-1:] + changed[:1]]
    assert sum(len(c.records) for c in compiled_here) == 2
    assert len(base._chunks) > 1
    assert reused.records == fresh.records
    texts = [
        *_examples(records),
        *_examples(changed),
        "RuntimeError: brand new",
        " ".join(_examples(records)),
    ]
    for text in texts:
        assert reused.candidates(text) == fresh.candidates(text)
        assert reused.match_exception_line(text) == fresh.match_exception_line(text)
    gone = records[1]  # dropped: its pattern stays in a reused set, but never matches
    assert all(h.signature != gone for h in reused.match_exception_line(gone.example))


def test_after_a_save_the_process_matcher_is_what_a_full_rebuild_gives(site: Site):
    client = site.anonymous()
    matchers = site.app.state.runtime.matchers
    before = matchers.current()
    twin = client.get("/api/v1/entries/first-entry")
    edited = (
        twin.json()["markdown"]
        .replace("number (?P<n>", "count (?P<n>")
        .replace("number 42", "count 42")
    )
    saved = client.put(
        "/api/v1/entries/first-entry",
        json={"markdown": edited, "message": "the message says count now"},
        headers={**site.writer, "If-Match": twin.headers["etag"]},
    )
    assert saved.status_code == 200, saved.text
    after = matchers.current()
    assert after is not before
    with Session(site.app.state.runtime.engine) as session:
        records = storage.active_signature_records(session)
        texts = storage.active_entry_texts(session)
    full = PasteMatcher(SignatureMatcher(records, reuse=False), texts)
    assert after.signatures.records == full.signatures.records
    pastes = [
        "RuntimeError: failure in first-entry count 7",
        "RuntimeError: failure in first-entry number 7",
        "RuntimeError: failure in second-entry number 7",
        "an error about a sample pitfall view failure in second entry",
    ]
    for paste in pastes:
        parsed = parse_traceback(paste)
        ours, theirs = after.match(parsed), full.match(parsed)
        assert ours.matches == theirs.matches, paste
        assert [c.entry_id for c in ours.candidates] == [c.entry_id for c in theirs.candidates]
    assert after.match(parse_traceback(pastes[0])).matches[0].entry_id == "first-entry"
    assert not after.match(parse_traceback(pastes[1])).matches
    # The unchanged entry's set was reused, not compiled again.
    assert {id(c.set) for c in before.signatures._chunks} & {
        id(c.set) for c in after.signatures._chunks
    } or len(before.signatures._chunks) == 1


def test_kept_pages_cost_no_query_yet_a_write_elsewhere_shows_within_the_interval(site: Site):
    client = site.anonymous()
    marks = site.app.state.runtime.marks
    client.get("/api/v1/search?q=failure")
    reads, started = marks.reads, time.monotonic()
    for _ in range(20):
        assert client.get("/api/v1/search?q=failure").status_code == 200
    # One read of the marks per interval at most, however long a busy machine made the 20
    # requests take; never one a request (20).
    intervals = (time.monotonic() - started) / marks.interval_s
    assert marks.reads - reads <= 1 + intervals, (marks.reads - reads, intervals)
    # Another process writes: no commit here, the feed moves underneath. Within the interval
    # the kept answer may still be served; after it, the page is rendered again.
    kept = client.get("/api/v1/overview")
    engine = site.app.state.runtime.engine
    with engine.begin() as connection:
        connection.exec_driver_sql(
            "INSERT INTO outcome (fingerprint, entry_id, worked, note, voter, created_at) "
            "VALUES ('f', 'first-entry', true, '', 'elsewhere', CURRENT_TIMESTAMP)"
        )
    time.sleep(marks.interval_s * 1.5)
    assert client.get("/api/v1/overview").headers["etag"] != kept.headers["etag"]


# ---- a repeated paste is answered before the routes ----------------------------------------


class _Inner:
    """The rest of the app, as the shortcut sees it: records what reaches it and answers 418
    with the body it read, so a test can tell a pass-through (and its replayed body) apart."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []

    async def __call__(self, scope, receive, send) -> None:
        body, more = b"", True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        self.bodies.append(body)
        await send({"type": "http.response.start", "status": 418, "headers": []})
        await send({"type": "http.response.body", "body": body})


def _post(app, shortcut, body: bytes, chunk: int = 1 << 20, headers=()) -> tuple[int, bytes]:
    import anyio

    scope = {
        "type": "http",
        "method": "POST",
        "path": "/api/v1/match",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), *headers],
        "app": app,
    }
    parts = [body[i : i + chunk] for i in range(0, len(body), chunk)] or [b""]
    messages = [
        {"type": "http.request", "body": p, "more_body": i < len(parts) - 1}
        for i, p in enumerate(parts)
    ]
    sent: list[dict] = []

    async def receive():
        return messages.pop(0)

    async def send(message):
        sent.append(message)

    anyio.run(shortcut, scope, receive, send)
    return sent[0]["status"], b"".join(m.get("body", b"") for m in sent[1:])


def test_a_paste_answered_before_is_answered_without_the_routes(site: Site):
    from app.web.middleware.paste_shortcut import PasteShortcut

    body = b'{"text": "RuntimeError: failure in first-entry number 3"}'
    first = site.anonymous().post(
        "/api/v1/match", content=body, headers={"Content-Type": "application/json"}
    )
    assert first.status_code == 200
    inner = _Inner()
    shortcut = PasteShortcut(inner)
    layer = site.app.middleware_stack
    while not isinstance(layer, PasteShortcut):
        layer = layer.app
    assert layer._route is not None  # learnt on the first paste, which went to the route
    shortcut._route = layer._route
    status, answer = _post(site.app, shortcut, body)
    assert (status, answer) == (200, first.content) and inner.bodies == []
    # Through the whole app as well: the same bytes, with the security headers.
    again = site.anonymous().post(
        "/api/v1/match", content=body, headers={"Content-Type": "application/json"}
    )
    assert again.content == first.content and "nosniff" in again.headers["x-content-type-options"]
    # Anything else reaches the route with its body intact, even sent in pieces.
    other = b'{"text": "RuntimeError: failure in second-entry number 9"}'
    assert _post(site.app, shortcut, other, chunk=7) == (418, other)
    assert _post(site.app, shortcut, b"{not json", chunk=3) == (418, b"{not json")
    token = [(b"authorization", f"Bearer {site.token}".encode())]
    assert _post(site.app, shortcut, body, headers=token) == (418, body)
    huge = b'{"text": "' + b"x" * (8 * site.app.state.runtime.settings.max_paste_bytes) + b'"}'
    status, echoed = _post(site.app, shortcut, huge, chunk=65536)
    assert status == 418 and echoed == huge
    assert len(inner.bodies) == 4


def test_a_private_site_never_answers_a_kept_paste_to_anonymous_callers(private_site: Site):
    paste = {"text": "RuntimeError: failure in first-entry number 3"}
    client = private_site.anonymous()
    assert client.post("/api/v1/match", json=paste, headers=private_site.writer).status_code == 200
    assert len(private_site.app.state.runtime.answers) == 1
    assert client.post("/api/v1/match", json=paste).status_code == 401


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)  # counts work, not storage
def test_a_second_matcher_cache_in_one_process_reads_no_unchanged_entry_again(real_settings):
    """Each app builds its matcher at start; a second app in one process (hundreds in this
    suite) starts from the matcher built last and tokenizes only the entries that differ."""
    from app.answers import MatcherCache
    from app.storage import create_db_engine

    engine = create_db_engine(real_settings)
    try:
        first = MatcherCache(engine).current()
        second = MatcherCache(engine).current()
        assert second is not first
        assert second.likely.read_afresh == 0
        paste = parse_traceback("RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB")
        assert [m.entry_id for m in second.match(paste).matches] == [
            m.entry_id for m in first.match(paste).matches
        ]
    finally:
        engine.dispose()
