"""Checks across entry files: duplicate ids, `related` links, signature collisions and wordings.

`pitfalls check`, `pitfalls ingest` and the wiki's draft check all judge links and collisions
with the functions here, so an entry is judged the same way wherever it comes from.
"""

import hashlib
import re
from bisect import bisect_right
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from itertools import accumulate
from pathlib import Path
from typing import Protocol

from app.entries import EntryDocument, Problem, read_entry_file
from app.entries.reading import parse_entry_bytes, read_entry_bytes
from app.matching import SignatureHit, SignatureMatcher, SignatureRecord
from app.matching.likely import EntryText
from app.matching.signature_tier import known_matches, match_paste
from app.rendering import markdown_section
from app.signatures import PatternError, compile_pattern, literal_length, split_exception_line
from app.tracebacks import parse_traceback


def collect_entry_files(paths: Iterable[Path]) -> list[Path]:
    """The `.md` files named, and those below the folders named, in a stable order."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(sorted(p for p in path.rglob("*.md") if p.is_file()))
        else:
            found.append(path)
    return list(dict.fromkeys(found))


def load_entry_files(paths: Sequence[Path], html: bool = True) -> list[EntryDocument]:
    return [read_entry_file(path, html=html) for path in paths]


def signature_records(docs: Iterable[EntryDocument]) -> list[SignatureRecord]:
    records = []
    for doc in docs:
        if doc.front is None:
            continue
        for position, sig in enumerate(doc.front.signatures):
            records.append(
                SignatureRecord(
                    entry_id=doc.front.id,
                    position=position,
                    message=sig.message,
                    example=sig.example,
                    exception=sig.exception,
                    frame=sig.frame,
                    context=sig.context,
                )
            )
    return records


def entry_texts(docs: Iterable[EntryDocument]) -> list[EntryText]:
    """What the likely tier reads of each entry file, as `storage.active_entry_texts` does."""
    return [
        EntryText.of(doc.front, markdown_section(doc.body, "What you see"), doc.front.signatures)
        for doc in docs
        if doc.front is not None
    ]


def duplicate_id_problems(docs: Sequence[EntryDocument]) -> list[Problem]:
    first: dict[str, EntryDocument] = {}
    problems = []
    for doc in docs:
        if doc.front is None:
            continue
        if doc.front.id in first:
            problems.append(
                Problem(
                    doc.path,
                    doc.line_of("id"),
                    f"duplicate id {doc.front.id!r}: already defined in {first[doc.front.id].path}",
                )
            )
        else:
            first[doc.front.id] = doc
    return problems


def related_problems(docs: Sequence[EntryDocument], known_ids: set[str]) -> list[Problem]:
    problems = []
    for doc in docs:
        if doc.front is None:
            continue
        for index, other in enumerate(doc.front.related):
            if other not in known_ids:
                problems.append(
                    Problem(
                        doc.path,
                        doc.line_of("related", index),
                        f"related id {other!r} does not exist",
                    )
                )
    return problems


class ExampleMatcher(Protocol):
    def match_exception_line(self, text: str) -> list[SignatureHit]: ...


@dataclass(frozen=True)
class Collision:
    """`victim`'s example is matched by `rival`, of another entry, as well or better than by
    the victim's own entry."""

    victim: SignatureRecord
    rival: SignatureRecord


def find_collisions(
    records: Iterable[SignatureRecord], matcher: ExampleMatcher
) -> Iterator[Collision]:
    """The rule: each example must be matched first by its own entry, not tied or beaten,
    unless a context condition on one side only tells the two apart."""
    for record in records:
        hits = matcher.match_exception_line(record.example)
        own = [h for h in hits if h.signature.entry_id == record.entry_id]
        if not own:
            continue  # the entry's own check already reports an unmatched example
        for hit in hits:
            if hit.signature.entry_id == record.entry_id or hit.rank < own[0].rank:
                continue
            if _context_decides(record, hit.signature):
                continue
            yield Collision(record, hit.signature)


