"""A fresh round of real question titles, searched as the product answers them: figures only.

    python bench/fresh_titles.py ROUND.json [--reader READER.json] [--engine whoosh|tantivy]

ROUND.json lists titles gathered blind from threads no other manifest lists (`query`,
`expected`, `lang`, `source`). Each title goes through the search API, `/api/v1/search`, of an
app over a fresh data dir of `--content`: the entries its error text matches come first (the
answer's `matches`), then the search hits, as the search page shows them. It prints top-1 and
MRR@10 by language and by `clear` (from the blind title-only reader's file: `query`, `answers`,
`clear`), beside that reader's own top-1 and MRR on the same titles. It never lists a title: a
round's misses, once looked at, make it tuning data.

Run it at the starting commit (from a worktree of that commit, with its own copy of this file)
and at the end, before anyone looks at the round's misses.
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _ranked(client, query: str, engine: str) -> list[str]:
    """The entry ids a reader of the search page sees, in order: matches, then hits."""
    response = client.get("/api/v1/search", params={"q": query, "limit": 10})
    if response.status_code != 200:
        raise SystemExit(f"search answered {response.status_code}: {response.text[:200]}")
    body = response.json()
    ids: list[str] = []
    for item in [*body.get("matches", []), *body.get("hits", [])]:
        if item["id"] not in ids:
            ids.append(item["id"])
    return ids[:10]


def _scores(ranks: list[list[str]], expected: list[str]) -> tuple[float, float]:
    top1 = sum(bool(r) and r[0] == e for r, e in zip(ranks, expected, strict=True))
    mrr = sum(1 / (r.index(e) + 1) for r, e in zip(ranks, expected, strict=True) if e in r)
    n = len(expected)
    return top1 / n, mrr / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("round", type=Path)
    parser.add_argument("--reader", type=Path, help="the blind title-only reader's answers")
    parser.add_argument("--engine", choices=("whoosh", "tantivy"), default="whoosh")
    parser.add_argument("--content", type=Path, default=ROOT / "content")
    args = parser.parse_args()

    from fastapi.testclient import TestClient

    from app.settings import load_settings
    from app.web import create_app

    cases = json.loads(args.round.read_text(encoding="utf-8"))
    reader: dict[str, dict] = {}
    if args.reader:
        reader = {r["query"]: r for r in json.loads(args.reader.read_text(encoding="utf-8"))}
    folder = Path(tempfile.mkdtemp(prefix="pitfalls-fresh-titles-"))
    settings = load_settings(
        data_dir=folder, content_dir=args.content.resolve(), search_engine=args.engine
    )
    with TestClient(create_app(settings)) as client:
        got = [_ranked(client, c["query"], args.engine) for c in cases]
    print(f"{args.round.name}: {len(cases)} titles, {args.engine}, content of {args.content}")
    print(f"  {'group':18} {'n':>4} {'top-1':>7} {'MRR@10':>7}   {'reader top-1':>12} {'MRR':>6}")
    groups: dict[str, list[int]] = {}
    for i, case in enumerate(cases):
        clear = reader.get(case["query"], {}).get("clear")
        keys = ["all", case["lang"]]
        if clear is not None:
            kind = "clear" if clear else "vague"
            keys += [kind, f"{case['lang']}, {kind}"]
        for key in keys:
            groups.setdefault(key, []).append(i)
    order = ["all", "en", "en, clear", "en, vague", "zh", "zh, clear", "zh, vague"]
    order += ["clear", "vague"]
    for key in order:
        if key not in groups:
            continue
        idx = groups[key]
        expected = [cases[i]["expected"] for i in idx]
        top1, mrr = _scores([got[i] for i in idx], expected)
        line = f"  {key:18} {len(idx):4} {top1:7.1%} {mrr:7.3f}"
        answered = [i for i in idx if cases[i]["query"] in reader]
        if answered:
            r_top1, r_mrr = _scores(
                [reader[cases[i]["query"]]["answers"][:10] for i in answered],
                [cases[i]["expected"] for i in answered],
            )
            line += f"   {r_top1:12.1%} {r_mrr:6.3f}"
        print(line)


if __name__ == "__main__":
    main()
