"""One replica against two on one PostgreSQL server: throughput, latency, replication delay.

    python bench/replicas.py [--seconds 10] [--clients 8] [--writes 40]

Starts a throw-away PostgreSQL cluster (as tests do), then `pitfalls serve` processes, each with
a data dir of its own on one database. For search (`GET /api/v1/search`) and match (`POST
/api/v1/match`, a 5 KB traceback): requests per second and p50/p99 latency with one replica, then
with the same clients spread over two, alternated twice (the better round of each is shown); the
ratio is what holds (a 2-core machine runs the
clients, the servers and PostgreSQL on the same cores). Then the replication delay: a write
through the API on one replica, and the time until the other finds it by search and by match,
as p50/p99 over `--writes` writes.
"""

import argparse
import http.client
import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.postgres import PostgresServer  # noqa: E402

PASTES = ROOT / "tests" / "data" / "tracebacks"


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Replica:
    def __init__(self, folder: Path, env: dict[str, str]) -> None:
        self.folder, self.port = folder, _free_port()
        shutil.copytree(ROOT / "content", folder / "content")
        log = (folder / "serve.log").open("w")
        pitfalls = shutil.which("pitfalls", path=str(Path(sys.executable).parent)) or "pitfalls"
        self.process = subprocess.Popen(
            [pitfalls, "serve", "--port", str(self.port)],
            cwd=folder,
            env={**{k: v for k, v in os.environ.items() if not k.startswith("PITFALLS_")}, **env},
            stdout=log,
            stderr=log,
        )

    def wait(self) -> None:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if request(self.port, "GET", "/api/v1/health")[0] == 200:
                    return
            except OSError:
                time.sleep(0.3)
        raise RuntimeError((self.folder / "serve.log").read_text()[-3000:])

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=20)


_local = threading.local()


def request(port: int, method: str, path: str, body: dict | None = None, headers=None):
    """One request on this thread's keep-alive connection (a new one if the server closed it)."""
    data = json.dumps(body).encode() if body is not None else None
    key = f"c{port}"
    for attempt in (1, 2):
        connection = getattr(_local, key, None)
        if connection is None:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            setattr(_local, key, connection)
        try:
            connection.request(
                method,
                path,
                body=data,
                headers={"Content-Type": "application/json", **(headers or {})},
            )
            response = connection.getresponse()
            return response.status, response.read()
        except (OSError, http.client.HTTPException):
            setattr(_local, key, None)
            connection.close()
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


def load(ports: list[int], call, seconds: float, clients: int) -> tuple[float, list[float]]:
    latencies: list[float] = []
    lock = threading.Lock()
    stop = time.monotonic() + seconds

    def client(n: int) -> None:
        port = ports[n % len(ports)]
        mine = []
        while time.monotonic() < stop:
            started = time.perf_counter()
            status, _ = call(port)
            if status == 200:
                mine.append(time.perf_counter() - started)
        with lock:
            latencies.extend(mine)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return len(latencies) / seconds, latencies


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--writes", type=int, default=40)
    args = parser.parse_args()
    server = PostgresServer()
    if not server.available:
        sys.exit("PostgreSQL's initdb and pg_ctl are needed")
    server.start()
    work = Path(tempfile.mkdtemp(prefix="pitfalls-bench-"))
    replicas: list[Replica] = []
    try:
        url = server.url(server.create_database())
        env = {"PITFALLS_DATABASE_URL": url, "PITFALLS_SECRET_KEY": secrets.token_urlsafe(32)}
        replicas = [Replica(work / name, env) for name in ("a", "b")]
        for replica in replicas:
            replica.wait()
        a, b = replicas
        paste = min(PASTES.rglob("*.txt"), key=lambda p: abs(p.stat().st_size - 5000)).read_text()[
            :5000
        ]
        calls = {
            "search": lambda port: request(port, "GET", "/api/v1/search?q=cuda+memory&limit=10"),
            "match 5 KB": lambda port: request(port, "POST", "/api/v1/match", {"text": paste}),
        }
        print(f"{args.clients} clients, {args.seconds:g} s each, one PostgreSQL, 147 entries")
        print(f"{'':12} {'replicas':>8} {'req/s':>8} {'p50 ms':>8} {'p99 ms':>8}")
        for name, call in calls.items():
            load([a.port], call, 2, 2)  # warm up both
            load([b.port], call, 2, 2)
            rounds = {1: [], 2: []}
            for _ in range(2):  # alternated, so neither setting gets the warmer machine
                rounds[1].append(load([a.port], call, args.seconds, args.clients))
                rounds[2].append(load([a.port, b.port], call, args.seconds, args.clients))
            one, lat1 = max(rounds[1], key=lambda r: r[0])
            two, lat2 = max(rounds[2], key=lambda r: r[0])
            print(f"{name:12} {1:>8} {one:8.0f} {pct(lat1, 0.5):8.1f} {pct(lat1, 0.99):8.1f}")
            print(f"{name:12} {2:>8} {two:8.0f} {pct(lat2, 0.5):8.1f} {pct(lat2, 0.99):8.1f}")
            print(f"{name:12} two/one = {two / one:.2f}")
        token = subprocess.run(
            [
                shutil.which("pitfalls", path=str(Path(sys.executable).parent)) or "pitfalls",
                "token", "create", "--name", "bench", "--scope", "write",
            ],
            cwd=a.folder, env={**os.environ, **env}, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        auth = {"Authorization": f"Bearer {token}"}
        searchable, matchable = [], []
        for n in range(args.writes):
            word = f"benchword{n}x{secrets.token_hex(3)}"
            markdown = _entry(f"bench-{n}", word)
            status, body = request(
                a.port, "POST", "/api/v1/entries", {"markdown": markdown, "message": "bench"}, auth
            )
            if status != 201:
                raise RuntimeError(body[:300])
            written = time.perf_counter()
            found_at = matched_at = None
            while found_at is None or matched_at is None:
                if found_at is None:
                    s, r = request(b.port, "GET", f"/api/v1/search?q={word}")
                    if s == 200 and json.loads(r)["total"]:
                        found_at = time.perf_counter() - written
                if matched_at is None:
                    s, r = request(
                        b.port, "POST", "/api/v1/match", {"text": f"RuntimeError: {word} failed 3"}
                    )
                    if s == 200 and json.loads(r)["matches"]:
                        matched_at = time.perf_counter() - written
                time.sleep(0.005)
            searchable.append(found_at)
            matchable.append(matched_at)
        print(
            f"\nreplication delay, write on one replica -> found on the other ({args.writes} writes)"
        )
        for name, values in (("search", searchable), ("match", matchable)):
            print(
                f"  {name:7} p50 {pct(values, 0.5):6.1f} ms  p99 {pct(values, 0.99):6.1f} ms  "
                f"max {max(values) * 1000:6.1f} ms  mean {statistics.mean(values) * 1000:6.1f} ms"
            )
    finally:
        for replica in replicas:
            replica.stop()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def _entry(entry_id: str, word: str) -> str:
    return (
        f"---\nid: {entry_id}\ntitle: A {word} pitfall\nsummary: One sentence.\nkind: error\n"
        "tags: [tensor]\nsignatures:\n  - exception: RuntimeError\n"
        f"    message: '{word} failed (?P<n>\\d+)'\n    example: 'RuntimeError: {word} failed 3'\n"
        "---\n\n## What you see\n\nAn error.\n\n## Why it happens\n\nBecause.\n\n"
        "## Fix\n\n```python fix\nprint('fixed')\n```\n"
    )


if __name__ == "__main__":
    main()
