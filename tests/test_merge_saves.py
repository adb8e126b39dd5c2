"""Saves from an older revision merge with what was saved since, through the editor's form and
the JSON API: both edits kept when they touch different lines, a conflict as before when they
overlap, and a merged text that fails the checks refused with the checker's sentence."""

import re
from html import unescape

import pytest

from tests import test_wiki
from tests.conftest import entry_text
from tests.test_wiki import Wiki, _edit_form, csrf_of, textarea

pytestmark = pytest.mark.both_databases

wiki = test_wiki.wiki  # the fixture: an app over three entries, with users and tokens

URL = "/api/v1/entries/first-entry"
ORIGINAL = entry_text("first-entry")


def put(wiki: Wiki, markdown: str, if_match: str, message: str = "Edit"):
    headers = {**wiki.bearer("ci-bot"), "If-Match": if_match}
    return wiki.anonymous().put(
        URL, json={"markdown": markdown, "message": message}, headers=headers
    )


def current(wiki: Wiki) -> dict:
    return wiki.anonymous().get(URL).json()


def history(wiki: Wiki) -> list[dict]:
    return wiki.anonymous().get(f"{URL}/revisions").json()


def test_two_puts_from_the_same_revision_on_different_lines_both_stay(wiki: Wiki):
    top = ORIGINAL.replace("title: A sample pitfall about view()", "title: A clearer title")
    bottom = ORIGINAL.replace("print('fixed')", "print('fixed at last')")
    first = put(wiki, top, '"1"', "Retitle")
    assert first.status_code == 200 and first.json()["merged"] is None
    second = put(wiki, bottom, '"1"', "Better fix")
    assert second.status_code == 200, second.text
    assert second.headers["etag"] == '"3"'
    merged = second.json()["merged"]
    assert merged == {
        "base_revision": 1,
        "revision": 2,
        "authors": ["token:ci-bot"],
        "message": "Merged with the change by token:ci-bot in revision 2.",
    }
    both = ORIGINAL.replace("title: A sample pitfall about view()", "title: A clearer title")
    both = both.replace("print('fixed')", "print('fixed at last')")
    assert current(wiki)["markdown"] == both
    assert [r["message"] for r in history(wiki)[:2]] == [
        "Better fix (merged with revision 2)",
        "Retitle",
    ]
    # The same change again from revision 1 is no conflict: it is there already.
    same = put(wiki, top, '"1"', "Retitle again")
    assert same.status_code == 200 and current(wiki)["revision"] == 3
    assert same.json()["merged"]["message"] == (
        "Merged with the changes by token:ci-bot in revisions 2-3."
    )


def test_an_overlapping_put_is_refused_as_before(wiki: Wiki):
    assert put(wiki, ORIGINAL.replace("An error.", "An error, said one."), '"1"').status_code == 200
    before = wiki.writes_recorded()
    stale = put(wiki, ORIGINAL.replace("An error.", "An error, said another."), '"1"')
    assert stale.status_code == 412 and stale.headers["etag"] == '"2"'
    error = stale.json()["error"]
    assert error["current_revision"] == 2
    assert "changed while you were editing" in error["message"]
    assert "line 15 of your text" in error["message"] and "Nothing was saved" in error["message"]
    # The line right below the other change (line 16, blank) is an overlap too.
    adjacent = ORIGINAL.replace("An error.\n\n", "An error.\nA line right below.\n")
    assert put(wiki, adjacent, '"1"').status_code == 412
    assert wiki.writes_recorded() == before
    # A tag of no revision before the latest, or a list that does not name the latest: 412.
    for header in ('"1", "7"', '"7"', 'W/"1"'):
        assert put(wiki, ORIGINAL, header).status_code == 412, header


def test_a_merge_that_breaks_the_front_matter_is_refused_and_nothing_saved(wiki: Wiki):
    # Each side adds a `versions` field, at different places: each alone is a good entry.
    theirs = ORIGINAL.replace("summary:", 'versions: ">=2.0"\nsummary:')
    ours = ORIGINAL.replace("tags: [tensor]\n", 'tags: [tensor]\nversions: ">=1.0"\n')
    assert put(wiki, theirs, '"1"').status_code == 200
    before = wiki.writes_recorded()
    refused = put(wiki, ours, '"1"')
    assert refused.status_code == 422, refused.text
    error = refused.json()["error"]
    assert error["message"] == (
        "Your edit merges with the change by token:ci-bot in revision 2, but the merged entry "
        "does not pass the checks: line 8: field 'versions' is given twice. Nothing was saved."
    )
    assert error["merged_with"] == 2
    assert error["merged_markdown"].count("versions:") == 2
    assert any("given twice" in p["message"] for p in error["problems"])
    assert wiki.writes_recorded() == before
    assert current(wiki)["markdown"] == theirs


