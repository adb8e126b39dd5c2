"""Running one snippet and judging it: in a fresh interpreter, under the runner (the sandbox
or plain subprocesses), with a time limit and the limits of `app.snippet_limits`; a repro must
fail with its own entry's error, a fix or a demo must exit 0."""

import math
import signal
import subprocess
import time
from collections.abc import Callable

from app.matching import SignatureMatcher, known_matches, match_paste
from app.sandbox import Launch, Runner, Unsandboxed
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
from app.verification.snippets import (
    Environment,
    SnippetResult,
    SnippetToRun,
    _tail,
    unmet_requirement,
)

DEFAULT_TIMEOUT_S = 30
MAX_TIMEOUT_S = 3600


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
