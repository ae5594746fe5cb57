"""A real PostgreSQL for tests: made by ``initdb``, on a free loopback port, stopped at the end.

``postgres_server`` (session) is one shared server; ``postgres_db`` (function) is a fresh
database on it for the test (dropped after it); ``postgres_server_factory`` starts servers a
test needs for itself (one it stops and starts again: an outage) and stops them after the test.

The binaries: ``initdb`` and ``pg_ctl`` on ``PATH`` if they are there (a stand-in under
``scripts/test --fast``, which then fails the test, naming the mark to add), else Debian's
newest ``/usr/lib/postgresql/<version>/bin`` (``apt-get install postgresql``, which
``scripts/test`` runs when neither is found). A cluster lives in a new folder under the system's
temporary folder, listens on 127.0.0.1 only (its Unix socket in the same folder), trusts every
local connection (user ``postgres``, no password) and runs with ``fsync=off``: a test server,
never one to keep data in.

PostgreSQL refuses to run as root: as root, ``initdb`` and ``pg_ctl`` run as the ``postgres``
user the Debian package makes (``runuser -u postgres --``), and the cluster's folder is given
to it; without such a user the fixture says so.

Without the binaries the tests that need them fail under CI (``CI=true``) and are skipped
elsewhere, both naming the install command.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from redis_fixtures import free_port

__all__ = [
    "PostgresDatabase",
    "PostgresServer",
    "postgres_bindir",
    "postgres_db",
    "postgres_server",
    "postgres_server_factory",
]

_MISSING = (
    "PostgreSQL's server binaries (initdb, pg_ctl) are not installed: apt-get install -y "
    "postgresql (scripts/test does it), or put a PostgreSQL's bin folder on PATH; and "
    "pip install 'psycopg[binary]' (in the test extra)"
)
_DEBIAN = Path("/usr/lib/postgresql")
# The unprivileged user a root test run starts the server as (Debian's package makes it).
_RUN_AS = "postgres"
SUPERUSER = "postgres"


def postgres_bindir() -> Path | None:
    """The folder of ``initdb`` and ``pg_ctl``: on PATH, else Debian's newest version's."""
    on_path = shutil.which("pg_ctl")
    if on_path is not None and shutil.which("initdb") is not None:
        return Path(on_path).resolve().parent
    versions = []
    for candidate in _DEBIAN.glob("*/bin/pg_ctl") if _DEBIAN.is_dir() else ():
        version = candidate.parent.parent.name
        if re.fullmatch(r"\d+(\.\d+)?", version) and os.access(candidate, os.X_OK):
            versions.append((tuple(int(p) for p in version.split(".")), candidate.parent))
    return max(versions)[1] if versions else None


def _as_server_user() -> tuple[list[str], int | None, int | None]:
    """The command prefix that runs a server binary, and the uid / gid to give its folder.

    Not root: nothing (the binaries run as this user). Root: ``runuser -u postgres --``.

    Raises:
        RuntimeError: running as root with no ``postgres`` user or no ``runuser``.
    """
    if os.geteuid() != 0:
        return [], None, None
    try:
        user = pwd.getpwnam(_RUN_AS)
    except KeyError:
        msg = (
            "the tests run as root, and PostgreSQL refuses to: they start it as the "
            f"{_RUN_AS!r} user, which does not exist here (apt-get install postgresql makes "
            "it; or run the tests as an unprivileged user)"
        )
        raise RuntimeError(msg) from None
    runuser = shutil.which("runuser")
    if runuser is None:
        msg = (
            f"the tests run as root: starting PostgreSQL as {_RUN_AS!r} needs runuser (util-linux)"
        )
        raise RuntimeError(msg)
    return [runuser, "-u", _RUN_AS, "--"], user.pw_uid, user.pw_gid


class PostgresServer:
    """One PostgreSQL cluster in its own folder, serving on 127.0.0.1 (the module docstring)."""

    host = "127.0.0.1"

    def __init__(self, bindir: Path) -> None:
        self.bindir = bindir
        self.prefix, uid, gid = _as_server_user()
        self.folder = Path(tempfile.mkdtemp(prefix="statefulbolts-pg-"))
        if uid is not None and gid is not None:
            os.chown(self.folder, uid, gid)
        self.data = self.folder / "data"
        self.port = 0
        self._names = itertools.count()
        self._initdb()

    def __repr__(self) -> str:
        return f"PostgresServer({self.host}:{self.port}, {self.bindir})"

    def _run(self, binary: str, *args: str, timeout: float = 60) -> str:
        done = subprocess.run(
            [*self.prefix, str(self.bindir / binary), *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
            cwd=self.folder,
        )
        if done.returncode != 0:
            msg = f"{binary} {' '.join(args)} exited {done.returncode}: {done.stderr[-2000:]}"
            raise RuntimeError(msg)
        return done.stdout

    def _initdb(self) -> None:
        self._run(
            "initdb",
            "-D", str(self.data),
            "-U", SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
        )  # fmt: skip

    def dsn(self, dbname: str = "postgres") -> str:
        """``postgresql://postgres@127.0.0.1:<port>/<dbname>``."""
        return f"postgresql://{SUPERUSER}@{self.host}:{self.port}/{dbname}"

    @property
    def log(self) -> Path:
        """The server's log file."""
        return self.folder / "server.log"

    def start(self, port: int | None = None) -> PostgresServer:
        """Start (again, on ``port``: the data stays) and wait until it takes connections."""
        for _attempt in range(1 if port else 3):
            self.port = port or free_port()
            options = " ".join(
                (
                    f"-c listen_addresses={self.host}",
                    f"-c port={self.port}",
                    f"-c unix_socket_directories={self.folder}",
                    "-c fsync=off",
                    "-c synchronous_commit=off",
                    "-c full_page_writes=off",
                )
            )
            try:
                self._run(
                    "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options,
                    "-w", "-t", "60", "start",
                )  # fmt: skip
            except RuntimeError:
                if port is not None:
                    raise
                continue
            if self._answers():
                return self
        msg = f"PostgreSQL did not start on {self.host}:{self.port}: {self.log_tail()}"
        raise RuntimeError(msg)

    def _answers(self, timeout: float = 30.0) -> bool:
        import psycopg

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with psycopg.connect(self.dsn(), connect_timeout=2):
                    return True
            except psycopg.OperationalError:
                time.sleep(0.05)
        return False

    def log_tail(self) -> str:
        """The end of the server's log."""
        return self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""

    def stop(self, mode: str = "fast") -> None:
        """Stop the server: ``fast`` ends sessions, shuts down cleanly; ``immediate`` crashes."""
        if (self.data / "postmaster.pid").exists():
            self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")

    def remove(self) -> None:
        """Stop (if it still runs) and delete the cluster's folder."""
        try:
            with contextlib.suppress(RuntimeError):  # a server already gone: nothing to stop
                self.stop("immediate")
        finally:
            shutil.rmtree(self.folder, ignore_errors=True)

    def execute(self, query: str, dbname: str = "postgres") -> list[tuple[Any, ...]]:
        """Run ``query`` (autocommit) as the superuser; its rows (none for a command)."""
        import psycopg

        with psycopg.connect(self.dsn(dbname), autocommit=True) as conn:
            cur = conn.execute(query.encode())
            return list(cur.fetchall()) if cur.description is not None else []

    def new_database(self, prefix: str = "t") -> PostgresDatabase:
        """A new, empty database on this server."""
        name = f"{prefix}_{next(self._names)}_{os.getpid()}"
        self.execute(f'CREATE DATABASE "{name}"')
        return PostgresDatabase(self, name)


