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
"""

import ast
import json
import math
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from sqlalchemy import Engine
from sqlmodel import Session

from app import storage
from app.entries import content_hash
from app.matching import SignatureMatcher, known_matches, match_paste
from app.models import Verification
from app.sandbox import Launch, Runner, Unsandboxed, choose_runner
from app.snippet_limits import (
    DEFAULT_MAX_PROCESSES,
    DEFAULT_MEMORY_MB,
    DEFAULT_TOTAL_MEMORY_MB,
    SnippetCgroup,
    TreeLimits,
    TreeWatch,
    kill_tree,
    limit_process,
)
from app.tracebacks import parse_traceback

DEFAULT_TIMEOUT_S = 30
MAX_TIMEOUT_S = 3600
OUTPUT_TAIL_CHARS = 600

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


@dataclass(frozen=True)
class SnippetToRun:
    entry_id: str
    position: int
    role: str
    code: str
    options: dict[str, str] = field(default_factory=dict)
    line: int = 0

    @property
    def code_hash(self) -> str:
        return content_hash(self.code)

    @property
    def label(self) -> str:
        return f"{self.entry_id} {self.role}#{self.position}"


@dataclass(frozen=True)
class Environment:
    """What the interpreter that runs the snippets has: checked once per verify run."""

    python: str
    python_version: str
    platform: str
    torch_version: str | None
    cuda: bool
    gpus: int
    packages: dict[str, bool]
    mps: bool = False  # an Apple GPU (Metal)

    @property
    def description(self) -> str:
        device = f"CUDA x{self.gpus}" if self.cuda else "CPU"
        torch = f"torch {self.torch_version}" if self.torch_version else "no torch"
        return f"{torch} {device}, Python {self.python_version}, {self.platform}"


@dataclass(frozen=True)
class SnippetResult:
    snippet: SnippetToRun
    status: str  # passed | failed | skipped
    reason: str = ""
    duration_ms: int = 0

    def to_dict(self) -> dict:
        return {
            "entry": self.snippet.entry_id,
            "snippet": self.snippet.position,
            "role": self.snippet.role,
            "line": self.snippet.line,
            "status": self.status,
            "reason": self.reason,
            "duration_ms": self.duration_ms,
        }


def imported_modules(code: str) -> set[str]:
    """Top-level packages a snippet imports: not the standard library's, not its own files."""
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return set()
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    # A module whose file the snippet writes itself (`shortrepr.py`, `nets/`) is not a package.
    local = {name for name in names if f"{name}.py" in code or f"{name}/" in code}
    return {name for name in names if name not in sys.stdlib_module_names} - local


def _required(snippet: SnippetToRun) -> list[str]:
    requires = snippet.options.get("requires", "")
    return [item.strip() for item in requires.split(",") if item.strip()]


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


def unmet_requirement(snippet: SnippetToRun, env: Environment) -> str | None:
    """Why `snippet` cannot run here, or None when it can."""
    for requirement in _required(snippet):
        name, _, value = requirement.partition("=")
        if name == "cuda":
            if env.torch_version is None:
                return "requires cuda: torch is not installed"
            if not env.cuda:
                return "requires cuda: no CUDA device here"
        elif name == "no-cuda":
            if env.cuda:
                return "requires no-cuda: it shows the error of a machine without CUDA"
        elif name == "mps":
            if env.torch_version is None:
                return "requires mps: torch is not installed"
            if not env.mps:
                return "requires mps: no Apple MPS device here"
        elif name == "gpus":
            wanted = int(value) if value.isdigit() else 1
            if env.gpus < wanted:
                return f"requires {wanted} GPUs: {env.gpus} here"
        elif not env.packages.get(name, False):
            return f"requires {name}: the package is not installed"
    for module in sorted(imported_modules(snippet.code)):
        if not env.packages.get(module, False):
            return f"imports {module}: the package is not installed"
    # Why the text and not the imports: a snippet can reach torch through a subprocess
    # (`python -c "import torch"`), a helper module it writes, `importlib.import_module("torch")`
    # or `__import__`, none of which an import statement shows. Run without torch, such a
    # snippet would fail and publish a false "failing" result. In a PyTorch knowledge base any
    # snippet whose code names torch anywhere (torchvision, libtorch, a string) needs it, so
    # without torch it is skipped; only code that never names torch runs there.
    if env.torch_version is None and "torch" in snippet.code.casefold():
        return "torch is not installed (the snippet's code names torch)"
    return None


def judge_repro(entry_id: str, output: str, matcher: SignatureMatcher) -> str | None:
    """None when the output's error is matched to `entry_id` first; otherwise what went wrong.

    The same parser and ranking as a paste on the /match page: a repro is a real test case.
    """
    parsed = parse_traceback(output)
    if not parsed.exceptions and not parsed.warnings:
        return "it printed no traceback"
    matches = known_matches(match_paste(matcher, parsed))
    subject = parsed.final.first_line if parsed.final else parsed.warnings[-1].message
    if not matches:
        return f"its error matches no signature: {subject}"
    best = matches[0]
    if best.entry_id != entry_id:
        return f"its error is matched first by entry {best.entry_id!r}: {best.subject}"
    rivals = [m for m in matches[1:] if m.confidence == best.confidence]
    if rivals:
        return f"its error is matched as well by entry {rivals[0].entry_id!r}: {best.subject}"
    return None


