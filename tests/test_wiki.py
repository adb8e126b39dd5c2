"""The team wiki through HTTP: who may write, CSRF, tokens, editing, conflicts, history, feeds.

A small content folder keeps each app quick to start; users and tokens are made with the same
functions the CLI calls.
"""

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from datetime import timedelta
from html import unescape
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session, func, select

from app.accounts import CLI, add_user, create_token, set_role
from app.drafts import TEMPLATE_PLACEHOLDERS
from app.models import AuditEvent, Change, Revision
from app.wiki import check_draft
from tests.conftest import entry_text

pytestmark = pytest.mark.both_databases

PASSWORD = "correct horse battery"
WRITE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
# Routes with a write method that do not write, and why they are open to anyone.
NOT_WRITES = {
    ("POST", "/match"): "explains a paste; nothing is stored",
    ("POST", "/api/v1/match"): "explains a paste; nothing is stored",
    ("POST", "/login"): "logging in is how one stops being anonymous",
    ("POST", "/logout"): "ends the caller's own session",
    ("POST", "/outcomes"): "anyone who may read says whether a fix worked (test_outcomes.py)",
    ("POST", "/api/v1/outcomes"): "the same report as JSON; anonymous ones are throttled",
    ("POST", "/mcp"): "MCP: the API's rights, by its check; a report needs the answer's token",
    ("DELETE", "/mcp"): "MCP: ends a session, and /mcp keeps none (stateless)",
}


class Wiki:
    """An app over a small content folder, with users and tokens of every kind."""

    def __init__(self, client: TestClient, content: Path) -> None:
        self.client = client
        self.content = content
        self.app = client.app
        self.engine = client.app.state.runtime.engine
        self.tokens: dict[str, str] = {}
        with Session(self.engine) as session:
            for name, role in [
                ("ada", "admin"),
                ("alice", "editor"),
                ("bob", "editor"),
                ("rita", "reader"),
            ]:
                add_user(session, name=name, role=role, password=PASSWORD, actor=CLI)
            session.commit()
            for name, scope in [("ci-bot", "write"), ("reader-bot", "read")]:
                _, self.tokens[name] = create_token(
                    session, name=name, scope=scope, expires_in=None, owner=CLI
                )
            session.commit()

    def anonymous(self) -> TestClient:
        return TestClient(self.app)

    def login(self, name: str) -> TestClient:
        client = TestClient(self.app)
        token = csrf_of(client.get("/login").text)
        response = client.post(
            "/login",
            data={"name": name, "password": PASSWORD, "csrf_token": token, "next": "/"},
            follow_redirects=False,
        )
        assert response.status_code == 303, response.text
        return client

    def bearer(self, token_name: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.tokens[token_name]}"}

    def writes_recorded(self) -> tuple[int, int, int]:
        with Session(self.engine) as session:
            changes = session.exec(select(func.count()).select_from(Change)).one()
            revisions = session.exec(select(func.count()).select_from(Revision)).one()
            audits = session.exec(
                select(func.count())
                .select_from(AuditEvent)
                .where(AuditEvent.action != "login.failed")
            ).one()
        return changes, revisions, audits


def csrf_of(html: str) -> str:
    return re.search(r'name="csrf_token" value="([^"]+)"', html).group(1)


def textarea(html: str, name: str) -> str:
    return unescape(re.search(rf'<textarea id="{name}"[^>]*>(.*?)</textarea>', html, re.S).group(1))


@pytest.fixture
def wiki(make_settings, content_dir: Path) -> Iterator[Wiki]:
    for entry_id in ("first-entry", "second-entry", "third-entry"):
        (content_dir / f"{entry_id}.md").write_text(entry_text(entry_id), encoding="utf-8")
    from app.web import create_app

    with TestClient(create_app(make_settings(content_dir))) as client:
        yield Wiki(client, content_dir)


def _edit_form(client: TestClient, entry_id: str) -> dict[str, str]:
    page = client.get(f"/entries/{entry_id}/edit")
    assert page.status_code == 200
    return {
        "markdown": textarea(page.text, "markdown"),
        "base_revision": re.search(r'name="base_revision" value="(\d+)"', page.text).group(1),
        "csrf_token": csrf_of(page.text),
        "message": "",
    }


