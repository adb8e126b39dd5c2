"""Ingest: new, changed, unchanged, removed and broken files; each file all-or-nothing."""

from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlmodel import Session, select

from app import storage
from app.cli import cli
from app.ingest import ingest_content
from app.matching import SignatureMatcher
from app.models import Change, Entry, Revision, Signature, Snippet
from app.wiki import check_draft
from tests.conftest import entry_text

pytestmark = pytest.mark.both_databases


def write(folder: Path, entry_id: str, text: str | None = None) -> Path:
    path = folder / f"{entry_id}.md"
    path.write_text(text if text is not None else entry_text(entry_id), encoding="utf-8")
    return path


def rows(engine, model) -> list:
    with Session(engine) as session:
        return list(session.exec(select(model)).all())


def test_new_files_become_entries_with_parts(engine, content_dir: Path):
    write(content_dir, "first")
    write(content_dir, "second")
    report = ingest_content(engine, content_dir)
    assert (report.counts["create"], report.changed, report.failed) == (2, 2, 0)
    assert sorted(e.id for e in rows(engine, Entry)) == ["first", "second"]
    (revision,) = [r for r in rows(engine, Revision) if r.entry_id == "first"]
    assert (revision.number, revision.source, revision.author) == (1, "ingest", "ingest")
    assert revision.markdown == entry_text("first")
    assert len(rows(engine, Signature)) == 2 and len(rows(engine, Snippet)) == 2
    assert report.change_seq == 2


def test_second_run_is_a_no_op(engine, content_dir: Path):
    write(content_dir, "first")
    ingest_content(engine, content_dir)
    before = (len(rows(engine, Revision)), len(rows(engine, Change)))
    report = ingest_content(engine, content_dir)
    assert report.summary_line().startswith("ingest: 0 changed")
    assert report.counts["unchanged"] == 1
    assert (len(rows(engine, Revision)), len(rows(engine, Change))) == before


def test_line_endings_alone_make_no_revision(engine, content_dir: Path):
    path = write(content_dir, "first")
    ingest_content(engine, content_dir)
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    report = ingest_content(engine, content_dir)
    assert report.changed == 0
    assert len(rows(engine, Revision)) == 1


def test_changed_file_makes_a_revision(engine, content_dir: Path):
    path = write(content_dir, "first")
    ingest_content(engine, content_dir)
    path.write_text(entry_text("first", title="A better title"), encoding="utf-8")
    report = ingest_content(engine, content_dir)
    assert report.counts["update"] == 1
    with Session(engine) as session:
        entry = storage.get_entry(session, "first")
        assert (entry.title, entry.revision) == ("A better title", 2)
        assert [r.number for r in storage.list_revisions(session, entry_id="first")] == [1, 2]
        assert storage.current_markdown(session, entry=entry) == path.read_text()


def test_removed_file_archives_and_returning_file_restores(engine, content_dir: Path):
    path = write(content_dir, "first")
    write(content_dir, "second")
    ingest_content(engine, content_dir)
    path.unlink()
    report = ingest_content(engine, content_dir)
    assert report.counts["archive"] == 1
    with Session(engine) as session:
        assert storage.get_entry(session, "first").archived
        assert [e.id for e in storage.list_entries(session)] == ["second"]
    assert ingest_content(engine, content_dir).changed == 0  # archiving happens once
    write(content_dir, "first")
    report = ingest_content(engine, content_dir)
    assert report.counts["restore"] == 1
    with Session(engine) as session:
        entry = storage.get_entry(session, "first")
        assert not entry.archived and entry.revision == 2


def test_prune_deletes_the_entry_and_its_history(engine, content_dir: Path):
    path = write(content_dir, "first")
    ingest_content(engine, content_dir)
    path.unlink()
    report = ingest_content(engine, content_dir, prune=True)
    assert report.counts["delete"] == 1
    assert (
        rows(engine, Entry) == [] and rows(engine, Revision) == [] and rows(engine, Signature) == []
    )
    assert [c.action for c in rows(engine, Change)] == ["create", "delete"]


