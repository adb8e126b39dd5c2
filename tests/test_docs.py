"""The README documents every setting and every command."""

from app.cli import cli
from app.settings import Settings
from tests.conftest import REPO

README = (REPO / "README.md").read_text(encoding="utf-8")


def test_every_setting_is_documented():
    missing = [
        f"PITFALLS_{name.upper()}"
        for name in Settings.model_fields
        if f"PITFALLS_{name.upper()}" not in README
    ]
    assert missing == []


def test_every_command_is_documented():
    names = []
    for name, command in cli.commands.items():
        names.append(name)
        names += [f"{name} {sub}" for sub in getattr(command, "commands", {})]
    missing = [name for name in names if f"`pitfalls {name}" not in README]
    assert missing == []


def test_first_screen_has_the_two_commands():
    first_screen = "\n".join(README.splitlines()[:12])
    assert "pip install . && pitfalls serve" in first_screen
    assert 'pip install -e ".[test]" && pytest' in first_screen
