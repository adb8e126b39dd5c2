"""The inbox of unmatched errors: off stores nothing, on stores only redacted errors, clustered."""

import random

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import inspect, text

from tests import test_wiki
from tests.conftest import entry_text

pytestmark = pytest.mark.both_databases

SECRET_PASTE = (
    "Traceback (most recent call last):\n"
    '  File "/home/alice/secret-project/train.py", line 12, in <module>\n'
    "    client.connect()\n"
    "ConnectionError: login as alice.smith@example.com with token=pft_Zx81mQ2kLr9vTt55 "
    "to gpu-node-17.corp.internal (10.2.3.44) failed, see /home/alice/secret-project/log.txt\n"
)
MARKERS = ["alice", "example.com", "pft_Zx81mQ2kLr9vTt55", "gpu-node-17", "10.2.3.44"]


def _app(make_settings, content_dir, **overrides):
    for entry_id in ("first-entry", "second-entry"):
        (content_dir / f"{entry_id}.md").write_text(entry_text(entry_id), encoding="utf-8")
    from app.web import create_app

    return create_app(make_settings(content_dir, **overrides))


def _every_text_in_the_database(engine) -> str:
    """Every row of every table as text: what a thief of the database would read."""
    out = []
    with engine.connect() as connection:
        for table in inspect(connection).get_table_names():
            for row in connection.execute(text(f'SELECT * FROM "{table}"')):
                out.append(" ".join(str(value) for value in row))
    return "\n".join(out)


def test_with_the_inbox_off_nothing_of_a_paste_is_stored(make_settings, content_dir):
    with TestClient(_app(make_settings, content_dir)) as client:
        assert client.post("/api/v1/match", json={"text": SECRET_PASTE}).json()["known"] is False
        client.post("/match", data={"text": SECRET_PASTE})
        stored = _every_text_in_the_database(client.app.state.runtime.engine)
    assert "ConnectionError" not in stored and not any(m in stored for m in MARKERS)


def test_with_the_inbox_on_only_the_redacted_error_is_kept(make_settings, content_dir):
    with TestClient(_app(make_settings, content_dir, inbox=True)) as client:
        answer = client.post("/api/v1/match", json={"text": SECRET_PASTE}).json()
        assert answer["known"] is False
        stored = _every_text_in_the_database(client.app.state.runtime.engine)
        wiki = test_wiki.Wiki(client, content_dir)
        clusters = client.get("/api/v1/inbox", headers=wiki.bearer("ci-bot")).json()
        page = wiki.login("alice").get("/inbox").text
        # A GET of the answer (a link, a crawler) counts nothing; the paste posted again does.
        client.get("/match", params={"text": SECRET_PASTE})
        client.post("/api/v1/match", json={"text": SECRET_PASTE})
        [recounted] = client.get("/api/v1/inbox", headers=wiki.bearer("ci-bot")).json()
    assert "ConnectionError" in stored
    leaked = [m for m in MARKERS if m in stored]
    assert not leaked, leaked
    assert "client.connect()" not in stored and "secret-project/train.py" not in stored
    [cluster] = clusters
    assert cluster["fingerprint"] == answer["fingerprint"] and cluster["count"] == 1
    assert recounted["count"] == 2
    assert "<email>" in cluster["examples"][0] and "<secret>" in cluster["examples"][0]
    assert "Start an entry" in page and "/entries/new?type=ConnectionError" in page


def test_fifty_pastes_of_five_errors_make_five_clusters(make_settings, content_dir):
    shapes = [
        "ValueError: bucket {a} holds {b} shards but rank {c} asked for shard {d}",
        "RuntimeError: stage {a} of the pipeline produced {b} outputs, expected {c}",
        "KeyError: 'layer_{a}.weight'",
        "TypeError: cannot fold tensor of shape ({a}, {b}) into {c} groups",
        "OSError: [Errno 28] No space left on device: '/scratch/run{a}/ckpt_{b}.pt'",
    ]
    rng = random.Random(7)
    allowance = {"inbox_per_client_per_hour": 50}  # one client sends all fifty
    with TestClient(_app(make_settings, content_dir, inbox=True, **allowance)) as client:
        for n in range(50):
            values = {k: rng.randint(1, 9999) for k in "abcd"}
            paste = shapes[n % 5].format(**values)
            assert client.post("/api/v1/match", json={"text": paste}).json()["known"] is False
        wiki = test_wiki.Wiki(client, content_dir)
        clusters = client.get("/api/v1/inbox", headers=wiki.bearer("ci-bot")).json()
    assert len(clusters) == 5 and sorted(c["count"] for c in clusters) == [10] * 5
    assert all(2 <= len(c["examples"]) <= 10 for c in clusters)


WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta"]


def _inbox(wiki: test_wiki.Wiki) -> list[dict]:
    return wiki.client.get("/api/v1/inbox", headers=wiki.bearer("ci-bot")).json()


def test_one_client_adds_at_most_its_hourly_allowance(make_settings, content_dir):
    app = _app(make_settings, content_dir, inbox=True, inbox_per_client_per_hour=3)
    with TestClient(app, client=("203.0.113.1", 5000)) as flooder:
        wiki = test_wiki.Wiki(flooder, content_dir)
        for word in WORDS[:6]:  # six new errors from one address: the answers still come
            answer = flooder.post("/api/v1/match", json={"text": f"ValueError: flood {word}"})
            assert answer.status_code == 200 and answer.json()["known"] is False
        other = TestClient(app, client=("198.51.100.2", 5000))
        other.post("/api/v1/match", json={"text": "KeyError: 'another person's error'"})
        # A token is a client by its name, whatever address it comes from.
        for word in WORDS[:4]:
            flooder.post(
                "/api/v1/match",
                json={"text": f"OSError: bot error {word}"},
                headers=wiki.bearer("ci-bot"),
            )
        messages = [c["message"] for c in _inbox(wiki)]
    assert sum("flood" in m for m in messages) == 3
    assert "'another person's error'" in messages
    assert sum("bot error" in m for m in messages) == 3


def test_a_full_inbox_makes_room_by_dropping_the_least_recently_seen(make_settings, content_dir):
    app = _app(make_settings, content_dir, inbox=True, inbox_max_clusters=3)
    errors = [f"ValueError: distinct failure {word}" for word in WORDS[:3]]
    with TestClient(app) as client:
        wiki = test_wiki.Wiki(client, content_dir)
        for error in errors:
            client.post("/api/v1/match", json={"text": error})
        client.post("/api/v1/match", json={"text": errors[0]})  # alpha seen again: beta oldest
        client.post("/api/v1/match", json={"text": "ValueError: distinct failure delta"})
        kept = {c["message"]: c["count"] for c in _inbox(wiki)}
        with client.app.state.runtime.engine.connect() as connection:
            rows = connection.execute(text("SELECT message FROM inbox_example")).scalars()
            examples = sorted(rows)
    assert kept == {
        "distinct failure alpha": 2,
        "distinct failure gamma": 1,
        "distinct failure delta": 1,
    }
    assert examples == sorted(
        ["distinct failure alpha", "distinct failure gamma", "distinct failure delta"]
    )
