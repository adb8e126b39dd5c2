"""Parsing pastes: every dialect people paste, and never an exception on any input."""

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.normalization import normalize_message
from app.tracebacks import parse_traceback

PLAIN = """Traceback (most recent call last):
  File "/home/u/train.py", line 12, in <module>
    y = x.view(-1)
        ^^^^^^^^^^
RuntimeError: view size is not compatible with input tensor's size and stride
"""


def test_plain_traceback_with_frames_and_caret_lines():
    parsed = parse_traceback(PLAIN)
    (exc,) = parsed.exceptions
    assert (exc.type, exc.qualified_type) == ("RuntimeError", "RuntimeError")
    assert exc.message == "view size is not compatible with input tensor's size and stride"
    assert [(f.file, f.line, f.function, f.code) for f in exc.frames] == [
        ("/home/u/train.py", 12, "<module>", "y = x.view(-1)")
    ]
    assert parsed.user_frame.file == "/home/u/train.py"


def test_library_frames_are_told_from_user_code():
    text = 'Traceback (most recent call last):\n  File "/home/u/t.py", line 3, in <module>\n    m(x)\n  File "/usr/lib/python3.10/site-packages/torch/nn/modules/module.py", line 1, in _call_impl\n    return f()\nValueError: bad\n'
    parsed = parse_traceback(text)
    assert [f.library for f in parsed.final.frames] == [False, True]
    assert parsed.user_frame.file == "/home/u/t.py"
    assert parsed.python_version == "3.10"


def test_chained_exceptions_keep_their_links():
    text = (
        PLAIN
        + "\nThe above exception was the direct cause of the following exception:\n\n"
        + PLAIN.replace("RuntimeError: view", "ValueError: wrapped view")
        + "\nDuring handling of the above exception, another exception occurred:\n\nTraceback (most recent call last):\nKeyError: 'x'\n"
    )
    parsed = parse_traceback(text)
    assert [(e.type, e.link) for e in parsed.exceptions] == [
        ("RuntimeError", None),
        ("ValueError", "cause"),
        ("KeyError", "context"),
    ]
    assert parsed.final.type == "KeyError"


def test_worker_original_traceback_is_the_error_to_explain():
    text = """Traceback (most recent call last):
  File "t.py", line 20, in <module>
AttributeError: Caught AttributeError in DataLoader worker process 0.
Original Traceback (most recent call last):
  File "/usr/lib/python3.11/site-packages/torch/utils/data/_utils/worker.py", line 308, in _worker_loop
  File "t.py", line 9, in __getitem__
    return self.lables[i]
AttributeError: 'Pairs' object has no attribute 'lables'
"""
    parsed = parse_traceback(text)
    assert [e.link for e in parsed.exceptions] == [None, "worker"]
    assert parsed.exceptions[0].message == "Caught AttributeError in DataLoader worker process 0."
    assert parsed.final.message == "'Pairs' object has no attribute 'lables'"
    assert parsed.user_frame.function == "__getitem__"


def test_worker_traceback_embedded_with_literal_newlines():
    text = "ERROR step failed: 'Caught ValueError in DataLoader worker process 1.\\nOriginal Traceback (most recent call last):\\n  File \"d.py\", line 4, in __getitem__\\nValueError: bad sample 7\\n'"
    parsed = parse_traceback(text)
    assert parsed.final.message.startswith("bad sample 7")


def test_prefixes_are_stripped_ranks_loggers_pytest_pdb_quotes():
    ranks = "".join(f"[rank{r}]: {line}\n" for line in PLAIN.splitlines() for r in (0, 1))
    assert parse_traceback(ranks).final.message.startswith("view size")
    assert "rank" in parse_traceback(ranks).prefixes
    logged = "".join(
        f"2024-05-01 12:00:00,123 - train - ERROR - {line}\n" for line in PLAIN.splitlines()
    )
    assert parse_traceback(logged).final.type == "RuntimeError"
    pytest_out = "    def test_x():\n>       x.view(-1)\nE       RuntimeError: view size is not compatible\n\ntest_a.py:5: RuntimeError\n"
    assert parse_traceback(pytest_out).final.message == "view size is not compatible"
    pdb_out = "*** RuntimeError: view size is not compatible\n"
    assert parse_traceback(pdb_out).final.type == "RuntimeError"
    quoted = "".join(f"> {line}\n" for line in PLAIN.splitlines())
    assert parse_traceback(quoted).final.frames[0].line == 12
    indented = "".join(f"\t{line}\n" for line in PLAIN.splitlines())
    assert parse_traceback(indented).final.frames[0].file == "/home/u/train.py"


