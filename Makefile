.PHONY: all lint test bench

all: lint test

lint:
	ruff check .
	ruff format --check .
	pitfalls check content --strict

test:
	pytest

bench:
	python bench/search.py
	python bench/cjk.py
	python bench/hostile.py
