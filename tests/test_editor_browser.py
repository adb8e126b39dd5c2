"""The wiki editor in a real browser (Debian's Chromium) against a real server: the code editor
at phone and laptop width, light and dark; the live check's problems at their lines; the
"Saved" notice; and the plain textarea form with JavaScript off.

Screenshots go to test-artifacts/screenshots/editor-*.png for people to look at.
"""

import re
import urllib.request

import pytest

from tests.conftest import get, running_server
from tests.test_browser import (  # noqa: F401 (browser is a fixture)
    ARTIFACTS,
    _add_editor,
    browser,
    page_opener,
    set_code_editor_text,
    signed_in_state,
)

pytestmark = pytest.mark.e2e
PASSWORD = "a long enough password"
ENTRY = "view-non-contiguous"  # its line 6 is `tags: [...]`
MISTAKE_LINE = 6
LONG_LINE = "A sentence with no end " * 60 + "tensor.view(-1)"


@pytest.fixture(scope="module")
def site(browser, tmp_path_factory):  # noqa: F811
    """A server of this module's own with an editor, logged in once (`state` holds the cookie)."""
    with running_server(tmp_path_factory.mktemp("editor") / "clone") as (base, clone):
        _add_editor(clone, "edna", PASSWORD)
        yield base, signed_in_state(browser, base, "edna", PASSWORD)


@pytest.fixture
def open_editor(browser, site):  # noqa: F811
    base, state = site
    with page_opener(browser, base) as make:

        def open_as_editor(path: str, **options):
            return make(path, storage_state=state, **options)

        yield open_as_editor


def _code_editor(page):
    page.locator("section.editor[data-code-editor=ready]").wait_for()
    return page.locator("#markdown-editor")


def _checked_after(page, action) -> None:
    """Run `action` (an edit) and wait for the live check it starts to be shown."""
    before = page.evaluate("document.querySelector('section.editor').dataset.checked || '0'")
    action()
    page.wait_for_function(
        "(n) => Number(document.querySelector('section.editor').dataset.checked || 0) > n",
        arg=int(before),
    )


def _line_of(page, selector: str) -> int:
    """The line number (from the editor's gutter) of the row holding the first element that
    matches `selector`; 0 when none is drawn."""
    return page.evaluate(
        """(selector) => {
        const found = document.querySelector(`#markdown-editor .cm-content ${selector}`);
        if (!found) return 0;
        const row = (found.closest(".cm-line") || found).getBoundingClientRect();
        const numbers = document.querySelectorAll("#markdown-editor .cm-lineNumbers .cm-gutterElement");
        const same = [...numbers].find((n) => Math.abs(n.getBoundingClientRect().top - row.top) < 2);
        return same ? Number(same.textContent) : 0;
    }""",
        selector,
    )


