"""The PostgreSQL sink's connections, and how a database error becomes the project's.

Connections: a task's publish steps come one after the other (one per lane and COMMIT, a
marker read in each PREPARE), so each process keeps the connections it made, per DSN, and
lends one to a step at a time (``Connections.lend``); a lent connection is checked with a
round trip first, since one whose server restarted while it sat idle fails its next
statement. A connection that failed, or that a step left inside a transaction, is closed,
never lent again. The connections are the process's: a sink object pickles none, and a
forked process never uses its parent's (they are kept apart by process id).

Errors (``database_error``): what psycopg raises, by its SQLSTATE class, as an outage
(``PostgresUnavailableError``: the server is away, restarting, out of connections, or a
statement waited too long for a lock; waited out), a refusal (``PostgresRefusedError``: a
permission, a read-only server; the topology stops), or ``None``: the statement itself was
wrong for the database (a value, a constraint), which the caller words as its step's error.
libpq gives no SQLSTATE for a connection that could not be made, so every failure to connect
is an outage at run time, with PostgreSQL's own words in the message (a wrong password is
refused at submit, ``PostgresSink.check_config``, before anything runs).

Example:
    >>> where("postgresql://app:secret@db.example:5433/shop")
    "db.example:5433/shop as 'app'"
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from typing import Any

from statefulbolts.connectors.postgres._config import (
    DSN_KEY,
    PostgresRefusedError,
    PostgresUnavailableError,
    require_psycopg,
)
from statefulbolts.connectors.sinks import SinkConfigError

__all__ = ["CONNECTIONS", "Connections", "database_error", "where"]

log = logging.getLogger(__name__)

# How long a connection attempt may take, unless the DSN says (connect_timeout).
CONNECT_TIMEOUT_S = 10
# Idle connections kept per process and DSN.
_KEEP = 4
# SQLSTATE classes and codes of an outage: the server away or restarting (08, 57P01-57P03),
# out of a resource (53), a system error (58), or a statement that waited too long or lost a
# race it may win next time (40001, 40P01, 55P03, 57014).
_AWAY_CLASSES = frozenset({"08", "53", "58"})
_AWAY_CODES = frozenset({"57P01", "57P02", "57P03", "40001", "40P01", "55P03", "57014", "25P03"})
# A refusal no retry changes: the role may not (42501), the login was refused (28), the
# database is gone (3D000), the server is read-only (25006).
_REFUSED_CLASSES = frozenset({"28"})
_REFUSED_CODES = frozenset({"42501", "3D000", "25006"})


def where(dsn: str) -> str:
    """``host:port/dbname as 'user'`` of a DSN, for messages (its password never shown).

    Raises:
        SinkConfigError: ``dsn`` is not a connection string libpq reads.
    """
    psycopg = require_psycopg("PostgresSink")
    from psycopg.conninfo import conninfo_to_dict

    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        msg = f"PostgresSink: the DSN ({DSN_KEY!r} or the sink's dsn) is not one libpq reads: {exc}"
        raise SinkConfigError(msg) from None
    host = parts.get("host") or parts.get("hostaddr") or "localhost"
    port = parts.get("port") or "5432"
    user = parts.get("user")
    shown = f"{host}:{port}/{parts.get('dbname') or user or '(default)'}"
    return f"{shown} as {user!r}" if user else shown


def database_error(
    exc: BaseException, *, step: str, subject: str, at: str
) -> PostgresUnavailableError | PostgresRefusedError | None:
    """``exc`` as an outage or a refusal to raise from it, or ``None`` (the caller's step error).

    Args:
        exc: what psycopg raised.
        step: what was being done (``"locking the marker"``).
        subject: what it was done for (``"lane 0of2 of sink 'publish'"``).
        at: the server (``where``).
    """
    psycopg = require_psycopg("PostgresSink")
    state = getattr(exc, "sqlstate", None) or ""
    cause = f"{type(exc).__name__}: {' '.join(str(exc).split())}"
    if state[:2] in _REFUSED_CLASSES or state in _REFUSED_CODES:
        msg = (
            f"PostgresSink: {step} for {subject}: PostgreSQL at {at} refused ({state}): {cause}; "
            "grant the permission or fix the DSN"
        )
        return PostgresRefusedError(msg)
    connection_lost = isinstance(exc, psycopg.OperationalError | psycopg.InterfaceError) and (
        not state
    )
    if connection_lost or state[:2] in _AWAY_CLASSES or state in _AWAY_CODES:
        msg = (
            f"PostgresSink: {step} for {subject}: PostgreSQL at {at} did not answer or was busy "
            f"({state or 'no SQLSTATE'}): {cause}; it is waited for "
            "(topology.state.backend.timeout.secs): check that the server is up and reachable"
        )
        return PostgresUnavailableError(msg)
    return None


class Connections:
    """This process's idle connections per DSN (the module docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._idle: dict[tuple[int, str], list[Any]] = {}

    def _connect(self, dsn: str) -> Any:
        psycopg = require_psycopg("PostgresSink")
        from psycopg.conninfo import conninfo_to_dict

        extra = (
            {}
            if "connect_timeout" in conninfo_to_dict(dsn)
            else {"connect_timeout": CONNECT_TIMEOUT_S}
        )
        return psycopg.connect(dsn, application_name="statefulbolts-sink", **extra)

    @contextlib.contextmanager
    def lend(self, dsn: str) -> Iterator[Any]:
        """A connection to ``dsn``, outside any transaction, back to the idle ones after.

        It goes back only if the block left it healthy and idle (committed or rolled back);
        else it is closed.

        Raises:
            psycopg.Error: no connection could be made (the caller words it).
        """
        conn = self._idle_one(dsn)
        if conn is None:
            conn = self._connect(dsn)
        healthy = False
        try:
            yield conn
            healthy = True
        finally:
            self._give_back(dsn, conn, healthy)

    def _idle_one(self, dsn: str) -> Any:
        """An idle connection of this process that still answers, or ``None``."""
        psycopg = require_psycopg("PostgresSink")
        key = (os.getpid(), dsn)
        while True:
            with self._lock:
                idle = self._idle.get(key)
                conn = idle.pop() if idle else None
            if conn is None:
                return None
            try:
                conn.execute("SELECT 1")
                conn.rollback()
                return conn
            except psycopg.Error as exc:
                log.debug("PostgresSink: an idle connection no longer answers (%s)", exc)
                _close(conn)

    def _give_back(self, dsn: str, conn: Any, healthy: bool) -> None:
        psycopg = require_psycopg("PostgresSink")
        idle = conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        if healthy and idle and not conn.closed:
            with self._lock:
                kept = self._idle.setdefault((os.getpid(), dsn), [])
                if len(kept) < _KEEP:
                    kept.append(conn)
                    return
        _close(conn)

    def close(self) -> None:
        """Close this process's idle connections (those of a parent process are left alone)."""
        with self._lock:
            mine = [k for k in self._idle if k[0] == os.getpid()]
            conns = [c for k in mine for c in self._idle.pop(k)]
        for conn in conns:
            _close(conn)


def _close(conn: Any) -> None:
    try:
        conn.close()
    except Exception as exc:  # noqa: BLE001 - a connection being dropped may fail to close
        log.debug("PostgresSink: closing a connection: %s: %s", type(exc).__name__, exc)


CONNECTIONS = Connections()
