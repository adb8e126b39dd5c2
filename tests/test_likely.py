"""The likely tier and its calibration, the parser's wrappers and fragments, and no false claims."""

import random

import pytest

from app.checker import collect_entry_files, entry_texts, load_entry_files, signature_records
from app.matching.calibration import Model, choose_threshold, fit, load_model, reliability
from app.matching.likely import EntryText, LikelyIndex, Query, tokens
from app.matching.paste_matcher import PasteMatcher, paste_query
from app.tracebacks import parse_traceback
from tests.conftest import REPO_CONTENT


@pytest.fixture(scope="module")
def matcher() -> PasteMatcher:
    docs = load_entry_files(collect_entry_files([REPO_CONTENT]))
    return PasteMatcher.build(signature_records(docs), entry_texts(docs))


def top(matcher: PasteMatcher, text: str) -> tuple[str | None, str | None]:
    result = matcher.match(parse_traceback(text))
    return (result.matches[0].entry_id, result.matches[0].tier) if result.matches else (None, None)


# ---- tokens, index, calibration ---------------------------------------------------------------


def test_tokens_keep_identifiers_whole_and_split_and_drop_placeholders():
    words = tokens("bn1.num_batches_tracked in CUDAGuardImpl at <path> <n> the")
    assert {"bn1.num_batches_tracked", "num_batches_tracked", "batch", "track"} <= set(words)
    assert "cudaguardimpl" in words and "guard" in words
    assert "path" not in words and "the" not in words


def test_index_prefers_the_entry_whose_example_covers_a_fragment():
    index = LikelyIndex(
        [
            EntryText("a", "Views", examples=("RuntimeError: view size is not compatible",)),
            EntryText("b", "Shapes", examples=("RuntimeError: shape is invalid for input",)),
        ]
    )
    (first, *_) = index.candidates(Query("view size is not", "RuntimeError"))
    assert first.entry_id == "a"
    assert first.features["example_cover"] == pytest.approx(1.0)
    assert first.features["type"] == 0.5  # the entries name no exception type
    assert index.candidates(Query("hello world", None)) == []


def test_logistic_fit_learns_the_direction_and_calibrates():
    rng = random.Random(3)
    rows, labels = [], []
    for _ in range(400):
        x = rng.random()
        rows.append({"coverage": x})
        labels.append(rng.random() < x)  # P(right) = coverage
    weights, bias = fit(rows, labels, features=("coverage",))
    model = Model(weights=weights, bias=bias, threshold=0.5, features=("coverage",))
    assert model.confidence({"coverage": 0.9}) > 0.75 > 0.25 > model.confidence({"coverage": 0.1})
    scored = [(model.confidence(r), y) for r, y in zip(rows, labels, strict=True)]
    for _, count, mean, share in reliability(scored):
        if count >= 40:
            assert abs(mean - share) < 0.15


def test_threshold_trades_right_answers_against_claimed_negatives():
    positives = [(0.9, True), (0.8, True), (0.7, True), (0.6, False), (0.4, True)]
    negatives = [0.65, 0.3, 0.2]
    threshold = choose_threshold(positives, negatives)
    assert 0.65 < threshold <= 0.7


def test_model_round_trips_and_refuses_unknown_features():
    model = load_model()
    assert Model.from_json(model.to_json()) == model
    with pytest.raises(ValueError):
        Model.from_json('{"features": ["nope"], "weights": [1], "bias": 0, "threshold": 0.5}')


# ---- the likely tier on pastes ----------------------------------------------------------------


