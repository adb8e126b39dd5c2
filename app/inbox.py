"""An inbox of what the knowledge base does not know (PITFALLS_INBOX, off by default).

When on, a paste that nothing matched leaves behind only its error: the exception type, the
message after redaction, and the fingerprint; never the raw paste. Errors cluster by fingerprint
with a count and first/last seen, and keep up to MAX_EXAMPLES distinct redacted messages, which
"Start an entry" hands to the editor. Redaction takes out what identifies people and systems:
tokens and keys, e-mail addresses, user names in home paths, host names and IP addresses.
"""

from datetime import datetime

import re2
from pydantic import BaseModel
from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, func, select

from app.fingerprints import fingerprint_of
from app.models import InboxCluster, InboxExample, utcnow
from app.normalization import normalize_message
from app.tracebacks import ParsedPaste

MAX_EXAMPLES = 20
MAX_MESSAGE = 2000
MAX_CLUSTERS = 10_000  # past it, only errors already in the inbox are counted: pastes from
# anyone cannot grow it without bound

# Order matters: keys and addresses before the looser host-name rule. RE2, so that a hostile
# message of any shape is redacted in linear time.
_REDACTIONS: list[tuple[re2._Regexp, str]] = [
    (
        re2.compile(
            r"(?i)\b(bearer|token|api[_-]?key|secret|password|passwd|pwd)(\s*[=:]\s*|\s+)\S+"
        ),
        r"\1\2<secret>",
    ),
    (re2.compile(r"\b(?:pft|sk|ghp|gho|ghs|hf|xox[abp])[-_][A-Za-z0-9_\-]{8,}"), "<secret>"),
    (re2.compile(r"\bAKIA[0-9A-Z]{16}\b"), "<secret>"),
    (re2.compile(r"\beyJ[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]{10,}\.[A-Za-z0-9_\-]+"), "<secret>"),
    (re2.compile(r"\b[0-9a-fA-F]{32,}\b"), "<secret>"),
    (re2.compile(r"[\w.+\-]+@[\w\-]+(?:\.[\w\-]+)+"), "<email>"),
    (re2.compile(r"(/home/|/Users/|/users/)[^/\s'\"]+"), r"\1<user>"),
    (re2.compile(r"(?i)([A-Z]:\\Users\\)[^\\\s'\"]+"), r"\1<user>"),
    (re2.compile(r"\b(?:\d{1,3}\.){3}\d{1,3}\b"), "<ip>"),
    (re2.compile(r"\b(?:[0-9a-fA-F]{1,4}:){3,7}[0-9a-fA-F]{1,4}\b"), "<ip>"),
    (
        re2.compile(
            r"\b(?:[a-zA-Z0-9](?:[a-zA-Z0-9\-]{0,61}[a-zA-Z0-9])?\.)+"
            r"(?:com|org|net|io|ai|dev|edu|gov|local|internal|lan|corp|cloud|cn|de|uk|fr|jp)\b"
        ),
        "<host>",
    ),
]


def redact(text: str) -> str:
    text = text[: MAX_MESSAGE * 2]
    for pattern, replacement in _REDACTIONS:
        text = pattern.sub(replacement, text)
    return text


class ClusterOut(BaseModel):
    fingerprint: str
    exception: str
    message: str  # normalized and redacted: the cluster's shape
    count: int
    first_seen: datetime
    last_seen: datetime
    examples: list[str]  # distinct redacted messages, oldest first


def record_unknown(engine: Engine, parsed: ParsedPaste) -> str | None:
    """Count the paste's final error in the inbox; the fingerprint, or None without an error."""
    if parsed.exceptions:
        last = parsed.exceptions[-1]
        kind, message = last.qualified_type, last.message
    elif parsed.warnings:
        last = parsed.warnings[-1]
        kind, message = last.category, last.message
    else:
        return None
    fingerprint = fingerprint_of(kind, message)
    example = redact(message.replace("\x00", ""))[:MAX_MESSAGE]
    shape = redact(normalize_message(message.replace("\x00", "")))[:MAX_MESSAGE]
    kind = redact(kind.replace("\x00", ""))[:200]
    now = utcnow()
    for _ in range(3):  # two first sightings at once: the second becomes an update
        with Session(engine) as session:
            cluster = session.get(InboxCluster, fingerprint)
            if cluster is None:
                held = session.exec(select(func.count()).select_from(InboxCluster)).one()
                if held >= MAX_CLUSTERS:
                    return None
                cluster = InboxCluster(
                    fingerprint=fingerprint,
                    exception=kind,
                    message=shape,
                    count=0,
                    first_seen=now,
                    last_seen=now,
                )
            cluster.count += 1
            cluster.last_seen = now
            session.add(cluster)
            try:
                session.flush()
                stored = session.exec(
                    select(func.count())
                    .select_from(InboxExample)
                    .where(InboxExample.fingerprint == fingerprint)
                ).one()
                known = session.exec(
                    select(InboxExample.id).where(
                        InboxExample.fingerprint == fingerprint, InboxExample.message == example
                    )
                ).first()
                if known is None and stored < MAX_EXAMPLES:
                    session.add(InboxExample(fingerprint=fingerprint, message=example))
                session.commit()
                return fingerprint
            except IntegrityError:
                session.rollback()
    return fingerprint


def clusters(session: Session, *, limit: int = 200) -> list[ClusterOut]:
    rows = session.exec(
        select(InboxCluster)
        .order_by(col(InboxCluster.count).desc(), col(InboxCluster.last_seen).desc())
        .limit(limit)
    ).all()
    examples: dict[str, list[str]] = {}
    if rows:
        query = (
            select(InboxExample)
            .where(col(InboxExample.fingerprint).in_([r.fingerprint for r in rows]))
            .order_by(col(InboxExample.id))
        )
        for example in session.exec(query):
            examples.setdefault(example.fingerprint, []).append(example.message)
    return [
        ClusterOut(
            fingerprint=r.fingerprint,
            exception=r.exception,
            message=r.message,
            count=r.count,
            first_seen=r.first_seen,
            last_seen=r.last_seen,
            examples=examples.get(r.fingerprint, []),
        )
        for r in rows
    ]
