"""Did the fix work? Fingerprints, reports through the API and the form, rates on the pages."""

import json
import re
import time

import pytest
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from app.fingerprints import fingerprint_of
from app.settings import load_settings
from tests import test_wiki
from tests.conftest import entry_text
from tests.test_wiki import csrf_of

pytestmark = pytest.mark.both_databases

wiki = test_wiki.wiki


def test_fingerprints_are_stable_across_values_and_differ_across_errors():
    small = fingerprint_of(
        "torch.OutOfMemoryError",
        "CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 7.79 GiB total capacity; "
        "6.80 GiB already allocated; 12.00 MiB free; 7.00 GiB reserved in total by PyTorch)",
    )
    large = fingerprint_of(
        "OutOfMemoryError",
        "CUDA out of memory. Tried to allocate 1.50 GiB (GPU 3; 23.70 GiB total capacity; "
        "20.10 GiB already allocated; 512.00 MiB free; 21.00 GiB reserved in total by PyTorch)",
    )
    assert small == large and re.fullmatch(r"[0-9a-f]{16}", small)
    shapes = [
        fingerprint_of("RuntimeError", f"shape '[{a}, -1]' is invalid for input of size {b}")
        for a, b in ((32, 1000), (8, 77))
    ]
    assert shapes[0] == shapes[1]
    assert small != fingerprint_of("RuntimeError", "CUDA error: device-side assert triggered")
    assert small != fingerprint_of("ValueError", "CUDA out of memory. Tried to allocate 20 MiB")


def _answer(client: TestClient, n: int) -> dict:
    text = f"RuntimeError: failure in first-entry number {n}"
    answer = client.post("/api/v1/match", json={"text": text}).json()
    assert answer["known"] and answer["matches"][0]["id"] == "first-entry"
    return answer


def test_reports_make_rates_in_the_answer_the_entry_json_and_page(wiki):
    headers = wiki.bearer("ci-bot")
    first = _answer(wiki.client, 1)
    assert first["fingerprint"] == _answer(wiki.client, 99)["fingerprint"]  # other values
    report = {
        "fingerprint": first["fingerprint"],
        "id": "first-entry",
        "worked": True,
        "answer_token": first["answer_token"],
    }
    made = wiki.client.post("/api/v1/outcomes", json=report, headers=headers)
    assert made.status_code == 200, made.text
    assert made.json()["for_this_error"] == {"worked": 1, "reports": 1, "failed_notes": []}
    again = wiki.client.post("/api/v1/outcomes", json={**report, "worked": False}, headers=headers)
    assert again.json()["replaced"] and again.json()["for_this_error"]["reports"] == 1
    anonymous = TestClient(wiki.app, client=("203.0.113.7", 5000))
    made = anonymous.post(
        "/api/v1/outcomes",
        json={**report, "worked": False, "note": "set max_split_size_mb, no change"},
    )
    assert made.status_code == 200, made.text
    stats = made.json()["for_this_entry"]
    assert stats["worked"] == 0 and stats["reports"] == 2
    assert stats["failed_notes"] == ["set max_split_size_mb, no change"]
    matched = _answer(wiki.client, 5)["matches"][0]
    assert matched["outcomes"]["reports"] == 2 and matched["outcomes_all"]["reports"] == 2
    details = wiki.client.get("/api/v1/entries/first-entry").json()
    assert details["outcomes"]["reports"] == 2
    page = wiki.client.get("/entries/first-entry").text
    assert "Fixed it for 0 of 2" in page and "set max_split_size_mb, no change" in page


