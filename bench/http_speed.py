"""What a request costs over HTTP, beside what the framework alone costs, in one run.

    python bench/http_speed.py [--connections 16] [--seconds 3] [--rounds 3]

Starts two servers on 127.0.0.1, each one uvicorn worker with the settings `pitfalls serve` uses
(proxy headers on, no access log): `pitfalls serve` on a fresh data dir holding the repository's
entries, and a bare FastAPI app with one JSON route (this file, `--serve-bare`), so the bare
figure is what uvicorn and FastAPI cost without our middleware, database or templates. A small
asyncio client keeps a fixed number of keep-alive connections busy for a fixed time per row.
Rows take turns over several rounds; each row's req/s and latencies are the median round's.

Rows: the bare endpoint, and a bare POST that reads and parses the same 5 KB JSON body as the
match rows (what the framework costs for that request shape); `/api/v1/search` with a new query
on every request (cold) and with one query (repeated); the floor under any cold search here: the
bare app running tantivy on the same new queries over the entries' raw text with nothing of
ours (no analysis, highlights, facets or did-you-mean), in a thread and on the event loop; the search page; an entry page and its JSON; `POST /api/v1/match` with a 5 KB
traceback, the same one (repeated: answered from memory) and a new one each time (its frames'
line numbers change). Every answer must be 200, or the run stops.
"""

import argparse
import asyncio
import itertools
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.agents import TRACEBACK  # noqa: E402  (the same 5 KB paste as there)

ENTRY = "view-non-contiguous"
REPEATED_QUERY = "cuda+out+of+memory"


def bare_app():
    """The baseline: FastAPI with one small JSON route and nothing else."""
    from fastapi import FastAPI, Request

    app = FastAPI()

    @app.get("/")
    async def hello() -> dict:
        return {"status": "ok", "entries": 148}

    searcher = _floor_searcher()

    def raw_search(q: str) -> dict:
        # The least a search over tantivy can cost here: one parsed query, ten ids and titles;
        # no analysis of ours, no highlights, facets or did-you-mean.
        query = searcher.index.parse_query(q, ["title", "body"])
        hits = searcher.searcher.search(query, 10).hits
        docs = [searcher.searcher.doc(address) for _, address in hits]
        return {"hits": [{"id": d["id"][0], "title": d["title"][0]} for d in docs]}

    @app.get("/floor")
    def floor(q: str) -> dict:
        # In a thread, as a search must run so that it never blocks the event loop.
        return raw_search(q)

    @app.get("/floor-inline")
    async def floor_inline(q: str) -> dict:
        # On the event loop itself: what the thread hand-off costs, for comparison only.
        return raw_search(q)

    @app.post("/echo")
    async def echo(request: Request) -> dict:
        # The same request shape as a paste: a 5 KB JSON body, read and parsed.
        body = json.loads(await request.body())
        return {"status": "ok", "length": len(body.get("text", ""))}

    return app


@dataclass
class FloorSearcher:
    index: object
    searcher: object


def _floor_searcher() -> FloorSearcher:
    """A tantivy index of the entries' titles and bodies, in memory, with tantivy's own analyzer."""
    import tantivy

    builder = tantivy.SchemaBuilder()
    builder.add_text_field("id", stored=True, tokenizer_name="raw")
    builder.add_text_field("title", stored=True, tokenizer_name="en_stem")
    builder.add_text_field("body", tokenizer_name="en_stem")
    index = tantivy.Index(builder.build())
    writer = index.writer()
    for path in sorted((ROOT / "content").glob("*.md")):
        text = path.read_text(encoding="utf-8")
        title = re.search(r"^title: (.*)$", text, re.M)
        writer.add_document(
            tantivy.Document(id=path.stem, title=title.group(1) if title else "", body=text)
        )
    writer.commit()
    index.reload()
    return FloorSearcher(index, index.searcher())


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _request(method: str, path: str, body: bytes = b"", content_type: str = "") -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: bench\r\n"
    if body:
        head += f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
    return (head + "\r\n").encode() + body


async def _read_response(reader: asyncio.StreamReader) -> int:
    head = await reader.readuntil(b"\r\n\r\n")
    status = int(head[9:12])
    lowered = head.lower()
    found = re.search(rb"\r\ncontent-length:\s*(\d+)", lowered)
    if found:
        await reader.readexactly(int(found.group(1)))
    elif b"transfer-encoding: chunked" in lowered:
        while True:
            size = int((await reader.readuntil(b"\r\n")).split(b";")[0], 16)
            await reader.readexactly(size + 2)
            if size == 0:
                break
    else:
        raise RuntimeError(f"a response with neither length nor chunks: {head[:200]!r}")
    return status


@dataclass
class Result:
    requests: int = 0
    seconds: float = 0.0
    latencies: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return self.requests / self.seconds if self.seconds else 0.0

    def percentile(self, q: float) -> float:
        ordered = sorted(self.latencies)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000 if ordered else 0.0


async def _load(
    port: int, next_request: Callable[[], bytes], connections: int, seconds: float
) -> Result:
    result = Result()
    deadline = time.perf_counter() + seconds

    async def one_connection() -> None:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            while time.perf_counter() < deadline:
                started = time.perf_counter()
                writer.write(next_request())
                status = await asyncio.wait_for(_read_response(reader), timeout=60)
                if status != 200:
                    raise RuntimeError(f"status {status} on port {port}")
                result.latencies.append(time.perf_counter() - started)
                result.requests += 1
        finally:
            writer.close()

    started = time.perf_counter()
    await asyncio.gather(*(one_connection() for _ in range(connections)))
    result.seconds = time.perf_counter() - started
    return result


