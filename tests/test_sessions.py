"""Sessions and logins under hostile use: copied cookies, guessing from many places, many workers.

Addresses are set with the test client's `client=` (what uvicorn puts there from a trusted
proxy's X-Forwarded-For, too).
"""

import asyncio
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session, select, update

from app import accounts
from app.accounts import (
    MAX_FAILURES_PER_ADDRESS,
    PAIR_FIRST_WAIT,
    PAIR_FREE_ATTEMPTS,
    TooManyAttempts,
    authenticate,
    pair_wait,
)
from app.models import LoginSession, LoginThrottle, utcnow
from app.storage import create_db_engine
from tests import test_wiki
from tests.test_wiki import PASSWORD, Wiki, csrf_of

pytestmark = pytest.mark.both_databases

wiki = test_wiki.wiki  # the fixture: an app over three entries, with users and tokens


def _client(wiki: Wiki, address: str) -> TestClient:
    return TestClient(wiki.app, client=(address, 40000))


def _login(client: TestClient, name: str, password: str = PASSWORD):
    token = csrf_of(client.get("/login").text)
    return client.post(
        "/login",
        data={"name": name, "password": password, "csrf_token": token, "next": "/"},
        follow_redirects=False,
    )


def _me(client: TestClient, **kwargs) -> dict:
    return client.get("/api/v1/me", **kwargs).json()


# ---- sessions ----------------------------------------------------------------------------------


def test_logout_ends_a_copied_cookie(wiki: Wiki):
    alice = wiki.login("alice")
    copied = dict(alice.cookies)
    thief = TestClient(wiki.app, cookies=copied)
    assert _me(thief)["name"] == "alice"  # the copy works while alice is logged in
    logout = alice.post(
        "/logout", data={"csrf_token": csrf_of(alice.get("/tokens").text)}, follow_redirects=False
    )
    assert logout.status_code == 303
    assert _me(alice)["authenticated"] is False
    again = TestClient(wiki.app, cookies=copied)
    assert _me(again)["authenticated"] is False
    assert again.get("/tokens", follow_redirects=False).status_code == 303  # to the login page
    with Session(wiki.engine) as session:
        assert session.exec(select(LoginSession)).all() == []


def test_each_login_is_its_own_session(wiki: Wiki):
    laptop, phone = wiki.login("alice"), wiki.login("alice")
    laptop.post("/logout", data={"csrf_token": csrf_of(laptop.get("/tokens").text)})
    assert _me(laptop)["authenticated"] is False
    assert _me(phone)["name"] == "alice"  # logging out on one device leaves the other alone


def test_an_expired_session_is_anonymous(wiki: Wiki):
    alice = wiki.login("alice")
    with Session(wiki.engine) as session:
        session.exec(update(LoginSession).values(expires_at=utcnow() - timedelta(seconds=1)))
        session.commit()
    assert _me(alice)["authenticated"] is False


def test_a_login_session_lasts_session_days(wiki: Wiki):
    wiki.login("alice")
    with Session(wiki.engine) as session:
        row = session.exec(select(LoginSession)).one()
    days = wiki.app.state.runtime.settings.session_days
    assert abs(row.expires_at - row.created_at - timedelta(days=days)) < timedelta(seconds=1)
    assert row.expires_at.tzinfo is not None  # UTC with its zone, on SQLite too


# ---- the Authorization header ------------------------------------------------------------------


def test_only_bearer_is_read_from_authorization(wiki: Wiki):
    basic = {"Authorization": "Basic YWxpY2U6c2VjcmV0"}  # what a proxy's login makes browsers send
    anonymous = wiki.anonymous()
    assert anonymous.get("/", headers=basic).status_code == 200
    assert anonymous.get("/api/v1/entries/first-entry", headers=basic).status_code == 200
    alice = wiki.login("alice")
    assert _me(alice, headers=basic)["name"] == "alice"  # the session still counts
    # ... and a Basic header does not stand in for the CSRF token, as a bearer token would.
    refused = alice.post("/api/v1/drafts/check", json={"markdown": "x"}, headers={**basic})
    assert refused.status_code == 403 and "CSRF" in refused.json()["error"]["message"]
    for bad in ("Bearer", "Bearer   ", "bearer nonsense"):
        assert anonymous.get("/api/v1/me", headers={"Authorization": bad}).status_code == 401
    ok = anonymous.get("/api/v1/me", headers={"Authorization": f"bearer {wiki.tokens['ci-bot']}"})
    assert ok.json()["name"] == "token:ci-bot"