def test_the_editor_merges_and_says_with_whose_change(wiki: Wiki):
    alice, bob = wiki.login("alice"), wiki.login("bob")
    form_a, form_b = _edit_form(alice, "second-entry"), _edit_form(bob, "second-entry")
    form_a.update(
        markdown=form_a["markdown"].replace("An error.", "An error alice saw."), message="Symptom"
    )
    assert alice.post("/entries/second-entry/edit", data=form_a).status_code == 200
    # Bob's textarea sends CRLF, as browsers do; his change is lower down.
    bobs = form_b["markdown"].replace("Because.", "Because bob knows.").replace("\n", "\r\n")
    form_b.update(markdown=bobs, message="Cause")
    saved = bob.post("/entries/second-entry/edit", data=form_b, follow_redirects=False)
    assert saved.status_code == 303
    assert saved.headers["location"] == "/entries/second-entry?merged=2&from=1"
    page = bob.get(saved.headers["location"])
    notice = unescape(re.sub(r"<[^>]+>", "", page.text.split('id="merged"')[1].split("</p>")[0]))
    assert "Merged with the change by alice in revision 2." in notice
    assert "You started from revision 1" in notice
    entry = wiki.anonymous().get("/api/v1/entries/second-entry").json()
    assert entry["revision"] == 3
    assert "An error alice saw." in entry["markdown"] and "Because bob knows." in entry["markdown"]
    assert "\r" not in entry["markdown"]
    revisions = wiki.anonymous().get("/api/v1/entries/second-entry/revisions").json()
    assert revisions[0]["message"] == "Cause (merged with revision 2)"
    assert revisions[0]["author"] == "bob"
    # A made-up notice about revisions that do not exist is not shown.
    bogus = bob.get("/entries/second-entry?merged=9&from=1")
    assert bogus.status_code == 200 and 'id="merged"' not in bogus.text


def test_the_editor_shows_a_merged_text_that_fails_the_checks(wiki: Wiki):
    alice, bob = wiki.login("alice"), wiki.login("bob")
    form_a, form_b = _edit_form(alice, "third-entry"), _edit_form(bob, "third-entry")
    theirs = form_a["markdown"].replace("summary:", 'versions: ">=2.0"\nsummary:')
    form_a.update(markdown=theirs, message="Versions")
    assert alice.post("/entries/third-entry/edit", data=form_a).status_code == 200
    ours = form_b["markdown"].replace("tags: [tensor]\n", 'tags: [tensor]\nversions: ">=1.0"\n')
    form_b.update(markdown=ours, message="Versions too")
    before = wiki.writes_recorded()
    refused = bob.post("/entries/third-entry/edit", data=form_b)
    assert refused.status_code == 422
    text = unescape(refused.text)
    assert "merges with the change by alice in revision 2" in text
    assert "line 8: field 'versions' is given twice. Nothing was saved." in text
    shown = textarea(refused.text, "markdown")
    assert '">=1.0"' in shown and '">=2.0"' in shown  # the merged text, whose lines are meant
    assert re.search(r'name="base_revision" value="2"', refused.text)
    assert wiki.writes_recorded() == before
    # Bob removes one of the two and saves on top of revision 2: no merge needed.
    fixed = shown.replace('versions: ">=1.0"\n', "")
    form_b.update(markdown=fixed, base_revision="2", csrf_token=csrf_of(refused.text))
    again = bob.post("/entries/third-entry/edit", data=form_b, follow_redirects=False)
    assert again.status_code == 303
    # Without his line the text is alice's revision 2 again: the page says nothing changed.
    assert again.headers["location"] == "/entries/third-entry?saved=unchanged"


def test_an_entry_too_repetitive_to_merge_quickly_is_a_conflict(wiki: Wiki):
    long = ORIGINAL.replace("Because.", "Because.\n" + "Same line.\n" * 1500)
    assert put(wiki, long, '"1"').status_code == 200
    lines = long.split("\n")
    theirs = "\n".join([*lines[:-3], "print('theirs')", *lines[-2:]])
    assert put(wiki, theirs, '"2"').status_code == 200
    ours = list(lines)
    ours[100], ours[1400] = "Another line.", "One more line."
    refused = put(wiki, "\n".join(ours), '"2"')
    assert refused.status_code == 412
    assert "repeat the same lines too often" in refused.json()["error"]["message"]
    assert current(wiki)["revision"] == 3