def test_markdown_html_entities_ansi_crlf():
    text = (
        "```python\n"
        + PLAIN.replace("'", "&#39;").replace("RuntimeError", "\x1b[31mRuntimeError\x1b[0m")
        + "```\n"
    )
    text = text.replace("\n", "\r\n")
    parsed = parse_traceback(text)
    assert (
        parsed.final.first_line
        == "RuntimeError: view size is not compatible with input tensor's size and stride"
    )


def test_ipython_and_jupyter_frames():
    text = """---------------------------------------------------------------------------
RuntimeError                              Traceback (most recent call last)
Cell In[3], line 5
      3 x = torch.randn(2, 3).t()
----> 5 x.view(-1)

File ~/miniconda3/lib/python3.10/site-packages/torch/nn/modules/module.py:1501, in Module._call_impl(self, *args, **kwargs)
   1499 return forward_call(*args)
RuntimeError: view size is not compatible
"""
    parsed = parse_traceback(text)
    frames = parsed.final.frames
    assert (frames[0].file, frames[0].line, frames[0].code, frames[0].library) == (
        "In[3]",
        5,
        "x.view(-1)",
        False,
    )
    assert frames[1].library and frames[1].line == 1501
    assert parsed.user_frame.file == "In[3]"


def test_exception_group():
    text = """  + Exception Group Traceback (most recent call last):
  |   File "g.py", line 3, in <module>
  | ExceptionGroup: many (1 sub-exception)
  +-+---------------- 1 ----------------
    | Traceback (most recent call last):
    |   File "g.py", line 2, in <module>
    | RuntimeError: element 0 of tensors does not require grad
    +------------------------------------
"""
    parsed = parse_traceback(text)
    assert [e.type for e in parsed.exceptions] == ["ExceptionGroup", "RuntimeError"]


def test_cpp_errors_warnings_and_crash_dumps():
    cpp = """[W 2024-01-01 12:00:00 TensorImpl.h:1900] Warning: Named tensors are experimental (function operator())
terminate called after throwing an instance of 'c10::Error'
  what():  CUDA error: device-side assert triggered
Exception raised from c10_cuda_check_implementation at ../c10/cuda/CUDAException.cpp:44 (most recent call first):
frame #0: c10::Error::Error(c10::SourceLocation, std::string) + 0x57 (0x7f in /usr/lib/libc10.so)
"""
    parsed = parse_traceback(cpp)
    assert parsed.final.qualified_type == "c10::Error" and parsed.final.type == "Error"
    assert parsed.final.message == "CUDA error: device-side assert triggered"
    assert parsed.final.origin == "cpp" and parsed.final.frames[0].library
    assert parsed.warnings[0].message == "Named tensors are experimental"
    crash = 'Fatal Python error: Segmentation fault\n\nCurrent thread 0x00007f (most recent call first):\n  File "t.py", line 3 in <module>\n'
    assert parse_traceback(crash).final.origin == "crash"


def test_python_warning_lines_and_versions():
    text = "/x/t.py:12: UserWarning: Detected call of `lr_scheduler.step()` before `optimizer.step()`.\n  sched.step()\ntorch 2.1.0\n"
    parsed = parse_traceback(text)
    (warning,) = parsed.warnings
    assert (warning.category, warning.file, warning.line) == ("UserWarning", "/x/t.py", 12)
    assert parsed.torch_version == "2.1.0" and parsed.exceptions == []


def test_bare_message_and_mid_frame_start():
    assert parse_traceback("RuntimeError: CUDA out of memory.").final.origin == "bare"
    mid = '    out = model(x)\n  File "/m.py", line 4, in forward\n    return self.fc(x)\nRuntimeError: mat1 and mat2 shapes cannot be multiplied (16x1350 and 1000x10)\n'
    parsed = parse_traceback(mid)
    assert parsed.final.frames[0].file == "/m.py" and parsed.final.origin == "python"


def test_multi_line_message_is_kept_whole():
    text = 'Traceback (most recent call last):\n  File "t.py", line 1, in <module>\nRuntimeError: Error(s) in loading state_dict for Net:\n\tUnexpected key(s) in state_dict: "bn1.num_batches_tracked".\n'
    assert (
        parse_traceback(text).final.message
        == 'Error(s) in loading state_dict for Net:\n\tUnexpected key(s) in state_dict: "bn1.num_batches_tracked".'
    )


