"""Syncing content/ into the database, and `export` writing the database back as files.

A new file becomes an entry, a changed file (by content hash) a new revision, an unchanged file
writes nothing, a removed file archives its entry (or deletes it with `prune`). Each file is its
own transaction, so a broken file is reported and skipped while the rest load.
"""

import hashlib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sqlalchemy import Engine
from sqlmodel import Session

from app import storage
from app.accounts import INGEST
from app.checker import collect_entry_files
from app.entries import Problem, parse_entry_bytes
from app.files import write_atomically
from app.models import Entry


@dataclass
class IngestReport:
    counts: Counter = field(default_factory=Counter)
    problems: list[Problem] = field(default_factory=list)
    changed_ids: list[str] = field(default_factory=list)
    change_seq: int = 0

    @property
    def changed(self) -> int:
        return len(self.changed_ids)

    @property
    def failed(self) -> int:
        return self.counts["broken"] + self.counts["conflict"]

    def summary_line(self) -> str:
        c = self.counts
        parts = [
            f"{self.changed} changed ({c['create']} new, {c['update']} updated, "
            f"{c['restore']} restored, {c['archive']} archived, {c['delete']} deleted)",
            f"{c['unchanged']} unchanged",
            f"{c['wiki']} newer in the wiki",
            f"{c['conflict']} conflict(s)",
            f"{c['broken']} broken",
        ]
        return f"ingest: {', '.join(parts)}; change sequence {self.change_seq}"


def _file_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _label(path: Path, content_dir: Path) -> str:
    try:
        return (
            str(path.relative_to(content_dir.parent)) if content_dir.parent != Path() else str(path)
        )
    except ValueError:
        return str(path)


def ingest_content(
    engine: Engine,
    content_dir: Path,
    *,
    prune: bool = False,
    force: bool = False,
    on_progress: Callable[[str], None] | None = None,
) -> IngestReport:
    report = IngestReport()
    files = collect_entry_files([content_dir]) if content_dir.is_dir() else []
    with Session(engine) as session:
        known = storage.entry_file_states(session)
    seen: dict[str, str] = {}
    for path in files:
        label = _label(path, content_dir)
        if on_progress:
            on_progress(label)
        entry_id = path.stem
        if entry_id in seen:
            report.counts["broken"] += 1
            report.problems.append(
                Problem(label, 1, f"duplicate id {entry_id!r}: already defined in {seen[entry_id]}")
            )
            continue
        seen[entry_id] = label
        data = path.read_bytes()
        digest = _file_hash(data)
        state = known.get(entry_id)
        if state is not None and state.file_hash == digest and (state.edited or not state.archived):
            # The file is as last ingested. A wiki edit since then is newer: keep it.
            report.counts["wiki" if state.edited else "unchanged"] += 1
            continue
        doc = parse_entry_bytes(data, label, expected_id=entry_id)
        report.problems.extend(doc.problems)
        if not doc.ok:
            report.counts["broken"] += 1
            continue
        with Session(engine) as session:
            entry = storage.get_entry(session, entry_id)
            if entry is not None and not entry.archived and entry.content_hash == doc.content_hash:
                # Same text (in other bytes, or written by `pitfalls export`): no revision.
                entry.file_hash = digest
                entry.edited_since_ingest = False
                session.add(entry)
                session.commit()
                report.counts["unchanged"] += 1
                continue
            if entry is not None and entry.edited_since_ingest and not force:
                report.counts["conflict"] += 1
                report.problems.append(Problem(label, 1, _conflict(session, entry, "changed")))
                continue
            action = storage.save_entry(
                session,
                doc=doc,
                author=INGEST.label,
                source="ingest",
                file_hash=digest,
            )
            session.commit()
        report.counts[action] += 1
        report.changed_ids.append(entry_id)
    _retire_removed(engine, known, seen, prune, force, report)
    with Session(engine) as session:
        report.change_seq = storage.current_change_seq(session)
    return report


def _conflict(session: Session, entry: Entry, what: str) -> str:
    latest = storage.get_revision(session, entry_id=entry.id, number=entry.revision)
    by = f"revision {entry.revision} by {latest.author}" if latest else "archived"
    if entry.archived:
        by = "archived"
    return (
        f"conflict: entry {entry.id!r} was edited in the wiki ({by}) and the file {what} since "
        "it was last ingested; nothing was overwritten. Run `pitfalls export` to get the wiki's "
        "version and merge the two, or `pitfalls ingest --force` to take the file."
    )


def _retire_removed(
    engine: Engine, known: dict, seen: dict, prune: bool, force: bool, report: IngestReport
) -> None:
    """Entries that came from a file no longer there are archived, or deleted with prune."""
    for entry_id, state in known.items():
        if entry_id in seen or state.file_hash is None or (state.archived and not prune):
            continue
        with Session(engine) as session:
            entry = storage.get_entry(session, entry_id)
            if entry is None:
                continue
            if entry.edited_since_ingest and not force:
                report.counts["conflict"] += 1
                report.problems.append(
                    Problem(f"{entry_id}.md", 1, _conflict(session, entry, "was removed"))
                )
                continue
            if prune:
                storage.delete_entry(session, entry=entry, actor=INGEST.label)
                report.counts["delete"] += 1
            else:
                storage.archive_entry(session, entry=entry, actor=INGEST.label, source="ingest")
                report.counts["archive"] += 1
            session.commit()
        report.changed_ids.append(entry_id)


@dataclass
class ExportReport:
    written: list[str] = field(default_factory=list)
    unchanged: int = 0

    def summary_line(self) -> str:
        return f"export: {len(self.written)} written, {self.unchanged} unchanged"


def export_entries(engine: Engine, target: Path) -> ExportReport:
    """Write every active entry's current Markdown to `target/<id>.md`, the inverse of ingest.

    Files whose bytes are already right are not touched; each write goes to a temporary file that
    replaces the old one, so an interrupted export never leaves half a file.
    """
    report = ExportReport()
    target.mkdir(parents=True, exist_ok=True)
    with Session(engine) as session:
        for entry in storage.list_entries(session):
            data = storage.current_markdown(session, entry=entry).encode("utf-8")
            path = target / f"{entry.id}.md"
            if path.is_file() and path.read_bytes() == data:
                report.unchanged += 1
                continue
            write_atomically(path, data)
            report.written.append(entry.id)
    return report
