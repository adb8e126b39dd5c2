"""Every kind of bad entry file is reported as file:line: message."""

from pathlib import Path

import pytest

from app.entries import parse_entry, read_entry_file
from app.signatures import PatternError, compile_pattern
from tests.conftest import entry_text


def problems_of(text: str, entry_id: str = "sample-entry") -> list[str]:
    doc = parse_entry(text, f"content/{entry_id}.md", expected_id=entry_id)
    return [str(p) for p in doc.problems if p.severity == "error"]


def test_valid_entry_has_no_problems():
    doc = parse_entry(entry_text(), "content/sample-entry.md", expected_id="sample-entry")
    assert doc.problems == []
    assert doc.ok
    assert doc.front.signatures[0].exception == "RuntimeError"
    assert [s.role for s in doc.rendered.snippets] == ["fix"]


def test_no_front_matter():
    assert problems_of("# Just a heading\n") == [
        "content/sample-entry.md:1: no front-matter: the file must start with '---', "
        "then the YAML fields, then '---'"
    ]


def test_unclosed_front_matter_is_reported():
    assert problems_of("---\nid: x\ntitle: y\n")[0].startswith(
        "content/sample-entry.md:1: no front"
    )


# A YAML mistake on the file's line 6 (`tags: [tensor]` in entry_text()); the scanner notices
# most of these only on a later line, which is not where the mistake is.
YAML_MISTAKES_ON_LINE_6 = {
    "bracket never closed": ("tags: [tensor]", "tags: [tensor"),
    "key without its colon": ("tags: [tensor]", "tags [tensor]"),
    "quote never closed": ("tags: [tensor]", "tags: 'tensor"),
    "colon inside a plain value": ("tags: [tensor]", "tags: a: b"),
    "unknown escape in double quotes": ("tags: [tensor]", 'tags: "\\("'),
    "tab as indentation": ("tags: [tensor]", "\ttags: [tensor]"),
}


@pytest.fixture(params=["libyaml", "pure Python"])
def yaml_loader(request, monkeypatch):
    """Both of PyYAML's parsers: libyaml's where it is built, PyYAML's own otherwise."""
    from app.entries import yaml_reader

    if request.param == "pure Python":
        monkeypatch.setattr(yaml_reader, "_FrontMatterLoader", yaml_reader._PyFrontMatterLoader)
    elif not hasattr(yaml_reader, "_CFrontMatterLoader"):
        pytest.skip("PyYAML is built without libyaml here")


@pytest.mark.parametrize("mistake", YAML_MISTAKES_ON_LINE_6)
def test_a_yaml_mistake_is_reported_on_its_own_line(mistake, yaml_loader):
    old, new = YAML_MISTAKES_ON_LINE_6[mistake]
    text = entry_text().replace(old, new)
    assert text.splitlines()[5] == new
    (problem,) = problems_of(text)
    assert problem.startswith("content/sample-entry.md:6: front-matter is not valid YAML: ")


def test_a_yaml_mistake_found_later_stays_where_the_parser_found_it(yaml_loader):
    """A list item indented less than its siblings: the mistake is where the parser stopped
    (line 7), not at the start of the mapping it was reading (line 2)."""
    text = entry_text().replace("tags: [tensor]", "tags:\n  - tensor\n - memory")
    (problem,) = problems_of(text)
    assert problem.startswith("content/sample-entry.md:8: front-matter is not valid YAML")


def test_unknown_field_names_the_field_and_its_line():
    text = entry_text(extra_front="colour: red\n")
    assert problems_of(text) == [
        "content/sample-entry.md:7: unknown field 'colour' (allowed: id, title, summary, kind, "
        "tags, aliases, questions, versions, signatures, wordings, related, sources)"
    ]


def test_unknown_field_inside_a_signature_has_its_own_line():
    sigs = (
        "signatures:\n  - message: 'boom'\n    example: 'RuntimeError: boom'\n    severity: high\n"
    )
    (problem,) = problems_of(entry_text(signatures=sigs))
    assert problem.startswith("content/sample-entry.md:10: unknown field 'severity'")