def _write_routes(app) -> list[tuple[str, str]]:
    """(method, path) of every route with a write method, included routers flattened."""
    try:  # FastAPI 0.16x includes routers lazily; this walks them as the router does
        from fastapi.routing import iter_route_contexts

        routes = list(iter_route_contexts(app.routes))
    except ImportError:
        routes = app.routes
    return sorted(
        (method, route.path)
        for route in routes
        for method in (getattr(route, "methods", None) or set()) & WRITE_METHODS
    )


def _fill(path: str, token_id: int) -> str:
    values = {
        "entry_id": "first-entry",
        "number": "1",
        "token_id": str(token_id),
        "name": "rita",
        "hook_id": "1",
    }
    return re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: values[m.group(1)], path)  # {id:int} too


# ---- who may write -------------------------------------------------------------------------


def test_every_write_route_refuses_anonymous_callers_readers_and_read_tokens(wiki: Wiki):
    routes = _write_routes(wiki.app)
    assert set(NOT_WRITES) <= set(routes), "an allowed route no longer exists: update NOT_WRITES"
    guarded = [r for r in routes if r not in NOT_WRITES]
    assert len(guarded) >= 14  # entries, revisions, drafts, tokens, users: none forgotten
    before = wiki.writes_recorded()
    reader = wiki.login("rita")
    reader_csrf = csrf_of(reader.get("/tokens").text)
    body = {"markdown": entry_text("first-entry"), "message": "try", "role": "admin"}
    for method, path in guarded:
        url = _fill(path, token_id=1)
        anonymous = wiki.anonymous().request(method, url, json=body)
        assert anonymous.status_code == 401, (method, path, anonymous.status_code)
        read_token = wiki.anonymous().request(
            method, url, json=body, headers=wiki.bearer("reader-bot")
        )
        assert read_token.status_code == 403, (method, path, read_token.status_code)
        as_reader = reader.request(method, url, data={**body, "csrf_token": reader_csrf})
        if path.startswith("/tokens"):
            # Everyone signed in manages their own tokens; token 1 belongs to the CLI, not rita.
            assert as_reader.status_code in (200, 422), (method, path, as_reader.status_code)
            continue
        if path.startswith(("/account/", "/api/v1/me/")):
            # Everyone signed in changes their own password; this body holds no password.
            assert as_reader.status_code in (400, 422), (method, path, as_reader.status_code)
            continue
        assert as_reader.status_code == 403, (method, path, as_reader.status_code)
    after = wiki.writes_recorded()
    # Nothing reached an entry. Rita may use /tokens, but the body above has no token name (so
    # nothing is created) and token 1 is the CLI's, not hers (so revoking it is refused).
    assert after[:2] == before[:2]
    with Session(wiki.engine) as session:
        actions = session.exec(select(AuditEvent.action, AuditEvent.actor)).all()
    assert ("token.revoke", "rita") not in actions


def test_a_new_write_route_without_a_role_check_is_caught(wiki: Wiki):
    """The route-table test is not vacuous: an unguarded route shows up in it and fails."""

    @wiki.app.post("/api/v1/forgotten")
    def forgotten() -> dict:
        return {"ok": True}

    try:
        assert ("POST", "/api/v1/forgotten") in _write_routes(wiki.app)
        assert wiki.anonymous().post("/api/v1/forgotten").status_code == 200  # would fail above
    finally:
        wiki.app.router.routes.pop()


def test_browser_writes_need_the_session_csrf_token(wiki: Wiki):
    alice = wiki.login("alice")
    form = _edit_form(alice, "first-entry")
    form["markdown"] = form["markdown"].replace("An error.", "An error, edited.")
    form["message"] = "Clarify"
    before = wiki.writes_recorded()
    for token in (None, "not-the-token"):
        data = {k: v for k, v in form.items() if k != "csrf_token"}
        if token:
            data["csrf_token"] = token
        response = alice.post("/entries/first-entry/edit", data=data, follow_redirects=False)
        assert response.status_code == 403
        assert "CSRF" in response.text and "Nothing was saved" in response.text
    assert wiki.writes_recorded() == before
    api = alice.post("/api/v1/drafts/check", json={"markdown": form["markdown"]})
    assert api.status_code == 403  # JSON from a browser session needs the header too
    ok = alice.post("/entries/first-entry/edit", data=form, follow_redirects=False)
    assert ok.status_code == 303 and ok.headers["location"] == "/entries/first-entry?saved=2"


