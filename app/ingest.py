"""Syncing content/ into the database.

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
from app.checker import collect_entry_files
from app.entries import Problem, parse_entry_bytes

INGEST_AUTHOR = "ingest"


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
        return self.counts["broken"]

    def summary_line(self) -> str:
        c = self.counts
        parts = [
            f"{self.changed} changed ({c['create']} new, {c['update']} updated, "
            f"{c['restore']} restored, {c['archive']} archived, {c['delete']} deleted)",
            f"{c['unchanged']} unchanged",
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
        if entry_id in known and known[entry_id] == (digest, False):
            report.counts["unchanged"] += 1
            continue
        doc = parse_entry_bytes(data, label, expected_id=entry_id)
        report.problems.extend(doc.problems)
        if not doc.ok:
            report.counts["broken"] += 1
            continue
        with Session(engine) as session:
            entry = storage.get_entry(session, entry_id)
            if entry is not None and not entry.archived and entry.content_hash == doc.content_hash:
                # Same text in different bytes (line endings, BOM): remember the file, no revision.
                entry.file_hash = digest
                session.add(entry)
                session.commit()
                report.counts["unchanged"] += 1
                continue
            action = storage.save_entry(
                session, doc=doc, author=INGEST_AUTHOR, source="ingest", file_hash=digest
            )
            session.commit()
        report.counts[action] += 1
        report.changed_ids.append(entry_id)
    _retire_removed(engine, known, seen, prune, report)
    with Session(engine) as session:
        report.change_seq = storage.current_change_seq(session)
    return report


def _retire_removed(
    engine: Engine, known: dict, seen: dict, prune: bool, report: IngestReport
) -> None:
    """Entries that came from a file no longer there are archived, or deleted with prune."""
    for entry_id, (file_hash, archived) in known.items():
        if entry_id in seen or file_hash is None or (archived and not prune):
            continue
        with Session(engine) as session:
            entry = storage.get_entry(session, entry_id)
            if entry is None:
                continue
            if prune:
                storage.delete_entry(session, entry=entry)
                report.counts["delete"] += 1
            else:
                storage.archive_entry(session, entry=entry)
                report.counts["archive"] += 1
            session.commit()
        report.changed_ids.append(entry_id)
