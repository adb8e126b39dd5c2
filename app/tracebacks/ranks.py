"""Reading the output of a multi-process job: which rank failed first, and its own traceback.

torchrun (torch.distributed.elastic, also under Accelerate), DeepSpeed's launcher and
torch.multiprocessing.spawn all end a failed job with a report of their own (ChildFailedError,
ProcessRaisedException, "exits with return code"), and the other ranks die of the first one's
death: killed by the launcher, or a collective whose peer went away. What explains the job is
the first failure. It is found from, in this order: the launcher's summary (elastic's
"Root Cause (first observed failure)", which it picks by the failures' times; spawn's
"-- Process N terminated with the following error"), the agent's first "failed (exitcode: …)
local_rank: N" line, then the rank whose traceback comes first in the output (an error that
only reports a dead peer comes after any other). Since torch 2.x each rank's lines carry a
`[rankN]:` prefix, which is how a rank's own lines are told apart.

Every scan is one pass over the lines with string tests and anchored regexes: the output can
be megabytes.
"""

import re
from dataclasses import dataclass

from app.tracebacks import parse_traceback
from app.tracebacks.cleaning import _clean, _strip_prefixes
from app.tracebacks.results import LAUNCHER_WRAPPERS, ParsedPaste

MAX_CHARS = 2_000_000  # the end of a longer output: the failure is at the end
MAX_RANK_CHARS = 250_000  # of one rank's own lines, the last ones
MAX_TRACEBACKS = 200  # tracebacks looked at in one output, from its end

_RANK_PREFIX = re.compile(r"^\[(?P<kind>rank|Rank|default)\s?(?P<n>\d{1,6})\]:\s?")
_ROOT_CAUSE = re.compile(r"^\s*Root Cause(?: \(first observed failure\))?:\s*$")
_FIELD = re.compile(r"^\s{0,4}(?P<name>rank|exitcode|traceback|msg)\s*:\s?(?P<value>.*)$")
_RANK_FIELD = re.compile(r"^(?P<rank>\d+)\s*\(local_rank:\s*(?P<local>\d+)\)")
_EXIT_FIELD = re.compile(r"^(?P<code>-?\d+)")
_BORDER = re.compile(r"^\s*={8,}\s*$")
_SPAWN = re.compile(r"^\s*-- Process (?P<index>\d+) terminated with the following error:\s*$")
_SPAWN_EXITED = re.compile(
    r"(?:^|ProcessExitedException: )process (?P<index>\d+) terminated with "
    r"(?:exit code (?P<code>-?\d+)|signal (?P<signal>\w+))"
)
_AGENT_FAILED = re.compile(
    r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<local>\d+) \(pid: \d+\)"
)
_TRACEBACK = "Traceback (most recent call last):"
_CHAINED = (
    "The above exception was the direct cause of the following exception",
    "During handling of the above exception, another exception occurred",
)
# Files of a launcher's own traceback, which reports a child's failure and is not one.
_LAUNCHER_FILES = (
    "torch/distributed/run.py",
    "torch/distributed/launcher/",
    "torch/multiprocessing/spawn.py",
    "deepspeed/launcher/",
    "accelerate/commands/",
)
# Errors a rank prints because another one died first: not the cause.
_AFTERMATH = (
    "Connection closed by peer",
    "Connection reset by peer",
    "Broken pipe",
    "NCCL communicator was aborted",
    "Watchdog caught collective operation timeout",
    "received by PID",
    "got signal:",
)


@dataclass(frozen=True)
class RankFailure:
    """The first failure of a multi-process job."""

    launcher: str  # torchrun | accelerate | deepspeed | mp.spawn | ranks (prefixed lines only)
    rank: int | None
    local_rank: int | None
    exitcode: str | None
    found_by: str  # how it was told first, for the reader: "the launcher's root cause"
    traceback: str  # the failed rank's own output (prefixes taken off), or the part read

    @property
    def who(self) -> str:
        if self.rank is not None:
            return f"rank {self.rank}"
        if self.launcher == "mp.spawn" and self.local_rank is not None:
            return f"process {self.local_rank}"
        if self.local_rank is not None:
            return f"local rank {self.local_rank}"
        return "a rank"