# ---- throttling --------------------------------------------------------------------------------


@pytest.mark.slow  # many real argon2 logins: the full suite runs it
def test_a_guesser_elsewhere_does_not_lock_out_the_real_user(wiki: Wiki):
    attacker = _client(wiki, "203.0.113.7")
    for _ in range(PAIR_FREE_ATTEMPTS):
        assert _login(attacker, "bob", "wrong password").status_code == 401
    blocked = _login(attacker, "bob", "wrong password")
    assert blocked.status_code == 429 and int(blocked.headers["retry-after"]) > 0
    assert _login(attacker, "bob").status_code == 429  # not even the right password, from there
    bob = _client(wiki, "198.51.100.2")
    assert _login(bob, "bob").status_code == 303
    assert _me(bob)["name"] == "bob"
    # The real user's success does not clear the guesser's wait.
    assert _login(attacker, "bob").status_code == 429


@pytest.mark.slow  # many real argon2 logins: the full suite runs it
def test_an_address_guessing_many_names_is_capped(wiki: Wiki):
    attacker = _client(wiki, "203.0.113.8")
    names = [f"user{i}" for i in range(MAX_FAILURES_PER_ADDRESS)]
    for name in names:
        assert _login(attacker, name, "wrong password").status_code == 401
    assert _login(attacker, "alice").status_code == 429  # any name, once the address is capped
    assert _login(_client(wiki, "198.51.100.3"), "alice").status_code == 303


@pytest.mark.slow  # a dozen real argon2 logins: the full suite runs it
def test_successes_give_their_attempt_back(wiki: Wiki):
    """An office behind one address logs in all day without reaching the address cap."""
    office = "192.0.2.50"
    for _ in range(MAX_FAILURES_PER_ADDRESS + 5):
        assert _login(_client(wiki, office), "rita").status_code == 303


@pytest.mark.slow  # many real argon2 logins: the full suite runs it
def test_the_wait_doubles_per_pair(engine_with_users):
    engine, now = engine_with_users, utcnow()
    for _ in range(PAIR_FREE_ATTEMPTS):
        assert authenticate(engine, name="ann", password="wrong!!!", address="a", now=now) is None
    with pytest.raises(TooManyAttempts) as first:
        authenticate(engine, name="ann", password="wrong!!!", address="a", now=now)
    assert first.value.retry_after == PAIR_FIRST_WAIT.total_seconds()
    later = now + PAIR_FIRST_WAIT
    assert authenticate(engine, name="ann", password="wrong!!!", address="a", now=later) is None
    with pytest.raises(TooManyAttempts) as second:
        authenticate(engine, name="ann", password=PASSWORD, address="a", now=later)
    assert second.value.retry_after == 2 * PAIR_FIRST_WAIT.total_seconds()
    assert pair_wait(PAIR_FREE_ATTEMPTS + 30) == accounts.PAIR_LONGEST_WAIT
    # A day of quiet forgets the pair; a success clears it.
    next_day = later + accounts.PAIR_MEMORY
    assert authenticate(engine, name="ann", password=PASSWORD, address="a", now=next_day)
    with Session(engine) as session:
        pairs = session.exec(select(LoginThrottle).where(LoginThrottle.kind == "pair")).all()
    assert pairs == []


@pytest.mark.slow  # many real argon2 logins: the full suite runs it
def test_two_apps_on_one_database_share_the_count(make_settings, content_dir: Path):
    from app.web import create_app

    settings = make_settings(content_dir)
    with TestClient(create_app(settings)) as first, TestClient(create_app(settings)) as second:
        Wiki(first, content_dir)  # users, in the one database
        workers = [TestClient(app.app, client=("203.0.113.9", 1)) for app in (first, second)]
        for attempt in range(PAIR_FREE_ATTEMPTS):
            assert _login(workers[attempt % 2], "alice", "wrong password").status_code == 401
        assert _login(workers[0], "alice", "wrong password").status_code == 429
        assert _login(workers[1], "alice", "wrong password").status_code == 429


