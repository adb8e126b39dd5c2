"""Pitfalls: a self-hosted, searchable knowledge base of PyTorch pitfalls."""

__version__ = "0.1.0"