def test_id_must_equal_file_name():
    assert problems_of(entry_text("other-name")) == [
        "content/sample-entry.md:2: id 'other-name' does not equal the file name 'sample-entry'"
    ]


def test_missing_required_field():
    text = entry_text().replace("summary: One sentence that stands alone.\n", "")
    assert problems_of(text) == ["content/sample-entry.md:1: required field 'summary' is missing"]


def test_unquoted_version_is_refused_with_a_hint():
    (problem,) = problems_of(entry_text(extra_front="versions: 1.10\n"))
    assert problem.startswith("content/sample-entry.md:7: versions: expected text, got float 1.1")
    assert "put it in quotes" in problem


def test_bad_kind_lists_the_kinds():
    (problem,) = problems_of(entry_text(kind="oops"))
    assert problem == (
        "content/sample-entry.md:5: kind: 'oops' is not one of "
        "error, warning, silent, hang, perf, howto"
    )


def test_bad_regex_is_refused_with_position():
    sigs = "signatures:\n  - message: 'shape (?=mismatch)'\n    example: 'shape mismatch'\n"
    (problem,) = problems_of(entry_text(signatures=sigs))
    assert problem.startswith(
        "content/sample-entry.md:8: signatures[0].message: invalid regex at position 6"
    )
    assert "look-ahead is not supported by RE2" in problem


def test_regex_that_re2_cannot_parse_reports_position():
    sigs = "signatures:\n  - message: 'size (mismatch'\n    example: 'size mismatch'\n"
    (problem,) = problems_of(entry_text(signatures=sigs))
    assert "signatures[0].message: invalid regex at position 14: missing )" in problem


def test_example_not_matched_by_its_own_signature():
    sigs = (
        "signatures:\n"
        "  - exception: RuntimeError\n"
        "    message: 'expected scalar type Long'\n"
        "    example: 'RuntimeError: expected scalar type Float'\n"
    )
    (problem,) = problems_of(entry_text(signatures=sigs))
    assert problem.startswith(
        "content/sample-entry.md:10: signatures[0].example is not matched by its own message pattern"
    )


def test_error_kind_needs_a_signature_but_howto_does_not():
    assert problems_of(entry_text(signatures="")) == [
        "content/sample-entry.md:5: an entry of kind 'error' needs at least one signature"
    ]
    assert problems_of(entry_text(kind="howto", signatures="")) == []


def test_duplicate_key_is_reported():
    (problem,) = problems_of(entry_text(extra_front="title: again\n"))
    assert problem == "content/sample-entry.md:7: field 'title' is given twice"


def test_snippet_that_does_not_parse_names_its_line():
    body = "## What you see\n\n## Why it happens\n\n## Fix\n\n```python repro\nx = (\n```\n"
    text = entry_text(body=body)
    (problem,) = problems_of(text)
    line = int(problem.split(":")[1])
    assert "python repro snippet does not parse" in problem
    assert text.splitlines()[line - 2] == "```python repro"


