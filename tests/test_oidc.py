"""Signing in with OpenID Connect.

In process: the accounts part (finding, making and re-roling an account from its claims), the
settings, and the pages' refusals (passwords off, a forged state, a provider that is down). End
to end: a real provider (`tests/oidc_provider.py`, Authlib's server side, in a subprocess) and a
real `pitfalls serve`, driven by Chromium: sign in, edit an entry, roles from groups, roles an
admin set, a disabled account, a denial, and logging out at the provider too.
"""

import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from app.accounts import (
    CLI,
    AccountDisabled,
    AccountError,
    Identity,
    add_user,
    disable_user,
    get_user,
    groups_of,
    role_for_groups,
    role_from_groups,
    set_role,
    sign_in_identity,
    sign_in_identity_once_settled,
)
from app.models import User
from app.settings import SettingsError, load_settings, parse_role_map
from tests.conftest import REPO, Served, free_port
from tests.oidc_provider import basic_auth
from tests.test_browser import browser, set_code_editor_text

ROLE_MAP = {"pitfalls-admins": "admin", "ml-team": "editor"}
ISSUER = "https://id.example.test"
CLIENT_ID, CLIENT_SECRET = "pitfalls", "a client secret for the tests"


def _identity(username: str, *groups: str, subject: str | None = None) -> Identity:
    return Identity(ISSUER, subject or f"sub-{username}", username, f"{username}@x.test", groups)


def _sign_in(session: Session, identity: Identity):
    user = sign_in_identity(session, identity, role_map=ROLE_MAP, default_role="reader")
    session.commit()
    return user


# ---- the accounts part ---------------------------------------------------------------------


def test_the_highest_mapped_role_wins_and_unmapped_groups_get_the_default():
    assert role_for_groups(["ml-team", "pitfalls-admins"], ROLE_MAP, "reader") == "admin"
    assert role_for_groups(["ml-team", "sales"], ROLE_MAP, "reader") == "editor"
    assert role_for_groups(["sales"], ROLE_MAP, "reader") == "reader"
    assert role_for_groups([], ROLE_MAP, "editor") == "editor"
    assert groups_of("ml-team") == ("ml-team",)
    assert groups_of(["a", 3, {"x": 1}]) == ("a", "3")
    assert groups_of(None) == ()


def test_the_first_sign_in_makes_an_account_and_never_takes_over_a_name(engine):
    with Session(engine) as session:
        add_user(session, name="ada", role="admin", password="a long password", actor=CLI)
        session.commit()
        user = _sign_in(session, _identity("ada", "ml-team"))
        assert (user.name, user.role, user.role_source) == ("ada-2", "editor", "provider")
        assert (user.oidc_issuer, user.oidc_subject) == (ISSUER, "sub-ada")
        assert user.password_hash == ""  # no password logs in as this account
        # The same identity again is the same account, whatever name it now sends.
        again = _sign_in(session, _identity("someone-else", "ml-team", subject="sub-ada"))
        assert again.id == user.id and again.name == "ada-2"
        odd = _sign_in(session, Identity(ISSUER, "sub-odd", "", "Zoë Smith+kb@x.test", ()))
        assert odd.name == "Zo-Smith-kb" and odd.role == "reader"
        nameless = _sign_in(session, Identity(ISSUER, "sub-none", "", "", ()))
        assert nameless.name == "user"


def test_a_provider_role_follows_the_groups_and_an_admin_role_is_kept(engine):
    with Session(engine) as session:
        add_user(session, name="root", role="admin", password="a long password", actor=CLI)
        session.commit()
        assert _sign_in(session, _identity("quinn", "ml-team")).role == "editor"
        assert _sign_in(session, _identity("quinn")).role == "reader"  # left the team
        assert _sign_in(session, _identity("quinn", "pitfalls-admins")).role == "admin"
        set_role(session, name="quinn", role="editor", actor=CLI)  # by hand, from now on
        session.commit()
        for groups in [("pitfalls-admins",), ()]:
            user = _sign_in(session, _identity("quinn", *groups))
            assert (user.role, user.role_source) == ("editor", "admin")