def _context_decides(victim: SignatureRecord, rival: SignatureRecord) -> bool:
    """Whether a context condition on one side only tells the two apart: the paste decides,
    and the entry whose context it holds comes first (`signature_tier._score_hit`). A rival's
    context must not hold in the victim's own example, or it would claim that paste too (a
    context such as `.` would let any entry take another's message)."""
    if (victim.context is None) == (rival.context is None):
        return False
    if rival.context is None:
        return True
    try:
        return compile_pattern(rival.context).search(victim.example) is None
    except PatternError:
        return False  # the rival's own check reports its broken context


def collision_problems(docs: Sequence[EntryDocument], matcher: ExampleMatcher) -> list[Problem]:
    """Collisions over the examples of `docs`, each reported at the example."""
    problems = []
    for doc in docs:
        for collision in find_collisions(signature_records([doc]), matcher):
            victim, rival = collision.victim, collision.rival
            problems.append(
                Problem(
                    doc.path,
                    doc.line_of("signatures", victim.position, "example"),
                    f"collision: the example of signatures[{victim.position}] is matched as well "
                    f"or better by entry {rival.entry_id!r} (signatures[{rival.position}]); "
                    "make one pattern more specific",
                )
            )
    return problems


# A pattern that says where a text starts or ends is searched in each message by itself.
_ANCHORED = re.compile(r"[$^]|\\[AzZ]")


def reached_examples(
    patterns: Sequence[SignatureRecord],
    others: Sequence[SignatureRecord],
    messages: Sequence[str] | None = None,
) -> list[SignatureRecord]:
    """Those of `others` whose example's message a pattern of `patterns` finds (the examples
    `SignatureMatcher(patterns).match_exception_line` has hits for), in order.

    Each pattern is searched over all the messages joined by newlines, starting again at the
    message after each hit; the message a hit starts in is then searched by itself (a hit may
    run on into the next message). None is missed, since every message is searched from its
    start, so a save's check costs a few searches in C, not a set pass per entry."""
    if not others:
        return []
    if messages is None:
        messages = [split_exception_line(r.example).message for r in others]
    joined = "\n".join(messages)
    starts = list(accumulate((len(m) + 1 for m in messages), initial=0))
    found: set[int] = set()
    for record in patterns:
        try:
            regex = compile_pattern(record.message)
        except PatternError:
            continue
        if _ANCHORED.search(record.message):
            found.update(i for i, m in enumerate(messages) if regex.search(m) is not None)
            continue
        position = 0
        while position <= len(joined):
            hit = regex.search(joined, position)
            if hit is None:
                break
            index = bisect_right(starts, hit.start()) - 1
            if regex.search(messages[index]) is not None:  # not a hit running on into the next
                found.add(index)
            position = starts[index + 1]
    return [others[i] for i in sorted(found) if i < len(others)]


def rival_problems(
    docs: Sequence[EntryDocument],
    others: Sequence[SignatureRecord],
    matcher: ExampleMatcher,
    messages: Sequence[str] | None = None,
) -> list[Problem]:
    """The other side: collisions over the examples of `others` (entries not in `docs`) that a
    signature of `docs` wins, each reported at that signature of `docs`. `messages`: the
    messages of `others`' examples, when the caller has them (`example_messages`)."""
    by_id = {doc.front.id: doc for doc in docs if doc.front is not None}
    if not by_id or not others:
        return []
    # Only examples one of `docs` matches at all can be won by it.
    suspects = reached_examples(signature_records(by_id.values()), others, messages)
    problems = []
    for collision in find_collisions(suspects, matcher):
        victim, rival = collision.victim, collision.rival
        doc = by_id.get(rival.entry_id)
        if doc is None:
            continue
        problems.append(
            Problem(
                doc.path,
                doc.line_of("signatures", rival.position, "message"),
                f"collision: signatures[{rival.position}] matches the example of entry "
                f"{victim.entry_id!r} (signatures[{victim.position}]) as well as or better than "
                "that entry does; make one pattern more specific",
            )
        )
    return problems