@pytest.mark.slow  # many real argon2 logins: the full suite runs it
def test_login_cookie_throttling_and_safe_redirects(wiki: Wiki):
    client = wiki.anonymous()
    token = csrf_of(client.get("/login").text)
    response = client.post(
        "/login",
        data={"name": "alice", "password": PASSWORD, "csrf_token": token, "next": "//evil.example"},
        follow_redirects=False,
    )
    assert response.status_code == 303 and response.headers["location"] == "/"
    for target in ("/\t/evil.example", "https://evil.example", "/\\evil.example"):
        again = wiki.anonymous()
        form = {"name": "alice", "password": PASSWORD, "next": target}
        form["csrf_token"] = csrf_of(again.get("/login").text)
        assert again.post("/login", data=form, follow_redirects=False).headers["location"] == "/"
    cookie = response.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=lax" in cookie
    assert "alice" not in response.headers["set-cookie"]  # signed ids, not names
    other = wiki.anonymous()
    token = csrf_of(other.get("/login").text)
    for _ in range(5):
        wrong = other.post(
            "/login", data={"name": "bob", "password": "wrong password", "csrf_token": token}
        )
        assert wrong.status_code == 401 and "Wrong name or password" in wrong.text
    blocked = other.post("/login", data={"name": "bob", "password": PASSWORD, "csrf_token": token})
    assert blocked.status_code == 429 and int(blocked.headers["retry-after"]) > 0
    # Another name from the same address still works: the limit is per name first.
    assert wiki.login("alice").get("/api/v1/me").json()["name"] == "alice"


def test_changing_the_password_ends_other_sessions(wiki: Wiki):
    from app.accounts import set_password

    alice = wiki.login("alice")
    assert alice.get("/api/v1/me").json()["role"] == "editor"
    with Session(wiki.engine) as session:
        set_password(session, name="alice", password="a new long password", actor=CLI)
        session.commit()
    assert alice.get("/api/v1/me").json()["authenticated"] is False


# ---- tokens ----------------------------------------------------------------------------------


def test_token_scope_revocation_expiry_and_last_use(wiki: Wiki):
    client = wiki.anonymous()
    doc = client.get("/api/v1/entries/first-entry")
    markdown = doc.json()["markdown"].replace("An error.", "An error seen by the bot.")
    body = {"markdown": markdown, "message": "Bot edit"}
    headers = {**wiki.bearer("ci-bot"), "If-Match": doc.headers["etag"]}
    response = client.put("/api/v1/entries/first-entry", json=body, headers=headers)
    assert response.status_code == 200 and response.headers["etag"] == '"2"'
    history = client.get("/api/v1/entries/first-entry/revisions").json()
    assert history[0]["author"] == "token:ci-bot" and history[0]["source"] == "api"
    read = client.put(
        "/api/v1/entries/first-entry",
        json=body,
        headers={**wiki.bearer("reader-bot"), "If-Match": '"2"'},
    )
    assert read.status_code == 403
    assert client.get("/api/v1/me", headers=wiki.bearer("reader-bot")).json()["role"] == "reader"

    admin = wiki.login("ada")
    page = admin.get("/tokens").text
    assert "ci-bot" in page and "reader-bot" in page and wiki.tokens["ci-bot"] not in page
    row = re.search(r"<td>ci-bot</td>(.*?)</tr>", page, re.S).group(1)
    assert "<td>never</td><td>active</td>" not in row  # its last use is recorded
    token_id = re.search(r'action="/tokens/(\d+)/revoke"', row).group(1)
    revoked = admin.post(
        f"/tokens/{token_id}/revoke", data={"csrf_token": csrf_of(page)}, follow_redirects=False
    )
    assert revoked.status_code == 303
    refused = client.get("/api/v1/me", headers=wiki.bearer("ci-bot"))
    assert refused.status_code == 401 and "revoked" in refused.json()["error"]["message"]

    with Session(wiki.engine) as session:
        _, short = create_token(
            session, name="short", scope="read", expires_in=timedelta(minutes=-1), owner=CLI
        )
        session.commit()
    assert client.get("/api/v1/me", headers={"Authorization": f"Bearer {short}"}).status_code == 401
    assert client.get("/api/v1/me", headers={"Authorization": "Bearer nonsense"}).status_code == 401
    # Another scheme (a proxy's Basic login) is not a token: ignored, the caller is anonymous.
    basic = client.get("/api/v1/me", headers={"Authorization": "Basic abc"})
    assert basic.status_code == 200 and basic.json()["authenticated"] is False


