"""Schemathesis over the whole OpenAPI of a real server, anonymous and with a write token.

Every check is on (`--checks all`), the example count is bounded so that CI stays short; the
run must find no 5xx and no response that breaks the documented schema.
"""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import require, running_server, write_token

pytestmark = pytest.mark.e2e

EXAMPLES_PER_OPERATION = "15"


def _schemathesis() -> str | None:
    return shutil.which("st", path=str(Path(sys.executable).parent)) or shutil.which("st")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    require(_schemathesis() is not None, "schemathesis (the `st` command) is not installed")
    with running_server(tmp_path_factory.mktemp("schemathesis")) as started:
        yield started


@pytest.mark.parametrize("who", ["anonymous", "write token"])
def test_every_operation_answers_as_documented_and_never_5xx(server, who, tmp_path):
    base, clone = server
    command = [
        str(_schemathesis()),
        "--config-file",
        str(Path(__file__).with_name("schemathesis.toml")),
        "run",
        f"{base}/openapi.json",
        "--checks",
        "all",
        "--max-examples",
        EXAMPLES_PER_OPERATION,
        "--generation-deterministic",
        "--no-color",
    ]
    if who == "write token":
        command += ["--header", f"Authorization: Bearer {write_token(clone)}"]
    # In a folder of its own: schemathesis keeps its example database in the working folder.
    run = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert run.returncode == 0, run.stdout[-12_000:] + run.stderr[-2_000:]
