"""Drafting an entry from an unknown error: the signature, the id and the entry file."""

import re
from dataclasses import dataclass, field

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from app.checker import signature_records
from app.drafts import (
    EMPTY_MESSAGE_PATTERN,
    MAX_SOURCE_CHARS,
    TEMPLATE_PLACEHOLDERS,
    DraftSignature,
    draft_id,
    draft_markdown,
    draft_signature,
)
from app.entries import ID_PATTERN, parse_entry
from app.matching import SignatureMatcher, SignatureRecord
from app.signatures import compile_pattern, split_exception_line


@dataclass(frozen=True)
class Case:
    line: str  # the error exactly as PyTorch (or Python) prints it
    variant: str  # the same error with other values: must still match
    other: str  # a different real error: must not match
    captures: dict[str, str] = field(default_factory=dict)  # group values in `line`

    def __str__(self) -> str:
        return self.line[:40]


CASES = [
    Case(
        "RuntimeError: mat1 and mat2 shapes cannot be multiplied (64x9216 and 1024x10)",
        "RuntimeError: mat1 and mat2 shapes cannot be multiplied (1x5 and 3x2)",
        "RuntimeError: The size of tensor a (4) must match the size of tensor b (3) at non-singleton dimension 1",
        {"shape": "64x9216", "shape2": "1024x10"},
    ),
    Case(
        "RuntimeError: The size of tensor a (4) must match the size of tensor b (3) at non-singleton dimension 1",
        "RuntimeError: The size of tensor a (128) must match the size of tensor b (64) at non-singleton dimension 3",
        "RuntimeError: The expanded size of the tensor (3) must match the existing size (2) at non-singleton dimension 1.  Target sizes: [2, 3].  Tensor sizes: [2]",
        {"n": "4", "n2": "3", "n3": "1"},
    ),
    Case(
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total capacity of 7.79 GiB of which 12.31 MiB is free.",
        "torch.cuda.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 1 has a total capacity of 23.65 GiB of which 0 bytes is free. Including non-PyTorch memory, this process has 23.64 GiB memory in use.",
        "RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 5.80 GiB total capacity; 4.36 GiB already allocated; 6.69 MiB free; 4.63 GiB reserved in total by PyTorch)",
        {"size": "20.00 MiB", "n": "0", "size2": "7.79 GiB", "size3": "12.31 MiB"},
    ),
    Case(
        'RuntimeError: Error(s) in loading state_dict for Net:\n\tMissing key(s) in state_dict: "fc.weight", "fc.bias". ',
        'RuntimeError: Error(s) in loading state_dict for Net:\n\tUnexpected key(s) in state_dict: "module.conv1.weight". ',
        "RuntimeError: Attempting to deserialize object on a CUDA device but torch.cuda.is_available() is False. If you are running on a CPU-only machine, please use torch.load with map_location=torch.device('cpu') to map your storages to the CPU.",
    ),
    Case(
        "FileNotFoundError: [Errno 2] No such file or directory: '/home/dev/data/train.csv'",
        "FileNotFoundError: [Errno 2] No such file or directory: 'C:\\Users\\dev\\val.csv'",
        "PermissionError: [Errno 13] Permission denied: '/home/dev/data/train.csv'",
        {"n": "2", "path": "/home/dev/data/train.csv"},
    ),
    Case(
        "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cuda:0 and cpu!",
        "RuntimeError: Expected all tensors to be on the same device, but found at least two devices, cpu and cuda:1!",
        "RuntimeError: Expected all tensors to be on the same device, but got mat1 is on cpu, different from other tensors on cuda:0 (when checking argument in method wrapper_CUDA_addmm)",
        {"device": "cuda:0", "device2": "cpu"},
    ),
    Case(
        "ValueError: too many values to unpack (expected 2)",
        "ValueError: too many values to unpack (expected 13)",
        "ValueError: not enough values to unpack (expected 2, got 1)",
        {"n": "2"},
    ),
    Case(
        "AttributeError: 'DataParallel' object has no attribute 'fc'",
        "AttributeError: 'DistributedDataParallel' object has no attribute 'classifier'",
        "AttributeError: module 'torch' has no attribute 'fc'",
        {"name": "DataParallel", "name2": "fc"},
    ),
    Case(
        "RuntimeError: shape '[-1, 400]' is invalid for input of size 1600",
        "RuntimeError: shape '[2, 3, 5]' is invalid for input of size 7",
        "RuntimeError: view size is not compatible with input tensor's size and stride (at least one dimension spans across two contiguous subspaces). Use .reshape(...) instead.",
        {"shape": "[-1, 400]", "n": "1600"},
    ),
    Case(
        "ValueError: cannot reshape array of size 6 into shape (4,5)",
        "ValueError: cannot reshape array of size 10 into shape (3,)",
        "RuntimeError: shape '[4, 5]' is invalid for input of size 6",
        {"n": "6", "shape": "(4,5)"},
    ),
    Case(
        "UserWarning: Using a target size (torch.Size([16])) that is different to the input size (torch.Size([16, 1])). This will likely lead to incorrect results due to broadcasting. Please ensure they have the same size.",
        "UserWarning: Using a target size (torch.Size([])) that is different to the input size (torch.Size([1, 2, 3])). This will likely lead to incorrect results due to broadcasting. Please ensure they have the same size.",
        "UserWarning: Using a non-full backward hook when the forward contains multiple autograd Nodes is deprecated and will be removed in future versions.",
        {"shape": "torch.Size([16])", "shape2": "torch.Size([16, 1])"},
    ),
    Case(
        "RuntimeError: Input type (torch.FloatTensor) and weight type (torch.cuda.FloatTensor) should be the same or input should be a MKLDNN tensor and weight is a dense tensor",
        "RuntimeError: Input type (torch.cuda.HalfTensor) and weight type (torch.cuda.FloatTensor) should be the same or input should be a MKLDNN tensor and weight is a dense tensor",
        "RuntimeError: expected scalar type Float but found Double",
        {"dtype": "torch.FloatTensor", "dtype2": "torch.cuda.FloatTensor"},
    ),
    Case(
        "_pickle.PicklingError: Can't pickle <function <lambda> at 0x7f2b4c1d8ee0>: attribute lookup <lambda> on __main__ failed",
        "_pickle.PicklingError: Can't pickle <function <lambda> at 0x10a3f4c10>: attribute lookup <lambda> on __main__ failed",
        "AttributeError: Can't pickle local object 'main.<locals>.collate'",
        {"addr": "0x7f2b4c1d8ee0"},
    ),
    Case(
        "RuntimeError: DataLoader worker (pid 12345) is killed by signal: Killed.",
        "RuntimeError: DataLoader worker (pid 7) is killed by signal: Killed.",
        "RuntimeError: DataLoader worker (pid(s) 4242) exited unexpectedly",
        {"n": "12345"},
    ),
    Case(
        "ValueError: a.b*c (x) [y] {z} ^$|?+\\",
        "ValueError: prefix a.b*c (x) [y] {z} ^$|?+\\ suffix",
        "ValueError: aXb*c (x) [y] {z} ^$|?+\\",
    ),
]