def test_a_role_given_back_to_the_groups_follows_them_from_the_next_sign_in(engine):
    with Session(engine) as session:
        add_user(session, name="root", role="admin", password="a long password", actor=CLI)
        _sign_in(session, _identity("rosa", "ml-team"))
        set_role(session, name="rosa", role="reader", actor=CLI)
        session.commit()
        assert _sign_in(session, _identity("rosa", "ml-team")).role == "reader"  # kept
        role_from_groups(session, name="rosa", actor=CLI)
        session.commit()
        user = _sign_in(session, _identity("rosa", "ml-team"))
        assert (user.role, user.role_source) == ("editor", "provider")
        with pytest.raises(AccountError, match="never signed in with OpenID Connect"):
            role_from_groups(session, name="root", actor=CLI)


def test_with_passwords_off_the_cli_asks_for_no_password(tmp_path: Path, monkeypatch):
    from click.testing import CliRunner

    from app.cli import cli

    monkeypatch.setenv("PITFALLS_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PITFALLS_LOCAL_PASSWORDS", "false")
    monkeypatch.setenv(
        "PITFALLS_OIDC_DISCOVERY_URL", "http://127.0.0.1:9/.well-known/openid-configuration"
    )
    monkeypatch.setenv("PITFALLS_OIDC_CLIENT_ID", CLIENT_ID)
    monkeypatch.setenv("PITFALLS_OIDC_CLIENT_SECRET", CLIENT_SECRET)
    runner = CliRunner()
    for args in (["user", "add", "ivo"], ["user", "password", "ivo"]):
        result = runner.invoke(cli, args, input="a long password\na long password\n")
        assert result.exit_code == 1, result.output
        assert "Password" not in result.output  # never prompted
        assert "passwords are off here" in result.output
    result = runner.invoke(cli, ["user", "role", "ivo"])
    assert result.exit_code == 2 and "either a ROLE or --from-groups" in result.output