def test_warning_for_missing_sections():
    body = "## Fix\n\n```python fix\nprint(1)\n```\n"
    doc = parse_entry(entry_text(body=body), "e.md", expected_id="sample-entry")
    warnings = [str(p) for p in doc.problems if p.severity == "warning"]
    assert any("missing section(s): ## What you see, ## Why it happens" in w for w in warnings)
    assert doc.ok  # warnings do not make the entry unusable


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ("colour=red", "unknown snippet option 'colour' (known: requires, timeout)"),
        ("gpus=2", "unknown snippet option 'gpus' (known: requires, timeout); it goes inside"),
        ("timeout=abc", "timeout=abc must be a number of seconds from 1 to 600"),
        ("timeout=0", "timeout=0 must be a number of seconds from 1 to 600"),
        ("timeout=601", "timeout=601 must be a number of seconds from 1 to 600"),
        ("timeout=inf", "timeout=inf must be a number of seconds from 1 to 600"),
        ("timeout", "snippet option timeout needs a value, e.g. timeout=60"),
        ("requires=", "snippet option requires needs a value"),
        ("timeout=60 timeout=90", "snippet option 'timeout' is given twice"),
        ("requires=cuda,gpus=0", "requires 'gpus=0': write gpus=N with N a whole number from 1"),
        ("requires=gpus=two", "requires 'gpus=two': write gpus=N"),
        ("requires=gpus", "requires 'gpus': write gpus=N"),
        ("requires=my-package", "requires 'my-package' is not cuda, no-cuda, mps, gpus=N or an"),
        ("requires=cuda,,numpy", "requires '' is not cuda, no-cuda, mps, gpus=N or an"),
        ("requires=cuda=1", "requires 'cuda=1' is not cuda, no-cuda, mps, gpus=N or an"),
        ("requires=cuda,no-cuda", "requires both cuda and no-cuda: the snippet could never run"),
    ],
)
def test_bad_snippet_option_is_an_error_at_the_fence(options: str, message: str):
    body = (
        f"## What you see\n\n## Why it happens\n\n## Fix\n\n```python demo {options}\nx = 1\n```\n"
    )
    text = entry_text(body=body)
    (problem,) = problems_of(text)
    path, line, rest = problem.split(":", 2)
    assert path == "content/sample-entry.md"
    assert text.splitlines()[int(line) - 1] == f"```python demo {options}"
    assert rest.startswith(f" python demo: {message}"), rest


@pytest.mark.parametrize(
    "options",
    [
        "requires=cuda timeout=60",
        "requires=cuda,gpus=2,numpy",
        "requires=no-cuda",
        "requires=onnx,onnxscript timeout=180",
        "requires=ninja timeout=600",
        "requires=os.path timeout=1.5",
        "timeout=1",
    ],
)
def test_good_snippet_options_pass(options: str):
    body = (
        f"## What you see\n\n## Why it happens\n\n## Fix\n\n```python fix {options}\nx = 1\n```\n"
    )
    assert problems_of(entry_text(body=body)) == []


def test_snippet_options_are_extracted():
    body = "## Fix\n\n```python repro requires=cuda timeout=60\nimport torch\n```\n"
    doc = parse_entry(entry_text(body=body), "e.md")
    (snippet,) = doc.rendered.snippets
    assert (snippet.role, snippet.options) == ("repro", {"requires": "cuda", "timeout": "60"})


def test_not_utf8_file_is_reported(tmp_path: Path):
    path = tmp_path / "sample-entry.md"
    path.write_bytes(entry_text().encode() + b"\n\xff\xfe broken\n")
    doc = read_entry_file(path, label="content/sample-entry.md")
    assert not doc.ok
    assert "not UTF-8" in str(doc.problems[0])


def test_raw_html_is_escaped_and_code_is_highlighted():
    body = "## Fix\n\n<script>alert(1)</script>\n\n```python fix\nimport torch\n```\n"
    doc = parse_entry(entry_text(body=body), "e.md")
    assert "<script>" not in doc.rendered.html
    assert "&lt;script&gt;" in doc.rendered.html
    assert '<span class="kn">import</span>' in doc.rendered.html
    assert 'id="fix"' in doc.rendered.html  # heading anchors


@pytest.mark.parametrize(
    ("pattern", "position", "hint"),
    [
        (r"a(?<=b)", 1, "look-behind"),
        (r"(x)\1", 3, "backreference"),
        (r"end\Z", 3, r"write \z"),
        (r"a{,3}", 1, "{0,3}"),
        (r"a*+", 2, "possessive"),
        (r"(?x) a", 0, "verbose"),
        (r"(?>a)", 0, "atomic"),
    ],
)
def test_re2_refusals_say_what_to_write(pattern: str, position: int, hint: str):
    with pytest.raises(PatternError) as caught:
        compile_pattern(pattern)
    assert caught.value.position == position
    assert hint in caught.value.reason


def test_escaped_constructs_are_not_refused():
    assert compile_pattern(r"\(\?=literal\)").search("(?=literal)")
    assert compile_pattern(r"[(?=]").search("?")