def draft_of(line: str) -> DraftSignature:
    parsed = split_exception_line(line)
    return draft_signature(parsed.type, parsed.message)


def matcher_for(signature: DraftSignature) -> SignatureMatcher:
    record = SignatureRecord("draft", 0, signature.message, signature.example, signature.exception)
    matcher = SignatureMatcher([record])
    assert len(matcher) == 1  # the matcher silently drops patterns that do not compile
    return matcher


def group_names(pattern: str) -> list[str]:
    return re.findall(r"\(\?P<(\w+)>", pattern)


# ---- draft_signature ---------------------------------------------------------------------------


@pytest.mark.parametrize("case", CASES, ids=str)
def test_signature_matches_the_error_and_its_variants_only(case: Case):
    signature = draft_of(case.line)
    compile_pattern(signature.message)
    matcher = matcher_for(signature)
    (hit,) = matcher.match_exception_line(signature.example)
    assert hit.signature.entry_id == "draft"
    assert hit.type_agrees
    assert matcher.match_exception_line(case.variant), signature.message
    assert not matcher.match_exception_line(case.other), signature.message
    assert hit.captures == case.captures


@pytest.mark.parametrize("case", CASES, ids=str)
def test_signature_is_readable(case: Case):
    signature = draft_of(case.line)
    names = group_names(signature.message)
    assert len(names) == len(set(names))
    assert "\\ " not in signature.message
    for kept in ("\\'", '\\"', "\\-", "\\:", "\\,", "\\#"):
        assert kept not in signature.message