def test_a_token_never_outranks_its_owner(wiki: Wiki):
    alice = wiki.login("alice")
    page = alice.get("/tokens").text
    created = alice.post(
        "/tokens",
        data={"name": "alice-bot", "scope": "write", "expires": "90d", "csrf_token": csrf_of(page)},
    )
    assert created.status_code == 200
    secret = re.search(r'<code id="new-token">([^<]+)</code>', created.text).group(1)
    assert "copy it now" in created.text.lower() and alice.get("/tokens").text.count(secret) == 0
    headers = {"Authorization": f"Bearer {secret}"}
    assert wiki.anonymous().get("/api/v1/me", headers=headers).json()["role"] == "editor"
    with Session(wiki.engine) as session:
        set_role(session, name="alice", role="reader", actor=CLI)
        session.commit()
    assert wiki.anonymous().get("/api/v1/me", headers=headers).json()["role"] == "reader"
    rita = wiki.login("rita")
    refused = rita.post(
        "/tokens",
        data={"name": "w", "scope": "write", "csrf_token": csrf_of(rita.get("/tokens").text)},
    )
    assert refused.status_code == 422 and "cannot create a write token" in refused.text


# ---- editing, conflicts, history ------------------------------------------------------------


def test_two_sessions_edit_the_same_entry_and_the_second_keeps_its_text(wiki: Wiki):
    alice, bob = wiki.login("alice"), wiki.login("bob")
    form_a, form_b = _edit_form(alice, "second-entry"), _edit_form(bob, "second-entry")
    form_a["markdown"] = form_a["markdown"].replace("Because.", "Because of alice's reason.")
    form_a["message"] = "Explain the cause"
    assert alice.post("/entries/second-entry/edit", data=form_a).status_code == 200
    # Bob rewrites the same line: the edits overlap, so they cannot merge by themselves.
    bobs_text = form_b["markdown"].replace("Because.", "Because of bob's reason.")
    form_b.update(markdown=bobs_text, message="Explain it otherwise")
    conflict = bob.post("/entries/second-entry/edit", data=form_b)
    assert conflict.status_code == 409
    assert textarea(conflict.text, "markdown") == bobs_text  # nothing typed is lost
    assert "changed while you were editing" in conflict.text
    assert "touch the same or neighbouring lines (line 19 of your text)" in unescape(conflict.text)
    theirs = unescape(re.sub(r"<[^>]+>", "", conflict.text.split('id="conflict"')[1]))
    assert "+Because of alice's reason." in theirs and "-Because." in theirs
    assert re.search(r'name="base_revision" value="2"', conflict.text)
    # Bob merges alice's sentence into his text and saves on top of revision 2.
    merged = bobs_text.replace("Because of bob's reason.", "Because of alice's and bob's reasons.")
    form_b.update(markdown=merged, base_revision="2", csrf_token=csrf_of(conflict.text))
    assert bob.post("/entries/second-entry/edit", data=form_b).status_code == 200
    entry = wiki.anonymous().get("/api/v1/entries/second-entry").json()
    assert entry["revision"] == 3 and entry["markdown"] == merged

    history = wiki.anonymous().get("/api/v1/entries/second-entry/revisions").json()
    assert [(r["number"], r["author"], r["source"]) for r in history] == [
        (3, "bob", "web"),
        (2, "alice", "web"),
        (1, "ingest", "ingest"),
    ]
    diff = wiki.anonymous().get("/entries/second-entry/diff", params={"from": 1, "to": 3})
    assert diff.status_code == 200 and 'class="gi"' in diff.text and 'class="gd"' in diff.text

    page = alice.get("/entries/second-entry/revisions/1")
    restored = alice.post(
        "/entries/second-entry/revisions/1/restore",
        data={"csrf_token": csrf_of(page.text)},
        follow_redirects=False,
    )
    assert restored.status_code == 303
    original = wiki.anonymous().get("/api/v1/entries/second-entry/revisions/1").json()["markdown"]
    after = wiki.anonymous().get("/api/v1/entries/second-entry").json()
    assert after["revision"] == 4 and after["markdown"] == original
    assert wiki.anonymous().get("/api/v1/entries/second-entry/revisions").json()[0]["message"] == (
        "Restore revision 1"
    )


