"""Hostile input benchmark: the worst pastes and queries we know, beside ordinary ones of the
same size, through the same functions the server calls.

    python bench/hostile.py [--repeat 3]

For each crafted paste it prints the time of `answer_paste` (parse, match, related entries) and
of an ordinary traceback of the same size; for each crafted query the time of a search and of
an ordinary query. The ratio column is what holds across machines: near 1 means the crafted
input costs what its size costs.
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.answers import MatcherCache, answer_paste
from app.bootstrap import prepare_data
from app.search import SearchService
from app.settings import load_settings
from app.storage import create_db_engine
from tests.hostile_inputs import PASTES, QUERIES

REPO = Path(__file__).resolve().parent.parent
ORDINARY_LINE = '  File "/home/user/train.py", line 42, in step\n    loss = model(batch).sum()\n'
ORDINARY_QUERY = "cuda out of memory"


def ordinary_paste(size: int) -> str:
    body = ORDINARY_LINE * (size // len(ORDINARY_LINE) + 1)
    return "Traceback (most recent call last):\n" + body[:size] + "\nRuntimeError: boom\n"


def best_of(repeat: int, fn) -> float:
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        settings = load_settings(data_dir=Path(folder) / "data", content_dir=REPO / "content")
        engine = create_db_engine(settings)
        prepare_data(settings, engine)
        search = SearchService(settings.index_dir, engine)
        matcher = MatcherCache(engine).current()

        def answer(text: str):
            return lambda: answer_paste(text, engine=engine, matcher=matcher)

        print(f"{'paste':32} {'bytes':>9} {'crafted ms':>11} {'ordinary ms':>12} {'ratio':>6}")
        for name, text in PASTES.items():
            crafted = best_of(args.repeat, answer(text))
            ordinary = best_of(args.repeat, answer(ordinary_paste(len(text))))
            ratio = crafted / ordinary
            print(f"{name:32} {len(text):>9,} {crafted:>11.1f} {ordinary:>12.1f} {ratio:>6.2f}")
        print()
        print(f"{'query':32} {'crafted ms':>11} {'ordinary ms':>12} {'ratio':>6}")
        ordinary = best_of(args.repeat, lambda: search.search(ORDINARY_QUERY))
        for name, query in QUERIES.items():
            crafted = best_of(args.repeat, lambda q=query: search.search(q))
            print(f"{name:32} {crafted:>11.1f} {ordinary:>12.1f} {crafted / ordinary:>6.2f}")
        search.close()
        engine.dispose()


if __name__ == "__main__":
    main()
