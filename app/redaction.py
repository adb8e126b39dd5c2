"""Redaction: what identifies people, machines and secrets taken out of an error text.

Used wherever a paste's text is kept (the inbox of unmatched errors). Two layers:
- our own rules, in RE2 (linear time on any input), for what secret scanners do not cover
  (paths, hosts, URLs, addresses, user names) and for the token formats we know;
- Yelp's detect-secrets plugins, a maintained rule set, as a second pair of eyes for secrets.
  Their regexes are Python `re` and some backtrack (IbmCloudIamDetector takes 40 s on a line of
  2,000 spaces), so they read only short windows of the text with spaces collapsed, and only the
  first LIBRARY_SCAN_CHARS of it: a fixed cost on top of the linear RE2 layer.

Paths and hosts go by allow-list: library paths (site-packages, the standard library, torch's
own sources) and well-known public hosts stay; every other path becomes `<path>/file.py` (the
base name kept, no folder) and every other host `<host>`. What the matcher needs stays: the
exception type, the message's wording, numbers and shapes, hex addresses, torch frames.
The input is capped (max_chars), cut at a space so no half of a secret is left behind.
"""

import ipaddress
import itertools
import math
import re
from collections.abc import Callable, Iterator
from functools import cache

import re2

from app.redaction_lists import (
    ALLOWED_HOST_SUFFIXES,
    ALLOWED_HOSTS,
    CODE_ROOTS,
    HOST_TLDS,
    NODE_WORDS,
    SYSTEM_PATH_PREFIXES,
    words,
)

MAX_REDACT_CHARS = 65_536
LIBRARY_SCAN_CHARS = 16_384  # the library's share: every kept message is shorter than this
LIBRARY_WINDOW = 256  # the library's backtracking grows with a window's length, not the text's

Rule = tuple[re2._Regexp, str | Callable[[re2._Match], str]]


def redact(text: str, *, max_chars: int = MAX_REDACT_CHARS) -> str:
    """`login as bob@acme.io to 10.0.0.5 failed` -> `login as <email> to <ip> failed`."""
    text = cap_at_space(text.replace("\x00", ""), max_chars=max_chars)
    for pattern, replacement in _rules_before_library():
        text = pattern.sub(replacement, text)
    text = _redact_library_findings(text)
    for pattern, replacement in _rules_after_library():
        text = pattern.sub(replacement, text)
    return text


def cap_at_space(text: str, *, max_chars: int) -> str:
    """At most max_chars of the text, cut at a space: a token cut in two could be half a key."""
    if len(text) <= max_chars:
        return text
    cut = text[:max_chars]
    space = max(cut.rfind(" "), cut.rfind("\n"), cut.rfind("\t"))
    return cut[:space] if space > 0 else ""


# --- secrets in known shapes -------------------------------------------------------------

