"""Verification results shipped with the entries, so a fresh data dir shows them on first start.

`pitfalls verify --record content/verification.json` writes the results of the snippets that
ran (never a skip) with what they ran on: torch and Python versions, platform and time. The file
sits next to the entries (the entry collector reads only `*.md`) and travels with them into the
package and the image. At start-up each result whose snippet still has the same code (same hash
and role) is stored, unless the data dir already has a result for that code: a snippet changed
since the file was written shows as not verified until verify runs it.
"""

import json
import re
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from sqlalchemy import Engine
from sqlmodel import Session, col, select

from app import storage
from app.entries import content_hash
from app.models import Verification, utc_iso

SHIPPED_RESULTS_NAME = "verification.json"
FORMAT = 1


def generic_platform(platform: str | None) -> str | None:
    """`Linux-x86_64`: the system and the architecture, never the kernel build of one machine."""
    if not platform:
        return platform
    arch = re.search(r"x86_64|amd64|aarch64|arm64|ppc64le|s390x", platform)
    return f"{platform.split('-', 1)[0]}-{arch.group(0)}" if arch else platform.split("-", 1)[0]


def to_record(row: Verification) -> dict:
    return {
        "entry": row.entry_id,
        "position": row.snippet_position,
        "role": row.role,
        "code_hash": row.code_hash,
        "status": row.status,
        "torch_version": row.torch_version,
        "python_version": row.python_version,
        "platform": generic_platform(row.platform),
        "date": utc_iso(row.verified_at),
    }


def write_records(path: Path, rows: Iterable[Verification]) -> int:
    """Merge `rows` into the file at `path` (one record per snippet, the newest), skips left out;
    returns how many records it holds."""
    records: dict[tuple[str, int], dict] = {}
    if path.is_file():
        for record in json.loads(path.read_text(encoding="utf-8")).get("results", []):
            records[(record["entry"], record["position"])] = record
    for row in rows:
        if row.status != "skipped":
            records[(row.entry_id, row.snippet_position)] = to_record(row)
    document = {"format": FORMAT, "results": [records[key] for key in sorted(records)]}
    path.write_text(json.dumps(document, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return len(records)


def load_shipped_results(engine: Engine, path: Path) -> int:
    """Store the shipped results that still describe the current code; returns how many."""
    if not path.is_file():
        return 0
    try:
        records = json.loads(path.read_text(encoding="utf-8"))["results"]
    except (ValueError, KeyError, TypeError):
        return 0  # a damaged file only means nothing is shown as verified
    added = 0
    with Session(engine) as session:
        current = {(s.entry_id, s.position): s for s in storage.all_snippets(session)}
        known = set(
            session.exec(
                select(
                    col(Verification.entry_id),
                    col(Verification.snippet_position),
                    col(Verification.code_hash),
                )
            ).all()
        )
        for record in records:
            try:
                key = (record["entry"], record["position"])
                snippet = current.get(key)
                if (
                    snippet is None
                    or record["status"] not in ("passed", "failed")
                    or content_hash(snippet.code) != record["code_hash"]
                    or snippet.role != record["role"]
                    or (*key, record["code_hash"]) in known
                ):
                    continue
                moment = datetime.fromisoformat(record["date"].replace("Z", "+00:00"))
                storage.record_verification(
                    session,
                    result=Verification(
                        entry_id=snippet.entry_id,
                        snippet_position=snippet.position,
                        role=snippet.role,
                        code_hash=record["code_hash"],
                        status=record["status"],
                        torch_version=record["torch_version"],
                        python_version=record["python_version"],
                        platform=record["platform"],
                        verified_at=moment.astimezone(UTC),
                    ),
                )
            except (KeyError, TypeError, ValueError):
                continue
            added += 1
        session.commit()
    return added
