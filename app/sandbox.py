"""Where `pitfalls verify` runs a snippet: inside bubblewrap when it works here, else plainly.

Snippets are untrusted code: anyone who may edit in the wiki, or holds a write token, can store
one. Inside the sandbox (`bwrap`) a snippet sees a fresh root built of read-only binds of only what
the interpreter needs: `/usr` and the `/bin`, `/sbin` and `/lib*` next to it, the dynamic linker's
cache, and the interpreter's own prefixes and site-packages (asked of that interpreter, so a venv
and a base Python kept under a home folder work without exposing the rest of that home). It gets
new user, PID, network, IPC, UTS and cgroup namespaces (no network at all, and `/proc` holds only
its own processes), runs as uid and gid 65534 with no capabilities, in a new session, killed with
its parent, and with an environment of only the variables listed in `snippet_environment`. Its
working folder, home and TMPDIR are a tmpfs that disappears with it. Nothing of the data dir, the
database, the secret key or the invoking user's home is bound in; a bind that would expose one of
them makes the sandbox unavailable instead.

A snippet's whole tree is held to a number of processes by RLIMIT_NPROC, set inside the sandbox
by a few lines of Python that then exec the snippet (`_ENTER`): the kernel counts it per user
namespace, so it counts the snippet's tree only. It does not hold uid 0, and bubblewrap run by
root maps the sandbox's uid to root; so under root the sandbox gets a user namespace made here
(`_own_user_namespace`), where 0 and 65534 are themselves: bubblewrap sets up as 0, and `_ENTER`
becomes 65534 before the snippet runs, on the host too. See `app.snippet_limits` for the rest.

Whether bubblewrap works is found out by running it (`bwrap … true`) once, not assumed from its
presence: it needs user namespaces, which some containers forbid. When it does not work,
`Unsandboxed` runs snippets as plain subprocesses with the same small environment, and
`pitfalls verify` then runs only snippets that came from `content/` files (reviewed like code)
unless told `--unsafe-no-sandbox`.
"""

import ctypes
import dataclasses
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from dataclasses import dataclass, field
from glob import glob
from pathlib import Path
from typing import Protocol

SANDBOX_ID = 65534  # the conventional "nobody"
SANDBOX_TMP = "/tmp"
SANDBOX_HOME = f"{SANDBOX_TMP}/home"
SANDBOX_WORKDIR = f"{SANDBOX_TMP}/snippet"
SCRIPT_NAME = "snippet.py"
SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
PROBE_TIMEOUT_S = 60
CLONE_NEWUSER = 0x10000000
# bubblewrap's own processes in a snippet's tree: the one started here and its init in the
# sandbox (both counted by the kernel's limits on the tree, neither by the snippet's).
BWRAP_PROCESSES = 2

# Runs first inside the sandbox: the limit on processes (counted in this user namespace only),
# the drop to the sandbox's uid where bubblewrap set up as 0, then the snippet's interpreter.
_ENTER = """
import os, resource, sys
processes, uid = int(sys.argv[1]), int(sys.argv[2])
if uid >= 0:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
if processes > 0:
    resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
os.execv(sys.executable, [sys.executable, *sys.argv[3:]])
"""

_ASK_INTERPRETER = """
import json, site, sys
print(json.dumps({
    "executable": sys.executable,
    "prefixes": [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix],
    "site_packages": site.getsitepackages() if hasattr(site, "getsitepackages") else [],
}))
"""

_PASSWD = f"sandbox:x:{SANDBOX_ID}:{SANDBOX_ID}:sandbox:{SANDBOX_HOME}:/usr/sbin/nologin\n"
_GROUP = f"sandbox:x:{SANDBOX_ID}:\n"
_HOSTNAME = "sandbox"
_HOSTS = f"127.0.0.1 localhost {_HOSTNAME}\n::1 localhost\n"


class SandboxUnavailable(Exception):
    """Bubblewrap cannot run snippets here; the message says why."""


@dataclass(frozen=True)
class Launch:
    """How to start one process: what `subprocess.Popen` needs."""

    argv: list[str]
    env: dict[str, str]
    cwd: str | None = None
    pass_fds: tuple[int, ...] = ()
    runner_processes: int = 0  # processes of the runner's own in the tree (not the snippet's)