class PostgresDatabase:
    """One database of a ``PostgresServer``: its DSN and a way to query it."""

    def __init__(self, server: PostgresServer, name: str) -> None:
        self.server, self.name = server, name

    @property
    def dsn(self) -> str:
        """The database's DSN."""
        return self.server.dsn(self.name)

    def __repr__(self) -> str:
        return f"PostgresDatabase({self.dsn})"

    def execute(self, query: str) -> list[tuple[Any, ...]]:
        """Run ``query`` in the database (autocommit); its rows."""
        return self.server.execute(query, self.name)

    def drop(self) -> None:
        """Drop the database, ending the sessions still on it."""
        with contextlib.suppress(Exception):
            self.server.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


def _require_postgres() -> Path:
    bindir = postgres_bindir()
    try:
        import psycopg  # noqa: F401 - the tests' client and the sink's
    except ImportError:
        bindir = None
    if bindir is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(_MISSING, pytrace=False)
        pytest.skip(_MISSING)
    return bindir


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """The session's PostgreSQL on a free 127.0.0.1 port."""
    server = PostgresServer(_require_postgres())
    try:
        yield server.start()
    finally:
        server.remove()


@pytest.fixture
def postgres_db(postgres_server: PostgresServer) -> Iterator[PostgresDatabase]:
    """A fresh database on the session's server, dropped after the test."""
    database = postgres_server.new_database()
    try:
        yield database
    finally:
        database.drop()


@pytest.fixture
def postgres_server_factory() -> Iterator[Any]:
    """Start servers of the test's own (``postgres_server_factory()`` -> a started server)."""
    made: list[PostgresServer] = []
    bindir = _require_postgres()

    def make() -> PostgresServer:
        server = PostgresServer(bindir)
        made.append(server)
        return server.start()

    try:
        yield make
    finally:
        for server in made:
            server.remove()
