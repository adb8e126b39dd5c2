"""The pytest plugin in real pytest runs (subprocesses over test files written here): a test
that dies of a known PyTorch error gets the pitfall in its report and in the terminal summary,
the outcome never changes, and the plugin stays off unless asked for.

The editable install's entry points are those of another checkout, so the runs load the plugin
as a module (`-p app.pytest_plugin`, or PYTEST_PLUGINS), and `-p pitfalls` is tried through an
entry point declared exactly as pyproject.toml declares it.
"""

import importlib.util
import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

import pytest

from app.settings import load_settings
from tests.conftest import REPO, REPO_CONTENT, require, running_server
from tests.prepared import prepare_data_dir

pytestmark = pytest.mark.e2e

FAILING = textwrap.dedent("""
    import torch


    def test_shapes():
        torch.nn.Linear(4, 2)(torch.ones(3, 5))


    def test_plain_assert():
        assert 1 + 1 == 3


    def test_passes():
        assert True
""")
TITLE = "Computing Conv2d/MaxPool2d output sizes and the in_features of the first Linear layer"


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory) -> Path:
    data = tmp_path_factory.mktemp("plugin") / "data"
    prepare_data_dir(load_settings(data_dir=data, content_dir=REPO_CONTENT), tmp_path_factory)
    return data


@pytest.fixture
def env(data_dir) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PITFALLS_", "PYTEST_"))}
    env.update(
        PITFALLS_DATA_DIR=str(data_dir),
        PITFALLS_CONTENT_DIR=str(REPO_CONTENT),
        PYTHONPATH=str(REPO),
        PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",  # only the plugins each run names
    )
    return env


def run_pytest(folder: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args, "test_it.py"],
        capture_output=True, text=True, env=env, cwd=folder, timeout=300,
    )  # fmt: skip


@pytest.fixture
def failing(tmp_path) -> Path:
    (tmp_path / "test_it.py").write_text(FAILING, encoding="utf-8")
    return tmp_path


def outcome(result: subprocess.CompletedProcess) -> str:
    return result.stdout.strip().splitlines()[-1].split(" in ")[0]


def test_a_known_error_gets_the_pitfall_in_its_report_and_the_summary(failing, env):
    result = run_pytest(failing, env, "-p", "app.pytest_plugin")
    assert result.returncode == 1, result.stdout[-3000:]
    out = result.stdout
    assert outcome(result).lstrip("= ") == "2 failed, 1 passed"  # the outcome, unchanged
    # The failure's own report: its traceback, then the section with the title, fix and link.
    report = out[out.index("_ test_shapes _") : out.index("_ test_plain_assert _")]
    section = report[report.index("- Pitfalls -") :]
    assert f"{TITLE}  [conv-output-shape]" in section
    assert "mat1: 3x5" in section and "Fix:" in section and "nn.LazyLinear" in section
    assert "more: pitfalls " in section
    assert "Pitfalls" not in out[out.index("_ test_plain_assert _") :].split("=== pitfalls")[0]
    summary = out[out.index("pitfalls: known PyTorch errors") :]
    assert TITLE in summary and "failed: test_it.py::test_shapes" in summary
    assert "test_plain_assert" not in summary.split("short test summary")[0]
    assert "FAILED test_it.py::test_shapes - RuntimeError: mat1 and mat2" in out


def test_a_passing_file_is_unaffected(tmp_path, env):
    (tmp_path / "test_it.py").write_text("def test_fine():\n    assert True\n", encoding="utf-8")
    result = run_pytest(tmp_path, env, "-p", "app.pytest_plugin")
    assert result.returncode == 0 and outcome(result).lstrip("= ") == "1 passed"
    assert "pitfalls" not in result.stdout.lower()


def test_loaded_it_is_off_until_asked_for_by_flag_or_ini(failing, env):
    loaded = {**env, "PYTEST_PLUGINS": "app.pytest_plugin"}  # loaded as an entry point would be
    off = run_pytest(failing, loaded)
    assert off.returncode == 1 and "Pitfalls" not in off.stdout
    flag = run_pytest(failing, loaded, "--pitfalls")
    assert flag.returncode == 1 and TITLE in flag.stdout
    (failing / "pytest.ini").write_text("[pytest]\npitfalls = true\n", encoding="utf-8")
    ini = run_pytest(failing, loaded)
    assert ini.returncode == 1 and TITLE in ini.stdout
    assert outcome(off) == outcome(flag) == outcome(ini)


def test_the_entry_point_of_pyproject_makes_dash_p_pitfalls_work(failing, env, tmp_path):
    declared = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    points = declared["project"]["entry-points"]["pytest11"]
    assert points == {"pitfalls": "app.pytest_plugin"}
    # What pip writes for it, in a distribution of its own on the path.
    site = tmp_path / "site"
    info = site / "pitfalls_entry_point-0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: pitfalls-entry-point\nVersion: 0\n", encoding="utf-8"
    )
    (info / "entry_points.txt").write_text(
        "[pytest11]\n" + "".join(f"{name} = {value}\n" for name, value in points.items()),
        encoding="utf-8",
    )
    installed = {**env, "PYTHONPATH": os.pathsep.join([str(REPO), str(site)])}
    result = run_pytest(failing, installed, "-p", "pitfalls")
    assert result.returncode == 1 and f"{TITLE}  [conv-output-shape]" in result.stdout


def test_an_unreachable_server_is_one_line_and_the_outcome_stays(failing, env):
    result = run_pytest(
        failing, env, "-p", "app.pytest_plugin", "--pitfalls-server", "http://127.0.0.1:9"
    )
    assert result.returncode == 1 and outcome(result).lstrip("= ") == "2 failed, 1 passed"
    notes = [line for line in result.stdout.splitlines() if "could not explain" in line]
    assert notes and all("cannot reach http://127.0.0.1:9" in line for line in notes)
    assert TITLE not in result.stdout


def test_with_a_server_the_answer_and_its_link_come_from_it(
    failing, env, tmp_path, tmp_path_factory
):
    served = tmp_path / "served-data"  # the server's own copy of the prepared data dir
    prepare_data_dir(load_settings(data_dir=served, content_dir=REPO_CONTENT), tmp_path_factory)
    settings = {"PITFALLS_DATA_DIR": str(served), "PITFALLS_CONTENT_DIR": str(REPO_CONTENT)}
    folder = tmp_path / "server"
    folder.mkdir()
    with running_server(folder, settings=settings, fresh=False) as (base, _):
        remote = {**env, "PITFALLS_DATA_DIR": str(tmp_path / "unused")}  # only the server answers
        result = run_pytest(failing, remote, "-p", "app.pytest_plugin", "--pitfalls-server", base)
    assert result.returncode == 1 and outcome(result).lstrip("= ") == "2 failed, 1 passed"
    assert f"{TITLE}  [conv-output-shape]" in result.stdout
    assert f"more: {base}/entries/conv-output-shape" in result.stdout
    assert not (tmp_path / "unused").exists()


def test_under_xdist_the_summary_comes_from_the_workers_reports(failing, env):
    require(importlib.util.find_spec("xdist") is not None, "pytest-xdist is not installed")
    result = run_pytest(failing, env, "-p", "xdist.plugin", "-n", "2", "-p", "app.pytest_plugin")
    assert result.returncode == 1 and outcome(result).lstrip("= ") == "2 failed, 1 passed"
    summary = result.stdout[result.stdout.index("pitfalls: known PyTorch errors") :]
    assert TITLE in summary and "failed: test_it.py::test_shapes" in summary