def test_example_is_the_error_as_given():
    case = CASES[3]
    signature = draft_of(case.line)
    assert signature.exception == "RuntimeError"
    assert signature.example == case.line
    assert signature.message == r"Error\(s\) in loading state_dict for Net:"


def test_exception_keeps_its_dotted_name():
    signature = draft_of(CASES[2].line)
    assert signature.exception == "torch.OutOfMemoryError"
    assert signature.example == CASES[2].line


def test_literal_text_escapes_only_regex_syntax():
    assert draft_of(CASES[-1].line).message == r"a\.b\*c \(x\) \[y\] \{z\} \^\$\|\?\+\\"
    assert (
        draft_of(CASES[0].line).message
        == r"mat1 and mat2 shapes cannot be multiplied \((?P<shape>\d+(?:x\d+)+) and (?P<shape2>\d+(?:x\d+)+)\)"
    )
    quotes = draft_signature("RuntimeError", 'input tensor\'s size, non-singleton: #1 "x" `y`')
    assert quotes.message.startswith("input tensor's size, non-singleton: #")


def test_words_around_values_stay_literal():
    signature = draft_signature(
        "RuntimeError", "[Rank 3] Watchdog caught collective operation timeout: rank 3 dimension 2"
    )
    assert r"\[Rank (?P<n>" in signature.message
    assert ": rank (?P<n2>" in signature.message
    assert " dimension (?P<n3>" in signature.message


def test_number_group_matches_other_numbers():
    matcher = matcher_for(draft_signature("RuntimeError", "loss is 0.5 at step 10"))
    for line in ("loss is -3 at step 1", "loss is 1e-05 at step 7", "loss is 2.25 at step 70"):
        assert matcher.match_exception_line(f"RuntimeError: {line}"), line
    assert not matcher.match_exception_line("RuntimeError: loss is nan at step 7")


def test_only_the_first_non_empty_line_is_used():
    signature = draft_signature("RuntimeError", "\n  \n  first line here  \nsecond line")
    assert signature.message == "first line here"
    assert signature.example == "RuntimeError: \n  \n  first line here  \nsecond line"


def test_type_in_the_message_is_split_off():
    signature = draft_signature(None, "ValueError: too many values to unpack (expected 2)")
    assert signature.exception == "ValueError"
    assert signature.example == "ValueError: too many values to unpack (expected 2)"
    assert signature.message.startswith("too many values to unpack")


def test_long_message_is_cut_at_a_word_and_left_open():
    line = (
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a "
        "total capacity of 7.79 GiB of which 3.12 MiB is free. Including non-PyTorch memory, this "
        "process has 7.78 GiB memory in use. Of the allocated memory 7.48 GiB is allocated by "
        "PyTorch, and 101.23 MiB is reserved by PyTorch but unallocated."
    )
    signature = draft_of(line)
    # The first 160 characters of the message end inside "has"; the cut is before that word.
    assert signature.message.endswith("Including non-PyTorch memory, this process")
    assert not signature.message.endswith(("$", r"\z"))
    matcher = matcher_for(signature)
    assert matcher.match_exception_line(line)
    assert matcher.match_exception_line(
        line.replace("has 7.78 GiB memory", "had 900 MiB").replace("PyTorch,", "it,")
    )


