"""Limits on a snippet's whole process tree: how many processes at once, how much memory in
all, and which limit stopped it.

RLIMIT_AS caps one process, so a snippet that forks 3,000 times, or starts 10 children that each
hold 4 GB, stayed under it until its timeout. The tree is held three ways:

- a cgroup v2 child of this process's cgroup (`pids.max`, `memory.max`, killed and removed
  afterwards) where that cgroup offers the pids and memory controllers and takes a child: the
  kernel counts the tree exactly;
- otherwise RLIMIT_NPROC, set inside the sandbox (`app.sandbox`): the kernel counts it per user
  namespace, so it holds the snippet's tree and nothing else of the user's. Root is exempt from
  it, so under root the sandbox runs snippets as a uid of their own on the host. Without a
  sandbox it is not set (it would count every process of the user);
- a watchdog polls the tree (`/proc`: the descendants every `POLL_S`, and every
  `SESSION_SCAN_S` all processes, for an orphan still in its session) and kills it past either
  limit. It is what stops the tree and says which limit did;
  without a sandbox it is the only process limit, without cgroups the only total-memory one.
  Memory is resident memory, counted proportionally (PSS) where pages are shared, as a forked
  child shares its parent's.

Processes count threads too, as the kernel's limits do. Each process also keeps RLIMIT_AS and
RLIMIT_DATA at the per-process memory limit.
"""

import contextlib
import functools
import itertools
import os
import resource
import signal
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

DEFAULT_MEMORY_MB = 4096  # each process (RLIMIT_AS)
DEFAULT_TOTAL_MEMORY_MB = 8192  # the whole tree
DEFAULT_MAX_PROCESSES = 512  # the whole tree, threads included (torch starts a few per process)
POLL_S = 0.05
SESSION_SCAN_S = 1.0  # a scan of every process costs ~30 us each; the descendants alone, less
CGROUP_ROOT = Path("/sys/fs/cgroup")
PAGE_BYTES = os.sysconf("SC_PAGE_SIZE")
MB = 1024 * 1024

_names = itertools.count()


@dataclass(frozen=True)
class TreeLimits:
    processes: int = DEFAULT_MAX_PROCESSES
    total_memory_mb: int = DEFAULT_TOTAL_MEMORY_MB
    process_memory_mb: int = DEFAULT_MEMORY_MB

    @property
    def processes_reason(self) -> str:
        return f"stopped: more than {self.processes} processes"

    @property
    def memory_reason(self) -> str:
        return f"stopped: more than {self.total_memory_mb} MB of memory in all"


def limit_process(limits: TreeLimits) -> None:
    """In a new process before it runs the snippet: its own memory limits."""
    limit = limits.process_memory_mb * MB
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


@dataclass(frozen=True)
class Task:
    pid: int
    ppid: int
    session: int
    state: str
    threads: int
    rss_pages: int


