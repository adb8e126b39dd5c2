"""Two people edit one entry in Chromium at the same time: edits to different lines merge and the
second save says with whose change; an overlapping edit from a third tab shows the conflict view.

The server, browser and sign-in are those of test_browser.py (Debian's Chromium, a real uvicorn).
"""

import json
import urllib.request

import pytest

from tests.conftest import running_server
from tests.test_browser import ARTIFACTS, _add_editor, browser, page_opener, set_code_editor_text

pytestmark = [pytest.mark.e2e, pytest.mark.slow]
browser = browser  # the module's Chromium, as a fixture here too

ENTRY = "view-non-contiguous"
TITLE = "title: view() fails on a non-contiguous tensor after transpose or permute"
PASSWORD = "a long enough password"


def _sign_in(page, name: str) -> None:
    page.fill("#name", name)
    page.fill("#password", PASSWORD)
    page.click("form.stack button[type=submit]")
    page.wait_for_url(f"**/entries/{ENTRY}/edit")


def _markdown(base: str) -> dict:
    with urllib.request.urlopen(f"{base}/api/v1/entries/{ENTRY}", timeout=30) as response:
        return json.load(response)


def _save(page, markdown: str, message: str) -> None:
    set_code_editor_text(page, markdown)  # the code editor keeps the form's textarea in step
    page.fill("#message", message)
    page.click("#save")


def test_two_tabs_edit_different_lines_and_both_are_kept_then_an_overlap_conflicts(
    browser, tmp_path
):
    with running_server(tmp_path / "clone") as (base, clone):
        _add_editor(clone, "erin", PASSWORD)
        _add_editor(clone, "finn", PASSWORD)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        edit = f"/login?next=/entries/{ENTRY}/edit"
        viewport = {"width": 1400, "height": 1000}
        with page_opener(browser, base) as open_page:
            tab_a, tab_b = open_page(edit, viewport=viewport), open_page(edit, viewport=viewport)
            _sign_in(tab_a, "erin")
            _sign_in(tab_b, "finn")
            # A third tab opens the same revision; it saves last, with an overlapping change.
            tab_c_context = browser.new_context(viewport=viewport)
            tab_c = tab_c_context.new_page()
            statuses: list[int] = []
            errors: list[str] = []
            tab_c.on("response", lambda r: statuses.append(r.status) if r.status >= 400 else None)
            tab_c.on("pageerror", lambda e: errors.append(str(e)))
            tab_c.goto(base + edit)
            _sign_in(tab_c, "erin")
            for tab in (tab_a, tab_b, tab_c):
                assert tab.locator('input[name="base_revision"]').input_value() == "1"

            text_a = tab_a.locator("#markdown").input_value()
            assert TITLE in text_a
            # The page that says "Saved" takes ?saved= out of its address at once (app.js), so the
            # navigation is awaited from before the click, not looked for in the address after.
            with tab_a.expect_navigation(url=f"**/entries/{ENTRY}?saved=2"):
                _save(tab_a, text_a.replace(TITLE, TITLE + " (A)"), "Say which call fails")

            text_b = tab_b.locator("#markdown").input_value()
            added = "A line the bottom tab adds."
            _save(tab_b, text_b.rstrip("\n") + f"\n\n{added}\n", "Add a closing line")
            tab_b.wait_for_url(f"**/entries/{ENTRY}?merged=2&from=1")
            notice = tab_b.locator("#merged")
            assert "Merged with the change by erin in revision 2." in notice.inner_text()
            notice.scroll_into_view_if_needed()
            tab_b.screenshot(path=str(ARTIFACTS / "wiki-merged-notice.png"))
            assert tab_b.locator("h1").inner_text().endswith("(A)")

            entry = _markdown(base)
            assert entry["revision"] == 3
            assert TITLE + " (A)" in entry["markdown"] and added in entry["markdown"]

            text_c = tab_c.locator("#markdown").input_value()
            _save(tab_c, text_c.replace(TITLE, TITLE + " (C)"), "Another title")
            conflict = tab_c.locator("#conflict")
            conflict.wait_for()
            assert "changed while you were editing" in conflict.inner_text()
            assert "line 3 of your text" in conflict.inner_text()
            assert TITLE + " (C)" in tab_c.locator("#markdown").input_value()  # kept
            assert tab_c.locator('input[name="base_revision"]').input_value() == "3"
            tab_c.screenshot(path=str(ARTIFACTS / "wiki-merge-conflict.png"))
            assert statuses == [409] and errors == []
            tab_c_context.close()
            assert _markdown(base)["revision"] == 3
