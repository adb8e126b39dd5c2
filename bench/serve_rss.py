"""Memory of `pitfalls serve` over a large database, for each search engine.

    python bench/serve_rss.py [--size 10000] [--engines whoosh tantivy]

Writes SIZE generated entries (bench/corpus.py) into a fresh SQLite database, times
`pitfalls reindex`, starts `pitfalls serve` on it, and reads the server's resident memory
(VmRSS, Linux) when it is ready, after 50 searches, and after 20 more with other words.
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from sqlmodel import Session  # noqa: E402

from app.settings import load_settings  # noqa: E402
from app.storage import create_db_engine, upgrade_schema  # noqa: E402
from bench.corpus import QUERIES, generate  # noqa: E402


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def fill(data: Path, size: int) -> None:
    settings = load_settings(data_dir=data, content_dir=data / "empty")
    engine = create_db_engine(settings)
    upgrade_schema(engine)
    with Session(engine) as session:
        for generated in generate(size):
            session.add(generated.entry)
            session.add_all(generated.signatures)
        session.commit()
    engine.dispose()


def get(url: str) -> int:
    with urllib.request.urlopen(url, timeout=60) as response:
        response.read()
        return response.status


def measure(folder: Path, engine_name: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PITFALLS_")}
    env.update(
        PITFALLS_DATA_DIR=str(folder / "data"),
        PITFALLS_CONTENT_DIR=str(folder / "data" / "empty"),
        PITFALLS_SEARCH_ENGINE=engine_name,
        PITFALLS_LOG_LEVEL="warning",
    )
    pitfalls = shutil.which("pitfalls", path=str(Path(sys.executable).parent)) or "pitfalls"
    started = time.perf_counter()
    subprocess.run([pitfalls, "reindex"], env=env, check=True, capture_output=True)
    reindex_s = time.perf_counter() - started
    port = 8700 + os.getpid() % 200
    log = (folder / f"serve-{engine_name}.log").open("w")
    server = subprocess.Popen(
        [pitfalls, "serve", "--port", str(port)], env=env, stdout=log, stderr=log
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300
        while True:
            try:
                if get(base + "/api/v1/health") == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline or server.poll() is not None:
                raise RuntimeError(f"pitfalls serve did not start: see {log.name}")
            time.sleep(0.5)
        figures = {"reindex (s)": reindex_s, "ready (MB)": rss_mb(server.pid)}
        for query in (QUERIES * 5)[:50]:
            get(f"{base}/api/v1/search?q={urllib.parse.quote(query)}")
        figures["after 50 searches (MB)"] = rss_mb(server.pid)
        for query in QUERIES[:20]:
            get(f"{base}/search?q={urllib.parse.quote(query + ' model')}")
        figures["after 20 search pages (MB)"] = rss_mb(server.pid)
        return figures
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=10_000)
    parser.add_argument("--engines", nargs="+", default=["whoosh", "tantivy"])
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="pitfalls-bench-rss-"))
    try:
        (folder / "data" / "empty").mkdir(parents=True)
        fill(folder / "data", args.size)
        results = {name: measure(folder, name) for name in args.engines}
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"`pitfalls serve` over {args.size} generated entries (SQLite)")
    print(f"{'':30}" + "".join(f"{name:>12}" for name in args.engines))
    for row in next(iter(results.values())):
        print(f"{row:30}" + "".join(f"{results[name][row]:>12.1f}" for name in args.engines))


if __name__ == "__main__":
    main()
