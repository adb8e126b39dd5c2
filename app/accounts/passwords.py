"""Passwords: argon2 hashes, and the dummy hash verified for an unknown name (as slow as a
known one)."""

import functools
import secrets

from argon2 import PasswordHasher

from app.accounts.principals import AccountError

MIN_PASSWORD_LENGTH = 8

_hasher = PasswordHasher()


# Verified when the name is unknown, so a wrong name costs as long as a wrong password.
@functools.cache
def _dummy_hash() -> str:
    """A hash to verify against when the name is unknown, so that the answer takes as long.
    Made on first use: an argon2 hash costs ~0.2 s, which every start-up paid before."""
    return _hasher.hash(secrets.token_urlsafe(16))


def _hash_password(password: str) -> str:
    if len(password) < MIN_PASSWORD_LENGTH:
        raise AccountError(f"the password must have at least {MIN_PASSWORD_LENGTH} characters")
    return _hasher.hash(password)
