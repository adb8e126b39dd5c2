"""The documentation (the README and docs/) documents every setting and every command, and the
README's first screen says what this is and the two commands."""

from app.cli import cli
from app.settings import Settings
from tests.conftest import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")
DOCS = "\n".join(
    [README, *(path.read_text(encoding="utf-8") for path in sorted((REPO / "docs").glob("*.md")))]
)


def test_every_setting_is_documented():
    missing = [
        f"PITFALLS_{name.upper()}"
        for name in Settings.model_fields
        if f"PITFALLS_{name.upper()}" not in DOCS
    ]
    assert missing == []


def test_every_command_is_documented():
    names = []
    for name, command in cli.every_command().items():
        names.append(name)
        names += [f"{name} {sub}" for sub in getattr(command, "commands", {})]
    missing = [name for name in names if f"`pitfalls {name}" not in DOCS]
    assert missing == []


def test_first_screen_has_the_two_commands():
    first_screen = "\n".join(README.splitlines()[:12])
    assert "pip install . && pitfalls serve" in first_screen
    assert 'pip install -e ".[test]" && pytest' in first_screen
    # CI runs the README's test command, exactly.
    test_line = next(line for line in first_screen.splitlines() if "# test it" in line)
    command = test_line.split("&&", 1)[1].split("#", 1)[0].strip()
    assert command in (REPO / ".ci" / "run").read_text().splitlines()


def test_the_readme_links_every_page_of_docs():
    pages = sorted(path.name for path in (REPO / "docs").glob("*.md"))
    assert pages and [page for page in pages if f"(docs/{page})" not in README] == []
