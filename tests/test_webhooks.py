"""Webhooks: registered by admins only, queued with the change that causes them, delivered by
the server's worker (or the CLI) to a real HTTP receiver that checks the signature itself,
retried with backoff while the receiver is down, and never sent on a request's path."""

import hashlib
import hmac
import json
import logging
import os
import subprocess
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from click.testing import CliRunner
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from app.accounts import CLI
from app.models import WebhookDelivery
from app.webhooks import (
    DeliveryRules,
    WebhookError,
    add_hook,
    check_url,
    deliver_due,
    enqueue_entry_event,
    render_body,
    retry_delay_s,
)
from tests import test_wiki
from tests.conftest import (
    entry_text,
    free_port,
    pitfalls_command,
    running_server,
    write_token,
)
from tests.test_wiki import Wiki, csrf_of

ENTRY = "view-non-contiguous"
pytestmark = pytest.mark.both_databases

SECRET = "a-receiver-shared-secret-0123456789"
FAST = {  # deliveries and retries in tenths of a second, so the tests wait little
    "webhook_poll_interval_ms": 100,
    "webhook_retry_base_ms": 300,
    "webhook_retry_max_ms": 2000,
    "webhook_timeout_ms": 3000,
}


# ---- a real receiver on 127.0.0.1 ------------------------------------------------------------


@dataclass
class Received:
    at: float
    headers: dict[str, str]
    body: bytes
    signature_ok: bool | None  # None: the receiver holds no secret
    answered: int


@dataclass
class Receiver:
    """An HTTP server in a thread that records every POST and checks its signature the way
    the documentation tells a receiver to."""

    port: int
    secret: str | None = None
    answer: int = 204
    hold: threading.Event | None = None  # set: answer; unset: the handler waits on it
    location: str = ""  # sent as Location with the answer (a redirect)
    received: list[Received] = field(default_factory=list)
    arrived: threading.Event = field(default_factory=threading.Event)
    _server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def verify(self, headers: dict[str, str], body: bytes) -> bool:
        assert self.secret is not None
        timestamp = headers.get("X-Pitfalls-Timestamp", "")
        if not timestamp.isdigit() or abs(time.time() - int(timestamp)) > 300:
            return False  # too old or from the future: a replay
        expected = hmac.new(
            self.secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256
        ).hexdigest()
        return hmac.compare_digest("sha256=" + expected, headers.get("X-Pitfalls-Signature", ""))

    def start(self) -> "Receiver":
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                headers = dict(self.headers.items())
                receiver.arrived.set()
                if receiver.hold is not None:
                    receiver.hold.wait(30)
                ok = None if receiver.secret is None else receiver.verify(headers, body)
                code = receiver.answer if ok is not False else 401
                receiver.received.append(Received(time.monotonic(), headers, body, ok, code))
                self.send_response(code)
                if receiver.location:
                    self.send_header("Location", receiver.location)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def bodies(self) -> list[dict]:
        return [json.loads(r.body) for r in self.received if 200 <= r.answered < 300]


@contextmanager
def receiver(**options) -> Iterator[Receiver]:
    started = Receiver(free_port(), **options).start()
    try:
        yield started
    finally:
        if started.hold is not None:
            started.hold.set()
        started.stop()


def wait_for(condition, timeout: float = 20, what: str = "the condition") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def deliveries(engine) -> list[WebhookDelivery]:
    with Session(engine) as session:
        return list(session.exec(select(WebhookDelivery).order_by(WebhookDelivery.id)).all())


def register(engine, url: str, **options) -> int:
    with Session(engine) as session:
        hook = add_hook(session, url=url, actor=CLI, **{"events": ["entry.changed"], **options})
        session.commit()
        assert hook.id is not None
        return hook.id


# ---- an app with the worker running -----------------------------------------------------------


