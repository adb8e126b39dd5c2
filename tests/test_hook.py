"""The hook where errors happen: a real IPython kernel running a notebook, and a plain script.

The notebook loads the extension, then raises a known error and an unknown one; the cell output
keeps the original traceback and adds the pitfall (HTML and text) below it. The script installs
the hook and dies: stderr holds the traceback exactly as Python prints it, then the match.
"""

import importlib.util
import os
import re
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import require

pytestmark = pytest.mark.e2e

KNOWN = (
    "view size is not compatible with input tensor's size and stride (at least one dimension "
    "spans across two contiguous subspaces). Use .reshape(...) instead."
)
UNKNOWN = "the flux capacitor of shard 7 is unaligned"


# A line of view-non-contiguous's `python fix` block: the text output keeps the Fix's code.
FIX_LINE = "b = y.contiguous().view(2, -1)  # same result, explicit copy"
# A library (by its path: a site-packages folder) that raises the known error two calls deep.
LIBRARY = f"""
def reshape_all():
    return _inner()


def _inner():
    raise RuntimeError({KNOWN!r})
"""


@pytest.fixture
def hook_env(real_settings) -> dict[str, str]:
    """The environment of a script or kernel whose hook reads a prepared data dir."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PITFALLS_")}
    env["PITFALLS_DATA_DIR"] = str(real_settings.data_dir)
    env["PITFALLS_CONTENT_DIR"] = str(real_settings.content_dir)
    # A data dir that is not ready yet (on PostgreSQL, say) is prepared first: that can take
    # longer than 30 s on a loaded machine.
    env["PITFALLS_HOOK_WAIT_S"] = "600"
    return env


def test_the_notebook_extension_adds_the_pitfall_under_the_original_traceback(
    tmp_path, monkeypatch, hook_env
):
    for module in ("nbclient", "nbformat", "ipykernel"):
        require(importlib.util.find_spec(module) is not None, f"{module} is not installed")
    import nbformat
    from nbclient import NotebookClient

    for key, value in hook_env.items():
        monkeypatch.setenv(key, value)
    library = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    library.mkdir(parents=True)
    (library / "fakelib.py").write_text(LIBRARY, encoding="utf-8")
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_code_cell(
            f"%load_ext pitfalls\nimport sys\nsys.path.insert(0, {str(library)!r})"
        ),
        nbformat.v4.new_code_cell("import fakelib\nfakelib.reshape_all()"),
        nbformat.v4.new_code_cell(f"raise ValueError({UNKNOWN!r})"),
        nbformat.v4.new_code_cell("print('the kernel lives on')"),
    ]
    NotebookClient(
        notebook, timeout=120, kernel_name="python3", allow_errors=True,
        resources={"metadata": {"path": str(tmp_path)}},
    ).execute()  # fmt: skip
    known, unknown, after = notebook.cells[1].outputs, notebook.cells[2].outputs, notebook.cells[3]
    errors = [o for o in known if o.output_type == "error"]
    assert errors and errors[0].ename == "RuntimeError" and errors[0].evalue == KNOWN
    plain = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(errors[0].traceback))  # no colours
    assert "fakelib.reshape_all()" in plain
    shown = [o for o in known if o.output_type == "display_data"]
    assert shown, known
    text = shown[0].data["text/plain"]
    assert "view-non-contiguous" in text
    assert FIX_LINE in map(str.strip, text.splitlines())  # the Fix's code, not only its prose
    assert "pitfalls show view-non-contiguous" in text
    # The cell's frame first with its code; the library's two (and IPython's own) folded.
    lines = text.splitlines()
    assert re.fullmatch(r"  Your last frame: .+, line 2, in <module>", lines[1]), text
    assert lines[2] == "      fakelib.reshape_all()"
    folded = re.fullmatch(r"  … (\d+) library frames folded", lines[3])
    assert folded and int(folded[1]) >= 2, text
    html = shown[0].data["text/html"]
    assert "Pitfalls:" in html and "non-contiguous" in html and "reshape" in html
    assert [o.output_type for o in known].index("error") < [o.output_type for o in known].index(
        "display_data"
    ), "the pitfall must come after the original traceback"
    assert [o.ename for o in unknown if o.output_type == "error"] == ["ValueError"]
    assert any(
        "no known pitfall" in o.data["text/plain"]
        for o in unknown
        if o.output_type == "display_data"
    )
    assert after.outputs[0].text == "the kernel lives on\n"


def test_a_script_with_the_hook_prints_its_traceback_unchanged_then_the_match(tmp_path, hook_env):
    library = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    library.mkdir(parents=True)
    (library / "fakelib.py").write_text(LIBRARY, encoding="utf-8")
    body = (
        f"import sys\nsys.path.insert(0, {str(library)!r})\nimport fakelib\n\n\n"
        "def main():\n    fakelib.reshape_all()\n\n\nmain()\n"
    )
    script = tmp_path / "train.py"
    script.write_text("pass\npass\n" + body, encoding="utf-8")  # the same lines as below
    plain = subprocess.run(
        [sys.executable, str(script)], capture_output=True, text=True, env=hook_env
    )
    hooked = tmp_path / "hooked.py"
    hooked.write_text("import pitfalls\npitfalls.install()\n" + body, encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(hooked)], capture_output=True, text=True, env=hook_env
    )
    assert result.returncode == plain.returncode == 1
    original = plain.stderr.replace(str(script), str(hooked))
    assert result.stderr.startswith(original), result.stderr
    rest = result.stderr[len(original) :]
    assert rest.startswith("Pitfalls: ") and "[view-non-contiguous]" in rest
    # The user's last frame first, with its code; the library's two frames folded.
    assert (
        f"  Your last frame: {hooked}, line 9, in main\n"
        "      fakelib.reshape_all()\n"
        f"    called from {hooked}, line 12, in <module>\n"
        "  … 2 library frames folded\n"
    ) in rest
    lines = rest.splitlines()
    assert "  Fix:" in lines and "    ```python fix" in lines
    assert f"    {FIX_LINE}" in lines  # the Fix section's code, not only its prose
    assert lines[-1] == "  the whole entry: pitfalls show view-non-contiguous"


def test_a_failing_hook_is_one_line_and_never_hides_the_traceback(tmp_path, hook_env):
    hooked = tmp_path / "hooked.py"
    hooked.write_text(
        textwrap.dedent(f"""
            import pitfalls
            pitfalls.install(server="http://127.0.0.1:9")  # nothing listens there
            raise RuntimeError({KNOWN!r})
        """),
        encoding="utf-8",
    )
    result = subprocess.run(
        [sys.executable, str(hooked)], capture_output=True, text=True, env=hook_env
    )
    lines = result.stderr.strip().splitlines()
    assert lines[0] == "Traceback (most recent call last):"
    assert lines[-2] == f"RuntimeError: {KNOWN}"
    assert lines[-1].startswith("pitfalls: could not explain this error (")


def test_python_m_pitfalls_run_a_script_adds_the_match_after_its_output(tmp_path, hook_env):
    script = tmp_path / "train.py"
    script.write_text(f"print('epoch 1')\nraise RuntimeError({KNOWN!r})\n", encoding="utf-8")
    result = subprocess.run(
        [sys.executable, "-m", "pitfalls", "run", str(script)],
        capture_output=True, text=True, env=hook_env, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stdout.startswith("epoch 1")
    assert f"RuntimeError: {KNOWN}" in result.stderr and "view-non-contiguous" in result.stderr
