"""`pitfalls check`: cross-file problems and the command's exit codes."""

from pathlib import Path

from click.testing import CliRunner

from app.checker import check_paths
from app.cli import cli
from tests.conftest import entry_text


def write(folder: Path, entry_id: str, text: str | None = None) -> Path:
    path = folder / f"{entry_id}.md"
    path.write_text(text if text is not None else entry_text(entry_id), encoding="utf-8")
    return path


def sig(pattern: str, example: str) -> str:
    return f"signatures:\n  - exception: RuntimeError\n    message: '{pattern}'\n    example: '{example}'\n"


def test_duplicate_id_in_two_folders(content_dir: Path):
    (content_dir / "a").mkdir()
    (content_dir / "b").mkdir()
    write(content_dir / "a", "twin")
    write(content_dir / "b", "twin")
    report = check_paths([content_dir])
    messages = [str(p) for p in report.errors]
    assert messages == [
        f"{content_dir}/b/twin.md:2: duplicate id 'twin': already defined in {content_dir}/a/twin.md"
    ]


def test_related_must_exist(content_dir: Path):
    write(content_dir, "one", entry_text("one", extra_front="related: [two, ghost]\n"))
    write(content_dir, "two")
    messages = [str(p) for p in check_paths([content_dir]).errors]
    assert messages == [f"{content_dir}/one.md:7: related id 'ghost' does not exist"]


def test_checking_one_file_sees_its_siblings(content_dir: Path):
    one = write(content_dir, "one", entry_text("one", extra_front="related: [two]\n"))
    write(content_dir, "two")
    report = check_paths([one])
    assert report.problems == []
    assert [d.front.id for d in report.docs] == ["one"]


def test_collision_when_another_entry_matches_the_example_as_well(content_dir: Path):
    write(
        content_dir,
        "broad",
        entry_text("broad", signatures=sig("shape mismatch", "RuntimeError: shape mismatch")),
    )
    write(
        content_dir,
        "narrow",
        entry_text(
            "narrow",
            signatures=sig(
                "shape mismatch in (?P<where>\\w+)", "RuntimeError: shape mismatch in conv"
            ),
        ),
    )
    messages = [str(p) for p in check_paths([content_dir]).errors]
    # "broad" also matches the narrow example, but ranks lower (fewer literal characters).
    assert messages == []
    write(
        content_dir,
        "clone",
        entry_text("clone", signatures=sig("shape mismatch", "RuntimeError: shape mismatch")),
    )
    messages = [str(p) for p in check_paths([content_dir]).errors]
    assert (
        f"{content_dir}/broad.md:10: collision: the example of signatures[0] is matched as well or better by entry 'clone' (signatures[0]); make one pattern more specific"
        in messages
    )
    assert any(m.startswith(f"{content_dir}/clone.md:10: collision") for m in messages)


def test_check_command_exit_codes_and_strict(content_dir: Path):
    runner = CliRunner()
    write(content_dir, "good")
    result = runner.invoke(cli, ["check", str(content_dir)])
    assert result.exit_code == 0, result.output
    # A warning only: passes normally, fails with --strict.
    write(content_dir, "warned", entry_text("warned", body="## Fix\n\nDo this.\n"))
    assert runner.invoke(cli, ["check", str(content_dir)]).exit_code == 0
    strict = runner.invoke(cli, ["check", "--strict", str(content_dir)])
    assert strict.exit_code == 1
    assert "warned.md:12: warning: missing section(s)" in strict.output
    # An error: fails, names file and line, and the other files are still checked.
    write(content_dir, "broken", "no front matter here\n")
    result = runner.invoke(cli, ["check", str(content_dir)])
    assert result.exit_code == 1
    assert f"{content_dir}/broken.md:1: no front-matter" in result.output
    assert "checked 3 file(s): 1 error(s), 1 warning(s)" in result.output


def test_repository_content_is_clean_under_strict():
    result = CliRunner().invoke(
        cli, ["check", "--strict", str(Path(__file__).parent.parent / "content")]
    )
    assert result.exit_code == 0, result.output