def test_a_refused_save_shows_the_problems_and_keeps_the_text(wiki: Wiki):
    alice = wiki.login("alice")
    form = _edit_form(alice, "first-entry")
    broken = form["markdown"].replace("number (?P<n>\\d+)'", "number (?<=x)'")
    form.update(markdown=broken, message="Break the regex")
    response = alice.post("/entries/first-entry/edit", data=form)
    assert response.status_code == 422
    assert textarea(response.text, "markdown") == broken
    assert "look-behind" in response.text or "look-around" in response.text
    assert re.search(r'data-line="9">line 9</button>', response.text)
    form.update(markdown=form["markdown"], message="")
    no_message = alice.post(
        "/entries/first-entry/edit", data={**form, "markdown": entry_text("first-entry")}
    )
    assert no_message.status_code == 422 and "short message" in no_message.text


def test_api_create_update_conflict_and_archive(wiki: Wiki):
    client, headers = wiki.anonymous(), wiki.bearer("ci-bot")
    new = entry_text("fourth-entry", title="A fourth pitfall")
    created = client.post(
        "/api/v1/entries", json={"markdown": new, "message": "Add"}, headers=headers
    )
    assert created.status_code == 201 and created.headers["etag"] == '"1"'
    assert created.headers["location"] == "/api/v1/entries/fourth-entry"
    again = client.post(
        "/api/v1/entries", json={"markdown": new, "message": "Add"}, headers=headers
    )
    assert again.status_code == 409 and "already exists" in again.text

    body = {"markdown": new.replace("An error.", "Another error."), "message": "Edit"}
    assert client.put("/api/v1/entries/fourth-entry", json=body, headers=headers).status_code == 428
    ok = client.put(
        "/api/v1/entries/fourth-entry", json=body, headers={**headers, "If-Match": '"1"'}
    )
    assert ok.status_code == 200 and ok.headers["etag"] == '"2"'
    stale = client.put(  # the same line as revision 2 changed, differently: no merge
        "/api/v1/entries/fourth-entry",
        json={**body, "markdown": new.replace("An error.", "A stale error.")},
        headers={**headers, "If-Match": '"1"'},
    )
    assert stale.status_code == 412
    assert stale.json()["error"]["current_revision"] == 2 and stale.headers["etag"] == '"2"'

    overwrite = client.put(
        "/api/v1/entries/fourth-entry",
        json={**body, "markdown": body["markdown"].replace("Another", "Yet another")},
        headers={**headers, "If-Match": "*"},
    )
    assert overwrite.status_code == 200 and overwrite.headers["etag"] == '"3"'

    bad = client.put(
        "/api/v1/entries/fourth-entry",
        json={"markdown": new.replace("kind: error", "kind: eror"), "message": "Typo"},
        headers={**headers, "If-Match": '"3"'},
    )
    assert bad.status_code == 422
    problem = bad.json()["error"]["problems"][0]
    assert problem["line"] == 5 and "kind" in problem["message"]
    assert (
        client.put(
            "/api/v1/entries/fourth-entry",
            json={"markdown": 1},
            headers={**headers, "If-Match": '"3"'},
        ).status_code
        == 422
    )

    archived = client.delete("/api/v1/entries/fourth-entry", headers=headers)
    assert archived.status_code == 200 and archived.json()["archived"] is True
    match = client.post(
        "/api/v1/match", json={"text": "RuntimeError: failure in fourth-entry number 3"}
    )
    assert all(m["id"] != "fourth-entry" for m in match.json()["matches"])
    changes = client.get("/api/v1/changes").json()
    assert [(c["entry_id"], c["action"], c["actor"]) for c in changes[:4]] == [
        ("fourth-entry", "archive", "token:ci-bot"),
        ("fourth-entry", "update", "token:ci-bot"),
        ("fourth-entry", "update", "token:ci-bot"),
        ("fourth-entry", "create", "token:ci-bot"),
    ]
    assert changes[2]["message"] == "Edit"


