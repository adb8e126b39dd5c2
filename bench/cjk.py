"""Chinese segmentation for search: character bigrams vs jieba, measured on our own content.

    python bench/cjk.py

Relevance is objective here: an entry is relevant to a Chinese query when the query text occurs
in the entry's Markdown. Every Chinese word of the entries' aliases and bodies is a query, plus
its two-character pieces and a few words that occur nowhere (precision). Also prints indexing
time on a generated corpus and the first-tokenization delay of a fresh process.
"""

import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.search import SearchService
from app.search.index import FeedPosition, document_for, rebuild_index
from app.settings import load_settings
from app.storage import create_db_engine, upgrade_schema
from bench.corpus import generate

CJK_RUN = re.compile(r"[\u4e00-\u9fff]+")
ABSENT = ["显卡驱动", "张量核心", "混合精度", "梯度爆炸", "数据增强"]


def queries_and_truth(content: Path) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Whole Chinese words as written in the entries (plus absent ones), and their 2-char pieces.

    Pieces favour bigrams by construction, so the two sets are scored apart.
    """
    texts = {p.stem: p.read_text(encoding="utf-8") for p in content.glob("*.md")}
    words: set[str] = set(ABSENT)
    pieces: set[str] = set()
    for text in texts.values():
        for run in CJK_RUN.findall(text):
            words.add(run)
            pieces.update(run[i : i + 2] for i in range(len(run) - 1))
    pieces -= words

    def truth(queries: set[str]) -> dict[str, set[str]]:
        return {q: {eid for eid, text in texts.items() if q in text} for q in sorted(queries)}

    return truth(words), truth(pieces)


def evaluate(service: SearchService, truth: dict[str, set[str]]) -> dict[str, float]:
    found = relevant_found = returned = top1 = with_answer = 0
    for query, relevant in truth.items():
        hits = [h.id for h in service.search(query, limit=50, highlights=False, facets=False).hits]
        returned += len(hits)
        found += len(set(hits) & relevant)
        relevant_found += len(relevant)
        if relevant:
            with_answer += 1
            top1 += bool(hits) and hits[0] in relevant
    return {
        "queries": len(truth),
        "recall": found / max(1, relevant_found),
        "precision": found / max(1, returned),
        "top-1 relevant": top1 / max(1, with_answer),
    }


def first_call_delay(cjk: str) -> float:
    code = (
        "import time; t = time.perf_counter();"
        "from app.search.analysis import code_analyzer;"
        f"list(code_analyzer({cjk!r})('显存不足 out of memory'));"
        "print(time.perf_counter() - t)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).resolve().parent.parent,
    )
    return float(out.stdout.strip().splitlines()[-1])


def main() -> None:
    content = Path(__file__).resolve().parent.parent / "content"
    root = Path(tempfile.mkdtemp(prefix="bench-cjk-"))
    try:
        settings = load_settings(data_dir=root / "data", content_dir=content)
        engine = create_db_engine(settings)
        upgrade_schema(engine)
        from app.ingest import ingest_content

        ingest_content(engine, content)
        words, pieces = queries_and_truth(content)
        generated = [document_for(g.entry, g.signatures) for g in generate(1000, seed=3)]
        rows = {}
        for cjk in ("bigram", "jieba"):
            index_dir = root / f"index-{cjk}"
            rebuild_index(engine, index_dir, cjk=cjk)
            service = SearchService(index_dir)
            quality = {f"words: {k}": v for k, v in evaluate(service, words).items()}
            quality.update({f"2-char pieces: {k}": v for k, v in evaluate(service, pieces).items()})
            service.close()
            start = time.perf_counter()
            rebuild_index(
                None,
                root / f"gen-{cjk}",
                cjk=cjk,
                documents=lambda _e: (FeedPosition(0, 0, ()), generated),
            )
            quality["index 1k generated (s)"] = time.perf_counter() - start
            quality["fresh process, first tokenization (s)"] = first_call_delay(cjk)
            rows[cjk] = quality
        engine.dispose()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print(f"{'':40}{'bigram':>12}{'jieba':>12}")
    for key in rows["bigram"]:
        a, b = rows["bigram"][key], rows["jieba"][key]
        fmt = "{:>12.0f}" if key.endswith("queries") else "{:>12.3f}"
        print(f"{key:40}" + fmt.format(a) + fmt.format(b))


if __name__ == "__main__":
    main()
