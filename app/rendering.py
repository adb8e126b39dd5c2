"""Markdown to HTML (raw HTML off, Pygments highlighting, heading anchors, tables), and the
runnable snippets and plain text that other parts need, taken from the same parse.
"""

import re
from dataclasses import dataclass, field
from functools import cache

from markdown_it import MarkdownIt
from markdown_it.rules_core import StateCore
from markdown_it.token import Token
from mdit_py_plugins.anchors.index import slugify

SNIPPET_ROLES = ("repro", "fix", "demo")
SNIPPET_OPTIONS = ("requires", "timeout")
MAX_SNIPPET_TIMEOUT_S = 600
_SECONDS = re.compile(r"[0-9]+(?:\.[0-9]+)?")
_MODULE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True)
class SnippetBlock:
    """A fenced block tagged `python repro|fix|demo [key=value ...]`."""

    role: str
    options: dict[str, str]
    code: str
    line: int  # 0-based line of the opening fence within the rendered Markdown
    option_problems: tuple[str, ...] = ()  # what is wrong with the options, for the checker


@dataclass(frozen=True)
class RenderedBody:
    html: str
    snippets: list[SnippetBlock]
    headings: list[str]
    prose: str  # text outside code blocks, inline code included: what stemming applies to
    code: str  # fenced blocks and inline code: identifiers, searched unstemmed


@cache
def _html_formatter():
    # Pygments is imported by the first page rendered: a check renders none.
    from pygments.formatters import HtmlFormatter

    return HtmlFormatter(nowrap=True)


def _highlight(code: str, lang: str, _attrs: str) -> str:
    if not lang:
        return ""
    from pygments import highlight
    from pygments.lexers import get_lexer_by_name
    from pygments.util import ClassNotFound

    try:
        lexer = get_lexer_by_name(lang)
    except ClassNotFound:
        return ""  # markdown-it then escapes the code itself
    return highlight(code, lexer, _html_formatter())


def _unique_slug(slug: str, taken: set[str], next_suffix: dict[str, int]) -> str:
    """`slug`, else the first free `slug-1`, `slug-2`, ...: the ids mdit-py-plugins' anchors
    give, found in linear time (theirs retries every suffix: 20k equal headings took 150 s)."""
    if slug in taken:
        number = next_suffix.get(slug, 1)
        while f"{slug}-{number}" in taken:
            number += 1
        next_suffix[slug] = number + 1
        slug = f"{slug}-{number}"
    taken.add(slug)
    return slug


def _anchors(state: StateCore) -> None:
    """An id and a `#` permalink on every h2-h4, as the anchors plugin's options here did."""
    taken: set[str] = set()
    next_suffix: dict[str, int] = {}
    for index, token in enumerate(state.tokens):
        if token.type != "heading_open" or token.tag not in ("h2", "h3", "h4"):
            continue
        inline = state.tokens[index + 1]
        children = inline.children if inline.children is not None else []
        title = "".join(c.content for c in children if c.type in ("text", "code_inline"))
        slug = _unique_slug(slugify(title), taken, next_suffix)
        token.attrSet("id", slug)
        link_open = Token("link_open", "a", 1)
        link_open.attrSet("class", "header-anchor")
        link_open.attrSet("href", f"#{slug}")
        children.extend(
            [
                Token("text", "", 0, content=" "),
                link_open,
                Token("html_block", "", 0, content="#"),
                Token("link_close", "a", -1),
            ]
        )
        inline.children = children


@cache
def _markdown() -> MarkdownIt:
    md = MarkdownIt("commonmark", {"html": False, "highlight": _highlight, "linkify": False})
    md.enable("table")
    md.core.ruler.push("anchor", _anchors)
    return md


def _requires_problems(value: str) -> list[str]:
    problems = []
    items = value.split(",")
    for item in items:
        name, equals, count = item.partition("=")
        if name == "gpus":
            if not (equals and count.isascii() and count.isdigit() and int(count) >= 1):
                problems.append(f"requires {item!r}: write gpus=N with N a whole number from 1")
        elif equals or not (name in ("cuda", "no-cuda", "mps") or _MODULE_NAME.fullmatch(name)):
            problems.append(
                f"requires {item!r} is not cuda, no-cuda, mps, gpus=N or an importable package name"
            )
    if "cuda" in items and "no-cuda" in items:
        problems.append("requires both cuda and no-cuda: the snippet could never run")
    return problems