def read_task(pid: int) -> Task | None:
    """One process as /proc shows it now; None when it has ended."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            data = file.read()
        # The command name may hold spaces and parentheses: the fields follow the last ')'.
        fields = data[data.rindex(b")") + 2 :].split()
        return Task(
            pid=pid,
            ppid=int(fields[1]),
            session=int(fields[3]),
            state=fields[0].decode(),
            threads=int(fields[17]),
            rss_pages=int(fields[21]),
        )
    except (OSError, ValueError, IndexError):
        return None


def read_tasks() -> dict[int, Task]:
    """Every process of the machine, as /proc shows it now."""
    tasks = (read_task(int(name)) for name in os.listdir("/proc") if name.isdigit())
    return {task.pid: task for task in tasks if task is not None}


@functools.cache
def _children_lists() -> bool:
    return os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children")


def descendants(root: int) -> list[Task] | None:
    """The live processes under `root` (itself included), read through the kernel's lists of
    children; None where /proc has no such lists (a kernel built without them)."""
    if not _children_lists():
        return None
    found: list[Task] = []
    seen: set[int] = set()
    stack = [root]
    while stack:
        pid = stack.pop()
        task = read_task(pid)
        if pid in seen or task is None:
            continue
        seen.add(pid)
        if task.state != "Z":
            found.append(task)
        try:
            threads = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for thread in threads:  # a child belongs to the thread that forked it
            try:
                with open(f"/proc/{pid}/task/{thread}/children") as file:
                    stack.extend(int(child) for child in file.read().split())
            except (OSError, ValueError):
                continue  # it ended while we read
    return found


def tree_of(root: int, tasks: dict[int, Task]) -> list[Task]:
    """The live processes of `root`'s tree: its descendants, and whatever else is in the session
    it leads (an orphan a double fork left behind), zombies left out."""
    children: dict[int, list[int]] = defaultdict(list)
    for task in tasks.values():
        children[task.ppid].append(task.pid)
    members: set[int] = set()
    stack = [root]
    while stack:
        pid = stack.pop()
        if pid in members or pid not in tasks:
            continue
        members.add(pid)
        stack.extend(children[pid])
    members |= {task.pid for task in tasks.values() if task.session == root}
    return [tasks[pid] for pid in members if tasks[pid].state != "Z"]


def _pss_bytes(task: Task) -> int:
    """Its proportional share of resident memory; its RSS where that cannot be read."""
    try:
        with open(f"/proc/{task.pid}/smaps_rollup") as file:
            for line in file:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return task.rss_pages * PAGE_BYTES


def rss_bytes(members: list[Task]) -> int:
    """The cheap upper bound of the tree's memory: RSS counts a forked child's shared pages
    again, so it is refined to PSS only when it is over a limit."""
    return sum(task.rss_pages for task in members) * PAGE_BYTES


def kill_tree(root: int) -> None:
    """SIGKILL `root`'s process group and every live process of its tree, until none is left
    (a fork bomb forks while it is being killed)."""
    for _ in range(200):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(root, signal.SIGKILL)
        members = tree_of(root, read_tasks())
        if not members:
            return
        for task in members:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(task.pid, signal.SIGKILL)
        time.sleep(0.01)


class SnippetCgroup:
    """A cgroup v2 child for one snippet: `pids.max` and `memory.max` hold its whole tree."""

    def __init__(self, path: Path, limits: TreeLimits) -> None:
        self.path = path
        self.limits = limits

    @classmethod
    def create(cls, limits: TreeLimits, *, overhead: int) -> "SnippetCgroup | None":
        """A new child of this process's cgroup with the limits set, or None where cgroup v2
        is not there, lacks the controllers, or is not ours to write."""
        try:
            own = next(
                line.split("::", 1)[1].strip()
                for line in Path("/proc/self/cgroup").read_text().splitlines()
                if line.startswith("0::")
            )
            base = CGROUP_ROOT / own.lstrip("/")
            wanted = {"pids", "memory"}
            if not wanted <= set((base / "cgroup.controllers").read_text().split()):
                return None
            if not wanted <= set((base / "cgroup.subtree_control").read_text().split()):
                (base / "cgroup.subtree_control").write_text("+pids +memory")
            path = base / f"pitfalls-snippet-{os.getpid()}-{next(_names)}"
            path.mkdir()
        except (OSError, StopIteration):
            return None
        cgroup = cls(path, limits)
        try:
            # One over the limit, so that reaching it shows as "more than N".
            (path / "pids.max").write_text(str(limits.processes + overhead + 1))
            (path / "memory.max").write_text(str(limits.total_memory_mb * MB))
            for name, value in (("memory.swap.max", "0"), ("memory.oom.group", "1")):
                if (path / name).exists():
                    (path / name).write_text(value)
        except OSError:
            cgroup.remove()
            return None
        return cgroup

    def enter(self) -> None:
        """In the new process, before it runs anything: join this cgroup (children follow)."""
        (self.path / "cgroup.procs").write_text(str(os.getpid()))

    def _events(self, name: str) -> dict[str, int]:
        try:
            text = (self.path / name).read_text()
        except OSError:
            return {}
        return {k: int(v) for k, v in (line.split() for line in text.splitlines() if line)}

    def limit_hit(self) -> str | None:
        if self._events("pids.events").get("max", 0):
            return self.limits.processes_reason
        memory = self._events("memory.events")
        if memory.get("oom_kill", 0) or memory.get("oom", 0):
            return self.limits.memory_reason
        return None

    def remove(self) -> None:
        """Kill what is left in it and remove it."""
        with contextlib.suppress(OSError):
            (self.path / "cgroup.kill").write_text("1")
        for _ in range(500):
            try:
                if not (self.path / "cgroup.procs").read_text().split():
                    break
            except OSError:
                break
            time.sleep(0.01)
        with contextlib.suppress(OSError):
            self.path.rmdir()


class TreeWatch:
    """Polls the tree of `root` in a thread and kills it past a limit; `reason` says which.

    `overhead` is how many processes the runner itself adds (bubblewrap's two); `alive` says
    whether `root` is still unreaped, so that a pid used again is never watched or killed.
    """

    def __init__(
        self,
        root: int,
        limits: TreeLimits,
        *,
        alive: Callable[[], bool],
        overhead: int = 0,
        cgroup: SnippetCgroup | None = None,
        poll_s: float = POLL_S,
    ) -> None:
        self.root = root
        self.limits = limits
        self.alive = alive
        self.overhead = overhead
        self.cgroup = cgroup
        self.poll_s = poll_s
        self.reason: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._scanned_at = 0.0

    def __enter__(self) -> "TreeWatch":
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def over_limit(self) -> str | None:
        """Which limit the tree is past now, or None."""
        if self.cgroup is not None:
            hit = self.cgroup.limit_hit()
            if hit:
                return hit
        members = self._members()
        if sum(task.threads for task in members) - self.overhead > self.limits.processes:
            return self.limits.processes_reason
        limit = self.limits.total_memory_mb * MB
        if rss_bytes(members) > limit and sum(map(_pss_bytes, members)) > limit:
            return self.limits.memory_reason
        return None

    def _members(self) -> list[Task]:
        now = time.monotonic()
        if now - self._scanned_at < SESSION_SCAN_S:
            found = descendants(self.root)
            if found is not None:
                return found
        self._scanned_at = now
        return tree_of(self.root, read_tasks())

    def _watch(self) -> None:
        while not self._stop.wait(self.poll_s):
            if not self.alive():
                return
            reason = self.over_limit()
            if reason and self.alive():
                self.reason = reason
                kill_tree(self.root)
                return
