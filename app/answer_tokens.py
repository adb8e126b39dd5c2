"""Answer tokens: proof that this server answered an error with an entry, for outcome reports.

A report ("Fixed it" / "Didn't help") counts only for a fingerprint the server itself answered
with that entry: every answer with matches carries a token, an HMAC (itsdangerous, keyed by the
app's shared secret, salted for this one use) over the fingerprint, the matched entry ids and
the time it was issued. A report sends it back; one that names another entry or another error,
or that is older than PITFALLS_ANSWER_TOKEN_DAYS, is refused. Nobody can make an entry say
"fixed it for 82 of 82" by inventing fingerprints.
"""

import secrets
import time
from dataclasses import dataclass

from itsdangerous import BadSignature, URLSafeSerializer
from sqlalchemy import Engine

from app import storage
from app.settings import Settings

SALT = "pitfalls.answer-token"
MAX_TOKEN_CHARS = 4000  # a real one is a few hundred; anything longer is not one of ours


def app_secret(settings: Settings, engine: Engine) -> str:
    """PITFALLS_SECRET_KEY, else the key stored in the database (shared by every replica): the
    data dir's old key file when there is one (nobody is logged out by an upgrade), else new.
    It signs session cookies and, salted apart, answer tokens."""
    if settings.secret_key:
        return settings.secret_key
    legacy = settings.data_dir / "secret_key"
    try:
        candidate = legacy.read_text(encoding="utf-8").strip()
    except (FileNotFoundError, UnicodeDecodeError):
        candidate = ""
    if len(candidate) < 32:
        candidate = secrets.token_urlsafe(48)
    return storage.shared_secret(engine, name="session", candidate=candidate)


class AnswerTokenRefused(Exception):
    """The token does not let this report count; the message says why, in a sentence."""


@dataclass(frozen=True)
class AnswerGrant:
    """What a valid token says: this error was answered with these entries at this time."""

    fingerprint: str
    entry_ids: tuple[str, ...]
    issued_at: float  # seconds since the epoch


@dataclass(frozen=True)
class AnswerSigner:
    """Issues and checks answer tokens with one secret (every replica shares it)."""

    secret: str
    max_age_s: float = 7 * 86400

    def _serializer(self) -> URLSafeSerializer:
        return URLSafeSerializer(self.secret, salt=SALT)

    def issue(
        self, *, fingerprint: str, entry_ids: list[str], issued_at: float | None = None
    ) -> str:
        issued = int(time.time() if issued_at is None else issued_at)
        return self._serializer().dumps({"f": fingerprint, "e": list(entry_ids), "t": issued})

    def check(
        self, token: str, *, fingerprint: str, entry_id: str, now: float | None = None
    ) -> AnswerGrant:
        """The grant of `token` for a report on (fingerprint, entry), or AnswerTokenRefused."""
        if not token:
            raise AnswerTokenRefused(
                "send the answer_token of the answer that suggested this entry "
                "(paste the error to /api/v1/match or /match to get one)"
            )
        try:
            if len(token) > MAX_TOKEN_CHARS:
                raise BadSignature("too long")
            payload = self._serializer().loads(token)
            grant = AnswerGrant(
                fingerprint=str(payload["f"]),
                entry_ids=tuple(str(e) for e in payload["e"]),
                issued_at=float(payload["t"]),
            )
        except (BadSignature, KeyError, TypeError, ValueError):
            raise AnswerTokenRefused(
                "the answer_token is not one this server issued; send the one from the answer"
            ) from None
        if grant.fingerprint != fingerprint:
            raise AnswerTokenRefused(
                "the answer_token was given for another error; send the fingerprint and token "
                "of the same answer"
            )
        if entry_id not in grant.entry_ids:
            raise AnswerTokenRefused(
                f"the answer did not suggest entry {entry_id!r} for this error; report only on "
                "an entry the answer gave"
            )
        age = (time.time() if now is None else now) - grant.issued_at
        if age > self.max_age_s:
            days = self.max_age_s / 86400
            raise AnswerTokenRefused(
                f"the answer_token is older than {days:g} days; paste the error again for a "
                "fresh answer, then report"
            )
        return grant
