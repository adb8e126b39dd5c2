"""Multi-process output: the rank that failed first and its own traceback, in the logs of
torchrun, Accelerate, DeepSpeed and mp.spawn (tests/data/multiprocess, and the torchrun logs of
the traceback corpus), answered by the real matcher; and the scans stay linear."""

import json
import time
from pathlib import Path

import pytest

from app.checker import collect_entry_files, entry_texts, load_entry_files, signature_records
from app.matching.paste_matcher import PasteMatcher
from app.tracebacks import parse_traceback
from app.tracebacks.ranks import each_traceback, first_failure
from tests.conftest import REPO_CONTENT

LOGS = Path(__file__).parent / "data" / "multiprocess"
CORPUS = Path(__file__).parent / "data" / "tracebacks"
SHAPES = "RuntimeError: mat1 and mat2 shapes cannot be multiplied"


@pytest.fixture(scope="module")
def matcher() -> PasteMatcher:
    docs = load_entry_files(collect_entry_files([REPO_CONTENT]))
    return PasteMatcher.build(signature_records(docs), entry_texts(docs))


def top(matcher: PasteMatcher, text: str) -> str | None:
    matches = matcher.match(parse_traceback(text)).matches
    return matches[0].entry_id if matches else None


def log(name: str) -> str:
    return (LOGS / name).read_text(encoding="utf-8")


def test_torchrun_root_cause_is_the_rank_that_failed_though_another_printed_after(matcher):
    failure = first_failure(log("torchrun-peer-closed.txt"))
    assert failure is not None
    assert (failure.launcher, failure.who, failure.exitcode) == ("torchrun", "rank 1", "1")
    assert failure.found_by == "the launcher's root cause"
    assert (
        "[rank1]" not in failure.traceback and "Connection closed by peer" not in failure.traceback
    )
    assert parse_traceback(failure.traceback).final.first_line.startswith(SHAPES)
    assert top(matcher, failure.traceback) == "conv-output-shape"


def test_torchrun_with_record_reads_the_rank_of_the_summary():
    failure = first_failure(log("torchrun-record.txt"))
    assert failure is not None and failure.who == "rank 1"
    assert parse_traceback(failure.traceback).final.first_line.startswith(SHAPES)


def test_the_summary_traceback_is_read_when_the_ranks_lines_carry_no_prefix():
    text = log("torchrun-record.txt").replace("[rank1]: ", "")
    failure = first_failure(text)
    assert failure is not None and failure.who == "rank 1"
    final = parse_traceback(failure.traceback).final
    assert final.first_line.startswith(SHAPES)
    assert final.frames[-1].file.endswith("torch/nn/modules/linear.py")


def test_accelerate_is_torchs_agent_under_accelerate():
    failure = first_failure(log("accelerate.txt"))
    assert failure is not None
    assert (failure.launcher, failure.who, failure.exitcode) == ("accelerate", "rank 1", "1")
    assert parse_traceback(failure.traceback).final.first_line.startswith(SHAPES)


def test_deepspeed_the_first_traceback_not_the_rank_its_launcher_names(matcher):
    failure = first_failure(log("deepspeed.txt"))
    assert failure is not None
    assert (failure.launcher, failure.rank, failure.exitcode) == ("deepspeed", None, "1")
    assert failure.who == "a rank"  # its "--local_rank=1" is the last one started, not the failed
    assert "Connection closed by peer" not in failure.traceback
    assert top(matcher, failure.traceback) == "conv-output-shape"


def test_mp_spawn_names_the_process_and_reads_its_traceback(matcher):
    failure = first_failure(log("spawn.txt"))
    assert failure is not None
    assert (failure.launcher, failure.who) == ("mp.spawn", "process 1")
    final = parse_traceback(failure.traceback).final
    assert final.first_line.startswith(SHAPES) and final.type != "ProcessRaisedException"
    assert top(matcher, failure.traceback) == "conv-output-shape"


def test_mp_spawn_a_process_killed_by_a_signal():
    text = (
        "Traceback (most recent call last):\n"
        '  File "/home/dev/work/main.py", line 20, in <module>\n'
        "    mp.spawn(worker, nprocs=4)\n"
        "torch.multiprocessing.spawn.ProcessExitedException: process 2 terminated with "
        "signal SIGKILL\n"
    )
    failure = first_failure(text)
    assert failure is not None and (failure.who, failure.exitcode) == ("process 2", "SIGKILL")


