"""`pitfalls run` on real jobs: a torchrun job of two CPU ranks (gloo) where rank 1 raises a
known error and the launcher kills rank 0, an mp.spawn job, and under GitHub Actions a script
that prints more distinct known errors than GitHub shows annotations. The command's exit code
is kept; the answer names the rank that failed first."""

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from app.entries.reading import read_entry_file
from app.settings import load_settings
from tests.conftest import REPO, REPO_CONTENT, require
from tests.prepared import prepare_data_dir

pytestmark = pytest.mark.e2e

SHAPES = "mat1 and mat2 shapes cannot be multiplied (3x5 and 4x2)"
JOB = textwrap.dedent("""
    import time

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if dist.get_rank() == 1:
        torch.nn.Linear(4, 2)(torch.ones(3, 5))  # line 9
    time.sleep(120)  # rank 0: killed by the launcher once rank 1 has failed
""")


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    """The environment of a `pitfalls` subprocess over a prepared copy of the entries."""
    data = tmp_path_factory.mktemp("run-jobs") / "data"
    prepare_data_dir(load_settings(data_dir=data, content_dir=REPO_CONTENT), tmp_path_factory)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PITFALLS_", "GITHUB_"))}
    env.update(
        PITFALLS_DATA_DIR=str(data),
        PITFALLS_CONTENT_DIR=str(REPO_CONTENT),
        PYTHONPATH=str(REPO),
        OMP_NUM_THREADS="1",
    )
    return env


def pitfalls_run(args: list[str], env: dict[str, str], cwd: Path, timeout: float = 240):
    return subprocess.run(
        [sys.executable, "-m", "pitfalls", "run", *args],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout,
    )  # fmt: skip


def test_torchrun_names_rank_1_that_failed_first_and_keeps_the_exit_code(env, tmp_path):
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    require(
        torchrun is not None, "torchrun is not installed beside this Python (pip install torch)"
    )
    assert torchrun is not None
    (tmp_path / "job.py").write_text(JOB, encoding="utf-8")
    command = [torchrun, "--standalone", "--nproc-per-node", "2", "job.py"]
    result = pitfalls_run(["--", *command], env, tmp_path)
    assert result.returncode == 1, result.stderr[-3000:]
    log, _, answer = result.stderr.partition("\n--- pitfalls ---\n")
    # What the launcher printed: rank 0 killed, rank 1 the root cause, behind ChildFailedError.
    assert (
        "ChildFailedError" in log and "SIGTERM" in log and f"[rank1]: RuntimeError: {SHAPES}" in log
    )
    first = answer.strip().splitlines()
    assert first[0] == "rank 1 failed first (the launcher's root cause, exit code 1); its error:"
    assert first[1].strip() == f"RuntimeError: {SHAPES}"
    assert "[conv-output-shape" in answer and "mat1: 3x5" in answer


def test_mp_spawn_names_the_process_that_raised(env, tmp_path):
    script = tmp_path / "spawned.py"
    script.write_text(
        textwrap.dedent("""
            import time

            import torch
            import torch.multiprocessing as mp


            def worker(index):
                if index == 1:
                    torch.nn.Linear(4, 2)(torch.ones(3, 5))
                time.sleep(120)


            if __name__ == "__main__":
                mp.spawn(worker, nprocs=2)
        """),
        encoding="utf-8",
    )
    result = pitfalls_run(["--", sys.executable, str(script)], env, tmp_path)
    assert result.returncode == 1, result.stderr[-3000:]
    answer = result.stderr.partition("\n--- pitfalls ---\n")[2]
    assert answer.startswith("process 1 failed first (torch.multiprocessing's report); its error:")
    assert "[conv-output-shape" in answer