@pytest.fixture
def hooked(make_settings, content_dir: Path) -> Iterator[Wiki]:
    for entry_id in ("first-entry", "second-entry", "third-entry"):
        (content_dir / f"{entry_id}.md").write_text(entry_text(entry_id), encoding="utf-8")
    from app.web import create_app

    settings = make_settings(content_dir, public_url="https://kb.example.org", **FAST)
    with TestClient(create_app(settings)) as client:
        yield Wiki(client, content_dir)


def edit(wiki: Wiki, entry_id: str = "first-entry", words: str = "An edited error.") -> None:
    client = wiki.anonymous()
    doc = client.get(f"/api/v1/entries/{entry_id}")
    body = {"markdown": doc.json()["markdown"].replace("An error.", words), "message": "Edit"}
    headers = {**wiki.bearer("ci-bot"), "If-Match": doc.headers["etag"]}
    assert client.put(f"/api/v1/entries/{entry_id}", json=body, headers=headers).status_code == 200


def test_an_entry_change_is_delivered_signed_in_our_json(hooked: Wiki):
    with receiver(secret=SECRET) as rx:
        register(hooked.engine, rx.url, secret=SECRET, events=["entry.changed", "entry.created"])
        edit(hooked)
        wait_for(lambda: rx.received, what="the delivery")
        (got,) = rx.received
        assert got.signature_ok is True and got.answered == 204
        assert got.headers["X-Pitfalls-Event"] == "entry.changed"
        body = json.loads(got.body)
        assert body["event"] == "entry.changed" and body["id"] == "first-entry"
        assert body["title"] == "A sample pitfall about view()"
        assert body["url"] == "https://kb.example.org/entries/first-entry"
        assert body["actor"] == "token:ci-bot" and body["time"].endswith("Z")
        wait_for(lambda: deliveries(hooked.engine)[0].status == "delivered", what="the log")
        (row,) = deliveries(hooked.engine)
        assert row.attempts == 1 and row.status_code == 204 and row.error == ""


def test_a_wrong_secret_fails_the_receivers_check(hooked: Wiki):
    with receiver(secret=SECRET) as rx:
        register(hooked.engine, rx.url, secret="not-the-receivers-secret-at-all")
        edit(hooked)
        wait_for(lambda: rx.received, what="the delivery")
        assert rx.received[0].signature_ok is False and rx.received[0].answered == 401
        wait_for(lambda: deliveries(hooked.engine)[0].status_code == 401, what="the log")
        assert "401" in deliveries(hooked.engine)[0].error


def test_a_receiver_down_then_failing_is_retried_with_backoff_until_delivered(hooked: Wiki):
    port = free_port()  # nothing listens here yet: the first attempts are refused
    register(hooked.engine, f"http://127.0.0.1:{port}/hook")
    edit(hooked)
    wait_for(
        lambda: (
            deliveries(hooked.engine)[0].attempts >= 1
            and deliveries(hooked.engine)[0].status == "pending"
        ),
        what="a refused attempt",
    )
    refused = deliveries(hooked.engine)[0]
    assert "refused the connection" in refused.error and refused.status_code is None
    rx = Receiver(port, answer=500).start()
    try:
        wait_for(lambda: len(rx.received) >= 2, what="two attempts answered 500")
        rx.answer = 200
        wait_for(lambda: deliveries(hooked.engine)[0].status == "delivered", what="delivery")
    finally:
        rx.stop()
    row = deliveries(hooked.engine)[0]
    answers = [r.answered for r in rx.received]
    assert answers.count(200) == 1 and answers[-1] == 200  # delivered once, then no more
    assert row.attempts - len(answers) >= 1  # the refused ones count as attempts too
    # The waits grow: each is at least half of base x 2^(n-1), counted on the receiver's clock.
    base = FAST["webhook_retry_base_ms"] / 1000
    gaps = [b.at - a.at for a, b in zip(rx.received, rx.received[1:], strict=False)]
    first_500 = row.attempts - len(answers) + 1  # the attempt number of the first answered one
    for n, gap in enumerate(gaps, start=first_500):
        expected = min(FAST["webhook_retry_max_ms"] / 1000, base * 2 ** (n - 1))
        assert gap >= expected / 2 - 0.05, (n, gap, expected)
    assert len({r.headers["X-Pitfalls-Delivery"] for r in rx.received}) == 1