def test_without_a_summary_the_first_rank_to_fail_and_a_dead_peer_comes_last():
    peer = "RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:21910"
    text = "\n".join(
        [
            "[rank0]: Traceback (most recent call last):",
            '[rank0]:   File "/home/dev/work/train.py", line 11, in main',
            "[rank0]:     dist.barrier()",
            f"[rank0]: {peer}",
            "[rank3]: Traceback (most recent call last):",
            '[rank3]:   File "/home/dev/work/train.py", line 10, in main',
            "[rank3]:     layer(torch.ones(3, 5))",
            f"[rank3]: {SHAPES} (3x5 and 4x2)",
            "[rank2]: Traceback (most recent call last):",
            '[rank2]:   File "/home/dev/work/train.py", line 10, in main',
            f"[rank2]: {SHAPES} (3x5 and 4x2)",
        ]
    )
    failure = first_failure(text)
    assert failure is not None
    assert (failure.who, failure.found_by) == ("rank 3", "the first rank to print a traceback")
    assert (
        failure.traceback.startswith("Traceback") and "layer(torch.ones(3, 5))" in failure.traceback
    )


def test_plain_output_is_not_a_multi_process_job():
    assert (
        first_failure('Traceback (most recent call last):\n  File "a.py", line 1\nValueError: x')
        is None
    )
    assert first_failure("") is None


@pytest.mark.parametrize(
    "name",
    sorted(
        n
        for n in json.loads((CORPUS / "expected.json").read_text())
        if "torchrun" in n or "ddp-env" in n
    ),
)
def test_the_corpus_torchrun_logs_the_failed_ranks_traceback_names_the_entry(matcher, name):
    expected = json.loads((CORPUS / "expected.json").read_text())[name]["expected"]
    failure = first_failure((CORPUS / name).read_text(encoding="utf-8", errors="replace"))
    assert failure is not None and failure.rank is not None
    assert top(matcher, failure.traceback) == expected


def test_each_traceback_one_per_distinct_error_without_launchers_or_dead_peers():
    deepspeed = each_traceback(log("deepspeed.txt"))
    assert len(deepspeed) == 1 and SHAPES in deepspeed[0]
    spawn = each_traceback(log("spawn.txt"))
    assert len(spawn) == 1 and "ProcessRaisedException" not in spawn[0]
    one = 'Traceback (most recent call last):\n  File "a.py", line {n}, in f\nValueError: bad {v}\n'
    text = "".join(one.format(n=n, v=n % 3) for n in range(12))
    found = each_traceback(text)
    assert [parse_traceback(t).final.message for t in found] == ["bad 0", "bad 1", "bad 2"]
    assert len(each_traceback(text, limit=2)) == 2


def _seconds(function, text: str) -> float:
    started = time.thread_time()
    function(text)
    return time.thread_time() - started


@pytest.mark.parametrize(
    "unit",
    [
        "[rank1]: Traceback (most recent call last):\n",
        "[default1]:" * 40 + "\n",
        "Root Cause (first observed failure):\n  rank : 1 (local_rank: 1)\n",
        "-- Process 1 terminated with the following error:\n",
        "process 1 terminated with " * 20,
        "failed (exitcode: 1) local_rank: " * 20,
        "x sigkill_handler] exits with return code = " * 20,
        "Traceback (most recent call last):\n",
        "=" * 50 + "x",
    ],
)
@pytest.mark.parametrize("function", [first_failure, each_traceback])
def test_doubling_the_output_doubles_the_scan_time(function, unit):
    repeat = max(1, 200_000 // len(unit))
    # The best of three of each, interleaved: CPU time still moves with what the other cores
    # do to the caches (a busy machine once read 16 ms, then 48 ms, for linear work).
    once, twice = float("inf"), float("inf")
    for _ in range(3):
        once = min(once, _seconds(function, unit * repeat))
        twice = min(twice, _seconds(function, unit * (2 * repeat)))
    # Linear work doubles (2x); quadratic quadruples (4x). A floor keeps timer noise out.
    assert twice < 3.0 * max(once, 0.02), (unit[:40], once, twice)
