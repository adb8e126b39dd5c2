"""Files and the database: ingest never overwrites a wiki edit, export writes the wiki back."""

from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlmodel import Session

from app import storage
from app.accounts import Principal
from app.cli import cli
from app.ingest import export_entries, ingest_content
from app.wiki import archive, save_draft
from tests.conftest import REPO_CONTENT, entry_text

pytestmark = pytest.mark.both_databases

ALICE = Principal("user", "alice", "editor", user_id=1)


def write(folder: Path, entry_id: str, text: str | None = None) -> None:
    (folder / f"{entry_id}.md").write_text(text or entry_text(entry_id), encoding="utf-8")


def wiki_edit(engine, entry_id: str, old: str, new: str) -> str:
    with Session(engine) as session:
        entry = storage.get_entry(session, entry_id)
        markdown = storage.current_markdown(session, entry=entry).replace(old, new)
        save_draft(
            session,
            markdown=markdown,
            message="Edit in the wiki",
            actor=ALICE,
            source="web",
            entry_id=entry_id,
            base_revision=entry.revision,
        )
    return markdown


def state(engine, entry_id: str) -> tuple[int, str, bool, bool]:
    with Session(engine) as session:
        entry = storage.get_entry(session, entry_id)
        markdown = storage.current_markdown(session, entry=entry)
        return entry.revision, markdown, entry.archived, entry.edited_since_ingest


@pytest.mark.slow  # exhaustive (every entry, or a whole corpus): the full suite runs it
def test_export_of_entries_never_edited_is_byte_identical(engine, tmp_path: Path):
    ingest_content(engine, REPO_CONTENT)
    out = tmp_path / "exported"
    report = export_entries(engine, out)
    originals = sorted(REPO_CONTENT.glob("*.md"))
    assert len(report.written) == len(originals) >= 100
    for path in originals:
        assert (out / path.name).read_bytes() == path.read_bytes(), path.name
    again = export_entries(engine, out)
    assert again.written == [] and again.unchanged == len(originals)  # files already right
    assert list(out.glob(".*.tmp")) == []  # no temporary files left behind


def test_export_then_ingest_is_a_no_op(engine, content_dir: Path):
    for entry_id in ("one", "two"):
        write(content_dir, entry_id)
    ingest_content(engine, content_dir)
    edited = wiki_edit(engine, "one", "Because.", "Because the wiki says so.")
    seq = state(engine, "one")
    export = export_entries(engine, content_dir)
    assert export.written == ["one"]
    assert (content_dir / "one.md").read_text(encoding="utf-8") == edited
    report = ingest_content(engine, content_dir)
    assert report.changed == 0 and report.problems == [] and report.counts["conflict"] == 0
    assert state(engine, "one")[:3] == seq[:3]
    assert state(engine, "one")[3] is False  # file and database agree again
    # From now on the file leads again: a change to it is ingested as usual.
    write(content_dir, "one", edited.replace("wiki says so", "file says so"))
    assert ingest_content(engine, content_dir).counts["update"] == 1


def test_a_file_changed_while_its_entry_was_edited_is_a_conflict(engine, content_dir: Path):
    write(content_dir, "one")
    ingest_content(engine, content_dir)
    edited = wiki_edit(engine, "one", "Because.", "Because the wiki says so.")
    unchanged_file = ingest_content(engine, content_dir)
    assert unchanged_file.counts["wiki"] == 1 and unchanged_file.failed == 0
    assert state(engine, "one")[1] == edited  # the wiki edit is newer: kept
    write(content_dir, "one", entry_text("one").replace("An error.", "An error from git."))
    report = ingest_content(engine, content_dir)
    assert report.counts["conflict"] == 1 and report.failed == 1 and report.changed == 0
    (problem,) = report.problems
    assert "one.md:1: conflict: entry 'one' was edited in the wiki (revision 2 by alice)" in str(
        problem
    )
    assert "--force" in problem.message
    assert state(engine, "one")[:2] == (2, edited)  # nothing overwritten
    forced = ingest_content(engine, content_dir, force=True)
    assert forced.counts["update"] == 1
    revision, markdown, _, edited_flag = state(engine, "one")
    assert revision == 3 and "An error from git." in markdown and edited_flag is False


def test_removing_the_file_of_an_edited_entry_is_a_conflict(engine, content_dir: Path):
    write(content_dir, "one")
    write(content_dir, "two")
    ingest_content(engine, content_dir)
    wiki_edit(engine, "one", "Because.", "Because the wiki says so.")
    (content_dir / "one.md").unlink()
    (content_dir / "two.md").unlink()
    report = ingest_content(engine, content_dir)
    assert report.counts["conflict"] == 1 and report.counts["archive"] == 1
    assert state(engine, "one")[2] is False and state(engine, "two")[2] is True


def test_an_entry_archived_in_the_wiki_stays_archived(engine, content_dir: Path):
    write(content_dir, "one")
    ingest_content(engine, content_dir)
    with Session(engine) as session:
        archive(session, entry_id="one", actor=ALICE, source="web")
    assert ingest_content(engine, content_dir).changed == 0
    assert state(engine, "one")[2] is True


def test_user_token_and_export_commands(make_settings, content_dir: Path, monkeypatch, tmp_path):
    settings = make_settings(content_dir)
    monkeypatch.setenv("PITFALLS_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("PITFALLS_CONTENT_DIR", str(content_dir))
    write(content_dir, "one")
    runner = CliRunner()
    assert runner.invoke(cli, ["ingest"]).exit_code == 0
    added = runner.invoke(
        cli,
        ["user", "add", "alice", "--role", "editor", "--password-stdin"],
        input="long password\n",
    )
    assert added.exit_code == 0 and "added alice (editor)" in added.output
    again = runner.invoke(
        cli, ["user", "add", "alice", "--password-stdin"], input="long password\n"
    )
    assert again.exit_code == 1 and "already exists" in again.output
    short = runner.invoke(cli, ["user", "add", "bob", "--password-stdin"], input="short\n")
    assert short.exit_code == 1 and "at least 8 characters" in short.output
    assert "alice" in runner.invoke(cli, ["user", "list"]).output
    assert runner.invoke(cli, ["user", "role", "alice", "admin"]).exit_code == 0
    assert "admin" in runner.invoke(cli, ["user", "list"]).output

    created = runner.invoke(
        cli, ["token", "create", "--name", "ci-bot", "--scope", "write", "--expires", "90d"]
    )
    assert created.exit_code == 0
    secret = created.stdout.strip()
    assert secret.startswith("pft_") and len(secret) > 40
    listing = runner.invoke(cli, ["token", "list"]).output
    assert "ci-bot" in listing and "active" in listing and secret not in listing
    assert (
        runner.invoke(cli, ["token", "create", "--name", "x", "--expires", "soon"]).exit_code == 1
    )
    assert runner.invoke(cli, ["token", "revoke", "1"]).exit_code == 0
    assert "revoked" in runner.invoke(cli, ["token", "list"]).output

    out = tmp_path / "exported"
    exported = runner.invoke(cli, ["export", str(out)])
    assert exported.exit_code == 0 and "export: 1 written, 0 unchanged" in exported.output
    assert (out / "one.md").read_bytes() == (content_dir / "one.md").read_bytes()