@pytest.mark.slow  # starts real processes
def test_concurrent_attempts_in_many_processes_get_no_extra_guesses(engine_with_users, settings):
    """Ten guesses at once through four engines (as four workers would): five are checked."""
    engines = [engine_with_users] + [create_db_engine(settings) for _ in range(3)]

    def guess(i: int) -> str:
        try:
            result = authenticate(
                engines[i % 4], name="ann", password=f"guess {i}!", address="203.0.113.10"
            )
        except TooManyAttempts:
            return "throttled"
        return "checked" if result is None else "in"

    try:
        with ThreadPoolExecutor(10) as pool:
            outcomes = list(pool.map(guess, range(10)))
    finally:
        for extra in engines[1:]:
            extra.dispose()
    assert outcomes.count("checked") == PAIR_FREE_ATTEMPTS, outcomes
    assert outcomes.count("throttled") == 10 - PAIR_FREE_ATTEMPTS


def test_argon2_never_runs_on_the_event_loop(wiki: Wiki, monkeypatch):
    """Logging in (verify) and adding a user (hash) run argon2 in a worker thread."""
    real = accounts.passwords._hasher
    calls: list[str] = []

    class Watched:
        def __getattr__(self, name):
            method = getattr(real, name)

            def watched(*args, **kwargs):
                try:
                    asyncio.get_running_loop()
                    calls.append(f"{name} on the event loop")
                except RuntimeError:
                    calls.append(f"{name} in a thread")
                return method(*args, **kwargs)

            return watched

    monkeypatch.setattr(accounts.passwords, "_hasher", Watched())
    ada = wiki.login("ada")
    page = ada.get("/admin").text
    added = ada.post(
        "/admin/users",
        data={"name": "carol", "role": "reader", "password": PASSWORD, "csrf_token": csrf_of(page)},
        follow_redirects=False,
    )
    assert added.status_code == 303
    assert any(c.startswith("verify") for c in calls) and any(c.startswith("hash") for c in calls)
    assert all(c.endswith("in a thread") for c in calls), calls


@pytest.fixture
def engine_with_users(engine):
    from app.accounts import CLI, add_user

    with Session(engine) as session:
        add_user(session, name="ann", role="editor", password=PASSWORD, actor=CLI)
        session.commit()
    return engine


# ---- what no database stores --------------------------------------------------------------------


def test_text_no_database_stores_is_refused_or_cleaned_never_a_500(wiki: Wiki):
    """A NUL, or a value longer than its column, is a 4xx with a sentence or is cleaned before
    it is stored: on PostgreSQL, which refuses both, as on SQLite, which would keep them."""
    client = TestClient(wiki.app, raise_server_exceptions=False)
    assert _login(client, "bo\x00b").status_code == 401
    assert _login(client, "x" * 5000).status_code == 401
    headers = wiki.bearer("ci-bot")
    nul = test_wiki.entry_text("nul-entry").replace("Because.", "Be\x00cause.")
    created = client.post(
        "/api/v1/entries", json={"markdown": nul, "message": "Add"}, headers=headers
    )
    assert created.status_code == 422 and "NUL" in created.text
    long_id = "a" * 101
    created = client.post(
        "/api/v1/entries",
        json={"markdown": test_wiki.entry_text(long_id), "message": "Add"},
        headers=headers,
    )
    assert created.status_code == 422 and "the database holds" in created.text
    current = client.get("/api/v1/entries/first-entry", headers=headers)
    edited = current.json()["markdown"].replace("One sentence", "Another sentence")
    saved = client.put(
        "/api/v1/entries/first-entry",
        json={"markdown": edited, "message": "fix\x00 the\x07 summary"},
        headers={**headers, "If-Match": current.headers["etag"]},
    )
    assert saved.status_code == 200, saved.text
    history = client.get("/api/v1/entries/first-entry/revisions", headers=headers).json()
    assert history[0]["message"] == "fix the summary"
