"""A state provider in one SQLite file, and the template for writing your own provider.

Use it::

    conf = {
        "topology.state.provider": "sqlite_state.SqliteKeyValueStateProvider",
        "topology.state.provider.config": '{"path": "/var/lib/myapp/state.sqlite3"}',
    }

The state survives process and machine restarts, needs no server and is safe for several
processes on one machine (WAL journal, a busy timeout, ``BEGIN IMMEDIATE`` around every write).
It is not for several machines: SQLite files on network filesystems lose locks.

Config (``topology.state.provider.config``, a JSON string or a dict; every field optional):

``path``
    The database file (default ``statefulbolts-state.sqlite3``). A relative path is resolved
    against the working directory of each process that opens it; Spark executors may run
    elsewhere, so give an absolute path on a real cluster.
``timeout``
    How long, in milliseconds, a write waits for another process's write lock (default 5000),
    and an open for another process setting up a new file.
``keyClass``, ``valueClass``, ``keySerializerClass``, ``valueSerializerClass``
    As for every provider (``providers.resolve_serializers``): a serializer class (dotted name,
    made with no arguments, with ``serialize`` and ``deserialize``), or msgpack rebuilding the
    named class on decode.

Writing your own provider
=========================

This file is a complete provider built only on the public ``providers`` package and the standard
library; copy it and swap SQL for your store's calls.

1. **What to implement.** A ``providers.KeyValueState`` subclass with ``put``, ``get(key,
   default=None)``, ``delete`` (returns the old value), ``__iter__`` (``(key, value)`` pairs),
   ``prepare_commit(txid)``, ``commit(txid=None)`` and ``rollback()``; and a
   ``providers.StateProvider`` subclass with ``new_state(namespace, conf, context=None)``. The
   provider is created with no arguments each time a state is asked for, so keep expensive things
   (connections, pools) in a module-level cache keyed by process id and config. Optionally,
   ``namespaces(conf, prefix="")``: the sorted namespaces starting with ``prefix`` that hold
   state, so ``checkpoint status`` finds a topology's tasks (the default, ``None``, says the
   provider cannot list), and ``committed_key_counts(conf, namespaces)``: how many committed
   keys each namespace holds, counted cheaply, for the dashboard's state size chart (the
   default, ``None``, shows the size as unknown). Optionally too, the *stored image*
   (``stored_txids``, ``scan_committed``, ``scan_prepared``, ``decode_key``, ``decode_value``,
   ``get_committed``, ``replace_stored``; see ``providers.KeyValueState``), so that
   ``statefulbolts state`` can dump the provider's states and export or import a topology; this
   file has all of them.

   A durable provider (its state outlives the driver: a server, a file) must also keep leases
   and fence its writes, or nothing stops two drivers of one topology from writing the same
   state: ``StateProvider.lease_store(conf)`` returns a ``providers.LeaseStore`` (here
   ``SqliteLeaseStore``), and the state implements ``State.fence(epoch)`` (and, optionally,
   ``KeyValueState.stored_fence()``). Only a provider whose state lives in one driver (the
   in-memory one) returns ``None``. The rules are in 2.; ``providers._lease`` has the protocol.

   Choose the key and value serializers with ``providers.resolve_serializers`` from the four
   fields above and nothing else: the framework stores its own records (the checkpoint spout's
   ``[txid, phase]``) through ``StateFactory.get_system_state``, which takes those fields out of
   the config to get plain msgpack whatever the user configured.

2. **The contract** (the in-memory and Redis providers keep the same one, and
   ``tests/providers/test_state_contract.py`` checks it; add your provider to that suite):

   - Keep three things per namespace: the *committed* map with its txid, the *prepared delta*
     (writes since the last commit that were prepared, deletions kept as tombstones) with its
     txid, and, in the state object only, the *pending* writes since the last prepare.
   - ``put(k, None)`` raises ``StateSerializationError``; so does a key or value the serializer
     cannot encode, and its message names the key and the type.
   - Reads look in pending, then prepared, then committed; a tombstone means absent. Iteration
     yields in that order, each key once, tombstones hidden.
   - ``prepare_commit(t)`` moves pending into the prepared delta. The same ``t`` again merges
     (newer writes win). Another ``t`` while one is prepared raises ``StateTransactionError``,
     and so does ``t`` at or below the committed txid. Pending writes survive a refused prepare.
   - ``commit(t)`` applies the prepared delta of ``t`` to the committed map (tombstones delete)
     and records ``t`` as committed, atomically. ``commit(t)`` again with nothing prepared is a
     no-op (Spark and the checkpoint spout retry COMMITs). Any other ``commit(t)`` raises.
   - ``commit()`` without a txid applies the pending writes to the committed map at once and,
     if nothing was ever committed, records txid -1. It leaves a prepared delta alone.
   - ``rollback()`` drops pending writes and the prepared delta and its txid. A state object
     whose namespace another object rolled back since it was made cannot prepare any more
     (``StateTransactionError``): a Spark task attempt that outlived its failed transaction must
     not land its delta after the rollback, over the retry's. Count rollbacks in the store and
     compare in the prepare's own atomic step (here: the ``rollbacks`` table).
   - ``new_state`` of a namespace returns its committed data plus any prepared delta, so a
     restarted task can roll back or commit what the previous one prepared.
   - ``supersede_prepared(t)`` (optional; the default is ``rollback()``) is called on a fresh
     state before a PREPARE(t) job feeds it: unless a delta of another txid is stored, reads
     then skip the stored delta, and the next ``prepare_commit(t)`` replaces whatever delta of
     ``t`` is stored by then (another attempt may prepare meanwhile) instead of merging into it,
     in the same atomic step as writing the new delta. Without it, a Spark retry of a task whose
     first attempt had prepared would count that attempt's writes twice.
   - Store failures raise ``StateBackendError`` (chained with ``raise ... from``) naming where
     the store is and the namespace, when waiting may cure them (here: the database is locked
     by another process, an I/O error); the runtime waits those out for
     ``topology.state.backend.timeout.secs``. A failure that waiting does not cure raises
     ``StateBackendRefusedError`` with the cause and the fix, and stops the topology at once
     (here: a read-only file, a full disk, a corrupt file or one that is not a database, a
     path that cannot be a file; ``_failure``). Bad config raises ``ProviderConfigError``
     naming the field.
   - **Leases** (``tests/providers/test_lease_contract.py`` checks them; add your provider
     there too): each ``LeaseStore`` method is one atomic step of the store. Keep per scope (a
     namespace prefix, ``wc/``) the lease's *epoch*, its holder and its expiry, by one clock
     (here ``time.time``: one machine; a server should use its own, as the Redis store does),
     and the holders of the last grants. ``acquire(scope, holder, ttl_ms, over=None)`` grants
     the next epoch when no lease is live, or when ``over`` names the live epoch (a
     compare-and-set: of two take-overs at once, one wins); otherwise it raises
     ``LeaseHeldError`` with the live ``Lease``. Epochs only grow, also after the scope's state
     was deleted (here: the ``leases`` row stays, and a grant also goes past every fence of the
     scope). Before ``acquire`` returns, raise the fence of every namespace under the scope that
     holds state to the new epoch (here: in the grant's own transaction). ``renew`` extends
     only the caller's epoch, lapsed or not (else ``LeaseLostError``); ``release`` marks it
     lapsed, keeping its epoch and holder.
   - **Fencing**: after ``fence(epoch)``, every write step of the state (``prepare_commit``,
     ``commit`` with and without a txid, ``rollback``, ``replace_stored``) compares the epoch
     with the namespace's fence in the same atomic step as the write: below it, raise
     ``StateFencedError`` (with ``epoch`` and ``fence``) and write nothing; above it, raise the
     fence. A state never fenced (the state tool, tests) writes as before and leaves the fence
     alone. Here: the ``fences`` table, read and raised inside each write transaction
     (``_write``).

3. **Dropping it in.** Put the module (or package) in an ``extlib/`` folder: the project's own,
   ``./extlib`` in the working directory, a folder named by ``topology.state.extlib.dir`` or by
   the ``STATEFULBOLTS_EXTLIB`` environment variable (several separated by ``os.pathsep``). The
   runtime looks there, on the driver and on every executor, only for a module the normal
   import system does not find, and loads just that module: the folders never go on
   ``sys.path``, so a file there named like an installed module is ignored (with a warning),
   and a provider of several files must be a package. A provider installed as a normal package
   works too.

4. **Naming it.** Set ``topology.state.provider`` to ``module.ClassName`` of the provider, as
   above, and its settings under ``topology.state.provider.config``.
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from providers import (
    SERIALIZER_FIELDS,
    STATE_PROVIDER_CONFIG_KEY,
    KeyValueState,
    Lease,
    LeaseHeldError,
    LeaseHolder,
    LeaseLostError,
    LeaseStore,
    MsgpackKeySerializer,
    MsgpackSerializer,
    ProviderConfigError,
    Serializer,
    StateBackendError,
    StateBackendRefusedError,
    StateFencedError,
    StateProvider,
    StateSerializationError,
    StateTransactionError,
    StateTtl,
    encode_value,
    is_expired,
    merge_layers,
    provider_config_fields,
    resolve_serializers,
)

__all__ = ["SqliteConfig", "SqliteKeyValueState", "SqliteKeyValueStateProvider", "SqliteLeaseStore"]

log = logging.getLogger(__name__)

DEFAULT_PATH = "statefulbolts-state.sqlite3"
DEFAULT_TIMEOUT_MS = 5000
_PAGE = 100
# Namespaces per COUNT query of ``committed_key_counts`` (bound parameters per statement).
_COUNT_CHUNK = 500
# How many grants ``lease_holders`` keeps per scope (the contract asks for at least 8).
LEASE_HISTORY = 16

# committed: the committed map. prepared: the prepared delta, value NULL = tombstone.
# txids: per namespace, the committed txid and the pending prepare txid (NULL = none).
# rollbacks: per namespace, how many rollbacks it had. A state prepares only if none happened
# since it last looked, so a task attempt that outlived its failed transaction, the rollback and
# the retry cannot land its stale delta over the retry's. (A table of its own: files made
# before it simply gain it.)
# Time to live (``providers.StateTtl``): committed.expiry is a key's expiry in ms (NULL: none),
# indexed for the commit's cleanup; ttl_times holds per namespace the prepared transaction's
# timestamp and the expiry of every value of its delta, and the last committed transaction's
# timestamp. (A file made before TTL gains the column, its index and the table when opened.)
# Leases (``providers.LeaseStore``): leases holds per scope the lease's epoch, its holder, its
# time to live and when it expires (ms of ``time.time``: one machine, one clock), and stays when
# the scope's state is deleted, so epochs never go back; lease_holders the holders of the last
# LEASE_HISTORY grants. fences holds per namespace the highest lease epoch that wrote it: a
# table of its own rather than a column of txids, whose row a rollback before any commit
# deletes. (A file made before leases gains the three tables when opened.)
_SCHEMA = """
CREATE TABLE IF NOT EXISTS committed (
    ns TEXT NOT NULL, key BLOB NOT NULL, value BLOB NOT NULL, expiry INTEGER,
    PRIMARY KEY (ns, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS prepared (
    ns TEXT NOT NULL, key BLOB NOT NULL, value BLOB, PRIMARY KEY (ns, key)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS txids (
    ns TEXT PRIMARY KEY, committed INTEGER, prepared INTEGER
);
CREATE TABLE IF NOT EXISTS rollbacks (
    ns TEXT PRIMARY KEY, count INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS ttl_times (
    ns TEXT PRIMARY KEY, prepared_time INTEGER, prepared_expiry INTEGER, committed_time INTEGER
);
CREATE TABLE IF NOT EXISTS leases (
    scope TEXT PRIMARY KEY, epoch INTEGER NOT NULL,
    host TEXT NOT NULL, pid INTEGER NOT NULL, started_at REAL NOT NULL,
    process TEXT NOT NULL, token TEXT NOT NULL,
    ttl_ms INTEGER NOT NULL, expires_ms INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS lease_holders (
    scope TEXT NOT NULL, epoch INTEGER NOT NULL,
    host TEXT NOT NULL, pid INTEGER NOT NULL, started_at REAL NOT NULL,
    process TEXT NOT NULL, token TEXT NOT NULL,
    PRIMARY KEY (scope, epoch)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS fences (
    ns TEXT PRIMARY KEY, epoch INTEGER NOT NULL
);
"""
_EXPIRY_INDEX = (
    "CREATE INDEX IF NOT EXISTS committed_expiry ON committed (ns, expiry) "
    "WHERE expiry IS NOT NULL"
)


def _add_expiry_column(conn: sqlite3.Connection) -> None:
    """Give a file made before TTL its ``committed.expiry`` column, then the index.

    Checked again under the write lock: two processes opening an old file at once would
    otherwise both add the column, and the second fail.
    """
    if "expiry" not in _columns(conn, "committed"):
        conn.execute("BEGIN IMMEDIATE")
        try:
            if "expiry" not in _columns(conn, "committed"):
                conn.execute("ALTER TABLE committed ADD COLUMN expiry INTEGER")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    conn.execute(_EXPIRY_INDEX)


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {row[1] for row in conn.execute(f"PRAGMA table_info({table})").fetchall()}


_Delta = dict[bytes, bytes | None]

# The SQLite failures that waiting does not cure, by primary result code: the cause, the fix.
# Every other one (SQLITE_BUSY and SQLITE_LOCKED: "database is locked" by another process;
# SQLITE_IOERR, SQLITE_NOMEM, SQLITE_PROTOCOL, ...) is an outage, waited out.
_REFUSED_CODES: dict[int, tuple[str, str]] = {
    sqlite3.SQLITE_READONLY: (
        "the file is read-only",
        "make the file, its folder and its -wal / -shm files writable by this process",
    ),
    sqlite3.SQLITE_FULL: ("the disk is full", "free space on the disk of the file"),
    sqlite3.SQLITE_CORRUPT: (
        "the file is corrupt",
        "restore it from a copy (statefulbolts state export / import), or start a new file",
    ),
    sqlite3.SQLITE_NOTADB: (
        "the file is not a SQLite database",
        "point the config field 'path' at the state file, or at a new one",
    ),
    sqlite3.SQLITE_CANTOPEN: (
        "the file cannot be opened",
        "check the config field 'path': its folder must exist and be writable",
    ),
    sqlite3.SQLITE_PERM: ("access to the file is denied", "check the file's permissions"),
    sqlite3.SQLITE_AUTH: ("access to the file is denied", "check the file's permissions"),
}
# The same for a path that cannot even be made (its folders created), by errno.
_REFUSED_ERRNOS: dict[int, tuple[str, str]] = {
    errno.EACCES: ("permission denied", "check the permissions of the file's folders"),
    errno.EPERM: ("permission denied", "check the permissions of the file's folders"),
    errno.EROFS: ("the filesystem is read-only", "give a path on a writable filesystem"),
    errno.ENOSPC: ("the disk is full", "free space on the disk of the file"),
    errno.EEXIST: ("a part of the path is a file", "check the config field 'path'"),
    errno.ENOTDIR: ("a part of the path is a file", "check the config field 'path'"),
}


def _failure(
    path: Path,
    step: str,
    exc: sqlite3.Error | OSError,
    namespace: str | None = None,
    *,
    subject: str | None = None,
) -> StateBackendError | StateBackendRefusedError:
    """The error to raise for ``exc``: an outage (waited out) or a refusal (stops at once).

    It names the namespace's state, or ``subject`` (``the lease of 'wc/'``) when given.
    """
    if isinstance(exc, sqlite3.Error):
        code = _primary_code(exc)
        refused = None if code is None else _REFUSED_CODES.get(code)
    else:
        refused = _REFUSED_ERRNOS.get(exc.errno or 0)
    of = "" if namespace is None else f" of state {namespace!r}"
    of = of if subject is None else f" of {subject}"
    said = f"{type(exc).__name__}: {exc}"
    where = f"SQLite state file {str(path)!r}"
    if refused is None:
        return StateBackendError(f"{where} failed during {step}{of}: {said}")
    cause, fix = refused
    return StateBackendRefusedError(f"{where} refused the {step}{of}: {cause}; {fix} [{said}]")


class SqliteConfig:
    """The validated ``topology.state.provider.config`` of this provider."""

    FIELDS = ("path", "timeout", *SERIALIZER_FIELDS)

    def __init__(self, raw: str | Mapping[str, Any] | None) -> None:
        data = self._as_dict(raw)
        unknown = sorted(set(data) - set(self.FIELDS))
        if unknown:
            msg = (
                f"{STATE_PROVIDER_CONFIG_KEY}: unknown field {unknown[0]!r} for the SQLite "
                f"provider; allowed fields: {', '.join(self.FIELDS)}"
            )
            raise ProviderConfigError(msg)
        path = data.get("path", DEFAULT_PATH)
        if not isinstance(path, str) or not path:
            msg = f"{STATE_PROVIDER_CONFIG_KEY}: field 'path' must be a non-empty string"
            raise ProviderConfigError(msg)
        timeout = data.get("timeout", DEFAULT_TIMEOUT_MS)
        if isinstance(timeout, bool) or not isinstance(timeout, int) or timeout < 0:
            msg = f"{STATE_PROVIDER_CONFIG_KEY}: field 'timeout' must be milliseconds (an int >= 0)"
            raise ProviderConfigError(msg)
        self.path = Path(path).expanduser().resolve()
        self.timeout_ms = timeout
        # Checked and resolved by providers.resolve_serializers, as for every provider.
        self.classes: dict[str, Any] = {n: data.get(n) for n in SERIALIZER_FIELDS}

    @staticmethod
    def _as_dict(raw: str | Mapping[str, Any] | None) -> dict[str, Any]:
        # Parsed as every provider's config is (one place, one message, cached by text).
        return dict(provider_config_fields(raw))

    def serializers(self, conf: Mapping[str, Any] | None) -> tuple[Serializer, Serializer]:
        """The key and value serializers (``providers.resolve_serializers``, as every provider)."""
        return resolve_serializers(self.classes, conf)


# One connection per (process, file), shared by every state of that file in the process.
_connections: dict[tuple[int, Path], tuple[sqlite3.Connection, threading.RLock]] = {}
_connections_lock = threading.Lock()


def _connect(path: Path, timeout_ms: int) -> tuple[sqlite3.Connection, threading.RLock]:
    key = (os.getpid(), path)
    with _connections_lock:
        found = _connections.get(key)
        if found is not None:
            return found
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            # isolation_level=None: we issue BEGIN / COMMIT ourselves.
            conn = sqlite3.connect(
                path, timeout=timeout_ms / 1000, isolation_level=None, check_same_thread=False
            )
            _set_up(conn, time.monotonic() + timeout_ms / 1000)
        except (sqlite3.Error, OSError) as exc:
            raise _failure(path, "opening", exc) from exc
        log.info("opened SQLite state file %s for process %s", path, key[0])
        _connections[key] = (conn, threading.RLock())
        return _connections[key]


def _set_up(conn: sqlite3.Connection, deadline: float) -> None:
    """WAL, full sync and the schema, retried on "database is locked" until ``deadline``.

    Switching a file to WAL fails at once, without the busy timeout's wait, while another
    connection holds a write lock on it in rollback mode: what a second process meets when
    it opens a new file while the first is still setting it up. Every step is idempotent.
    """
    delay = 0.005
    while True:
        try:
            mode = conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]
            if str(mode).lower() != "wal":
                msg = f"the file stayed in journal mode {mode!r}, not WAL"
                raise sqlite3.OperationalError(msg)
            conn.execute("PRAGMA synchronous=FULL")
            conn.executescript(_SCHEMA)
            _add_expiry_column(conn)
            return
        except sqlite3.OperationalError as exc:
            if not _locked(exc) or time.monotonic() + delay > deadline:
                raise
        time.sleep(delay)
        delay = min(2 * delay, 0.1)


def _locked(exc: sqlite3.Error) -> bool:
    """Whether ``exc`` is SQLITE_BUSY or SQLITE_LOCKED: another connection holds the file."""
    return _primary_code(exc) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _primary_code(exc: sqlite3.Error) -> int | None:
    """The primary result code of ``exc`` (its extended code's low byte); ``None``: none."""
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF


def close_connections() -> None:
    """Close this process's cached connections (tests; the next state reopens them)."""
    with _connections_lock:
        found = list(_connections.values())
        _connections.clear()
    for conn, _lock in found:
        conn.close()


class SqliteKeyValueState(KeyValueState):
    """A ``KeyValueState`` whose committed map and prepared delta live in SQLite.

    Example:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "state.sqlite3")
        >>> state = SqliteKeyValueStateProvider().new_state("demo/count-0", {
        ...     "topology.state.provider.config": {"path": path}})
        >>> state.put("storm", 1)
        >>> state.prepare_commit(0)
        >>> state.commit(0)
        >>> state.get("storm")
        1
    """

    def __init__(
        self,
        namespace: str,
        path: str | os.PathLike[str],
        key_serializer: Serializer | None = None,
        value_serializer: Serializer | None = None,
        *,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
    ) -> None:
        self.namespace = namespace
        self.path = Path(path).resolve()
        self._conn, self._lock = _connect(self.path, timeout_ms)
        self._keys = key_serializer or MsgpackKeySerializer()
        self._values = value_serializer or MsgpackSerializer()
        self._pending: _Delta = {}
        # Set by supersede_prepared until the next prepare: reads skip the stored delta, and
        # that prepare replaces it.
        self._superseding = False
        # Time to live: the transaction's timestamp reads judge expiry at (None: nothing
        # expires), the TTL of this object's writes, and whether reads refresh.
        self._now: int | None = None
        self._ttl: StateTtl | None = None
        self._touch = False
        # The namespace's rollback count when this object last looked (the fence of prepare).
        self._rollbacks = self._rollback_count(self._query)
        # The driver's lease epoch every write carries (``fence``); None: unfenced.
        self._epoch: int | None = None

    def __repr__(self) -> str:
        return f"SqliteKeyValueState(namespace={self.namespace!r}, path={str(self.path)!r})"

    @property
    def location(self) -> str:
        """``sqlite <path>``."""
        return f"sqlite {self.path}"

    # -- talking to SQLite
    def _query(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        with self._lock:
            try:
                return self._conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                failure = self._failure("a read", exc)
                raise failure from exc

    def _failure(
        self, step: str, exc: sqlite3.Error
    ) -> StateBackendError | StateBackendRefusedError:
        return _failure(self.path, step, exc, self.namespace)

    def _run(self, sql: str, params: tuple[Any, ...]) -> list[Any]:
        """A statement inside ``_write``'s transaction (its errors roll the transaction back)."""
        return self._conn.execute(sql, params).fetchall()

    def _txids(self) -> tuple[int | None, int | None]:
        rows = self._conn.execute(
            "SELECT committed, prepared FROM txids WHERE ns = ?", (self.namespace,)
        ).fetchall()
        return (rows[0][0], rows[0][1]) if rows else (None, None)

    def _write(self, step: str, work: Any) -> Any:
        """Run ``work(txids)`` in one write transaction; its exception rolls everything back.

        The lease fence is checked first and raised last, in the same transaction: a fenced
        state whose epoch is below the namespace's fence writes nothing.
        """
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise self._failure(step, exc) from exc
            try:
                self._check_fence(step)
                result = work(*self._txids())
                self._raise_fence()
                self._conn.execute("COMMIT")
                return result
            except BaseException as exc:
                # SQLite rolls back on its own after some errors (a full disk, an I/O error).
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise self._failure(step, exc) from exc
                raise

    # -- the lease fence (see providers.LeaseStore)
    def fence(self, epoch: int) -> None:
        """Carry lease ``epoch`` with every write transaction from now on (``State.fence``)."""
        self._epoch = int(epoch)

    def stored_fence(self) -> int | None:
        """The namespace's row in ``fences``: the highest lease epoch that wrote it."""
        rows = self._query("SELECT epoch FROM fences WHERE ns = ?", (self.namespace,))
        return int(rows[0][0]) if rows else None

    def _check_fence(self, step: str) -> None:
        """Refuse this write if the state carries an epoch below the namespace's fence."""
        if self._epoch is None:
            return  # a state no driver fenced (a tool, a test): never refused
        rows = self._run("SELECT epoch FROM fences WHERE ns = ?", (self.namespace,))
        if rows and rows[0][0] > self._epoch:
            fence = int(rows[0][0])
            msg = (
                f"state {self.namespace!r}: {step} under lease epoch {self._epoch} refused: it "
                f"was written under epoch {fence} since; another driver of this topology took "
                "over, and this one must stop (nothing of this step was written)"
            )
            raise StateFencedError(msg, epoch=self._epoch, fence=fence)

    def _raise_fence(self) -> None:
        """Raise the namespace's fence to this state's epoch, if it still holds state."""
        if self._epoch is None:
            return
        self._conn.execute(
            "INSERT INTO fences (ns, epoch) SELECT ?1, ?2 "
            "WHERE EXISTS (SELECT 1 FROM txids WHERE ns = ?1) "
            "OR EXISTS (SELECT 1 FROM rollbacks WHERE ns = ?1) "
            "ON CONFLICT (ns) DO UPDATE SET epoch = excluded.epoch "
            "WHERE excluded.epoch > fences.epoch",
            (self.namespace, self._epoch),
        )

    def _rollback_count(self, query: Any) -> int:
        rows = query("SELECT count FROM rollbacks WHERE ns = ?", (self.namespace,))
        return int(rows[0][0]) if rows else 0

    def _set_txids(self, committed: int | None, prepared: int | None) -> None:
        self._conn.execute(
            "INSERT INTO txids (ns, committed, prepared) VALUES (?, ?, ?) "
            "ON CONFLICT (ns) DO UPDATE SET committed = excluded.committed, "
            "prepared = excluded.prepared",
            (self.namespace, committed, prepared),
        )

    def _apply(self, delta: _Delta, expiry: int | None) -> None:
        ns = self.namespace
        self._conn.executemany(
            "INSERT OR REPLACE INTO committed (ns, key, value, expiry) VALUES (?, ?, ?, ?)",
            [(ns, k, v, expiry) for k, v in delta.items() if v is not None],
        )
        self._conn.executemany(
            "DELETE FROM committed WHERE ns = ? AND key = ?",
            [(ns, k) for k, v in delta.items() if v is None],
        )

    @property
    def committed_txid(self) -> int | None:
        """The txid of the last commit, or ``None`` when nothing was committed."""
        with self._lock:
            return self._txids()[0]

    @property
    def prepared_txid(self) -> int | None:
        """The txid of the pending prepare, or ``None``."""
        with self._lock:
            return self._txids()[1]

    # -- the map
    def _encode_key(self, key: Any) -> bytes:
        try:
            return self._keys.serialize(key)
        except StateSerializationError as exc:
            msg = f"state {self.namespace!r}: key {key!r} cannot be stored: {exc}"
            raise StateSerializationError(msg) from exc

    # -- time to live (see providers.StateTtl)
    @property
    def supports_ttl(self) -> bool:
        """This state keeps expiries."""
        return True

    def set_transaction_time(self, now_ms: int | None, ttl: StateTtl | None = None) -> None:
        """Judge expiry at ``now_ms``; what this object writes expires ``ttl`` later."""
        if ttl is not None and now_ms is None:
            msg = f"state {self.namespace!r}: a TTL needs the transaction's timestamp"
            raise ValueError(msg)
        self._now = None if now_ms is None else int(now_ms)
        self._ttl = ttl
        self._touch = ttl is not None and ttl.refreshes_on_read

    def _write_expiry(self) -> int | None:
        return None if self._ttl is None or self._now is None else self._ttl.expiry(self._now)

    def _ttl_times(self, query: Any) -> tuple[int | None, int | None, int | None]:
        """``(prepared time, prepared expiry, committed time)`` of the namespace."""
        rows = query(
            "SELECT prepared_time, prepared_expiry, committed_time FROM ttl_times WHERE ns = ?",
            (self.namespace,),
        )
        return (rows[0][0], rows[0][1], rows[0][2]) if rows else (None, None, None)

    def _set_ttl_times(self, prepared: int | None, expiry: int | None, committed: Any) -> None:
        self._conn.execute(
            "INSERT INTO ttl_times (ns, prepared_time, prepared_expiry, committed_time) "
            "VALUES (?1, ?2, ?3, ?4) ON CONFLICT (ns) DO UPDATE SET "
            "prepared_time = ?2, prepared_expiry = ?3, committed_time = ?4",
            (self.namespace, prepared, expiry, committed),
        )

    def _lookup(self, ekey: bytes) -> bytes | None:
        if ekey in self._pending:
            return self._pending[ekey]
        return self._stored(ekey)

    def _stored(self, ekey: bytes) -> bytes | None:
        """The value in the prepared delta, else committed; ``None`` if absent or expired."""
        if self._superseding:
            rows = self._query(
                "SELECT value, expiry FROM committed WHERE ns = ? AND key = ?",
                (self.namespace, ekey),
            )
        else:
            rows = self._query(
                "SELECT value, 0, (SELECT prepared_expiry FROM ttl_times WHERE ns = ?1) "
                "FROM prepared WHERE ns = ?1 AND key = ?2 "
                "UNION ALL SELECT value, 1, expiry FROM committed WHERE ns = ?1 AND key = ?2 "
                "ORDER BY 2 LIMIT 1",
                (self.namespace, ekey),
            )
        if not rows or is_expired(rows[0][-1], self._now):
            return None
        return rows[0][0]

    def put(self, key: Any, value: Any) -> None:
        """Set ``key``; ``None`` is not a value (use ``delete``)."""
        encoded = encode_value(self._values, self.namespace, key, value)
        self._pending[self._encode_key(key)] = encoded

    def get(self, key: Any, default: Any = None) -> Any:
        """Return the value of ``key`` or ``default``; with read refresh, rewrite it."""
        ekey = self._encode_key(key)
        if ekey in self._pending:
            raw = self._pending[ekey]
        else:
            raw = self._stored(ekey)
            if self._touch and raw is not None:
                self._pending[ekey] = raw  # a read refreshes: rewritten at the prepare
        return default if raw is None else self._values.deserialize(raw)

    def delete(self, key: Any) -> Any:
        """Remove ``key``; returns its previous value."""
        ekey = self._encode_key(key)
        raw = self._lookup(ekey)
        self._pending[ekey] = None
        return None if raw is None else self._values.deserialize(raw)

    def _pages(self, table: str, column: str = "value") -> Iterator[tuple[bytes, Any]]:
        """``(key, column)`` of the namespace's rows of ``table``, a page at a time.

        No long read transaction. A ``column`` other than ``value`` skips its NULLs.
        """
        last = b""
        where = "" if column == "value" else f" AND {column} IS NOT NULL"
        while True:
            rows = self._query(
                f"SELECT key, {column}, expiry FROM {table} WHERE ns = ? AND key > ?{where} "
                "ORDER BY key LIMIT ?"
                if table == "committed"
                else f"SELECT key, {column}, NULL FROM {table} WHERE ns = ? AND key > ? "
                "ORDER BY key LIMIT ?",
                (self.namespace, last, _PAGE),
            )
            yield from ((key, data) for key, data, _ in rows)
            if len(rows) < _PAGE:
                return
            last = rows[-1][0]

    def _live_committed(self) -> Iterator[tuple[bytes, bytes]]:
        """The committed rows not expired at the transaction's timestamp, a page at a time."""
        last, now = b"", self._now
        while True:
            rows = self._query(
                "SELECT key, value, expiry FROM committed WHERE ns = ? AND key > ? "
                "ORDER BY key LIMIT ?",
                (self.namespace, last, _PAGE),
            )
            yield from ((key, value) for key, value, at in rows if not is_expired(at, now))
            if len(rows) < _PAGE:
                return
            last = rows[-1][0]

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        """Pending writes, then the prepared delta, then committed; each key once.

        Keys expired at the transaction's timestamp are skipped.
        """
        for ekey, raw in self._live_encoded():
            yield self._keys.deserialize(ekey), self._values.deserialize(raw)

    def iter_keys(self) -> Iterator[Any]:
        """The keys of ``iter(self)``, in its order; no value is decoded."""
        for ekey, _ in self._live_encoded():
            yield self._keys.deserialize(ekey)

    def _live_encoded(self) -> Iterator[tuple[bytes, bytes]]:
        """``(encoded key, payload)`` of every live key, pending and prepared first."""
        prepared: Iterable[tuple[bytes, bytes | None]] = (
            iter(()) if self._superseding else self._pages("prepared")
        )
        if not self._superseding and is_expired(self._ttl_times(self._query)[1], self._now):
            prepared = ((key, None) for key, _ in prepared)  # gone, and hiding what is below
        layers = (list(self._pending.items()), prepared, self._live_committed())
        yield from merge_layers(layers)

    def __len__(self) -> int:
        return sum(1 for _ in self.iter_keys())

    # -- the stored image (optional; see providers.KeyValueState): for offline tools
    def stored_txids(self) -> tuple[int | None, int | None]:
        """``(committed txid, prepared txid)`` of the ``txids`` row, read now."""
        rows = self._query("SELECT committed, prepared FROM txids WHERE ns = ?", (self.namespace,))
        return (rows[0][0], rows[0][1]) if rows else (None, None)

    def scan_committed(self) -> Iterator[tuple[bytes, bytes]]:
        """The committed rows, a page at a time in key order (the value is never NULL)."""
        yield from ((k, v) for k, v in self._pages("committed") if v is not None)

    def scan_prepared(self) -> Iterator[tuple[bytes, bytes | None]]:
        """The prepared delta's rows (a NULL value is a tombstone)."""
        yield from self._pages("prepared")

    def decode_key(self, encoded: bytes) -> Any:
        """A stored key, decoded by this state's key serializer."""
        return self._keys.deserialize(encoded)

    def decode_value(self, payload: bytes) -> Any:
        """A stored value, decoded by this state's value serializer."""
        return self._values.deserialize(payload)

    def get_committed(self, key: Any, default: Any = None) -> Any:
        """The committed value of ``key``, whatever is prepared or pending (unless expired)."""
        rows = self._query(
            "SELECT value, expiry FROM committed WHERE ns = ? AND key = ?",
            (self.namespace, self._encode_key(key)),
        )
        if not rows or is_expired(rows[0][1], self._now):
            return default
        return self._values.deserialize(rows[0][0])

    def scan_expiries(self) -> Iterator[tuple[bytes, int]]:
        """``(key, expiry)`` of the committed rows that have one, a page at a time."""
        yield from self._pages("committed", "expiry")

    def committed_time(self) -> int | None:
        """The last committed transaction's timestamp (``ttl_times``)."""
        return self._ttl_times(self._query)[2]

    def replace_stored(
        self,
        committed_txid: int | None,
        committed: Iterable[tuple[bytes, bytes]],
        prepared_txid: int | None,
        prepared: Mapping[bytes, bytes | None],
        *,
        expiries: Iterable[tuple[bytes, int]] = (),
        committed_time: int | None = None,
    ) -> None:
        """Replace every row of the namespace in one SQL transaction (all or nothing).

        ``committed`` is inserted as it streams in, so it need not fit in memory; the rollback
        count row goes, as after a namespace's first write. The lease fence stays when the new
        image has a txid; an image without one leaves no namespace, and no fence either.
        """
        if prepared and prepared_txid is None:
            msg = f"state {self.namespace!r}: a prepared delta needs a prepared txid"
            raise StateTransactionError(msg)
        ns = self.namespace

        def work(_committed: int | None, _prepared: int | None) -> None:
            for table in ("committed", "prepared", "txids", "rollbacks", "ttl_times"):
                self._conn.execute(f"DELETE FROM {table} WHERE ns = ?", (ns,))
            self._conn.executemany(
                "INSERT OR REPLACE INTO committed (ns, key, value) VALUES (?, ?, ?)",
                ((ns, k, v) for k, v in committed),
            )
            self._conn.executemany(
                "UPDATE committed SET expiry = ? WHERE ns = ? AND key = ?",
                ((int(at), ns, k) for k, at in expiries),
            )
            if committed_time is not None:
                self._set_ttl_times(None, None, committed_time)
            self._conn.executemany(
                "INSERT INTO prepared (ns, key, value) VALUES (?, ?, ?)",
                [(ns, k, v) for k, v in prepared.items()],
            )
            if committed_txid is not None or prepared_txid is not None:
                self._set_txids(committed_txid, prepared_txid)
            else:
                self._conn.execute("DELETE FROM fences WHERE ns = ?", (ns,))

        self._write("replace", work)
        self._pending = {}
        self._superseding = False
        self._rollbacks = 0

    # -- the transaction
    def prepare_commit(self, txid: int) -> None:
        """Move pending writes into the prepared delta of ``txid`` (one SQL transaction)."""

        def work(committed: int | None, prepared: int | None) -> None:
            if self._rollback_count(self._run) != self._rollbacks:
                msg = (
                    f"state {self.namespace!r}: cannot prepare txid {txid}: the namespace was "
                    f"rolled back since this state was loaded; a task attempt that outlived its "
                    f"transaction must not write"
                )
                raise StateTransactionError(msg)
            if prepared is not None and prepared != txid:
                msg = (
                    f"state {self.namespace!r}: cannot prepare txid {txid} while txid "
                    f"{prepared} is prepared and not committed"
                )
                raise StateTransactionError(msg)
            if committed is not None and txid <= committed:
                msg = (
                    f"state {self.namespace!r}: cannot prepare txid {txid}; txid "
                    f"{committed} is already committed"
                )
                raise StateTransactionError(msg)
            if prepared is None or self._superseding:
                self._conn.execute("DELETE FROM prepared WHERE ns = ?", (self.namespace,))
            self._conn.executemany(
                "INSERT OR REPLACE INTO prepared (ns, key, value) VALUES (?, ?, ?)",
                [(self.namespace, k, v) for k, v in self._pending.items()],
            )
            self._set_txids(committed, txid)
            committed_time = self._ttl_times(self._run)[2]
            self._set_ttl_times(self._now, self._write_expiry(), committed_time)

        self._write(f"prepare of txid {txid}", work)
        self._pending = {}
        self._superseding = False

    def supersede_prepared(self, txid: int) -> None:
        """Skip a stored delta of ``txid``; the next prepare replaces it in its own transaction."""
        # Also with nothing prepared now: a concurrent attempt may prepare meanwhile.
        if self.prepared_txid in (None, txid):
            self._superseding = True

    def commit(self, txid: int | None = None) -> None:
        """Commit the prepared delta of ``txid`` in one SQL transaction; again is a no-op.

        Without ``txid``, commit the pending writes at once (the checkpoint spout's save).
        """
        if txid is None:
            writes = self._pending

            def save(committed: int | None, prepared: int | None) -> None:
                self._apply(writes, None)  # a commit without txid writes without TTL
                self._set_txids(-1 if committed is None else committed, prepared)

            self._write("commit", save)
            self._pending = {}
            return

        def work(committed: int | None, prepared: int | None) -> None:
            if prepared == txid:
                rows = self._conn.execute(
                    "SELECT key, value FROM prepared WHERE ns = ?", (self.namespace,)
                ).fetchall()
                time, expiry, committed_time = self._ttl_times(self._run)
                self._apply(dict(rows), expiry)
                if time is not None:  # the cleanup: what expired at the transaction's timestamp
                    self._conn.execute(
                        "DELETE FROM committed WHERE ns = ? AND expiry <= ?",
                        (self.namespace, time),
                    )
                    committed_time = time
                self._set_ttl_times(None, None, committed_time)
                self._conn.execute("DELETE FROM prepared WHERE ns = ?", (self.namespace,))
                self._set_txids(txid, None)
                return
            if prepared is None and committed == txid:
                return  # a retried COMMIT of what is already committed
            msg = (
                f"state {self.namespace!r}: cannot commit txid {txid}; prepared txid is "
                f"{prepared}, committed txid is {committed}"
            )
            raise StateTransactionError(msg)

        self._write(f"commit of txid {txid}", work)

    def rollback(self) -> None:
        """Drop pending writes, the prepared delta and the prepare txid."""

        def work(committed: int | None, prepared: int | None) -> int:
            self._conn.execute("DELETE FROM prepared WHERE ns = ?", (self.namespace,))
            self._conn.execute(
                "UPDATE ttl_times SET prepared_time = NULL, prepared_expiry = NULL WHERE ns = ?",
                (self.namespace,),
            )
            if committed is None:
                self._conn.execute("DELETE FROM txids WHERE ns = ?", (self.namespace,))
            else:
                self._set_txids(committed, None)
            self._conn.execute(
                "INSERT INTO rollbacks (ns, count) VALUES (?, 1) "
                "ON CONFLICT (ns) DO UPDATE SET count = count + 1",
                (self.namespace,),
            )
            return self._rollback_count(self._run)

        self._rollbacks = self._write("rollback", work)
        self._superseding = False
        self._pending = {}


class SqliteKeyValueStateProvider(StateProvider):
    """Makes ``SqliteKeyValueState`` objects on the file named by the provider config."""

    def new_state(
        self, namespace: str, conf: Mapping[str, Any], context: Any | None = None
    ) -> SqliteKeyValueState:
        """Return the state of ``namespace``: its committed data and any pending prepare."""
        config = SqliteConfig(conf.get(STATE_PROVIDER_CONFIG_KEY))
        keys, values = config.serializers(conf)
        return SqliteKeyValueState(
            namespace, config.path, keys, values, timeout_ms=config.timeout_ms
        )

    def check_config(self, conf: Mapping[str, Any]) -> None:
        """Validate the provider config and its serializer classes; the file is not opened."""
        SqliteConfig(conf.get(STATE_PROVIDER_CONFIG_KEY)).serializers(conf)

    def lease_store(self, conf: Mapping[str, Any]) -> SqliteLeaseStore:
        """The leases kept in the state file (``SqliteLeaseStore``)."""
        config = SqliteConfig(conf.get(STATE_PROVIDER_CONFIG_KEY))
        return SqliteLeaseStore(config.path, timeout_ms=config.timeout_ms)

    def committed_key_counts(
        self, conf: Mapping[str, Any], namespaces: Sequence[str]
    ) -> dict[str, int]:
        """Rows of each namespace in ``committed``: one ``COUNT`` query for them all.

        The prepared delta is another table and is not counted.
        """
        names = list(dict.fromkeys(namespaces))
        if not names:
            return {}
        config = SqliteConfig(conf.get(STATE_PROVIDER_CONFIG_KEY))
        conn, lock = _connect(config.path, config.timeout_ms)
        counts = dict.fromkeys(names, 0)
        # SQLite binds at most 999 parameters in older builds: a query per chunk.
        for start in range(0, len(names), _COUNT_CHUNK):
            chunk = names[start : start + _COUNT_CHUNK]
            marks = ", ".join("?" * len(chunk))
            sql = f"SELECT ns, COUNT(*) FROM committed WHERE ns IN ({marks}) GROUP BY ns"
            with lock:
                try:
                    rows = conn.execute(sql, chunk).fetchall()
                except sqlite3.Error as exc:
                    step = f"key count of {len(names)} namespaces ({names[0]!r}, ...)"
                    raise _failure(config.path, step, exc) from exc
            counts.update({ns: int(n) for ns, n in rows})
        return counts

    def namespaces(self, conf: Mapping[str, Any], prefix: str = "") -> list[str]:
        """The namespaces starting with ``prefix`` that hold state in the file, sorted.

        Those with a row in ``txids`` (they prepared or committed) or ``rollbacks``.
        """
        config = SqliteConfig(conf.get(STATE_PROVIDER_CONFIG_KEY))
        conn, lock = _connect(config.path, config.timeout_ms)
        # Every string starting with prefix sorts at or after it; startswith does the rest.
        sql = "SELECT ns FROM txids WHERE ns >= ?1 UNION SELECT ns FROM rollbacks WHERE ns >= ?1"
        with lock:
            try:
                rows = conn.execute(sql, (prefix,)).fetchall()
            except sqlite3.Error as exc:
                step = f"namespace listing (prefix {prefix!r})"
                raise _failure(config.path, step, exc) from exc
        return sorted(ns for (ns,) in rows if ns.startswith(prefix))


class SqliteLeaseStore(LeaseStore):
    """The leases of the state file: one driver per scope (``providers.LeaseStore``).

    Each method is one ``BEGIN IMMEDIATE`` transaction, so two drivers taking over one lease at
    once are serialized and one of them wins. Time is ``clock()`` in seconds (``time.time``
    by default): the file is on one machine, so its processes share one clock. A grant takes
    the next epoch of the scope, past every fence of its namespaces, and raises those fences
    in the same transaction (step 2 of the protocol).

    Example:
        >>> import tempfile, os
        >>> path = os.path.join(tempfile.mkdtemp(), "state.sqlite3")
        >>> now = [1000.0]
        >>> store = SqliteLeaseStore(path, clock=lambda: now[0])
        >>> store.acquire("wc/", LeaseHolder("h1", 42, 0.0), ttl_ms=20_000).epoch
        1
        >>> now[0] += 21  # past its time to live: the lease lapsed
        >>> lease = store.acquire("wc/", LeaseHolder("h2", 7, 0.0), ttl_ms=20_000)
        >>> lease.epoch, lease.holder.host, sorted(store.holders("wc/"))
        (2, 'h2', [1, 2])
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path).resolve()
        self._conn, self._lock = _connect(self.path, timeout_ms)
        self._clock = clock

    def __repr__(self) -> str:
        return f"SqliteLeaseStore(path={str(self.path)!r})"

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _write(self, step: str, scope: str, work: Callable[[], Any]) -> Any:
        """Run ``work()`` in one write transaction; its exception rolls everything back."""
        subject = f"the lease of {scope!r}"
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise _failure(self.path, step, exc, subject=subject) from exc
            try:
                result = work()
                self._conn.execute("COMMIT")
                return result
            except BaseException as exc:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise _failure(self.path, step, exc, subject=subject) from exc
                raise

    def _query(self, step: str, scope: str, sql: str, params: tuple[Any, ...]) -> list[Any]:
        with self._lock:
            try:
                return self._conn.execute(sql, params).fetchall()
            except sqlite3.Error as exc:
                subject = f"the lease of {scope!r}"
                raise _failure(self.path, step, exc, subject=subject) from exc

    def _lease(self, scope: str) -> Lease | None:
        """The scope's row of ``leases``, inside the caller's transaction or lock."""
        rows = self._conn.execute(
            "SELECT epoch, host, pid, started_at, process, token, ttl_ms, expires_ms "
            "FROM leases WHERE scope = ?",
            (scope,),
        ).fetchall()
        if not rows:
            return None
        epoch, host, pid, started_at, process, token, ttl_ms, expires_ms = rows[0]
        holder = LeaseHolder(host, int(pid), float(started_at), process, token)
        return Lease(scope, int(epoch), holder, int(ttl_ms), int(expires_ms) - self._now_ms())

    def acquire(
        self, scope: str, holder: LeaseHolder, ttl_ms: int, *, over: int | None = None
    ) -> Lease:
        """Take the lease of ``scope`` and fence its namespaces, in one transaction.

        Raises:
            LeaseHeldError: a live lease exists and ``over`` does not name its epoch.
            StateBackendError: the file is locked or failed.
        """
        _check_lease_args(scope, ttl_ms)

        def work() -> Lease:
            live = self._lease(scope)
            if live is not None and live.live and (over is None or int(over) != live.epoch):
                msg = (
                    f"the lease of {scope!r} in SQLite state file {str(self.path)!r} is held: "
                    f"{live.describe()}, {live.remaining_ms / 1000:.1f} s left; stop that "
                    f"driver, wait for its lease to lapse, or take it over (over={live.epoch}) "
                    "if it is gone"
                )
                raise LeaseHeldError(msg, lease=live)
            # Past the last grant and past every fence under the scope: a driver fenced once
            # stays fenced, whatever happened to the row.
            (fenced,) = self._conn.execute(
                "SELECT MAX(epoch) FROM fences WHERE substr(ns, 1, length(?1)) = ?1", (scope,)
            ).fetchone()
            epoch = max(live.epoch if live is not None else 0, fenced or 0) + 1
            fields = (
                holder.host,
                int(holder.pid),
                float(holder.started_at),
                holder.process,
                holder.token,
            )
            self._conn.execute(
                "INSERT OR REPLACE INTO leases (scope, epoch, host, pid, started_at, process, "
                "token, ttl_ms, expires_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (scope, epoch, *fields, int(ttl_ms), self._now_ms() + int(ttl_ms)),
            )
            self._conn.execute(
                "INSERT OR REPLACE INTO lease_holders (scope, epoch, host, pid, started_at, "
                "process, token) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (scope, epoch, *fields),
            )
            self._conn.execute(
                "DELETE FROM lease_holders WHERE scope = ? AND epoch <= ?",
                (scope, epoch - LEASE_HISTORY),
            )
            # Step 2: every namespace under the scope that holds state is fenced at the epoch.
            self._conn.execute(
                "INSERT INTO fences (ns, epoch) "
                "SELECT ns, ?2 FROM (SELECT ns FROM txids UNION SELECT ns FROM rollbacks) "
                "WHERE substr(ns, 1, length(?1)) = ?1 "
                "ON CONFLICT (ns) DO UPDATE SET epoch = excluded.epoch "
                "WHERE excluded.epoch > fences.epoch",
                (scope, epoch),
            )
            return Lease(scope, epoch, holder, int(ttl_ms), int(ttl_ms))

        lease: Lease = self._write("lease acquire", scope, work)
        log.info("lease %s: epoch %s granted to %s", scope, lease.epoch, holder.describe())
        return lease

    def renew(self, scope: str, epoch: int, ttl_ms: int) -> Lease:
        """Extend lease ``epoch`` by ``ttl_ms`` from now, live or lapsed, if nobody took it.

        Raises:
            LeaseLostError: the scope's lease has another epoch now, or there is none.
            StateBackendError: the file is locked or failed.
        """
        _check_lease_args(scope, ttl_ms)

        def work() -> Lease:
            lease = self._lease(scope)
            where = f"the lease of {scope!r} in SQLite state file {str(self.path)!r}"
            if lease is None:
                msg = (
                    f"{where}: epoch {epoch} is gone, and no lease is there any more; this "
                    "driver must stop"
                )
                raise LeaseLostError(msg)
            if lease.epoch != int(epoch):
                msg = (
                    f"{where}: epoch {epoch} was taken over, the lease is now "
                    f"{lease.describe()}; this driver must stop"
                )
                raise LeaseLostError(msg, lease=lease)
            self._conn.execute(
                "UPDATE leases SET ttl_ms = ?, expires_ms = ? WHERE scope = ?",
                (int(ttl_ms), self._now_ms() + int(ttl_ms), scope),
            )
            return Lease(scope, lease.epoch, lease.holder, int(ttl_ms), int(ttl_ms))

        renewed: Lease = self._write(f"lease renewal of epoch {epoch}", scope, work)
        return renewed

    def release(self, scope: str, epoch: int) -> bool:
        """Mark lease ``epoch`` lapsed now, if it is still this epoch's."""
        _check_lease_args(scope)

        def work() -> bool:
            cursor = self._conn.execute(
                "UPDATE leases SET expires_ms = MIN(expires_ms, ?) WHERE scope = ? AND epoch = ?",
                (self._now_ms(), scope, int(epoch)),
            )
            return cursor.rowcount > 0

        released: bool = self._write(f"lease release of epoch {epoch}", scope, work)
        log.info("lease %s: epoch %s %s", scope, epoch, "released" if released else "not ours")
        return released

    def read(self, scope: str) -> Lease | None:
        """The scope's lease, live or lapsed; ``None`` if it was never taken."""
        _check_lease_args(scope)
        with self._lock:
            try:
                return self._lease(scope)
            except sqlite3.Error as exc:
                subject = f"the lease of {scope!r}"
                raise _failure(self.path, "lease read", exc, subject=subject) from exc

    def holders(self, scope: str) -> dict[int, LeaseHolder]:
        """The holders of the scope's last ``LEASE_HISTORY`` grants, by epoch."""
        _check_lease_args(scope)
        rows = self._query(
            "lease holders read",
            scope,
            "SELECT epoch, host, pid, started_at, process, token FROM lease_holders "
            "WHERE scope = ? ORDER BY epoch",
            (scope,),
        )
        return {
            int(epoch): LeaseHolder(host, int(pid), float(started_at), process, token)
            for epoch, host, pid, started_at, process, token in rows
        }


def _check_lease_args(scope: str, ttl_ms: int = 1) -> None:
    """Refuse a scope that is not a namespace prefix, or a time to live that is not one."""
    if not isinstance(scope, str) or not scope.endswith("/"):
        msg = f"a lease scope is a namespace prefix ending in '/' ('wc/'); got {scope!r}"
        raise ValueError(msg)
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or ttl_ms <= 0:
        msg = f"the lease of {scope!r}: ttl_ms must be a positive int (ms); got {ttl_ms!r}"
        raise ValueError(msg)
