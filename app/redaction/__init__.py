"""Redaction: what identifies people, machines and secrets taken out of an error text.

Used wherever a paste's text is kept (the inbox of unmatched errors). Two layers:
- our own rules, in RE2 (linear time on any input): secrets in the shapes we know, key=value
  pairs, user names (here), and what secret scanners do not cover: URLs, addresses, paths and
  hosts, by allow-list (app/redaction/places.py);
- Yelp's detect-secrets plugins, a maintained rule set, as a second reader for secrets, on
  bounded windows of the text (app/redaction/library.py).
What the matcher needs stays: the exception type, the message's wording, numbers and shapes,
hex addresses, torch frames. The input is capped (max_chars), cut at a space so that no half of
a secret is left behind. The order of the rules matters: the specific shapes first.
"""

import itertools
import math
import re
from functools import cache

import re2

from app.redaction.library import library_findings, load_plugins, redact_library_findings
from app.redaction.lists import words
from app.redaction.places import (
    Rule,
    address_and_path_rules,
    host_rules,
    redact_host,
    url_rules,
)

__all__ = [
    "MAX_REDACT_CHARS",
    "cap_at_space",
    "library_findings",
    "load_rules",
    "looks_random",
    "redact",
]

MAX_REDACT_CHARS = 65_536


def redact(text: str, *, max_chars: int = MAX_REDACT_CHARS) -> str:
    """`login as bob@acme.io to 10.0.0.5 failed` -> `login as <email> to <ip> failed`."""
    text = cap_at_space(text.replace("\x00", ""), max_chars=max_chars)
    for pattern, replacement in _rules_before_library():
        text = pattern.sub(replacement, text)
    text = redact_library_findings(text)
    for pattern, replacement in _rules_after_library():
        text = pattern.sub(replacement, text)
    return text


def load_rules() -> None:
    """Compile the rules and load the library's plugins now (about a second), so that the first
    paste the inbox keeps does not pay for it inside its time budget."""
    _rules_before_library()
    _rules_after_library()
    load_plugins()


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


# --- identities ----------------------------------------------------------------------------

_SCP_URL = re2.compile(r"\b([A-Za-z0-9_.\-]+)@([A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)+):([\w.~/\-]+)")
_EMAIL = re2.compile(r"[A-Za-z0-9_.+\-]+@[A-Za-z0-9\-]+(?:\.[A-Za-z0-9\-]+)+")
_USER_AT_NODE = re2.compile(r"\b[A-Za-z0-9_.\-]+@([A-Za-z][A-Za-z0-9\-]*)\b")


def _redact_scp_url(match: re2._Match) -> str:
    _user, host, _path = match.groups()
    return f"<user>@{redact_host(host)}:<path>"  # a repository's name names its project


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
        *url_rules(),
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
        *address_and_path_rules(),
        (
            re2.compile(r"(?i)\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"),
            "<id>",
        ),
    ]


@cache
def _rules_after_library() -> list[Rule]:
    return [
        *host_rules(),
        (_LONG_TOKEN, _redact_long_token),
    ]