def test_reports_are_refused_clearly(wiki):
    headers = wiki.bearer("ci-bot")
    answer = _answer(wiki.client, 1)
    fingerprint, token = answer["fingerprint"], answer["answer_token"]
    long_note = {"worked": True, "answer_token": token, "note": "x" * 2001}
    cases = [
        ({"fingerprint": "not-hex", "id": "first-entry", "worked": True}, 422),
        # (a token is required by the schema: without one this is 422 before the id is read)
        (
            {
                "fingerprint": fingerprint,
                "id": "no-such-entry",
                "worked": True,
                "answer_token": token,
            },
            404,
        ),
        ({"fingerprint": fingerprint, "id": "first-entry", "answer_token": token}, 422),
        ({"fingerprint": fingerprint, "id": "first-entry", "worked": True}, 422),  # no token
        ({"fingerprint": fingerprint, "id": "first-entry", **long_note}, 422),
    ]
    for body, status in cases:
        answer = wiki.client.post("/api/v1/outcomes", json=body, headers=headers)
        assert answer.status_code == status, (body, answer.text)
        assert answer.json()["error"]["message"]
    as_text = wiki.anonymous().post(
        "/api/v1/outcomes",
        content=json.dumps({"fingerprint": fingerprint, "id": "first-entry", "worked": True}),
        headers={"Content-Type": "text/plain"},
    )
    assert as_text.status_code == 422  # what another site's form could send


def _token_in(page: str) -> str:
    return re.search(r'name="answer_token" value="([^"]+)"', page).group(1)


def test_the_form_needs_its_csrf_token_and_the_answers_token(wiki):
    fingerprint = _answer(wiki.client, 1)["fingerprint"]
    browser = TestClient(wiki.app, client=("198.51.100.9", 6000))
    page = browser.post("/match", data={"text": "RuntimeError: failure in first-entry number 4"})
    assert page.status_code == 200 and 'action="/outcomes"' in page.text
    token, answer_token = csrf_of(page.text), _token_in(page.text)
    link = f'href="/entries/first-entry?error={fingerprint}&amp;answer={answer_token}"'
    assert link in page.text  # the entry page, opened from the answer, asks too
    entry_page = browser.get(f"/entries/first-entry?error={fingerprint}&answer={answer_token}")
    assert 'action="/outcomes"' in entry_page.text and f'value="{fingerprint}"' in entry_page.text
    assert _token_in(entry_page.text) == answer_token
    form = {"fingerprint": fingerprint, "id": "first-entry", "worked": "yes"}
    refused = browser.post(
        "/outcomes", data={**form, "answer_token": answer_token}, follow_redirects=False
    )
    assert refused.status_code == 403  # no CSRF token: another site's form
    forged = browser.post("/outcomes", data={**form, "csrf_token": token}, follow_redirects=False)
    assert forged.status_code == 422 and "answer_token" in forged.text  # no answer's token
    sent = browser.post(
        "/outcomes",
        data={**form, "csrf_token": token, "answer_token": answer_token},
        follow_redirects=False,
    )
    assert sent.status_code == 303
    assert sent.headers["location"] == "/entries/first-entry?reported=1#outcomes"


def _errors_of(entry_id: str, count: int) -> list[str]:
    """`count` pastes that `entry_id` matches, each a different error (its own fingerprint)."""
    words = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "iota"]
    return [f"RuntimeError: failure in {entry_id} number {n} ({words[n]})" for n in range(count)]


def test_a_report_counts_only_for_an_entry_an_answer_gave_for_that_error(wiki):
    answer = _answer(wiki.client, 1)
    fingerprint, token = answer["fingerprint"], answer["answer_token"]
    other = wiki.client.post(
        "/api/v1/match", json={"text": "RuntimeError: failure in second-entry number 3"}
    ).json()
    anonymous = TestClient(wiki.app, client=("203.0.113.50", 5000))
    forged = [
        # any 16 hex digits, no token: the audit's "82 of 82"
        {"fingerprint": "0123456789abcdef", "id": "first-entry", "worked": True},
        # a token of a real answer, for an entry it did not give
        {"fingerprint": fingerprint, "id": "second-entry", "worked": True, "answer_token": token},
        # a token for another error
        {
            "fingerprint": fingerprint,
            "id": "first-entry",
            "worked": True,
            "answer_token": other["answer_token"],
        },
        # a token altered by hand
        {
            "fingerprint": fingerprint,
            "id": "first-entry",
            "worked": True,
            "answer_token": token[:-2] + ("AA" if token[-2:] != "AA" else "BB"),
        },
    ]
    for body in forged:
        refused = anonymous.post("/api/v1/outcomes", json=body)
        assert refused.status_code in (403, 422), (body, refused.text)
        assert "answer" in refused.json()["error"]["message"]
    assert wiki.client.get("/api/v1/entries/first-entry").json()["outcomes"]["reports"] == 0
    assert wiki.client.get("/api/v1/entries/second-entry").json()["outcomes"]["reports"] == 0


