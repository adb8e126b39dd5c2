"""Hostile entry files: YAML bombs, deep nesting and huge inputs are refused quickly, with their
file and line, wherever an entry is read (check, ingest, the editor's live check), and the rest
of the content still loads."""

import itertools
import random
import time
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from fastapi.testclient import TestClient
from sqlmodel import Session, select

from app.accounts import CLI, create_token
from app.cli import cli
from app.entries import (
    MAX_ENTRY_BYTES,
    MAX_FRONT_MATTER_BYTES,
    MAX_YAML_DEPTH,
    parse_entry,
    read_entry_file,
    yaml_reader,
)
from app.ingest import ingest_content
from app.models import Entry
from app.settings import Settings
from tests.conftest import entry_text

EXTRA_LINE = 7  # entry_text() puts extra_front on this line


def bomb(entry_id: str = "sample-entry") -> str:
    """A billion-laughs alias bomb in ~500 bytes: 9^8 strings once expanded."""
    levels = "abcdefgh"
    nested = ", ".join(
        f"&{name} [{','.join(['*' + below] * 9)}]" for below, name in itertools.pairwise(levels)
    )
    extra = 'aliases: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n'
    extra += f"related: [{nested}]\nsources: *h\n"
    return entry_text(entry_id, extra_front=extra)


def deep_brackets(entry_id: str = "sample-entry") -> str:
    return entry_text(entry_id, extra_front="aliases: " + "[" * 500 + "]" * 500 + "\n")


HOSTILE = {
    # name: (entry text, line reported, start of the message)
    "alias bomb": (bomb(), EXTRA_LINE, "anchor &a is not allowed in the front-matter"),
    "500 nested [": (deep_brackets(), EXTRA_LINE, "lists and mappings nest more than 20 levels"),
    "500 nested {": (
        entry_text(extra_front="aliases: " + "{a: " * 500 + "x" + "}" * 500 + "\n"),
        EXTRA_LINE,
        "lists and mappings nest more than 20 levels",
    ),
    "100 KB of nested '- '": (
        entry_text(extra_front="aliases:\n" + "- " * 50_000 + "x\n"),
        EXTRA_LINE + 1,
        "the front-matter is 100,",
    ),
    "60 KB of nested '- '": (
        entry_text(extra_front="aliases:\n" + "- " * 30_000 + "x\n"),
        EXTRA_LINE + 1,
        "lists and mappings nest more than 20 levels",
    ),
    "nested block lists, one a line": (
        entry_text(extra_front="aliases:\n" + "".join(" " * i + "-\n" for i in range(0, 200, 2))),
        EXTRA_LINE + 1 + MAX_YAML_DEPTH - 1,
        "lists and mappings nest more than 20 levels",
    ),
    "90 KB flow sequence": (
        entry_text(extra_front="aliases: [" + ", ".join(["x"] * 30_000) + "]\n"),
        EXTRA_LINE,
        "the front-matter is 90,",
    ),
    "1.2 MB flow sequence": (
        entry_text(extra_front="aliases: [" + ", ".join(["x"] * 400_000) + "]\n"),
        1,
        f"the file is over the {MAX_ENTRY_BYTES:,} bytes an entry may have",
    ),
    "undefined alias": (
        entry_text(extra_front="related: *nothing\n"),
        EXTRA_LINE,
        "alias *nothing is not allowed",
    ),
    "merge key": (
        entry_text(extra_front="sources: &s [a]\naliases: {<<: *s}\n"),
        EXTRA_LINE,
        "anchor &s is not allowed",
    ),
}


@pytest.fixture(params=["C", "Python"])
def loader(request, monkeypatch) -> str:
    """Both parsers: libyaml's when PyYAML has it, and the pure-Python fallback."""
    if request.param == "C":
        if not hasattr(yaml, "CSafeLoader"):
            pytest.skip("PyYAML without libyaml")
    else:
        monkeypatch.setattr(yaml_reader, "_FrontMatterLoader", yaml_reader._PyFrontMatterLoader)
    return request.param