@pytest.mark.both_databases
@pytest.mark.parametrize("backend", ["postgresql"], indirect=True)
@pytest.mark.parametrize("same_person", [True, False], ids=["two tabs", "two people, one name"])
def test_first_sign_ins_at_once_both_get_in(engine, same_person):
    """On PostgreSQL two first sign-ins run at once: the second's insert waits on the first's
    unique key, then is refused. It is tried again and finds the first's account (or the
    next free name), instead of a 500. (SQLite's write queue runs one at a time.)"""
    import time

    from sqlalchemy import text

    first_identity = _identity("tess", "ml-team")
    second_identity = first_identity if same_person else _identity("tess", subject="sub-other")
    first = Session(engine)
    sign_in_identity(first, first_identity, role_map=ROLE_MAP, default_role="reader")
    first.flush()  # inserted, not committed: a second insert of its keys waits for it
    done: dict = {}

    def second() -> None:
        try:
            done["user"] = sign_in_identity_once_settled(
                engine, second_identity, role_map=ROLE_MAP, default_role="reader"
            )
        except Exception as exc:
            done["error"] = exc

    worker = threading.Thread(target=second)
    worker.start()
    with engine.connect() as watch:  # until the second waits on the first's lock
        for _ in range(600):
            waiting = watch.execute(
                text("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
            ).scalar()
            # A transaction sees one snapshot of pg_stat_activity: end it, or the first
            # sample (taken before the second blocked, on a busy machine) is read again.
            watch.rollback()
            if waiting or not worker.is_alive():
                break
            time.sleep(0.05)
    assert waiting, f"the second sign-in never waited on the first: {done}"
    first.commit()
    first.close()
    worker.join(timeout=60)
    assert "error" not in done, done
    with Session(engine) as session:
        names = sorted(u.name for u in session.exec(select(User)).all())
    assert names == (["tess"] if same_person else ["tess", "tess-2"])
    assert done["user"].name == ("tess" if same_person else "tess-2")


def test_the_groups_never_remove_the_last_admin(engine):
    with Session(engine) as session:
        assert _sign_in(session, _identity("boss", "pitfalls-admins")).role == "admin"
        assert _sign_in(session, _identity("boss")).role == "admin"  # no other admin yet
        _sign_in(session, _identity("second", "pitfalls-admins"))
        assert _sign_in(session, _identity("boss")).role == "reader"


def test_a_disabled_account_cannot_sign_in(engine):
    with Session(engine) as session:
        add_user(session, name="root", role="admin", password="a long password", actor=CLI)
        _sign_in(session, _identity("dora", "ml-team"))
        disable_user(session, name="dora", actor=CLI)
        session.commit()
        with pytest.raises(AccountDisabled, match="'dora' is disabled"):
            _sign_in(session, _identity("dora", "ml-team"))
        assert get_user(session, "dora").last_login_at is not None  # from the first only


# ---- settings ------------------------------------------------------------------------------


def test_the_role_map_is_read_and_a_bad_pair_is_named(tmp_path: Path):
    assert parse_role_map(" pitfalls-admins=admin , ml-team=editor,") == ROLE_MAP
    settings = load_settings(
        data_dir=tmp_path,
        oidc_discovery_url="https://id.example.test/.well-known/openid-configuration",
        oidc_client_id="kb",
        oidc_role_map="ml-team=editor",
    )
    assert settings.oidc_roles == {"ml-team": "editor"}
    with pytest.raises(SettingsError, match="PITFALLS_OIDC_ROLE_MAP: 'ml-team=owner' is not"):
        load_settings(data_dir=tmp_path, oidc_role_map="ml-team=owner")


def test_settings_that_leave_nobody_a_way_in_are_refused(tmp_path: Path):
    with pytest.raises(SettingsError, match="PITFALLS_LOCAL_PASSWORDS=false leaves nobody"):
        load_settings(data_dir=tmp_path, local_passwords=False)
    with pytest.raises(SettingsError, match="PITFALLS_OIDC_CLIENT_ID is empty"):
        load_settings(data_dir=tmp_path, oidc_discovery_url="https://id.example.test/x")
    with pytest.raises(SettingsError, match="PITFALLS_OIDC_DISCOVERY_URL"):
        load_settings(data_dir=tmp_path, oidc_discovery_url="id.example.test", oidc_client_id="x")


# ---- the pages, in process -------------------------------------------------------------------


@pytest.fixture
def app_without_provider(make_settings, content_dir: Path) -> Iterator[TestClient]:
    """Sign-in set up against a provider nobody listens for, passwords off."""
    from app.web import create_app

    settings = make_settings(
        content_dir,
        local_passwords=False,
        oidc_discovery_url=f"http://127.0.0.1:{free_port()}/.well-known/openid-configuration",
        oidc_client_id=CLIENT_ID,
        oidc_client_secret=CLIENT_SECRET,
        oidc_provider_name="Test ID",
        oidc_timeout_s=5,
    )
    with TestClient(create_app(settings)) as client:
        yield client


def test_with_passwords_off_the_login_page_offers_only_the_provider(app_without_provider):
    page = app_without_provider.get("/login?next=/tags")
    assert "Sign in with Test ID" in page.text
    assert 'id="sign-in-oidc" href="/login/oidc?next=/tags"' in page.text
    assert 'name="password"' not in page.text
    refused = app_without_provider.post(
        "/login",
        data={"name": "ada", "password": "whatever it is", "csrf_token": "any"},
    )
    assert refused.status_code == 403
    assert "Passwords are turned off on this site: sign in with Test ID instead." in refused.text


def test_a_provider_that_is_down_is_a_503_with_a_sentence(app_without_provider):
    answer = app_without_provider.get("/login/oidc", follow_redirects=False)
    assert answer.status_code == 503
    assert "The sign-in provider (Test ID) cannot be reached just now" in answer.text


def test_a_callback_this_browser_did_not_start_is_a_400_with_a_sentence(app_without_provider):
    answer = app_without_provider.get("/login/oidc/callback?code=stolen&state=forged")
    assert answer.status_code == 400
    assert "This sign-in was not started from this browser" in answer.text
    denied = app_without_provider.get("/login/oidc/callback?error=access_denied&state=x")
    assert denied.status_code == 403
    assert "Test ID did not sign you in (access_denied)" in denied.text


def test_without_the_setting_there_is_no_sign_in_button(make_settings, content_dir: Path):
    from app.web import create_app

    with TestClient(create_app(make_settings(content_dir))) as client:
        page = client.get("/login")
        assert "Sign in with" not in page.text and 'name="password"' in page.text
        assert client.get("/login/oidc").status_code == 404


# ---- a real provider -------------------------------------------------------------------------


@contextmanager
def running_provider(redirect_uri: str) -> Iterator[str]:
    """tests/oidc_provider.py in a subprocess on a free port; yields its issuer URL."""
    port = free_port()
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "tests.oidc_provider", "--port", str(port)),
            *("--client-id", CLIENT_ID, "--client-secret", CLIENT_SECRET),
            *("--redirect-uri", redirect_uri),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()  # "ready <issuer>" once it listens
        assert line.startswith("ready "), line + process.stdout.read()
        yield line.split()[1]
    finally:
        process.terminate()
        process.wait(timeout=10)
        if process.stdout is not None:
            process.stdout.close()


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def _call(url: str, data: dict | None = None, headers: dict | None = None):
    """(status, headers, body) without following a redirect."""
    body = urllib.parse.urlencode(data).encode() if data is not None else None
    request = urllib.request.Request(url, data=body, headers=headers or {})
    try:
        with urllib.request.build_opener(_NoRedirects).open(request, timeout=10) as response:
            return response.status, response.headers, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read().decode()


