"""Two `pitfalls serve` replicas on one real PostgreSQL server, each with a data dir of its own,
and two `pitfalls serve` processes on one SQLite data dir (what `--workers 2` runs).

Started at the same moment on an empty database (the migrations and the first ingest race), a
write on one is searchable and matchable on the other within a second, concurrent edits with one
If-Match make exactly one revision, login throttling counts across both, and a replica killed with
SIGKILL during a write burst loses nothing and catches up when it comes back.
"""

import http.cookiejar
import json
import random
import re
import shutil
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import pytest

from bench.corpus import WORDS, sentence
from tests.conftest import (
    REPO_CONTENT,
    entry_text,
    get,
    pitfalls_command,
    running_server,
    running_servers,
    write_token,
)

pytestmark = pytest.mark.e2e


def _call(method: str, url: str, body: dict | None = None, headers: dict | None = None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read().decode(), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(), dict(error.headers)


def _entry(entry_id: str, word: str) -> str:
    return entry_text(
        entry_id,
        title=f"A {word} pitfall",
        signatures=(
            "signatures:\n"
            "  - exception: RuntimeError\n"
            f"    message: '{word} exploded at step (?P<n>\\d+)'\n"
            f"    example: 'RuntimeError: {word} exploded at step 7'\n"
        ),
    )


def _wait_until(predicate, timeout: float) -> float | None:
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        if predicate():
            return time.monotonic() - started
        time.sleep(0.02)
    return None


def _found(base: str, word: str, entry_id: str) -> bool:
    status, body = get(f"{base}/api/v1/search?q={word}")
    return status == 200 and any(h["id"] == entry_id for h in json.loads(body)["hits"])


def _matched(base: str, word: str, entry_id: str, tier: str | None = None) -> bool:
    status, body, _ = _call(
        "POST", f"{base}/api/v1/match", {"text": f"RuntimeError: {word} exploded at step 3"}
    )
    if status != 200:
        return False
    first = json.loads(body)["matches"][:1]
    return [m["id"] for m in first] == [entry_id] and (tier is None or first[0]["tier"] == tier)


class Browser:
    """A cookie jar and the CSRF token of the login form, against one replica."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar()),
            _NoRedirect(),
        )

    def login(self, name: str, password: str) -> int:
        page = self.opener.open(self.base + "/login", timeout=30).read().decode()
        token = re.search(r'name="csrf_token" value="([^"]+)"', page).group(1)
        form = urllib.parse.urlencode(
            {"name": name, "password": password, "csrf_token": token}
        ).encode()
        try:
            return self.opener.open(self.base + "/login", data=form, timeout=30).status
        except urllib.error.HTTPError as error:
            return error.code


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


@pytest.fixture
def replicas(request, tmp_path, postgres_server):
    with postgres_server.database() as url:
        # No PITFALLS_SECRET_KEY: the replicas share no data dir, so the session key they
        # agree on is the one stored in the database.
        settings = {"PITFALLS_DATABASE_URL": url, **getattr(request, "param", {})}
        folders = [tmp_path / "replica-a", tmp_path / "replica-b"]
        with running_servers(folders, settings=settings) as servers:
            yield servers, settings, url


# A timed check once a minute: within the test's waits, only the notification a commit sends
# (LISTEN/NOTIFY, followed by the other replica's feed follower) can make B see A's write.
NOTIFIED_ONLY = {"PITFALLS_INDEX_CHECK_INTERVAL_MS": "60000"}


@pytest.mark.parametrize("replicas", [NOTIFIED_ONLY], indirect=True)
def test_two_replicas_started_together_ingest_once_and_stay_consistent(replicas):
    (a, b), settings, _ = replicas
    for served in (a, b):  # both prepared the same database, one of them ingested it
        health = json.loads(get(served.base + "/api/v1/health")[1])
        assert health["status"] == "ok" and health["index"]["behind"] == 0
    entries = len(list(a.folder.glob("content/*.md")))
    status, body = get(a.base + "/api/v1/entries/cuda-oom-ctrl-c/revisions")
    assert status == 200 and len(json.loads(body)) == 1, "an entry was ingested twice"
    logs = a.log_path.read_text() + b.log_path.read_text()
    assert f"{entries} new" in logs and "0 new" in logs, logs[-2000:]

    token = {"Authorization": f"Bearer {write_token(a.folder, settings)}"}
    # A write on A is searchable and matchable on B long before B's timed check (a minute)
    # would find it: B was told. (Counted by mechanism, not by a wall-clock bound that a busy
    # machine breaks; the delays are in the message.)
    delays = []
    for n in range(3):
        word = f"zanzibar{n}quux"
        entry_id = f"replicated-{n}"
        status, body, _ = _call(
            "POST",
            f"{a.base}/api/v1/entries",
            {"markdown": _entry(entry_id, word), "message": "new"},
            token,
        )
        assert status == 201, body
        found = _wait_until(lambda w=word, e=entry_id: _found(b.base, w, e), 20)
        matched = _wait_until(lambda w=word, e=entry_id: _matched(b.base, w, e), 20)
        assert found is not None and matched is not None, (
            f"B did not see write {n} within 20 s (seen earlier: {delays})"
        )
        delays.append(round(max(found, matched), 3))

    # 20 concurrent edits of the same line with the same If-Match over both replicas: exactly
    # one wins (each edit is different, so the others overlap it and cannot merge).
    status, _, headers = _call("GET", f"{a.base}/api/v1/entries/replicated-0", headers=token)
    etag = headers["etag"]
    markdown = _entry("replicated-0", "zanzibar0quux")

    def put(n: int):
        base = (a, b)[n % 2].base
        edited = markdown.replace("One sentence", f"Edited sentence {n}")
        return _call(
            "PUT",
            f"{base}/api/v1/entries/replicated-0",
            {"markdown": edited, "message": f"edit {n}"},
            {**token, "If-Match": etag},
        )[0]

    with ThreadPoolExecutor(20) as pool:
        statuses = sorted(pool.map(put, range(20)))
    assert statuses == [200] + [412] * 19, statuses
    for served in (a, b):
        revisions = json.loads(get(f"{served.base}/api/v1/entries/replicated-0/revisions")[1])
        assert sorted(r["number"] for r in revisions) == [1, 2]

    # Login throttling is counted in the database: guesses spread over both replicas add up.
    subprocess.run(
        [pitfalls_command(), "user", "add", "bob", "--role", "editor", "--password-stdin"],
        input="a long enough password\n",
        cwd=a.folder,
        env=a.env,
        check=True,
        capture_output=True,
        text=True,
    )
    browser = Browser(a.base)
    assert browser.login("bob", "a long enough password") == 303
    me = json.loads(browser.opener.open(b.base + "/api/v1/me", timeout=30).read())
    assert me["authenticated"] and "bob" in me["name"], (
        "a login on one replica is unknown to the other"
    )
    guesses = [Browser(served.base).login("bob", "wrong guess") for served in (a, b) * 3]
    assert guesses[:5] == [401] * 5 and guesses[5] == 429, guesses
    assert Browser(a.base).login("bob", "a long enough password") == 429  # same address


def test_a_replica_killed_during_a_write_burst_loses_nothing(replicas):
    (a, b), settings, _ = replicas
    token = {"Authorization": f"Bearer {write_token(a.folder, settings)}"}
    accepted: list[str] = []
    failed_on_b: list[int] = []
    stop = threading.Event()

    def writer(served, prefix: str) -> None:
        n = 0
        while not stop.is_set():
            entry_id = f"burst-{prefix}-{n}"
            try:
                status, _, _ = _call(
                    "POST",
                    f"{served.base}/api/v1/entries",
                    {"markdown": _entry(entry_id, f"burstword{prefix}{n}"), "message": "burst"},
                    token,
                )
            except OSError:
                status = 0
            if status == 201:
                accepted.append(entry_id)
            elif served is b:
                failed_on_b.append(status)
            n += 1

    threads = [threading.Thread(target=writer, args=(s, p)) for s, p in ((a, "a"), (b, "b"))]
    for thread in threads:
        thread.start()
    time.sleep(1.5)
    a.process.send_signal(signal.SIGKILL)
    a.process.wait()
    health_during = [get(b.base + "/api/v1/health")[0] for _ in range(5)]
    time.sleep(1.5)
    stop.set()
    for thread in threads:
        thread.join()
    assert health_during == [200] * 5 and not failed_on_b, (health_during, failed_on_b)
    assert any(e.startswith("burst-a-") for e in accepted)
    assert any(e.startswith("burst-b-") for e in accepted)
    for entry_id in accepted:  # every write that was answered 201 is there
        assert get(f"{b.base}/api/v1/entries/{entry_id}")[0] == 200, entry_id

    a.start()  # the same data dir: its index is behind and must catch up
    a.wait_ready()
    last = accepted[-1]
    _, prefix, n = last.split("-")
    assert _wait_until(lambda: _found(a.base, f"burstword{prefix}{n}", last), 5) is not None
    assert json.loads(get(a.base + "/api/v1/health")[1])["index"]["behind"] == 0


# How long a write on one process may take to be matched and found on another: a bound on
# waiting (a process polls), far above the work it takes (a few ms at a few thousand entries).
FOLLOW_S = 1.0


def _follow_bound(b: str, prefix: str) -> float:
    """`FOLLOW_S`, plus ten times what asking B costs right now (the slowest of three asks,
    measured in this test): on an idle machine a few ms, on a loaded one what load adds to
    each poll and each question, so a busy machine does not turn a follow that works red."""
    asks = []
    for _ in range(3):
        started = time.monotonic()
        _matched(b, f"{prefix}nothing", f"{prefix}-none")
        _found(b, f"{prefix}nothing", f"{prefix}-none")
        asks.append(time.monotonic() - started)
    return FOLLOW_S + 10 * max(asks)


def _created_then_edited_is_followed(a: str, b: str, token: dict, prefix: str) -> list[float]:
    """Signatures created, then one edited, through A: each matched by its signature, the
    edited wording too and the old one no longer, and found by search, on B within `FOLLOW_S`.
    The paste is asked on B at once too, as a user who just saved would: an answer B made before
    it followed the write must not be the one it keeps. Returns the delays seen."""
    delays: list[float] = []
    bound = _follow_bound(b, prefix)
    for n, word in enumerate((f"{prefix}first", f"{prefix}second")):
        entry_id = f"{prefix}-{n}"
        status, body, _ = _call(
            "POST",
            f"{a}/api/v1/entries",
            {"markdown": _entry(entry_id, word), "message": "new"},
            token,
        )
        assert status == 201, body
        _matched(b, word, entry_id)
        seen = _wait_until(
            lambda w=word, e=entry_id: _matched(b, w, e, "signature") and _found(b, w, e),
            bound,
        )
        assert seen is not None, (
            f"B did not follow new signature {n} within {bound:.2f} s (before: {delays})"
        )
        delays.append(round(seen, 3))
    entry_id, old, word = f"{prefix}-0", f"{prefix}first", f"{prefix}edited"
    status, _, headers = _call("GET", f"{a}/api/v1/entries/{entry_id}", headers=token)
    status, body, _ = _call(
        "PUT",
        f"{a}/api/v1/entries/{entry_id}",
        {"markdown": _entry(entry_id, word), "message": "reworded"},
        {**token, "If-Match": headers["etag"]},
    )
    assert status == 200, body
    _matched(b, word, entry_id)
    seen = _wait_until(
        lambda: (
            _matched(b, word, entry_id, "signature")
            and not _matched(b, old, entry_id, "signature")
            and _found(b, word, entry_id)
        ),
        bound,
    )
    assert seen is not None, (
        f"B did not follow the edited signature (before: {delays}); now: new wording "
        f"{_matched(b, word, entry_id, 'signature')}, old {_matched(b, old, entry_id, 'signature')}"
        f", found {_found(b, word, entry_id)}"
    )
    return [*delays, round(seen, 3)]


def test_two_servers_on_one_sqlite_data_dir_match_each_others_new_and_edited_signatures(
    tmp_path,
):
    """What `pitfalls serve --workers 2` runs. (Once the other process kept an answer made by
    its matcher, still one change behind, under the new content mark, and never matched the
    first new signature; then it followed the file only at its timed check, once a second.)"""
    with running_server(tmp_path / "site") as (a, folder):  # noqa: SIM117  # B needs its folder
        with running_server(folder, fresh=False) as (b, _):
            token = {"Authorization": f"Bearer {write_token(folder, {})}"}
            _created_then_edited_is_followed(a, b, token, "quokka")


@pytest.mark.parametrize("replicas", [NOTIFIED_ONLY], indirect=True)
def test_two_replicas_match_each_others_new_and_edited_signatures(replicas):
    (a, b), settings, _ = replicas
    token = {"Authorization": f"Bearer {write_token(a.folder, settings)}"}
    _created_then_edited_is_followed(a.base, b.base, token, "wombat")


def _generated_entry(n: int, rng: random.Random) -> str:
    return entry_text(
        f"generated-{n:05d}",
        title=sentence(rng, 6, cjk=0, ident=0).rstrip("."),
        signatures=(
            "signatures:\n"
            "  - exception: RuntimeError\n"
            f"    message: 'generated failure {n:05d} in (?P<what>\\w+)'\n"
            f"    example: 'RuntimeError: generated failure {n:05d} in {rng.choice(WORDS)}'\n"
        ),
        body=f"## What you see\n\n{sentence(rng, 20)}\n\n## Fix\n\n{sentence(rng, 12)}\n",
    )


BIG = 2000


def test_at_two_thousand_entries_an_edit_on_one_process_is_matched_on_the_other_within_a_second(
    tmp_path,
):
    """The same at 2,000 entries (on SQLite, two processes): what a change costs a process that
    follows it is what the change is, not the size of the knowledge base."""
    folder = tmp_path / "big"
    shutil.copytree(REPO_CONTENT, folder / "content")
    rng = random.Random(30)
    for n in range(BIG):
        (folder / "content" / f"generated-{n:05d}.md").write_text(
            _generated_entry(n, rng), encoding="utf-8"
        )
    with running_server(folder, fresh=False, ready_s=600) as (a, _):  # noqa: SIM117
        with running_server(folder, fresh=False) as (b, _):
            token = {"Authorization": f"Bearer {write_token(folder, {})}"}
            _, body, _ = _call(
                "POST", f"{b}/api/v1/match", {"text": "RuntimeError: generated failure 01234 in x"}
            )
            assert [m["id"] for m in json.loads(body)["matches"]] == ["generated-01234"], body
            _created_then_edited_is_followed(a, b, token, "numbat")