@pytest.mark.parametrize("name", HOSTILE)
def test_hostile_front_matter_is_refused_within_a_second_with_its_line(name: str, loader: str):
    text, line, message = HOSTILE[name]
    started = time.thread_time()
    doc = parse_entry(text, "content/sample-entry.md", expected_id="sample-entry")
    elapsed = time.thread_time() - started
    assert elapsed < 1.0, f"{name} took {elapsed:.2f} s"
    assert not doc.ok and doc.front is None
    (problem,) = doc.problems
    assert (problem.path, problem.line) == ("content/sample-entry.md", line), str(problem)
    assert problem.message.startswith(message), str(problem)


def test_nesting_up_to_the_limit_is_read(loader: str):
    # The top-level mapping is level 1: aliases with 19 brackets is 20 levels.
    ok = parse_entry(entry_text(extra_front="aliases: " + "[" * 19 + "]" * 19 + "\n"), "e.md")
    assert "nest" not in " ".join(p.message for p in ok.problems)
    assert "aliases.0: expected text" in ok.problems[0].message
    deeper = parse_entry(entry_text(extra_front="aliases: " + "[" * 20 + "]" * 20 + "\n"), "e.md")
    assert deeper.problems[0].message.startswith("lists and mappings nest more than 20")


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            "versions: " + "9" * 5000 + "\n",
            "front-matter is not valid YAML: cannot read this value",
        ),
        ("versions: !!timestamp 2020-13-45\n", "front-matter is not valid YAML: cannot read this"),
        ("versions: !!python/object/apply:os.system [ls]\n", "front-matter is not valid YAML"),
        ("? [a, b]\n: x\n", "front-matter is not valid YAML"),
        ('versions: "\\(x"\n', "front-matter is not valid YAML"),
    ],
)
def test_values_yaml_cannot_build_are_reported_at_their_line(extra: str, message: str, loader: str):
    doc = parse_entry(entry_text(extra_front=extra), "content/sample-entry.md")
    (problem,) = doc.problems
    assert problem.line == EXTRA_LINE, str(problem)
    assert problem.message.startswith(message), str(problem)


def test_a_huge_wrong_value_is_quoted_short():
    extra = "versions: !!binary " + "QUJD" * 10_000 + "\nsources: " + "[x, " * 19 + "]" * 19 + "\n"
    doc = parse_entry(entry_text(extra_front=extra), "content/sample-entry.md")
    messages = [p.message for p in doc.problems]
    assert messages[0].startswith("versions: expected text, got bytes b'ABCABC")
    assert messages[1].startswith("sources.1: expected text, got list ['x', ['x'")
    assert all(len(m) < 250 for m in messages), messages


def test_limits_are_consistent_with_the_server():
    # Any entry the checker takes fits in the server's body limit for drafts and saves.
    assert Settings.model_fields["max_paste_bytes"].default >= MAX_ENTRY_BYTES
    assert MAX_FRONT_MATTER_BYTES < MAX_ENTRY_BYTES


def test_front_matter_just_under_the_limit_loads_quickly():
    count = (MAX_FRONT_MATTER_BYTES - 500) // 3
    text = entry_text(
        kind="howto", signatures="", extra_front=f"aliases: [{', '.join('x' * count)}]\n"
    )
    started = time.thread_time()
    doc = parse_entry(text, "content/sample-entry.md", expected_id="sample-entry")
    assert time.thread_time() - started < 1.0
    assert doc.ok and len(doc.front.aliases) == count


def test_a_huge_file_is_refused_without_reading_it_all(tmp_path: Path):
    path = tmp_path / "huge.md"
    with path.open("wb") as file:
        file.write(entry_text("huge").encode())
        file.truncate(50 * MAX_ENTRY_BYTES)  # sparse: 50 MB of NUL bytes after the entry
    started = time.thread_time()
    doc = read_entry_file(path, label="content/huge.md")
    assert time.thread_time() - started < 1.0
    assert [str(p) for p in doc.problems] == [
        f"content/huge.md:1: the file is over the {MAX_ENTRY_BYTES:,} bytes an entry may have"
    ]


@pytest.mark.slow  # a linear-time check on megabytes: the full suite runs it
def test_many_equal_headings_render_in_linear_time():
    text = entry_text(body="## h\n" * 20_000)  # 100 KB: the anchors plugin took 150 s on this
    started = time.thread_time()
    doc = parse_entry(text, "content/sample-entry.md", expected_id="sample-entry")
    assert time.thread_time() - started < 10.0
    assert 'id="h-19999"' in doc.rendered.html