@dataclass
class _Summary:
    rank: int | None = None
    local_rank: int | None = None
    exitcode: str | None = None
    traceback: str = ""


class _Scan:
    """What one pass over the lines finds."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.by_rank: dict[tuple[str, int], list[str]] = {}
        self.first_traceback: dict[tuple[str, int], int] = {}
        self.root_at: int | None = None
        self.spawn: tuple[int, int] | None = None  # the line of spawn's report, the process
        self.spawn_exited: tuple[int, str | None] | None = None
        self.agent_failed: tuple[int, str] | None = None
        self.deepspeed_code: str | None = None
        self.accelerate = False
        for number, line in enumerate(lines):
            self._read(number, line)

    def _read(self, number: int, line: str) -> None:
        if line.startswith("["):
            key, rest = None, line
            # `--tee` stacks the local rank's prefix on the rank's: [default1]:[rank1]:
            while prefix := _RANK_PREFIX.match(rest):
                kind = "local" if prefix.group("kind") == "default" else "rank"
                if key is None or kind == "rank":
                    key = (kind, int(prefix.group("n")))
                rest = rest[prefix.end() :]
            if key is not None:
                self.by_rank.setdefault(key, []).append(rest)
                if _TRACEBACK in rest and key not in self.first_traceback:
                    self.first_traceback[key] = number
                return
        if "Root Cause" in line and _ROOT_CAUSE.match(line):
            self.root_at = number
        elif "terminated with" in line:
            if spawn := _SPAWN.match(line):
                self.spawn = (number, int(spawn.group("index")))
            elif exited := _SPAWN_EXITED.search(line):
                self.spawn_exited = (
                    int(exited.group("index")),
                    exited.group("code") or exited.group("signal"),
                )
        elif "failed (exitcode: " in line and self.agent_failed is None:
            if agent := _AGENT_FAILED.search(line):
                self.agent_failed = (int(agent.group("local")), agent.group("code"))
        elif "sigkill_handler]" in line and " exits with return code = " in line:
            self.deepspeed_code = line.rpartition(" exits with return code = ")[2].strip()
        if "accelerate/commands/" in line or "accelerate launch" in line:
            self.accelerate = True

    def rank_text(self, key: tuple[str, int]) -> str:
        return "\n".join(self.by_rank.get(key, []))[-MAX_RANK_CHARS:]

    def summary(self) -> _Summary | None:
        """The root cause of elastic's ChildFailedError summary."""
        if self.root_at is None:
            return None
        found = _Summary()
        traceback: list[str] | None = None
        for line in self.lines[self.root_at + 1 :]:
            if _BORDER.match(line):
                break
            if traceback is not None:
                traceback.append(line[2:] if line.startswith("  ") else line)
                continue
            field = _FIELD.match(line)
            if field is None:
                continue
            name, value = field.group("name"), field.group("value").strip()
            if name == "rank" and (ranks := _RANK_FIELD.match(value)):
                found.rank, found.local_rank = int(ranks.group("rank")), int(ranks.group("local"))
            elif name == "exitcode" and (code := _EXIT_FIELD.match(value)):
                found.exitcode = code.group("code")
            elif name in ("traceback", "msg"):
                traceback = [value]
        found.traceback = "\n".join(traceback or []).strip()
        return found

    @property
    def launcher(self) -> str:
        if self.deepspeed_code is not None:
            return "deepspeed"
        return "accelerate" if self.accelerate else "torchrun"


def _explains(parsed: ParsedPaste) -> bool:
    """Whether a traceback is a failure of its own, not a launcher's report or a dead peer's."""
    final = parsed.final
    if final is None or final.type in LAUNCHER_WRAPPERS or final.type == "CalledProcessError":
        return False
    # A launcher's report is raised in its own code; a child's traceback may start there.
    last = final.frames[-1].file.replace("\\", "/") if final.frames else ""
    if any(part in last for part in _LAUNCHER_FILES):
        return False
    return not any(sign in final.message for sign in _AFTERMATH)


