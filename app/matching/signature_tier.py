"""Matching pasted errors against every signature of every entry in one RE2 pass.

All message patterns live in RE2 sets (one pass over a text finds every candidate); only the
candidates are run again, one by one, for their span and named groups. Each set also holds a
sentinel that matches any text, so a set that reports nothing at all has failed (its DFA ran out
of memory), and then its patterns are searched one by one: a failure never silently matches
nothing.

Ranking prefers the final exception over earlier ones in a chain, an agreeing exception type, a
matching frame, and the more specific pattern; the result is a confidence in [0, 1].
"""

import bisect
import copy
import re
import threading
import weakref
from array import array
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import re2

from app.budget import check_budget
from app.signatures import (
    PatternError,
    compile_pattern,
    exception_agrees,
    literal_length,
    split_exception_line,
)
from app.tracebacks import ParsedException, ParsedPaste

DEFAULT_CHUNK_SIZE = 2000
DEFAULT_SET_MEMORY = 256 << 20  # the default budget fails to compile past ~1-2k patterns
KNOWN_MATCH_THRESHOLD = 0.5
# Patterns shorter than this (in literal characters) need an agreeing exception type: a bare
# `2` (SystemExit) or `invalid syntax` must not claim any error that happens to say so.
GENERIC_PATTERN_CHARS = 20
# A signature found only with case ignored (a retyped message) counts for this share of the same
# match found as written.
CASELESS_FACTOR = 0.9
# An exception type typed just before a message, in any case: `runtimeerror: the size of …`.
_TYPE_BEFORE = re.compile(r"(?i)(?P<type>[a-z_]\w*(?:error|exception|warning))\s*:\s*\Z")
_TYPE_BEFORE_CHARS = 80
_SENTINEL = r"\A"
_SPACES = re.compile(r"\s+")


@dataclass(frozen=True)
class SignatureRecord:
    """What the matcher needs of one signature, whether it comes from the database or a file."""

    entry_id: str
    position: int
    message: str
    example: str
    exception: str | None = None
    frame: str | None = None
    context: str | None = None  # must also be found somewhere in the paste


@dataclass(frozen=True)
class SignatureHit:
    signature: SignatureRecord
    index: int  # position in the matcher, for its frame condition
    span: tuple[int, int]
    captures: dict[str, str] = field(default_factory=dict)
    type_agrees: bool = False
    specificity: int = 0

    @property
    def rank(self) -> tuple[bool, int]:
        return (self.type_agrees, self.specificity)


@dataclass(frozen=True)
class PitfallMatch:
    """One entry matched in a paste, with why: the signature, the text, the exception."""

    entry_id: str
    confidence: float
    hit: SignatureHit
    matched_in: str  # final | cause | context | worker | earlier | warning | text | fragment
    exception_index: int | None  # index in ParsedPaste.exceptions, None for warnings and text
    subject: str  # the exception or warning line, or the text line, that was matched
    searched_text: str  # the text the span refers to

    @property
    def matched_text(self) -> str:
        start, end = self.hit.span
        return self.searched_text[start:end]


def _entry_of(record: SignatureRecord) -> str:
    return record.entry_id


class _Chunk:
    """One compiled RE2 set. `records` are its patterns' signatures in set order; `indices` map
    them to a matcher's positions (-1: no longer in that matcher, a dead slot left in the set)."""

    def __init__(self, records: Sequence[SignatureRecord], max_mem: int) -> None:
        options = re2.Options()
        options.log_errors = False
        options.max_mem = max_mem
        self.max_mem = max_mem
        self.records = tuple(records)
        self.indices: list[int] = []
        self.tail = False  # compiled by `SignatureMatcher.updated`, under half full
        self.set = re2.Set.SearchSet(options)
        self.set.Add(_SENTINEL)
        for record in self.records:
            self.set.Add(record.message)
        self.set.Compile()

    def placed(self, position: dict[SignatureRecord, int]) -> "_Chunk":
        """The same compiled set, its slots mapped to another matcher's positions."""
        chunk = copy.copy(self)
        chunk.indices = [position.get(record, -1) for record in self.records]
        return chunk


class _CompiledWhenUsed:
    """Patterns (or None) by position, each compiled the first time it is asked for."""

    def __init__(self, patterns: list[str | None]) -> None:
        self._patterns = patterns
        self._compiled: dict[int, object] = {}

    def __len__(self) -> int:
        return len(self._patterns)

    def __getitem__(self, index: int):
        if index not in self._compiled:
            pattern = self._patterns[index]
            self._compiled[index] = compile_pattern(pattern) if pattern else None
        return self._compiled[index]


