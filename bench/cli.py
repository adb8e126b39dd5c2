"""How long `pitfalls match` takes on a local database, beside the commands it cannot beat.

    python bench/cli.py [--runs 7]

Each row is the median wall time of whole processes, started as a user starts them, over a data
dir prepared once (the first run also fills the likely tier's saved entries):
- `python -c pass`: the interpreter alone, the floor;
- `python -c "import app.cli"`: the CLI's own imports;
- `pitfalls --help`;
- `pitfalls match FILE` with a 5 KB traceback that an entry explains, and with one no entry does.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
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


def timed(command: list[str], env: dict[str, str], cwd: Path, runs: int) -> float:
    times = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(command, env=env, cwd=cwd, capture_output=True, check=False)
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="pitfalls-cli-"))
    try:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PITFALLS_")}
        env["PITFALLS_DATA_DIR"] = str(work / "data")
        env["PITFALLS_CONTENT_DIR"] = str(ROOT / "content")
        (work / "known.txt").write_text(KNOWN, encoding="utf-8")
        (work / "unknown.txt").write_text(UNKNOWN, encoding="utf-8")
        pitfalls = shutil.which("pitfalls", path=str(Path(sys.executable).parent)) or "pitfalls"
        started = time.perf_counter()
        subprocess.run([pitfalls, "match", "known.txt"], env=env, cwd=work, capture_output=True)
        print(f"first run on an empty data dir (ingest): {time.perf_counter() - started:.2f} s")
        rows = [
            ("python -c pass", [sys.executable, "-c", "pass"]),
            ("import app.cli", [sys.executable, "-c", "import app.cli"]),
            ("pitfalls --help", [pitfalls, "--help"]),
            ("pitfalls match (known)", [pitfalls, "match", "known.txt"]),
            ("pitfalls match (unknown)", [pitfalls, "match", "unknown.txt"]),
        ]
        env["PYTHONPATH"] = str(ROOT)
        print(f"{'command':28} {'median of ' + str(args.runs):>14}")
        for name, command in rows:
            print(f"{name:28} {timed(command, env, work, args.runs):12.3f} s")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
