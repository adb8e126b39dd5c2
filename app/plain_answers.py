"""The answer's shapes (app.answer_shapes) as plain classes, for the CLI's short commands.

A `pitfalls match` answered from the data dir's cache (app.local_cache) builds its answer with
these instead of the pydantic models: the same fields in the same order, the same defaults, the
same conversions a model applies to what it is given (a tuple for a list field, and back, an int
for a float), and `model_dump()` gives the dict the model would. tests/test_cli_speed.py holds
each class to its model, field by field, and the answers to the database's answers.
"""

from collections.abc import Callable
from typing import Any, ClassVar


def entry_url(entry_id: str) -> str:
    return f"/entries/{entry_id}"


def _same(value: Any) -> Any:
    return value


def _float(value: Any) -> Any:
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _list(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


_NO_DEFAULT = object()


class PlainShape:
    """A record with the fields of FIELDS: (name, conversion, default or a factory)."""

    FIELDS: ClassVar[tuple[tuple[str, Callable[[Any], Any], Any], ...]] = ()

    def __init__(self, **values: Any) -> None:
        for name, convert, default in self.FIELDS:
            if name in values:
                value = values.pop(name)
            elif default is _NO_DEFAULT:
                raise TypeError(f"{type(self).__name__} needs {name}")
            else:
                value = default() if callable(default) else default
            setattr(self, name, convert(value))
        if values:
            raise TypeError(f"{type(self).__name__} has no field {sorted(values)[0]}")

    def model_dump(self) -> dict[str, Any]:
        return {name: _dumped(getattr(self, name)) for name, _, _ in self.FIELDS}


def _dumped(value: Any) -> Any:
    if isinstance(value, PlainShape):
        return value.model_dump()
    if isinstance(value, list):
        return [_dumped(item) for item in value]
    if isinstance(value, tuple):
        return tuple(_dumped(item) for item in value)
    if isinstance(value, dict):
        return {key: _dumped(item) for key, item in value.items()}
    return value


class SnippetOut(PlainShape):
    FIELDS = (
        ("role", _same, _NO_DEFAULT),
        ("options", _same, _NO_DEFAULT),
        ("code", _same, _NO_DEFAULT),
        ("line", _same, _NO_DEFAULT),
    )


class OutcomeStats(PlainShape):
    FIELDS = (
        ("worked", _same, 0),
        ("reports", _same, 0),
        ("failed_notes", _list, list),
    )


class FrameOut(PlainShape):
    FIELDS = (
        ("file", _same, _NO_DEFAULT),
        ("line", _same, _NO_DEFAULT),
        ("function", _same, _NO_DEFAULT),
        ("code", _same, _NO_DEFAULT),
        ("library", _same, _NO_DEFAULT),
    )


class ExceptionOut(PlainShape):
    FIELDS = (
        ("type", _same, _NO_DEFAULT),
        ("qualified_type", _same, _NO_DEFAULT),
        ("message", _same, _NO_DEFAULT),
        ("link", _same, _NO_DEFAULT),
        ("origin", _same, _NO_DEFAULT),
        ("frames", _list, _NO_DEFAULT),
        ("ranks", _list, list),
    )


class WarningOut(PlainShape):
    FIELDS = (
        ("category", _same, _NO_DEFAULT),
        ("message", _same, _NO_DEFAULT),
        ("file", _same, _NO_DEFAULT),
        ("line", _same, _NO_DEFAULT),
    )


class ParsedOut(PlainShape):
    FIELDS = (
        ("exceptions", _list, _NO_DEFAULT),
        ("warnings", _list, _NO_DEFAULT),
        ("final", _same, _NO_DEFAULT),
        ("user_frame", _same, _NO_DEFAULT),
        ("python_version", _same, _NO_DEFAULT),
        ("torch_version", _same, _NO_DEFAULT),
        ("normalized_message", _same, _NO_DEFAULT),
        ("prefixes", _list, _NO_DEFAULT),
    )


class WhyOut(PlainShape):
    FIELDS = (
        ("signature", _same, _NO_DEFAULT),
        ("example", _same, _NO_DEFAULT),
        ("exception", _same, _NO_DEFAULT),
        ("matched_in", _same, _NO_DEFAULT),
        ("subject", _same, _NO_DEFAULT),
        ("span", _tuple, _NO_DEFAULT),
        ("matched_text", _same, _NO_DEFAULT),
    )


class MatchOut(PlainShape):
    FIELDS = (
        ("id", _same, _NO_DEFAULT),
        ("title", _same, _NO_DEFAULT),
        ("summary", _same, _NO_DEFAULT),
        ("kind", _same, _NO_DEFAULT),
        ("url", _same, _NO_DEFAULT),
        ("tier", _same, _NO_DEFAULT),
        ("confidence", _float, _NO_DEFAULT),
        ("why", _same, _NO_DEFAULT),
        ("likely_words", _list, list),
        ("captures", _same, _NO_DEFAULT),
        ("fix_markdown", _same, _NO_DEFAULT),
        ("fix_html", _same, _NO_DEFAULT),
        ("snippets", _list, _NO_DEFAULT),
        ("outcomes", _same, OutcomeStats),
        ("outcomes_all", _same, OutcomeStats),
        ("version_note", _same, None),
    )


class RelatedOut(PlainShape):
    FIELDS = (
        ("id", _same, _NO_DEFAULT),
        ("title", _same, _NO_DEFAULT),
        ("summary", _same, _NO_DEFAULT),
        ("url", _same, _NO_DEFAULT),
        ("score", _float, _NO_DEFAULT),
    )


class Answer(PlainShape):
    FIELDS = (
        ("known", _same, _NO_DEFAULT),
        ("fingerprint", _same, None),
        ("answer_token", _same, None),
        ("message", _same, _NO_DEFAULT),
        ("matches", _list, _NO_DEFAULT),
        ("related", _list, _NO_DEFAULT),
        ("foreign", _same, None),
        ("parsed", _same, _NO_DEFAULT),
        ("change", _same, None),
    )


SHAPES = (
    SnippetOut,
    OutcomeStats,
    FrameOut,
    ExceptionOut,
    WarningOut,
    ParsedOut,
    WhyOut,
    MatchOut,
    RelatedOut,
    Answer,
)
