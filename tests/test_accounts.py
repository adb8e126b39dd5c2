"""Managing accounts on the web: disabling and enabling users, password resets by an admin, one's
own password, the audit rows each writes, and refusals (403) that name the real fix."""

import re

import pytest
from sqlmodel import Session, select

from app.accounts import CLI, AccountError, create_token, disable_user, set_role, user_principal
from app.models import AuditEvent, User
from tests import test_wiki
from tests.test_wiki import PASSWORD, Wiki, csrf_of

pytestmark = pytest.mark.both_databases

wiki = test_wiki.wiki  # the fixture: an app over three entries, with users and tokens

NEW_PASSWORD = "a brand new passphrase"


def _audit(wiki: Wiki) -> list[tuple[str, str, str, str]]:
    with Session(wiki.engine) as session:
        rows = session.exec(select(AuditEvent).order_by(AuditEvent.id)).all()
        return [(e.actor, e.action, e.target, e.detail) for e in rows]


def _token_of(wiki: Wiki, owner: str, scope: str = "write") -> dict[str, str]:
    with Session(wiki.engine) as session:
        user = session.exec(select(User).where(User.name == owner)).one()
        _, secret = create_token(
            session, name=f"{owner}-bot", scope=scope, expires_in=None, owner=user_principal(user)
        )
        session.commit()
    return {"Authorization": f"Bearer {secret}"}


def _admin_post(admin, path: str, **data):
    token = csrf_of(admin.get("/admin").text)
    return admin.post(path, data={"csrf_token": token, **data}, follow_redirects=False)


def _try_login(wiki: Wiki, name: str, password: str = PASSWORD, client=None):
    client = client or wiki.anonymous()
    form = {"name": name, "password": password, "csrf_token": csrf_of(client.get("/login").text)}
    return client.post("/login", data=form, follow_redirects=False)


def test_a_disabled_user_is_out_at_once_and_back_when_enabled(wiki: Wiki):
    alice = wiki.login("alice")
    bot = _token_of(wiki, "alice")
    assert wiki.anonymous().get("/api/v1/me", headers=bot).json()["role"] == "editor"
    ada = wiki.login("ada")

    assert _admin_post(ada, "/admin/users/alice/disable").status_code == 303
    # The session in alice's browser and her token stop on their very next request.
    assert alice.get("/api/v1/me").json()["authenticated"] is False
    refused = wiki.anonymous().get("/api/v1/search?q=x", headers=bot)
    assert refused.status_code == 403
    assert "'alice' that owns this token is disabled" in refused.json()["error"]["message"]
    login = _try_login(wiki, "alice")
    assert login.status_code == 403 and "is disabled" in login.text
    assert _try_login(wiki, "alice", "a wrong password").status_code == 401  # says nothing more
    assert "disabled" in ada.get("/admin").text
    assert ("ada", "user.disable", "alice", "") in _audit(wiki)

    assert _admin_post(ada, "/admin/users/alice/enable").status_code == 303
    assert wiki.anonymous().get("/api/v1/me", headers=bot).json()["role"] == "editor"
    assert _try_login(wiki, "alice").status_code == 303
    assert alice.get("/api/v1/me").json()["authenticated"] is False  # the old session stays ended
    assert ("ada", "user.enable", "alice", "") in _audit(wiki)


def test_nobody_disables_themselves_or_the_last_admin(wiki: Wiki):
    ada = wiki.login("ada")
    own = _admin_post(ada, "/admin/users/ada/disable")
    assert own.status_code == 422 and "cannot disable your own account" in own.text
    with Session(wiki.engine) as session, pytest.raises(AccountError, match="last admin"):
        disable_user(session, name="ada", actor=CLI)
    # With a second admin, one may go; the one left is then the last, and cannot be demoted.
    with Session(wiki.engine) as session:
        set_role(session, name="bob", role="admin", actor=CLI)
        session.commit()
    bob = wiki.login("bob")
    assert _admin_post(bob, "/admin/users/ada/disable").status_code == 303
    demoted = _admin_post(bob, "/admin/users/bob/role", role="editor")
    assert demoted.status_code == 422 and "last admin" in demoted.text
    assert _admin_post(bob, "/admin/users/nobody/disable").status_code == 422


def test_an_admin_resets_a_password_generated_or_given(wiki: Wiki):
    rita = wiki.login("rita")
    ada = wiki.login("ada")
    page = _admin_post(ada, "/admin/users/rita/password")
    assert page.status_code == 200 and "shown only this once" in page.text
    generated = re.search(r'<code id="new-password">([^<]+)</code>', page.text).group(1)
    assert len(generated) >= 16 and generated not in ada.get("/admin").text
    assert rita.get("/api/v1/me").json()["authenticated"] is False  # her logins have ended
    assert _try_login(wiki, "rita").status_code == 401
    assert _try_login(wiki, "rita", generated).status_code == 303

    given = _admin_post(ada, "/admin/users/rita/password", password=NEW_PASSWORD)
    assert given.status_code == 200 and 'id="new-password"' not in given.text
    assert _try_login(wiki, "rita", NEW_PASSWORD).status_code == 303
    short = _admin_post(ada, "/admin/users/rita/password", password="short")
    assert short.status_code == 422 and "at least 8 characters" in short.text
    resets = [row for row in _audit(wiki) if row[1] == "user.password.reset"]
    assert resets == [
        ("ada", "user.password.reset", "rita", "generated"),
        ("ada", "user.password.reset", "rita", "given by the admin"),
    ]
    assert generated not in str(_audit(wiki)) and NEW_PASSWORD not in str(_audit(wiki))