def test_live_check_reports_lines_positions_unmatched_examples_and_collisions(wiki: Wiki):
    client, headers = wiki.anonymous(), wiki.bearer("ci-bot")

    def check(markdown: str, paste: str | None = None) -> dict:
        response = client.post(
            "/api/v1/drafts/check",
            json={"markdown": markdown, "paste": paste},
            headers=headers,
        )
        assert response.status_code == 200
        return response.json()

    bad_regex = check(entry_text("new-one").replace("(?P<n>\\d+)", "(?P<n>\\d+"))
    assert not bad_regex["ok"]
    (problem,) = [p for p in bad_regex["problems"] if p["severity"] == "error"]
    assert problem["line"] == 9 and "position" in problem["message"]
    unmatched = check(entry_text("new-one").replace("number 42 happened", "happened"))
    assert any("example" in p["message"] and p["line"] == 10 for p in unmatched["problems"])
    hint = "*Show the fix, ideally as a runnable `python fix` block, and when it applies.*"
    unfinished = check(entry_text("new-one").replace("print('fixed')\n```\n", f"```\n\n{hint}\n"))
    assert not unfinished["ok"]
    assert [(p["line"], p["severity"]) for p in unfinished["problems"]] == [(26, "error")]
    assert unfinished["problems"][0]["message"].startswith("unfinished: the editor's template")
    colliding = entry_text("new-one").replace("failure in new-one", "failure in first-entry")
    collision = check(colliding)
    assert any(
        "collision" in p["message"] and "first-entry" in p["message"] for p in collision["problems"]
    )
    # The live check judges against the cached matcher; a save reads every signature afresh.
    with Session(wiki.engine) as session:
        shared = wiki.app.state.runtime.matchers.current().signatures
        for text in (colliding, entry_text("first-entry").replace("failure in", "fault in")):
            live = check_draft(session, text, editing=None, shared=shared).problems
            assert live == check_draft(session, text).problems and live
    fine = check(
        entry_text("new-one"),
        paste='Traceback (most recent call last):\n  File "x.py", line 1, in <module>\n'
        "RuntimeError: failure in new-one number 7 happened\n",
    )
    assert fine["ok"] and fine["problems"] == [] and "<h2" in fine["html"]
    assert fine["tester"]["draft_wins"] and fine["tester"]["hits"][0]["draft"]
    other = check(entry_text("new-one"), paste="RuntimeError: failure in first-entry number 7")
    assert (
        not other["tester"]["draft_wins"]
        and other["tester"]["hits"][0]["entry_id"] == "first-entry"
    )


def test_live_check_puts_a_yaml_mistake_on_the_files_line_the_editor_shows(wiki: Wiki):
    """The editor numbers the file's lines (the first `---` is line 1): a key that lost its
    colon on line 6 is reported on line 6, in the JSON the editor reads and on the page the
    Check button shows without JavaScript, not on line 7 where the parser noticed it."""
    text = entry_text("new-one").replace("tags: [tensor]", "tags [tensor]")
    assert text.split("\n")[5] == "tags [tensor]"
    checked = wiki.anonymous().post(
        "/api/v1/drafts/check", json={"markdown": text}, headers=wiki.bearer("ci-bot")
    )
    assert checked.status_code == 200
    (problem,) = checked.json()["problems"]
    assert problem["line"] == 6 and "not valid YAML" in problem["message"]
    alice = wiki.login("alice")
    form = {"markdown": text, "csrf_token": csrf_of(alice.get("/entries/new").text)}
    page = alice.post("/entries/check", data=form)
    assert page.status_code == 200
    assert re.search(r'<li class="error" data-line="6"><button[^>]*>line 6</button>', page.text)


def test_a_save_leads_to_the_entry_saying_saved(wiki: Wiki):
    alice = wiki.login("alice")
    form = _edit_form(alice, "first-entry")
    form["message"] = "Say nothing new"
    same = alice.post("/entries/first-entry/edit", data=form, follow_redirects=False)
    assert same.headers["location"] == "/entries/first-entry?saved=unchanged"
    assert (
        "Nothing to save: the text is already revision 1."
        in alice.get(same.headers["location"]).text
    )
    form["markdown"] = form["markdown"].replace("An error.", "An error, edited.")
    changed = alice.post("/entries/first-entry/edit", data=form, follow_redirects=False)
    assert changed.headers["location"] == "/entries/first-entry?saved=2"
    page = alice.get(changed.headers["location"]).text
    assert '<p class="created" role="status" id="saved">Saved as revision 2.</p>' in page
    # A revision the entry does not have, or anything else, says nothing.
    for odd in ("3", "0", "yes", "<b>2</b>"):
        assert 'id="saved"' not in alice.get(f"/entries/first-entry?saved={odd}").text


