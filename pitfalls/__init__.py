"""Pitfalls where the error happens: `%load_ext pitfalls` in IPython/Jupyter, `pitfalls.install()`
in a script. The knowledge base itself lives in the `app` package; see app/hook.py."""

from app.hook import install, load_ipython_extension, unload_ipython_extension

__all__ = ["install", "load_ipython_extension", "unload_ipython_extension"]
