"""Running every snippet to prove it: a repro must fail with its own entry's error, a fix or a
demo must exit 0, and a snippet whose requirements are not met is skipped with the reason.

Each snippet runs in a fresh interpreter, in its own temporary folder and process group, with a
time limit and a memory cap; several run at once.
"""

import ast
import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
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
from app.tracebacks import parse_traceback

DEFAULT_TIMEOUT_S = 30
DEFAULT_MEMORY_MB = 4096
OUTPUT_TAIL_CHARS = 600

_PROBE = """
import importlib.util, json, platform, sys
names = json.loads(sys.argv[1])
facts = {"python_version": platform.python_version(), "platform": platform.platform(terse=True),
         "packages": {n: importlib.util.find_spec(n) is not None for n in names},
         "torch_version": None, "cuda": False, "gpus": 0}
if facts["packages"].get("torch"):
    import torch
    facts["torch_version"] = torch.__version__
    facts["cuda"] = torch.cuda.is_available()
    facts["gpus"] = torch.cuda.device_count() if facts["cuda"] else 0
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


def probe_environment(python: str, snippets: Iterable[SnippetToRun]) -> Environment:
    names = {"torch"}
    for snippet in snippets:
        names.update(imported_modules(snippet.code))
        names.update(r for r in _required(snippet) if r not in ("cuda", "no-cuda") and "=" not in r)
    result = subprocess.run(
        [python, "-c", _PROBE, json.dumps(sorted(names))],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    facts = json.loads(result.stdout.strip().splitlines()[-1])
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
        elif name == "gpus":
            wanted = int(value) if value.isdigit() else 1
            if env.gpus < wanted:
                return f"requires {wanted} GPUs: {env.gpus} here"
        elif not env.packages.get(name, False):
            return f"requires {name}: the package is not installed"
    for module in sorted(imported_modules(snippet.code)):
        if not env.packages.get(module, False):
            return f"imports {module}: the package is not installed"
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


def _limit_memory(memory_mb: int) -> Callable[[], None]:
    def apply() -> None:
        limit = memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    return apply


def _tail(text: str) -> str:
    text = text.strip()
    return text if len(text) <= OUTPUT_TAIL_CHARS else "…" + text[-OUTPUT_TAIL_CHARS:]


def run_snippet(
    snippet: SnippetToRun,
    env: Environment,
    matcher: SignatureMatcher,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_mb: int = DEFAULT_MEMORY_MB,
) -> SnippetResult:
    reason = unmet_requirement(snippet, env)
    if reason:
        return SnippetResult(snippet, "skipped", reason)
    timeout_s = float(snippet.options.get("timeout", timeout_s))
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("PITFALLS_")}
    child_env.update(
        PYTHONUNBUFFERED="1",
        PYTHONDONTWRITEBYTECODE="1",
        MPLBACKEND="Agg",
        OMP_NUM_THREADS="1",  # several snippets run at once
    )
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="pitfalls-snippet-") as workdir:
        script = os.path.join(workdir, "snippet.py")
        with open(script, "w", encoding="utf-8") as handle:
            handle.write(snippet.code)
        child_env["TMPDIR"] = workdir
        process = subprocess.Popen(
            [env.python, script],
            cwd=workdir,
            env=child_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # its own process group: a timeout kills its children too
            preexec_fn=_limit_memory(memory_mb),
        )
        try:
            output_bytes, _ = process.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
            duration = int((time.perf_counter() - started) * 1000)
            return SnippetResult(snippet, "failed", f"timed out after {timeout_s:g} s", duration)
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)  # leftovers such as DataLoader workers
    duration = int((time.perf_counter() - started) * 1000)
    output = output_bytes.decode("utf-8", errors="replace")
    code = process.returncode
    if code < 0:
        name = signal.Signals(-code).name
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
    jobs: int = 2,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_mb: int = DEFAULT_MEMORY_MB,
    on_result: Callable[[SnippetResult], None] | None = None,
) -> list[SnippetResult]:
    """Run every snippet, `jobs` at a time; results in the order of `snippets`."""

    def run(snippet: SnippetToRun) -> SnippetResult:
        result = run_snippet(snippet, env, matcher, timeout_s=timeout_s, memory_mb=memory_mb)
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
            },
            "results": [r.to_dict() for r in self.results],
            "summary": summary_line(self.results),
        }


class UnknownEntries(ValueError):
    """Entries named for verification that do not exist."""


def verify_entries(
    engine: Engine,
    *,
    entry_ids: Sequence[str] = (),
    python: str = sys.executable,
    jobs: int = 2,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    memory_mb: int = DEFAULT_MEMORY_MB,
    on_start: Callable[[Environment, int], None] | None = None,
    on_result: Callable[[SnippetResult], None] | None = None,
) -> VerifyRun:
    """Verify the snippets of the active entries (or of those named) and store the results."""
    with Session(engine) as session:
        if entry_ids:
            found = storage.get_entries(session, entry_ids=list(entry_ids))
            missing = sorted(set(entry_ids) - set(found))
            if missing:
                raise UnknownEntries(f"no entry with id {', '.join(missing)}")
        snippets = [
            SnippetToRun(s.entry_id, s.position, s.role, s.code, dict(s.options), s.line)
            for s in storage.all_snippets(session, entry_ids=list(entry_ids))
        ]
        matcher = SignatureMatcher(storage.active_signature_records(session))
    env = probe_environment(python, snippets)
    if on_start:
        on_start(env, len(snippets))
    results = verify_snippets(
        snippets,
        env,
        matcher,
        jobs=jobs,
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        on_result=on_result,
    )
    with Session(engine) as session:
        for result in results:
            storage.record_verification(
                session,
                result=Verification(
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
                ),
            )
        session.commit()
    return VerifyRun(env, results)
