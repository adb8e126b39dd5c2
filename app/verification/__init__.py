"""Running every snippet to prove it: a repro must fail with its own entry's error, a fix or a
demo must exit 0, and a snippet whose requirements are not met is skipped with the reason.

Each snippet runs in a fresh interpreter, inside the bubblewrap sandbox of `app.sandbox` when it
works here, in its own temporary folder and process group, with a time limit, a memory cap per
process and limits on its whole tree (processes, memory in all: `app.snippet_limits`); several
run at once. A snippet stopped by a limit fails saying which: "timed out after S s", "stopped:
more than N processes", "stopped: more than M MB of memory in all". One snippet that cannot be
run (a bad option, an unexpected error) is a failed result for that snippet alone: the others
still run and every result is stored.

Which snippets run: by default those of entries as their `content/` file has them (not edited in
the wiki since ingest); the wiki's versions only when asked (`include_wiki`), and only inside the
sandbox unless the caller accepts the risk (`unsafe_no_sandbox`): anyone who may edit or holds a
write token can store a snippet.

Here: what stops a run before it starts, the interpreter's probe, and the run of every snippet
with its results stored. What a snippet is and needs: `app.verification.snippets`; running and
judging one: `app.verification.running`.
"""

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from sqlalchemy import Engine
from sqlmodel import Session

from app import storage
from app.matching import SignatureMatcher
from app.models import Verification
from app.sandbox import Runner, Unsandboxed, choose_runner
from app.snippet_limits import DEFAULT_MAX_PROCESSES, DEFAULT_MEMORY_MB, DEFAULT_TOTAL_MEMORY_MB
from app.verification.running import DEFAULT_TIMEOUT_S, run_snippet
from app.verification.snippets import (
    Environment,
    SnippetResult,
    SnippetToRun,
    _required,
    _tail,
    imported_modules,
)

_PROBE = """
import importlib.util, json, platform, sys
names = json.loads(sys.argv[1])
facts = {"python_version": platform.python_version(), "platform": platform.platform(terse=True),
         "packages": {n: importlib.util.find_spec(n) is not None for n in names},
         "torch_version": None, "cuda": False, "gpus": 0, "mps": False}
if facts["packages"].get("torch"):
    import torch
    facts["torch_version"] = torch.__version__
    facts["cuda"] = torch.cuda.is_available()
    facts["gpus"] = torch.cuda.device_count() if facts["cuda"] else 0
    mps = getattr(torch.backends, "mps", None)
    facts["mps"] = bool(mps and mps.is_available())
print(json.dumps(facts))
"""


class CannotVerify(Exception):
    """Verification could not start; the message says why."""


class UnknownEntries(CannotVerify, ValueError):
    """Entries named for verification that do not exist."""


class WikiEntriesNamed(CannotVerify):
    """Entries named for verification whose current text is a wiki edit, not asked for."""

    def __init__(self, entry_ids: Sequence[str]) -> None:
        super().__init__(f"edited in the wiki since ingest: {', '.join(entry_ids)}")
        self.entry_ids = list(entry_ids)


class SandboxRequired(CannotVerify):
    """Snippets from the wiki would run, and no sandbox works here."""

    def __init__(self, why: str, entry_ids: Sequence[str]) -> None:
        super().__init__(
            f"{len(entry_ids)} entr{'y' if len(entry_ids) == 1 else 'ies'} edited in the wiki "
            f"({', '.join(entry_ids[:5])}{', …' if len(entry_ids) > 5 else ''}) would run "
            f"with {why}"
        )
        self.entry_ids = list(entry_ids)


def probe_environment(
    python: str, snippets: Iterable[SnippetToRun], runner: Runner | None = None
) -> Environment:
    """What the interpreter has, asked where the snippets will run (inside the sandbox)."""
    names = {"torch"}
    for snippet in snippets:
        names.update(imported_modules(snippet.code))
        devices = ("cuda", "no-cuda", "mps")
        names.update(r for r in _required(snippet) if r not in devices and "=" not in r)
    runner = runner or Unsandboxed(python)
    with runner.python(args=["-c", _PROBE, json.dumps(sorted(names))]) as launch:
        try:
            result = subprocess.run(
                launch.argv,
                env=launch.env,
                cwd=launch.cwd,
                pass_fds=launch.pass_fds,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=120,
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise CannotVerify(f"{python} did not start {runner.description}: {exc}") from None
    try:
        facts = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        said = _tail(result.stderr or result.stdout) or "no output"
        raise CannotVerify(
            f"{python} did not start {runner.description}: exit {result.returncode}: {said}"
        ) from None
    return Environment(python=python, **facts)


def verify_snippets(
    snippets: Sequence[SnippetToRun],
    env: Environment,
    matcher: SignatureMatcher,
    *,
    runner: Runner | None = None,
    jobs: int = 2,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_mb: int = DEFAULT_MEMORY_MB,
    max_processes: int = DEFAULT_MAX_PROCESSES,
    total_memory_mb: int = DEFAULT_TOTAL_MEMORY_MB,
    on_result: Callable[[SnippetResult], None] | None = None,
) -> list[SnippetResult]:
    """Run every snippet, `jobs` at a time; results in the order of `snippets`."""

    def run(snippet: SnippetToRun) -> SnippetResult:
        result = run_snippet(
            snippet,
            env,
            matcher,
            runner=runner,
            timeout_s=timeout_s,
            memory_mb=memory_mb,
            max_processes=max_processes,
            total_memory_mb=total_memory_mb,
        )
        if on_result:
            on_result(result)
        return result

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(run, snippets))