def test_a_warning_with_no_exception_is_read_as_the_error_to_explain(matcher):
    paste = (
        "[W CUDAGuardImpl.h:46] Warning: CUDA warning: an illegal memory access was encountered"
        " (function destroyEvent)\n"
        '  File "train.py", line 40, in train\n'
        "    loss = criterion(out, y)\n"
    )
    parsed = parse_traceback(paste)
    # The message's distinctive part is a signature of its entry on its own.
    assert [m.entry_id for m in matcher.match(parsed).matches][:1] == ["cuda-illegal-memory-access"]
    # The likely tier reads the warning as the error too: its entry leads by far. Whether it
    # would be claimed is the calibration's call (the threshold moves with the corpus).
    candidates = matcher.likely.candidates(paste_query(parsed))
    confidence = {c.entry_id: matcher.model.confidence(c.features) for c in candidates}
    first, second = sorted(candidates, key=lambda c: -confidence[c.entry_id])[:2]
    assert first.entry_id == "cuda-illegal-memory-access"
    assert confidence[first.entry_id] > 0.3 and confidence[second.entry_id] < 0.05
    assert confidence[first.entry_id] > 10 * confidence[second.entry_id]
    assert first.features["type"] == 0.5  # a C++ warning names no type: unknown, not wrong


def test_text_with_no_error_gets_no_match_and_nothing_related(matcher):
    for text in ("hello world", "thanks, that fixed it!", "def f(x):\n    return x + 1\n"):
        result = matcher.match(parse_traceback(text))
        assert result.matches == [] and result.related == []


def test_a_likely_match_names_the_words_as_the_error_spells_them(matcher):
    # A real paste (i2/005 in tests/data/real-pastes): the message retyped with "to small", so
    # no signature matches it.
    paste = (
        "OSError : The paging file is to small for this operation to complete. error loading "
        "caffe2_detection_ops_gpu.dll or it's dependencies."
    )
    assert top(matcher, paste) == ("windows-paging-file", "likely")
    (match, *_) = matcher.match(parse_traceback(paste)).matches
    assert "paging" in match.words  # as written, not the stem "page"


def test_a_signature_match_is_never_second_to_a_likely_one(matcher):
    result = matcher.match(
        parse_traceback("RuntimeError: CUDA error: device-side assert triggered")
    )
    assert [m.tier for m in result.matches][:1] == ["signature"]
    assert all(m.tier == "signature" for m in result.matches)


@pytest.mark.parametrize(
    "text",
    [
        "RuntimeError: CUDA out of memory",  # what people type from memory, without the sizes
        "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB",
        "RuntimeError: CUDA out of memory (the rest cut off)",
    ],
)
def test_the_shortest_oom_message_is_claimed_by_its_entry(matcher, text):
    assert top(matcher, text) == ("cuda-out-of-memory", "signature")


# ---- generic messages need their context -------------------------------------------------------


@pytest.mark.parametrize(
    ("bare", "with_context", "entry"),
    [
        (
            "SyntaxError: invalid syntax",
            '  File "train.py", line 3\n    x = x.cuda(async=True)\n'
            "                 ^^^^^\nSyntaxError: invalid syntax",
            "cuda-async-keyword",
        ),
        (
            "SystemExit: 2",
            "An exception has occurred, use %tb to see the full traceback.\n\nSystemExit: 2",
            "argparse-in-jupyter",
        ),
        (
            "OSError: [Errno 12] Cannot allocate memory",
            # A DataLoader starting its workers: a fork alone (a gunicorn worker) is not this.
            "Traceback (most recent call last):\n"
            '  File "/opt/venv/lib/python3.10/site-packages/torch/utils/data/dataloader.py", '
            "line 1042, in __init__\n    w.start()\n"
            '  File "/usr/lib/python3.10/multiprocessing/popen_fork.py", line 66, in _launch\n'
            "    self.pid = os.fork()\nOSError: [Errno 12] Cannot allocate memory",
            "dataloader-cow-memory",
        ),
        (
            "RuntimeError: generator raised StopIteration",
            'Traceback (most recent call last):\n  File "train.py", line 9, in batches\n'
            "    yield next(loader_iter)\nRuntimeError: generator raised StopIteration",
            "dataloader-iterate-restart",
        ),
        (
            "UnicodeDecodeError: 'ascii' codec can't decode byte 0xe9 in position 3: "
            "ordinal not in range(128)",
            'Traceback (most recent call last):\n  File "load.py", line 2, in <module>\n'
            "    state = torch.load('old.pth')\n"
            "UnicodeDecodeError: 'ascii' codec can't decode byte 0xe9 in position 3: "
            "ordinal not in range(128)",
            "torch-load-old-pickle-encoding",
        ),
    ],
)
def test_a_generic_message_is_claimed_only_with_its_context(matcher, bare, with_context, entry):
    assert top(matcher, with_context) == (entry, "signature")
    result = matcher.match(parse_traceback(bare))
    # Neither tier claims it: a signature whose context fails vetoes the entry for the likely
    # tier too, or the likely tier would hand back what the context took away.
    assert entry not in [m.entry_id for m in result.matches]


