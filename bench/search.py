"""Search benchmark: our search on each engine vs SQLite FTS5 and bare tantivy, same corpus.

    python bench/search.py [--sizes 1000 10000] [--repeat 3] [--engines whoosh tantivy]

Our search is `SearchService` (the pages' and API's search: our analysis, query language,
coverage ranking, exact totals) over Whoosh and over tantivy. The peers: SQLite FTS5, and
tantivy with its own analysis and query parser (what tantivy costs when nothing of ours runs).
Prints index build time and per-query latency p50/p99 (plain, with highlights for the page shown,
with facet counts, with both), and the searcher reopened per query. All in one run, because
these machines are noisy.
"""

import argparse
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.search import SearchService
from app.search.engine import FIELD_BOOSTS
from app.search.index import FeedPosition, document_for, rebuild_index
from bench.corpus import QUERIES, generate

PAGE = 20


def percentiles(samples: list[float]) -> tuple[float, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return statistics.median(ordered) * 1000, p99 * 1000


def timed(fn, queries: list[str], repeat: int) -> tuple[float, float]:
    for query in queries[:5]:
        fn(query)  # warm caches the way a running server has them warm
    samples = []
    for _ in range(repeat):
        for query in queries:
            start = time.perf_counter()
            fn(query)
            samples.append(time.perf_counter() - start)
    return percentiles(samples)


# ---- ours ----------------------------------------------------------------------------------


def bench_ours(docs: list[dict], root: Path, repeat: int, engine: str) -> dict:
    index_dir = root / engine
    position = FeedPosition(0, 0, ())
    start = time.perf_counter()
    rebuild_index(None, index_dir, documents=lambda _engine: (position, docs), search_engine=engine)
    build = time.perf_counter() - start
    service = SearchService(index_dir, budget_ms=60_000, search_engine=engine)
    results = {"build": build}
    results["plain"] = timed(
        lambda q: service.search(q, limit=PAGE, highlights=False, facets=False), QUERIES, repeat
    )
    results["highlights"] = timed(
        lambda q: service.search(q, limit=PAGE, highlights=True, facets=False), QUERIES, repeat
    )
    results["facets"] = timed(
        lambda q: service.search(q, limit=PAGE, highlights=False, facets=True), QUERIES, repeat
    )
    results["all"] = timed(lambda q: service.search(q, limit=PAGE), QUERIES, repeat)

    def reopened(query: str) -> None:
        fresh = SearchService(index_dir, search_engine=engine, budget_ms=10_000)
        fresh.search(query, limit=PAGE, highlights=False, facets=False)
        fresh.close()

    results["plain, reopened"] = timed(reopened, QUERIES, max(1, repeat // 3))
    service.close()
    return results


# ---- peers ---------------------------------------------------------------------------------


def fts_query(text: str) -> str:
    return " ".join('"' + word.replace('"', "") + '"' for word in text.split())


def bench_fts5(docs: list[dict], root: Path, repeat: int) -> dict:
    db = sqlite3.connect(root / "fts.db")
    start = time.perf_counter()
    db.execute(
        "CREATE VIRTUAL TABLE fts USING fts5(id UNINDEXED, title, aliases, signatures, summary, "
        "body, code, kind UNINDEXED, tags UNINDEXED, tokenize='unicode61')"
    )
    with db:
        db.executemany(
            "INSERT INTO fts VALUES (?,?,?,?,?,?,?,?,?)",
            [
                (
                    d["id"],
                    d["title"],
                    d["aliases"],
                    d["signatures"],
                    d["summary"],
                    d["body"],
                    d["code"],
                    d["kind"],
                    d["tags"],
                )
                for d in docs
            ],
        )
    build = time.perf_counter() - start
    weights = ", ".join(
        str(FIELD_BOOSTS[f]) for f in ("title", "aliases", "signatures", "summary", "body", "code")
    )
    rank = f"bm25(fts, 0, {weights}, 0, 0)"

    def plain(query: str):
        return db.execute(
            f"SELECT id, title FROM fts WHERE fts MATCH ? ORDER BY {rank} LIMIT {PAGE}",
            (fts_query(query),),
        ).fetchall()

    def highlights(query: str):
        return db.execute(
            f"SELECT id, snippet(fts, 5, '<mark>', '</mark>', ' … ', 24) FROM fts WHERE fts MATCH ? ORDER BY {rank} LIMIT {PAGE}",
            (fts_query(query),),
        ).fetchall()

    def facets(query: str):
        plain(query)
        kinds, tags = Counter(), Counter()
        for kind, tag_text in db.execute(
            "SELECT kind, tags FROM fts WHERE fts MATCH ?", (fts_query(query),)
        ):
            kinds[kind] += 1
            tags.update(tag_text.split(","))
        return kinds, tags

    return {
        "build": build,
        "plain": timed(plain, QUERIES, repeat),
        "highlights": timed(highlights, QUERIES, repeat),
        "facets": timed(facets, QUERIES, repeat),
    }


def bench_tantivy(docs: list[dict], root: Path, repeat: int) -> dict | None:
    try:
        import tantivy
    except ImportError:
        return None
    builder = tantivy.SchemaBuilder()
    for name in ("title", "summary"):
        builder.add_text_field(name, stored=True)
    for name in ("aliases", "signatures", "body", "code"):
        builder.add_text_field(name, stored=name == "body")
    builder.add_text_field("id", stored=True, tokenizer_name="raw")
    builder.add_text_field("kind", stored=True, tokenizer_name="raw", fast=True)
    builder.add_text_field("tags", stored=True, tokenizer_name="raw", fast=True)
    schema = builder.build()
    path = root / "bare-tantivy"
    path.mkdir()
    start = time.perf_counter()
    index = tantivy.Index(schema, path=str(path))
    writer = index.writer(heap_size=200_000_000, num_threads=1)
    for d in docs:
        fields = {
            k: d[k]
            for k in ("id", "title", "summary", "aliases", "signatures", "body", "code", "kind")
        }
        fields["tags"] = d["tags"].split(",")
        writer.add_document(tantivy.Document(**fields))
    writer.commit()
    writer.wait_merging_threads()
    build = time.perf_counter() - start
    index.reload()
    searcher = index.searcher()
    fields = ["title", "aliases", "signatures", "summary", "body", "code"]
    boosts = {f: FIELD_BOOSTS[f] for f in fields}

    def parse(query: str):
        return index.parse_query(query, fields, field_boosts=boosts, conjunction_by_default=True)

    def plain(query: str):
        return [
            searcher.doc(address)["id"]
            for _score, address in searcher.search(parse(query), PAGE).hits
        ]

    def highlights(query: str):
        parsed = parse(query)
        generator = tantivy.SnippetGenerator.create(searcher, parsed, schema, "body")
        return [
            generator.snippet_from_doc(searcher.doc(a)).to_html()
            for _s, a in searcher.search(parsed, PAGE).hits
        ]

    def facets(query: str):
        parsed = parse(query)
        searcher.search(parsed, PAGE)
        return searcher.aggregate(
            parsed,
            {
                "kind": {"terms": {"field": "kind"}},
                "tags": {"terms": {"field": "tags", "size": 100}},
            },
        )

    return {
        "build": build,
        "plain": timed(plain, QUERIES, repeat),
        "highlights": timed(highlights, QUERIES, repeat),
        "facets": timed(facets, QUERIES, repeat),
    }


MODES = ("build", "plain", "highlights", "facets", "all", "plain, reopened")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--engines", nargs="+", default=["whoosh", "tantivy"])
    args = parser.parse_args()
    for size in args.sizes:
        docs = [document_for(g.entry, g.signatures) for g in generate(size)]
        root = Path(tempfile.mkdtemp(prefix="bench-search-"))
        columns: dict[str, dict] = {}
        try:
            for engine in args.engines:
                columns[f"ours, {engine}"] = bench_ours(docs, root, args.repeat, engine)
            columns["sqlite fts5"] = bench_fts5(docs, root, args.repeat)
            bare = bench_tantivy(docs, root, args.repeat)
            if bare:
                columns["bare tantivy"] = bare
        finally:
            shutil.rmtree(root, ignore_errors=True)
        print(f"\n== {size} entries, {len(QUERIES)} queries x {args.repeat}, page of {PAGE} ==")
        print(f"{'':26}" + "".join(f"{name:>18}" for name in columns))
        for mode in MODES:
            cells = []
            for figures in columns.values():
                value = figures.get(mode)
                if value is None:
                    cells.append(f"{'-':>18}")
                elif mode == "build":
                    cells.append(f"{value:>18.2f}")
                else:
                    cells.append(f"{value[0]:>9.2f} /{value[1]:>7.2f}")
            label = "index build (s)" if mode == "build" else f"{mode} p50/p99 (ms)"
            print(f"{label:26}" + "".join(cells))


if __name__ == "__main__":
    main()
