"""GitHub's workflow-command format for the annotations of `pitfalls run --github`: the
escaping of the message and of the properties, and a job summary that untrusted text cannot
break out of. (tests/test_run_jobs.py runs the whole thing on a real failing script.)"""

import re

from app.cli.github import (
    MAX_ANNOTATIONS,
    annotation,
    escape_data,
    escape_property,
    summary_markdown,
)

HOSTILE = "50% done\r\nline 2, key: value\n::error::injected"


def answer(message: str = HOSTILE, file: str = "/work/repo/src/a,b:c.py") -> dict:
    """The shape of an /api/v1/match answer, as much of it as the annotation reads."""
    return {
        "matches": [
            {
                "id": "some-entry",
                "title": "A title: with, both",
                "summary": "Why it happens.",
                "fix_markdown": "Do this:\n\n```python fix\nprint('fixed')\n```",
            }
        ],
        "parsed": {
            "final": 0,
            "exceptions": [{"qualified_type": "RuntimeError", "message": message}],
            "user_frame": {"file": file, "line": 12},
        },
    }


def test_escaping_follows_the_workflow_command_format():
    assert escape_data("100%\r\n") == "100%25%0D%0A"
    assert escape_property("a:b,c%\n") == "a%3Ab%2Cc%25%0A"
    assert escape_data(escape_data("%")) == "%2525"  # each % once, no double decoding


def test_an_annotation_is_one_line_that_untrusted_text_cannot_end(monkeypatch):
    monkeypatch.setenv("GITHUB_WORKSPACE", "/work/repo")
    line = annotation(answer(), "https://kb.example.org/entries/some-entry", who="rank 1")
    assert "\n" not in line and "\r" not in line
    head, _, message = line.partition("::")[2].partition("::")
    assert head == "error file=src/a%2Cb%3Ac.py,line=12,title=Pitfalls%3A A title%3A with%2C both"
    assert message.startswith("rank 1: RuntimeError: 50%25 done%0D")  # only the first line
    assert "::error::injected" not in message.split("%0A", 1)[0]
    assert message.endswith("%0AFix: https://kb.example.org/entries/some-entry")
    assert re.fullmatch(r"(?:[^%\r\n]|%25|%0D|%0A)*", message)


def test_without_a_users_frame_the_annotation_has_no_file():
    plain = answer()
    plain["parsed"]["user_frame"] = None
    assert annotation(plain, "pitfalls show some-entry").startswith("::error title=")


def test_the_summary_keeps_untrusted_text_in_code_and_the_fix_as_markdown():
    ticks = "bad ``` fence `x` <script>alert(1)</script>"
    text = summary_markdown([answer(ticks)] * 12, ["pitfalls show some-entry"] * 12, "python t.py")
    assert text.startswith("## Pitfalls: 12 known errors\n")
    block = re.search(r"^(`{4,})text\n(.*?)\n\1$", text, flags=re.M | re.S)
    assert block and block.group(2) == f"RuntimeError: {ticks}"  # a longer fence holds it
    assert "<script>" not in text.replace(block.group(0), "")
    assert "```python fix\nprint('fixed')\n```" in text
    assert f"GitHub shows {MAX_ANNOTATIONS} annotations a step: the other 2 are only here." in text
    assert "More: `` pitfalls show some-entry ``" not in text and "More: ` pitfalls show" in text
