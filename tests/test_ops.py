"""The operator's view: Prometheus metrics, request ids in responses and in JSON log lines."""

import json
import time
import urllib.request

import pytest
from fastapi.testclient import TestClient

from tests.conftest import running_server
from tests.prepared import prepare_data_dir


def _samples(text: str, name: str) -> dict[str, float]:
    out = {}
    for line in text.splitlines():
        if line.startswith(name + "{") or line.startswith(name + " "):
            key, value = line.rsplit(" ", 1)
            out[key] = float(value)
    return out


def test_metrics_count_requests_by_route_and_report_the_index(real_client: TestClient):
    for _ in range(3):
        assert real_client.get("/api/v1/search?q=cuda").status_code == 200
    assert real_client.get("/entries/no-such-entry").status_code == 404
    answer = real_client.post("/api/v1/match", json={"text": "RuntimeError: CUDA out of memory."})
    assert answer.status_code == 200
    text = real_client.get("/metrics").text
    requests = _samples(text, "pitfalls_http_requests_total")
    key = 'pitfalls_http_requests_total{method="GET",route="/api/v1/search",status="200"}'
    assert requests[key] >= 3
    missing = 'pitfalls_http_requests_total{method="GET",route="/entries/{entry_id}",status="404"}'
    assert requests[missing] >= 1  # by template, never by the id asked for
    assert not any("no-such-entry" in k for k in requests)
    assert _samples(text, "pitfalls_search_duration_seconds_count")
    assert _samples(text, "pitfalls_match_duration_seconds_count")
    health = real_client.get("/api/v1/health").json()
    assert _samples(text, "pitfalls_entries")["pitfalls_entries"] == health["entries"]
    assert _samples(text, "pitfalls_index_lag_changes")["pitfalls_index_lag_changes"] == 0


def test_metrics_follow_read_access(make_settings, repo_content, tmp_path_factory):
    from app.web import create_app

    settings = make_settings(repo_content, public_read=False)
    prepare_data_dir(settings, tmp_path_factory)
    with TestClient(create_app(settings)) as client:
        assert client.get("/metrics", follow_redirects=False).status_code in (401, 303)
        assert client.get("/api/v1/health").status_code == 200  # load balancers need no token


def test_every_response_carries_a_request_id(real_client: TestClient):
    given = real_client.get("/api/v1/health", headers={"X-Request-ID": "proxy-42.abc"})
    assert given.headers["x-request-id"] == "proxy-42.abc"
    hostile = real_client.get("/api/v1/health", headers={"X-Request-ID": "a b\tc<script>"})
    assert hostile.headers["x-request-id"] not in ("a b\tc<script>", "")
    fresh = real_client.get("/no-such-page")
    assert len(fresh.headers["x-request-id"]) == 32


@pytest.mark.e2e
def test_json_log_lines_carry_the_request_id(tmp_path):
    with running_server(tmp_path / "clone", settings={"PITFALLS_LOG_FORMAT": "json"}) as (base, _):
        request = urllib.request.Request(
            base + "/api/v1/search?q=cuda", headers={"X-Request-ID": "trace-me-123"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.headers["X-Request-ID"] == "trace-me-123"
        log = next(tmp_path.glob("serve-clone-*.log"))
        lines: list[str] = []
        for _ in range(50):  # the line is written as the response ends
            lines = [line for line in log.read_text().splitlines() if "trace-me-123" in line]
            if lines:
                break
            time.sleep(0.1)
    records = [json.loads(line) for line in lines]
    assert records and records[0]["request_id"] == "trace-me-123"
    assert records[0]["status"] == 200 and "/api/v1/search" in records[0]["message"]
    for line in log.read_text().splitlines():  # every line the server wrote is one JSON object
        if line.startswith("{"):
            json.loads(line)