# Matchers alive in this process, whose compiled patterns and sets a new matcher may reuse: a
# save or a change from the feed then compiles only the signatures that changed. Weak: a
# matcher nobody uses any more is not kept alive for this.
_donors: "weakref.WeakSet[SignatureMatcher]" = weakref.WeakSet()
_donors_lock = threading.Lock()
# A reused set keeps the patterns of signatures that are gone as dead slots; below this share
# of live ones it is compiled afresh.
MIN_LIVE_SHARE = 0.5
# How many sets under half full (`SignatureMatcher.updated`'s) a matcher keeps before they are
# compiled together.
MAX_TAILS = 4


class SignatureMatcher:
    """All signatures compiled once; `match_message` is then one set pass plus confirmations."""

    def __init__(
        self,
        records: Iterable[SignatureRecord],
        *,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        set_memory: int = DEFAULT_SET_MEMORY,
        reuse: bool = True,
        specificities: Sequence[int] | None = None,
    ) -> None:
        """`reuse`: take what other matchers of this process have compiled (patterns and whole
        sets) for the same signatures; the result matches exactly as a fresh build does. Without
        it everything is compiled here (what others may then reuse).

        `specificities`: the records are those of a matcher built before (`records`, each of
        whose patterns compiled) and these are its `specificities`: each pattern is then
        compiled when first searched, which a short-lived process (the CLI) mostly never does."""
        if specificities is not None:
            self._init_checked(list(records), list(specificities), chunk_size, set_memory)
            return
        with _donors_lock:
            donors = list(_donors) if reuse else []
        self._compiled: dict[SignatureRecord, tuple] = {}
        self._records: list[SignatureRecord] = []
        # lists here; `_CompiledWhenUsed` for a matcher built from checked records
        self._regexes: Any = []
        self._frames: Any = []
        self._contexts: Any = []
        self._specificity: list[int] = []
        for record in records:
            compiled = self._compiled.get(record)
            if compiled is None:
                compiled = next(
                    (d._compiled[record] for d in donors if record in d._compiled), None
                )
            if compiled is None:
                try:
                    compiled = (
                        compile_pattern(record.message),
                        compile_pattern(record.frame) if record.frame else None,
                        compile_pattern(record.context) if record.context else None,
                        literal_length(record.message),
                    )
                except PatternError:
                    continue  # reported by the checker; a broken pattern must not stop the rest
            self._compiled[record] = compiled
            self._records.append(record)
            regex, frame, context, specificity = compiled
            self._regexes.append(regex)
            self._frames.append(frame)
            self._contexts.append(context)
            self._specificity.append(specificity)
        position = {record: i for i, record in enumerate(self._records)}
        if len(position) != len(self._records):
            donors = []  # the same signature twice: sets are not shared then
        self._chunks: list[_Chunk] = []
        covered: set[SignatureRecord] = set()
        for donor in donors:
            for chunk in donor._chunks:
                live = [r for r in chunk.records if r in position]
                if (
                    chunk.max_mem == set_memory
                    and len(live) >= MIN_LIVE_SHARE * len(chunk.records)
                    and covered.isdisjoint(live)
                ):
                    self._chunks.append(chunk.placed(position))
                    covered.update(live)
        rest = [r for r in self._records if r not in covered]
        for start in range(0, len(rest), chunk_size):
            try:
                chunk = _Chunk(rest[start : start + chunk_size], set_memory)
            except re2.error as exc:
                raise RuntimeError(
                    "the signature set did not compile within its memory budget"
                ) from exc
            self._chunks.append(chunk.placed(position))
        self._chunk_size, self._set_memory = chunk_size, set_memory
        self._messages: list[str] | None = None  # `example_messages`, once asked for
        self.fallbacks = 0  # how often a set failed at match time and patterns ran one by one
        self._caseless: dict[int, object] = {}  # index -> the pattern with case ignored
        self._by_entry: dict[str, list[int]] | None = None
        with _donors_lock:
            _donors.add(self)

    def updated(
        self, changed: Iterable[str], records: Iterable[SignatureRecord]
    ) -> "SignatureMatcher":
        """A new matcher with the signatures of the entries `changed` (ids) replaced by `records`
        (theirs now; an entry with none is gone), matching exactly as one built afresh from the
        whole list in entry and position order (the database's). Only the new signatures are
        compiled, into a small set or with the live ones of the small sets before (a tenth of
        a set at most); once `MAX_TAILS` sets under half full have piled up they are compiled
        together, and a set left with fewer than half its patterns live is compiled again.
        Every other set is shared. This matcher is left as it was (a request may be using it).
        """
        if not isinstance(self._regexes, list):
            raise ValueError("a matcher of checked records compiles lazily: build one afresh")
        changed = set(changed)
        records = list(records)
        changed.update(r.entry_id for r in records)
        fresh = [r for r in records if r.entry_id in changed]
        compiled_new: dict[SignatureRecord, tuple] = {}
        for record in fresh:
            known = self._compiled.get(record)  # an entry saved with this signature unchanged
            if known is not None:
                compiled_new[record] = known
                continue
            try:
                compiled_new[record] = (
                    compile_pattern(record.message),
                    compile_pattern(record.frame) if record.frame else None,
                    compile_pattern(record.context) if record.context else None,
                    literal_length(record.message),
                )
            except PatternError:
                continue
        fresh = [r for r in fresh if r in compiled_new]
        by_entry: dict[str, list[SignatureRecord]] = {}
        for record in fresh:
            by_entry.setdefault(record.entry_id, []).append(record)
        new = SignatureMatcher.__new__(SignatureMatcher)
        new._compiled = dict(self._compiled)
        new._records = list(self._records)
        new._regexes = list(self._regexes)
        new._frames = list(self._frames)
        new._contexts = list(self._contexts)
        new._specificity = list(self._specificity)
        messages = list(self._messages) if self._messages is not None else None
        # old position -> new position (-1: gone), made of whole runs at C speed
        remap = array("i")
        done = 0  # old positions mapped so far
        shift = 0
        for entry_id in sorted(changed):
            start = bisect.bisect_left(new._records, entry_id, key=_entry_of)
            end = bisect.bisect_right(new._records, entry_id, key=_entry_of)
            old_start = start - shift
            remap.extend(range(done + shift, old_start + shift))
            remap.extend([-1] * (end - start))
            done = old_start + (end - start)
            for record in new._records[start:end]:
                new._compiled.pop(record, None)
            added = by_entry.get(entry_id, [])
            parts = [compiled_new[r] for r in added]
            new._records[start:end] = added
            new._regexes[start:end] = [c[0] for c in parts]
            new._frames[start:end] = [c[1] for c in parts]
            new._contexts[start:end] = [c[2] for c in parts]
            new._specificity[start:end] = [c[3] for c in parts]
            if messages is not None:
                messages[start:end] = [split_exception_line(r.example).message for r in added]
            shift += len(added) - (end - start)
        remap.extend(range(done + shift, len(self._records) + shift))
        new._compiled.update(compiled_new)
        # Every set kept is placed at the new positions; the new signatures (and the live ones
        # of a set mostly dead, or of the small sets they join) are compiled together.
        small = max(1, self._chunk_size // 10)
        position: dict[SignatureRecord, int] = {}  # of the signatures to compile
        for entry_id, added in by_entry.items():
            start = bisect.bisect_left(new._records, entry_id, key=_entry_of)
            position.update((record, start + k) for k, record in enumerate(added))
        new._chunks = []
        # Sets under half full are joined once there are a few of them: a save costs one small
        # compile, and now and then one of at most two sets' size, however many saves there were.
        join_tails = sum(1 for c in self._chunks if c.tail) >= MAX_TAILS
        for chunk in self._chunks:
            indices = [remap[i] if i >= 0 else -1 for i in chunk.indices]
            live = sum(1 for i in indices if i >= 0)
            if live < MIN_LIVE_SHARE * len(chunk.records) or (
                chunk.tail and (join_tails or live + len(position) <= small)
            ):
                position.update((new._records[i], i) for i in indices if i >= 0)
                continue
            placed = copy.copy(chunk)
            placed.indices = indices
            new._chunks.append(placed)
        if position:
            recompile = sorted(position, key=position.__getitem__)
            for start in range(0, len(recompile), self._chunk_size):
                try:
                    chunk = _Chunk(recompile[start : start + self._chunk_size], self._set_memory)
                except re2.error as exc:
                    raise RuntimeError(
                        "the signature set did not compile within its memory budget"
                    ) from exc
                chunk.tail = len(chunk.records) < self._chunk_size // 2
                new._chunks.append(chunk.placed(position))
        new._chunk_size, new._set_memory = self._chunk_size, self._set_memory
        new._messages = messages
        new.fallbacks = 0
        new._caseless = {}
        new._by_entry = None
        with _donors_lock:
            _donors.add(new)
        return new

    def _init_checked(
        self,
        records: list[SignatureRecord],
        specificities: list[int],
        chunk_size: int,
        set_memory: int,
    ) -> None:
        if len(specificities) != len(records):
            raise ValueError("one specificity for each record")
        self._compiled = {}  # nothing to give other matchers: this one is never a donor
        self._records = records
        self._regexes = _CompiledWhenUsed([r.message for r in records])
        self._frames = _CompiledWhenUsed([r.frame for r in records])
        self._contexts = _CompiledWhenUsed([r.context for r in records])
        self._specificity = specificities
        position = {record: i for i, record in enumerate(records)}
        self._chunks = []
        for start in range(0, len(records), chunk_size):
            try:
                chunk = _Chunk(records[start : start + chunk_size], set_memory)
            except re2.error as exc:
                raise RuntimeError(
                    "the signature set did not compile within its memory budget"
                ) from exc
            self._chunks.append(chunk.placed(position))
        self._chunk_size, self._set_memory = chunk_size, set_memory
        self._messages = None
        self.fallbacks = 0
        self._caseless = {}
        self._by_entry = None

    def example_messages(self) -> list[str]:
        """The message of each record's example (after `Type: `), in `records` order: what the
        check of a draft searches for the examples its signatures reach. Worked out once per
        matcher, and carried over (changed entries only) by `updated`."""
        if self._messages is None:
            self._messages = [split_exception_line(r.example).message for r in self._records]
        return self._messages

    @property
    def specificities(self) -> list[int]:
        """Each record's literal length, in `records` order (see `__init__`)."""
        return list(self._specificity)

    def __len__(self) -> int:
        return len(self._records)

    @property
    def records(self) -> list[SignatureRecord]:
        return self._records

    def candidates(self, text: str) -> list[int]:
        """Indices of the signatures whose pattern occurs in `text`: one pass per set."""
        found: list[int] = []
        for chunk in self._chunks:
            result = chunk.set.Match(text) or []
            if 0 not in result:  # not even the sentinel: the set failed, search one by one
                self.fallbacks += 1
                found.extend(i for i in chunk.indices if i >= 0 and self._regexes[i].search(text))
                continue
            found.extend(i for j in result if j and (i := chunk.indices[j - 1]) >= 0)
        found.sort()  # the matcher's order, however its sets were put together
        return found

    def indices_of(self, entry_ids: Iterable[str]) -> list[int]:
        """The positions of these entries' signatures."""
        if self._by_entry is None:
            by_entry: dict[str, list[int]] = {}
            for index, record in enumerate(self._records):
                by_entry.setdefault(record.entry_id, []).append(index)
            self._by_entry = by_entry
        return [i for entry_id in entry_ids for i in self._by_entry.get(entry_id, ())]

    def caseless(self, index: int):
        """The signature's pattern with case ignored, compiled the first time it is asked for
        (None if it does not compile so)."""
        if index not in self._caseless:
            try:
                self._caseless[index] = compile_pattern("(?i)" + self._records[index].message)
            except PatternError:
                self._caseless[index] = None
        return self._caseless[index]

    def frame_matches(self, index: int, files: Sequence[str]) -> bool | None:
        """True/False when the signature has a frame condition and frames are known."""
        frame = self._frames[index]
        if frame is None or not files:
            return None
        return any(frame.search(file) for file in files)

    def context_matches(self, index: int, text: str) -> bool:
        """False when the signature names a context that `text` does not hold."""
        context = self._contexts[index]
        return context is None or context.search(text) is not None

    def hit(self, index: int, found, exception_type: str | None) -> SignatureHit:
        """The hit of signature `index` whose pattern found `found` in a message of that type."""
        record = self._records[index]
        return SignatureHit(
            signature=record,
            index=index,
            span=found.span(),
            captures={k: v for k, v in found.groupdict().items() if v is not None},
            type_agrees=exception_agrees(record.exception, exception_type),
            specificity=self._specificity[index],
        )

    def match_message(self, message: str, exception_type: str | None = None) -> list[SignatureHit]:
        """Every signature whose pattern is found in `message`, best first."""
        hits = []
        for index in self.candidates(message):
            found = self._regexes[index].search(message)
            if found is None:
                continue
            hits.append(self.hit(index, found, exception_type))
        hits.sort(key=lambda hit: hit.rank, reverse=True)
        return hits

    def match_exception_line(self, text: str) -> list[SignatureHit]:
        """Match a `Type: message` line, such as a signature's example."""
        line = split_exception_line(text)
        return self.match_message(line.message, line.type)


# ---- ranking a whole paste ---------------------------------------------------------------------

_ROLE_WEIGHT = {
    "final": 1.0,
    "worker": 1.0,
    "warning": 0.9,
    "cause": 0.8,
    "context": 0.8,
    "earlier": 0.75,
    "text": 0.6,
}


def _confidence(role: str, specificity: int, type_term: float, frame_term: float) -> float:
    spec = min(1.0, specificity / 30)
    score = _ROLE_WEIGHT[role] * (0.45 + 0.25 * spec + 0.2 * type_term + 0.1 * frame_term)
    return round(min(1.0, score), 3)


def _subjects(parsed: ParsedPaste) -> list[tuple[str, int | None, str, str, list[str]]]:
    """(role, exception index, type, message, frame files) for everything worth matching."""
    final = parsed.final
    subjects: list[tuple[str, int | None, str, str, list[str]]] = []
    exceptions = parsed.exceptions
    for index, exc in enumerate(exceptions):
        following = exceptions[index + 1].link if index + 1 < len(exceptions) else None
        if exc is final:
            role = "worker" if exc.link == "worker" else "final"
        else:  # it caused, or was being handled during, the exception after it
            role = following if following in ("cause", "context") else "earlier"
        subjects.append((role, index, exc.type, exc.message, [f.file for f in exc.frames]))
    for warning in parsed.warnings:
        subjects.append(("warning", None, warning.category, warning.message, []))
    return subjects


def _score_hit(
    matcher: SignatureMatcher,
    hit: SignatureHit,
    role: str,
    actual_type: str | None,
    files: list[str],
    paste_text: str,
    vetoed: set[str] | None = None,
) -> float | None:
    record = hit.signature
    if not matcher.context_matches(hit.index, paste_text):
        if vetoed is not None:
            vetoed.add(record.entry_id)
        return None  # a generic message without the context that makes it this entry's
    type_term = 0.5
    if record.exception and actual_type:
        if hit.type_agrees:
            type_term = 1.0
        elif hit.specificity < GENERIC_PATTERN_CHARS:
            return None  # a short pattern with the wrong exception type is no evidence
        else:
            type_term = 0.0
    elif record.exception is None and hit.specificity < GENERIC_PATTERN_CHARS and role == "text":
        return None
    # A condition the author wrote and the paste meets is evidence: of two entries sharing a
    # message, the one whose frame or context condition holds comes first.
    frame_term = 1.0 if record.context else 0.5
    frame = matcher.frame_matches(hit.index, files)
    if frame is False:
        if vetoed is not None:
            vetoed.add(record.entry_id)
        return None
    if frame is True:
        frame_term = 1.0
    return _confidence(role, hit.specificity, type_term, frame_term)


def match_paste(
    matcher: SignatureMatcher, parsed: ParsedPaste, vetoed: set[str] | None = None
) -> list[PitfallMatch]:
    """The entries matched in a parsed paste, one per entry, best first.

    `vetoed`, when given, receives the entries whose signature matched the message but whose
    frame or context condition the paste does not meet: their authors said the message alone is
    not theirs, so no other tier may claim it for them either.
    """
    best: dict[str, PitfallMatch] = {}
    judged: set[int] = set()  # signatures already weighed against an exception or a warning

    def consider(match: PitfallMatch) -> None:
        current = best.get(match.entry_id)
        if current is None or match.confidence > current.confidence:
            best[match.entry_id] = match

    for role, index, actual_type, message, files in _subjects(parsed):
        texts = [message]
        collapsed = _SPACES.sub(" ", message)
        if collapsed != message:
            texts.append(collapsed)  # hard-wrapped or re-indented messages
        for text in texts:
            hits = matcher.match_message(text, actual_type)
            for hit in hits:
                judged.add(hit.index)
                confidence = _score_hit(matcher, hit, role, actual_type, files, parsed.text, vetoed)
                if confidence is None:
                    continue
                subject = f"{actual_type}: {message.splitlines()[0] if message else ''}"
                consider(
                    PitfallMatch(
                        hit.signature.entry_id, confidence, hit, role, index, subject, text
                    )
                )
            if hits:
                break
    # Errors printed without an exception line (a CUDA kernel assertion, a bus error notice):
    # one pass over the whole text, for entries not found above.
    text = parsed.text
    for hit in matcher.match_message(text):
        # Not again what an exception already settled, nor a frame condition that text lacks.
        if hit.signature.entry_id in best or hit.index in judged or hit.signature.frame:
            continue
        confidence = _score_hit(matcher, hit, "text", None, [], text, vetoed)
        if confidence is None:
            continue
        start = text.rfind("\n", 0, hit.span[0]) + 1
        end = text.find("\n", hit.span[1])
        line = text[start : end if end >= 0 else len(text)].strip()
        consider(PitfallMatch(hit.signature.entry_id, confidence, hit, "text", None, line, text))
    return sorted(best.values(), key=lambda m: (m.confidence, m.hit.specificity), reverse=True)


def match_caseless(
    matcher: SignatureMatcher,
    parsed: ParsedPaste,
    entry_ids: Sequence[str],
    vetoed: set[str] | None = None,
) -> list[PitfallMatch]:
    """The signatures of a few entries, with case ignored, one entry per match, best first.

    For a message retyped by hand or from a screenshot (`Cudnn RNN backward …`, `scaLar type
    Long`), when no signature matched it as written. Only the likely tier's candidates are
    tried, so this costs a handful of searches, and a match counts for a little less than one
    found as written (`CASELESS_FACTOR`).
    """
    best: dict[str, PitfallMatch] = {}
    indices = matcher.indices_of(entry_ids)
    subjects = [*_subjects(parsed), ("text", None, None, parsed.text, [])]
    for role, index, actual_type, message, files in subjects:
        for text in dict.fromkeys([message, _SPACES.sub(" ", message)]):
            check_budget()
            for i in indices:
                record = matcher.records[i]
                if role == "text" and record.frame:
                    continue  # a frame condition needs an exception's frames
                regex = matcher.caseless(i)
                found = regex.search(text) if regex is not None else None
                if found is None:
                    continue
                hit_role, hit_type = role, actual_type
                if role == "text" and record.exception:
                    # `runtimeerror:the size of tensor a …`: the type retyped too.
                    line_start = text.rfind("\n", 0, found.start()) + 1
                    # Only the few characters a type name takes: over a whole line of word
                    # characters the pattern would backtrack from every position (quadratic).
                    window = max(line_start, found.start() - _TYPE_BEFORE_CHARS)
                    typed = _TYPE_BEFORE.search(text, window, found.start())
                    named = record.exception.rsplit(".", 1)[-1].lower()
                    if typed and typed["type"].rsplit(".", 1)[-1].lower() == named:
                        hit_role, hit_type = "final", record.exception
                hit = matcher.hit(i, found, hit_type)
                confidence = _score_hit(
                    matcher, hit, hit_role, hit_type, files, parsed.text, vetoed
                )
                if confidence is None:
                    continue
                confidence = round(confidence * CASELESS_FACTOR, 3)
                current = best.get(record.entry_id)
                if current is None or confidence > current.confidence:
                    subject = (
                        text[max(0, text.rfind("\n", 0, hit.span[0]) + 1) :].split("\n", 1)[0]
                        if role == "text"
                        else f"{actual_type}: {message.splitlines()[0] if message else ''}"
                    )
                    best[record.entry_id] = PitfallMatch(
                        record.entry_id, confidence, hit, hit_role, index, subject.strip(), text
                    )
    return sorted(best.values(), key=lambda m: (m.confidence, m.hit.specificity), reverse=True)


def known_matches(matches: Sequence[PitfallMatch]) -> list[PitfallMatch]:
    return [m for m in matches if m.confidence >= KNOWN_MATCH_THRESHOLD]


__all__ = [
    "KNOWN_MATCH_THRESHOLD",
    "ParsedException",
    "PitfallMatch",
    "SignatureHit",
    "SignatureMatcher",
    "SignatureRecord",
    "known_matches",
    "match_caseless",
    "match_paste",
]
