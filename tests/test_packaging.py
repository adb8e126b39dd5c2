"""The package finds templates/, static/, content/ and migrations/ installed and from a clone."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

import app
from app.resources import resource_dir
from tests.conftest import REPO, require

FOLDERS = {
    "templates": "base.html",
    "static": "style.css",
    "content": "view-non-contiguous.md",
    "migrations": "env.py",
}


def test_from_a_clone_the_folders_beside_the_package_are_used():
    if Path(app.__file__).resolve().parent.parent != REPO:
        return  # an installed copy is tested below
    for folder in FOLDERS:
        assert resource_dir(folder) == REPO / folder


@pytest.mark.slow  # builds a wheel and runs it in a fresh environment
def test_the_wheel_carries_the_folders_and_runs_outside_the_clone(tmp_path: Path):
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(REPO)],
        capture_output=True,
        text=True,
    )
    require(built.returncode == 0, f"cannot build the wheel here: {built.stderr[-500:]}")
    (wheel,) = tmp_path.glob("pitfalls-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for folder, sample in FOLDERS.items():
        assert f"app/{folder}/{sample}" in names
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PITFALLS_")}
    env["PYTHONPATH"] = str(site)
    script = (
        "import app, sys; from app.resources import resource_dir;"
        f"assert app.__file__.startswith({str(site)!r}), app.__file__;"
        "print(resource_dir('templates'));"
        "from app.cli import main; sys.argv = ['pitfalls', 'ingest']; main()"
    )
    run = subprocess.run(
        [sys.executable, "-c", script], cwd=workdir, env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.startswith(str(site / "app" / "templates"))
    assert "ingest: " in run.stdout and " 0 broken" in run.stdout
    assert (workdir / "data" / "pitfalls.db").is_file()
