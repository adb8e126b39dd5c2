"""What the short `pitfalls` commands cost on a local database, beside what they cannot beat.

    python bench/cli.py [--runs 7] [--rounds 2]

Each row is a whole process, started as a user starts it, on a data dir prepared once (the first
commands also build the data dir's cache): the CPU seconds it used (user + system, from
`resource.getrusage(RUSAGE_CHILDREN)`) and its wall time, each the median of `--runs`; every
round prints its own table, so two rounds show how steady the figures are. Rows:
- `python -c pass`: the interpreter alone, the floor; `python -c "import app"`;
- `pitfalls --help`;
- `match FILE` with a 5 KB traceback that an entry explains, and with one no entry does;
- `search WORDS`, `show ID` and `check content/<one>.md`;
- `match`, `search` and `show` with `--server` against a real `pitfalls serve` started here.
Then the import time of a warm `match` (`python -X importtime`, the top-level imports summed).
"""

import argparse
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KNOWN = (
    "Traceback (most recent call last):\n"
    + "".join(
        f'  File "/srv/app/layer_{n}.py", line {n}, in forward\n    x = f(x)\n' for n in range(60)
    )
    + "RuntimeError: view size is not compatible with input tensor's size and stride (at least "
    "one dimension spans across two contiguous subspaces). Use .reshape(...) instead.\n"
)[-5000:]
UNKNOWN = KNOWN.replace("view size is not compatible", "the flux capacitor refused")
ENTRY = "view-non-contiguous"


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measured(command: list[str], env: dict[str, str], cwd: Path, runs: int) -> tuple[float, float]:
    """Median CPU seconds and median wall seconds of `runs` runs of `command`."""
    cpu, wall = [], []
    for _ in range(runs):
        before, started = children_cpu(), time.perf_counter()
        subprocess.run(command, env=env, cwd=cwd, capture_output=True, check=False)
        wall.append(time.perf_counter() - started)
        cpu.append(children_cpu() - before)
    return statistics.median(cpu), statistics.median(wall)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_server(pitfalls: str, work: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    folder = work / "served"
    shutil.copytree(ROOT / "content", folder / "content")
    port = free_port()
    server_env = {k: v for k, v in env.items() if not k.startswith("PITFALLS_")}
    log = (work / "serve.log").open("w")
    process = subprocess.Popen(
        [pitfalls, "serve", "--port", str(port)], cwd=folder, env=server_env, stdout=log, stderr=log
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"pitfalls serve exited:\n{(work / 'serve.log').read_text()}")
        try:
            with urllib.request.urlopen(base + "/api/v1/health", timeout=5) as answer:
                if answer.status == 200:
                    return process, base
        except OSError:
            pass
        time.sleep(0.5)
    process.kill()
    raise SystemExit("pitfalls serve did not answer within 300 s")


def import_ms(pitfalls: str, env: dict[str, str], cwd: Path) -> float:
    """The top-level imports of a warm `pitfalls match`, summed (ms)."""
    result = subprocess.run(
        [sys.executable, "-X", "importtime", pitfalls, "match", "known.txt"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
    )
    total = 0
    for line in result.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = line.split("|")
            if not name.startswith("  ") and cumulative.strip().isdigit():
                total += int(cumulative)
    return total / 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pitfalls-cli-"))
    server = None
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PITFALLS_")}
        env["PITFALLS_DATA_DIR"] = str(work / "data")
        env["PITFALLS_CONTENT_DIR"] = str(ROOT / "content")
        env["PYTHONPATH"] = str(ROOT)
        (work / "known.txt").write_text(KNOWN, encoding="utf-8")
        (work / "unknown.txt").write_text(UNKNOWN, encoding="utf-8")
        pitfalls = shutil.which("pitfalls", path=str(Path(sys.executable).parent)) or "pitfalls"
        started = time.perf_counter()
        for first in (["match", "known.txt"], ["show", ENTRY], ["search", "view"]):
            subprocess.run([pitfalls, *first], env=env, cwd=work, capture_output=True)
        print(
            f"first runs on an empty data dir (ingest, caches): {time.perf_counter() - started:.1f} s"
        )
        server, base = start_server(pitfalls, work, env)
        one = str(ROOT / "content" / f"{ENTRY}.md")
        rows = [
            ("python -c pass", [sys.executable, "-c", "pass"]),
            ('python -c "import app"', [sys.executable, "-c", "import app"]),
            ("pitfalls --help", [pitfalls, "--help"]),
            ("match (known)", [pitfalls, "match", "known.txt"]),
            ("match (unknown)", [pitfalls, "match", "unknown.txt"]),
            ("search", [pitfalls, "search", "view", "size"]),
            ("show ID", [pitfalls, "show", ENTRY]),
            ("check content/<one>.md", [pitfalls, "check", one]),
            ("match (known) --server", [pitfalls, "match", "known.txt", "--server", base]),
            ("match (unknown) --server", [pitfalls, "match", "unknown.txt", "--server", base]),
            ("search --server", [pitfalls, "search", "view", "size", "--server", base]),
            ("show ID --server", [pitfalls, "show", ENTRY, "--server", base]),
        ]
        subprocess.run(rows[7][1], env=env, cwd=work, capture_output=True)  # check's memo
        for round_number in range(1, args.rounds + 1):
            print(f"\nround {round_number}: median of {args.runs}")
            print(f"{'command':28} {'CPU s':>8} {'wall s':>8}")
            for name, command in rows:
                cpu, wall = measured(command, env, work, args.runs)
                print(f"{name:28} {cpu:8.3f} {wall:8.3f}")
        print(f"\nimport time of a warm match: {import_ms(pitfalls, env, work):.0f} ms")
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
