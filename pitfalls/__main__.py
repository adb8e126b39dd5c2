"""`python -m pitfalls ...` is the `pitfalls` command (`python -m pitfalls run -- python x.py`)."""

from app.cli import main

main()