# ---- parser: wrappers and fragments -------------------------------------------------------------


def first_exception(text: str):
    parsed = parse_traceback(text)
    assert parsed.exceptions, text
    return parsed.exceptions[-1]


def test_pdb_prose_numbered_list_and_backticks_are_read():
    pdb = "(Pdb) x.view(4, -1)\n*** RuntimeError: view size is not compatible\n(Pdb)"
    assert first_exception(pdb).message == "view size is not compatible"
    prose = "When I train I get the error RuntimeError: CUDA out of memory. and then it stops."
    assert first_exception(prose).type == "RuntimeError"
    listed = "I tried:\n1. RuntimeError: CUDA error: device-side assert triggered\n2. smaller batch"
    assert first_exception(listed).message == "CUDA error: device-side assert triggered"
    ticked = (
        '`Traceback (most recent call last):\n  File "m.py", line 1, in <module>\n'
        "RuntimeError: mat1 and mat2 shapes cannot be multiplied (6x5 and 4x3)`"
    )
    assert first_exception(ticked).message.endswith("(6x5 and 4x3)")


def test_a_repr_and_typographic_quotes_are_unwrapped():
    repr_text = "RuntimeError('Error(s) in loading state_dict for Net:\\n\\tMissing key(s).')"
    exc = first_exception(repr_text)
    assert exc.message.startswith("Error(s) in loading state_dict for Net:\n\tMissing key(s)")
    # A repr in the middle of a sentence ends at its closing quote, not at the end of the line.
    in_prose = 'I get `RuntimeError("mat1 and mat2 must have the same dtype")` from a Linear.'
    assert first_exception(in_prose).message == "mat1 and mat2 must have the same dtype"
    curly = "RuntimeError: can\u2019t optimize a non-leaf Tensor"
    assert first_exception(curly).message == "can't optimize a non-leaf Tensor"


def test_a_dotted_exception_name_with_any_suffix_is_an_exception():
    exc = first_exception("torch._dynamo.exc.BackendCompilerFailed: backend='inductor' raised:")
    assert exc.type == "BackendCompilerFailed"


def test_copies_from_every_rank_collapse_into_one_with_its_ranks():
    line = "RuntimeError: Expected to have finished reduction in the prior iteration"
    paste = "".join(
        f'[rank{r}]: Traceback (most recent call last):\n[rank{r}]:   File "t.py", line 5, '
        f"in <module>\n[rank{r}]:     main()\n[rank{r}]: {line}\n"
        for r in (1, 0, 3)
    )
    parsed = parse_traceback(paste)
    assert len(parsed.exceptions) == 1 and parsed.exceptions[0].ranks == [0, 1, 3]


def test_a_message_goes_on_after_a_blank_line_before_a_known_continuation():
    paste = (
        "RuntimeError: Expected to have finished reduction in the prior iteration.\n\n"
        "Parameter indices which did not receive grad for rank 0: 160 161\n"
    )
    assert "Parameter indices" in first_exception(paste).message


def test_a_hard_wrapped_warning_keeps_its_lines():
    paste = (
        "/x/lr_scheduler.py:129: UserWarning: Detected call of `lr_scheduler.step()` before\n"
        "`optimizer.step()`. In PyTorch 1.1.0 and later, you should call them in the opposite"
        " order.\n"
        '  warnings.warn("Detected call of `lr_scheduler.step()` before `optimizer.step()`. "\n'
    )
    (warning,) = parse_traceback(paste).warnings
    assert "opposite order" in warning.message and "warnings.warn" not in warning.message