@pytest.mark.slow
def test_the_provider_refuses_what_pkce_and_the_nonce_would_stop():
    """The provider is strict, so that a sign-in through it shows the app sends PKCE (S256)
    and a nonce: without them, or without the verifier at the token endpoint, it refuses."""
    callback = "http://127.0.0.1:9/login/oidc/callback"
    verifier = "a-code-verifier-of-enough-length-for-rfc-7636-0123456789"
    from authlib.oauth2.rfc7636 import create_s256_code_challenge

    request = {
        "response_type": "code",
        "client_id": CLIENT_ID,
        "redirect_uri": callback,
        "scope": "openid profile",
        "state": "s1",
        "nonce": "n1",
        "code_challenge": create_s256_code_challenge(verifier),
        "code_challenge_method": "S256",
    }
    with running_provider(callback) as issuer:
        discovery = json.loads(_call(f"{issuer}/.well-known/openid-configuration")[2])
        assert discovery["code_challenge_methods_supported"] == ["S256"]
        for missing in ("code_challenge", "nonce"):
            query = urllib.parse.urlencode({k: v for k, v in request.items() if k != missing})
            status, _, body = _call(f"{issuer}/authorize?{query}")
            assert status == 400 and json.loads(body)["error"] == "invalid_request", body
        plain = {**request, "code_challenge": verifier, "code_challenge_method": "plain"}
        assert _call(f"{issuer}/authorize?{urllib.parse.urlencode(plain)}")[0] == 400

        status, headers, _ = _call(f"{issuer}/authorize", {**request, "username": "ada"})
        assert status == 302
        code = urllib.parse.parse_qs(urllib.parse.urlsplit(headers["Location"]).query)["code"][0]
        token_request = {"grant_type": "authorization_code", "code": code, "redirect_uri": callback}
        auth = {"Authorization": basic_auth(CLIENT_ID, CLIENT_SECRET)}
        status, _, body = _call(f"{issuer}/token", token_request, auth)
        assert status == 400 and "code_verifier" in json.loads(body)["error_description"]
        wrong = {**token_request, "code_verifier": verifier.replace("a", "b")}
        status, _, body = _call(f"{issuer}/token", wrong, auth)
        assert status == 400 and json.loads(body)["error"] == "invalid_grant"
        status, _, body = _call(
            f"{issuer}/token", {**token_request, "code_verifier": verifier}, auth
        )
        assert status == 200 and "id_token" in json.loads(body)


