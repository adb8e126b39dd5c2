"""The matched pitfall under an uncaught exception, in IPython/Jupyter and in plain Python.

`%load_ext pitfalls` in a notebook, or `pitfalls.install()` in a script: the original traceback
is shown first and unchanged (the hook never hides or alters it), then the known pitfalls that
match it, as rich HTML in Jupyter (title, the values captured from the message, the fix, a link)
and as text elsewhere (the user's last frame with the library frames folded, the whole Fix
section with its code, and `pitfalls show ID` for the rest). A failure of the hook itself is one
line on stderr, nothing more.

Where answers come from: with PITFALLS_SERVER set, that server's `/api/v1/match` (with
PITFALLS_TOKEN when reading is private); otherwise this machine's database, prepared as
`pitfalls serve` would, in PITFALLS_DATA_DIR or `~/.cache/pitfalls`, from ./content or the
entries shipped with the package. Nothing is sent anywhere unless a server is configured. The
local matcher is built in a background thread as soon as the hook is installed, so an exception
is explained in milliseconds once it is ready; on SQLite it is read from the data dir's cache
that `pitfalls match` keeps (app.local_cache), re-read whenever the database has changed.
"""

import html
import os
import sys
import threading
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from app.answer_sources import Pitfalls
    from app.local_cache import CachedAnswers


def _ready_wait_s() -> float:
    """How long the first exception waits at most for the local matcher (which, on a first run,
    ingests and indexes every entry): PITFALLS_HOOK_WAIT_S, 30 s by default."""
    try:
        return max(1.0, float(os.environ.get("PITFALLS_HOOK_WAIT_S", "30")))
    except ValueError:
        return 30.0


class Explainer:
    """The hook's source of answers: a server's API, or the local one prepared in a thread."""

    def __init__(self, server: str | None = None, token: str | None = None) -> None:
        from app.answer_sources import RemotePitfalls

        self.server = (server or os.environ.get("PITFALLS_SERVER") or "").rstrip("/") or None
        token = token or os.environ.get("PITFALLS_TOKEN")
        self._source: Pitfalls | CachedAnswers | None = (
            RemotePitfalls(self.server, token) if self.server else None
        )
        self._error: BaseException | None = None
        self._ready = threading.Event()
        if self._source is None:
            threading.Thread(target=self._prepare, name="pitfalls-hook", daemon=True).start()
        else:
            self._ready.set()

    def _prepare(self) -> None:
        try:
            from app.answer_sources import local_pitfalls
            from app.local_cache import CachedAnswers, sqlite_file
            from app.settings import load_settings

            data_dir = os.environ.get("PITFALLS_DATA_DIR") or str(
                Path.home() / ".cache" / "pitfalls"
            )
            settings = load_settings(data_dir=Path(data_dir))
            if sqlite_file(settings.database_url) is not None:
                # The CLI's cache of the answers' material: no SQLAlchemy, no full compile.
                self._source = CachedAnswers(settings)
            else:
                source = local_pitfalls(settings)
                source.matchers.current()  # compiled now, not at the first error
                self._source = source
        except BaseException as exc:  # reported once, when an exception needs the matcher
            self._error = exc
        finally:
            self._ready.set()

    def explain(self, text: str) -> dict:
        """The /api/v1/match answer for `text`."""
        wait_s = _ready_wait_s()
        if not self._ready.wait(wait_s):
            raise TimeoutError(f"the local matcher was not ready within {wait_s:g} s")
        if self._error is not None:
            raise self._error
        assert self._source is not None  # set before _ready, unless _error is
        return self._source.match(text[-250_000:])  # the end of a long output holds the error

    def link(self, url: str) -> str | None:
        return self.server + url if self.server else None