_SECRET_FORMATS = "|".join(
    [
        r"\b(?:A3T[A-Z0-9]|AKIA|ASIA|ABIA|ACCA|AGPA|AIDA|AIPA|ANPA|ANVA|APKA|AROA)[A-Z0-9]{16}\b",
        r"\bAIza[0-9A-Za-z_\-]{35}",  # Google API key
        r"\bya29\.[0-9A-Za-z_\-]{20,}",  # Google OAuth access token
        r"\bGOCSPX-[0-9A-Za-z_\-]{20,}",  # Google OAuth client secret
        r"\b(?:ghp|gho|ghu|ghs|ghr)_[A-Za-z0-9]{30,}",  # GitHub
        r"\bgithub_pat_[A-Za-z0-9_]{22,}",
        r"\bgl(?:pat|dt|rt|ptt|ft|imt|oas|cbt|soat|agent|ffct)-[A-Za-z0-9_\-]{20,}",  # GitLab
        r"\bxox[abposre]-[A-Za-z0-9\-]{10,}",  # Slack
        r"\bxapp-[0-9]-[A-Za-z0-9\-]{10,}",
        r"\b(?:sk|rk|pk)_(?:live|test)_[A-Za-z0-9]{10,}",  # Stripe
        r"\bwhsec_[A-Za-z0-9]{20,}",
        r"\bsk-[A-Za-z0-9_\-]{20,}",  # OpenAI, Anthropic (sk-ant-), DeepSeek
        r"\bhf_[A-Za-z0-9]{30,}",  # Hugging Face
        r"\bapi_org_[A-Za-z0-9]{30,}",
        r"\bnpm_[A-Za-z0-9]{36}",
        r"\bpypi-[A-Za-z0-9_\-]{50,}",
        r"\bSG\.[A-Za-z0-9_\-]{20,}\.[A-Za-z0-9_\-]{20,}",  # SendGrid
        r"\b[0-9a-f]{32}-us[0-9]{1,2}\b",  # Mailchimp
        r"\b[0-9]{8,10}:AA[A-Za-z0-9_\-]{33}",  # Telegram bot
        r"\b[MN][A-Za-z0-9]{23,25}\.[A-Za-z0-9_\-]{6}\.[A-Za-z0-9_\-]{27,38}",  # Discord bot
        r"\bshp(?:at|ca|pa|ss)_[a-fA-F0-9]{32}",  # Shopify
        r"\bdo[opr]_v1_[a-f0-9]{64}",  # DigitalOcean
        r"\bdapi[a-f0-9]{32}(?:-[0-9])?",  # Databricks
        r"\br8_[A-Za-z0-9]{30,}",  # Replicate
        r"\bgsk_[A-Za-z0-9]{40,}",  # Groq
        r"\bpft_[A-Za-z0-9_\-]{8,}",  # this app's own API tokens
        r"\b[A-Za-z0-9_~.\-]{3}[0-9]Q~[A-Za-z0-9_~.\-]{31,34}",  # Azure AD client secret
        r"\b(?:SK|AC)[0-9a-f]{32}\b",  # Twilio
        r"\beyJ[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]{5,}\.[A-Za-z0-9_\-]*",  # JWT
        r"\b[0-9a-fA-F]{32,}\b",  # hashes, W&B keys (a hex address has 16 digits at most)
    ]
)

_PRIVATE_KEY = (
    r"-----BEGIN[ A-Z0-9]*PRIVATE KEY[ A-Z]*-----(?s:.*?)"
    r"(?:-----END[ A-Z0-9]*PRIVATE KEY[ A-Z]*-----|\z)"
)

# A key named like a secret, then =, :, := or =>, then its value (quoted or up to a delimiter).
# The name must hold a secret word, or a `Type: password=…` line would be read as the pair
# (`Type`, `password=…`) and the real one skipped.
_PAIR = re2.compile(
    r"""(?i)(["']?)\b([A-Za-z0-9_.\-]{0,40}"""
    r"""(?:pass|pwd|pword|secret|token|key|auth|credential|cookie|sig|sas|dsn|pat|contrase)"""
    r"""[A-Za-z0-9_.\-]{0,40})(["']?)(\s*(?:=>|:=|=|:)\s*)"""
    r"""("[^"\n]*"|'[^'\n]*'|[^\s"',;&)}\]]+)"""
)
_SECRET_WORDS = words(
    "password passwd pwd pass passphrase pword secret secrets token tokens apikey credential "
    "credentials auth cookie signature sig sas dsn pat contraseña contrasena"
)
_NOT_SECRET_ENDINGS = words(
    "error warning exception id type name scheme algorithm method mode file path dir format "
    "version kind header length len size url"
)
_COUNTS = words("num n count max min size length len limit total per index idx ids")
_NAME_PARTS = re2.compile(r"[A-Z]+(?:[a-z0-9]+)?|[a-z0-9]+")


def _is_secret_name(name: str, *, quoted: bool) -> bool:
    parts = [p.lower() for p in _NAME_PARTS.findall(name.replace("-", "_").replace(".", "_"))]
    if not parts or parts[-1] in _NOT_SECRET_ENDINGS or _COUNTS.intersection(parts):
        return False
    if _SECRET_WORDS.intersection(parts) or "api_key" in name.lower():
        return True
    # `key` alone is a common word (`key: 'conv.weight'`): secret only as part of a longer name
    # (api_key, AccountKey, SSH_KEY) or as a JSON key (`"key": "…"`).
    return "key" in parts and (len(parts) > 1 or quoted)