browser = browser  # the module-scoped Chromium of test_browser.py, as a fixture here too


class Site:
    def __init__(self, base: str, folder: Path, issuer: str) -> None:
        self.base, self.folder, self.issuer = base, folder, issuer

    def disable(self, name: str) -> None:
        """What the admin page's Disable does, on the site's database (in a thread: the
        browser's driver keeps an event loop in this one)."""
        with ThreadPoolExecutor(1) as pool:
            pool.submit(self._disable, name).result()

    def _disable(self, name: str) -> None:
        from app.storage import create_db_engine

        engine = create_db_engine(load_settings(data_dir=self.folder / "data"))
        try:
            with Session(engine) as session:
                add_user(session, name="boss", role="admin", password="a long password", actor=CLI)
                disable_user(session, name=name, actor=CLI)
                session.commit()
        finally:
            engine.dispose()

    def cli(self, *args: str) -> None:
        """A `pitfalls` command on the site's data, as an admin would run it."""
        from tests.conftest import pitfalls_command

        env = {k: v for k, v in os.environ.items() if not k.startswith("PITFALLS_")}
        subprocess.run(
            [pitfalls_command(), *args], cwd=self.folder, env=env, check=True, capture_output=True
        )


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Iterator[Site]:
    """`pitfalls serve` with passwords on and sign-in through the real provider."""
    folder = tmp_path_factory.mktemp("oidc") / "clone"
    folder.mkdir()
    served = Served(folder, {}, fresh=True)
    callback = f"{served.base}/login/oidc/callback"
    with running_provider(callback) as issuer:
        served.env.update(
            {
                "PITFALLS_OIDC_DISCOVERY_URL": f"{issuer}/.well-known/openid-configuration",
                "PITFALLS_OIDC_CLIENT_ID": CLIENT_ID,
                "PITFALLS_OIDC_CLIENT_SECRET": CLIENT_SECRET,
                "PITFALLS_OIDC_PROVIDER_NAME": "Test ID",
                "PITFALLS_OIDC_ROLE_MAP": "pitfalls-admins=admin,ml-team=editor",
                "PITFALLS_OIDC_PROVIDER_LOGOUT": "true",
            }
        )
        try:
            served.start()
            served.wait_ready(timeout=300)  # a busy machine ingests slowly
            yield Site(served.base, folder, issuer)
        finally:
            served.stop()


@contextmanager
def fresh_page(browser, *, strict: bool = True):
    """A page of its own (its own cookies); with `strict`, fails on a console error or an
    answer of 400 or more."""
    context = browser.new_context()
    page = context.new_page()
    problems: list[str] = []
    if strict:
        page.on("console", lambda m: problems.append(m.text) if m.type == "error" else None)
        page.on("pageerror", lambda e: problems.append(str(e)))
        page.on(
            "response",
            lambda r: problems.append(f"HTTP {r.status}: {r.url}") if r.status >= 400 else None,
        )
    try:
        yield page
    finally:
        context.close()
    assert problems == []


def sign_in(
    page, site: Site, username: str, groups: str = "", next_path: str = "/", *, userinfo=False
) -> None:
    """From the login page, through the provider's form, and back."""
    page.goto(f"{site.base}/login?next={urllib.parse.quote(next_path)}")
    page.click("text=Sign in with Test ID")
    page.wait_for_url(f"{site.issuer}/authorize?*")
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(page.url).query)
    assert query["code_challenge_method"] == ["S256"] and query["nonce"] and query["state"]
    page.fill("#username", username)
    page.fill("#groups", groups)
    if userinfo:  # the ID token leaves the groups out: the site asks the userinfo endpoint
        page.check("#userinfo-only")
    page.click("#approve")
    page.wait_for_url(site.base + next_path)