def summary_line(results: Iterable[SnippetResult]) -> str:
    counts = {"passed": 0, "failed": 0, "skipped": 0}
    for result in results:
        counts[result.status] += 1
    return f"{counts['passed']} passed, {counts['failed']} failed, {counts['skipped']} skipped"


@dataclass
class VerifyRun:
    environment: Environment
    results: list[SnippetResult]
    sandbox: str = ""
    left_out: list[str] = field(default_factory=list)  # entries edited in the wiki, not run

    @property
    def failed(self) -> bool:
        return any(r.status == "failed" for r in self.results)

    def to_dict(self) -> dict:
        return {
            "environment": {
                "python_version": self.environment.python_version,
                "torch_version": self.environment.torch_version,
                "cuda": self.environment.cuda,
                "gpus": self.environment.gpus,
                "platform": self.environment.platform,
                "sandbox": self.sandbox,
            },
            "results": [r.to_dict() for r in self.results],
            "left_out_wiki_entries": self.left_out,
            "summary": summary_line(self.results),
        }


def verification_rows(results: Iterable[SnippetResult], env: Environment) -> list[Verification]:
    """The results to store, each with its environment. Only what really ran is a result: a skip
    says nothing about the snippet, and stored it would hide an earlier pass made where the
    snippet's environment was complete."""
    return [
        Verification(
            entry_id=result.snippet.entry_id,
            snippet_position=result.snippet.position,
            role=result.snippet.role,
            code_hash=result.snippet.code_hash,
            status=result.status,
            reason=result.reason,
            duration_ms=result.duration_ms,
            torch_version=env.torch_version,
            python_version=env.python_version,
            platform=env.platform,
        )
        for result in results
        if result.status != "skipped"
    ]


def _database_folder(engine: Engine) -> list[str]:
    """The folder of a SQLite database: never to be shown to a snippet."""
    database = engine.url.database
    if engine.url.get_backend_name() != "sqlite" or not database or database == ":memory:":
        return []
    return [os.path.dirname(os.path.abspath(database))]


def verify_entries(
    engine: Engine,
    *,
    entry_ids: Sequence[str] = (),
    include_wiki: bool = False,
    unsafe_no_sandbox: bool = False,
    runner: Runner | None = None,
    python: str = sys.executable,
    jobs: int = 2,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_mb: int = DEFAULT_MEMORY_MB,
    max_processes: int = DEFAULT_MAX_PROCESSES,
    total_memory_mb: int = DEFAULT_TOTAL_MEMORY_MB,
    on_start: Callable[[Environment, int], None] | None = None,
    on_result: Callable[[SnippetResult], None] | None = None,
) -> VerifyRun:
    """Verify the snippets of the active entries (or of those named) and store the results.

    Entries edited in the wiki since ingest run only with `include_wiki`, and then only in a
    sandbox unless `unsafe_no_sandbox`. `runner` defaults to the sandbox when it works here.
    """
    with Session(engine) as session:
        if entry_ids:
            found = storage.get_entries(session, entry_ids=list(entry_ids))
            missing = sorted(set(entry_ids) - set(found))
            if missing:
                raise UnknownEntries(f"no entry with id {', '.join(missing)}")
        wiki = {
            entry_id
            for entry_id, state in storage.entry_file_states(session).items()
            if state.edited
        }
        named_wiki = sorted(wiki & set(entry_ids))
        if named_wiki and not include_wiki:
            raise WikiEntriesNamed(named_wiki)
        stored = storage.all_snippets(session, entry_ids=list(entry_ids))
        snippets = [
            SnippetToRun(s.entry_id, s.position, s.role, s.code, dict(s.options), s.line)
            for s in stored
            if include_wiki or s.entry_id not in wiki
        ]
        left_out = [] if include_wiki else sorted({s.entry_id for s in stored} & wiki)
        matcher = SignatureMatcher(storage.active_signature_records(session))
    runner = runner or choose_runner(python, keep_out=_database_folder(engine))
    from_wiki = sorted({s.entry_id for s in snippets} & wiki)
    if from_wiki and not runner.sandboxed and not unsafe_no_sandbox:
        raise SandboxRequired(runner.description, from_wiki)
    env = probe_environment(python, snippets, runner)
    if on_start:
        on_start(env, len(snippets))
    results = verify_snippets(
        snippets,
        env,
        matcher,
        runner=runner,
        jobs=jobs,
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        max_processes=max_processes,
        total_memory_mb=total_memory_mb,
        on_result=on_result,
    )
    with Session(engine) as session:
        for row in verification_rows(results, env):
            storage.record_verification(session, result=row)
        session.commit()
    return VerifyRun(env, results, sandbox=runner.description, left_out=left_out)
