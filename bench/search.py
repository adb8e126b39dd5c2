"""Search benchmark: our Whoosh search vs SQLite FTS5 and tantivy on the same corpus and queries.

    python bench/search.py [--sizes 1000 10000] [--repeat 3]

Prints index build time and per-query latency p50/p99 (plain, with highlights for the page shown,
with facet counts), with the searcher reused vs reopened per query, and the peers side by side
as ratios. All in one run, because these machines are noisy.
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
from app.search.index import FIELD_BOOSTS, document_for, rebuild_index
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


def bench_whoosh(docs: list[dict], root: Path, repeat: int) -> dict:
    index_dir = root / "whoosh"
    start = time.perf_counter()
    rebuild_index(None, index_dir, documents=lambda _engine: (0, docs))
    build = time.perf_counter() - start
    service = SearchService(index_dir)
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
        fresh = SearchService(index_dir)
        fresh.search(query, limit=PAGE, highlights=False, facets=False)
        fresh.close()

    results["plain, reopened"] = timed(reopened, QUERIES, max(1, repeat // 3))

    # Whoosh's own facet counting, for comparison with our cached per-term sets.
    from whoosh import sorting

    searcher = service._current_searcher()
    facets = [sorting.FieldFacet("kind"), sorting.FieldFacet("tags", allow_overlap=True)]

    def grouped(query: str) -> None:
        parsed = service._parse(searcher, query, __import__("whoosh.qparser").qparser.AndGroup)
        hits = searcher.search(parsed, limit=PAGE, groupedby=facets)
        for name in ("kind", "tags"):
            hits.groups(name)

    results["facets, whoosh groupedby"] = timed(grouped, QUERIES, repeat)
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
    path = root / "tantivy"
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


def report_row(label: str, mine: float, fts: float, tan: float | None) -> str:
    """One line of the table: our figure, the peers', and ours as a multiple of each peer's."""
    row = f"{label:34}{mine:>16.2f}{fts:>16.2f}"
    row += f"{tan:>16.2f}" if tan else f"{'-':>16}"
    row += f"{mine / fts:>10.1f}x"
    row += f"{mine / tan:>13.1f}x" if tan else ""
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for size in args.sizes:
        docs = [document_for(g.entry, g.signatures) for g in generate(size)]
        root = Path(tempfile.mkdtemp(prefix="bench-search-"))
        try:
            ours = bench_whoosh(docs, root, args.repeat)
            fts = bench_fts5(docs, root, args.repeat)
            tan = bench_tantivy(docs, root, args.repeat)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        print(f"\n== {size} entries, {len(QUERIES)} queries x {args.repeat}, page of {PAGE} ==")
        print(
            f"{'':34}{'whoosh (ours)':>16}{'sqlite fts5':>16}{'tantivy':>16}{'ours/fts5':>11}{'ours/tantivy':>14}"
        )
        print(report_row("index build (s)", ours["build"], fts["build"], tan and tan["build"]))
        for mode in ("plain", "highlights", "facets"):
            for at, label in ((0, "p50"), (1, "p99")):
                print(
                    report_row(
                        f"{mode} {label} (ms)", ours[mode][at], fts[mode][at], tan and tan[mode][at]
                    )
                )
        for mode in ("all", "plain, reopened", "facets, whoosh groupedby"):
            p50, p99 = ours[mode]
            print(f"{'whoosh ' + mode + ' p50/p99 (ms)':34}{p50:>10.2f} / {p99:.2f}")


if __name__ == "__main__":
    main()
