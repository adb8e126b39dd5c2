"""The CLI's short commands on a warm data dir: what they import (counted, never timed), the
data-dir cache they answer from (built once, rebuilt when the database moves or the file is
damaged, and answering exactly what the database answers), a reader that goes away, and the
links printed when a server answered."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from sqlmodel import Session

from app import storage
from app.answers import answer_paste
from app.checker import check_paths
from app.entry_details import get_entry_details
from app.local_cache import (
    SiblingCache,
    answer_from_cache,
    build_match_data,
    build_show_data,
    cache_path,
    matcher_from,
)
from app.search import SearchService
from app.settings import Settings
from app.storage import create_db_engine

PITFALLS = [sys.executable, "-c", "from app.cli import main; main()"]
# Run the CLI, then write the names of every module it imported to $MODULES_OUT.
COUNTED = [
    sys.executable,
    "-c",
    "import atexit, json, os, sys\n"
    "atexit.register(lambda: open(os.environ['MODULES_OUT'], 'w').write("
    "json.dumps(sorted(sys.modules))))\n"
    "from app.cli import main\n"
    "sys.argv[0] = 'pitfalls'\n"
    "main()",
]
KNOWN = (
    "Traceback (most recent call last):\n"
    '  File "/srv/app/train.py", line 12, in forward\n'
    "    x = x.transpose(0, 1).view(-1)\n"
    "RuntimeError: view size is not compatible with input tensor's size and stride (at least "
    "one dimension spans across two contiguous subspaces). Use .reshape(...) instead.\n"
)
PASTES = {
    "known": KNOWN,
    "unknown": KNOWN.replace("view size is not compatible", "the flux capacitor refused"),
    "likely": "RuntimeError: CUDA out of memory while allocating a tensor on the gpu device\n",
    "warning": "UserWarning: The given NumPy array is not writable, and PyTorch does not "
    "support non-writable tensors.\n",
    "foreign": 'Traceback (most recent call last):\n  File "/x/site-packages/pandas/core/frame.py"'
    ", line 3, in f\n    g()\nKeyError: 'col'\n",
    "no error": "hello there, nothing failed today at all\n",
    "chained": 'Traceback (most recent call last):\n  File "/srv/a.py", line 3, in f\n    g()\n'
    "KeyError: 'x'\n\nDuring handling of the above exception, another exception occurred:\n\n"
    + KNOWN,
    "ranks": "".join(f"[rank{n}]: {line}\n" for n in (0, 1) for line in KNOWN.splitlines()),
    "old torch": "torch 1.2.0\nValueError: Expected a batch of 2D affine matrices of shape Nx2x3 "
    "for size (1, 1, 4, 4). Got torch.Size([2, 3]).\n",  # outside the entry's >=1.3
}
DATABASE_LIBRARIES = ("fastapi", "starlette", "sqlalchemy", "sqlmodel", "alembic")
# What a warm short command never needs: the settings' and answers' validation library, the
# web stack, the MCP SDK and the metrics (app.quick_settings, app.plain_answers, lazy imports).
NOT_ON_THE_WARM_PATH = {"pydantic", "pydantic_settings", "fastapi", "mcp", "prometheus_client"}
# The likely tier stems words with Whoosh's Porter stemmer: that module alone, not its index.
STEMMER = {"whoosh", "whoosh.lang", "whoosh.lang.porter"}

# Every test here starts real CLI processes (what it imports is only seen in a fresh one).
pytestmark = pytest.mark.slow


def _env(settings: Settings, **more: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PITFALLS_")}
    env["PITFALLS_DATA_DIR"] = str(settings.data_dir)
    env["PITFALLS_CONTENT_DIR"] = str(settings.content_dir)
    env.update(more)
    return env


def _run(settings: Settings, *args: str, text: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*PITFALLS, *args],
        input=text,
        capture_output=True,
        text=True,
        env=_env(settings),
        timeout=300,
    )


def _modules(settings: Settings, tmp_path: Path, *args: str, text: str = "") -> list[str]:
    out = tmp_path / "modules.json"
    result = subprocess.run(
        [*COUNTED, *args],
        input=text,
        capture_output=True,
        text=True,
        env=_env(settings, MODULES_OUT=str(out)),
        timeout=300,
    )
    assert result.returncode in (0, 1), result.stderr
    return json.loads(out.read_text())


def _roots(modules: list[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


def _stamp(path: Path) -> tuple[int, int]:
    info = path.stat()
    return info.st_ino, info.st_mtime_ns


def test_warm_match_show_and_search_import_no_database_library(real_settings, tmp_path):
    cold = _modules(real_settings, tmp_path, "match", text=KNOWN)  # builds the cache
    warm = _modules(real_settings, tmp_path, "match", text=KNOWN)
    assert not _roots(warm) & set(DATABASE_LIBRARIES), sorted(_roots(warm) & {*DATABASE_LIBRARIES})
    assert {m for m in warm if m.startswith("whoosh")} <= STEMMER
    assert {"sqlalchemy", "sqlmodel"} <= _roots(cold)  # the build reads the database
    assert len(warm) < len(cold) - 150, (len(warm), len(cold))

    _modules(real_settings, tmp_path, "show", "view-non-contiguous")
    shown = _modules(real_settings, tmp_path, "show", "view-non-contiguous")
    assert not _roots(shown) & set(DATABASE_LIBRARIES)
    assert {m for m in shown if m.startswith("whoosh")} <= STEMMER

    searched = _modules(real_settings, tmp_path, "search", "view", "size")  # index is current
    assert not _roots(searched) & set(DATABASE_LIBRARIES)
    assert "whoosh.searching" in searched  # the index is read as it is: same results

    one = str(real_settings.content_dir / "view-non-contiguous.md")
    _modules(real_settings, tmp_path, "check", one)
    checked = _modules(real_settings, tmp_path, "check", one)
    for command, modules in (("match", warm), ("show", shown), ("search", searched)):
        assert not _roots(modules) & NOT_ON_THE_WARM_PATH, (
            command,
            _roots(modules) & NOT_ON_THE_WARM_PATH,
        )
    # check validates the front-matter with pydantic, but reads the settings without it
    assert (
        not _roots(checked) & (NOT_ON_THE_WARM_PATH - {"pydantic"})
        and "app.settings" not in checked
    )
    assert not {m for m in warm + shown + searched + checked if m.startswith("app.cli.")} - {
        "app.cli.group", "app.cli.answers", "app.cli.show", "app.cli.content"
    }  # fmt: skip


def test_the_match_cache_is_built_once_and_again_when_the_database_moves(real_settings):
    path = cache_path(real_settings, "match")
    assert not path.exists()
    first = _run(real_settings, "match", "--json", text=KNOWN)
    assert first.returncode == 0, first.stderr
    built = _stamp(path)
    again = _run(real_settings, "match", "--json", text=KNOWN)
    assert again.stdout == first.stdout and _stamp(path) == built  # read, not rebuilt

    # A content change reaches the database through ingest: the next match rebuilds, once.
    entry = real_settings.content_dir / "view-non-contiguous.md"
    marked = entry.read_text().replace("title: ", "title: (edited) ", 1)
    entry.write_text(marked)
    ingested = _run(real_settings, "ingest")
    assert ingested.returncode == 0, ingested.stdout + ingested.stderr
    changed = _run(real_settings, "match", "--json", text=KNOWN)
    rebuilt = _stamp(path)
    assert rebuilt != built
    assert json.loads(changed.stdout)["matches"][0]["title"].startswith("(edited) ")
    _run(real_settings, "match", "--json", text=KNOWN)
    assert _stamp(path) == rebuilt


@pytest.mark.parametrize("damage", ["truncated", "flipped byte", "not marshal", "empty"])
def test_a_damaged_cache_is_rebuilt_and_the_answer_is_still_right(real_settings, damage):
    path = cache_path(real_settings, "match")
    good = _run(real_settings, "match", "--json", text=KNOWN)
    assert good.returncode == 0
    blob = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(blob[: len(blob) // 2])
    elif damage == "flipped byte":
        at = len(blob) - 100
        path.write_bytes(blob[:at] + bytes([blob[at] ^ 0xFF]) + blob[at + 1 :])
    elif damage == "not marshal":
        path.write_bytes(b"pitfalls cli cache 1\n" + b"\x00" * 40)
    else:
        path.write_bytes(b"")
    answered = _run(real_settings, "match", "--json", text=KNOWN)
    assert answered.returncode == 0, answered.stderr
    assert answered.stdout == good.stdout
    assert path.read_bytes() == blob or len(path.read_bytes()) == len(blob)  # written again


def test_answers_from_the_cache_are_the_database_answers(real_settings):
    engine = create_db_engine(real_settings)
    try:
        data = build_match_data(engine)
        with Session(engine) as session:
            records = storage.active_signature_records(session)
            texts = storage.active_entry_texts(session)
        from app.matching.paste_matcher import PasteMatcher

        matcher = PasteMatcher.build(records, texts)
        for name, text in PASTES.items():
            expected = answer_paste(text, engine=engine, matcher=matcher).model_dump()
            assert answer_from_cache(text, data) == expected, name
        assert matcher_from(data).signatures.records == matcher.signatures.records

        shown = build_show_data(engine)["entries"]
        with Session(engine) as session:
            for entry_id in ("view-non-contiguous", "backward-twice", "affine-grid-sample"):
                details = get_entry_details(session, entry_id)
                assert details is not None
                assert shown[entry_id] == details.model_dump(mode="json")
    finally:
        engine.dispose()


def test_the_plain_answer_shapes_are_the_models_field_by_field():
    from app import answer_shapes, plain_answers

    for plain in plain_answers.SHAPES:
        model = getattr(answer_shapes, plain.__name__)
        fields = model.model_fields
        assert [name for name, _, _ in plain.FIELDS] == list(fields), plain.__name__
        for name, _, default in plain.FIELDS:
            info = fields[name]
            if info.is_required():
                assert default is plain_answers._NO_DEFAULT, (plain.__name__, name)
                continue
            expected = info.get_default(call_default_factory=True)
            made = default() if callable(default) else default
            dumped = made.model_dump() if hasattr(made, "model_dump") else made
            wanted = expected.model_dump() if hasattr(expected, "model_dump") else expected
            assert dumped == wanted, (plain.__name__, name)


def test_search_on_the_index_alone_finds_what_the_database_backed_search_finds(real_settings):
    engine = create_db_engine(real_settings)
    index_dir = real_settings.index_dir
    assert index_dir is not None
    backed = SearchService(index_dir, engine, search_engine=real_settings.search_engine)
    alone = SearchService(index_dir, search_engine=real_settings.search_engine)
    try:
        for query in ("view size", "cuda out of memory", "显存", "backward twice", "tensor", ""):
            for options in ({}, {"kind": "error"}, {"page": 2, "limit": 3}):
                expected = backed.search(query, **options).to_dict()
                assert alone.search(query, **options).to_dict() == expected, (query, options)
    finally:
        backed.close()
        alone.close()
        engine.dispose()


def test_check_with_remembered_siblings_reports_what_a_full_read_reports(repo_content, tmp_path):
    broken = repo_content / "backward-twice.md"  # a sibling that no longer parses
    broken.write_text(broken.read_text().replace("title:", "title: [unclosed", 1))
    checked = [repo_content / "view-non-contiguous.md"]
    expected = [str(p) for p in check_paths(checked).problems]
    memo_file = tmp_path / "cache" / "cli-check.marshal"
    for _ in range(2):  # the first run reads and remembers, the second answers from memory
        memo = SiblingCache(memo_file)
        assert [str(p) for p in check_paths(checked, memo).problems] == expected
        memo.save()
    assert memo_file.exists()


@pytest.mark.parametrize(
    "args", [("match", "PASTE"), ("search", "tensor"), ("show", "view-non-contiguous")]
)
def test_a_reader_that_goes_away_ends_the_command_with_exit_0(real_settings, tmp_path, args):
    paste = tmp_path / "paste.txt"
    paste.write_text(PASTES["unknown"])  # no match: exit 1 when the output is read
    args = tuple(str(paste) if a == "PASTE" else a for a in args)
    _run(real_settings, *args)  # warm
    process = subprocess.Popen(
        [*PITFALLS, *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(real_settings),
    )
    assert process.stdout is not None and process.stderr is not None
    process.stdout.close()  # as `| head -0` would: every write now fails
    with process.stderr:
        errors = process.stderr.read().decode()
    assert process.wait(timeout=300) == 0, errors
    assert "Traceback" not in errors and "BrokenPipe" not in errors


@pytest.mark.e2e
def test_links_printed_from_a_server_are_absolute(server, real_settings):
    base, _folder = server
    matched = _run(real_settings, "match", "--server", base, text=KNOWN)
    assert matched.returncode == 0, matched.stderr
    more = [line.strip() for line in matched.stdout.splitlines() if "more:" in line]
    assert more and all(line.startswith(f"more: {base}/entries/") for line in more)

    local = _run(real_settings, "search", "view", "size")
    remote = _run(real_settings, "search", "view", "size", "--server", base)
    assert remote.returncode == 0, remote.stderr
    hits = [line.split() for line in remote.stdout.splitlines()[1:]]
    assert hits and all(words[-1].startswith(f"{base}/entries/{words[0]}") for words in hits)
    assert [w[0] for w in hits] == [line.split()[0] for line in local.stdout.splitlines()[1:]]
    as_json = json.loads(_run(real_settings, "search", "tensor", "--json", "--server", base).stdout)
    assert as_json["hits"] and as_json["total"] >= len(as_json["hits"])


def test_every_command_module_is_named_in_the_lazy_table():
    """The group imports a command's module only when that command is asked for: every
    command a module of app/cli defines is in the table, under that module."""
    import importlib
    import pkgutil

    import app.cli
    from app.cli.group import COMMAND_MODULES, cli

    defined = {}
    for info in pkgutil.iter_modules(app.cli.__path__):
        before = set(cli.commands)
        importlib.import_module(f"app.cli.{info.name}")
        for name in set(cli.commands) - before:
            defined[name] = info.name
    assert set(cli.every_command()) == set(COMMAND_MODULES)
    for name, module in defined.items():
        assert COMMAND_MODULES[name] == module


def test_the_hooks_cached_answers_follow_the_database(real_settings):
    """The notebook hook answers from the CLI's cache, and a change to the database (here an
    ingest of an edited file) is in its next answer."""
    from app.local_cache import CachedAnswers

    answers = CachedAnswers(real_settings)
    first = answers.match(KNOWN)
    assert first["matches"][0]["id"] == "view-non-contiguous"
    entry = real_settings.content_dir / "view-non-contiguous.md"
    entry.write_text(entry.read_text().replace("title: ", "title: (edited) ", 1))
    ingested = _run(real_settings, "ingest")
    assert ingested.returncode == 0, ingested.stdout + ingested.stderr
    assert answers.match(KNOWN)["matches"][0]["title"].startswith("(edited) ")