class Runner(Protocol):
    @property
    def sandboxed(self) -> bool: ...

    @property
    def description(self) -> str:
        """How snippets run, for a person: "inside bubblewrap (…)" or "without a sandbox (…)"."""
        ...

    def python(
        self,
        *,
        script: str | None = None,
        args: Sequence[str] = (),
        max_processes: int | None = None,
    ) -> AbstractContextManager[Launch]:
        """How to start the interpreter on `script` (its source) or on `args`; where the runner
        can, with the kernel holding its tree to a little over `max_processes`."""
        ...


def snippet_environment(*, executable: str, home: str, tmp: str) -> dict[str, str]:
    """Everything a snippet's process is told: nothing of the parent's environment but CUDA's
    device choice."""
    folder = os.path.dirname(executable)
    env = {
        "PATH": f"{folder}:{SYSTEM_PATH}" if folder else SYSTEM_PATH,
        "HOME": home,
        "TMPDIR": tmp,
        "LANG": "C.UTF-8",
        "PYTHONUNBUFFERED": "1",
        "PYTHONDONTWRITEBYTECODE": "1",
        "MPLBACKEND": "Agg",
        "OMP_NUM_THREADS": "1",  # several snippets run at once
    }
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
    return env


@dataclass(frozen=True)
class Unsandboxed:
    """Plain subprocesses in a private temporary folder: for code the team reviewed."""

    executable: str
    why: str = ""
    sandboxed: bool = field(default=False, init=False)

    @property
    def description(self) -> str:
        return f"without a sandbox ({self.why})" if self.why else "without a sandbox"

    @contextmanager
    def python(
        self,
        *,
        script: str | None = None,
        args: Sequence[str] = (),
        max_processes: int | None = None,  # not set: RLIMIT_NPROC would count all the user's
    ) -> Iterator[Launch]:
        with tempfile.TemporaryDirectory(prefix="pitfalls-snippet-") as workdir:
            home = os.path.join(workdir, "home")
            os.mkdir(home)
            argv = [self.executable]
            if script is not None:
                path = os.path.join(workdir, SCRIPT_NAME)
                Path(path).write_text(script, encoding="utf-8")
                argv.append(path)
            env = snippet_environment(executable=self.executable, home=home, tmp=workdir)
            yield Launch(argv=[*argv, *args], env=env, cwd=workdir)


@dataclass(frozen=True)
class Interpreter:
    executable: str
    paths: tuple[str, ...]  # its prefixes and site-packages, as it names them and resolved


def describe_interpreter(python: str) -> Interpreter:
    """Ask `python` where it lives: its prefixes (a venv's and its base's) and site-packages."""
    try:
        answer = subprocess.run(
            [shutil.which(python) or python, "-c", _ASK_INTERPRETER],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            check=True,
            env={"PATH": SYSTEM_PATH, "LANG": "C.UTF-8"},
        )
        facts = json.loads(answer.stdout.strip().splitlines()[-1])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError) as exc:
        raise SandboxUnavailable(f"cannot ask {python} where it lives: {exc}") from None
    executable = facts["executable"] or shutil.which(python) or python
    named = [
        *facts["prefixes"],
        *facts["site_packages"],
        os.path.dirname(executable),
    ]
    paths = {p for name in named for p in (name, os.path.realpath(name)) if os.path.isdir(p)}
    paths.add(os.path.dirname(os.path.realpath(executable)))
    return Interpreter(executable=executable, paths=tuple(sorted(paths)))


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _outermost(paths: Iterable[str], already: Sequence[str]) -> list[str]:
    """`paths` minus those inside another one or inside `already`, shortest first."""
    kept: list[str] = []
    for path in sorted(set(paths), key=len):
        if not any(_within(path, outer) for outer in [*already, *kept]):
            kept.append(path)
    return kept


def _system_mounts() -> tuple[list[str], list[str]]:
    """bwrap arguments for `/usr` and the merged-/usr links (or folders) beside it; and the
    folders they bind."""
    args = ["--ro-bind", "/usr", "/usr"]
    bound = ["/usr"]
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = f"/{name}"
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
            bound.append(path)
    return args, bound


@contextmanager
def _data_fds(files: Mapping[str, str]) -> Iterator[dict[str, int]]:
    """An open, rewound, anonymous file for each text: bwrap copies them in by descriptor."""
    with ExitStack() as stack:
        fds: dict[str, int] = {}
        for name, text in files.items():
            handle = stack.enter_context(tempfile.TemporaryFile())
            handle.write(text.encode("utf-8"))
            handle.flush()
            handle.seek(0)
            fds[name] = handle.fileno()
        yield fds


