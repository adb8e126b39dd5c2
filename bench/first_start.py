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

SHIPPED = ROOT / "app" / "first-start"  # where `pitfalls snapshot` keeps the installation's
CLI = "import sys; from app.cli import main; sys.argv = ['pitfalls', *sys.argv[1:]]; main()"


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PITFALLS_")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=5) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


def cpu_seconds(pid: int) -> float:
    """The CPU time (user + system) the process has used so far (Linux): unlike the wall time,
    what other programs on the machine do hardly moves it."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_once(folder: Path, snapshots: str, timeout_s: float = 300) -> tuple[float, float, str]:
    """Seconds from spawning `pitfalls serve` in `folder` to its health answering, the CPU
    seconds it used until then, and its stderr up to then."""
    port = free_port()
    env = _env()
    env["PITFALLS_FIRST_START_SNAPSHOTS"] = snapshots
    log_path = folder / f"serve-{port}.log"
    code = CLI
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
                return time.perf_counter() - began, cpu_seconds(process.pid), log_path.read_text()
            time.sleep(0.05)
        raise RuntimeError(f"serve did not answer within {timeout_s} s")
    finally:
        process.terminate()
        process.wait(timeout=30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--show-output", action="store_true")
    parser.add_argument(
        "--snapshots",
        choices=("off", "fresh", "warm", "shipped"),
        default="warm",
        help="first-start snapshots: off; fresh (an empty snapshot folder, so each cold "
        "start is the first and keeps one); warm (one kept before the runs: the usual case "
        "after a first start on this machine); shipped (`pitfalls snapshot` first, as where a "
        "wheel or an image is built, then an empty user folder for each cold start: a "
        "machine's very first start of that installation)",
    )
    args = parser.parse_args()
    entries = len(list((ROOT / "content").glob("*.md")))
    load = os.getloadavg()[0]
    print(f"pitfalls serve, {entries} shipped entries, {os.cpu_count()} cores, load {load:.1f}")
    print(f"snapshots: {args.snapshots}")
    print(f"{'run':>4} {'cold: wall s':>12} {'cpu s':>6} {'warm: wall s':>12} {'cpu s':>6}")
    rows = []
    shipped_before = SHIPPED.exists()
    if args.snapshots in ("off", "fresh") and shipped_before:
        print(f"note: {SHIPPED} holds a shipped snapshot, which a fresh start may copy")
    if args.snapshots == "shipped":
        began = time.perf_counter()
        subprocess.run(
            [sys.executable, "-c", CLI, "snapshot"],
            cwd=ROOT,
            check=True,
            env={**_env(), "PITFALLS_FIRST_START_SNAPSHOTS": ""},
            capture_output=True,
        )
        print(f"pitfalls snapshot: {time.perf_counter() - began:.1f} s")
    try:
        _runs(args, rows)
    finally:
        if args.snapshots == "shipped" and not shipped_before:
            shutil.rmtree(SHIPPED, ignore_errors=True)
    medians = [statistics.median(column) for column in zip(*rows, strict=True)]
    print(
        f"{'med':>4} {medians[0]:>12.2f} {medians[1]:>6.2f} {medians[2]:>12.2f} {medians[3]:>6.2f}"
    )


def _runs(args: argparse.Namespace, rows: list) -> None:
    with tempfile.TemporaryDirectory(prefix="pitfalls-snapshots-") as kept:
        if args.snapshots == "warm":
            folder = Path(tempfile.mkdtemp(prefix="pitfalls-first-start-"))
            shutil.copytree(ROOT / "content", folder / "content")
            start_once(folder, kept)  # the first start on this machine keeps the snapshot
            shutil.rmtree(folder, ignore_errors=True)
        for run in range(1, args.runs + 1):
            folder = Path(tempfile.mkdtemp(prefix="pitfalls-first-start-"))
            snapshots = "off" if args.snapshots == "off" else kept
            if args.snapshots in ("fresh", "shipped"):
                snapshots = tempfile.mkdtemp(prefix="snapshots-", dir=kept)
            try:
                shutil.copytree(ROOT / "content", folder / "content")
                cold, cold_cpu, cold_output = start_once(folder, snapshots)
                warm, warm_cpu, warm_output = start_once(folder, snapshots)
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            rows.append((cold, cold_cpu, warm, warm_cpu))
            print(f"{run:>4} {cold:>12.2f} {cold_cpu:>6.2f} {warm:>12.2f} {warm_cpu:>6.2f}")
            if args.show_output and run == 1:
                print("--- cold start's stderr ---\n" + cold_output.rstrip())
                print("--- warm start's stderr ---\n" + warm_output.rstrip())


if __name__ == "__main__":
    main()
