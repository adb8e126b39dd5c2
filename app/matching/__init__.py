"""Matching a pasted error to the entries that explain it, in two tiers.

- `signature_tier`: every signature regex of every entry in one RE2 pass; deterministic.
- `likely`: when no signature claims the paste, entries scored by how much of the message (and
  the user's last frames) they cover, with a confidence calibrated on real pastes (`calibration`).
- `paste_matcher`: both tiers behind one call, the only one the faces use.

Nothing in this package imports the faces (pages, API, CLI) or the search engine.
"""

from app.matching.signature_tier import (
    KNOWN_MATCH_THRESHOLD,
    PitfallMatch,
    SignatureHit,
    SignatureMatcher,
    SignatureRecord,
    known_matches,
    match_paste,
)

__all__ = [
    "KNOWN_MATCH_THRESHOLD",
    "PitfallMatch",
    "SignatureHit",
    "SignatureMatcher",
    "SignatureRecord",
    "known_matches",
    "match_paste",
]
