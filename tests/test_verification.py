"""`pitfalls verify` machinery, on small snippets that need no torch."""

import json
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from click.testing import CliRunner
from sqlmodel import Session, col, select

from app.cli import cli
from app.entry_details import get_entry_details
from app.ingest import ingest_content
from app.matching import SignatureMatcher, SignatureRecord
from app.models import Verification
from app.sandbox import Unsandboxed
from app.verification import SandboxRequired, WikiEntriesNamed, verify_entries, verify_snippets
from app.verification.running import judge_repro, run_snippet
from app.verification.snippets import (
    Environment,
    SnippetToRun,
    imported_modules,
    unmet_requirement,
)
from tests.conftest import entry_text

# In the slow lane: most tests run entries' snippets in real processes.
pytestmark = pytest.mark.slow

MATCHER = SignatureMatcher(
    [
        SignatureRecord(
            "mine",
            0,
            r"widget (?P<n>\d+) is broken",
            "ValueError: widget 3 is broken",
            "ValueError",
        ),
        SignatureRecord(
            "theirs", 0, r"gadget overheated", "RuntimeError: gadget overheated", "RuntimeError"
        ),
    ]
)
ENV = Environment(
    python=sys.executable,
    python_version="3.11",
    platform="test",
    torch_version=None,
    cuda=False,
    gpus=0,
    packages={"json": True},
)


def run(code: str, role: str = "fix", **options) -> tuple[str, str]:
    snippet = SnippetToRun("mine", 0, role, code, {k: str(v) for k, v in options.items()})
    result = run_snippet(snippet, ENV, MATCHER, timeout_s=10, memory_mb=512)
    return result.status, result.reason


def test_fix_that_exits_zero_passes():
    assert run("print('ok')") == ("passed", "")


def test_fix_that_raises_fails_with_its_output():
    status, reason = run("raise KeyError('lost')")
    assert status == "failed"
    assert reason.startswith("exited with code 1:") and "KeyError: 'lost'" in reason


def test_repro_with_its_own_error_passes():
    assert run("raise ValueError('widget 42 is broken')", role="repro") == ("passed", "")


def test_repro_that_does_not_fail_fails():
    assert run("print('fine')", role="repro") == ("failed", "it exited 0: a repro must fail")


def test_repro_with_another_entrys_error_fails():
    status, reason = run("raise RuntimeError('gadget overheated')", role="repro")
    assert status == "failed"
    assert reason == "its error is matched first by entry 'theirs': RuntimeError: gadget overheated"


def test_repro_with_an_unknown_error_fails():
    status, reason = run("raise TypeError('nobody knows me')", role="repro")
    assert (status, reason) == (
        "failed",
        "its error matches no signature: TypeError: nobody knows me",
    )


def test_repro_chained_error_counts_when_the_last_matches_nothing():
    code = (
        "try:\n    raise ValueError('widget 7 is broken')\n"
        "except ValueError as e:\n    raise SystemError('wrapper') from e\n"
    )
    assert run(code, role="repro") == ("passed", "")


def test_timeout_kills_the_snippet_and_its_children():
    code = (
        "import subprocess, sys, time\n"
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        "time.sleep(60)\n"
    )
    snippet = SnippetToRun("mine", 0, "fix", code, {"timeout": "1"})
    result = run_snippet(snippet, ENV, MATCHER, timeout_s=10, memory_mb=512)
    assert (result.status, result.reason) == ("failed", "timed out after 1 s")
    assert result.duration_ms < 5000


def test_crash_is_reported_with_its_signal():
    status, reason = run("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)")
    assert status == "failed" and reason.startswith("crashed with SIGSEGV")


def test_memory_cap_stops_a_runaway_snippet():
    status, reason = run("x = bytearray(2 * 1024 ** 3)")
    assert status == "failed" and "MemoryError" in reason


def test_runs_in_a_private_temporary_folder(tmp_path: Path):
    status, _ = run(
        "import os\nopen('out.txt', 'w').write('x')\nassert os.getcwd() != " + repr(str(Path.cwd()))
    )
    assert status == "passed"
    assert not (Path.cwd() / "out.txt").exists()