def wording_rivals(text: str, entry_id: str, matcher: SignatureMatcher) -> list[str] | None:
    """The entries that the signature tier ranks with or ahead of `entry_id` for a pasted
    `text`, as a paste on /match is ranked; None when no signature of `entry_id` claims it."""
    found = known_matches(match_paste(matcher, parse_traceback(text)))
    own = next((m for m in found if m.entry_id == entry_id), None)
    if own is None:
        return None
    key = (own.confidence, own.hit.specificity)
    return [
        m.entry_id
        for m in found
        if m.entry_id != entry_id and (m.confidence, m.hit.specificity) >= key
    ]


def wording_problems(docs: Sequence[EntryDocument], matcher: SignatureMatcher) -> list[Problem]:
    """Each wording of `docs` must be matched first by its own entry, as a signature's example
    must: a wording nothing claims needs a wider signature, one another entry wins a narrower."""
    problems = []
    for doc in docs:
        if doc.front is None:
            continue
        for index, wording in enumerate(doc.front.wordings):
            if not wording.text.strip():
                continue  # reported by the entry's own check
            rivals = wording_rivals(wording.text, doc.front.id, matcher)
            line = doc.line_of("wordings", index, "text")
            if rivals is None:
                problems.append(
                    Problem(
                        doc.path,
                        line,
                        f"wordings[{index}] is matched by no signature of this entry: widen a "
                        "signature or add one for this wording",
                    )
                )
            elif rivals:
                problems.append(
                    Problem(
                        doc.path,
                        line,
                        f"wordings[{index}] is matched as well or better by entry "
                        f"{rivals[0]!r}: make one pattern more specific",
                    )
                )
    return problems


# A prefix word that narrows a tag to another thing: `multi-gpu` is not a spelling of `gpu`.
QUALIFYING_PREFIXES = frozenset({"multi", "single", "non"})


def _tag_key(tag: str) -> str:
    """A tag with its separators and a plural `s` dropped: `in-place` and `inplace`, `image`
    and `images` have one key."""
    key = tag.replace("-", "").replace(".", "")
    return key[:-1] if len(key) > 3 and key.endswith("s") and not key.endswith("ss") else key


def near_duplicate_tags(a: str, b: str) -> bool:
    """Two spellings of one tag: the same key, or one is the other after a prefix word
    (`data-augmentation`, `augmentation`)."""
    if a == b:
        return False
    if _tag_key(a) == _tag_key(b):
        return True
    for longer, shorter in ((a, b), (b, a)):
        head, _, rest = longer.partition("-")
        if rest and head not in QUALIFYING_PREFIXES and _tag_key(rest) == _tag_key(shorter):
            return True
    return False


def tag_spelling_problems(
    docs: Sequence[EntryDocument], context: Sequence[tuple[str, Sequence[str]]] = ()
) -> list[Problem]:
    """A warning at each tag of `docs` that another entry (of `docs`, or a (file name, tags)
    of `context`) spells another way: a tag filter finds only one spelling, so the corpus
    should use one."""
    users: dict[str, list[str]] = {}
    own = [(Path(d.path).name, d.front.tags if d.front is not None else ()) for d in docs]
    for name, tags in [*own, *context]:
        for tag in tags:
            users.setdefault(tag, []).append(name)
    problems = []
    for doc in docs:
        for index, tag in enumerate(doc.front.tags if doc.front is not None else ()):
            for other in sorted(t for t in users if near_duplicate_tags(tag, t)):
                files = users[other]
                named = ", ".join(files[:3]) + (
                    f" and {len(files) - 3} more" if len(files) > 3 else ""
                )
                problems.append(
                    Problem(
                        doc.path,
                        doc.line_of("tags", index),
                        f"tag {tag!r} looks like {other!r} (used in {named}): "
                        "one tag spelled two ways; use one spelling",
                        "warning",
                    )
                )
    return problems


@dataclass
class CheckReport:
    docs: list[EntryDocument]
    problems: list[Problem]

    @property
    def errors(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "error"]

    @property
    def warnings(self) -> list[Problem]:
        return [p for p in self.problems if p.severity == "warning"]


