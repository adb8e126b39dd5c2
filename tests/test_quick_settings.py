"""The settings read without pydantic (app.quick_settings) against pydantic-settings: the same
fields with the same defaults and bounds, the same value for every field wherever the quick
reader answers, and no answer (pydantic decides) wherever pydantic refuses a value."""

import os
from pathlib import Path

import pytest
from annotated_types import Ge, Gt, Le

from app.quick_settings import FIELDS, QuickSettings, quick_settings
from app.settings import Settings, SettingsError, load_settings


@pytest.fixture(autouse=True)
def _clean_environment(tmp_path: Path, monkeypatch):
    for name in list(os.environ):
        if name.lower().startswith("pitfalls_"):
            monkeypatch.delenv(name)
    monkeypatch.chdir(tmp_path)


def _both() -> tuple[QuickSettings | None, Settings | None]:
    try:
        full: Settings | None = load_settings()
    except SettingsError:
        full = None
    return quick_settings(), full


def _assert_same(quick: QuickSettings | None, full: Settings | None) -> None:
    """Where pydantic refuses, the quick reader does not answer; where it answers, every field
    is what pydantic read."""
    if full is None:
        assert quick is None
        return
    if quick is None:
        return  # unsure: the caller reads with pydantic, which is always right
    for name in Settings.model_fields:
        assert getattr(quick, name) == getattr(full, name), name
        assert type(getattr(quick, name)) is type(getattr(full, name)), name


def test_the_fields_mirror_the_pydantic_settings():
    assert list(FIELDS) == list(Settings.model_fields)
    for name, info in Settings.model_fields.items():
        field = FIELDS[name]
        assert field.default == info.default, name
        bounds = {"ge": None, "gt": None, "le": None}
        for rule in info.metadata:
            if isinstance(rule, Ge):
                bounds["ge"] = rule.ge
            elif isinstance(rule, Gt):
                bounds["gt"] = rule.gt
            elif isinstance(rule, Le):
                bounds["le"] = rule.le
        assert (field.ge, field.gt, field.le) == (bounds["ge"], bounds["gt"], bounds["le"]), name


def test_no_configuration_reads_the_same_and_answers(tmp_path: Path):
    quick, full = _both()
    assert quick is not None
    _assert_same(quick, full)
    (tmp_path / "content").mkdir()
    quick, full = _both()
    assert quick is not None and quick.content_dir == Path("content")
    _assert_same(quick, full)


def _texts_for(name: str) -> list[str]:
    """Values worth trying for one field: good ones, bad ones, and each side of each bound."""
    field = FIELDS[name]
    kind = field.kind
    if isinstance(kind, tuple):
        return [*kind, kind[0].upper(), "", " " + kind[0], "other"]
    if kind == "bool":
        return ["1", "0", "true", "False", "YES", "no", "on", "Off", "t", "f", "y", "n", "",
                " true", "maybe", "2"]  # fmt: skip
    if kind in ("int", "float"):
        texts = [
            "0",
            "1",
            "7",
            "007",
            "-1",
            "",
            " 5",
            "5 ",
            "1_000",
            "1e3",
            "2.5",
            "abc",
            "99999999",
        ]
        for bound in (field.ge, field.gt, field.le):
            if bound is not None:
                texts += [str(int(bound) + step) for step in (-1, 0, 1)]
        return texts
    if kind in ("path", "optional path"):
        return ["data2", "", " ", "/abs/where", "rel/dir", " spaced "]
    return ["", " ", "x", " padded ", "/kb", "/kb/", "https://kb.example.org/", "http://x",
            "kb", "sqlite:///x.db", "mysql://x", "debug", "JSON", "a=admin", "a=boss",
            "k" * 40, "k" * 5]  # fmt: skip


@pytest.mark.parametrize("name", list(FIELDS))
def test_every_value_of_every_field_reads_as_pydantic_reads_it(name: str, monkeypatch):
    answered = 0
    for text in _texts_for(name):
        monkeypatch.setenv(f"PITFALLS_{name.upper()}", text)
        quick, full = _both()
        _assert_same(quick, full)
        answered += quick is not None
    assert answered  # the plain values are read, not all left to pydantic


def test_names_in_any_case_and_the_env_file_in_pydantics_order(tmp_path: Path, monkeypatch):
    (tmp_path / ".env").write_text(
        "PITFALLS_SEARCH_PAGE_SIZE=33\n"
        "export PITFALLS_LOG_LEVEL='debug'\n"
        "pitfalls_session_days=3  # a comment\n"
        'PITFALLS_OIDC_PROVIDER_NAME="Acme ID"\n'
        "OTHER=1\n"
        "PITFALLS_NOT_A_SETTING=1\n"
    )
    monkeypatch.setenv("pitfalls_search_page_size", "44")  # the environment wins over the file
    quick, full = _both()
    assert quick is not None and full is not None
    _assert_same(quick, full)
    assert (quick.search_page_size, quick.log_level, quick.session_days) == (44, "debug", 3)  # type: ignore[attr-defined]
    assert quick.oidc_provider_name == "Acme ID"  # type: ignore[attr-defined]


def test_derived_rules_refuse_as_pydantic_does(tmp_path: Path, monkeypatch):
    (tmp_path / "afile").write_text("")
    cases = [
        {"PITFALLS_DATA_DIR": str(tmp_path / "afile")},
        {"PITFALLS_OIDC_DISCOVERY_URL": "https://id.example.org/.well-known/openid-configuration"},
        {"PITFALLS_LOCAL_PASSWORDS": "false"},
        {
            "PITFALLS_LOCAL_PASSWORDS": "false",
            "PITFALLS_OIDC_DISCOVERY_URL": "https://id.example.org/.well-known/openid-configuration",
            "PITFALLS_OIDC_CLIENT_ID": "kb",
        },
    ]
    for case in cases:
        with monkeypatch.context() as patch:
            for name, value in case.items():
                patch.setenv(name, value)
            _assert_same(*_both())


def test_unsure_cases_are_left_to_pydantic(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("PITFALLS_MAX_PASTE_BYTES", "12")  # under its bound
    assert quick_settings() is None
    monkeypatch.delenv("PITFALLS_MAX_PASTE_BYTES")
    (tmp_path / ".env").write_text("PITFALLS_LOG_LEVEL\n")  # a name with no value
    assert quick_settings() is None


def test_full_settings_reads_the_same_sources(monkeypatch):
    from app.settings import full_settings

    monkeypatch.setenv("PITFALLS_SEARCH_PAGE_SIZE", "12")
    quick = quick_settings()
    assert quick is not None
    full = full_settings(quick)
    assert isinstance(full, Settings) and full.search_page_size == 12
    assert full_settings(full) is full