def test_normalization_replaces_the_variable_parts():
    assert (
        normalize_message("Expected size 33 but got size 32 for tensor number 1 in the list.")
        == "Expected size <n> but got size <n> for tensor number <n> in the list."
    )
    assert (
        normalize_message(
            "got input size torch.Size([1, 16]) on cuda:0 at /home/u/x.py, 0x7f00ab, 20.00 MiB"
        )
        == "got input size <shape> on <device> at <path>, <addr>, <size>"
    )
    assert (
        normalize_message("Input type (torch.FloatTensor) and weight type (torch.cuda.FloatTensor)")
        == "Input type (<dtype>) and weight type (<dtype>)"
    )
    assert (
        normalize_message("DataLoader worker (pid 3122) killed; [3, 224, 224] vs 16x1350")
        == "DataLoader worker (pid <n>) killed; <shape> vs <shape>"
    )


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=3000) | st.binary(max_size=3000).map(lambda b: b.decode("latin-1")))
def test_parser_never_raises_on_arbitrary_text(text):
    parse_traceback(text)


@settings(max_examples=12, deadline=None)
@pytest.mark.slow  # a linear-time check on megabytes: the full suite runs it
@given(
    st.text(
        alphabet=st.sampled_from(list(" \t\n:>|[]()\"'`-+^~*E0123456789abcdefFileTracebackError.")),
        min_size=1,
        max_size=200,
    )
)
def test_parser_stays_fast_on_hostile_megabyte_inputs(chunk):
    text = (chunk * (1_000_000 // len(chunk) + 1))[:1_000_000]
    started = time.thread_time()
    parse_traceback(text)
    assert time.thread_time() - started < 10  # linear: a 1 MB paste of any shape, CPU seconds


def test_a_traceback_flattened_onto_one_line_gets_its_lines_back():
    flat = (
        'Traceback (most recent call last): File "train.py", line 178, in <module> train() '
        'File "train.py", line 134, in train images, targets = next(batch_iterator) '
        'File "/env/lib/python3.6/site-packages/torch/utils/data/dataloader.py", line 1058, '
        "in _next_data raise StopIteration StopIteration"
    )
    final = parse_traceback(flat).final
    assert (final.type, final.message) == ("StopIteration", "")
    assert [(f.file, f.function) for f in final.frames] == [
        ("train.py", "<module>"),
        ("train.py", "train"),
        ("/env/lib/python3.6/site-packages/torch/utils/data/dataloader.py", "_next_data"),
    ]
    assert final.frames[1].code == "images, targets = next(batch_iterator)"
    glued = (
        'Loss 0.3 Traceback (most recent call last): File "m.py", line 9, in forward '
        "return self.fc(x) RuntimeError: mat1 and mat2 shapes cannot be multiplied (4x3 and 5x6)"
    )
    final = parse_traceback(glued).final
    assert final.type == "RuntimeError"
    assert final.message == "mat1 and mat2 shapes cannot be multiplied (4x3 and 5x6)"
    assert final.frames[0].code == "return self.fc(x)"


def test_an_exception_quoted_without_a_space_after_its_colon():
    prose = 'Call model.train() again to fix "RuntimeError:Cudnn RNN backward can only be called in training mode." error.'
    final = parse_traceback(prose).final
    assert final.type == "RuntimeError"
    assert final.message.startswith("Cudnn RNN backward can only be called in training mode")
    # Lower case after the colon is a word in a sentence, not a message.
    assert parse_traceback("see the KeyError:not a message here").exceptions == []


def test_an_exception_glued_to_chinese_text_or_after_a_full_width_colon():
    glued = (
        "我装好之后快速启动时提示AssertionError: Torch not compiled with CUDA enabled，麻烦解答下"
    )
    final = parse_traceback(glued).final
    assert (final.type, final.message.split("，")[0]) == (
        "AssertionError",
        "Torch not compiled with CUDA enabled",
    )
    full_width = "训练时报错 RuntimeError：CUDA out of memory. Tried to allocate 20.00 MiB"
    final = parse_traceback(full_width).final
    assert (final.type, final.message) == (
        "RuntimeError",
        "CUDA out of memory. Tried to allocate 20.00 MiB",
    )
    # A Latin letter before the name is still part of another word.
    assert parse_traceback("see xKeyError: not this").exceptions == []
