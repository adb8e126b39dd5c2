"""Degraded modes say so: the database down, the disk full. A 503 with a sentence, never a bare
500; health says `degraded` and why; search keeps answering from the process's own index.

Each runs a real `pitfalls serve`: on a PostgreSQL server of its own that the test stops, and on
SQLite in a data folder on a small tmpfs that the test fills.
"""

import json
import os
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from tests.conftest import get, require, running_server, write_token
from tests.postgres import PostgresServer

pytestmark = pytest.mark.e2e


def _put(url: str, body: dict, headers: dict) -> tuple[int, str]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="PUT")
    request.add_header("Content-Type", "application/json")
    for name, value in headers.items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_with_postgresql_down_reads_are_503s_with_a_sentence_and_search_goes_on(tmp_path):
    server = PostgresServer()
    require(server.available, "PostgreSQL's initdb and pg_ctl are not installed")
    server.start()
    try:
        url = server.url(server.create_database())
        settings = {"PITFALLS_DATABASE_URL": url}
        with running_server(tmp_path / "clone", settings=settings) as (base, _):
            assert json.loads(get(base + "/api/v1/health")[1])["status"] == "ok"
            server.pause()

            status, body = get(base + "/api/v1/health")
            health = json.loads(body)
            assert status == 200 and health["status"] == "degraded", body
            assert any("database cannot be reached" in p for p in health["problems"]), body

            status, body = get(base + "/api/v1/search?q=contiguous")
            assert status == 200, body[:300]
            assert "view-non-contiguous" in [h["id"] for h in json.loads(body)["hits"]]

            for path in ("/api/v1/entries/view-non-contiguous", "/entries/view-non-contiguous"):
                status, body = get(base + path)
                assert status == 503, (path, status, body[:300])
                assert "database cannot be reached" in body, body[:300]

            server.resume()  # back: the same data, the same answers
            status, body = get(base + "/api/v1/entries/view-non-contiguous")
            assert status == 200, body[:300]
    finally:
        server.stop()


def _mount_tmpfs(path: Path, megabytes: int) -> bool:
    path.mkdir(parents=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs", str(path)],
        capture_output=True,
    )
    return done.returncode == 0


def test_a_full_disk_is_a_503_that_saves_nothing_and_health_says_why(tmp_path):
    folder = tmp_path / "clone"
    data = tmp_path / "small-disk"
    mounted = os.geteuid() == 0 and _mount_tmpfs(data, 64)
    require(mounted, "mounting a small tmpfs needs root")
    try:
        settings = {"PITFALLS_DATA_DIR": str(data)}
        with running_server(folder, settings=settings) as (base, clone):
            token = write_token(clone, settings)
            assert json.loads(get(base + "/api/v1/health")[1])["status"] == "ok"
            with (data / "filler").open("wb", buffering=0) as filler:  # to its last byte
                try:
                    while True:
                        filler.write(b"\0" * 1_000_000)
                        filler.flush()
                except OSError:
                    pass
                try:
                    while True:
                        filler.write(b"\0" * 4096)
                        filler.flush()
                except OSError:
                    pass
            text = (clone / "content" / "view-non-contiguous.md").read_text(encoding="utf-8")
            body = {"markdown": text + "\nA paragraph that does not fit.\n" * 2000, "message": "x"}
            auth = {"Authorization": f"Bearer {token}", "If-Match": "*"}
            status, answer = _put(base + "/api/v1/entries/view-non-contiguous", body, auth)
            assert status == 503, answer[:300]
            assert "disk is full" in json.loads(answer)["error"]["message"]

            health = json.loads(get(base + "/api/v1/health")[1])
            assert health["status"] == "degraded"
            assert any(p.startswith("disk:") for p in health["problems"]), health

            (data / "filler").unlink()  # room again: nothing half-written, the save works
            status, answer = _put(base + "/api/v1/entries/view-non-contiguous", body, auth)
            assert status == 200, answer[:300]
            assert json.loads(answer)["revision"] == 2
    finally:
        subprocess.run(["umount", "-l", str(data)], capture_output=True)
