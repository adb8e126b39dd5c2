"""Syncing content/ into the database, and `export` writing the database back as files.

A new file becomes an entry, a changed file (by content hash) a new revision, an unchanged file
writes nothing, a removed file archives its entry (or deletes it with `prune`). Each file is its
own transaction, so a broken file is reported and skipped while the rest load. A file that
`pitfalls check` would refuse next to the others (a `related` id that will not exist, a signature
collision) is skipped the same way, judged by the checker's own functions.
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
from app.checker import (
    collect_entry_files,
    collision_problems,
    related_problems,
    rival_problems,
    signature_records,
)
from app.entries import EntryDocument, Problem, parse_entry_bytes, read_entry_bytes
from app.files import write_atomically
from app.matching import SignatureMatcher
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


@dataclass
class _Parsed:
    label: str
    digest: str
    doc: EntryDocument

    @property
    def entry_id(self) -> str:
        assert self.doc.front is not None
        return self.doc.front.id


def ingest_content(
    engine: Engine,
    content_dir: Path,
    *,
    prune: bool = False,
    force: bool = False,
    on_progress: Callable[[str], None] | None = None,
    on_stored: Callable[[int, int], None] | None = None,
) -> IngestReport:
    """Sync `content_dir` into the database. `on_progress` hears each file as it is read;
    `on_stored` (stored so far, of how many) each file taken after the checks."""
    report = IngestReport()
    files = collect_entry_files([content_dir]) if content_dir.is_dir() else []
    with Session(engine) as session:
        known = storage.entry_file_states(session)
    seen: dict[str, str] = {}
    parsed: list[_Parsed] = []
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
        try:
            data = read_entry_bytes(path)
        except OSError as exc:
            report.counts["broken"] += 1
            report.problems.append(Problem(label, 1, f"the file cannot be read: {exc}"))
            continue
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
        parsed.append(_Parsed(label, digest, doc))
    refused = _cross_file_problems(engine, parsed, _retiring(known, seen, force), force)
    for done, item in enumerate(parsed, start=1):
        if item.entry_id in refused:
            report.counts["broken"] += 1
            report.problems.extend(refused[item.entry_id])
        else:
            _take_file(engine, item, force, report)
        if on_stored:
            on_stored(done, len(parsed))
    _retire_removed(engine, known, seen, prune, force, report)
    with Session(engine) as session:
        report.change_seq = storage.current_change_seq(session)
    return report


def _writes(entry: Entry | None, doc: EntryDocument, force: bool) -> bool:
    """Whether taking the file changes the entry (not the same text, not a wiki conflict)."""
    if entry is None:
        return True
    if not entry.archived and entry.content_hash == doc.content_hash:
        return False
    return force or not entry.edited_since_ingest


def _cross_file_problems(
    engine: Engine, parsed: list[_Parsed], retiring: set[str], force: bool
) -> dict[str, list[Problem]]:
    """The files whose entries `pitfalls check` would refuse next to the others: `related` ids
    that will not exist, signature collisions. The database stands in for unchanged files, as in
    the wiki's check; only a file this ingest would write can be refused."""
    if not parsed:
        return {}
    with Session(engine) as session:
        stored = storage.get_entries(session, entry_ids=[p.entry_id for p in parsed])
        active_ids = storage.active_entry_ids(session) - retiring
        active_records = [
            r for r in storage.active_signature_records(session) if r.entry_id not in retiring
        ]
    candidates = [p.doc for p in parsed if _writes(stored.get(p.entry_id), p.doc, force)]
    refused: dict[str, list[Problem]] = {}
    if not candidates:
        return refused
    while True:
        # A refused file's entry keeps its stored version, which the next round judges against.
        docs = [d for d in candidates if d.front is not None and d.front.id not in refused]
        ids = {d.front.id for d in docs if d.front is not None}
        kept = [r for r in active_records if r.entry_id not in ids]
        matcher = SignatureMatcher(kept + signature_records(docs))
        # Two files of this ingest that collide are both refused, as `check` reports both: file
        # order must not decide which one is right. Against a stored entry, the file is refused.
        problems = (
            related_problems(docs, active_ids | ids)
            + collision_problems(docs, matcher)
            + rival_problems(docs, kept, matcher)
        )
        if not problems:
            return refused
        by_path = {d.path: d.front.id for d in docs if d.front is not None}
        for problem in sorted(set(problems)):
            refused.setdefault(by_path[problem.path], []).append(problem)


def _take_file(engine: Engine, item: _Parsed, force: bool, report: IngestReport) -> None:
    doc, entry_id = item.doc, item.entry_id
    with Session(engine) as session:
        entry = storage.get_entry(session, entry_id)
        if entry is not None and not entry.archived and entry.content_hash == doc.content_hash:
            # Same text (in other bytes, or written by `pitfalls export`): no revision.
            entry.file_hash = item.digest
            entry.edited_since_ingest = False
            session.add(entry)
            session.commit()
            report.counts["unchanged"] += 1
            return
        if entry is not None and entry.edited_since_ingest and not force:
            report.counts["conflict"] += 1
            report.problems.append(Problem(item.label, 1, _conflict(session, entry, "changed")))
            return
        action = storage.save_entry(
            session,
            doc=doc,
            author=INGEST.label,
            source="ingest",
            file_hash=item.digest,
        )
        session.commit()
    report.counts[action] += 1
    report.changed_ids.append(entry_id)


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


def _removed(known: dict, seen: dict, prune: bool) -> list[str]:
    """Entries that came from a file no longer there (and are not archived already, unless
    prune deletes those too)."""
    return [
        entry_id
        for entry_id, state in known.items()
        if entry_id not in seen and state.file_hash is not None and (prune or not state.archived)
    ]


def _retiring(known: dict, seen: dict, force: bool) -> set[str]:
    """The active entries this ingest archives or deletes: their ids and signatures go away."""
    return {
        entry_id
        for entry_id in _removed(known, seen, prune=False)
        if force or not known[entry_id].edited
    }


def _retire_removed(
    engine: Engine, known: dict, seen: dict, prune: bool, force: bool, report: IngestReport
) -> None:
    """Entries that came from a file no longer there are archived, or deleted with prune."""
    for entry_id in _removed(known, seen, prune):
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