def as_text(answer: dict, explainer: Explainer) -> str:
    """The user's last frame with the library frames folded, then each match with its whole
    Fix section (every code block kept) and where to read the rest of the entry."""
    if not answer.get("matches"):
        return "Pitfalls: no known pitfall matches this error."
    from app.tracebacks.frames import folded_from_answer, folded_lines

    frames = folded_lines(folded_from_answer(answer.get("parsed")))
    lines = []
    for match in answer["matches"][:3]:
        tier = "" if match["tier"] == "signature" else f", likely {match['confidence']:.0%}"
        lines.append(f"Pitfalls: {match['title']}  [{match['id']}{tier}]")
        if len(lines) == 1:  # where the error is in the user's code, once, under the best match
            lines.extend("  " + line for line in frames)
        lines.append(f"  {match['summary']}")
        for name, value in match.get("captures", {}).items():
            lines.append(f"  {name.replace('_', ' ')}: {value}")
        fix = match.get("fix_markdown", "").strip()
        if fix:
            lines.append("  Fix:")
            lines.extend(f"    {line}".rstrip() for line in fix.splitlines())
        show = f"pitfalls show {match['id']}"
        if explainer.server:
            show += f" --server {explainer.server}"
        link = explainer.link(match["url"])
        lines.append(f"  the whole entry: {show}" + (f"  ({link})" if link else ""))
    return "\n".join(lines)


def as_html(answer: dict, explainer: Explainer) -> str:
    """Everything escaped but the fix, which is the entry's own HTML as the site renders it."""
    if not answer.get("matches"):
        return '<div class="pitfalls"><p>Pitfalls: no known pitfall matches this error.</p></div>'
    parts = ['<div class="pitfalls" style="border-left:4px solid #c62828;padding:.2em .8em">']
    for match in answer["matches"][:3]:
        title = html.escape(match["title"])
        link = explainer.link(match["url"])
        heading = f'<a href="{html.escape(link)}">{title}</a>' if link else title
        tier = "" if match["tier"] == "signature" else f" (likely, {match['confidence']:.0%})"
        parts.append(f"<h4>Pitfalls: {heading}{html.escape(tier)}</h4>")
        parts.append(f"<p>{html.escape(match['summary'])}</p>")
        captures = match.get("captures") or {}
        if captures:
            items = "".join(
                f"<li>{html.escape(k.replace('_', ' '))}: <code>{html.escape(v)}</code></li>"
                for k, v in captures.items()
            )
            parts.append(f"<ul>{items}</ul>")
        if match.get("fix_html"):
            parts.append(f"<details open><summary>Fix</summary>{match['fix_html']}</details>")
    parts.append("</div>")
    return "".join(parts)


_explainer: Explainer | None = None


def explainer() -> Explainer:
    global _explainer
    if _explainer is None:
        _explainer = Explainer()
    return _explainer


def _report(etype, value, tb, show) -> None:
    """Match the exception and `show(answer)`; a failure here is one line on stderr."""
    if issubclass(etype, KeyboardInterrupt | SystemExit):
        return
    try:
        text = "".join(traceback.format_exception(etype, value, tb))
        show(explainer().explain(text))
    except BaseException as exc:
        print(f"pitfalls: could not explain this error ({type(exc).__name__}: {exc})",
              file=sys.stderr)  # fmt: skip


def install(server: str | None = None, token: str | None = None) -> None:
    """For plain Python: an uncaught exception prints its traceback as before, then the match."""
    global _explainer
    _explainer = Explainer(server, token)
    previous = sys.excepthook

    def hook(etype, value, tb) -> None:
        previous(etype, value, tb)  # the original traceback, exactly as it would be
        _report(etype, value, tb, lambda a: print(as_text(a, explainer()), file=sys.stderr))

    sys.excepthook = hook


def load_ipython_extension(ip) -> None:
    """`%load_ext pitfalls`: after IPython shows a cell's traceback, the match below it."""
    explainer()  # starts preparing the local matcher now, not at the first error

    def handler(shell, etype, value, tb, tb_offset=None):
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)

        def show(answer: dict) -> None:
            from IPython.display import display

            bundle = {
                "text/plain": as_text(answer, explainer()),
                "text/html": as_html(answer, explainer()),
            }
            display(bundle, raw=True)

        _report(etype, value, tb, show)
        return None

    ip.set_custom_exc((Exception,), handler)


def unload_ipython_extension(ip) -> None:
    ip.set_custom_exc((), None)
