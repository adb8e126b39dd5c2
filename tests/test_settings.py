"""Settings: defaults that need no configuration, and bad values that say what to do."""

from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli import cli
from app.settings import SettingsError, load_settings


def test_defaults_live_in_the_data_dir(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "content").mkdir()
    settings = load_settings()
    assert settings.data_dir == Path("data")
    assert settings.database_url == "sqlite:///data/pitfalls.db"
    assert settings.index_dir == Path("data/index")
    assert settings.content_dir == Path("content")


def test_without_a_content_folder_the_shipped_entries_are_used(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    settings = load_settings()
    assert (settings.content_dir / "view-non-contiguous.md").is_file()


def test_an_empty_folder_setting_means_its_default(tmp_path: Path, monkeypatch):
    # Set but empty (a compose file's `PITFALLS_INDEX_DIR=`) is the documented default, not ".".
    monkeypatch.chdir(tmp_path)
    (tmp_path / "content").mkdir()
    monkeypatch.setenv("PITFALLS_INDEX_DIR", "")
    monkeypatch.setenv("PITFALLS_CONTENT_DIR", " ")
    settings = load_settings()
    assert settings.index_dir == Path("data/index")
    assert settings.content_dir == Path("content")


def test_environment_and_dotenv_are_read(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / ".env").write_text("PITFALLS_DATA_DIR=from-dotenv\n")
    assert load_settings().data_dir == Path("from-dotenv")
    monkeypatch.setenv("PITFALLS_DATA_DIR", "from-env")
    assert load_settings().data_dir == Path("from-env")


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        ("PITFALLS_DATABASE_URL", "mysql://x", "PITFALLS_DATABASE_URL: unsupported database URL"),
        (
            "PITFALLS_SQLITE_BUSY_TIMEOUT_MS",
            "soon",
            "PITFALLS_SQLITE_BUSY_TIMEOUT_MS: Input should be a valid integer",
        ),
        (
            "PITFALLS_SEARCH_PAGE_SIZE",
            "0",
            "PITFALLS_SEARCH_PAGE_SIZE: Input should be greater than or equal to 1",
        ),
    ],
)
def test_bad_values_stop_with_a_message(monkeypatch, variable: str, value: str, expected: str):
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingsError) as caught:
        load_settings()
    assert expected in str(caught.value)
    result = CliRunner().invoke(cli, ["search", "anything"])
    assert result.exit_code == 2
    assert expected in result.output


def test_data_dir_that_is_a_file_is_refused(tmp_path: Path, monkeypatch):
    (tmp_path / "afile").write_text("x")
    monkeypatch.setenv("PITFALLS_DATA_DIR", str(tmp_path / "afile"))
    with pytest.raises(SettingsError, match="exists and is not a folder"):
        load_settings()


def test_importing_the_app_opens_nothing(tmp_path: Path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    import importlib

    import app.cli
    import app.web

    importlib.reload(app.web)
    importlib.reload(app.cli)
    assert not (tmp_path / "data").exists()
