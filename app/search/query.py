"""The search box's query language, read by us rather than by Whoosh's parser.

    "out of memory"     a phrase, on every field that keeps positions
    -cuda  -"data parallel"   leaves out entries that have the word or phrase
    title:memory  tag:ddp  kind:hang   only for the fields we know (FIELD_NAMES)
    cuda OR mps         either word (AND is implied and may be typed)
    cuda*               a prefix, bounded like every wildcard

Anything else is text: an unknown `field:` (`RuntimeError: CUDA error`) is two words, brackets,
carets and tildes are dropped, an unclosed quote runs to the end. Reading never fails, so a
query can only be wrong, never an error; each part becomes a Whoosh query through the field's own
analyzer, so what a part finds is what the same words find in the index.
"""

import re
from dataclasses import dataclass, field

from whoosh.qparser import AndGroup, MultifieldParser, OrGroup, QueryParser
from whoosh.query import And, AndNot, Every, NullQuery, Or, Phrase, Query, Term

# What a reader may type before the colon, and the index field it means.
FIELD_NAMES = {
    "title": "title",
    "summary": "summary",
    "body": "body",
    "text": "body",
    "tag": "tags",
    "tags": "tags",
    "kind": "kind",
    "id": "id_text",
    "alias": "aliases",
    "aliases": "aliases",
    "signature": "signatures",
    "signatures": "signatures",
    "message": "signatures",
    "code": "code",
    "question": "questions",
    "questions": "questions",
}
_FILTER_FIELDS = {"tags", "kind"}  # exact values, not analyzed text
_QUOTES = str.maketrans({"“": '"', "”": '"', "„": '"', "«": '"', "»": '"', "＂": '"'})
_PART = re.compile(
    r"""(?P<neg>-(?=[^\W\d]|"))?  # -word, -"a phrase"; never --flag or -1
        (?:(?P<field>[A-Za-z_]+):(?=\S))?
        (?:"(?P<phrase>[^"]*)"?|(?P<word>[^\s"]+))""",
    re.VERBOSE,
)
# Inside a word, only these survive: letters, digits, CJK, and the joiners of identifiers.
_WORD_JUNK = re.compile(
    r"[^\w.*?+#\-\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+"
)
_OPERATORS = {"AND", "OR", "NOT", "TO"}
# Each part costs a query per field (and a pass for coverage): a long Chinese run is one word but
# many bigram parts, so the parts are counted, not only the words; the rest of the text is left.
MAX_PARTS = 32


@dataclass(frozen=True)
class Part:
    text: str  # a word or a phrase's words, cleaned
    phrase: bool = False
    field: str | None = None  # an index field (a value of FIELD_NAMES)
    negated: bool = False
    either: bool = False  # joined to the previous part by OR


@dataclass(frozen=True)
class ReadQuery:
    parts: tuple[Part, ...] = ()
    words: tuple[str, ...] = field(default=())  # the plain positive words, for "did you mean"

    def positive_parts(self) -> tuple[Part, ...]:
        return tuple(p for p in self.parts if not p.negated)

    def text_parts(self) -> tuple[Part, ...]:
        """The positive parts that search text anywhere: no field named."""
        return tuple(p for p in self.parts if not p.negated and p.field is None)

    def plain(self) -> str:
        """The positive words and phrases as plain text (what a fallback search reads)."""
        return " ".join(p.text for p in self.parts if not p.negated)


_CJK_RUN = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]+")


def has_cjk(text: str) -> bool:
    """Whether `text` holds Chinese, Japanese or Korean, which is read as bigrams."""
    return _CJK_RUN.search(text) is not None


def _cjk_parts(word: str) -> list[str]:
    """A word with Chinese in it as parts: its Latin pieces whole, each CJK run as its
    bigrams. Chinese has no spaces, so a question is one "word"; as bigrams, each part can be
    found on its own and a long question ranks entries by how much of it they cover."""
    if not _CJK_RUN.search(word):
        return [word]
    parts = []
    at = 0
    for run in _CJK_RUN.finditer(word):
        if run.start() > at:
            parts.append(word[at : run.start()])
        text = run.group()
        grams = [text] if len(text) == 1 else [text[i : i + 2] for i in range(len(text) - 1)]
        parts += grams
        at = run.end()
    if at < len(word):
        parts.append(word[at:])
    return [p for p in parts if p.strip(" .-+")]


def _clean_word(word: str) -> str:
    word = _WORD_JUNK.sub(" ", word).strip(" .-+")
    return word


