"""Edits at scale: what one save costs, and how soon a second process matches and finds it.

    python bench/scale.py [--size 10000] [--edits 40] [--wait 5] [--baseline TREE]

Writes SIZE generated entries (each with a signature of its own) as Markdown files, runs the
real `pitfalls ingest` once, then serves that folder with two `pitfalls serve` processes (what
`--workers 2` runs, on one SQLite file) for this tree and, with `--baseline`, for another
checkout of the code on a copy of the same folder, one after the other. For each: EDITS edits
of a signature through the API of the first process, each timed (PUT), then the time until the
second process matches the new wording by its signature and finds the new word by search
(polled; given up after WAIT seconds), and both processes' resident memory after the edits.

Not measured yet (issue 30 asks for them): 100k entries, tantivy beside Whoosh, reindex against
raw tantivy-py, and each row's floor (a bare endpoint, SQLite FTS5) in the same run.
"""

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.corpus import WORDS, sentence  # noqa: E402


def entry_markdown(n: int, word: str, rng: random.Random) -> str:
    return (
        "---\n"
        f"id: scale-{n:06d}\n"
        f"title: {sentence(rng, 6, cjk=0, ident=0).rstrip('.')}\n"
        f"summary: {sentence(rng, 14, cjk=0, ident=0)}\n"
        "kind: error\n"
        "tags: [tensor]\n"
        "signatures:\n"
        "  - exception: RuntimeError\n"
        f"    message: 'scale failure {n:06d} {word} in (?P<what>\\w+)'\n"
        f"    example: 'RuntimeError: scale failure {n:06d} {word} in forward'\n"
        "---\n\n"
        f"## What you see\n\n{sentence(rng, 20)}\n\n## Why it happens\n\n{sentence(rng, 20)}\n\n"
        f"## Fix\n\n{sentence(rng, 12)}\n"
    )


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(method: str, url: str, body: dict | None = None, headers: dict | None = None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    for name, value in (headers or {}).items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            return response.status, response.read().decode(), dict(response.headers)
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(), dict(error.headers)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def environment(tree: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PITFALLS_")}
    env.update(
        PYTHONPATH=str(tree),
        PITFALLS_FIRST_START_SNAPSHOTS="off",
        PITFALLS_LOG_LEVEL="warning",
    )
    return env


def pitfalls() -> str:
    return shutil.which("pitfalls", path=str(Path(sys.executable).parent)) or "pitfalls"


def serve(folder: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    port = free_port()
    log = (folder.parent / f"{folder.name}-{port}.log").open("w")
    process = subprocess.Popen(
        [pitfalls(), "serve", "--port", str(port)], cwd=folder, env=env, stdout=log, stderr=log
    )
    return process, f"http://127.0.0.1:{port}"


def wait_ready(process: subprocess.Popen, base: str, timeout: float = 900) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError("pitfalls serve exited early")
        try:
            if call("GET", base + "/api/v1/health")[0] == 200:
                return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError("pitfalls serve did not start")


def followed(b: str, n: int, word: str, wait_s: float) -> float | None:
    paste = {"text": f"RuntimeError: scale failure {n:06d} {word} in forward"}
    started = time.monotonic()
    while time.monotonic() - started < wait_s:
        _, body, _ = call("POST", f"{b}/api/v1/match", paste)
        matches = json.loads(body).get("matches", [])
        if matches and matches[0]["id"] == f"scale-{n:06d}" and matches[0]["tier"] == "signature":
            _, body, _ = call("GET", f"{b}/api/v1/search?q={urllib.parse.quote(word)}")
            if any(h["id"] == f"scale-{n:06d}" for h in json.loads(body).get("hits", [])):
                return time.monotonic() - started
        time.sleep(0.02)
    return None


def measure(folder: Path, tree: Path, size: int, edits: int, wait_s: float) -> dict:
    env = environment(tree)
    token = subprocess.run(
        [pitfalls(), "token", "create", "--name", f"bench-{tree.name}", "--scope", "write"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    auth = {"Authorization": f"Bearer {token}"}
    (a, a_base), (b, b_base) = serve(folder, env), serve(folder, env)
    try:
        wait_ready(a, a_base)
        wait_ready(b, b_base)
        rng = random.Random(30)
        puts, follows = [], []
        for k in range(edits):
            n = rng.randrange(size)
            word = f"edited{k}x{rng.choice(WORDS)}"
            _, _, headers = call("GET", f"{a_base}/api/v1/entries/scale-{n:06d}", headers=auth)
            markdown = entry_markdown(n, word, random.Random(n))
            started = time.perf_counter()
            status, body, _ = call(
                "PUT",
                f"{a_base}/api/v1/entries/scale-{n:06d}",
                {"markdown": markdown, "message": f"edit {k}"},
                {**auth, "If-Match": headers.get("etag", "*")},
            )
            puts.append(time.perf_counter() - started)
            if status != 200:
                raise RuntimeError(f"PUT answered {status}: {body[:300]}")
            follows.append(followed(b_base, n, word, wait_s))
        seen = sorted(f for f in follows if f is not None)
        return {
            "PUT p50 (ms)": statistics.median(puts) * 1000,
            "PUT max (ms)": max(puts) * 1000,
            "followed on B": f"{len(seen)}/{edits}",
            "follow p50 (ms)": statistics.median(seen) * 1000 if seen else float("nan"),
            "follow max (ms)": seen[-1] * 1000 if seen else float("nan"),
            "RSS A after edits (MB)": rss_mb(a.pid),
            "RSS B after edits (MB)": rss_mb(b.pid),
        }
    finally:
        for process in (a, b):
            process.terminate()
            process.wait(timeout=60)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--edits", type=int, default=40)
    parser.add_argument("--wait", type=float, default=5.0, help="seconds to wait per edit")
    parser.add_argument("--baseline", type=Path, help="another checkout of the code")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pitfalls-bench-scale-"))
    try:
        folder = work / "new"
        (folder / "content").mkdir(parents=True)
        rng = random.Random(7)
        for n in range(args.size):
            (folder / "content" / f"scale-{n:06d}.md").write_text(
                entry_markdown(n, rng.choice(WORDS), rng), encoding="utf-8"
            )
        started = time.perf_counter()
        subprocess.run(
            [pitfalls(), "ingest"],
            cwd=folder,
            env=environment(ROOT),
            check=True,
            capture_output=True,
        )
        ingest_s = time.perf_counter() - started
        trees = {"this tree": ROOT}
        if args.baseline is not None:
            shutil.copytree(folder, work / "baseline", symlinks=True)
            trees["baseline"] = args.baseline.resolve()
        results = {}
        for name, tree in trees.items():
            where = folder if name == "this tree" else work / "baseline"
            results[name] = measure(where, tree, args.size, args.edits, args.wait)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{args.size} generated entries, one SQLite file, two processes; ingest {ingest_s:.0f} s")
    print(f"{'':28}" + "".join(f"{name:>14}" for name in results))
    for row in next(iter(results.values())):
        cells = []
        for name in results:
            value = results[name][row]
            cells.append(f"{value:>14.0f}" if isinstance(value, float) else f"{value:>14}")
        print(f"{row:28}" + "".join(cells))


if __name__ == "__main__":
    main()
