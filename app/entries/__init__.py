"""Reading one entry file: YAML front-matter plus a Markdown body, checked against the contract.

Every problem is reported as a `Problem` that knows its file and line (inside the front-matter
too), so `pitfalls check`, ingest and the editor all say `file:line: what is wrong`. Its modules:
`reading` (text, bytes or a file to an `EntryDocument`, within the size limits), `yaml_reader`
(the front-matter's YAML with the line of every field, anchors and deep nesting refused),
`front_matter` (the fields' contract and how a validation error reads), `checks` (fields,
signatures, wordings, body and placeholders) and `document` (`EntryDocument`, `Problem`).
"""

from app.entries.checks import KINDS_NEEDING_SIGNATURES, RECOMMENDED_SECTIONS
from app.entries.document import EntryDocument, Problem, content_hash
from app.entries.front_matter import (
    ID_PATTERN,
    TAG_PATTERN,
    WORDING_SOURCE_PATTERN,
    EntryKind,
    FrontMatter,
    SignatureSpec,
    WordingSpec,
)
from app.entries.reading import (
    MAX_ENTRY_BYTES,
    MAX_FRONT_MATTER_BYTES,
    parse_entry,
    parse_entry_bytes,
    read_entry_bytes,
    read_entry_file,
)
from app.entries.yaml_reader import MAX_YAML_DEPTH

__all__ = [
    "ID_PATTERN",
    "KINDS_NEEDING_SIGNATURES",
    "MAX_ENTRY_BYTES",
    "MAX_FRONT_MATTER_BYTES",
    "MAX_YAML_DEPTH",
    "RECOMMENDED_SECTIONS",
    "TAG_PATTERN",
    "WORDING_SOURCE_PATTERN",
    "EntryDocument",
    "EntryKind",
    "FrontMatter",
    "Problem",
    "SignatureSpec",
    "WordingSpec",
    "content_hash",
    "parse_entry",
    "parse_entry_bytes",
    "read_entry_bytes",
    "read_entry_file",
]