def _redact_pair(match: re2._Match) -> str:
    quote, name, close, sep, value = match.groups()
    if not _is_secret_name(name, quoted=bool(quote and close)):
        return match.group(0)
    value_quoted = value[:1] in "\"'" and len(value) >= 2
    if ":" in sep and "=" not in sep and not value_quoted and not _looks_like_secret_value(value):
        return match.group(0)  # `token: expected an int`: only a value with a digit is a secret
    if ("<" in value and ">" in value) or "(" in value or "[" in value:
        return match.group(0)  # a placeholder, or code: `tokens = tokens.reshape(-1, …`
    hidden = f"{value[0]}<secret>{value[-1]}" if value_quoted else "<secret>"
    return f"{quote}{name}{close}{sep}{hidden}"


def _looks_like_secret_value(value: str) -> bool:
    return any(c.isdigit() for c in value) and any(c.isalpha() for c in value)


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
        + _redact_host(host)
        + port
        + path
        + _QUERY_VALUE.sub(r"\1<secret>", query)
        + _QUERY_VALUE.sub(r"\1<secret>", fragment)
    )


def _redact_host(host: str) -> str:
    bare = host.strip("[]").lower().rstrip(".")
    if _is_allowed_host(bare):
        return host
    try:
        address = ipaddress.ip_address(bare.split("%")[0])
    except ValueError:
        return "<host>"
    return host if address.is_loopback or address.is_unspecified else "<ip>"


def _is_allowed_host(host: str) -> bool:
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
    if _is_allowed_host(name.lower()) or labels[-1] == "localhost":
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
    if value.isdigit() or not any(c.isdigit() or c in "-." for c in value):
        return match.group(0)  # `node 3 of 4`, `host memory`
    if value.lower().split(".")[0] in CODE_ROOTS:
        return match.group(0)  # `same machine: torch.distributed…`
    if _IPV4.fullmatch(value):
        return f"{word}{sep}{quote}{_redact_host(value)}"
    if _redact_host(value) == value:
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


# --- identities ----------------------------------------------------------------------------

_SCP_URL = re2.compile(r"\b([A-Za-z0-9_.\-]+)@([A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)+):([\w.~/\-]+)")
_EMAIL = re2.compile(r"[A-Za-z0-9_.+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)+")
_USER_AT_NODE = re2.compile(r"\b[A-Za-z0-9_.\-]+@([A-Za-z][A-Za-z0-9\-]*)\b")


def _redact_scp_url(match: re2._Match) -> str:
    _user, host, _path = match.groups()
    return f"<user>@{_redact_host(host)}:<path>"  # a repository's name names its project


def _redact_user_at_node(match: re2._Match) -> str:
    node = match.group(1)
    if not any(c.isdigit() or c == "-" for c in node):
        return match.group(0)
    return "<user>@<host>"


def _redact_logged_in_as(match: re2._Match) -> str:
    said, team = match.groups()
    return f"{said} <user>" + (" (<user>)" if team else "")


# --- long random strings -------------------------------------------------------------------

_LONG_TOKEN = re2.compile(r"[A-Za-z0-9+/_\-]{20,}={0,2}")


def _redact_long_token(match: re2._Match) -> str:
    token = match.group(0)
    return "<secret>" if looks_random(token) else token