@pytest.mark.parametrize(
    ("options", "code", "reason"),
    [
        ({"requires": "cuda"}, "pass", "requires cuda: torch is not installed"),
        ({"requires": "cuda,gpus=2"}, "pass", "requires cuda: torch is not installed"),
        (
            {"requires": "surely_not_a_package_xyz"},
            "pass",
            "requires surely_not_a_package_xyz: the package is not installed",
        ),
        (
            {},
            "import surely_not_a_package_xyz",
            "imports surely_not_a_package_xyz: the package is not installed",
        ),
    ],
)
def test_unmet_requirements_are_skipped_with_the_reason(options, code, reason):
    snippet = SnippetToRun("mine", 0, "repro", code, options)
    assert unmet_requirement(snippet, ENV) == reason
    result = run_snippet(snippet, ENV, MATCHER)
    assert (result.status, result.reason) == ("skipped", reason)


def test_no_cuda_requirement_skips_on_a_gpu_machine():
    gpu = Environment(sys.executable, "3.11", "t", "2.13.0", True, 1, {"torch": True})
    snippet = SnippetToRun("mine", 0, "repro", "import torch", {"requires": "no-cuda"})
    assert (
        unmet_requirement(snippet, gpu)
        == "requires no-cuda: it shows the error of a machine without CUDA"
    )
    cpu = Environment(sys.executable, "3.11", "t", "2.13.0", False, 0, {"torch": True})
    assert unmet_requirement(snippet, cpu) is None


def test_gpu_count_requirement():
    env = Environment(sys.executable, "3.11", "t", "2.13.0", True, 1, {"torch": True})
    snippet = SnippetToRun("mine", 0, "fix", "import torch", {"requires": "cuda,gpus=2"})
    assert unmet_requirement(snippet, env) == "requires 2 GPUs: 1 here"


def test_imported_modules_ignore_the_standard_library():
    assert imported_modules(
        "import os, json\nimport torch.nn as nn\nfrom numpy import zeros\nfrom . import x"
    ) == {"torch", "numpy"}


def test_judge_repro_reads_multi_line_messages():
    output = 'Traceback (most recent call last):\n  File "x", line 1\nValueError: first line\nwidget 5 is broken\n'
    assert judge_repro("mine", output, MATCHER) is None


