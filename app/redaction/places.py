"""Redaction of places: URLs, IP and MAC addresses, paths and host names (app/redaction.py).

Paths and hosts go by allow-list (app/redaction/lists.py): a library path (site-packages, the
standard library, torch's own sources) keeps its library part and a public host stays; every
other path becomes `<path>/file.py` (the base name kept, no folder) and every other host
`<host>`. The patterns are RE2, linear on any input; the callbacks look at one match at a time.
"""

import ipaddress
import re
from collections.abc import Callable
from functools import cache

import re2

from app.redaction.lists import (
    ALLOWED_HOST_SUFFIXES,
    ALLOWED_HOSTS,
    CODE_ROOTS,
    HOST_TLDS,
    NODE_WORDS,
    SYSTEM_PATH_PREFIXES,
)

Rule = tuple[re2._Regexp, str | Callable[[re2._Match], str]]


@cache
def url_rules() -> list[Rule]:
    return [(_URL, _redact_url)]


@cache
def address_and_path_rules() -> list[Rule]:
    return [
        (_IPV6_CANDIDATE, _redact_ipv6),
        (_IPV4, _redact_ipv4),
        (_MAC, "<mac>"),
        (_QUOTED_PATH, _redact_quoted_path),
        (_WINDOWS_PATH, _redact_windows_path),
        (_UNIX_PATH, _redact_unix_path),
    ]


@cache
def host_rules() -> list[Rule]:
    return [
        (_DOTTED_NAME, _redact_dotted_name),
        (_HOST_AFTER_WORD, _redact_host_after_word),
        (_HOST_PORT, _redact_host_port),
        (_HYPHENATED, _redact_hyphenated),
        (_NODE_WORD, "<host>"),
    ]


# --- URLs ----------------------------------------------------------------------------------

_URL = re2.compile(
    r"(?i)\b([a-z][a-z0-9+.\-]{1,20}://)([^\s/?#@'\"<>]*@)?"
    r"(\[[0-9a-f:.%a-z]+\]|[^\s/?#:'\"<>\[\]@]+)(:[0-9]{1,5})?"
    r"([^\s?#'\"<>]*)(\?[^\s#'\"<>]*)?(#[^\s'\"<>]*)?"
)
_QUERY_VALUE = re2.compile(r"([?&;#][^=&;#\s]*=)[^&;#\s]*")


def _redact_url(match: re2._Match) -> str:
    scheme, userinfo, host, port, path, query, fragment = (g or "" for g in match.groups())
    if userinfo:
        userinfo = "<user>:<secret>@" if ":" in userinfo else "<user>@"
    path = re2.sub(r"/~[^/]+", "/~<user>", path)
    return (
        scheme
        + userinfo
        + redact_host(host)
        + port
        + path
        + _QUERY_VALUE.sub(r"\1<secret>", query)
        + _QUERY_VALUE.sub(r"\1<secret>", fragment)
    )


def redact_host(host: str) -> str:
    bare = host.strip("[]").lower().rstrip(".")
    if is_allowed_host(bare):
        return host
    try:
        address = ipaddress.ip_address(bare.split("%")[0])
    except ValueError:
        return "<host>"
    return host if address.is_loopback or address.is_unspecified else "<ip>"


def is_allowed_host(host: str) -> bool:
    return host in ALLOWED_HOSTS or any(host.endswith("." + s) for s in ALLOWED_HOST_SUFFIXES)


# --- addresses -----------------------------------------------------------------------------

_IPV6_CANDIDATE = re2.compile(
    r"(?i)\[?[0-9a-f]{0,4}(?::[0-9a-f]{0,4}){2,7}(?:(?::|\.)[0-9]{1,3}){0,4}(?:%[a-z0-9_.]+)?\]?"
)
_IPV4 = re2.compile(
    r"\b(?:25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])(?:\.(?:25[0-5]|2[0-4][0-9]|1?[0-9]?[0-9])){3}\b"
)
_MAC = re2.compile(r"(?i)\b[0-9a-f]{2}(?:[:\-][0-9a-f]{2}){5}\b")