def _ancestors(paths: Iterable[str], already: Sequence[str]) -> list[str]:
    """The folders above `paths` that bwrap would create itself, outside `already`."""
    found: set[str] = set()
    for path in paths:
        parent = os.path.dirname(path)
        while parent not in ("/", "") and not any(_within(parent, outer) for outer in already):
            found.add(parent)
            parent = os.path.dirname(parent)
    return sorted(found, key=lambda p: (p.count("/"), p))


@contextmanager
def _own_user_namespace() -> Iterator[int]:
    """An open user namespace in which uids and gids 0 and SANDBOX_ID are themselves. Only root
    can make one (it maps uids other than its own); OSError or SubprocessError otherwise."""
    libc = ctypes.CDLL(None, use_errno=True)

    def enter() -> None:
        if libc.unshare(CLONE_NEWUSER) != 0:
            raise OSError(ctypes.get_errno(), "unshare(CLONE_NEWUSER) failed")

    holder = subprocess.Popen(
        [shutil.which("sleep", path=SYSTEM_PATH) or "sleep", "600"],
        preexec_fn=enter,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        for name in ("uid_map", "gid_map"):
            Path(f"/proc/{holder.pid}/{name}").write_text(f"0 0 1\n{SANDBOX_ID} {SANDBOX_ID} 1\n")
        fd = os.open(f"/proc/{holder.pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        holder.kill()
        holder.wait()
    try:
        yield fd
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Bubblewrap:
    """Snippets inside `bwrap`: see the module docstring for what they can and cannot reach.

    `own_userns`: under root, the user namespace is made here (see the module docstring)."""

    bwrap: str
    interpreter: Interpreter
    keep_out: tuple[str, ...] = ()
    own_userns: bool = False
    sandboxed: bool = field(default=True, init=False)

    @property
    def description(self) -> str:
        return f"inside bubblewrap ({self.bwrap})"

    def binds(self) -> tuple[list[str], list[str]]:
        """bwrap mount arguments, and every host folder they make visible."""
        args, bound = _system_mounts()
        interpreter = _outermost(self.interpreter.paths, bound)
        # Folders bwrap makes on the way are its setup uid's alone, which is not the snippet's
        # uid under root: open them to all (they hold nothing but the way down).
        for folder in _ancestors(interpreter, bound):
            args += ["--perms", "0755", "--dir", folder]
        for path in interpreter:
            args += ["--ro-bind", path, path]
            bound.append(path)
        for device in sorted(glob("/dev/nvidia*")):
            args += ["--dev-bind", device, device]
        return args, bound

    def check_binds(self) -> None:
        """Refuse a bind that would show a folder snippets must not see (or one holding it)."""
        _, bound = self.binds()
        for secret in self.keep_out:
            for path in bound:
                if _within(secret, path):
                    raise SandboxUnavailable(
                        f"binding {path} into the sandbox would expose {secret}"
                    )

    def _namespaces(self, userns_fd: int | None) -> list[str]:
        if userns_fd is None:
            return ["--unshare-all", "--uid", str(SANDBOX_ID), "--gid", str(SANDBOX_ID)]
        return [
            *("--userns", str(userns_fd), "--unshare-ipc", "--unshare-pid", "--unshare-net"),
            *("--unshare-uts", "--unshare-cgroup-try"),
        ]

    def _capabilities(self, userns_fd: int | None) -> list[str]:
        if userns_fd is None:
            return ["--cap-drop", "ALL"]
        # For `_ENTER` to become SANDBOX_ID: becoming it leaves no capability at all.
        return ["--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]

    def entry(self, args: Sequence[str], max_processes: int | None = None) -> list[str]:
        """The command the sandbox runs for the interpreter on `args`: through `_ENTER` where
        a process limit is set or the uid is to be dropped."""
        python = self.interpreter.executable
        if max_processes is None and not self.own_userns:
            return [python, *args]
        # One over for the sandbox's init (counted where it has the snippet's uid), one so
        # that the watchdog sees "more than N".
        processes = 0 if max_processes is None else max_processes + 2
        uid = SANDBOX_ID if self.own_userns else -1
        return [python, "-S", "-c", _ENTER, str(processes), str(uid), *args]

    def command(
        self, args: Sequence[str], fds: Mapping[str, int], userns_fd: int | None = None
    ) -> list[str]:
        """The bwrap argv running `args`, with each sandbox path of `fds` filled from it, in
        the user namespace `userns_fd` where given (else a new one)."""
        mounts, _ = self.binds()
        argv = [
            self.bwrap,
            *self._namespaces(userns_fd),
            "--hostname",
            _HOSTNAME,
            *self._capabilities(userns_fd),
            "--die-with-parent",
            "--new-session",
            "--perms",
            "01777",
            "--tmpfs",
            SANDBOX_TMP,
            *mounts,
            "--perms",
            "0755",
            "--dir",
            "/etc",
            "--ro-bind-try",
            "/etc/ld.so.cache",
            "/etc/ld.so.cache",
            "--proc",
            "/proc",
            "--dev",
            "/dev",
            "--perms",
            "01777",
            "--tmpfs",
            "/dev/shm",
            "--perms",
            "0777",
            "--dir",
            SANDBOX_HOME,
            "--perms",
            "0777",
            "--dir",
            SANDBOX_WORKDIR,
        ]
        for path, fd in fds.items():
            kind = "--ro-bind-data" if path.startswith("/etc/") else "--file"
            argv += ["--perms", "0644", kind, str(fd), path]  # readable by the snippet's uid
        return [*argv, "--chdir", SANDBOX_WORKDIR, "--", *args]

    @contextmanager
    def _user_namespace(self) -> Iterator[int | None]:
        if not self.own_userns:
            yield None
            return
        try:
            with _own_user_namespace() as fd:
                yield fd
        except (OSError, subprocess.SubprocessError) as exc:
            raise SandboxUnavailable(f"cannot make a user namespace: {exc}") from None

    @contextmanager
    def python(
        self,
        *,
        script: str | None = None,
        args: Sequence[str] = (),
        max_processes: int | None = None,
    ) -> Iterator[Launch]:
        files = {"/etc/passwd": _PASSWD, "/etc/group": _GROUP, "/etc/hosts": _HOSTS}
        inner = []
        if script is not None:
            files[f"{SANDBOX_WORKDIR}/{SCRIPT_NAME}"] = script
            inner.append(SCRIPT_NAME)
        with _data_fds(files) as fds, self._user_namespace() as userns:
            yield Launch(
                argv=self.command(self.entry([*inner, *args], max_processes), fds, userns),
                env=snippet_environment(
                    executable=self.interpreter.executable, home=SANDBOX_HOME, tmp=SANDBOX_TMP
                ),
                pass_fds=(*fds.values(), *([] if userns is None else [userns])),
                runner_processes=BWRAP_PROCESSES,
            )

    def try_once(self) -> None:
        """Run the interpreter in this sandbox, to the snippet's uid and under a process limit;
        SandboxUnavailable with the complaint if that fails."""
        with _data_fds({"/etc/passwd": _PASSWD}) as fds, self._user_namespace() as userns:
            try:
                done = subprocess.run(
                    self.command(self.entry(["-c", "pass"], 64), fds, userns),
                    env={"PATH": SYSTEM_PATH},
                    pass_fds=(*fds.values(), *([] if userns is None else [userns])),
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    text=True,
                    timeout=PROBE_TIMEOUT_S,
                )
            except (OSError, subprocess.SubprocessError) as exc:
                raise SandboxUnavailable(f"bwrap does not run: {exc}") from None
        if done.returncode != 0:
            said = (done.stderr or done.stdout).strip().splitlines()
            raise SandboxUnavailable(
                f"bwrap does not work here: {said[-1] if said else f'exit {done.returncode}'}"
            )


def find_bubblewrap(python: str, *, keep_out: Iterable[Path | str] = ()) -> Bubblewrap:
    """A bubblewrap sandbox for `python` that was seen to work, or SandboxUnavailable."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        raise SandboxUnavailable("bwrap is not installed (the Debian package is bubblewrap)")
    hidden = {os.path.realpath(p) for p in [*keep_out, Path.home()]}
    hidden |= {os.path.abspath(p) for p in [*keep_out, Path.home()]}
    sandbox = Bubblewrap(bwrap, describe_interpreter(python), tuple(sorted(hidden)))
    sandbox.check_binds()
    if os.geteuid() == 0:
        # Root is exempt from RLIMIT_NPROC: run the snippet as a uid of its own (see above).
        own = dataclasses.replace(sandbox, own_userns=True)
        try:
            own.try_once()
            return own
        except SandboxUnavailable:
            pass  # then bubblewrap's own namespace, where only the watchdog counts processes
    sandbox.try_once()
    return sandbox


def choose_runner(python: str, *, keep_out: Iterable[Path | str] = ()) -> Bubblewrap | Unsandboxed:
    """Bubblewrap when it works here; otherwise plain subprocesses, saying why."""
    try:
        return find_bubblewrap(python, keep_out=keep_out)
    except SandboxUnavailable as exc:
        return Unsandboxed(python, why=str(exc))
