"""Both tiers behind one call: signatures first, then likely matches, then related entries.

A signature match is deterministic and always wins. When no signature claims the paste, the
likely tier proposes the entries whose text covers the error best, and the memory tier those that
labelled real pastes like this one name (app.matching.memory); the calibrated model weighs both
and keeps the candidates whose confidence reaches its threshold. Whatever else covers a fair
share of the error is "related by text": offered for reading, never as an answer.
"""

import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from app.matching.calibration import Model, load_model
from app.matching.fragments import FragmentIndex
from app.matching.likely import (
    CANDIDATES,
    Candidate,
    EntryText,
    LikelyIndex,
    Query,
    frame_text,
    tokens,
)
from app.matching.memory import (
    MEMORY_FEATURES,
    NO_VOTES,
    PasteMemory,
    shipped_memory,
    votes,
)
from app.matching.signature_tier import (
    PitfallMatch,
    SignatureMatcher,
    SignatureRecord,
    known_matches,
    match_caseless,
    match_paste,
)
from app.tracebacks import ParsedPaste

MAX_LIKELY = 2
MIN_TEXT_WORDS = 4
# A related entry must hold at least this share of the error's rare-word weight.
RELATED_FLOOR = 0.45
# How much of a paste with no exception line the likely tier reads (the error is at the end).
_TEXT_TAIL = 3000
# How much of a message it reads: what tells one error from another comes first, and a message
# that swallowed a megabyte of log lines must not cost a megabyte of tokenizing.
_MESSAGE_HEAD = 4000
_FRAME_LINE = re.compile(r'^\s*File "|^\s*Traceback \(most recent call')


@dataclass(frozen=True)
class Match:
    entry_id: str
    tier: str  # signature | likely
    confidence: float
    signature: PitfallMatch | None = None  # how a signature matched (signature tier)
    words: tuple[str, ...] = ()  # the words that made it likely (likely tier)
    features: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class PasteMatches:
    matches: list[Match]  # best first; signature matches before likely ones
    related: list[Candidate]  # covering a fair share of the error, not claimed as matches
    query: Query | None
    candidates: list[Candidate] = field(default_factory=list)  # every one weighed, best first


def _warning_before_cut_traceback(parsed: ParsedPaste) -> bool:
    """A warning printed before a traceback that was cut off before its error: the warning was
    earlier output (a deprecation notice), the traceback is what failed."""
    if not parsed.trailing_frames:
        return False
    header = parsed.text.rfind("Traceback (most recent call")
    at = parsed.text.rfind(parsed.warnings[-1].message[:200])
    return header >= 0 and 0 <= at < header


def paste_query(parsed: ParsedPaste) -> Query | None:
    """What the likely tier searches for: the error to explain, its type and its last frames."""
    final = parsed.final
    if final is not None:
        frames = final.frames
        if not frames:
            for exc in reversed(parsed.exceptions):
                if exc.frames:
                    frames = exc.frames
                    break
        message = (final.message or final.type)[:_MESSAGE_HEAD]
        return Query(message, final.type, frame_text(frames))
    if parsed.warnings and not _warning_before_cut_traceback(parsed):
        warning = parsed.warnings[-1]
        # A C++ `[W …] Warning:` names no category: its type is unknown, not a disagreement
        # with every entry's exception.
        category = None if warning.category in (None, "Warning") else warning.category
        return Query(warning.message[:_MESSAGE_HEAD], category)
    text = parsed.text.strip()
    if not text:
        return None
    if parsed.trailing_frames:
        # A paste cut off before its error: the frames say where it happened, and whatever
        # other text there is (log lines, a fragment of the message) says what.
        where = frame_text(parsed.trailing_frames, last=5)
        code = {f.code for f in parsed.trailing_frames if f.code}
        rest = [
            line
            for line in text.split("\n")
            if not _FRAME_LINE.match(line) and line.strip() not in code
        ]
        message = "\n".join(rest).strip()[-_TEXT_TAIL:]
        if not tokens(message):  # a progress bar, a prompt: no words to search for
            message = where
        return Query(message, None, where)
    return Query(text[-_TEXT_TAIL:], None)