def _option_problems(key: str, value: str | None) -> list[str]:
    """What is wrong with one `key=value` of a snippet's info string (None: no `=`)."""
    if key not in SNIPPET_OPTIONS:
        hint = "; it goes inside requires, e.g. requires=cuda,gpus=2"
        return [
            f"unknown snippet option {key!r} (known: {', '.join(SNIPPET_OPTIONS)})"
            + (hint if key in ("cuda", "no-cuda", "gpus") else "")
        ]
    if not value:
        example = "requires=cuda,numpy" if key == "requires" else "timeout=60"
        return [f"snippet option {key} needs a value, e.g. {example}"]
    if key == "timeout":
        if not (_SECONDS.fullmatch(value) and 1 <= float(value) <= MAX_SNIPPET_TIMEOUT_S):
            return [
                f"timeout={value} must be a number of seconds from 1 to {MAX_SNIPPET_TIMEOUT_S}"
            ]
        return []
    return _requires_problems(value)


def parse_snippet_info(info: str) -> tuple[str, dict[str, str], tuple[str, ...]] | None:
    """`python repro requires=cuda timeout=60` -> ("repro", {...}, problems with the options)."""
    words = info.split()
    if len(words) < 2 or words[0] != "python" or words[1] not in SNIPPET_ROLES:
        return None
    options: dict[str, str] = {}
    problems: list[str] = []
    for word in words[2:]:
        key, equals, value = word.partition("=")
        if key in options:
            problems.append(f"snippet option {key!r} is given twice")
        options[key] = value or "true"
        problems += _option_problems(key, value if equals else None)
    return words[1], options, tuple(problems)


def _inline_text(token: Token) -> tuple[str, str]:
    prose, code = [], []
    for child in token.children or []:
        if child.type in ("text", "code_inline"):
            prose.append(child.content)
        if child.type == "code_inline":
            code.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            prose.append(" ")
    return "".join(prose), " ".join(code)


@dataclass
class _Collected:
    snippets: list[SnippetBlock] = field(default_factory=list)
    headings: list[str] = field(default_factory=list)
    prose: list[str] = field(default_factory=list)
    code: list[str] = field(default_factory=list)


def _collect(tokens: list[Token]) -> _Collected:
    """One walk over the parsed tokens for snippets, headings, prose and code."""
    found = _Collected()
    for index, token in enumerate(tokens):
        if token.type == "inline":
            prose, code = _inline_text(token)
            found.prose.append(prose)
            found.code.append(code)
            if index and tokens[index - 1].type == "heading_open":
                found.headings.append(prose.strip())
        elif token.type in ("fence", "code_block"):
            found.code.append(token.content)
            parsed = parse_snippet_info(token.info) if token.type == "fence" else None
            if parsed:
                role, options, problems = parsed
                line = token.map[0] if token.map else 0
                found.snippets.append(SnippetBlock(role, options, token.content, line, problems))
    return found


def _join(parts: list[str]) -> str:
    return "\n".join(part for part in parts if part)


def render_body(markdown: str, html: bool = True) -> RenderedBody:
    """`html=False`: everything but the HTML (left empty), for a check that shows no page:
    highlighting the code blocks is most of what rendering costs."""
    md = _markdown()
    tokens = md.parse(markdown)
    found = _collect(tokens)
    return RenderedBody(
        html=md.renderer.render(tokens, md.options, {}) if html else "",
        snippets=found.snippets,
        headings=found.headings,
        prose=_join(found.prose),
        code=_join(found.code),
    )


@dataclass(frozen=True)
class BodyText:
    prose: str
    code: str


def extract_text(markdown: str) -> BodyText:
    """Prose and code of a body without rendering HTML: what the search index needs."""
    found = _collect(_markdown().parse(markdown))
    return BodyText(_join(found.prose), _join(found.code))


def markdown_section(markdown: str, heading: str) -> str:
    """The text under `## heading` up to the next heading of the same or a higher level."""
    lines = markdown.split("\n")
    out: list[str] = []
    inside = False
    fence = False
    for line in lines:
        if line.lstrip().startswith(("```", "~~~")):
            fence = not fence
        if not fence and line.startswith("## "):
            if inside:
                break
            inside = line[3:].strip().lower() == heading.lower()
            continue
        if inside:
            out.append(line)
    return "\n".join(out).strip()