def test_long_word_is_cut_hard():
    message = "x" * (MAX_SOURCE_CHARS * 2)
    signature = draft_signature("RuntimeError", message)
    assert signature.message == "x" * MAX_SOURCE_CHARS
    assert matcher_for(signature).match_exception_line(signature.example)


@pytest.mark.parametrize("message", ["", "   ", " \n\t \n"])
def test_empty_message_matches_only_an_empty_message(message: str):
    signature = draft_signature("RuntimeError", message)
    assert signature.message == EMPTY_MESSAGE_PATTERN
    assert signature.example == "RuntimeError: "
    matcher = matcher_for(signature)
    assert matcher.match_exception_line("RuntimeError: ")
    assert matcher.match_message("", "RuntimeError")  # a bare `RuntimeError` line
    assert not matcher.match_exception_line("RuntimeError: boom")


# ---- draft_id ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (CASES[0].line, "mat1-and-mat2-shapes-cannot-be-multiplied"),
        (CASES[1].line, "size-of-tensor-a-must-match"),
        (CASES[2].line, "cuda-out-of-memory"),
        (CASES[3].line, "error-in-loading-state-dict-for-net"),
        (CASES[4].line, "no-such-file-or-directory"),
        (CASES[6].line, "too-many-values-to-unpack"),
        (CASES[7].line, "object-has-no-attribute"),
        ("RuntimeError: ", "runtime-error"),
        ("torch.OutOfMemoryError: 12345", "out-of-memory-error"),
        ("RuntimeError: 显存不足", "runtime-error"),
        ("CUDAError: 显存不足", "cuda-error"),
        ("显存不足", "new-pitfall"),
        ("", "new-pitfall"),
    ],
)
def test_draft_id(line: str, expected: str):
    parsed = split_exception_line(line)
    assert draft_id(parsed.type, parsed.message) == expected


@pytest.mark.parametrize("case", CASES, ids=str)
def test_draft_id_is_a_valid_short_slug(case: Case):
    parsed = split_exception_line(case.line)
    entry_id = draft_id(parsed.type, parsed.message)
    assert ID_PATTERN.match(entry_id)
    assert len(entry_id) <= 60
    assert len(entry_id.split("-")) <= 7


def test_draft_id_avoids_taken_ids():
    message = "mat1 and mat2 shapes cannot be multiplied (64x9216 and 1024x10)"
    base = "mat1-and-mat2-shapes-cannot-be-multiplied"
    assert draft_id("RuntimeError", message, {"other"}) == base
    assert draft_id("RuntimeError", message, {base}) == f"{base}-2"
    assert draft_id("RuntimeError", message, [base, f"{base}-2"]) == f"{base}-3"
    assert draft_id(None, "", ["new-pitfall"]) == "new-pitfall-2"


# ---- draft_markdown ----------------------------------------------------------------------------


def parsed_draft(exception: str | None, message: str, summary: str | None = None):
    """The draft as a writer leaves it: the body's hints replaced, the summary filled when given
    (`test_an_untouched_draft_is_unfinished_at_each_hint` checks the hints left in)."""
    entry_id = draft_id(exception, message)
    markdown = draft_markdown(exception, message)
    for hint in TEMPLATE_PLACEHOLDERS[:-1]:
        assert markdown.count(hint) == 1
        markdown = markdown.replace(hint, "Written by the team.")
    if summary is not None:
        assert markdown.count("\nsummary: ''\n") == 1
        markdown = markdown.replace("\nsummary: ''\n", f"\nsummary: {summary}\n")
    return parse_entry(markdown, "draft.md", expected_id=entry_id)


@pytest.mark.parametrize("case", CASES, ids=str)
def test_markdown_is_an_entry_missing_only_its_summary(case: Case):
    parsed = split_exception_line(case.line)
    doc = parsed_draft(parsed.type, parsed.message)
    assert [(p.severity, p.message) for p in doc.problems] == [("error", "summary is empty")]
    signature = draft_signature(parsed.type, parsed.message)
    (spec,) = doc.front.signatures
    assert (spec.exception, spec.message, spec.example) == (
        signature.exception,
        signature.message,
        signature.example,
    )
    assert doc.front.summary == ""
    assert doc.front.tags == []
    assert doc.front.kind == ("warning" if case.line.startswith("UserWarning") else "error")
    assert doc.front.title.startswith(f"{parsed.type}: ")
    assert len(doc.front.title) <= 90
    assert doc.rendered.headings == ["What you see", "Why it happens", "Fix"]
    assert f"```\n{signature.example}\n```" in doc.markdown


