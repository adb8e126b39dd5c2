"""An inbox of what the knowledge base does not know (PITFALLS_INBOX, off by default).

When on, a paste that nothing matched leaves behind only its error: the exception type, the
message after redaction, and the fingerprint; never the raw paste. Errors cluster by fingerprint
with a count and first/last seen, and keep up to MAX_EXAMPLES distinct redacted messages, which
"Start an entry" hands to the editor. Redaction (app/redaction/) takes out what identifies
people and systems: keys and tokens, e-mail addresses, paths, host names, addresses, user names.

Nobody can fill it: one client (a login or token by name, else an address) adds at most so many
errors an hour, counted in the database so every process shares the count, and the table holds
at most so many clusters: a new error takes the place of the one seen least recently, so a new
error is always recorded and what nobody sees again ages out.

A cluster's first sighting and the sighting that brings its count to a webhook's threshold
queue webhook events in the same transaction (app/webhooks/).
"""

from datetime import datetime, timedelta

from pydantic import BaseModel
from sqlalchemy import Engine, case, delete, literal, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, func, select

from app.fingerprints import fingerprint_of
from app.models import InboxCluster, InboxExample, LoginThrottle, UtcDateTime, utcnow
from app.normalization import normalize_message
from app.redaction import cap_at_space, redact
from app.tracebacks import ParsedPaste
from app.webhooks.queue import enqueue_inbox_event

MAX_EXAMPLES = 20
MAX_MESSAGE = 2000
MAX_CLUSTERS = 10_000  # past it, the clusters seen least recently make room
PER_CLIENT_PER_HOUR = 30
ALLOWANCE_WINDOW = timedelta(hours=1)
ALLOWANCE_KIND = "inbox"  # its rows in the shared counter table (login_throttle)


class ClusterOut(BaseModel):
    fingerprint: str
    exception: str
    message: str  # normalized and redacted: the cluster's shape
    count: int
    first_seen: datetime
    last_seen: datetime
    examples: list[str]  # distinct redacted messages, oldest first


def take_allowance(
    engine: Engine, *, client: str, per_hour: int, now: datetime | None = None
) -> bool:
    """Count one recording for `client` in its hour's window; False when it has used them all.

    One conditional UPDATE does the counting, so two processes cannot both take the last one
    (PostgreSQL re-checks the WHERE on the locked row; SQLite writes one at a time)."""
    now = now or utcnow()
    client = client[:100]
    key = (
        col(LoginThrottle.kind) == ALLOWANCE_KIND,
        col(LoginThrottle.name) == client,
        col(LoginThrottle.address) == "",
    )
    window_over = col(LoginThrottle.first_at) <= now - ALLOWANCE_WINDOW
    with Session(engine) as session:
        dialect = session.get_bind().dialect.name
        insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
        row = {"kind": ALLOWANCE_KIND, "name": client, "address": ""}
        added = session.exec(
            insert(LoginThrottle)
            .values(**row, failures=0, first_at=now, last_at=now)
            .on_conflict_do_nothing()
        ).rowcount
        if added:  # a client's first in a while: forget the clients gone quiet
            session.exec(
                delete(LoginThrottle).where(
                    col(LoginThrottle.kind) == ALLOWANCE_KIND,
                    col(LoginThrottle.last_at) < now - 2 * ALLOWANCE_WINDOW,
                )
            )
        taken = session.exec(
            update(LoginThrottle)
            .where(*key, window_over | (col(LoginThrottle.failures) < per_hour))
            .values(
                failures=case((window_over, 1), else_=LoginThrottle.failures + 1),
                first_at=case(
                    (window_over, literal(now, UtcDateTime())), else_=LoginThrottle.first_at
                ),
                last_at=now,
            )
        ).rowcount
        session.commit()
    return taken == 1


def _make_room(session: Session, *, max_clusters: int) -> None:
    """Drop the clusters seen least recently until one more fits under `max_clusters`."""
    held = session.exec(select(func.count()).select_from(InboxCluster)).one()
    if held < max_clusters:
        return
    oldest = session.exec(
        select(InboxCluster.fingerprint)
        .order_by(col(InboxCluster.last_seen), col(InboxCluster.fingerprint))
        .limit(held - max_clusters + 1)
    ).all()
    session.exec(delete(InboxExample).where(col(InboxExample.fingerprint).in_(oldest)))
    session.exec(delete(InboxCluster).where(col(InboxCluster.fingerprint).in_(oldest)))


def record_unknown(
    engine: Engine,
    parsed: ParsedPaste,
    *,
    client: str,
    per_hour: int = PER_CLIENT_PER_HOUR,
    max_clusters: int = MAX_CLUSTERS,
) -> str | None:
    """Count the paste's final error in the inbox; the fingerprint, or None without an error
    or when `client` has added `per_hour` errors in the past hour already."""
    if parsed.exceptions:
        error = parsed.exceptions[-1]
        kind, message = error.qualified_type, error.message
    elif parsed.warnings:
        warning = parsed.warnings[-1]
        kind, message = warning.category, warning.message
    else:
        return None
    fingerprint = fingerprint_of(kind, message)
    # Cut at a space before anything else, so that no half of a key escapes its rule.
    head = cap_at_space(message.replace("\x00", ""), max_chars=MAX_MESSAGE * 2)
    example = redact(head)[:MAX_MESSAGE]
    shape = redact(normalize_message(head))[:MAX_MESSAGE]
    kind = redact(kind, max_chars=MAX_MESSAGE)[:200]
    now = utcnow()
    if not take_allowance(engine, client=client, per_hour=per_hour, now=now):
        return None
    for _ in range(3):  # two first sightings at once: the second becomes an update
        with Session(engine) as session:
            cluster = session.get(InboxCluster, fingerprint)
            new = cluster is None
            if cluster is None:
                _make_room(session, max_clusters=max_clusters)
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
                enqueue_inbox_event(
                    session,
                    fingerprint=fingerprint,
                    exception=cluster.exception,
                    message=cluster.message,
                    count=cluster.count,
                    new=new,
                )
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