def test_frames_without_their_exception_line_are_kept_for_the_likely_tier():
    paste = (
        "Traceback (most recent call last):\n"
        '  File "run.py", line 92, in run\n    engine.resume()\n'
        '  File "/usr/lib/python3/site-packages/torch/optim/optimizer.py", line 124, in '
        "load_state_dict\n    raise ValueError\n"
    )
    parsed = parse_traceback(paste)
    assert parsed.exceptions == [] and len(parsed.trailing_frames) == 2


def test_an_unmatched_error_from_another_library_is_named():
    from app.answers import foreign_library

    pandas = (
        "Traceback (most recent call last):\n"
        '  File "prep.py", line 4, in <module>\n    df.loc["x"]\n'
        '  File "/usr/lib/python3/site-packages/pandas/core/indexing.py", line 1103, in '
        "__getitem__\n    return self._getitem_axis(maybe_callable, axis=axis)\n"
        "KeyError: 'x'\n"
    )
    assert foreign_library(parse_traceback(pandas)) == "pandas"
    cv2 = "cv2.error: OpenCV(4.8.0) resize.cpp:4062: error: (-215:Assertion failed) !ssize.empty()"
    assert foreign_library(parse_traceback(cv2)) == "OpenCV"
    torch_error = (
        'Traceback (most recent call last):\n  File "/usr/lib/python3/site-packages/torch/nn/'
        'modules/module.py", line 1, in f\n    x\nRuntimeError: boom\n'
    )
    assert foreign_library(parse_traceback(torch_error)) is None


def test_the_likely_tier_reads_only_the_head_of_a_message_that_swallowed_a_log(matcher):
    """What tells errors apart comes first; a megabyte of log lines is not tokenized."""
    paste = "ValueError: start\n" + "\n".join(f"word{i} continues here" for i in range(40000))
    result = matcher.match(parse_traceback(paste))
    assert result.query is not None and result.query.message.startswith("start")
    assert len(result.query.message) <= 4000


# ---- what a short-lived process keeps between runs ---------------------------------------------


def test_saved_entries_give_the_same_index_and_damaged_files_are_ignored(tmp_path):
    from app.matching.likely import read_saved_documents, save_documents

    docs = load_entry_files(collect_entry_files([REPO_CONTENT]))
    texts = entry_texts(docs)
    fresh = PasteMatcher.build(signature_records(docs), texts)
    assert fresh.likely.read_afresh == len(texts)
    path = tmp_path / "cache" / "likely-entries.marshal"
    save_documents(fresh.likely, path)
    reused = PasteMatcher.build(signature_records(docs), texts, saved=read_saved_documents(path))
    assert reused.likely.read_afresh == 0
    # One entry changed: only it is read again, and the answers are those of a fresh index.
    changed = [
        t if t.entry_id != "view-non-contiguous" else EntryText(t.entry_id, "new title")
        for t in texts
    ]
    partly = PasteMatcher.build(signature_records(docs), changed, saved=read_saved_documents(path))
    assert partly.likely.read_afresh == 1
    paste = Query("DataLoader worker (pid 4242) is killed by signal: Killed.", None)

    def ranked(built):
        return [(c.entry_id, c.score) for c in built.likely.candidates(paste)]

    assert ranked(reused) == ranked(fresh)
    assert ranked(partly) == ranked(PasteMatcher.build(signature_records(docs), changed))
    for damage in (b"", b"\x00garbage", path.read_bytes()[:1000]):
        path.write_bytes(damage)
        assert read_saved_documents(path) == {}
    assert read_saved_documents(tmp_path / "missing") == {}


# ---- retyped messages and bare StopIteration ---------------------------------------------------


