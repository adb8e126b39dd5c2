"""The search's fast paths give what the slow, general ones give.

Reading a word into a query, analyzing a document, finding the glossary's groups and marking
highlights each have a short path written for speed beside the general one (Whoosh's query
parser and analyzer chain, one regular expression): on the repository's entries, the real
question titles and awkward strings, both must agree exactly, or a speed-up changed results.
"""

import json
import random
import re

import pytest
from whoosh.qparser import AndGroup, OrGroup

from app.search.analysis import document_tokens, spelling_words
from app.search.engine import FIELD_BOOSTS, SEARCH_FIELDS
from app.search.glossary import GLOSSARY_FILE, expansions
from app.search.highlight import _found_spans, _term_pattern
from app.search.query import QueryBuilder, read_query
from app.search.whoosh_engine import build_schema
from tests.conftest import REPO_CONTENT

QUESTIONS = REPO_CONTENT.parent / "tests" / "data" / "queries" / "questions.json"
AWKWARD = [
    "",
    "a",
    "The AND of torch.cuda.FloatTensor 显存不足 x_y z",
    "bn1.num_batches_tracked running_mean 3D conv2d_1 HTTPServer getHTTPResponseCode",
    "İstanbul ǅ ß ﬁ café naïve",
    "多卡训练时0号卡显存占用过高 DataLoader卡住不动",
    "..a..b__c__ -x- 1.2.3 v1.0rc1",
]


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return [p.read_text(encoding="utf-8") for p in sorted(REPO_CONTENT.glob("*.md"))] + AWKWARD


@pytest.fixture(scope="module")
def schema():
    return build_schema()


@pytest.mark.slow  # exhaustive (every entry, or a whole corpus): the full suite runs it
def test_document_tokens_are_the_analyzers_tokens(texts, schema):
    for name in SEARCH_FIELDS:
        analyzer = schema[name].analyzer
        for text in texts:
            slow = [
                (t.text, t.pos, t.startchar, t.endchar)
                for t in analyzer(text, positions=True, chars=True)
            ]
            assert document_tokens(analyzer, text) == slow, (name, text[:60])
    # Only the two analyzers it knows: anything else is left to Whoosh.
    assert document_tokens(schema["spell"].analyzer, "words") is None


def test_spelling_words_are_the_spelling_analyzers(texts, schema):
    analyzer = schema["spell"].analyzer
    for text in texts:
        assert spelling_words(text) == [t.text for t in analyzer(text)]


@pytest.mark.slow  # exhaustive (every entry, or a whole corpus): the full suite runs it
def test_a_word_becomes_the_query_the_parser_would_make(schema):
    builder = QueryBuilder(schema, list(SEARCH_FIELDS), FIELD_BOOSTS)
    queries = [q["query"] for q in json.loads(QUESTIONS.read_text(encoding="utf-8"))]
    queries += [*AWKWARD, "title:memory code:torch.load", "signature:RuntimeError id:view"]
    compared = 0
    for query in queries:
        for part in read_query(query).parts:
            if part.field in ("tags", "kind"):
                continue
            text = f'"{part.text}"' if part.phrase else part.text
            for group in (AndGroup, OrGroup):
                parsed = builder._parser(part.field, group).parse(text)
                assert builder._text(part.field, text, group).normalize() == parsed, text
                compared += 1
    assert compared > 1000


def _glossary_by_regex(text: str) -> str:
    """The glossary as one pattern per group (what `expansions` used to run)."""
    cjk = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af]")
    found = []
    for line in GLOSSARY_FILE.read_text(encoding="utf-8").splitlines():
        members = [m.strip() for m in line.split("|") if m.strip()]
        if line.strip().startswith("#") or len(members) < 2:
            continue
        alternatives = []
        for member in sorted(members, key=len, reverse=True):
            escaped = re.escape(member.lower()).replace(r"\ ", r"[\s_-]+")
            alternatives.append(escaped if cjk.search(member) else rf"(?<![a-z0-9]){escaped}")
        if re.search("|".join(alternatives), text.lower()):
            found.append(" ; ".join(members))
    return "\n".join(found)


@pytest.mark.slow  # exhaustive (every entry, or a whole corpus): the full suite runs it
def test_the_glossary_finds_what_its_patterns_find(texts):
    words = [w for text in texts for w in text.split()]
    rng = random.Random(7)
    samples = texts + [" ".join(rng.sample(words, 200)) for _ in range(200)]
    samples += ["gpu  memory", "xgpu memory", "multi_gpu", "unhang", "1load", "显存不足了"]
    for text in samples:
        assert expansions(text) == _glossary_by_regex(text), text[:60]


@pytest.mark.slow  # exhaustive (every entry, or a whole corpus): the full suite runs it
def test_highlight_spans_are_where_the_pattern_matches(texts):
    vocabulary = sorted({w.lower() for text in texts for w in re.findall(r"\w{2,}", text)})
    rng = random.Random(11)
    for _ in range(1500):
        terms = tuple(rng.sample(vocabulary, rng.randint(1, 6)))
        terms += tuple(t[:-1] + "i" for t in terms if t.endswith("y"))  # Porter's memori
        text = rng.choice(texts)
        expected = [m.span() for m in _term_pattern(terms).finditer(text)][:16]
        found = _found_spans(text, terms)
        assert found is None or found == expected, terms