def test_the_slack_body_is_text_with_a_link(hooked: Wiki):
    with receiver() as rx:
        register(hooked.engine, rx.url, body_format="slack", events=["entry.archived"])
        client = hooked.anonymous()
        archived = client.delete("/api/v1/entries/second-entry", headers=hooked.bearer("ci-bot"))
        assert archived.status_code in (200, 204), archived.text
        wait_for(lambda: rx.received, what="the delivery")
        (body,) = rx.bodies()
        assert list(body) == ["text"]
        assert body["text"] == (
            "Entry archived: <https://kb.example.org/entries/second-entry|"
            "A sample pitfall about view()> by token:ci-bot"
        )


def test_slack_text_escapes_what_slack_reads_as_markup():
    payload = {"event": "entry.created", "title": "a<b> & <!channel>", "path": "/entries/x"}
    text = json.loads(render_body("slack", payload, public_url="https://kb.example.org"))["text"]
    assert "<!channel>" not in text and "a&lt;b&gt; &amp; &lt;!channel&gt;" in text


UNKNOWN = "ZeroDivisionError: the flux capacitor divided by zero at step 88\n"


def test_the_threshold_event_fires_once_when_a_cluster_reaches_it(make_settings, content_dir):
    (content_dir / "first-entry.md").write_text(entry_text("first-entry"), encoding="utf-8")
    from app.web import create_app

    settings = make_settings(content_dir, inbox=True, **FAST)
    with receiver() as rx, TestClient(create_app(settings)) as client:
        engine = client.app.state.runtime.engine
        with Session(engine) as session:
            events = ["inbox.cluster_new", "inbox.cluster_threshold"]
            add_hook(session, url=rx.url, events=events, threshold=3, actor=CLI)
            session.commit()
        for _ in range(6):
            assert client.post("/api/v1/match", json={"text": UNKNOWN}).json()["known"] is False
        wait_for(lambda: len(rx.received) >= 2, what="two deliveries")
        time.sleep(0.5)  # room for a wrong third one to arrive
        bodies = sorted(rx.bodies(), key=lambda b: b["event"])
    assert [b["event"] for b in bodies] == ["inbox.cluster_new", "inbox.cluster_threshold"]
    new, threshold = bodies
    assert new["count"] == 1 and threshold["count"] == 3 and threshold["threshold"] == 3
    assert threshold["title"].startswith("ZeroDivisionError") and threshold["url"] == "/inbox"


# ---- who may, and what is refused -----------------------------------------------------------


def test_only_admins_see_or_add_webhooks(hooked: Wiki):
    rita, alice = hooked.login("rita"), hooked.login("alice")
    for who in (rita, alice):
        page = who.get("/admin/webhooks")
        assert page.status_code == 403 and "Only admins can do this" in page.text
        assert who.get("/admin/webhooks/deliveries").status_code == 403
        token = csrf_of(who.get("/account").text)
        added = who.post(
            "/admin/webhooks",
            data={"url": "https://x.example", "csrf_token": token, "event:entry.changed": "on"},
        )
        assert added.status_code == 403 and "admins" in added.text
    bot = hooked.anonymous()
    api = bot.post(
        "/api/v1/webhooks",
        json={"url": "https://x.example", "events": ["entry.changed"]},
        headers=hooked.bearer("ci-bot"),
    )
    assert api.status_code == 403 and "API tokens cannot" in api.json()["error"]["message"]
    assert bot.get("/api/v1/webhooks", headers=hooked.bearer("ci-bot")).status_code == 403
    assert bot.get("/api/v1/webhooks").status_code == 401
    assert deliveries(hooked.engine) == [] and test_wiki  # nothing was registered