def test_a_message_retyped_with_other_capitals_is_matched_by_its_signature(matcher):
    retyped = "RuntimeError: CUDNN rnn Backward can only be called in Training Mode"
    result = matcher.match(parse_traceback(retyped))
    (best, *_) = result.matches
    assert (best.entry_id, best.tier) == ("cudnn-rnn-backward-eval", "signature")
    as_written = matcher.match(
        parse_traceback(
            retyped.replace("CUDNN rnn Backward", "cudnn RNN backward").replace(
                "Training Mode", "training mode"
            )
        )
    )
    # Found only with case ignored, it counts for less than the same message as PyTorch prints it.
    assert best.confidence < as_written.matches[0].confidence
    # Case ignored is still the whole pattern: a few of its words in capitals are not a match.
    assert top(matcher, "RuntimeError: CUDNN RNN failed in Training") != (
        "cudnn-rnn-backward-eval",
        "signature",
    )


def test_an_exception_type_retyped_in_lower_case_counts_as_the_type(matcher):
    retyped = "训练时报错\n\nruntimeerror:the size of tensor a (208) must match the size of tensor b (416) at non-singleton dimension 3"
    assert top(matcher, retyped) == ("broadcast-size-mismatch", "signature")
    # Another type before the same words is not the signature's exception.
    other = retyped.replace("runtimeerror", "valueerror")
    assert top(matcher, other)[1] != "signature"


def test_a_bare_stop_iteration_is_explained_by_its_frames(matcher):
    from_loader = (
        "Traceback (most recent call last):\n"
        '  File "train.py", line 40, in <module>\n'
        "    images, labels = next(loader_iter)\n"
        '  File "/env/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 633, in __next__\n'
        "    data = self._next_data()\n"
        '  File "/env/lib/python3.10/site-packages/torch/utils/data/dataloader.py", line 676, in _next_data\n'
        "    index = self._next_index()  # may raise StopIteration\n"
        "StopIteration\n"
    )
    assert top(matcher, from_loader) == ("dataloader-iterate-restart", "signature")
    # The same exception from the user's own generator says nothing about a DataLoader.
    own = 'Traceback (most recent call last):\n  File "gen.py", line 3, in <module>\n    next(numbers)\nStopIteration\n'
    assert top(matcher, own)[1] != "signature"
    assert top(matcher, "StopIteration")[1] != "signature"


def test_frames_after_a_progress_bar_still_propose_candidates(matcher):
    """A paste cut before its error whose only other text is a progress bar: the frames are
    what there is to go by."""
    paste = (
        "  0%|          | 0/153 [00:00<?, ?it/s]\n"
        "Traceback (most recent call last):\n"
        '  File "<string>", line 1, in <module>\n'
        '  File "C:\\Python310\\lib\\multiprocessing\\spawn.py", line 116, in spawn_main\n'
        "    exitcode = _main(fd, parent_sentinel)\n"
        '  File "C:\\Python310\\lib\\multiprocessing\\spawn.py", line 287, in _fixup_main_from_path\n'
        "    main_content = runpy.run_path(main_path,\n"
        '  File "C:\\Python310\\lib\\runpy.py", line 289, in run_path\n'
        "    return _run_module_code(code, init_globals, run_name,\n"
        '  File "D:\\work\\train.py", line 65, in <module>\n'
        "    for batch in loader:\n"
    )
    result = matcher.match(parse_traceback(paste))
    assert result.candidates and result.candidates[0].entry_id == "spawn-main-guard"


def test_a_warning_printed_before_a_cut_traceback_is_not_taken_for_the_error(matcher):
    paste = (
        "train.py:42: DeprecationWarning: The binary mode of fromstring is deprecated\n"
        "  X = np.fromstring(data, dtype=np.uint8)\n"
        "Traceback (most recent call last):\n"
        '  File "train.py", line 75, in <module>\n'
        "    x = x.cuda()\n"
    )
    query = paste_query(parse_traceback(paste))
    # Read as a cut traceback (its frames and whatever text is around), not as the warning.
    assert query.exception_type is None and "x.cuda()" in query.frame_text
    # A warning after the frames, or with no traceback at all, is still the error to read.
    assert paste_query(parse_traceback(paste.split("Traceback")[0])).exception_type == (
        "DeprecationWarning"
    )
