"""Ingest: new, changed, unchanged, removed and broken files; each file all-or-nothing."""

from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlmodel import Session, select

from app import storage
from app.cli import cli
from app.ingest import ingest_content
from app.models import Change, Entry, Revision, Signature, Snippet
from tests.conftest import entry_text


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
        "tags, aliases, versions, signatures, related, sources)"
    ]
    assert [e.id for e in rows(engine, Entry)] == ["good"]


def test_a_failing_write_leaves_nothing_half_written(engine, content_dir: Path, monkeypatch):
    write(content_dir, "first")

    def fail_after_entry_row(session, *, doc):
        raise OSError("disk full")

    monkeypatch.setattr(storage, "_replace_parts", fail_after_entry_row)
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
