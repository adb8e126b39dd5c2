"""Where agents and notebooks meet errors: the hook's cost per exception, and MCP tool latency
over stdio and streamable HTTP beside the plain JSON API, in one run.

    python bench/agents.py [--calls 200]

Starts `pitfalls serve` on a fresh data dir with the repository's entries, makes a write token,
then times the same two questions (match a 5 KB traceback; search two words) through
`POST /api/v1/match` / `GET /api/v1/search` (keep-alive HTTP), through `/mcp` with the official
SDK's client, and through `pitfalls mcp` over stdio. The hook: `explain()` + text formatting per
exception with the local matcher ready, against formatting the traceback alone (what Python does
without the hook).
"""

import argparse
import http.client
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.replicas import _free_port  # noqa: E402

TRACEBACK = (
    "Traceback (most recent call last):\n"
    + "".join(
        f'  File "/home/u/project/model/layer_{n}.py", line {n * 7}, in forward\n'
        f"    x = self.block_{n}(x)\n"
        for n in range(40)
    )
    + "RuntimeError: view size is not compatible with input tensor's size and stride (at least "
    "one dimension spans across two contiguous subspaces). Use .reshape(...) instead.\n"
)[:5000]


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def row(name: str, values: list[float]) -> None:
    print(f"  {name:34} p50 {pct(values, 0.5):7.2f} ms  p99 {pct(values, 0.99):7.2f} ms")


def timed(call, n: int) -> list[float]:
    out = []
    for _ in range(n):
        started = time.perf_counter()
        call()
        out.append(time.perf_counter() - started)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    n = args.calls
    work = Path(tempfile.mkdtemp(prefix="pitfalls-bench-agents-"))
    shutil.copytree(ROOT / "content", work / "content")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PITFALLS_")}
    pitfalls = shutil.which("pitfalls", path=str(Path(sys.executable).parent)) or "pitfalls"
    port = _free_port()
    log = (work / "serve.log").open("w")
    server = subprocess.Popen(
        [pitfalls, "serve", "--port", str(port)], cwd=work, env=env, stdout=log, stderr=log
    )
    try:
        connection = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        deadline = time.monotonic() + 120
        while True:
            try:
                connection.request("GET", "/api/v1/health")
                response = connection.getresponse()
                response.read()
                if response.status == 200:
                    break
            except OSError:
                connection.close()
            if time.monotonic() > deadline:
                raise RuntimeError((work / "serve.log").read_text()[-2000:])
            time.sleep(0.3)
        token = subprocess.run(
            [pitfalls, "token", "create", "--name", "bench", "--scope", "write"],
            cwd=work, env=env, capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip

        def api_match():
            body = json.dumps({"text": TRACEBACK})
            connection.request("POST", "/api/v1/match", body, {"Content-Type": "application/json"})
            return json.loads(connection.getresponse().read())

        def api_search():
            connection.request("GET", "/api/v1/search?q=batches+tracked&limit=10")
            return json.loads(connection.getresponse().read())

        assert api_match()["known"]
        print(f"{n} calls each, 5 KB traceback, 147 entries; one process per side")
        print("JSON API (keep-alive HTTP)")
        row("POST /api/v1/match", timed(api_match, n))
        row("GET /api/v1/search", timed(api_search, n))

        import anyio
        import httpx2
        from mcp import Client
        from mcp.client.stdio import StdioServerParameters
        from mcp.client.streamable_http import streamable_http_client

        async def through(client_factory, label: str):
            async with client_factory() as client:
                await client.call_tool("match_traceback", {"text": TRACEBACK})
                for tool, arguments, name in (
                    ("match_traceback", {"text": TRACEBACK}, "match_traceback"),
                    ("search_pitfalls", {"query": "batches tracked"}, "search_pitfalls"),
                ):
                    values = []
                    for _ in range(n):
                        started = time.perf_counter()
                        result = await client.call_tool(tool, arguments)
                        values.append(time.perf_counter() - started)
                        assert not result.is_error
                    row(f"{label} {name}", values)

        def http_client():
            import contextlib

            @contextlib.asynccontextmanager
            async def factory():
                headers = {"Authorization": f"Bearer {token}"}
                async with (
                    httpx2.AsyncClient(headers=headers, timeout=30) as http,
                    Client(
                        streamable_http_client(f"http://127.0.0.1:{port}/mcp", http_client=http)
                    ) as client,
                ):
                    yield client

            return factory()

        def stdio_client():
            parameters = StdioServerParameters(command=pitfalls, args=["mcp"], cwd=str(work))
            return Client(parameters)

        print("MCP, the official SDK's client")
        anyio.run(through, http_client, "HTTP /mcp")
        anyio.run(through, stdio_client, "stdio")

        print("notebook/script hook, per exception (matcher ready)")
        os.environ["PITFALLS_DATA_DIR"] = str(work / "data")
        os.environ["PITFALLS_CONTENT_DIR"] = str(work / "content")
        from app import hook

        explainer = hook.Explainer()
        explainer._ready.wait(120)
        try:
            raise RuntimeError(TRACEBACK.rsplit("RuntimeError: ", 1)[1].strip())
        except RuntimeError:
            etype, value, tb = sys.exc_info()
        plain = timed(lambda: "".join(traceback.format_exception(etype, value, tb)), n)
        text = "".join(traceback.format_exception(etype, value, tb))
        hooked = timed(lambda: hook.as_text(explainer.explain(text), explainer), n)
        row("traceback alone (no hook)", plain)
        row("hook: match + format", hooked)
        print(f"  hook overhead p50: {statistics.median(hooked) * 1000:.2f} ms per exception")
    finally:
        server.terminate()
        server.wait(timeout=20)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