class PasteMatcher:
    def __init__(
        self,
        signatures: SignatureMatcher,
        entries: Iterable[EntryText],
        model: Model | None = None,
        previous: "PasteMatcher | None" = None,
        saved: dict | None = None,
        memory: "PasteMemory | bool | None" = True,
    ) -> None:
        """`memory`: the remembered pastes (True: the package's own, read when a paste first
        needs it; False or None: none)."""
        self.signatures = signatures
        self._memory: PasteMemory | bool | None = memory
        self.likely: LikelyIndex = LikelyIndex(
            entries, previous.likely if previous is not None else None, saved=saved
        )
        self.model = model if model is not None else load_model()
        self.mark: object | None = None  # the change feed's mark it reflects (`MatcherCache`)
        self._fragments: FragmentIndex | None = None  # built on the first query that needs it

    @property
    def uses_memory(self) -> bool:
        """Whether the model weighs the memory tier's votes: a model fitted without them (the
        shipped one, for now) makes the memory a bystander, consulted by nobody."""
        return any(name in MEMORY_FEATURES for name in self.model.features)

    @property
    def memory(self) -> PasteMemory | None:
        if self._memory is True:
            self._memory = shipped_memory()  # once per process, shared by every matcher
        return self._memory or None

    @memory.setter
    def memory(self, memory: PasteMemory | None) -> None:
        self._memory = memory

    @classmethod
    def build(
        cls,
        records: Iterable[SignatureRecord],
        entries: Iterable[EntryText],
        model=None,
        previous: "PasteMatcher | None" = None,
        saved: dict | None = None,
    ) -> "PasteMatcher":
        """`previous`: the matcher this one replaces; what it read and compiled of unchanged
        entries is reused (signatures are also shared with any other live matcher). `saved`:
        entries read by an earlier process (`likely.read_saved_documents`)."""
        return cls(SignatureMatcher(records), entries, model, previous, saved)

    def updated(
        self,
        changed: Iterable[str],
        records: Iterable[SignatureRecord],
        entries: Iterable[EntryText],
    ) -> "PasteMatcher":
        """A new matcher with the entries `changed` (ids) as `records` and `entries` say they
        are now (an id in neither is gone): both tiers are brought up to date from these alone,
        and it answers as one built afresh from every entry would. This one is left as it was."""
        changed = list(changed)
        new = PasteMatcher.__new__(PasteMatcher)
        new.signatures = self.signatures.updated(changed, records)
        new.likely = self.likely.updated(changed, entries)
        new._memory = self._memory
        new.model = self.model
        new.mark = None
        new._fragments = None  # built again from the new signatures when a query needs it
        return new

    def match_fragments(self, text: str) -> PasteMatches:
        """Part of an error message inside a sentence (a search query with no exception line):
        the entries whose example holds the longest run of the query's words, as signature
        matches found in "fragment". A signature with a frame or context condition counts only
        when the text meets it."""
        if self._fragments is None:
            self._fragments = FragmentIndex(self.signatures.records)
        found = [
            m
            for m in self._fragments.matches(text)
            if not m.hit.signature.frame and self.signatures.context_matches(m.hit.index, text)
        ]
        matches = [Match(m.entry_id, "signature", m.confidence, signature=m) for m in found]
        return PasteMatches(matches, [], None)

    def match(
        self, parsed: ParsedPaste, *, likely: bool = True, exclude_thread: str | None = None
    ) -> PasteMatches:
        """`exclude_thread`: a thread address whose remembered pastes do not vote (a corpus
        measuring itself)."""
        vetoed: set[str] = set()
        found = match_paste(self.signatures, parsed, vetoed)
        known = known_matches(found)
        matches = [Match(m.entry_id, "signature", m.confidence, signature=m) for m in known]
        query = paste_query(parsed)
        if query is None or not likely or matches:
            return PasteMatches(matches, [], query)
        # Text with no exception, warning or frame in it: a few words ("hello world") are not
        # an error to explain.
        if (
            query.exception_type is None
            and not query.frame_text
            and len(set(query.words)) < MIN_TEXT_WORDS
        ):
            return PasteMatches(matches, [], query)
        weak = [m.entry_id for m in found if m not in known]
        # What remembered pastes like this one say, when the model weighs it.
        said = NO_VOTES
        if self.uses_memory and self.memory is not None:
            said = votes(self.memory.neighbours(query, exclude_thread=exclude_thread))
        # An entry whose signature matched but whose context or frame condition failed is not
        # claimed by the likely tier either: its author said the message alone is not enough.
        proposed = [e for e in said.proposed() if e not in vetoed and self.likely.has(e)]
        weighed = [
            c
            for c in self.likely.candidates(
                query, weak_hits=weak, limit=CANDIDATES + len(vetoed), also=proposed
            )
            if c.entry_id not in vetoed
        ]
        # The best by text, and every entry a remembered paste like this one names.
        candidates = weighed[:CANDIDATES] + [
            c for c in weighed[CANDIDATES:] if c.entry_id in proposed
        ]
        if said is not NO_VOTES:
            for candidate in candidates:
                candidate.features.update(said.features(candidate.entry_id))
        # A message retyped with other capitals or spacing: the candidates' own signatures,
        # case ignored, before any guess.
        caseless = known_matches(
            match_caseless(self.signatures, parsed, [c.entry_id for c in candidates], vetoed)
        )
        if caseless:
            matches = [Match(m.entry_id, "signature", m.confidence, signature=m) for m in caseless]
            return PasteMatches(matches, [], query, candidates)
        for candidate in candidates:
            candidate.confidence = self.model.confidence(candidate.features)
        candidates.sort(key=lambda c: c.confidence, reverse=True)
        claimed = set()
        for candidate in candidates[:MAX_LIKELY]:
            confidence = candidate.confidence
            if confidence < self.model.threshold:
                break
            matches.append(
                Match(
                    candidate.entry_id,
                    "likely",
                    round(confidence, 3),
                    words=tuple(self.likely.explain(candidate, query)),
                    features=dict(candidate.features),
                )
            )
            claimed.add(candidate.entry_id)
        related = [
            c
            for c in candidates
            if c.entry_id not in claimed and c.features["coverage"] >= RELATED_FLOOR
        ]
        return PasteMatches(matches, related, query, candidates)