def test_everyone_changes_their_own_password(wiki: Wiki):
    laptop, phone = wiki.login("rita"), wiki.login("rita")
    page = laptop.get("/account")
    assert page.status_code == 200 and 'name="current_password"' in page.text
    token = csrf_of(page.text)

    def change(current: str, new: str, repeat: str | None = None, csrf: str | None = token):
        form = {"current_password": current, "new_password": new, "repeat_password": repeat or new}
        if csrf:
            form["csrf_token"] = csrf
        return laptop.post("/account/password", data=form)

    assert change(PASSWORD, NEW_PASSWORD, csrf=None).status_code == 403  # CSRF
    wrong = change("not my password", NEW_PASSWORD)
    assert wrong.status_code == 422 and "current password is wrong" in wrong.text
    differ = change(PASSWORD, NEW_PASSWORD, repeat="something else")
    assert differ.status_code == 422 and "differ" in differ.text
    assert change(PASSWORD, "short").status_code == 422
    done = change(PASSWORD, NEW_PASSWORD)
    assert done.status_code == 200 and "Your password is changed" in done.text
    assert laptop.get("/api/v1/me").json()["name"] == "rita"  # this login goes on
    assert phone.get("/api/v1/me").json()["authenticated"] is False  # the other one ended
    assert _try_login(wiki, "rita").status_code == 401
    assert _try_login(wiki, "rita", NEW_PASSWORD).status_code == 303
    assert ("rita", "user.password.change", "rita", "") in _audit(wiki)
    assert wiki.anonymous().get("/account", follow_redirects=False).status_code == 303


def test_refusals_say_the_real_fix(wiki: Wiki):
    client = wiki.anonymous()
    body = {"markdown": "x", "message": "y"}
    read = client.post("/api/v1/entries", json=body, headers=wiki.bearer("reader-bot"))
    assert read.status_code == 403
    assert read.json()["error"]["message"] == (
        "This token can only read; create a token with write scope on /tokens."
    )
    rita = wiki.login("rita")
    reader = rita.get("/entries/first-entry/edit")
    assert reader.status_code == 403
    assert "Your role (reader) can read but not edit entries; ask ada to make you an" in reader.text
    alice = wiki.login("alice")
    editor = alice.get("/admin")
    assert editor.status_code == 403 and "admins: ada" in editor.text
    admin_api = client.get("/api/v1/users", headers=wiki.bearer("ci-bot"))
    assert admin_api.status_code == 403 and "log in as an admin" in admin_api.text
    # A write token whose owner became a reader: the fix is the owner's role, not a new token.
    bot = _token_of(wiki, "alice")
    with Session(wiki.engine) as session:
        set_role(session, name="alice", role="reader", actor=CLI)
        session.commit()
    demoted = client.post("/api/v1/entries", json=body, headers=bot)
    assert demoted.status_code == 403
    assert "owner is now a reader" in demoted.json()["error"]["message"]
    assert "ada can make them an editor again" in demoted.json()["error"]["message"]
    for message in (read.text, reader.text, editor.text, demoted.text):
        assert "An admin can change your role" not in message


def test_the_account_api_for_an_admins_session(wiki: Wiki):
    ada = wiki.login("ada")
    csrf = {"X-CSRF-Token": csrf_of(ada.get("/admin").text)}
    users = ada.get("/api/v1/users").json()
    assert [(u["name"], u["role"], u["disabled"]) for u in users][:2] == [
        ("ada", "admin", False),
        ("alice", "editor", False),
    ]
    assert ada.post("/api/v1/users/bob/disable").status_code == 403  # no CSRF token
    disabled = ada.post("/api/v1/users/bob/disable", headers=csrf).json()
    assert disabled["disabled"] is True and disabled["disabled_at"].endswith("Z")
    assert ada.post("/api/v1/users/ada/disable", headers=csrf).status_code == 422
    assert ada.post("/api/v1/users/bob/enable", headers=csrf).json()["disabled"] is False
    reset = ada.post("/api/v1/users/bob/password", json={}, headers=csrf)
    assert reset.status_code == 200 and len(reset.json()["password"]) >= 16
    given = ada.post("/api/v1/users/bob/password", json={"password": NEW_PASSWORD}, headers=csrf)
    assert given.json() == {"name": "bob", "password": None}
    log = ada.get("/api/v1/audit?limit=3").json()
    assert [e["action"] for e in log] == [
        "user.password.reset",
        "user.password.reset",
        "user.enable",
    ]
    assert wiki.login("alice").get("/api/v1/users").status_code == 403

    bob = wiki.anonymous()
    assert _try_login(wiki, "bob", NEW_PASSWORD, client=bob).status_code == 303  # ada's choice
    bob_csrf = {"X-CSRF-Token": csrf_of(bob.get("/account").text)}
    body = {"current_password": NEW_PASSWORD, "new_password": PASSWORD}
    assert bob.post("/api/v1/me/password", json=body, headers=bob_csrf).status_code == 204
    assert bob.get("/api/v1/me").json()["name"] == "bob"
    tokens = bob.get("/api/v1/tokens")
    assert tokens.status_code == 200 and tokens.json() == []
    assert {t["name"] for t in ada.get("/api/v1/tokens").json()} == {"ci-bot", "reader-bot"}