def me(page, site: Site) -> dict:
    return page.context.request.get(f"{site.base}/api/v1/me").json()


@pytest.mark.slow
def test_sign_in_with_the_provider_and_save_an_entry(browser, site: Site):
    entry = "view-non-contiguous"
    with fresh_page(browser) as page:
        sign_in(page, site, "olga", "ml-team", next_path=f"/entries/{entry}/edit")
        assert me(page, site) == {
            "authenticated": True,
            "kind": "user",
            "name": "olga",
            "role": "editor",
        }
        assert "olga" in page.locator("header.site nav").inner_text()
        source = page.locator("#markdown").input_value()
        set_code_editor_text(page, source + "\nSigned in through the provider, then saved.\n")
        page.fill("#message", "A sentence from a provider's user")
        # Awaited from before the click: the saved page takes ?saved= out of its address (app.js).
        with page.expect_navigation(url=f"{site.base}/entries/{entry}?saved=*"):
            page.click("#save")
        assert "Signed in through the provider, then saved." in page.inner_text("main")
        history = page.context.request.get(f"{site.base}/entries/{entry}/history").text()
        assert "olga" in history

        # Logging out ends the session here, then the provider's, which sends the browser back.
        with page.expect_request(lambda r: r.url.startswith(f"{site.issuer}/logout?")):
            page.click("header.site nav button:has-text('Log out')")
        page.wait_for_url(f"{site.base}/")
        assert me(page, site)["authenticated"] is False


@pytest.mark.slow
def test_roles_follow_the_groups_until_an_admin_sets_one(browser, site: Site):
    with fresh_page(browser) as page:
        sign_in(page, site, "nils", "sales")  # a group nobody mapped
        assert me(page, site)["role"] == "reader"
    with fresh_page(browser) as page:
        # The provider's role follows the groups, here sent by the userinfo endpoint only.
        sign_in(page, site, "nils", "ml-team", userinfo=True)
        assert me(page, site)["role"] == "editor"
    site.cli("user", "role", "nils", "reader")  # an admin decides
    with fresh_page(browser) as page:
        sign_in(page, site, "nils", "ml-team,pitfalls-admins")
        assert me(page, site)["role"] == "reader"


@pytest.mark.slow
def test_a_disabled_account_and_a_denial_are_refused_with_a_sentence(browser, site: Site):
    with fresh_page(browser) as page:
        sign_in(page, site, "dora", "ml-team")
    site.disable("dora")
    with fresh_page(browser, strict=False) as page:
        page.goto(f"{site.base}/login")
        page.click("text=Sign in with Test ID")
        page.fill("#username", "dora")
        with page.expect_response(lambda r: "/login/oidc/callback" in r.url) as answer:
            page.click("#approve")
        assert answer.value.status == 403
        assert "The account 'dora' is disabled" in page.inner_text("main")
        assert me(page, site)["authenticated"] is False

        page.click("text=Sign in with Test ID")
        with page.expect_response(lambda r: "/login/oidc/callback" in r.url) as answer:
            page.click("#deny")
        assert answer.value.status == 403
        assert "Test ID did not sign you in" in page.inner_text("main")


@pytest.mark.slow
def test_a_replayed_callback_is_a_400(browser, site: Site):
    """The callback's state is good once: the same URL again (a copied link) is refused."""
    with fresh_page(browser, strict=False) as page:
        sign_in(page, site, "rhea", "")
        with page.expect_request(lambda r: "/login/oidc/callback" in r.url) as seen:
            sign_in(page, site, "rhea", "")
        answer = page.goto(seen.value.url)
        assert answer is not None and answer.status == 400
        assert "already used" in page.inner_text("main")
