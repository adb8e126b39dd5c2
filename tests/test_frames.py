"""Folded frames on real tracebacks: the user's last frame first with its code line, each run of
library frames (site-packages, torch, Python's lib) folded and counted, bounded on any paste."""

import json
from pathlib import Path

from app.answers import _parsed_out
from app.tracebacks import parse_traceback
from app.tracebacks.frames import (
    MAX_FOLDED_FRAMES,
    FoldedFrames,
    LibraryRun,
    fold_frames,
    folded_from_answer,
    folded_lines,
    is_library_path,
)

TRACEBACKS = Path(__file__).parent / "data" / "tracebacks"


def _folded(name: str) -> FoldedFrames:
    parsed = parse_traceback((TRACEBACKS / name).read_text(encoding="utf-8"))
    assert parsed.final is not None
    return fold_frames(parsed.final.frames, parsed.user_frame)


def _shape(folded: FoldedFrames) -> str:
    return "".join("L" if isinstance(s, LibraryRun) else "U" for s in folded.steps)


def test_library_runs_between_the_users_frames_are_folded_and_counted():
    # snippet.py:17 -> torch module.py x2 -> snippet.py:14 forward -> module.py x2, linear.py
    folded = _folded("plain--conv-output-shape--1.txt")
    assert _shape(folded) == "ULUL"
    assert [s.count for s in folded.steps if isinstance(s, LibraryRun)] == [2, 3]
    assert folded.library_count == 5
    assert folded.user_frame is not None
    assert (folded.user_frame.line, folded.user_frame.function) == (14, "forward")
    assert folded_lines(folded) == [
        "Your last frame: /home/dev/work/plain/conv-output-shape/snippet.py, line 14, in forward",
        "    return self.fc1(x.flatten(1))",
        "  called from /home/dev/work/plain/conv-output-shape/snippet.py, line 17, in <module>",
        "… 5 library frames folded",
    ]


def test_a_dataloader_workers_frames_put_the_users_getitem_first():
    folded = _folded("dataloader--view-non-contiguous--1.txt")
    assert _shape(folded) == "LU" and folded.library_count == 3
    lines = folded_lines(folded)
    assert lines[0] == (
        "Your last frame: /home/dev/work/dl/train_jsonlog.py, line 18, in __getitem__"
    )
    assert lines[1].strip().startswith("return hwc.view(-1)")
    assert lines[-1] == "… 3 library frames folded"


def test_an_ipython_cell_is_the_users_frame_and_torch_below_it_is_folded():
    folded = _folded("notebook--crossentropy-target-dtype--1.txt")
    assert _shape(folded) == "UL" and folded.library_count == 4
    assert folded_lines(folded) == [
        "Your last frame: Cell In[1], line 6",
        "    nn.CrossEntropyLoss()(logits, labels)",
        "… 4 library frames folded",
    ]


def test_windows_paths_and_a_recursion_are_read_as_the_user_wrote_them():
    windows = folded_lines(_folded("windows--state-dict-module-prefix--1.txt"))
    assert windows[0] == r"Your last frame: C:\Users\me\project\eval.py, line 12, in <module>"
    assert windows[-1] == "… 1 library frame folded"
    recursion = folded_lines(_folded("python311--recursion-limit--1.txt"))
    assert any(line.endswith("in _short_repr (4 times)") for line in recursion), recursion


def test_every_real_traceback_folds_all_its_library_frames_and_keeps_the_others():
    expected = json.loads((TRACEBACKS / "expected.json").read_text(encoding="utf-8"))
    for name in expected:
        parsed = parse_traceback((TRACEBACKS / name).read_text(encoding="utf-8"))
        if parsed.final is None:
            continue
        folded = fold_frames(parsed.final.frames, parsed.user_frame)
        frames = parsed.final.frames
        assert folded.library_count == sum(f.library for f in frames), name
        assert [s for s in folded.steps if not isinstance(s, LibraryRun)] == [
            f for f in frames if not f.library
        ], name
        # And the same view from the answer's JSON, as a server would send it.
        answer = json.loads(_parsed_out(parsed).model_dump_json())
        again = folded_from_answer(answer)
        assert folded_lines(again) == folded_lines(folded), name


def test_what_counts_as_a_library():
    for path in (
        "/home/u/venv/lib/python3.11/site-packages/torch/nn/modules/module.py",
        "/usr/lib/python3/dist-packages/numpy/core/fromnumeric.py",
        "/usr/local/lib/python3.12/multiprocessing/process.py",
        "/home/u/src/pytorch/torch/_tensor.py",  # torch's own files, from a source checkout
        r"C:\Python311\Lib\runpy.py",
        "<frozen runpy>",
    ):
        assert is_library_path(path), path
    for path in ("/home/u/train.py", "In[3]", "/tmp/ipykernel_81/2715.py", r"C:\proj\eval.py"):
        assert not is_library_path(path), path


def test_a_huge_stack_is_bounded_and_a_servers_odd_json_is_no_error():
    frames = "".join(
        f'  File "/v/lib/python3.11/site-packages/m{i}.py", line {i}, in f\n    g()\n'
        for i in range(20_000)
    )
    tail = '  File "/home/u/t.py", line 3, in main\n    x.view(-1)\n'
    parsed = parse_traceback(
        "Traceback (most recent call last):\n" + frames + tail + "ValueError: x\n"
    )
    assert parsed.final is not None
    folded = fold_frames(parsed.final.frames, parsed.user_frame)
    assert folded.omitted == 20_001 - MAX_FOLDED_FRAMES
    assert sum(len(s.frames) if isinstance(s, LibraryRun) else 1 for s in folded.steps) == (
        MAX_FOLDED_FRAMES
    )
    assert folded_lines(folded)[-1] == f"… {folded.omitted} earlier frames not shown"
    for odd in (None, [], {"final": 0}, {"exceptions": [{"frames": [1, {"file": 2}]}], "final": 0},
                {"exceptions": "x", "final": "0", "user_frame": {"file": "a.py", "line": True}}):  # fmt: skip
        assert isinstance(folded_lines(folded_from_answer(odd)), list)