def _known_examples(count: int) -> list[tuple[str, str]]:
    """(exception, message) of entries' examples that a plain `raise` reproduces: builtin
    types, signatures without a frame or context condition, one line, one per entry."""
    builtins = {"RuntimeError", "ValueError", "TypeError", "AssertionError", "IndexError"}
    found: dict[str, tuple[str, str]] = {}
    for path in sorted(REPO_CONTENT.glob("*.md")):
        doc = read_entry_file(path)
        if doc.front is None or doc.front.kind != "error":
            continue
        for sig in doc.front.signatures:
            prefix = f"{sig.exception}: "
            if (
                sig.exception in builtins
                and sig.frame is None
                and sig.context is None
                and sig.example.startswith(prefix)
                and "\n" not in sig.example
            ):
                found.setdefault(doc.front.id, (sig.exception, sig.example[len(prefix) :]))
        if len(found) == count:
            break
    return list(found.values())


def _unescape(value: str) -> str:
    return (
        value.replace("%3A", ":").replace("%2C", ",").replace("%0D", "\r").replace("%0A", "\n")
    ).replace("%25", "%")


ANNOTATION = re.compile(r"^::error (?P<properties>[^:]*)::(?P<message>.*)$")


def test_github_one_annotation_per_known_error_at_most_ten_and_the_summary(env, tmp_path):
    examples = _known_examples(14)
    assert len(examples) == 14
    lines = ["import traceback", ""]
    for number, (exception, message) in enumerate(examples):
        lines += [f"def fail_{number}():", f"    raise {exception}({message!r})", ""]
    lines += [
        f"for fail in [{', '.join(f'fail_{n}' for n in range(len(examples)))}]:",
        "    try:",
        "        fail()",
        "    except Exception:",
        "        traceback.print_exc()",
        "raise SystemExit(3)",
    ]
    (tmp_path / "errors.py").write_text("\n".join(lines) + "\n", encoding="utf-8")
    summary = tmp_path / "summary.md"
    summary.write_text("# Earlier steps' summary\n", encoding="utf-8")
    github = {**env, "GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(summary)}
    github["GITHUB_WORKSPACE"] = str(tmp_path)
    result = pitfalls_run(["--", sys.executable, "errors.py"], github, tmp_path)
    assert result.returncode == 3, result.stderr[-3000:]
    annotations = [line for line in result.stdout.splitlines() if line.startswith("::")]
    assert len(annotations) == 10  # GitHub shows 10 error annotations a step
    titles = set()
    for line in annotations:
        command = ANNOTATION.match(line)
        assert command, line
        # Escaped as the workflow-command format asks: nothing raw that would end a field.
        assert re.fullmatch(r"(?:[^%\r\n]|%25|%0D|%0A)*", command["message"]), line
        properties = dict(p.split("=", 1) for p in command["properties"].split(","))
        assert list(properties) == ["file", "line", "title"]
        assert all(
            re.fullmatch(r"(?:[^%:,\r\n]|%25|%0D|%0A|%3A|%2C)*", v) for v in properties.values()
        )
        assert properties["file"] == "errors.py"  # the user's frame, relative to the checkout
        assert 3 <= int(properties["line"]) <= 3 * len(examples) + 1
        title = _unescape(properties["title"])
        assert title.startswith("Pitfalls: ")
        titles.add(title)
        message = _unescape(command["message"])
        assert message.split("\n")[0].split(":")[0] in {e for e, _ in examples}
        assert "Fix: pitfalls " in message
    assert len(titles) == 10  # one per distinct known error
    written = summary.read_text(encoding="utf-8")
    assert written.startswith("# Earlier steps' summary\n## Pitfalls: ")  # appended, not replaced
    headings = re.findall(r"^### (.+)$", written, flags=re.M)
    assert len(headings) >= 11 and len(set(headings)) == len(headings)
    assert "are only here" in written and "**Fix**" in written and "```python" in written
    # --no-github leaves both alone even under GitHub Actions.
    quiet = pitfalls_run(["--no-github", "--", sys.executable, "errors.py"], github, tmp_path)
    assert quiet.returncode == 3 and "::error" not in quiet.stdout
    assert summary.read_text(encoding="utf-8") == written