def test_an_admin_adds_one_the_secret_is_shown_once_then_masked(hooked: Wiki):
    ada = hooked.login("ada")
    assert "/admin/webhooks" in ada.get("/admin").text
    form = {
        "csrf_token": csrf_of(ada.get("/admin/webhooks").text),
        "url": "https://chat.example.org/hook?x=<b>",
        "event:entry.created": "on",
        "event:inbox.cluster_threshold": "on",
        "body_format": "slack",
        "threshold": "25",
        "generate_secret": "on",
    }
    created = ada.post("/admin/webhooks", data=form)
    assert created.status_code == 200, created.text
    secret = created.text.split('<code id="new-secret">')[1].split("</code>")[0]
    assert secret.startswith("whsec_") and len(secret) > 30
    assert "x=&lt;b&gt;" in created.text and "x=<b>" not in created.text  # escaped
    again = ada.get("/admin/webhooks").text
    assert secret not in again and f"…{secret[-4:]}" in again
    (hook,) = ada.get("/admin/webhooks.json").json()
    assert hook["events"] == ["entry.created", "inbox.cluster_threshold"]
    assert hook["threshold"] == 25 and hook["signed"] and secret not in json.dumps(hook)
    removed = ada.post(
        f"/admin/webhooks/{hook['id']}/remove",
        data={"csrf_token": form["csrf_token"]},
        follow_redirects=False,
    )
    assert removed.status_code == 303 and ada.get("/api/v1/webhooks").json() == []


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("ftp://files.example.org/x", "starts with https://"),
        ("javascript:alert(1)", "starts with https://"),
        ("https://", "no host name"),
        ("https://user:pw@chat.example.org/h", "no user name or password"),
        ("https://chat.example.org:99999/h", "port"),
        ("https://chat example.org/h", "spaces"),
        ("https://chat.example.org/h#frag", "after '#'"),
        ("http://0.0.0.0/h", "not an address"),
        ("", "Give the address"),
    ],
)
def test_bad_addresses_are_refused_with_a_sentence(url: str, says: str):
    with pytest.raises(WebhookError) as refused:
        check_url(url)
    assert says in str(refused.value) and str(refused.value).endswith(".")


def test_a_refused_form_shows_the_sentence_escaped(hooked: Wiki):
    ada = hooked.login("ada")
    token = csrf_of(ada.get("/admin/webhooks").text)
    refused = ada.post(
        "/admin/webhooks",
        data={"csrf_token": token, "url": "gopher://<x>", "event:entry.changed": "on"},
    )
    assert refused.status_code == 422 and "starts with https://" in refused.text
    assert "<x>" not in refused.text


# ---- the queue: bounded, claimed once, pruned; the CLI ------------------------------------------


def test_a_full_queue_skips_new_events_with_a_log_line(engine, caplog):
    for n in range(3):
        register(engine, f"https://hook{n}.example.org/h")
    with Session(engine) as session, caplog.at_level(logging.WARNING):
        queued = enqueue_entry_event(
            session, action="update", entry_id="x", title="X", actor="ada", max_pending=2
        )
        session.commit()
    assert queued == 2 and len(deliveries(engine)) == 2
    assert "webhook queue full" in caplog.text