def looks_random(token: str) -> bool:
    """True for a key-like string: mixed letters and digits that change class like noise."""
    core = token.strip("=_-/+")
    if core.startswith("_Z") or token.startswith("_Z") or len(core) < 20:
        return False  # `_ZN3c105ErrorC2E…`: a mangled C++ name in a frame
    alnum = [c for c in core if c.isalnum()]
    digits = sum(c.isdigit() for c in alnum)
    letters = len(alnum) - digits
    if len(alnum) < 16 or digits < 2 or letters < 4:
        return False
    # Keys are long runs; names are short words joined (`ipython-input-3-4e70c7e235c4`,
    # `cu12torch2.4cxx11abiFALSE-cp39`), and a short all-hex run is an id, not a key.
    longest = max(re.split(r"[-_/+.]", core), key=len)
    if len(longest) < 16 or all(c in "0123456789abcdefABCDEF" for c in longest):
        return False
    if not any(c.isdigit() for c in longest):
        return False  # `__nvJitLinkComplete_12_4`: a name with a version after it
    kinds = ["d" if c.isdigit() else "u" if c.isupper() else "l" for c in alnum]
    switches = sum(a != b for a, b in itertools.pairwise(kinds)) / (len(kinds) - 1)
    counts: dict[str, int] = {}
    for c in core:
        counts[c] = counts.get(c, 0) + 1
    entropy = -sum(n / len(core) * math.log2(n / len(core)) for n in counts.values())
    return entropy >= 3.5 and switches >= 0.3


# --- the rule lists ------------------------------------------------------------------------


@cache
def _rules_before_library() -> list[Rule]:
    return [
        (re2.compile(_PRIVATE_KEY), "<private key>"),
        (
            re2.compile(
                r"(?i)\b((?:proxy-)?authorization[\"']?\s*[:=]\s*[\"']?)"
                r"((?:bearer|basic|digest|token|bot|negotiate|ntlm|aws4-hmac-sha256)\s+)?[^\n'\"]+"
            ),
            r"\1\2<secret>",
        ),
        (re2.compile(r"(?i)\b((?:set-)?cookie\s*:\s*)[^\n'\"]+"), r"\1<secret>"),
        (re2.compile(r"(?i)\b(bearer)\s+[A-Za-z0-9\-._~+/]{8,}=*"), r"\1 <secret>"),
        (re2.compile(r"(?i)hooks\.slack\.com/services/[A-Za-z0-9/_\-]+"), "<secret>"),
        (re2.compile(r"(?i)discord(?:app)?\.com/api/webhooks/[0-9]+/[A-Za-z0-9_\-]+"), "<secret>"),
        (_URL, _redact_url),
        (_SCP_URL, _redact_scp_url),
        (re2.compile(_SECRET_FORMATS), "<secret>"),
        (
            re2.compile(r"(?i)\b(machine\s+\S+\s+login\s+)\S+(\s+password\s+)\S+"),
            r"\1<user>\2<secret>",
        ),  # a .netrc line
        (
            re2.compile(
                r"(?i)(--?(?:password|passwd|pwd|token|api[_-]?key|secret|access[_-]?key)[ =])"
                r"[\"']?[^\s\"']+[\"']?"
            ),
            r"\1<secret>",
        ),  # a command-line flag
        (re2.compile(r"(?i)\b(AccountName\s*=\s*)[^;\s&]+"), r"\1<user>"),
        (_PAIR, _redact_pair),
        (_EMAIL, "<email>"),
        (_USER_AT_NODE, _redact_user_at_node),
        (
            re2.compile(
                r"(?i)\b(user(?:name)?|role|owner|login|account)\s+([\"'])[^\"'\n]{1,64}([\"'])"
            ),
            r"\1 \2<user>\3",
        ),
        (re2.compile(r"\b([ug]id=[0-9]+)\([^)\s]{1,64}\)"), r"\1(<user>)"),
        (
            re2.compile(
                r"(?i)\b(user(?:name)?|login|owner)([\"']?\s*[=:]\s*[\"']?)[A-Za-z0-9_.\-]+"
            ),
            r"\1\2<user>",
        ),
        (
            re2.compile(
                r"(?i)\b((?:logged|signed) in as:?|login as:?)\s+[A-Za-z0-9_.\-]+"
                r"(\s+\([A-Za-z0-9_.\-]+\))?"
            ),
            _redact_logged_in_as,
        ),
        (
            re2.compile(
                r"\b(USER|LOGNAME|USERNAME|SUDO_USER|SLURM_JOB_USER|HOSTNAME|SLURMD_NODENAME"
                r"|SLURM_NODELIST|SLURM_JOB_NODELIST|NODE_NAME)=(\S+)"
            ),
            r"\1=<user>",
        ),
        (_IPV6_CANDIDATE, _redact_ipv6),
        (_IPV4, _redact_ipv4),
        (_MAC, "<mac>"),
        (_QUOTED_PATH, _redact_quoted_path),
        (_WINDOWS_PATH, _redact_windows_path),
        (_UNIX_PATH, _redact_unix_path),
        (
            re2.compile(r"(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"),
            "<id>",
        ),
    ]


