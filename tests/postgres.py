"""A real PostgreSQL server for the tests, started from the Debian packages' binaries.

`initdb` refuses to run as root, so under root the cluster is made and started as the
`postgres` user in a folder that user owns. The server listens on 127.0.0.1 only, trusts local
connections (a throw-away cluster), and runs with fsync off: the tests need its behaviour
(transactions, locks, LISTEN/NOTIFY, types and limits), not its durability.
"""

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path


def _bin_dir() -> Path | None:
    """Where initdb and pg_ctl are: on PATH, or in Debian's versioned folder (newest first)."""
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin/initdb"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
        reverse=True,
    )
    return Path(candidates[0]).parent if candidates else None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class PostgresServer:
    """One throw-away cluster; `database()` hands out fresh databases in it."""

    def __init__(self) -> None:
        self.bin = _bin_dir()
        self.folder: Path | None = None
        self.port = 0
        self._as_postgres: list[str] = []

    @property
    def available(self) -> bool:
        if self.bin is None:
            return False
        if os.geteuid() == 0:
            try:
                pwd.getpwnam("postgres")
            except KeyError:
                return False
        return True

    def _run(self, *args: str) -> subprocess.CompletedProcess:
        assert self.bin is not None
        command = [*self._as_postgres, str(self.bin / args[0]), *args[1:]]
        return subprocess.run(command, capture_output=True, text=True, check=False)

    def start(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="pitfalls-pg-"))
        if os.geteuid() == 0:
            user = pwd.getpwnam("postgres")
            os.chown(self.folder, user.pw_uid, user.pw_gid)
            os.chmod(self.folder, 0o700)
            self._as_postgres = ["runuser", "-u", "postgres", "--"]
        data = self.folder / "data"
        made = self._run(
            "initdb", "-D", str(data), "--auth=trust", "-U", "postgres", "-E", "UTF8",
            "--locale=C.UTF-8", "--no-sync",
        )  # fmt: skip
        if made.returncode:
            raise RuntimeError(f"initdb failed: {made.stderr or made.stdout}")
        self.port = _free_port()
        options = (
            f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c fsync=off "
            "-c synchronous_commit=off -c full_page_writes=off -c max_connections=200"
        )
        self._options = options
        self.resume()

    def pause(self) -> None:
        """Stop the server, keeping its data (`resume` starts it again on the same port)."""
        assert self.folder is not None
        self._run("pg_ctl", "-D", str(self.folder / "data"), "-m", "fast", "-w", "stop")

    def resume(self) -> None:
        assert self.folder is not None
        data = self.folder / "data"
        started = self._run(
            "pg_ctl", "-D", str(data), "-l", str(self.folder / "server.log"), "-o",
            self._options, "-w", "-t", "60", "start",
        )  # fmt: skip
        if started.returncode:
            log = (self.folder / "server.log").read_text(errors="replace")
            raise RuntimeError(f"pg_ctl start failed: {started.stderr}\n{log}")

    def stop(self) -> None:
        if self.folder is None:
            return
        self._run("pg_ctl", "-D", str(self.folder / "data"), "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder = None

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/{database}"

    def _admin(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(
            f"host=127.0.0.1 port={self.port} user=postgres dbname=postgres", autocommit=True
        ) as connection:
            connection.execute(sql)

    def create_database(self) -> str:
        name = f"t_{uuid.uuid4().hex[:12]}"
        self._admin(f'CREATE DATABASE "{name}"')
        return name

    def drop_database(self, name: str) -> None:
        with contextlib.suppress(Exception):
            self._admin(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    @contextlib.contextmanager
    def database(self) -> Iterator[str]:
        """A fresh, empty database; its SQLAlchemy URL is yielded, and it is dropped after."""
        name = self.create_database()
        try:
            yield self.url(name)
        finally:
            self.drop_database(name)
