.PHONY: all lint test quick bench

all: lint test

lint:
	ruff check .
	ruff format --check .
	mypy app
	pitfalls check content --strict

test:
	pytest -n auto --maxprocesses 4

# The quick lane: every module on SQLite, in process (no servers, PostgreSQL or browsers),
# spread over every core by pytest-xdist.
quick:
	pytest -m "not slow" -n auto

bench:
	python bench/search.py
	python bench/cjk.py
	python bench/hostile.py