def test_verify_command_stores_results_and_exits_one_on_failure(
    make_settings, content_dir: Path, monkeypatch
):
    settings = make_settings(content_dir)
    monkeypatch.setenv("PITFALLS_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("PITFALLS_CONTENT_DIR", str(content_dir))
    body = (
        "## What you see\n\nx\n\n## Why it happens\n\ny\n\n## Fix\n\n"
        "```python fix\nprint('fixed')\n```\n\n## Reproduce\n\n"
        "```python repro\nraise RuntimeError('failure in good number 7 happened')\n```\n\n"
        "```python demo requires=cuda\nimport torch\n```\n"
    )
    (content_dir / "good.md").write_text(entry_text("good", body=body), encoding="utf-8")
    runner = CliRunner()
    result = runner.invoke(cli, ["verify", "--json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["summary"] == "2 passed, 0 failed, 1 skipped"
    assert [r["status"] for r in data["results"]] == ["passed", "passed", "skipped"]

    from app.storage import create_db_engine

    engine = create_db_engine(settings)
    with Session(engine) as session:
        # The skipped snippet ran nowhere: no result is stored for it.
        assert len(session.exec(select(Verification)).all()) == 2
        summary = get_entry_details(session, "good").verification
        assert (summary.status, summary.passed, summary.skipped) == ("partly verified", 2, 1)
        assert summary.python_version and summary.verified_at
    # The repro changes so it no longer fails: verify reports it, exits 1, and the entry page
    # shows only the result for the snippet's current code.
    (content_dir / "good.md").write_text(
        entry_text(
            "good",
            body=body.replace(
                "raise RuntimeError('failure in good number 7 happened')", "print('no error')"
            ),
        ),
        encoding="utf-8",
    )
    result = runner.invoke(cli, ["verify"])
    assert result.exit_code == 1
    assert "failed   good repro#1" in result.output and "a repro must fail" in result.output
    assert "verify: 1 passed, 1 failed, 1 skipped" in result.output
    with Session(engine) as session:
        assert get_entry_details(session, "good").verification.status == "failing"
    from fastapi.testclient import TestClient

    from app.web import create_app

    with TestClient(create_app(settings)) as client:
        badge = client.get("/entries/good").text
    assert "Failing on torch" in badge and "1 passed, 1 failed, 1 skipped (requires cuda" in badge
    assert runner.invoke(cli, ["verify", "nope"]).exit_code == 2
    engine.dispose()


def test_verify_entries_only_runs_the_named_entries(settings, engine, content_dir: Path):
    for name in ("one", "two"):
        body = f"## What you see\n\n## Why it happens\n\n## Fix\n\n```python fix\nprint('{name}')\n```\n"
        (content_dir / f"{name}.md").write_text(entry_text(name, body=body), encoding="utf-8")
    ingest_content(engine, content_dir)
    run_result = verify_entries(engine, entry_ids=["two"], jobs=1)
    assert [r.snippet.entry_id for r in run_result.results] == ["two"]


def test_noise_in_the_output_does_not_hide_a_traceback():
    output = '\x00Traceback (most recent call last):\n  File "x"\n\x1b[31mValueError\x1b[0m: widget 9 is broken\n'
    assert judge_repro("mine", output, MATCHER) is None


def test_a_bad_option_or_an_unexpected_error_fails_that_snippet_only():
    assert run("print('ok')", timeout="abc") == (
        "failed",
        "bad option timeout='abc': seconds above 0 and at most 3600 expected",
    )
    assert run("print('ok')", timeout="nan")[0] == "failed"
    assert run("print('ok')", timeout="-1")[0] == "failed"

    class Flaky(Unsandboxed):
        def python(
            self,
            *,
            script: str | None = None,
            args: Sequence[str] = (),
            max_processes: int | None = None,
        ):
            if script and "explode" in script:
                raise OSError("no room left for this one")
            return super().python(script=script, args=args, max_processes=max_processes)

    snippets = [
        SnippetToRun("mine", 0, "fix", "print('explode')"),
        SnippetToRun("mine", 1, "fix", "print('fine')", {"timeout": "abc"}),
        SnippetToRun("mine", 2, "fix", "print('fine')"),
    ]
    results = verify_snippets(snippets, ENV, MATCHER, runner=Flaky(sys.executable), jobs=2)
    assert [(r.status, r.reason.split(":")[0]) for r in results] == [
        ("failed", "verify could not run it"),
        ("failed", "bad option timeout='abc'"),
        ("passed", ""),
    ]
    assert "OSError: no room left for this one" in results[0].reason


def _wiki_app(settings):
    from fastapi.testclient import TestClient

    from app.accounts import CLI, create_token
    from app.web import create_app

    client = TestClient(create_app(settings))
    client.__enter__()
    with Session(client.app.state.runtime.engine) as session:
        _, token = create_token(session, name="bot", scope="write", expires_in=None, owner=CLI)
        session.commit()
    return client, {"Authorization": f"Bearer {token}"}


def _edit(client, headers: dict[str, str], entry_id: str, old: str, new: str) -> None:
    doc = client.get(f"/api/v1/entries/{entry_id}")
    body = {"markdown": doc.json()["markdown"].replace(old, new), "message": "Wiki edit"}
    response = client.put(
        f"/api/v1/entries/{entry_id}",
        json=body,
        headers={**headers, "If-Match": doc.headers["etag"]},
    )
    assert response.status_code == 200, response.text


def _badge(client, entry_id: str) -> str:
    return client.get(f"/api/v1/entries/{entry_id}").json()["verification"]["status"]


def test_a_wiki_edit_of_a_snippet_is_not_verified_until_verify_runs_it(
    make_settings, content_dir: Path
):
    body = (
        "## What you see\n\nx\n\n## Why it happens\n\ny\n\n## Fix\n\n"
        "```python fix\nprint('fixed')\n```\n\n## Reproduce\n\n"
        "```python repro\nraise RuntimeError('failure in good number 7 happened')\n```\n"
    )
    (content_dir / "good.md").write_text(entry_text("good", body=body), encoding="utf-8")
    settings = make_settings(content_dir)
    client, headers = _wiki_app(settings)
    engine = client.app.state.runtime.engine
    plain = Unsandboxed(sys.executable)
    try:
        assert _badge(client, "good") == "unverified"
        verify_entries(engine, runner=plain, jobs=1)
        assert _badge(client, "good") == "verified"

        # Prose only: the snippets are the same code, so their results still hold.
        _edit(client, headers, "good", "## Why it happens\n\ny", "## Why it happens\n\nz")
        assert _badge(client, "good") == "verified"

        _edit(client, headers, "good", "print('fixed')", "print('fixed in the wiki')")
        assert _badge(client, "good") == "partly verified"
        page = client.get("/entries/good").text
        assert "Partly verified on torch" in page

        # By default verify leaves the wiki's version out; without a sandbox it will not run it.
        run_result = verify_entries(engine, runner=plain, jobs=1)
        assert (run_result.results, run_result.left_out) == ([], ["good"])
        with pytest.raises(SandboxRequired, match="1 entry edited in the wiki"):
            verify_entries(engine, runner=plain, include_wiki=True)
        with pytest.raises(WikiEntriesNamed, match="good"):
            verify_entries(engine, runner=plain, entry_ids=["good"])
        assert _badge(client, "good") == "partly verified"

        run_result = verify_entries(
            engine, runner=plain, include_wiki=True, unsafe_no_sandbox=True, jobs=1
        )
        assert [r.status for r in run_result.results] == ["passed", "passed"]
        assert _badge(client, "good") == "verified"

        # The same code under another role is another snippet: `fix` passing says nothing of
        # it as a `repro`.
        _edit(client, headers, "good", "```python fix\n", "```python repro\n")
        assert _badge(client, "good") == "partly verified"
    finally:
        client.__exit__(None, None, None)


def test_verify_command_refuses_a_named_wiki_entry_without_include_wiki(
    make_settings, content_dir: Path, monkeypatch
):
    (content_dir / "good.md").write_text(entry_text("good"), encoding="utf-8")
    settings = make_settings(content_dir)
    client, headers = _wiki_app(settings)
    try:
        _edit(client, headers, "good", "An error.", "An error, says the wiki.")
    finally:
        client.__exit__(None, None, None)
    monkeypatch.setenv("PITFALLS_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("PITFALLS_CONTENT_DIR", str(content_dir))
    result = CliRunner().invoke(cli, ["verify", "good"])
    assert result.exit_code == 2
    assert "edited in the wiki since ingest: good: add --include-wiki" in result.output


TORCH_IN_DISGUISE = {
    "through-importlib": 'import importlib\n\nimportlib.import_module("torch")\n',
    "through-a-subprocess": (
        "import subprocess\nimport sys\n\n"
        'subprocess.run([sys.executable, "-c", "import torch"], check=True)\n'
    ),
    "through-a-helper-module": (
        'with open("helper.py", "w") as f:\n    f.write("import torch\\n")\nimport helper\n'
    ),
    "directly": "import torch\n\ntorch.zeros(2)\n",
}


def _python_without_torch(tmp_path: Path) -> str:
    import subprocess

    venv = tmp_path / "no-torch"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    probe = subprocess.run([python, "-c", "import torch"], capture_output=True)
    assert probe.returncode != 0, "the fresh venv must not have torch"
    return python


def test_verify_without_torch_on_the_repository_content_fails_nothing_and_stores_no_torch_result(
    make_settings, repo_content: Path, tmp_path: Path
):
    import os
    import subprocess

    settings = make_settings(repo_content)
    env = {
        **os.environ,
        "PITFALLS_DATA_DIR": str(settings.data_dir),
        "PITFALLS_CONTENT_DIR": str(repo_content),
    }
    pitfalls = str(Path(sys.executable).with_name("pitfalls"))
    command = [pitfalls, "verify", "--json", "--python", _python_without_torch(tmp_path)]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    results = json.loads(done.stdout)["results"]
    assert len(results) > 200
    assert [r for r in results if r["status"] == "failed"] == []
    from app.storage import create_db_engine

    engine = create_db_engine(settings)
    with Session(engine) as session:
        from app.models import Snippet

        code = {(s.entry_id, s.position): s.code for s in session.exec(select(Snippet)).all()}
        # Rows of this run have no torch version; the shipped results (torch 2.13) stay.
        this_run = session.exec(
            select(Verification).where(col(Verification.torch_version).is_(None))
        ).all()
        assert this_run and all(
            "torch" not in code[(v.entry_id, v.snippet_position)].casefold() for v in this_run
        )
        assert get_entry_details(session, "view-non-contiguous").verification.status == "verified"
    engine.dispose()


def test_verify_without_torch_skips_every_torch_snippet_and_stores_nothing_for_them(
    make_settings, content_dir: Path, tmp_path: Path
):
    """The real command, with --python of a fresh venv that has no torch: however a snippet
    reaches torch, it is skipped, nothing fails, and only the snippet without torch is stored."""
    import os
    import subprocess

    python = _python_without_torch(tmp_path)
    for name, code in TORCH_IN_DISGUISE.items():
        body = f"## What you see\n\n## Why it happens\n\n## Fix\n\n```python fix\n{code}```\n"
        (content_dir / f"{name}.md").write_text(entry_text(name, body=body), encoding="utf-8")
    plain = "## What you see\n\n## Why it happens\n\n## Fix\n\n```python fix\nprint(1)\n```\n"
    (content_dir / "plain.md").write_text(entry_text("plain", body=plain), encoding="utf-8")
    settings = make_settings(content_dir)
    env = {
        **os.environ,
        "PITFALLS_DATA_DIR": str(settings.data_dir),
        "PITFALLS_CONTENT_DIR": str(content_dir),
    }
    command = [str(Path(sys.executable).with_name("pitfalls")), "verify", "--json"]
    done = subprocess.run(
        [*command, "--python", python], env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["environment"]["torch_version"] is None
    statuses = {r["entry"]: (r["status"], r["reason"]) for r in data["results"]}
    skipped = ("skipped", "torch is not installed (the snippet's code names torch)")
    assert statuses == {
        **dict.fromkeys(TORCH_IN_DISGUISE, skipped),
        "directly": ("skipped", "imports torch: the package is not installed"),
        "plain": ("passed", ""),
    }
    from app.storage import create_db_engine

    engine = create_db_engine(settings)
    with Session(engine) as session:
        stored = session.exec(select(Verification)).all()
        assert [(v.entry_id, v.status) for v in stored] == [("plain", "passed")]
        assert stored[0].torch_version is None and stored[0].python_version
        for name in TORCH_IN_DISGUISE:
            assert get_entry_details(session, name).verification.status == "unverified"
    engine.dispose()


def test_shipped_results_show_on_first_start_only_for_unchanged_code(
    make_settings, content_dir: Path, tmp_path: Path
):
    """`verify --record` writes the results next to the entries; a fresh data dir stores the
    ones whose snippet code is unchanged, and the entry page shows them."""
    from fastapi.testclient import TestClient

    from app.entries import content_hash
    from app.shipped_results import SHIPPED_RESULTS_NAME, write_records
    from app.web import create_app

    def body(code: str) -> str:
        return f"## What you see\n\n## Why it happens\n\n## Fix\n\n```python fix\n{code}\n```\n"

    for name in ("kept", "changed"):
        (content_dir / f"{name}.md").write_text(
            entry_text(name, body=body(f"print('{name}')")), encoding="utf-8"
        )
    shipped = content_dir / SHIPPED_RESULTS_NAME
    rows = [
        Verification(
            entry_id=name,
            snippet_position=0,
            role="fix",
            code_hash=content_hash(f"print('{name}')\n"),
            status="passed",
            torch_version="2.13.0",
            python_version="3.11.7",
            platform="Linux-x86_64",
        )
        for name in ("kept", "changed")
    ]
    assert write_records(shipped, rows) == 2
    assert write_records(shipped, []) == 2  # a run that stores nothing keeps what was there
    (content_dir / "changed.md").write_text(
        entry_text("changed", body=body("print('changed since')")), encoding="utf-8"
    )
    settings = make_settings(content_dir)
    with TestClient(create_app(settings)) as client:
        kept = client.get("/entries/kept").text
        changed = client.get("/entries/changed").text
        assert client.get("/api/v1/entries/kept").json()["verification"]["status"] == "verified"
    assert "Verified on torch 2.13.0, Python 3.11.7" in kept and "1 passed" in kept
    assert "Snippets not verified yet" in changed
    # Start-up again: nothing is stored twice.
    with TestClient(create_app(settings)):
        pass
    from app.storage import create_db_engine

    engine = create_db_engine(settings)
    with Session(engine) as session:
        stored = session.exec(select(Verification)).all()
        assert [(v.entry_id, v.status) for v in stored] == [("kept", "passed")]
    engine.dispose()


def test_verify_record_writes_what_ran_with_its_environment_and_no_paths(
    make_settings, content_dir: Path, tmp_path: Path, monkeypatch
):
    settings = make_settings(content_dir)
    monkeypatch.setenv("PITFALLS_DATA_DIR", str(settings.data_dir))
    monkeypatch.setenv("PITFALLS_CONTENT_DIR", str(content_dir))
    body = (
        "## What you see\n\n## Why it happens\n\n## Fix\n\n```python fix\nprint('ok')\n```\n\n"
        "```python demo requires=cuda\nimport torch\n```\n"
    )
    (content_dir / "rec.md").write_text(entry_text("rec", body=body), encoding="utf-8")
    target = tmp_path / "results.json"
    result = CliRunner().invoke(cli, ["verify", "--record", str(target)])
    assert result.exit_code == 0, result.output
    (record,) = json.loads(target.read_text())["results"]
    assert set(record) == {
        "entry",
        "position",
        "role",
        "code_hash",
        "status",
        "torch_version",
        "python_version",
        "platform",
        "date",
    }
    assert (record["entry"], record["position"], record["status"]) == ("rec", 0, "passed")
    assert str(tmp_path) not in target.read_text()


def test_the_shipped_results_describe_the_repository_content():
    """Every record of content/verification.json names a snippet of the entries, and at least
    most of them still match the code (a changed snippet is simply not loaded)."""
    from app.checker import collect_entry_files, load_entry_files
    from app.entries import content_hash
    from app.shipped_results import SHIPPED_RESULTS_NAME
    from tests.conftest import REPO_CONTENT

    records = json.loads((REPO_CONTENT / SHIPPED_RESULTS_NAME).read_text())["results"]
    docs = load_entry_files(collect_entry_files([REPO_CONTENT]))
    hashes = {
        (doc.front.id, n): content_hash(s.code)
        for doc in docs
        for n, s in enumerate(doc.rendered.snippets)
    }
    assert all(r["status"] in ("passed", "failed") for r in records)
    matching = [r for r in records if hashes.get((r["entry"], r["position"])) == r["code_hash"]]
    assert len(matching) >= 0.8 * len(records)
    assert "/" not in "".join(r["platform"] for r in records)


def test_an_mps_requirement_names_the_missing_device_not_a_package():
    snippet = SnippetToRun("mine", 0, "repro", "import torch", {"requires": "mps"})
    cpu = Environment(sys.executable, "3.11", "t", "2.13.0", False, 0, {"torch": True})
    assert unmet_requirement(snippet, cpu) == "requires mps: no Apple MPS device here"
    mac = Environment(sys.executable, "3.11", "t", "2.13.0", False, 0, {"torch": True}, mps=True)
    assert unmet_requirement(snippet, mac) is None
