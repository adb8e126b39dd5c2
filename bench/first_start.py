"""Time to ready of `pitfalls serve`: a cold start on a fresh data dir, then a warm one.

    python bench/first_start.py [--runs 3] [--show-output]

Each run copies the repository's entries into a new folder, starts `pitfalls serve` there and
polls /api/v1/health until it answers 200; the time is from the process's start to that
answer. The same data dir is then started once more (the warm start). Prints one row per run
and, with --show-output, what the server printed on stderr before it was ready.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.conftest import free_port  # noqa: E402


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def start_once(folder: Path, timeout_s: float = 180) -> tuple[float, str]:
    """Seconds from spawning `pitfalls serve` in `folder` to its health answering, and its
    stderr up to then."""
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PITFALLS_")}
    env["PYTHONPATH"] = str(ROOT)
    log_path = folder / f"serve-{port}.log"
    code = "import sys; from app.cli import main; sys.argv = ['pitfalls', *sys.argv[1:]]; main()"
    with log_path.open("w") as log:
        began = time.perf_counter()
        process = subprocess.Popen(
            [sys.executable, "-c", code, "serve", "--port", str(port)],
            cwd=folder,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    try:
        while time.perf_counter() - began < timeout_s:
            if process.poll() is not None:
                raise RuntimeError(f"serve exited early:\n{log_path.read_text()}")
            if _answers(f"http://127.0.0.1:{port}/api/v1/health"):
                return time.perf_counter() - began, log_path.read_text()
            time.sleep(0.05)
        raise RuntimeError(f"serve did not answer within {timeout_s} s")
    finally:
        process.terminate()
        process.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--show-output", action="store_true")
    args = parser.parse_args()
    entries = len(list((ROOT / "content").glob("*.md")))
    print(f"pitfalls serve, {entries} shipped entries, {os.cpu_count()} cores")
    print(f"{'run':>4} {'cold to ready (s)':>18} {'warm to ready (s)':>18}")
    cold_times, warm_times = [], []
    for run in range(1, args.runs + 1):
        folder = Path(tempfile.mkdtemp(prefix="pitfalls-first-start-"))
        try:
            shutil.copytree(ROOT / "content", folder / "content")
            cold, cold_output = start_once(folder)
            warm, warm_output = start_once(folder)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        cold_times.append(cold)
        warm_times.append(warm)
        print(f"{run:>4} {cold:>18.2f} {warm:>18.2f}", flush=True)
        if args.show_output and run == 1:
            print("--- cold start's stderr ---\n" + cold_output.rstrip())
            print("--- warm start's stderr ---\n" + warm_output.rstrip())
    print(
        f"{'med':>4} {statistics.median(cold_times):>18.2f} {statistics.median(warm_times):>18.2f}"
    )


if __name__ == "__main__":
    main()
