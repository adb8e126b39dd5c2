"""An inbox of what the knowledge base does not know (PITFALLS_INBOX, off by default).

When on, a paste that nothing matched leaves behind only its error: the exception type, the
message after redaction, and the fingerprint; never the raw paste. Errors cluster by fingerprint
with a count and first/last seen, and keep up to MAX_EXAMPLES distinct redacted messages, which
"Start an entry" hands to the editor. Redaction (app/redaction.py) takes out what identifies
people and systems: keys and tokens, e-mail addresses, paths, host names, addresses, user names.
"""

from datetime import datetime

from pydantic import BaseModel
from sqlalchemy import Engine
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, func, select

from app.fingerprints import fingerprint_of
from app.models import InboxCluster, InboxExample, utcnow
from app.normalization import normalize_message
from app.redaction import cap_at_space, redact
from app.tracebacks import ParsedPaste

MAX_EXAMPLES = 20
MAX_MESSAGE = 2000
MAX_CLUSTERS = 10_000  # past it, only errors already in the inbox are counted: pastes from
# anyone cannot grow it without bound


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
    # Cut at a space before anything else, so that no half of a key escapes its rule.
    head = cap_at_space(message.replace("\x00", ""), max_chars=MAX_MESSAGE * 2)
    example = redact(head)[:MAX_MESSAGE]
    shape = redact(normalize_message(head))[:MAX_MESSAGE]
    kind = redact(kind, max_chars=MAX_MESSAGE)[:200]
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