def _enter_limits(limits: TreeLimits, cgroup: SnippetCgroup | None) -> Callable[[], None]:
    def apply() -> None:  # in the new process, before it runs anything
        if cgroup is not None:
            cgroup.enter()
        limit_process(limits)

    return apply


def _tail(text: str) -> str:
    text = text.strip()
    return text if len(text) <= OUTPUT_TAIL_CHARS else "…" + text[-OUTPUT_TAIL_CHARS:]


class BadOption(ValueError):
    """A snippet option verify cannot use; the message says which and why."""


def snippet_timeout(snippet: SnippetToRun, default_s: float) -> float:
    value = snippet.options.get("timeout")
    if value is None:
        return default_s
    try:
        seconds = float(value)
    except ValueError:
        seconds = math.nan
    if not (0 < seconds <= MAX_TIMEOUT_S):  # also refuses nan
        raise BadOption(
            f"bad option timeout={value!r}: seconds above 0 and at most {MAX_TIMEOUT_S} expected"
        )
    return seconds


def run_snippet(
    snippet: SnippetToRun,
    env: Environment,
    matcher: SignatureMatcher,
    *,
    runner: Runner | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_mb: int = DEFAULT_MEMORY_MB,
    max_processes: int = DEFAULT_MAX_PROCESSES,
    total_memory_mb: int = DEFAULT_TOTAL_MEMORY_MB,
) -> SnippetResult:
    """Run one snippet and judge it; never raises: what goes wrong is a failed result.

    `runner` says where: plain subprocesses unless given (`verify_entries` picks the sandbox).
    `memory_mb` holds each process; `max_processes` (threads included) and `total_memory_mb`
    the snippet's whole tree.
    """
    started = time.perf_counter()
    try:
        return _run_snippet(
            snippet,
            env,
            matcher,
            runner=runner or Unsandboxed(env.python),
            timeout_s=timeout_s,
            limits=TreeLimits(max_processes, total_memory_mb, memory_mb),
        )
    except BadOption as exc:
        return SnippetResult(snippet, "failed", str(exc))
    except Exception as exc:  # one broken snippet must not stop the run
        duration = int((time.perf_counter() - started) * 1000)
        reason = f"verify could not run it: {type(exc).__name__}: {exc}"
        return SnippetResult(snippet, "failed", reason, duration)


def _run_watched(
    launch: Launch, limits: TreeLimits, cgroup: SnippetCgroup | None, timeout_s: float
) -> tuple[bytes, str | None, int]:
    """Run `launch` under the limits: its output, which limit stopped it (or None), and its
    exit status. Nothing of its tree is left running after."""
    process = subprocess.Popen(
        launch.argv,
        cwd=launch.cwd,
        env=launch.env,
        pass_fds=launch.pass_fds,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        start_new_session=True,  # its own process group and session: the tree is findable
        preexec_fn=_enter_limits(limits, cgroup),
    )
    stopped: str | None = None
    try:
        with TreeWatch(
            process.pid,
            limits,
            alive=lambda: process.returncode is None,
            overhead=launch.runner_processes,
            cgroup=cgroup,
        ) as watch:
            try:
                output, _ = process.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                kill_tree(process.pid)
                output, _ = process.communicate()
                stopped = f"timed out after {timeout_s:g} s"
        stopped = watch.reason or (cgroup.limit_hit() if cgroup else None) or stopped
    finally:
        kill_tree(process.pid)  # leftovers such as DataLoader workers, or an orphan
        if process.returncode is None:
            process.kill()
            process.wait()
    return output, stopped, process.returncode


def _run_snippet(
    snippet: SnippetToRun,
    env: Environment,
    matcher: SignatureMatcher,
    *,
    runner: Runner,
    timeout_s: float,
    limits: TreeLimits,
) -> SnippetResult:
    reason = unmet_requirement(snippet, env)
    if reason:
        return SnippetResult(snippet, "skipped", reason)
    timeout_s = snippet_timeout(snippet, timeout_s)
    started = time.perf_counter()
    with runner.python(script=snippet.code, max_processes=limits.processes) as launch:
        cgroup = SnippetCgroup.create(limits, overhead=launch.runner_processes)
        try:
            output_bytes, stopped, code = _run_watched(launch, limits, cgroup, timeout_s)
        finally:
            if cgroup is not None:
                cgroup.remove()
    duration = int((time.perf_counter() - started) * 1000)
    output = output_bytes.decode("utf-8", errors="replace")
    if stopped:
        tail = _tail(output)
        return SnippetResult(snippet, "failed", f"{stopped}: {tail}" if tail else stopped, duration)
    if runner.sandboxed and 128 < code <= 128 + signal.SIGRTMAX:
        code = 128 - code  # bwrap exits 128 + N for a snippet killed by signal N
    if code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = f"signal {-code}"
        return SnippetResult(snippet, "failed", f"crashed with {name}: {_tail(output)}", duration)
    if snippet.role == "repro":
        if code == 0:
            return SnippetResult(snippet, "failed", "it exited 0: a repro must fail", duration)
        problem = judge_repro(snippet.entry_id, output, matcher)
        return SnippetResult(snippet, "failed" if problem else "passed", problem or "", duration)
    if code != 0:
        return SnippetResult(
            snippet, "failed", f"exited with code {code}: {_tail(output)}", duration
        )
    return SnippetResult(snippet, "passed", "", duration)


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