def _cold_queries() -> Iterator[bytes]:
    """A query no request has asked before: two words of the entries' titles, never repeated."""
    words: set[str] = set()
    for path in sorted((ROOT / "content").glob("*.md")):
        title = re.search(r"^title: (.*)$", path.read_text(encoding="utf-8"), re.M)
        if title:
            words |= {w.lower() for w in re.findall(r"[A-Za-z]{4,}", title.group(1))}
    ordered = sorted(words)
    for first, second in itertools.combinations(ordered, 2):
        yield _request("GET", f"/api/v1/search?q={first}+{second}")


def _wait_ready(port: int, path: str, log: Path) -> None:
    import http.client

    deadline = time.monotonic() + 180
    while True:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            response.read()
            if response.status == 200:
                return
        except OSError:
            pass
        finally:
            connection.close()
        if time.monotonic() > deadline:
            raise RuntimeError(log.read_text()[-2000:])
        time.sleep(0.3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=3.0, help="per row and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--engine", choices=["whoosh", "tantivy"], default="whoosh")
    parser.add_argument("--serve-bare", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve_bare:
        import uvicorn

        uvicorn.run(
            bare_app(),
            host="127.0.0.1",
            port=args.serve_bare,
            proxy_headers=True,
            access_log=False,
            log_level="warning",
        )
        return

    work = Path(tempfile.mkdtemp(prefix="pitfalls-bench-http-"))
    shutil.copytree(ROOT / "content", work / "content")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PITFALLS_")}
    env["PITFALLS_LOG_LEVEL"] = "warning"
    env["PITFALLS_SEARCH_ENGINE"] = args.engine
    pitfalls = shutil.which("pitfalls", path=str(Path(sys.executable).parent)) or "pitfalls"
    app_port, bare_port = _free_port(), _free_port()
    app_log, bare_log = work / "serve.log", work / "bare.log"
    servers = [
        subprocess.Popen(
            [pitfalls, "serve", "--port", str(app_port)],
            cwd=work,
            env=env,
            stdout=app_log.open("w"),
            stderr=subprocess.STDOUT,
        ),
        subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--serve-bare", str(bare_port)],
            cwd=ROOT,
            env=env,
            stdout=bare_log.open("w"),
            stderr=subprocess.STDOUT,
        ),
    ]
    try:
        _wait_ready(app_port, "/api/v1/health", app_log)
        _wait_ready(bare_port, "/", bare_log)
        cold = _cold_queries()
        match_body = json.dumps({"text": TRACEBACK}).encode()
        # A paste no one sent before: the line numbers of its frames change every time.
        numbers = itertools.count(1)
        new_pastes = (
            json.dumps({"text": TRACEBACK.replace("line ", f"line {n}", 3)}).encode()
            for n in numbers
        )
        rows: list[tuple[str, int, Callable[[], bytes]]] = [
            ("bare FastAPI JSON", bare_port, lambda: _request("GET", "/")),
            (
                "bare FastAPI POST (5 KB)",
                bare_port,
                lambda: _request("POST", "/echo", match_body, "application/json"),
            ),
            ("GET /api/v1/search (cold)", app_port, lambda: next(cold)),
            (
                "bare FastAPI + raw tantivy (cold)",
                bare_port,
                lambda: next(cold).replace(b"/api/v1/search", b"/floor", 1),
            ),
            (
                "  same, on the event loop",
                bare_port,
                lambda: next(cold).replace(b"/api/v1/search", b"/floor-inline", 1),
            ),
            (
                "GET /api/v1/search (repeated)",
                app_port,
                lambda: _request("GET", f"/api/v1/search?q={REPEATED_QUERY}"),
            ),
            ("GET /search page", app_port, lambda: _request("GET", f"/search?q={REPEATED_QUERY}")),
            ("GET /entries/{id} page", app_port, lambda: _request("GET", f"/entries/{ENTRY}")),
            (
                "GET /api/v1/entries/{id}",
                app_port,
                lambda: _request("GET", f"/api/v1/entries/{ENTRY}"),
            ),
            (
                "POST /api/v1/match (5 KB, repeated)",
                app_port,
                lambda: _request("POST", "/api/v1/match", match_body, "application/json"),
            ),
            (
                "POST /api/v1/match (5 KB, new)",
                app_port,
                lambda: _request("POST", "/api/v1/match", next(new_pastes), "application/json"),
            ),
        ]
        # Warm every route (templates compiled, searcher open, pages imported) before timing.
        for _, port, next_request in rows:
            asyncio.run(_load(port, next_request, 2, 0.5))
        results: dict[str, list[Result]] = {name: [] for name, _, _ in rows}
        for _ in range(args.rounds):
            for name, port, next_request in rows:
                results[name].append(
                    asyncio.run(_load(port, next_request, args.connections, args.seconds))
                )
        entries = len(list((ROOT / "content").glob("*.md")))
        print(
            f"one uvicorn worker each, {args.connections} keep-alive connections, "
            f"{args.rounds} rounds x {args.seconds:g} s per row (median round), {entries} entries, search engine {args.engine}"
        )
        print(f"  {'':32} {'req/s':>8} {'% bare':>7} {'p50 ms':>8} {'p99 ms':>8}")

        def median_round(name: str) -> Result:
            return sorted(results[name], key=lambda r: r.rate)[(len(results[name]) - 1) // 2]

        bare_rate = median_round(rows[0][0]).rate  # the same round choice as every row's
        for name, _, _ in rows:
            median = median_round(name)
            print(
                f"  {name:32} {median.rate:8.0f} {100 * median.rate / bare_rate:6.0f}% "
                f"{median.percentile(0.5):8.1f} {median.percentile(0.99):8.1f}"
            )
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            server.wait(timeout=20)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