def _redact_ipv6(match: re2._Match) -> str:
    found, text = match.group(0), match.string
    before = text[match.start() - 1] if match.start() > 0 else " "
    after = text[match.end()] if match.end() < len(text) else " "
    if before.isalnum() or before in "_:" or after.isalnum() or after in "_":
        return found  # `c10::cuda`, `torch::jit`: C++ names, not addresses
    try:
        address = ipaddress.IPv6Address(found.strip("[]").split("%")[0])
    except ValueError:
        return found
    return found if address.is_loopback or address.is_unspecified else "<ip>"


def _redact_ipv4(match: re2._Match) -> str:
    found, text = match.group(0), match.string
    before = text[match.start() - 1] if match.start() > 0 else " "
    after = text[match.end() : match.end() + 2]
    if before == "." or (after[:1] == "." and after[1:].isdigit()):
        return found  # `clang-1316.0.21.2.5`: a longer version number, not an address
    return found if found.startswith("127.") or found == "0.0.0.0" else "<ip>"


# --- paths ---------------------------------------------------------------------------------

_PATH_CHARS = r"[^\s'\"():,;<>|*?\[\]{}]"
_QUOTED_PATH = re2.compile(
    r"""(["'])((?:file://)?(?:~[A-Za-z0-9_.\-]*/|/|[A-Za-z]:[\\/]|\\\\)[^"'\n<>]*)(["'])"""
)
_UNIX_PATH = re2.compile(
    r"(^|[\s(\[=,:;\"'])((?:file://)?(?:~[A-Za-z0-9_.\-]*|\.\.?)?(?:/" + _PATH_CHARS + r"+){1,}/?)"
)
_WINDOWS_PATH = re2.compile(
    r"(?i)(^|[^A-Za-z0-9_])((?:[a-z]:|\\\\[^\\\s'\"]+)(?:\\{1,2}|/)(?:[^\\/\s'\"<>|:*?]+(?:\\{1,2}|/))*"
    r"[^\\/\s'\"<>|:*?]*)"
)
_LIBRARY_MARKERS = re.compile(  # tried on a path of at most a few hundred characters: linear
    r"(?i)(?:^|[\\/])((?:site|dist)-packages[\\/].*)$"
    r"|(?:^|[\\/])(lib[\\/]python[0-9][0-9.]*[\\/].*)$"
    r"|(?:^|[\\/])((?:torch|aten|c10|caffe2|torchvision|torchaudio|functorch|third_party"
    r"|torch_extensions|huggingface)[\\/].*)$"
)


def _redact_path(path: str) -> str:
    if path.startswith("<") or path in {"/", "//"}:
        return path
    prefix = "file://" if path.startswith("file://") else ""
    path = path.removeprefix(prefix)
    if not path.startswith(("~", ".")) and path.count("/") + path.count("\\") < 2:
        return prefix + path  # `/data`, `C:\`: a top folder names no one
    lowered = path.lower().replace("\\", "/")
    if lowered.startswith(SYSTEM_PATH_PREFIXES) and not lowered.startswith("/usr/home/"):
        return prefix + path
    sep = "\\" if "\\" in path and "/" not in path else "/"
    # The last library marker wins: a conda env's site-packages holds torch/, not the reverse.
    kept = _library_tail(path)
    if kept is not None:
        return f"{prefix}<path>{sep}{kept}"
    base = re.split(r"[\\/]", path.rstrip("\\/"))[-1]
    if path.endswith(("/", "\\")):
        return f"{prefix}<path>{sep}"
    if "." in base.lstrip(".") or base.startswith("."):
        return f"{prefix}<path>{sep}{base}"
    return f"{prefix}<path>"


def _library_tail(path: str) -> str | None:
    for marker in ("site-packages", "dist-packages"):
        at = path.lower().rfind(marker)
        if at > 0 and path[at - 1] in "\\/":
            return path[at:]
    found = _LIBRARY_MARKERS.search(path[-1000:])
    if found:
        return next(g for g in found.groups() if g)
    return None


def _redact_quoted_path(match: re2._Match) -> str:
    open_, path, close = match.groups()
    return open_ + _redact_path(path) + close