def read_query(text: str) -> ReadQuery:
    """Read `text` into parts; never raises."""
    text = text.translate(_QUOTES)
    parts: list[Part] = []
    words: list[str] = []
    pending_or = False
    pending_not = False
    for match in _PART.finditer(text):
        if len(parts) >= MAX_PARTS:
            break
        negated = bool(match.group("neg")) or pending_not
        pending_not = False
        name = match.group("field")
        fieldname = FIELD_NAMES.get(name.lower()) if name else None
        phrase = match.group("phrase")
        raw = match.group("word")
        if phrase is None and raw in _OPERATORS and not negated and not name:
            if raw == "OR" and parts:
                pending_or = True
            elif raw == "NOT":
                pending_not = True
            continue
        found: list[Part] = []
        if name and fieldname is None:
            # Not a field we know: `RuntimeError:` or `foo:` is a word like any other.
            found.append(Part(_clean_word(name), negated=negated))
        if phrase is not None:
            cleaned = " ".join(_clean_word(w) for w in phrase.split())
            cleaned = " ".join(cleaned.split())
            if cleaned:
                is_phrase = len(cleaned.split()) > 1
                found.append(Part(cleaned, phrase=is_phrase, field=fieldname, negated=negated))
        elif raw is not None:
            for piece in _clean_word(raw).split():
                for chunk in _cjk_parts(piece):
                    if chunk.strip("*?"):
                        found.append(Part(chunk, field=fieldname, negated=negated))
        for i, part in enumerate(found):
            if part.text.strip("*?") == "":
                continue
            if i == 0 and pending_or and not part.negated:
                part = Part(part.text, part.phrase, part.field, part.negated, either=True)
            if len(parts) >= MAX_PARTS:
                break
            parts.append(part)
            if not part.negated and part.field is None and not part.phrase:
                words.append(part.text)
        pending_or = False
    return ReadQuery(tuple(parts), tuple(words))


def typed_filters(text: str) -> list[tuple[str, str]]:
    """The field parts of `text` as typed (`tag:cuda`, `title:"out of memory"`), each with the
    text that is left without it: what a search without that filter would be asked."""
    text = text.translate(_QUOTES)
    found = []
    after_not = False
    for match in _PART.finditer(text):
        name = match.group("field")
        negated, after_not = bool(match.group("neg")) or after_not, match.group() == "NOT"
        if not name or negated or FIELD_NAMES.get(name.lower()) is None:
            continue
        rest = f"{text[: match.start()]} {text[match.end() :]}"
        found.append((match.group().strip(), " ".join(rest.split())))
    return found


PIECES_BOOST = 0.5  # an identifier found by its pieces, against found whole
_LEAF = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def identifier_leaves(word: str) -> list[str]:
    """The pieces of a dotted, underscored or camelCase name; [] for a plain word."""
    if not re.search(r"[._]|[a-z][A-Z]", word) or "*" in word or "?" in word:
        return []
    leaves = [leaf for chunk in re.split(r"[._]+", word) for leaf in _LEAF.findall(chunk)]
    if "." not in word and "_" not in word and len(leaves) < 3:
        return []  # PyTorch, GradScaler: names that are names, not phrases
    return leaves