def test_starting_an_entry_from_an_unknown_traceback(wiki: Wiki):
    alice = wiki.login("alice")
    paste = (
        'Traceback (most recent call last):\n  File "train.py", line 9, in <module>\n'
        "ValueError: bucket 'train_a' holds 17 shards but the sampler expects 16\n"
    )
    page = alice.post("/match", data={"text": paste})
    link = re.search(r'id="start-entry" href="([^"]+)"', page.text)
    assert link, "no 'Start an entry' link on an unknown traceback"
    editor = alice.get(unescape(link.group(1)))
    markdown = textarea(editor.text, "markdown")
    assert "exception: ValueError" in markdown
    assert "(?P<name>" in markdown and "(?P<n>" in markdown and "(?P<n2>" in markdown
    assert "example: 'ValueError: bucket ''train_a'' holds 17 shards" in markdown
    assert "summary is empty" in editor.text and "unfinished: the editor" in editor.text
    for hint in TEMPLATE_PLACEHOLDERS:
        markdown = markdown.replace(hint, "The team wrote this.")
    form = {
        "markdown": markdown.replace("summary: ''", "summary: Shards and sampler disagree."),
        "message": "New pitfall from a paste",
        "csrf_token": csrf_of(editor.text),
    }
    saved = alice.post("/entries/new", data=form, follow_redirects=False)
    assert saved.status_code == 303
    answer = alice.post(
        "/api/v1/match",
        json={"text": paste.replace("17", "33").replace("train_a", "val_b")},
    ).json()
    new_page = saved.headers["location"]
    assert new_page.endswith("?saved=1")  # the page then says "Saved"
    assert answer["known"] and answer["matches"][0]["url"] == new_page.removesuffix("?saved=1"), (
        answer["message"],
        answer["parsed"],
        saved.headers["location"],
    )
    assert wiki.anonymous().post("/match", data={"text": paste}).text.count('id="start-entry"') == 0


def test_recent_changes_page_and_atom_feed(wiki: Wiki):
    client, headers = wiki.anonymous(), wiki.bearer("ci-bot")
    doc = client.get("/api/v1/entries/third-entry").json()
    client.put(
        "/api/v1/entries/third-entry",
        json={
            "markdown": doc["markdown"].replace("Because.", "Because <b>so</b>."),
            "message": "Cause & effect",
        },
        headers={**headers, "If-Match": '"1"'},
    )
    page = client.get("/changes")
    assert (
        page.status_code == 200
        and "Cause &amp; effect" in page.text
        and "token:ci-bot" in page.text
    )
    assert 'href="/entries/third-entry/diff?from=1&amp;to=2"' in page.text
    feed = client.get("/changes.atom")
    assert feed.headers["content-type"].startswith("application/atom+xml")
    root = ET.fromstring(feed.content)
    ns = {"a": "http://www.w3.org/2005/Atom"}
    first = root.find("a:entry", ns)
    assert first.find("a:summary", ns).text == "Cause & effect"
    assert first.find("a:author/a:name", ns).text == "token:ci-bot"
    assert "third-entry/diff?from=1&to=2" in first.find("a:link", ns).attrib["href"]


def test_archiving_in_the_browser_asks_why_and_the_history_keeps_it(wiki: Wiki):
    assert wiki.login("rita").get("/entries/first-entry/archive").status_code == 403
    alice = wiki.login("alice")
    entry_page = alice.get("/entries/first-entry")
    assert 'href="/entries/first-entry/archive"' in entry_page.text  # a link to ask first
    assert 'action="/entries/first-entry/archive"' not in entry_page.text  # not a one-click form
    confirm = alice.get("/entries/first-entry/archive")
    assert confirm.status_code == 200 and 'name="reason"' in confirm.text
    token = csrf_of(confirm.text)
    before = wiki.writes_recorded()
    for reason in ("", "   "):
        refused = alice.post(
            "/entries/first-entry/archive", data={"csrf_token": token, "reason": reason}
        )
        assert refused.status_code == 422 and "Say why the entry is archived" in refused.text
    assert wiki.writes_recorded() == before
    assert wiki.anonymous().get("/api/v1/entries/first-entry").json()["archived"] is False

    done = alice.post(
        "/entries/first-entry/archive",
        data={"csrf_token": token, "reason": "Merged into <second-entry>"},
        follow_redirects=False,
    )
    assert done.status_code == 303
    history = wiki.anonymous().get("/api/v1/entries/first-entry/revisions").json()
    assert [(r["number"], r["author"], r["message"]) for r in history[:1]] == [
        (2, "alice", "Archived: Merged into <second-entry>")
    ]
    assert history[0]["content_hash"] == history[1]["content_hash"]  # the text is unchanged
    page = wiki.anonymous().get("/entries/first-entry/history")
    assert "Archived: Merged into &lt;second-entry&gt;" in page.text
    changes = wiki.anonymous().get("/api/v1/changes").json()
    newest = changes["changes"][0] if isinstance(changes, dict) else changes[0]
    assert (newest["action"], newest["message"]) == (
        "archive",
        "Archived: Merged into <second-entry>",
    )
    # Restoring brings the same text back as a new revision.
    restored = alice.post(
        "/entries/first-entry/revisions/2/restore",
        data={"csrf_token": token},
        follow_redirects=False,
    )
    assert restored.status_code == 303
    assert wiki.anonymous().get("/api/v1/entries/first-entry").json()["revision"] == 3