@cache
def _rules_after_library() -> list[Rule]:
    return [
        (_DOTTED_NAME, _redact_dotted_name),
        (_HOST_AFTER_WORD, _redact_host_after_word),
        (_HOST_PORT, _redact_host_port),
        (_HYPHENATED, _redact_hyphenated),
        (_NODE_WORD, "<host>"),
        (_LONG_TOKEN, _redact_long_token),
    ]


# --- the library layer ---------------------------------------------------------------------

_SPACES = re2.compile(r"[ \t\f\v\r]+")
_WIDEN_CHARS = 128  # bounded, so a value repeated many times costs linear time
_EXTEND = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-.+")


_QUOTES_REQUIRED = frozenset({"KeywordDetector", "Base64HighEntropyString", "HexHighEntropyString"})


@cache
def _library_plugins() -> list[object]:
    from detect_secrets.core.plugins.util import get_mapping_from_secret_type_to_class

    return [plugin() for plugin in get_mapping_from_secret_type_to_class().values()]


def _library_windows(text: str) -> Iterator[str]:
    """Pieces of at most LIBRARY_WINDOW characters, cut at spaces, spaces collapsed."""
    for line in text[:LIBRARY_SCAN_CHARS].split("\n"):
        line = _SPACES.sub(" ", line).strip()
        while line:
            if len(line) <= LIBRARY_WINDOW:
                yield line
                break
            cut = line.rfind(" ", 0, LIBRARY_WINDOW)
            cut = cut if cut > 0 else LIBRARY_WINDOW
            yield line[:cut]
            line = line[cut:].lstrip()


def library_findings(text: str) -> set[str]:
    """The secret values detect-secrets' plugins find in the text (its own heuristic filters
    applied: templated, sequential and letterless values are not secrets)."""
    from detect_secrets.filters.heuristic import (
        is_not_alphanumeric_string,
        is_sequential_string,
        is_templated_secret,
    )

    found: set[str] = set()
    for window in _library_windows(text):
        quoted = "'" in window or '"' in window
        for plugin in _library_plugins():
            if not quoted and type(plugin).__name__ in _QUOTES_REQUIRED:
                continue  # they find only quoted values, and backtrack most on long words
            for secret in plugin.analyze_line(filename="paste", line=window):  # type: ignore[attr-defined]
                value = secret.secret_value or ""
                if len(value) < 3 or "<" in value:
                    continue
                if is_templated_secret(value) or is_sequential_string(value):
                    continue
                if not is_not_alphanumeric_string(value):
                    found.add(value)
    return found


def _redact_library_findings(text: str) -> str:
    spans: list[tuple[int, int]] = []
    for value in library_findings(text):
        pattern = re2.compile("[ \t]+".join(re2.escape(part) for part in value.split()))
        spans.extend(_widen(text, start=m.start(), end=m.end()) for m in pattern.finditer(text))
    if not spans:
        return text
    out, at = [], 0
    for start, end in sorted(spans):
        if end <= at:
            continue
        if start < at:  # overlaps the last one: already hidden up to `at`
            start = at
        else:
            out.append(text[at:start])
            out.append("<secret>")
        at = end
    out.append(text[at:])
    return "".join(out)


def _widen(text: str, *, start: int, end: int) -> tuple[int, int]:
    """Some plugins report only part of a token (`ghp` of `ghp_…`): the token goes whole."""
    floor, ceiling = max(0, start - _WIDEN_CHARS), min(len(text), end + _WIDEN_CHARS)
    while start > floor and text[start - 1] in _EXTEND and text[start - 1] not in "-.+":
        start -= 1
    while end < ceiling and (text[end] in _EXTEND or text[end] == "="):
        end += 1
    return start, end