class QueryBuilder:
    """Turns read parts into Whoosh queries over `fields` with their boosts."""

    def __init__(self, schema, fields: list[str], boosts: dict[str, float]) -> None:
        self._schema = schema
        # A part that analyzes into several tokens (an identifier's pieces, CJK bigrams) needs
        # all of them, or, when the query is relaxed, any of them.
        self._multi = {
            group: MultifieldParser(fields, schema, fieldboosts=boosts, group=group)
            for group in (AndGroup, OrGroup)
        }
        self._single: dict[tuple, QueryParser] = {}
        self._fields = fields
        self._boosts = boosts

    def _terms(self, fieldname: str, texts: list[str], boost: float, group) -> Query | None:
        """What Whoosh's parser makes of one plain word's tokens on one field (`term_query`),
        without the parser: its plugins cost more than the search itself on a new query."""
        if not texts:
            return None
        if len(texts) == 1:
            return Term(fieldname, texts[0], boost=boost)
        spec = self._schema[fieldname].multitoken_query.lower()
        if spec == "first":
            return Term(fieldname, texts[0], boost=boost)
        if spec == "phrase":
            return Phrase(fieldname, texts, boost=boost)
        joined = {"and": And, "or": Or}.get(spec) or (Or if group is OrGroup else And)
        return joined([Term(fieldname, t, boost=boost) for t in texts])

    def _word(self, fieldname: str | None, text: str, group) -> Query:
        """A plain word (no phrase, no wildcard) on one field or, boosted, on all of them; each
        analyzer reads the word once, however many fields share it."""
        names = [fieldname] if fieldname is not None else self._fields
        if fieldname is not None and (
            fieldname not in self._schema or self._schema[fieldname].self_parsing()
        ):
            return self._parser(fieldname, group).parse(text)
        analyzed: dict[int, list[str]] = {}
        found = []
        for name in names:
            fieldobj = self._schema[name]
            key = id(fieldobj.analyzer)
            if key not in analyzed:
                analyzed[key] = list(
                    fieldobj.process_text(text, mode="query", tokenize=True, removestops=True)
                )
            boost = 1.0 if fieldname is not None else self._boosts.get(name, 1.0)
            query = self._terms(name, analyzed[key], boost, group)
            if query is not None:
                found.append(query)
        if not found:
            return NullQuery
        return found[0] if len(found) == 1 else Or(found)

    def _text(self, fieldname: str | None, text: str, group) -> Query:
        if any(c in text for c in '*?"'):  # wildcards and phrases: the parser's plugins
            return self._parser(fieldname, group).parse(text)
        words = text.split()
        if len(words) == 1:
            return self._word(fieldname, text, group)
        queries = [self._word(fieldname, w, group) for w in words]
        return (Or if group is OrGroup else And)(queries).normalize()

    def _parser(self, fieldname: str | None, group):
        if fieldname is None:
            return self._multi[group]
        if (fieldname, group) not in self._single:
            self._single[fieldname, group] = QueryParser(fieldname, self._schema, group=group)
        return self._single[fieldname, group]

    def part(self, part: Part, group=AndGroup) -> Query:
        if part.field in _FILTER_FIELDS:
            value = part.text.lower() if part.field == "tags" else part.text
            return Term(part.field, value)
        # The parts are clean: only word characters, joiners and wildcards, so the parser
        # sees no syntax but a phrase's quotes.
        text = f'"{part.text}"' if part.phrase else part.text
        try:
            query = self._text(part.field, text, group)
            leaves = [] if part.phrase else identifier_leaves(part.text)
            if len(leaves) > 1:
                # An identifier is found whole, or by its pieces (DistributedDataSampler:
                # distributed, data, sampler), since people misremember names.
                pieces = self._text(part.field, " ".join(leaves), group)
                query = Or([query, pieces.with_boost(PIECES_BOOST)])
            return query
        except Exception:  # a part the parser cannot read finds nothing
            return NullQuery

    def build(self, read: ReadQuery, any_part: bool = False) -> Query:
        """All positive parts (or any of them), without the negated ones."""
        groups: list[list[Query]] = []
        negated: list[Query] = []
        parts = read.parts
        if any_part:  # a phrase that found nothing may still find its words
            parts = tuple(
                Part(word, field=p.field, negated=p.negated, either=p.either)
                if p.phrase and not p.negated
                else p
                for p in parts
                for word in (p.text.split() if p.phrase and not p.negated else [p.text])
            )
        fielded: list[bool] = []  # per group: every part of it names a field
        for part in parts:
            # A part naming a field is a filter: never relaxed to "any of the words".
            loose = any_part and not part.negated and part.field is None
            query = self.part(part, OrGroup if loose else AndGroup)
            if part.negated:
                negated.append(query)
            elif part.either and groups:
                groups[-1].append(query)
                fielded[-1] = fielded[-1] and part.field is not None
            else:
                groups.append([query])
                fielded.append(part.field is not None)
        required: list[Query] = []
        optional: list[Query] = []
        for group, is_filter in zip(groups, fielded, strict=True):
            query = group[0] if len(group) == 1 else Or(group)
            if query is not NullQuery:  # a stop word alone
                (optional if any_part and not is_filter else required).append(query)
        negated = [q for q in negated if q is not NullQuery]
        if optional:
            required.append(Or(optional) if len(optional) > 1 else optional[0])
        if not required:
            # Only exclusions (`-cuda`): every entry but those.
            return AndNot(Every(), Or(negated)).normalize() if negated else NullQuery
        combined = And(required) if len(required) > 1 else required[0]
        if negated:
            combined = AndNot(combined, Or(negated))
        return combined.normalize()