def test_broken_file_is_reported_and_the_rest_loads(engine, content_dir: Path):
    write(content_dir, "good")
    write(content_dir, "bad", entry_text("bad", extra_front="colour: red\n"))
    report = ingest_content(engine, content_dir)
    assert report.failed == 1 and report.counts["create"] == 1
    assert [str(p) for p in report.problems if p.severity == "error"] == [
        f"{content_dir.name}/bad.md:7: unknown field 'colour' (allowed: id, title, summary, kind, "
        "tags, aliases, questions, versions, signatures, wordings, related, sources)"
    ]
    assert [e.id for e in rows(engine, Entry)] == ["good"]


def test_a_failing_write_leaves_nothing_half_written(engine, content_dir: Path, monkeypatch):
    write(content_dir, "first")

    def fail_after_entry_row(session, *, doc):
        raise OSError("disk full")

    monkeypatch.setattr(storage.writes, "_replace_parts", fail_after_entry_row)
    with pytest.raises(OSError):
        ingest_content(engine, content_dir)
    assert rows(engine, Entry) == [] and rows(engine, Revision) == [] and rows(engine, Change) == []


def test_ingest_command_exit_code_and_summary(
    make_settings, content_dir: Path, monkeypatch, tmp_path
):
    settings = make_settings(content_dir)
    monkeypatch.setenv("PITFALLS_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("PITFALLS_CONTENT_DIR", str(content_dir))
    write(content_dir, "good")
    runner = CliRunner()
    result = runner.invoke(cli, ["ingest"])
    assert result.exit_code == 0, result.output
    assert "ingest: 1 changed (1 new" in result.output
    write(content_dir, "bad", "no front matter\n")
    result = runner.invoke(cli, ["ingest"])
    assert result.exit_code == 1
    assert "bad.md:1: no front-matter" in result.output
    assert "ingest: 0 changed" in result.output and "1 broken" in result.output


# ---- the cross-file checks of `pitfalls check`, applied to the files an ingest would write ----


def sig(pattern: str, example: str) -> str:
    return f"signatures:\n  - exception: RuntimeError\n    message: '{pattern}'\n    example: '{example}'\n"


BROAD = sig("shape mismatch", "RuntimeError: shape mismatch")
NARROW = sig("shape mismatch in (?P<where>\\w+)", "RuntimeError: shape mismatch in conv")


def error_lines(report) -> list[str]:
    return [str(p) for p in report.problems if p.severity == "error"]


def stored_ids(engine) -> list[str]:
    return sorted(e.id for e in rows(engine, Entry) if not e.archived)


def test_dangling_related_id_is_refused_and_the_rest_loads(engine, content_dir: Path):
    write(content_dir, "one", entry_text("one", extra_front="related: [two, ghost]\n"))
    write(content_dir, "two")
    report = ingest_content(engine, content_dir)
    assert error_lines(report) == ["content/one.md:7: related id 'ghost' does not exist"]
    assert (report.counts["create"], report.failed) == (1, 1)
    assert stored_ids(engine) == ["two"]


def test_related_to_a_refused_file_is_refused_too(engine, content_dir: Path):
    write(content_dir, "one", entry_text("one", extra_front="related: [two]\n"))
    write(content_dir, "two", entry_text("two", extra_front="related: [ghost]\n"))
    write(content_dir, "three")
    report = ingest_content(engine, content_dir)
    assert error_lines(report) == [
        "content/one.md:7: related id 'two' does not exist",
        "content/two.md:7: related id 'ghost' does not exist",
    ]
    assert stored_ids(engine) == ["three"]


def test_file_colliding_with_a_stored_entry_is_refused_not_the_stored_one(
    engine, content_dir: Path
):
    write(content_dir, "broad", entry_text("broad", signatures=BROAD))
    ingest_content(engine, content_dir)
    write(content_dir, "clone", entry_text("clone", signatures=BROAD))
    report = ingest_content(engine, content_dir)
    assert error_lines(report) == [
        "content/clone.md:9: collision: signatures[0] matches the example of entry 'broad' "
        "(signatures[0]) as well as or better than that entry does; make one pattern more "
        "specific",
        "content/clone.md:10: collision: the example of signatures[0] is matched as well or "
        "better by entry 'broad' (signatures[0]); make one pattern more specific",
    ]
    assert report.failed == 1 and stored_ids(engine) == ["broad"]
    with Session(engine) as session:  # the stored entry can still be edited in the wiki
        entry = storage.get_entry(session, "broad")
        draft = storage.current_markdown(session, entry=entry).replace("A sample", "The")
        assert check_draft(session, draft, editing="broad").problems == []


def test_file_that_wins_a_stored_entrys_example_is_refused(engine, content_dir: Path):
    # The stored entry's own example is what the new file takes: `check` would flag the stored
    # file, but the new one is the change, so it is the one refused.
    write(content_dir, "narrow", entry_text("narrow", signatures=NARROW))
    ingest_content(engine, content_dir)
    wider = sig("shape mismatch in (?P<where>\\w+)", "RuntimeError: shape mismatch in linear")
    write(content_dir, "wider", entry_text("wider", signatures=wider))
    report = ingest_content(engine, content_dir)
    assert [p.path for p in report.problems] == ["content/wider.md"] * 2
    assert any(
        p.line == 9 and "matches the example of entry 'narrow'" in p.message
        for p in report.problems
    )
    assert stored_ids(engine) == ["narrow"]


@pytest.mark.parametrize("cached", [True, False])
def test_the_wiki_refuses_the_draft_ingest_refuses(engine, content_dir: Path, cached: bool):
    write(content_dir, "narrow", entry_text("narrow", signatures=NARROW))
    ingest_content(engine, content_dir)
    # More specific than narrow's pattern: its own example is safe, narrow's is taken.
    greedy = sig("shape mismatch in conv", "RuntimeError: shape mismatch in conv")
    with Session(engine) as session:
        shared = SignatureMatcher(storage.active_signature_records(session)) if cached else None
        report = check_draft(session, entry_text("greedy", signatures=greedy), shared=shared)
    assert [str(p) for p in report.errors] == [
        "new-entry.md:9: collision: signatures[0] matches the example of entry 'narrow' "
        "(signatures[0]) as well as or better than that entry does; make one pattern more "
        "specific"
    ]


def test_two_new_files_that_collide_are_both_refused(engine, content_dir: Path):
    write(content_dir, "apple", entry_text("apple", signatures=BROAD))
    write(content_dir, "zebra", entry_text("zebra", signatures=BROAD))
    write(content_dir, "other")
    report = ingest_content(engine, content_dir)
    assert sorted({p.path for p in report.problems}) == ["content/apple.md", "content/zebra.md"]
    assert (report.counts["create"], report.counts["broken"]) == (1, 2)
    assert stored_ids(engine) == ["other"]


def test_a_refused_change_keeps_the_stored_version(engine, content_dir: Path):
    write(content_dir, "broad", entry_text("broad", signatures=BROAD))
    path = write(content_dir, "narrow", entry_text("narrow", signatures=NARROW))
    ingest_content(engine, content_dir)
    path.write_text(entry_text("narrow", title="Changed", signatures=BROAD), encoding="utf-8")
    report = ingest_content(engine, content_dir)
    assert {p.path for p in report.problems} == {"content/narrow.md"}
    with Session(engine) as session:
        entry = storage.get_entry(session, "narrow")
        assert (entry.title, entry.revision) == ("A sample pitfall about view()", 1)


def test_a_broad_and_a_narrow_new_file_both_load(engine, content_dir: Path):
    write(content_dir, "broad", entry_text("broad", signatures=BROAD))
    write(content_dir, "narrow", entry_text("narrow", signatures=NARROW))
    report = ingest_content(engine, content_dir)
    assert report.problems == [] and stored_ids(engine) == ["broad", "narrow"]


def test_ingest_command_exits_1_when_a_file_is_refused(make_settings, content_dir, monkeypatch):
    settings = make_settings(content_dir)
    monkeypatch.setenv("PITFALLS_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("PITFALLS_CONTENT_DIR", str(content_dir))
    write(content_dir, "good")
    write(content_dir, "linked", entry_text("linked", extra_front="related: [ghost]\n"))
    result = CliRunner().invoke(cli, ["ingest"])
    assert result.exit_code == 1
    assert "content/linked.md:7: related id 'ghost' does not exist" in result.output
    assert "1 new" in result.output and "1 broken" in result.output


@pytest.mark.slow  # exhaustive (every entry, or a whole corpus): the full suite runs it
def test_the_repository_content_ingests_fully(engine, repo_content: Path):
    files = sorted(repo_content.glob("*.md"))
    report = ingest_content(engine, repo_content)
    assert error_lines(report) == []
    assert report.counts["create"] == len(files) and report.failed == 0
