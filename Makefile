.PHONY: all lint test quick bench

all: lint test

lint:
	ruff check .
	ruff format --check .
	mypy app
	pitfalls check content --strict

test:
	pytest

# The quick lane: every module on SQLite, in process (no servers, PostgreSQL or browsers).
quick:
	pytest -m "not slow"

bench:
	python bench/search.py
	python bench/cjk.py
	python bench/hostile.py