def test_the_diff_page_shows_both_sides_with_the_changes_marked(wiki: Wiki):
    client, headers = wiki.anonymous(), wiki.bearer("ci-bot")
    doc = client.get("/api/v1/entries/third-entry").json()
    client.put(
        "/api/v1/entries/third-entry",
        json={
            "markdown": doc["markdown"].replace("Because.", "Because <b>so</b>."),
            "message": "Say why",
        },
        headers={**headers, "If-Match": '"1"'},
    )
    page = client.get("/entries/third-entry/diff", params={"from": 1, "to": 2})
    assert page.status_code == 200
    table = page.text.split('class="sbs"')[1].split("</table>")[0]
    row = re.search(r'<tr class="changed">.*?</tr>', table, re.S).group(0)
    assert '<td class="old">Because.</td>' in row  # user text escaped, the insertion marked
    assert '<td class="new">Because<ins> &lt;b&gt;so&lt;/b&gt;</ins>.</td>' in row
    assert 'class="diff"' in page.text  # the unified diff is still there
    same = client.get("/entries/third-entry/diff", params={"from": 2, "to": 2})
    assert "same text" in same.text and 'class="sbs"' not in same.text


def test_admin_adds_users_and_sees_the_audit_log(wiki: Wiki):
    ada = wiki.login("ada")
    page = ada.get("/admin")
    assert page.status_code == 200 and "rita" in page.text
    added = ada.post(
        "/admin/users",
        data={
            "name": "carol",
            "role": "editor",
            "password": PASSWORD,
            "csrf_token": csrf_of(page.text),
        },
        follow_redirects=False,
    )
    assert added.status_code == 303
    short = ada.post(
        "/admin/users",
        data={
            "name": "dave",
            "role": "editor",
            "password": "short",
            "csrf_token": csrf_of(page.text),
        },
    )
    assert short.status_code == 422 and "at least 8 characters" in short.text
    assert wiki.login("carol").get("/api/v1/me").json()["role"] == "editor"
    log = ada.get("/admin").text
    assert re.search(r"<td>ada</td><td>user.add</td><td>carol</td>", log)
    assert re.search(r"<td>cli</td><td>token.create</td><td>ci-bot</td>", log)
    assert wiki.login("alice").get("/admin").status_code == 403


def test_private_wiki_needs_a_login_or_token_to_read(make_settings, content_dir: Path):
    (content_dir / "first-entry.md").write_text(entry_text("first-entry"), encoding="utf-8")
    from app.web import create_app

    with TestClient(create_app(make_settings(content_dir, public_read=False))) as client:
        wiki = Wiki(client, content_dir)
        anonymous = wiki.anonymous()
        home = anonymous.get("/search?q=x", follow_redirects=False)
        assert (
            home.status_code == 303 and home.headers["location"] == "/login?next=%2Fsearch%3Fq%3Dx"
        )
        assert anonymous.get("/api/v1/search?q=failure").status_code == 401
        assert anonymous.post("/api/v1/match", json={"text": "x"}).status_code == 401
        assert anonymous.get("/api/v1/health").status_code == 200
        assert anonymous.get("/login").status_code == 200
        read = anonymous.get("/api/v1/search?q=failure", headers=wiki.bearer("reader-bot"))
        assert read.status_code == 200 and read.json()["total"] == 1
        assert wiki.login("rita").get("/entries/first-entry").status_code == 200