def test_heading_ids_are_those_the_anchors_plugin_gave():
    from markdown_it import MarkdownIt
    from mdit_py_plugins.anchors import anchors_plugin

    from app.rendering import _highlight, render_body

    plugin = MarkdownIt("commonmark", {"html": False, "highlight": _highlight})
    plugin.enable("table")
    plugin.use(anchors_plugin, min_level=2, max_level=4, permalink=True, permalinkSymbol="#")
    body = (
        "## A\n## A\n## A-1\n## A\n### `x` y\n#### a\n##### five\n# one\n## 显存 不足\n## \n## \n"
    )
    assert render_body(body).html == plugin.render(body)


def test_random_damage_never_raises():
    rng = random.Random(15)
    base = bomb() + deep_brackets()
    pieces = [
        "&a ",
        "*a",
        "[",
        "]",
        "{",
        "}",
        ": ",
        "- ",
        "\n",
        "  ",
        "!!",
        "'",
        '"',
        "? ",
        "---\n",
    ]
    for _ in range(400):
        text = list(base)
        for _ in range(rng.randint(1, 8)):
            text.insert(rng.randrange(len(text)), rng.choice(pieces))
        doc = parse_entry("".join(text), "content/sample-entry.md")
        assert all(p.line >= 1 for p in doc.problems)


def write_hostile_folder(folder: Path) -> None:
    (folder / "bomb.md").write_text(bomb("bomb"), encoding="utf-8")
    (folder / "deep.md").write_text(deep_brackets("deep"), encoding="utf-8")
    (folder / "good.md").write_text(entry_text("good"), encoding="utf-8")


def test_check_command_reports_the_bad_files_and_passes_the_good_one(content_dir: Path):
    write_hostile_folder(content_dir)
    started = time.thread_time()
    result = CliRunner().invoke(cli, ["check", str(content_dir)])
    assert time.thread_time() - started < 5.0
    assert result.exit_code == 1, result.output
    lines = result.output.splitlines()
    assert lines == [
        f"{content_dir}/bomb.md:7: anchor &a is not allowed in the front-matter: "
        "write each value out",
        f"{content_dir}/deep.md:7: lists and mappings nest more than 20 levels deep here",
        "checked 3 file(s): 2 error(s), 0 warning(s)",
    ]


def test_ingest_skips_the_hostile_files_and_loads_the_rest(engine, content_dir: Path):
    write_hostile_folder(content_dir)
    started = time.thread_time()
    report = ingest_content(engine, content_dir)
    assert time.thread_time() - started < 5.0
    assert (report.counts["create"], report.counts["broken"]) == (1, 2)
    assert [(p.path, p.line) for p in report.problems] == [
        ("content/bomb.md", 7),
        ("content/deep.md", 7),
    ]
    with Session(engine) as session:
        assert session.exec(select(Entry.id)).all() == ["good"]


def test_server_starts_and_the_live_check_refuses_the_bomb_quickly(make_settings, content_dir):
    write_hostile_folder(content_dir)
    from app.web import create_app

    with TestClient(create_app(make_settings(content_dir))) as client:
        assert client.get("/api/v1/entries/good").status_code == 200
        assert client.get("/api/v1/entries/bomb").status_code == 404
        with Session(client.app.state.runtime.engine) as session:
            _, token = create_token(
                session, name="editor-bot", scope="write", expires_in=None, owner=CLI
            )
            session.commit()
        # CPU seconds of every thread of this process (the app answers in its own threads):
        # another process busy on the same cores does not add to them.
        started = time.process_time()
        response = client.post(
            "/api/v1/drafts/check",
            json={"markdown": bomb("new-entry")},
            headers={"Authorization": f"Bearer {token}"},
        )
        elapsed = time.process_time() - started
    assert elapsed < 2.0, f"the live check took {elapsed:.2f} s of CPU"
    assert response.status_code in (200, 422), response.text
    body = response.json()
    assert body["ok"] is False
    assert [(p["line"], p["message"]) for p in body["problems"]] == [
        (7, "anchor &a is not allowed in the front-matter: write each value out")
    ]