def _redact_unix_path(match: re2._Match) -> str:
    lead, path = match.groups()
    if lead == ":" and path.startswith("//"):
        return match.group(0)  # the rest of a URL the URL rule has read
    if not path.startswith(("/", "file://")) and not path.startswith("~") and "/" not in path[3:]:
        return match.group(0)  # `./x`, `../y`: one step from somewhere unnamed
    return lead + _redact_path(path)


def _redact_windows_path(match: re2._Match) -> str:
    lead, path = match.groups()
    return lead + _redact_path(path)


# --- hosts ---------------------------------------------------------------------------------

_DOTTED_NAME = re2.compile(
    r"(?i)\b[a-z0-9](?:[a-z0-9\-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9\-]{0,61}[a-z0-9])?)+\b"
)
_HYPHENATED = re2.compile(r"(?i)\b[a-z][a-z0-9]*(?:-[a-z0-9]+)+\b")
_NODE_WORD = re2.compile(
    r"(?i)\b(?:node|nodes|dgx|nid|cn|gn|compute|login|host|srv|server|hpc|worker|ip)[0-9]{1,6}\b"
)
_HOST_AFTER_WORD = re2.compile(
    r"(?i)\b(hostname|host|node|nodename|master_addr|master|server|machine|instance)"
    r"([ \t]*[=:][ \t]*|[ \t]+)([\"']?)([a-z0-9][a-z0-9\-]*(?:\.[a-z0-9\-]+)*)"
)
_HOST_PORT = re2.compile(r"(?i)(^|[^a-z0-9_.\-/<])([a-z][a-z0-9\-]*)(:[0-9]{2,5})\b")
_NOT_HOSTS = frozenset({"cuda", "mps", "xpu", "npu", "hpu", "cpu", "meta", "line", "port", "rank"})


def _redact_dotted_name(match: re2._Match) -> str:
    name, text = match.group(0), match.string
    labels = name.lower().split(".")
    after = text[match.end()] if match.end() < len(text) else " "
    before = text[match.start() - 1] if match.start() > 0 else " "
    if is_allowed_host(name.lower()) or labels[-1] == "localhost":
        return name
    if labels[-1] not in HOST_TLDS or labels[0] in CODE_ROOTS or all(x.isdigit() for x in labels):
        return name
    continues = after == "." and text[match.end() + 1 : match.end() + 2].isalnum()
    if after == "(" or before in "._/\\" or continues:
        return name  # a call, or part of a longer dotted name or a path
    return "<host>"


def _redact_hyphenated(match: re2._Match) -> str:
    name = match.group(0)
    return "<host>" if _looks_like_node(name) else name


def _looks_like_node(name: str) -> bool:
    parts = name.lower().split("-")
    if not any(c.isdigit() for c in name):
        return False
    if parts[0] == "ip" and len(parts) == 5 and all(p.isdigit() for p in parts[1:]):
        return True
    return any(p.rstrip("0123456789") in NODE_WORDS for p in parts)


def _redact_host_after_word(match: re2._Match) -> str:
    word, sep, quote, value = match.groups()
    if not value.strip("0123456789.") or not any(c.isdigit() or c in "-." for c in value):
        return match.group(0)  # `node 3 of 4`, `server 2.3.1`, `host memory`
    if value.lower().split(".")[0] in CODE_ROOTS:
        return match.group(0)  # `same machine: torch.distributed…`
    if _IPV4.fullmatch(value):
        return f"{word}{sep}{quote}{redact_host(value)}"
    if redact_host(value) == value:
        return match.group(0)
    if "." in value and value.lower().split(".")[-1] in {"py", "pt", "pth", "so", "cpp", "h"}:
        return match.group(0)
    return f"{word}{sep}{quote}<host>"


def _redact_host_port(match: re2._Match) -> str:
    lead, name, port = match.groups()
    if name.lower() in _NOT_HOSTS or name.lower() == "localhost" or name.isdigit():
        return match.group(0)
    if not any(c.isdigit() or c == "-" for c in name):
        return match.group(0)
    return f"{lead}<host>{port}"