def _scrolled_to(page, selector: str, has_text: str) -> bool:
    """Scroll the editor down until an element matching `selector` with `has_text` is drawn."""
    target = page.locator(selector, has_text=has_text)
    for _ in range(40):
        if target.count():
            return True
        page.evaluate("document.querySelector('#markdown-editor .cm-scroller').scrollTop += 300")
        page.wait_for_timeout(50)  # the editor redraws on its next animation frame
    return False


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize(
    ("device", "width", "height"), [("phone", 390, 844), ("laptop", 1366, 900)]
)
def test_the_code_editor_wraps_numbers_lines_and_marks_the_problem_line(
    open_editor, scheme, device, width, height
):
    page = open_editor(
        f"/entries/{ENTRY}/edit",
        viewport={"width": width, "height": height},
        color_scheme=scheme,
    )
    editor = _code_editor(page)
    assert editor.is_visible() and not page.locator("#markdown").is_visible()
    numbers = page.locator("#markdown-editor .cm-lineNumbers .cm-gutterElement")
    assert "1" in numbers.all_inner_texts()
    # The YAML front-matter is highlighted as YAML, and the body below it as Markdown (drawn
    # when scrolled to: the editor draws the rows in view).
    assert page.locator("#markdown-editor .tok-propertyName", has_text="tags").count() == 1
    assert _scrolled_to(page, "#markdown-editor .tok-heading", has_text="Why it happens")

    original = page.locator("#markdown").input_value()
    lines = original.split("\n")
    assert lines[MISTAKE_LINE - 1].startswith("tags: [")
    lines[MISTAKE_LINE - 1] = lines[MISTAKE_LINE - 1].replace("tags: [", "tags [", 1)  # no colon
    broken = "\n".join(lines) + "\n" + LONG_LINE + "\n"
    _checked_after(page, lambda: set_code_editor_text(page, broken))
    assert page.locator("#markdown").input_value() == broken  # the form posts what is shown

    # The check's problem is on the mistake's own line, in the list and in the editor.
    button = page.locator("#problems button.line").first
    assert button.inner_text() == f"line {MISTAKE_LINE}"
    assert "not valid YAML" in page.locator("#problems").inner_text()
    page.evaluate("document.querySelector('#markdown-editor .cm-scroller').scrollTop = 0")
    page.locator("#markdown-editor .cm-lintRange-error").first.wait_for()
    assert _line_of(page, ".cm-lintRange-error") == MISTAKE_LINE
    marker = page.locator("#markdown-editor .cm-gutter-lint .cm-lint-marker-error").first
    row = numbers.filter(has_text=re.compile(rf"^{MISTAKE_LINE}$"))
    assert abs(marker.bounding_box()["y"] - row.bounding_box()["y"]) < 4

    assert _scrolled_to(page, "#markdown-editor .cm-line", has_text="tensor.view(-1)")
    long_row = page.locator("#markdown-editor .cm-line", has_text="tensor.view(-1)")
    line_height = page.locator("#markdown-editor .cm-line").first.bounding_box()["height"]
    assert long_row.bounding_box()["height"] > 2 * line_height  # wrapped, not cut
    # No line runs off: the long one wraps inside the editor, and the page keeps its width.
    sizes = page.evaluate(
        """() => { const s = document.querySelector("#markdown-editor .cm-scroller");
        return [s.scrollWidth, s.clientWidth]; }"""
    )
    assert sizes[0] <= sizes[1], f"the editor scrolls sideways at {width} px: {sizes}"
    overflow = page.evaluate(
        "document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 0, f"the page scrolls sideways at {width} px"

    # The site's colours for the scheme, not CodeMirror's own light theme.
    colours = page.evaluate(
        """() => [getComputedStyle(document.querySelector("#markdown-editor")).backgroundColor,
                  getComputedStyle(document.documentElement).backgroundColor]"""
    )
    assert colours[0] == colours[1]
    if scheme == "dark":
        assert colours[0] == "rgb(22, 24, 27)"

    # The problem's button takes the cursor to its line in the code editor.
    button.click()
    assert _line_of(page, ".cm-activeLine") == MISTAKE_LINE
    page.screenshot(path=str(ARTIFACTS / f"editor-{device}-{scheme}.png"))


def test_the_code_editor_is_a_same_origin_module_under_the_sites_csp(site):
    base, _ = site
    with urllib.request.urlopen(base + "/static/editor.js", timeout=10) as response:
        csp = response.headers["Content-Security-Policy"]
        body = response.read().decode()
    assert "script-src 'self'" in csp and "unsafe-eval" not in csp and "unsafe-inline" not in csp
    assert 'from "./vendor/codemirror/codemirror.js"' in body
    status, bundle = get(base + "/static/vendor/codemirror/codemirror.js")
    assert status == 200
    assert "eval(" not in bundle and "new Function(" not in bundle  # the CSP would refuse both


def test_a_save_in_the_code_editor_says_saved(open_editor):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page = open_editor("/entries/stack-vs-cat/edit", viewport={"width": 1366, "height": 900})
    content = _code_editor(page).locator(".cm-content")
    content.click()
    page.keyboard.press("Control+End")
    page.keyboard.type("\nA line typed in the code editor.\n")
    assert "A line typed in the code editor." in page.locator("#markdown").input_value()
    page.fill("#message", "Add a line from the code editor")
    page.click("#save")
    page.wait_for_url("**/entries/stack-vs-cat")  # the notice's query is dropped from the address
    notice = page.locator("#saved")
    assert notice.get_attribute("role") == "status"
    assert notice.inner_text().startswith("Saved as revision 2")
    assert "A line typed in the code editor." in page.locator("article.entry").inner_text()
    page.screenshot(path=str(ARTIFACTS / "editor-saved.png"))


def test_without_javascript_the_plain_textarea_saves(open_editor):
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page = open_editor(
        "/entries/cuda-device-side-assert/edit",
        viewport={"width": 390, "height": 844},
        java_script_enabled=False,
    )
    source = page.locator("#markdown")
    assert source.is_visible() and page.locator(".cm-editor").count() == 0
    source.fill(source.input_value() + "\nA line written without JavaScript.\n")
    page.fill("#message", "Add a line without JavaScript")
    page.screenshot(path=str(ARTIFACTS / "editor-no-js.png"))
    page.click("#save")
    page.wait_for_url("**/entries/cuda-device-side-assert?saved=2")
    assert page.locator("#saved[role=status]").inner_text() == "Saved as revision 2."
    assert "A line written without JavaScript." in page.locator("article.entry").inner_text()