def test_an_old_answer_token_is_refused(wiki):
    from app.answer_tokens import AnswerSigner

    fingerprint = _answer(wiki.client, 1)["fingerprint"]
    rules = wiki.app.state.runtime.report_rules
    days = wiki.app.state.runtime.settings.answer_token_days
    old = AnswerSigner(rules.signer.secret, max_age_s=rules.signer.max_age_s).issue(
        fingerprint=fingerprint,
        entry_ids=["first-entry"],
        issued_at=time.time() - (days + 1) * 86400,
    )
    refused = wiki.client.post(
        "/api/v1/outcomes",
        json={"fingerprint": fingerprint, "id": "first-entry", "worked": True, "answer_token": old},
    )
    assert refused.status_code == 403 and f"older than {days} days" in refused.text


def test_every_voter_is_throttled_per_hour_tokens_too(make_settings, content_dir):
    for entry_id in ("first-entry", "second-entry", "third-entry"):
        (content_dir / f"{entry_id}.md").write_text(entry_text(entry_id), encoding="utf-8")
    from app.web import create_app

    settings = make_settings(content_dir, reports_per_hour=3, anonymous_reports_per_hour=2)
    with TestClient(create_app(settings)) as client:
        wiki = test_wiki.Wiki(client, content_dir)
        answers = [
            client.post("/api/v1/match", json={"text": text}).json()
            for text in _errors_of("first-entry", 4)
        ]
        assert len({a["fingerprint"] for a in answers}) == 4
        reports = [
            {
                "fingerprint": a["fingerprint"],
                "id": "first-entry",
                "worked": True,
                "answer_token": a["answer_token"],
            }
            for a in answers
        ]

        def statuses(**options) -> list[int]:
            return [client.post("/api/v1/outcomes", json=r, **options).status_code for r in reports]

        by_token = statuses(headers=wiki.bearer("ci-bot"))
        again = client.post("/api/v1/outcomes", json=reports[0], headers=wiki.bearer("ci-bot"))
        by_address = statuses()
    assert by_token == [200, 200, 200, 429]
    assert again.status_code == 200 and again.json()["replaced"]  # a change of mind is free
    assert by_address == [200, 200, 429, 429]


def test_x_forwarded_for_is_trusted_only_from_the_proxies_named(make_settings, content_dir):
    """Through uvicorn's own middleware, as `pitfalls serve` sets it up: by default a client on
    loopback naming another address in X-Forwarded-For is still counted as itself."""
    from uvicorn.config import Config

    from app.cli.serving import proxy_options
    from app.models import Outcome
    from app.web import create_app

    (content_dir / "first-entry.md").write_text(entry_text("first-entry"), encoding="utf-8")
    assert load_settings().forwarded_allow_ips == ""  # the default trusts nobody
    for trusted in ("", "127.0.0.1"):  # the same data dir: the second adds to the first
        settings = make_settings(content_dir, forwarded_allow_ips=trusted)
        app = create_app(settings)
        config = Config(app, log_config=None, **proxy_options(settings))
        config.load()
        with TestClient(config.loaded_app, client=("127.0.0.1", 5000)) as client:
            answer = _answer(client, 1)
            report = {
                "fingerprint": answer["fingerprint"],
                "id": "first-entry",
                "worked": True,
                "answer_token": answer["answer_token"],
            }
            spoofed = {"X-Forwarded-For": "203.0.113.77"}
            made = client.post("/api/v1/outcomes", json=report, headers=spoofed)
            assert made.status_code == 200, made.text
            with Session(app.state.runtime.engine) as session:
                voters = session.exec(select(Outcome.voter).order_by(Outcome.id)).all()
            assert voters == ["addr:127.0.0.1", "addr:203.0.113.77"][: len(voters)]
    assert len(voters) == 2