@pytest.mark.parametrize("case", CASES, ids=str)
def test_markdown_with_a_summary_has_no_problems(case: Case):
    parsed = split_exception_line(case.line)
    doc = parsed_draft(parsed.type, parsed.message, summary="A sentence the writer added.")
    assert doc.problems == []
    matcher = SignatureMatcher(signature_records([doc]))
    (hit,) = matcher.match_exception_line(case.variant)
    assert hit.signature.entry_id == doc.front.id


def test_an_untouched_draft_is_unfinished_at_each_hint():
    markdown = draft_markdown("ValueError", "bad value 3")
    doc = parse_entry(markdown, "draft.md")
    lines = markdown.split("\n")
    unfinished = [p for p in doc.problems if p.message.startswith("unfinished:")]
    assert [p.severity for p in unfinished] == ["error"] * 3
    hints = [line for line in lines if line.startswith("*") and line.endswith("*")]
    assert [lines[p.line - 1] for p in unfinished] == hints


def test_long_title_is_shortened_at_a_word():
    parsed = split_exception_line(CASES[2].line)
    title = parsed_draft(parsed.type, parsed.message).front.title
    assert (
        title
        == "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a…"
    )


def test_markdown_fence_outlasts_backticks_in_the_message():
    doc = parsed_draft("RuntimeError", "bad input ```x``` and ````y````")
    assert [(p.severity, p.message) for p in doc.problems] == [("error", "summary is empty")]
    assert "`````\nRuntimeError: bad input" in doc.markdown


@pytest.mark.parametrize("message", ["null", "no", "yes: true", "- item", "# not a comment"])
def test_markdown_quotes_yaml_lookalikes(message: str):
    doc = parsed_draft(None, message)
    assert [(p.severity, p.message) for p in doc.problems] == [("error", "summary is empty")]
    assert doc.front.signatures[0].example == message


def test_markdown_for_an_empty_message():
    doc = parsed_draft(None, "")
    assert [(p.severity, p.message) for p in doc.problems] == [("error", "summary is empty")]
    assert (doc.front.id, doc.front.title) == ("new-pitfall", "New pitfall")
    assert doc.front.signatures[0].message == EMPTY_MESSAGE_PATTERN


# ---- properties --------------------------------------------------------------------------------

EXCEPTIONS = st.sampled_from([None, "RuntimeError", "torch.OutOfMemoryError", "UserWarning"])
# Plain text, and text made of the pieces the variable-part rules look for.
MESSAGES = st.text() | st.text(alphabet="0123456789x.,-+e []()'\"`/\\:~cudaptorchSizeGiMB\n\t")


@settings(deadline=None)
@given(EXCEPTIONS, MESSAGES)
def test_any_message_gives_a_signature_that_matches_its_example(
    exception: str | None, message: str
):
    signature = draft_signature(exception, message)
    compile_pattern(signature.message)
    assert signature.message
    names = group_names(signature.message)
    assert len(names) == len(set(names))
    hits = matcher_for(signature).match_exception_line(signature.example)
    assert [hit.signature.entry_id for hit in hits] == ["draft"]


@settings(deadline=None, max_examples=50)
@given(EXCEPTIONS, MESSAGES)
@example(None, "\x00")  # a NUL from a pasted binary log: no entry may hold one
@example("RuntimeError", "bad\x00 byte")
def test_any_message_gives_an_entry_missing_only_its_summary(exception: str | None, message: str):
    doc = parsed_draft(exception, message)
    assert [(p.severity, p.message) for p in doc.problems] == [("error", "summary is empty")]
    assert doc.front.signatures[0].message == draft_signature(exception, message).message