def test_an_entry_with_the_editors_template_text_is_an_error_at_its_line(content_dir: Path):
    from app.drafts import TEMPLATE_PLACEHOLDERS
    from app.web.entries.editor import BLANK_ENTRY

    body = (
        "## What you see\n\nAn error.\n\n## Why it happens\n\nBecause.\n\n"
        f"## Fix\n\n*{TEMPLATE_PLACEHOLDERS[2]}*\n"
    )
    path = write(content_dir, "half-done", entry_text("half-done", body=body))
    line = path.read_text().split("\n").index(f"*{TEMPLATE_PLACEHOLDERS[2]}*") + 1
    result = CliRunner().invoke(cli, ["check", str(path)])
    assert result.exit_code == 1
    assert f"{path}:{line}: unfinished: the editor's template text 'Show the fix" in result.output
    # Every placeholder of the new-entry template is caught, wherever it sits.
    blank = write(content_dir, "blank", BLANK_ENTRY)
    lines = blank.read_text().split("\n")
    flagged = {p.line for p in check_paths([blank]).errors if "unfinished" in p.message}
    assert flagged == {
        n for n, text in enumerate(lines, 1) if any(t in text for t in TEMPLATE_PLACEHOLDERS)
    }
    assert len(flagged) == 7


def test_near_duplicate_tags_across_files_are_warnings_naming_both(content_dir: Path):
    from app.checker import near_duplicate_tags

    for a, b in [
        ("inplace", "in-place"),
        ("image", "images"),
        ("augmentation", "data-augmentation"),
        ("module", "nn-module"),
    ]:
        assert near_duplicate_tags(a, b) and near_duplicate_tags(b, a)
    for a, b in [("gpu", "multi-gpu"), ("memory", "memory-layout"), ("loss", "los"), ("a", "a")]:
        assert not near_duplicate_tags(a, b)
    write(
        content_dir, "one", entry_text("one").replace("tags: [tensor]", "tags: [tensor, inplace]")
    )
    write(content_dir, "two", entry_text("two").replace("tags: [tensor]", "tags: [in-place]"))
    report = check_paths([content_dir])
    assert not report.errors
    assert [str(p) for p in report.warnings] == [
        f"{content_dir}/one.md:6: warning: tag 'inplace' looks like 'in-place' (used in two.md): "
        "one tag spelled two ways; use one spelling",
        f"{content_dir}/two.md:6: warning: tag 'in-place' looks like 'inplace' (used in one.md): "
        "one tag spelled two ways; use one spelling",
    ]
    strict = CliRunner().invoke(cli, ["check", "--strict", str(content_dir / "two.md")])
    assert strict.exit_code == 1 and "looks like 'inplace' (used in one.md)" in strict.output


def write_pickle_entry(folder: Path, entry_id: str, context: str | None = None) -> None:
    """An entry whose one signature is `cannot pickle`, with a context condition or none."""
    signature = sig("cannot pickle", "RuntimeError: cannot pickle")
    if context is not None:
        signature += f"    context: '{context}'\n"
    write(folder, entry_id, entry_text(entry_id, signatures=signature))


def test_a_context_on_one_side_tells_two_entries_apart(content_dir: Path):
    """Two entries may share a message when one of them needs a context: the paste decides,
    and the matcher puts the entry whose context it holds first."""
    write_pickle_entry(content_dir, "plain")
    write_pickle_entry(content_dir, "saving", context="torch\\.save")
    assert [str(p) for p in check_paths([content_dir]).errors] == []
    # The same context on both sides decides nothing: a collision again.
    write_pickle_entry(content_dir, "plain", context="torch\\.save")
    messages = [str(p) for p in check_paths([content_dir]).errors]
    assert any(m.startswith(f"{content_dir}/plain.md:10: collision") for m in messages)


def test_a_context_that_holds_in_the_other_entry_example_is_still_a_collision(content_dir: Path):
    """A context any paste meets (`.`) must not let one entry take another's message."""
    write_pickle_entry(content_dir, "plain")
    write_pickle_entry(content_dir, "grabber", context=".")
    messages = [str(p) for p in check_paths([content_dir]).errors]
    assert any(m.startswith(f"{content_dir}/plain.md:10: collision") for m in messages), messages