def test_two_workers_deliver_each_row_once(engine):
    with receiver() as rx:
        register(engine, rx.url)
        with Session(engine) as session:
            for n in range(30):
                enqueue_entry_event(
                    session, action="update", entry_id=f"e{n}", title="T", actor="ada"
                )
            session.commit()
        rules = DeliveryRules(timeout_s=3)
        workers = [
            threading.Thread(target=lambda: [deliver_due(engine, rules) for _ in range(5)])
            for _ in range(3)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        ids = [r.headers["X-Pitfalls-Delivery"] for r in rx.received]
    assert len(ids) == 30 and len(set(ids)) == 30
    assert all(row.status == "delivered" and row.attempts == 1 for row in deliveries(engine))


def test_a_held_receiver_delays_only_its_own_webhook(engine):
    with receiver(hold=threading.Event()) as slow, receiver() as quick:
        register(engine, slow.url)
        register(engine, quick.url)
        with Session(engine) as session:
            enqueue_entry_event(session, action="update", entry_id="e", title="T", actor="a")
            session.commit()
        rounds = threading.Thread(target=deliver_due, args=(engine, DeliveryRules(timeout_s=20)))
        rounds.start()
        assert slow.arrived.wait(10)
        wait_for(lambda: quick.received, what="the other webhook's delivery")
        assert slow.received == []  # still held while the other was delivered
        assert slow.hold is not None
        slow.hold.set()
        rounds.join()
    assert [row.status for row in deliveries(engine)] == ["delivered", "delivered"]


def test_the_last_attempt_marks_it_failed_and_the_log_is_pruned(engine):
    register(engine, f"http://127.0.0.1:{free_port()}/h")
    with Session(engine) as session:
        for n in range(5):
            enqueue_entry_event(session, action="update", entry_id=f"e{n}", title="T", actor="a")
        session.commit()
    rules = DeliveryRules(timeout_s=1, max_attempts=1, keep_rows=3)
    done = deliver_due(engine, rules)
    assert done.failed == 5 and done.pruned == 2
    rows = deliveries(engine)
    assert [r.payload["id"] for r in rows] == ["e2", "e3", "e4"]  # the oldest went
    assert all(r.status == "failed" and "refused" in r.error for r in rows)


def test_a_redirect_is_not_followed_and_says_where_it_pointed(engine):
    with receiver() as elsewhere, receiver(answer=302) as rx:
        rx.location = elsewhere.url
        register(engine, rx.url)
        with Session(engine) as session:
            enqueue_entry_event(session, action="update", entry_id="e", title="T", actor="a")
            session.commit()
        done = deliver_due(engine, DeliveryRules(timeout_s=3))
        assert done.retried == 1 and elsewhere.received == []
    (row,) = deliveries(engine)
    assert row.status == "pending" and row.status_code == 302
    assert "redirects are not followed" in row.error and elsewhere.url in row.error


def test_an_admin_uses_the_api_with_the_session_and_its_csrf_token(hooked: Wiki):
    ada = hooked.login("ada")
    headers = {"X-CSRF-Token": csrf_of(ada.get("/admin/webhooks").text)}
    body = {"url": "https://chat.example.org/h", "events": ["entry.created"], "secret": SECRET}
    created = ada.post("/api/v1/webhooks", json=body, headers=headers)
    assert created.status_code == 201 and created.json()["secret"] == SECRET
    listed = ada.get("/api/v1/webhooks").json()
    assert SECRET not in json.dumps(listed) and listed[0]["secret_hint"] == "…" + SECRET[-4:]
    bad = ada.post("/api/v1/webhooks", json={**body, "events": ["entry.deleted"]}, headers=headers)
    assert bad.status_code == 422 and "events.0: Input should be 'entry.created'" in bad.text
    hook_id = created.json()["id"]
    assert ada.delete(f"/api/v1/webhooks/{hook_id}", headers=headers).status_code == 204
    missing = ada.delete(f"/api/v1/webhooks/{hook_id}", headers=headers)
    assert missing.status_code == 404 and "no webhook" in missing.json()["error"]["message"]
    assert ada.get("/api/v1/webhooks/deliveries").json() == []
    assert ada.delete(f"/api/v1/webhooks/{2**64}", headers=headers).status_code == 422


def test_a_receiver_that_drips_its_answer_is_cut_off_at_the_deadline():
    """Each byte comes well within a socket timeout, but the whole would take 20 s: the
    attempt ends at its deadline while the receiver is still dripping."""
    import socket

    from app.webhooks.delivery import post

    listener = socket.create_server(("127.0.0.1", 0))
    dripping, done = threading.Event(), threading.Event()

    def drip() -> None:
        connection, _ = listener.accept()
        with connection:
            connection.recv(65536)
            connection.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            dripping.set()
            try:
                for _ in range(100):
                    connection.sendall(b"x")
                    time.sleep(0.2)
            except OSError:
                pass
        done.set()

    threading.Thread(target=drip, daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}/h"
    attempt = post(url, b"{}", {"Content-Type": "application/json"}, timeout_s=1)
    assert dripping.is_set() and not done.is_set()  # cut off before the receiver was through
    assert attempt.status_code is None and "within 1 s" in attempt.error
    listener.close()


def test_retry_waits_grow_and_stay_capped():
    rules = DeliveryRules(retry_base_s=10, retry_max_s=100)
    waits = [retry_delay_s(n, rules) for n in range(1, 8)]
    for n, wait in enumerate(waits, start=1):
        cap = min(100, 10 * 2 ** (n - 1))
        assert cap / 2 <= wait <= cap


def test_the_cli_adds_lists_delivers_and_removes(tmp_path, monkeypatch, content_dir):
    (content_dir / "first-entry.md").write_text(entry_text("first-entry"), encoding="utf-8")
    monkeypatch.setenv("PITFALLS_DATA_DIR", str(tmp_path / "cli-data"))
    monkeypatch.setenv("PITFALLS_CONTENT_DIR", str(content_dir))
    from app.cli import cli

    runner = CliRunner()
    with receiver() as rx:
        added = runner.invoke(
            cli, ["webhooks", "add", rx.url, "--event", "entry.created", "--generate-secret"]
        )
        assert added.exit_code == 0, added.output
        secret = added.stdout.strip().splitlines()[-1]
        assert secret.startswith("whsec_")
        listed = runner.invoke(cli, ["webhooks", "list"])
        assert rx.url in listed.stdout and secret not in listed.stdout
        assert f"…{secret[-4:]}" in listed.stdout
        assert runner.invoke(cli, ["ingest"]).exit_code == 0  # creates first-entry
        rx.secret = secret
        sent = runner.invoke(cli, ["webhooks", "deliver"])
        assert sent.exit_code == 0, sent.output
        assert "delivered 1" in sent.stdout
        assert rx.received[0].signature_ok is True
        assert json.loads(rx.received[0].body)["id"] == "first-entry"
        bad = runner.invoke(cli, ["webhooks", "add", "ftp://x.example.org"])
        assert bad.exit_code == 1 and "starts with https://" in bad.output
        removed = runner.invoke(cli, ["webhooks", "remove", "1"])
        assert removed.exit_code == 0 and runner.invoke(cli, ["webhooks", "list"]).stdout == ""


# ---- a real server: a slow receiver holds no request ------------------------------------------


@pytest.mark.slow
def test_a_slow_receiver_does_not_hold_a_save(tmp_path: Path):
    settings = {"PITFALLS_WEBHOOK_POLL_INTERVAL_MS": "100", "PITFALLS_WEBHOOK_TIMEOUT_MS": "20000"}
    hold = threading.Event()
    with (
        running_server(tmp_path / "clone", settings=settings) as (base, folder),
        receiver(hold=hold) as rx,
    ):
        token = write_token(folder, settings)
        entry = f"{base}/api/v1/entries/{ENTRY}"

        def save(words: str) -> float:
            with urllib.request.urlopen(entry, timeout=30) as answer:
                markdown, etag = json.load(answer)["markdown"], answer.headers["ETag"]
            changed = markdown.replace("## Fix", f"{words}\n\n## Fix", 1)
            request = urllib.request.Request(
                entry,
                data=json.dumps({"markdown": changed, "message": words}).encode(),
                method="PUT",
                headers={
                    "Authorization": f"Bearer {token}",
                    "If-Match": etag,
                    "Content-Type": "application/json",
                },
            )
            started = time.perf_counter()
            with urllib.request.urlopen(request, timeout=30) as answer:
                assert answer.status == 200
            return time.perf_counter() - started

        baseline = sorted(save(f"Baseline edit {n}.") for n in range(3))[1]  # no webhook yet
        env = {k: v for k, v in os.environ.items() if not k.startswith("PITFALLS_")}
        added = subprocess.run(
            [pitfalls_command(), "webhooks", "add", rx.url, "--event", "entry.changed"],
            cwd=folder,
            env={**env, **settings},
            capture_output=True,
            text=True,
        )
        assert added.returncode == 0, added.stderr
        save("The first edit with a webhook.")
        assert rx.arrived.wait(20), "the worker did not send the first delivery"
        # The receiver now holds the worker's request open; saves are answered regardless.
        while_held = sorted(save(f"An edit while the receiver sleeps {n}.") for n in range(3))
        assert not hold.is_set() and rx.received == []  # still held: nothing answered yet
        # Work counted against the same server's own baseline, not a wall clock.
        assert while_held[1] < baseline * 10 + 0.5, (baseline, while_held)
        hold.set()
        wait_for(lambda: len(rx.received) >= 4, timeout=30, what="the held deliveries")
    print(
        f"save (median of 3): {baseline * 1000:.1f} ms without a webhook, "
        f"{while_held[1] * 1000:.1f} ms while the receiver held its delivery"
    )


# A resolver that never answers: inside bubblewrap, a fresh network namespace whose
# /etc/resolv.conf names 127.0.0.1, where a UDP socket takes every question and answers none.
_SILENT_RESOLVER = """
import json, socket, sys, threading, time
silent = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
silent.bind(("127.0.0.1", 53))
threading.Thread(target=lambda: [silent.recvfrom(4096) for _ in iter(int, 1)], daemon=True).start()
from app.webhooks.delivery import post
started = time.monotonic()
attempt = post("https://hooks.example.org/x", b"{}", {}, timeout_s=0.5)
took = time.monotonic() - started
started = time.monotonic()
try:
    socket.getaddrinfo("hooks.example.org", 443)
except OSError:
    pass
print(json.dumps({"post_s": took, "error": attempt.error, "resolver_s": time.monotonic() - started}))
"""


@pytest.mark.slow  # starts a process in a sandbox of its own
def test_a_host_name_that_never_resolves_is_cut_off_at_the_deadline(tmp_path: Path):
    """The C resolver has no timeout of its own: a delivery must not wait for it."""
    import shutil
    import sys

    from tests.conftest import REPO, require

    bwrap = shutil.which("bwrap")
    require(bwrap is not None, "bubblewrap is not installed (apt-get install bubblewrap)")
    assert bwrap is not None
    resolv = tmp_path / "resolv.conf"
    resolv.write_text("nameserver 127.0.0.1\noptions timeout:2 attempts:2\n")
    command = [bwrap, "--unshare-user", "--uid", "0", "--unshare-net", "--bind", "/", "/"]
    command += ["--ro-bind", str(resolv), "/etc/resolv.conf", "--dev", "/dev", "--proc", "/proc"]
    command += ["--chdir", str(REPO), sys.executable, "-c", _SILENT_RESOLVER]
    run = subprocess.run(command, capture_output=True, text=True, timeout=120)
    require(run.returncode == 0 or "bwrap:" not in run.stderr, f"bubblewrap refused: {run.stderr}")
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout)
    # The baseline, measured in the same run: the resolver itself waits seconds (2 s x 2 tries).
    assert result["resolver_s"] >= 3, result
    assert result["post_s"] < result["resolver_s"] / 2, result
    assert result["error"] == "The host name 'hooks.example.org' was not resolved within 0.5 s."