def _segments(lines: list[str]) -> list[str]:
    """The output cut into tracebacks: each from its header (a chained one stays with the
    exception it follows) to the next; at most the last MAX_TRACEBACKS."""
    starts: list[int] = []
    previous = ""
    for number, line in enumerate(lines):
        stripped = line.strip()
        if stripped.startswith(_TRACEBACK) and not previous.startswith(_CHAINED):
            starts.append(number)
        if stripped:
            previous = stripped
    starts = starts[-MAX_TRACEBACKS:]
    return [
        "\n".join(lines[start : starts[index + 1] if index + 1 < len(starts) else len(lines)])
        for index, start in enumerate(starts)
    ]


def each_traceback(text: str, limit: int = 20) -> list[str]:
    """The distinct errors of an output, each as its own traceback, in the order printed:
    launchers' reports and dead peers' errors left out, one of each final error line."""
    stripped, _prefixes = _strip_prefixes(_clean(text[-MAX_CHARS:]))
    found: dict[str, str] = {}
    for segment in _segments(stripped.split("\n")):
        parsed = parse_traceback(segment)
        if _explains(parsed) and parsed.final is not None:
            found.setdefault(parsed.final.first_line[:300], segment)
            if len(found) >= limit:
                break
    return list(found.values())


def _first_own_traceback(lines: list[str]) -> str | None:
    """The first traceback of the output that is a failure of its own."""
    stripped, _prefixes = _strip_prefixes("\n".join(lines))
    for segment in _segments(stripped.split("\n")):
        if _explains(parse_traceback(segment)):
            return segment
    return None


def first_failure(text: str) -> RankFailure | None:
    """The first failure of a multi-process job's output; None for other output."""
    scan = _Scan(_clean(text[-MAX_CHARS:]).split("\n"))
    summary = scan.summary()
    if summary is not None and (summary.rank is not None or summary.local_rank is not None):
        return _from_summary(scan, summary)
    if scan.spawn is not None:
        at, index = scan.spawn
        own = "\n".join(scan.lines[at + 1 :])
        return RankFailure("mp.spawn", None, index, None, "torch.multiprocessing's report", own)
    if scan.spawn_exited is not None:
        index, code = scan.spawn_exited
        own = scan.rank_text(("rank", index)) or text
        how = "torch.multiprocessing's report"
        return RankFailure("mp.spawn", None, index, code, how, own)
    if scan.by_rank and (ranked := _first_rank(scan)) is not None:
        return ranked
    if scan.agent_failed is not None:
        local, code = scan.agent_failed
        own = scan.rank_text(("local", local)) or _first_own_traceback(scan.lines) or text
        return RankFailure(scan.launcher, None, local, code, "the launcher's first failure", own)
    if scan.deepspeed_code is not None:
        # Its "exits with return code" line names the last rank it started, not the failed one.
        own = _first_own_traceback(scan.lines) or text
        how = "the first traceback printed (DeepSpeed's launcher does not say which rank failed)"
        return RankFailure("deepspeed", None, None, scan.deepspeed_code, how, own)
    return None


def _from_summary(scan: _Scan, summary: _Summary) -> RankFailure:
    how = "the launcher's root cause"
    own = ""
    if summary.rank is not None:
        own = scan.rank_text(("rank", summary.rank))
    if not own and summary.local_rank is not None:
        own = scan.rank_text(("local", summary.local_rank))
    if not own and summary.traceback.startswith(_TRACEBACK):
        own = summary.traceback  # recorded by @record in the rank's error file
    if not own:
        own = _first_own_traceback(scan.lines) or ""
        if own:
            how += "; its lines carry no rank, so the first traceback printed is read"
    launcher = scan.launcher
    return RankFailure(
        launcher, summary.rank, summary.local_rank, summary.exitcode, how, own or summary.traceback
    )


def _first_rank(scan: _Scan) -> RankFailure | None:
    """The rank whose traceback came first, a dead peer's error after any other."""
    ordered = sorted(scan.first_traceback, key=scan.first_traceback.__getitem__)
    if not ordered:
        return None
    chosen = ordered[0]
    for key in ordered[:64]:
        if _explains(parse_traceback(scan.rank_text(key))):
            chosen = key
            break
    kind, number = chosen
    rank, local = (number, None) if kind == "rank" else (None, number)
    how = "the first rank to print a traceback"
    return RankFailure("ranks", rank, local, None, how, scan.rank_text(chosen))