@dataclass(frozen=True)
class SiblingFacts:
    """What a check needs of an entry file it does not report on: the context of the ones it
    does (its id for links, its signatures for collisions, its tags for spellings)."""

    name: str  # the file's name
    entry_id: str | None  # None: no readable front-matter
    ok: bool
    tags: tuple[str, ...]
    records: tuple[SignatureRecord, ...]

    @classmethod
    def of(cls, doc: EntryDocument) -> "SiblingFacts":
        front = doc.front
        return cls(
            name=Path(doc.path).name,
            entry_id=front.id if front is not None else None,
            ok=doc.ok,
            tags=tuple(front.tags) if front is not None else (),
            records=tuple(signature_records([doc])),
        )

    def plain(self) -> tuple:
        rows = tuple(
            (r.entry_id, r.position, r.message, r.example, r.exception, r.frame, r.context)
            for r in self.records
        )
        return (self.name, self.entry_id, self.ok, self.tags, rows)

    @classmethod
    def from_plain(cls, data: tuple) -> "SiblingFacts":
        name, entry_id, ok, tags, rows = data
        return cls(name, entry_id, ok, tuple(tags), tuple(SignatureRecord(*r) for r in rows))


class SiblingMemo(Protocol):
    """Facts of sibling files already read, by the digest of their bytes (`local_cache`)."""

    def get(self, key: bytes) -> SiblingFacts | None: ...

    def put(self, key: bytes, facts: SiblingFacts) -> None: ...


def sibling_facts(path: Path, memo: SiblingMemo | None = None) -> SiblingFacts:
    """The facts of the entry file `path`: from `memo` when a file with the same name and
    bytes was read before, else read now (parsed, not rendered)."""
    if memo is None:
        return SiblingFacts.of(read_entry_file(path, html=False))
    try:
        data = read_entry_bytes(path)
    except OSError:
        return SiblingFacts.of(read_entry_file(path, html=False))  # the read reports it
    key = hashlib.blake2b(data, digest_size=16, person=b"pitfalls-sibling")
    key.update(path.name.encode("utf-8", "surrogateescape"))
    digest = key.digest()
    facts = memo.get(digest)
    if facts is None:
        facts = SiblingFacts.of(
            parse_entry_bytes(data, str(path), expected_id=path.stem, html=False)
        )
        memo.put(digest, facts)
    return facts


def check_paths(paths: Sequence[Path], memo: SiblingMemo | None = None) -> CheckReport:
    """Check the named files and folders; sibling entries give context for links and collisions
    (`memo`: what was read of them before, so that checking one file reads one file)."""
    files = collect_entry_files(paths)
    # A check shows no page: the bodies are parsed, not rendered to HTML.
    docs = load_entry_files(files, html=False)
    checked = {Path(d.path).resolve() for d in docs}
    context: list[SiblingFacts] = []
    for folder in {f.resolve().parent for f in files}:
        for sibling in collect_entry_files([folder]):
            if sibling.resolve() not in checked:
                context.append(sibling_facts(sibling, memo))
    problems = [p for d in docs for p in d.problems]
    problems += duplicate_id_problems(docs)
    known = {d.front.id for d in docs if d.front is not None}
    known |= {c.entry_id for c in context if c.entry_id is not None}
    problems += related_problems(docs, known)
    records = signature_records(d for d in docs if d.ok)
    records += [r for c in context if c.ok for r in c.records]
    # Every pattern of a file without errors compiles (its own check compiled it): each is
    # compiled again only when an example or wording reaches it.
    matcher = SignatureMatcher(records, specificities=[literal_length(r.message) for r in records])
    problems += collision_problems([d for d in docs if d.ok], matcher)
    problems += wording_problems([d for d in docs if d.ok], matcher)
    problems += tag_spelling_problems(docs, [(c.name, c.tags) for c in context])
    return CheckReport(docs=docs, problems=sorted(set(problems)))
