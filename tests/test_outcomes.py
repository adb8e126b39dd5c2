"""Did the fix work? Fingerprints, reports through the API and the form, rates on the pages."""

import json
import re

import pytest
from fastapi.testclient import TestClient

from app.fingerprints import fingerprint_of
from app.outcomes import ANONYMOUS_PER_HOUR
from tests import test_wiki
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
    report = {"fingerprint": first["fingerprint"], "id": "first-entry", "worked": True}
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
    fingerprint = _answer(wiki.client, 1)["fingerprint"]
    cases = [
        ({"fingerprint": "not-hex", "id": "first-entry", "worked": True}, 422),
        ({"fingerprint": fingerprint, "id": "no-such-entry", "worked": True}, 404),
        ({"fingerprint": fingerprint, "id": "first-entry"}, 422),
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


def test_the_form_needs_its_csrf_token_and_anonymous_reports_are_throttled(wiki):
    fingerprint = _answer(wiki.client, 1)["fingerprint"]
    browser = TestClient(wiki.app, client=("198.51.100.9", 6000))
    page = browser.post("/match", data={"text": "RuntimeError: failure in first-entry number 4"})
    assert page.status_code == 200 and 'action="/outcomes"' in page.text
    token = csrf_of(page.text)
    link = f'href="/entries/first-entry?error={fingerprint}"'
    assert link in page.text  # the entry page, opened from the answer, asks too
    entry_page = browser.get(f"/entries/first-entry?error={fingerprint}").text
    assert 'action="/outcomes"' in entry_page and f'value="{fingerprint}"' in entry_page
    form = {"fingerprint": fingerprint, "id": "first-entry", "worked": "yes"}
    refused = browser.post("/outcomes", data=form, follow_redirects=False)
    assert refused.status_code == 403  # no CSRF token: another site's form
    sent = browser.post("/outcomes", data={**form, "csrf_token": token}, follow_redirects=False)
    assert sent.status_code == 303
    assert sent.headers["location"] == "/entries/first-entry?reported=1#outcomes"
    # One address without a login: every report counts against its hourly allowance.
    statuses = []
    for n in range(ANONYMOUS_PER_HOUR):
        other = f"{n:016x}"
        body = {**form, "fingerprint": other, "csrf_token": token}
        statuses.append(browser.post("/outcomes", data=body, follow_redirects=False).status_code)
    assert statuses[:-1] == [303] * (ANONYMOUS_PER_HOUR - 1) and statuses[-1] == 429
    assert (
        wiki.client.post(  # a token is not throttled
            "/api/v1/outcomes",
            json={"fingerprint": "f" * 16, "id": "first-entry", "worked": True},
            headers=wiki.bearer("ci-bot"),
        ).status_code
        == 200
    )
