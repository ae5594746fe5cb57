"""``PostgresSink``: a topology's rows written to a PostgreSQL table exactly once, on commit.

``ExactlyOnceSinkBolt`` stages each transaction's records in its state and, when the
transaction commits, hands each lane's records (one lane per sink task, ``Lane``) to
``PostgresSink.publish``, which writes them in ONE database transaction together with the
lane's *marker*: a row of the marker table (``_schema``: ``lane``, ``txid``, ``epoch``),
locked first and moved to the txid last. Rows and marker become visible together or not at
all, so the marker says exactly which transactions' rows the table holds, and a commit re-run
after any crash writes nothing twice (the steps are ``publish``'s docstring).

No database transaction outlives one publish step: it is opened, filled and committed inside
one call, in one task. What a lane has not yet published waits in the sink task's state, not
in an open transaction; a step that dies (a killed worker, a lost connection) is rolled back
by the server when its connection ends, and a step run twice (a Spark retry, a zombie
attempt, a restarted driver) waits for the other on the marker row's lock, then reads what it
left. A lane's marker row also keeps the lease epoch of the driver that last published it: a
driver that was taken over is refused (``SinkFencedError``) in the same step.

Layouts: ``columns`` are written from the tuple's fields of the same names, or from a
``mapper`` returning a row (a sequence in the columns' order, or a mapping by column; ``None``
leaves the tuple out). Without ``key`` each record is a new row (``COPY``: a change log, an
event table). With ``key`` each record is an upsert, ``INSERT ... ON CONFLICT (key) DO UPDATE``
the other columns (a current value per key: counts, states); a publish of several records of
one key writes the last one, as one after the other would. ``txid_column`` names a column
that gets each row's transaction id.

Values: ``stage`` keeps what msgpack carries: ``None``, bools, ints, floats, strings, bytes,
lists of those (an array column) and string-keyed mappings (a ``json`` / ``jsonb`` column);
dates, times, ``Decimal`` and ``UUID`` become their ISO text, which PostgreSQL reads into a
column of that type. Any other value fails its tuple (``SinkStageError`` naming the column).

Settings: the arguments, else the ``sink.postgres.*`` keys (``PostgresSinkConfig``): the DSN,
the table, the marker table (made if missing), the publish step's statement and lock
timeout. ``check_config`` (``statefulbolts run``, before Spark starts) connects and refuses a
table the sink cannot write, naming the table, the column and the fix (``_schema``); a server
it cannot reach is refused there too, in one line.

Faults: a server away, restarting, out of connections or too slow is an outage
(``PostgresUnavailableError``, waited out as a state store's); a refusal that no retry changes
(a permission, a read-only server) stops the topology (``PostgresRefusedError``); rows the
database refuses (a type, a constraint, a changed table) fail the step
(``PostgresSinkWriteError``), nothing of them visible, and stop the topology: the records stay
staged, and a start after the table is fixed publishes them.

Example:
    >>> sink = PostgresSink("counts", columns=("word", "count"), key=("word",),
    ...                     dsn="postgresql://app:secret@db/shop")
    >>> sink.name
    "PostgreSQL table 'counts'"
    >>> from statefulbolts.testing import make_tuple
    >>> sink.stage(make_tuple(["storm", 3], fields=["word", "count"]))
    ['storm', 3]

Needs psycopg 3: ``pip install 'statefulbolts[postgres]'``.
"""

from __future__ import annotations

import contextlib
import datetime
import decimal
import logging
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

import msgpack

from statefulbolts.connectors.postgres._client import CONNECTIONS, database_error, where
from statefulbolts.connectors.postgres._config import (
    DEFAULT_MARKER_TABLE,
    DEFAULT_PUBLISH_TIMEOUT_MS,
    DSN_KEY,
    MARKER_TABLE_KEY,
    PUBLISH_TIMEOUT_KEY,
    TABLE_KEY,
    PostgresSinkConfig,
    PostgresSinkWriteError,
    PostgresUnavailableError,
    TableName,
    check_identifier,
    require_psycopg,
)
from statefulbolts.connectors.postgres._schema import (
    check_table,
    ensure_marker_table,
    table_oid,
)
from statefulbolts.connectors.sinks import (
    Lane,
    PublishResult,
    Sink,
    SinkConfigError,
    SinkFencedError,
    SinkMarkerError,
    SinkPublishError,
    SinkStageError,
    StagedBatch,
)

if TYPE_CHECKING:
    from statefulbolts.context import TopologyContext
    from statefulbolts.tuples import ColumnBatch, Tuple

__all__ = ["PostgresSink", "Row"]

log = logging.getLogger(__name__)

_NAME = "PostgresSink"
# A row as a mapper may return it: values in the columns' order, or by column name.
Row = Sequence[Any] | Mapping[str, Any]
# The marker tables this process has made or checked, per (DSN, table): once is enough.
_MARKERS_READY: set[tuple[str, TableName]] = set()
# msgpack carries ints in this range; a larger one is kept as its text (a numeric column).
_INT_RANGE = range(-(1 << 63), 1 << 64)


class _Settings(NamedTuple):
    """The sink's settings for one topology config: arguments over keys (``settings``)."""

    dsn: str
    at: str  # where the DSN points, for messages (no password)
    table: TableName
    marker_table: TableName
    publish_timeout_ms: int


class PostgresSink(Sink):
    """Rows of a sink bolt's tuples, written to a PostgreSQL table exactly once (module docstring).

    Args:
        table: the table rows go to, ``table`` or ``schema.table`` (else config
            ``sink.postgres.table``). It must exist; the sink never makes it.
        columns: the columns each record fills, in order; from the tuple's fields of the same
            names unless a ``mapper`` makes the row.
        key: the upsert key, a unique constraint's columns (each one of ``columns``); empty:
            insert every record as a new row.
        mapper: a function of the tuple returning a row (a sequence in the columns' order, or
            a mapping by column) or ``None`` (write nothing); module-level, so it pickles.
        txid_column: a column (not one of ``columns``) that gets each row's txid.
        dsn: the database, a libpq connection string (else ``sink.postgres.dsn``).
        marker_table: else ``sink.postgres.marker.table``, else
            ``statefulbolts_sink_markers``; made if missing.
        publish_timeout_ms: a publish step's statement and lock timeout (else
            ``sink.postgres.publish.timeout.ms``, else 30 s).

    Raises:
        ValueError: a name that is not a PostgreSQL identifier, no columns, a column twice, a
            key column that is not a column, or a mapper that is not callable.
    """

    def __init__(
        self,
        table: str | None = None,
        *,
        columns: Sequence[str],
        key: Sequence[str] = (),
        mapper: Callable[[Tuple], Row | None] | None = None,
        txid_column: str | None = None,
        dsn: str | None = None,
        marker_table: str | None = None,
        publish_timeout_ms: int | None = None,
    ) -> None:
        given = {
            TABLE_KEY: table,
            MARKER_TABLE_KEY: marker_table,
            PUBLISH_TIMEOUT_KEY: publish_timeout_ms,
        }
        try:
            PostgresSinkConfig.from_conf(given)
        except SinkConfigError as exc:  # the arguments' names, not the keys'
            raise ValueError(str(exc).replace("config 'sink.postgres.", "argument for '")) from None
        if isinstance(columns, str) or not columns:
            msg = f"{_NAME}: columns must be a non-empty sequence of column names, got {columns!r}"
            raise ValueError(msg)
        if isinstance(key, str):
            msg = f"{_NAME}: key must be a sequence of column names, got {key!r}"
            raise ValueError(msg)
        self.columns = tuple(check_identifier(c, f"{_NAME}: column") for c in columns)
        self.key = tuple(check_identifier(c, f"{_NAME}: key column") for c in key)
        twice = sorted({c for c in self.columns if self.columns.count(c) > 1})
        if twice:
            msg = f"{_NAME}: columns name {twice} more than once"
            raise ValueError(msg)
        strangers = [c for c in self.key if c not in self.columns]
        if strangers or len(set(self.key)) != len(self.key):
            msg = f"{_NAME}: key {list(self.key)} must be distinct columns of {list(self.columns)}"
            raise ValueError(msg)
        if txid_column is not None:
            check_identifier(txid_column, f"{_NAME}: txid_column")
            if txid_column in self.columns:
                msg = f"{_NAME}: txid_column {txid_column!r} is also one of the columns"
                raise ValueError(msg)
        if mapper is not None and not callable(mapper):
            msg = f"{_NAME}: mapper must be a function of the tuple, got {mapper!r}"
            raise ValueError(msg)
        self.table = table
        self.mapper = mapper
        self.txid_column = txid_column
        self.dsn = dsn
        self.marker_table = marker_table
        self.publish_timeout_ms = publish_timeout_ms
        self._reset()

    def _reset(self) -> None:
        """A task's settings: none is pickled with the sink."""
        self._settings: _Settings | None = None
        self._for_conf: Mapping[str, Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if k not in ("_settings", "_for_conf")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        vars(self).update(state)
        self._reset()

    @property
    def name(self) -> str:
        """``PostgreSQL table '<table>'``."""
        table = self.table or (str(self._settings.table) if self._settings else None)
        return f"PostgreSQL table {table!r}" if table else "PostgreSQL table"

    def __repr__(self) -> str:
        return f"PostgresSink({self.table!r}, columns={self.columns!r}, key={self.key!r})"

    # ---------------------------------------------------------------- settings
    def settings(self, conf: Mapping[str, Any]) -> _Settings:
        """The arguments over the keys of ``conf``, validated (kept for that config).

        Raises:
            SinkConfigError: a key is wrong (named), or no DSN or no table is given.
        """
        if self._settings is not None and self._for_conf is conf:
            return self._settings
        config = PostgresSinkConfig.from_conf(conf)
        dsn = self.dsn or (config.dsn.get_secret_value() if config.dsn is not None else None)
        if not dsn:
            msg = f"{_NAME}: no database: give the sink a dsn, or set {DSN_KEY!r}"
            raise SinkConfigError(msg)
        table = self.table or config.table
        if table is None:
            msg = f"{_NAME}: no table: give the sink a table, or set {TABLE_KEY!r}"
            raise SinkConfigError(msg)
        settings = _Settings(
            dsn,
            where(dsn),
            TableName.parse(table),
            TableName.parse(self.marker_table or config.marker_table or DEFAULT_MARKER_TABLE),
            self.publish_timeout_ms or config.publish_timeout_ms or DEFAULT_PUBLISH_TIMEOUT_MS,
        )
        self._settings, self._for_conf = settings, conf
        return settings

    def _current(self) -> _Settings:
        if self._settings is None:
            msg = f"{_NAME}: used before open(conf, context)"
            raise SinkPublishError(msg)
        return self._settings

    def open(self, conf: Mapping[str, Any], context: TopologyContext) -> None:
        """Resolve the settings for this task (nothing connects yet)."""
        require_psycopg(_NAME)
        self.settings(conf)

    def check_config(self, conf: Mapping[str, Any]) -> None:
        """Connect, check the table for the sink's columns and key, make the marker table.

        Raises:
            SinkConfigError: a key is wrong, or the table cannot take the sink's rows (the
                problem, the table and column, and the fix).
            PostgresUnavailableError: the server could not be reached.
            PostgresRefusedError: the server refused (a permission).
        """
        require_psycopg(_NAME)
        settings = self.settings(conf)
        with self._session(settings, "checking the table", f"sink {self.name}") as cur:
            check_table(
                cur, settings.table, self.columns, self.key, self.txid_column, at=settings.at
            )
            self._markers_ready(cur, settings)
            cur.connection.rollback()

    # ---------------------------------------------------------------- stage
    def stage(self, tuple_: Tuple) -> list[Any] | None:
        """The row's values in the columns' order, as plain values (module docstring).

        Raises:
            SinkStageError: a field is missing, the mapper's row does not fit the columns, or a
                value cannot be written (its column named).
        """
        if self.mapper is None:
            values = [self._field(tuple_, c) for c in self.columns]
        else:
            made = self.mapper(tuple_)
            if made is None:
                return None
            values = self._mapped(made)
        return [_plain(v, c) for v, c in zip(values, self.columns, strict=True)]

    def stage_batch(self, batch: ColumnBatch) -> Sequence[Any]:
        """``stage`` of every tuple of ``batch``, a column at a time (a mapper: tuple by tuple).

        A column of only str, float, bool, bytes or ``None`` values, or of ints a bigint
        holds, is written as it is, checked with a loop in C; any other column goes through
        ``stage``'s conversion value by value.
        """
        if self.mapper is not None or len(batch) == 0:
            return super().stage_batch(batch)
        columns = [_plain_column(batch.column(c), c) for c in self.columns]
        return list(map(list, zip(*columns, strict=True)))

    def _field(self, tuple_: Tuple, name: str) -> Any:
        try:
            return tuple_.get_value_by_field(name)
        except (KeyError, ValueError) as exc:
            msg = (
                f"{_NAME}: column {name!r} is written from the tuple's field {name!r}, which it "
                f"lacks (its fields: {list(tuple_.fields)}); give the sink a mapper"
            )
            raise SinkStageError(msg) from exc

    def _mapped(self, made: Any) -> list[Any]:
        if isinstance(made, Mapping):
            missing = [c for c in self.columns if c not in made]
            extra = [str(k) for k in made if k not in self.columns]
            if missing or extra:
                msg = (
                    f"{_NAME}: the mapper's row {dict(made)!r:.120} does not fit the sink's "
                    f"columns {list(self.columns)}: missing {missing}, unknown {extra}"
                )
                raise SinkStageError(msg)
            return [made[c] for c in self.columns]
        if isinstance(made, str | bytes) or not isinstance(made, Sequence):
            msg = (
                f"{_NAME}: the mapper returned {made!r:.80}, not a row (a sequence or mapping of "
                "the columns' values) or None"
            )
            raise SinkStageError(msg)
        if len(made) != len(self.columns):
            msg = (
                f"{_NAME}: the mapper's row has {len(made)} values, the sink writes "
                f"{len(self.columns)} columns {list(self.columns)}"
            )
            raise SinkStageError(msg)
        return list(made)

    # ---------------------------------------------------------------- SQL
    def _statement(self, table: Any) -> Any:
        """What writes the records to ``table``: ``COPY``, or with a ``key`` an upsert.

        ``INSERT INTO t (c1, c2) VALUES (%s, %s) ON CONFLICT (c1) DO UPDATE SET c2 =
        EXCLUDED.c2`` (``DO NOTHING`` when every column is a key column).
        """
        from psycopg import sql

        names = [*self.columns, *([self.txid_column] if self.txid_column else [])]
        columns = sql.SQL(", ").join(map(sql.Identifier, names))
        if not self.key:
            return sql.SQL("COPY {} ({}) FROM STDIN").format(table, columns)
        updated = [c for c in names if c not in self.key]
        action = (
            sql.SQL("DO UPDATE SET {}").format(
                sql.SQL(", ").join(
                    sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in updated
                )
            )
            if updated
            else sql.SQL("DO NOTHING")
        )
        return sql.SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) {}").format(
            table,
            columns,
            sql.SQL(", ").join(sql.Placeholder() * len(names)),
            sql.SQL(", ").join(map(sql.Identifier, self.key)),
            action,
        )

    # ---------------------------------------------------------------- the marker
    def published(self, lane: Lane) -> int | None:
        """The lane's marker: its row's txid in the marker table (``None``: no row, or no table).

        Raises:
            PostgresUnavailableError: the server did not answer (an outage).
            SinkMarkerError: the marker could not be read.
        """
        settings = self._current()
        with self._session(settings, "reading the marker", _subject(lane)) as cur:
            if table_oid(cur, settings.marker_table) is None:
                cur.connection.rollback()
                return None
            row = cur.execute(
                self._marker_sql("SELECT txid FROM {} WHERE lane = %s"), [lane.qualified()]
            ).fetchone()
            cur.connection.rollback()
        return None if row is None or row[0] is None else int(row[0])

    def lane_markers(
        self, conf: Mapping[str, Any], topology: str, component: str
    ) -> dict[str, int | None]:
        """Every lane of ``component`` the marker table has a row of: lane -> marker.

        Lanes of every parallelism the component ever published with are found.
        """
        settings = self.settings(conf)
        start = Lane(topology, component, 0, 1).qualified().removesuffix("0of1")
        subject = f"sink {component!r} of topology {topology!r}"
        with self._session(settings, "listing the markers", subject) as cur:
            if table_oid(cur, settings.marker_table) is None:
                cur.connection.rollback()
                return {}
            rows = cur.execute(
                self._marker_sql("SELECT lane, txid FROM {} WHERE left(lane, %s) = %s"),
                [len(start), start],
            ).fetchall()
            cur.connection.rollback()
        out: dict[str, int | None] = {}
        for qualified, txid in rows:
            name = qualified[len(start) :]
            try:
                Lane.parse_name(name)
            except ValueError:
                continue
            out[name] = None if txid is None else int(txid)
        return dict(sorted(out.items()))

    def _marker_sql(self, text: str) -> Any:
        from psycopg import sql

        return sql.SQL(text).format(sql.Identifier(*self._current().marker_table.parts()))

    def _markers_ready(self, cur: Any, settings: _Settings) -> None:
        """The marker table, made or checked once per process, in a transaction of its own.

        Committed before the caller's transaction begins: a publish that fails and rolls back
        leaves the table made.
        """
        ready = (settings.dsn, settings.marker_table)
        if ready not in _MARKERS_READY:
            ensure_marker_table(cur, settings.marker_table, at=settings.at)
            cur.connection.commit()
            _MARKERS_READY.add(ready)

    # ---------------------------------------------------------------- publish
    def publish(
        self, lane: Lane, txid: int, batches: Sequence[StagedBatch], epoch: int | None
    ) -> PublishResult:
        """Publish the lane's records above its marker, up to ``txid``, in one transaction.

        1. **Lock the marker**: the lane's marker row is made if missing (``ON CONFLICT DO
           NOTHING``) and locked (``SELECT ... FOR UPDATE``). Another publisher of the lane (a
           Spark retry, a zombie attempt still running, a stale driver's task) waits here until
           this transaction ends, then reads what it left.
        2. **Fence**: a stored epoch above ``epoch`` (a newer driver published the lane) ends
           the step, rolled back: ``SinkFencedError``.
        3. **Decide**: the batches with ``marker < batch.txid <= txid``; none (the marker is at
           ``txid`` already: a replayed COMMIT) ends the step, rolled back, nothing written.
        4. **Write**: every record of those batches, oldest txid first, in staged order
           (``COPY``; with a key, an upsert per key, the last record of a key winning).
        5. **Move the marker** to ``txid``, with the epoch.
        6. **Commit**: rows and marker become visible together.

        Each statement keeps to ``sink.postgres.publish.timeout.ms``, a wait for the lock
        included, and so does a pause between two (``idle_in_transaction_session_timeout``):
        the server ends the session of a publisher stopped inside its step (a paused
        executor) and so frees the lane for the next. A failure rolls the transaction back;
        nothing of it is visible.

        Raises:
            SinkMarkerError: steps 1 or 5 failed.
            SinkFencedError: a newer driver published the lane.
            PostgresSinkWriteError: the database refused the rows (step 4, or 6 for a deferred
                constraint).
            PostgresUnavailableError: the server did not answer or was busy (an outage).
            PostgresRefusedError: the server refused (a permission).
        """
        settings = self._current()
        subject = _subject(lane)
        # The rows are made before the transaction opens: it holds the lane's lock.
        rows = {b.txid: [self._row(r, b.txid) for r in b.records] for b in batches}
        with self._session(settings, "publishing", subject) as cur:
            try:
                marker, stored = self._lock_marker(cur, settings, lane)
                self._fence(lane, epoch, stored)
                due = [b for b in batches if b.txid <= txid and (marker is None or b.txid > marker)]
                if not due or (marker is not None and marker >= txid):
                    cur.connection.rollback()
                    return PublishResult(txid, (), 0, marker)
                records = self._write(cur, settings, due, rows, subject)
                self._move_marker(cur, settings, lane, txid, epoch)
                self._commit(cur, settings, lane, txid)
            except BaseException:
                _rollback(cur)
                raise
        return PublishResult(txid, tuple(b.txid for b in due), records, marker)

    def _lock_marker(
        self, cur: Any, settings: _Settings, lane: Lane
    ) -> tuple[int | None, int | None]:
        """Step 1: the lane's marker and stored epoch, its row locked until the transaction ends."""
        with self._step(settings, "locking the marker", _subject(lane), SinkMarkerError):
            self._markers_ready(cur, settings)
            cur.execute(
                self._marker_sql(
                    "INSERT INTO {} (lane, txid, epoch) VALUES (%s, NULL, NULL)"
                    " ON CONFLICT (lane) DO NOTHING"
                ),
                [lane.qualified()],
            )
            row = cur.execute(
                self._marker_sql("SELECT txid, epoch FROM {} WHERE lane = %s FOR UPDATE"),
                [lane.qualified()],
            ).fetchone()
        if row is None:
            msg = (
                f"{_NAME}: locking the marker for {_subject(lane)}: its row in "
                f"{str(settings.marker_table)!r} at {settings.at} was not there after it was made"
            )
            raise SinkMarkerError(msg)
        return (None if row[0] is None else int(row[0])), (None if row[1] is None else int(row[1]))

    def _fence(self, lane: Lane, epoch: int | None, stored: int | None) -> None:
        """Step 2: refuse a publish of a driver older than the one that last published the lane."""
        if epoch is not None and stored is not None and stored > epoch:
            msg = (
                f"{_NAME}: {_subject(lane)}: lease epoch {epoch} is below the stored {stored} "
                "of the driver that published the lane last: this driver was taken over, and "
                "its tasks publish nothing"
            )
            raise SinkFencedError(msg)

    def _write(
        self,
        cur: Any,
        settings: _Settings,
        due: Sequence[StagedBatch],
        rows_of: Mapping[int, list[list[Any]]],
        subject: str,
    ) -> int:
        """Step 4: the rows of ``due``, in order (``rows_of``: each batch's); how many."""
        from psycopg import sql

        statement = self._statement(sql.Identifier(*settings.table.parts()))
        rows = [row for batch in due for row in rows_of[batch.txid]]
        count = len(rows)
        txids = f"txid {due[0].txid}" if len(due) == 1 else f"txids {due[0].txid}-{due[-1].txid}"
        step = f"writing {count} rows of {txids} to table {str(settings.table)!r}"
        with self._step(settings, step, subject, PostgresSinkWriteError):
            self._write_rows(cur, statement, rows)
        return count

    def _write_rows(self, cur: Any, statement: Any, rows: list[list[Any]]) -> None:
        if not self.key:
            with cur.copy(statement) as copy:
                for row in rows:
                    copy.write_row(row)
            return
        where_key = [self.columns.index(c) for c in self.key]
        latest: dict[bytes, list[Any]] = {}
        for row in rows:
            # The last record of a key is the one an upsert one after the other would leave;
            # ON CONFLICT refuses to touch one row twice in a statement, so each key goes once.
            identity = msgpack.packb([_keyable(row[i]) for i in where_key], use_bin_type=True)
            latest.pop(identity, None)
            latest[identity] = row
        cur.executemany(statement, list(latest.values()))

    def _row(self, record: Sequence[Any], txid: int | None) -> list[Any]:
        """A staged record as the parameters of its row (mappings as ``jsonb``)."""
        from psycopg.types.json import Jsonb

        row = [Jsonb(v) if isinstance(v, dict) else v for v in record]
        if self.txid_column:
            row.append(txid)
        return row

    def _move_marker(
        self, cur: Any, settings: _Settings, lane: Lane, txid: int, epoch: int | None
    ) -> None:
        """Step 5: the marker at ``txid``, the epoch kept with it."""
        with self._step(settings, "moving the marker", _subject(lane), SinkMarkerError):
            cur.execute(
                self._marker_sql(
                    "UPDATE {} SET txid = %s, epoch = COALESCE(%s, epoch), updated_at = now()"
                    " WHERE lane = %s"
                ),
                [txid, epoch, lane.qualified()],
            )

    def _commit(self, cur: Any, settings: _Settings, lane: Lane, txid: int) -> None:
        """Step 6: rows and marker visible together."""
        step = f"committing txid {txid}"
        with self._step(settings, step, _subject(lane), PostgresSinkWriteError):
            cur.connection.commit()

    # ---------------------------------------------------------------- at-least-once
    def write(self, records: Sequence[Any]) -> None:
        """Write ``records`` now, in one transaction (no marker; ``txid_column`` stays NULL).

        Raises:
            PostgresSinkWriteError: the database refused the rows.
            PostgresUnavailableError: the server did not answer (an outage).
        """
        from psycopg import sql

        settings = self._current()
        subject = f"sink {self.name}"
        statement = self._statement(sql.Identifier(*settings.table.parts()))
        step = f"writing {len(records)} rows at once to table {str(settings.table)!r}"
        with self._session(settings, "writing", subject) as cur:
            try:
                with self._step(settings, step, subject, PostgresSinkWriteError):
                    self._write_rows(cur, statement, [self._row(r, None) for r in records])
                    cur.connection.commit()
            except BaseException:
                _rollback(cur)
                raise

    # ---------------------------------------------------------------- connections
    @contextlib.contextmanager
    def _session(self, settings: _Settings, step: str, subject: str) -> Iterator[Any]:
        """A cursor of a lent connection, its statement, lock and idle timeouts set.

        Raises:
            PostgresUnavailableError: no connection could be made (with PostgreSQL's words).
        """
        psycopg = require_psycopg(_NAME)
        with contextlib.ExitStack() as stack:
            try:
                conn = stack.enter_context(CONNECTIONS.lend(settings.dsn))
            except psycopg.Error as exc:
                cause = " ".join(str(exc).split())
                msg = (
                    f"{_NAME}: {step} for {subject}: cannot connect to PostgreSQL at "
                    f"{settings.at}: {cause}; start the server or fix the DSN ({DSN_KEY!r} or "
                    "the sink's dsn); while running, it is waited for "
                    "(topology.state.backend.timeout.secs)"
                )
                raise PostgresUnavailableError(msg) from exc
            cur = conn.cursor()
            with self._step(settings, "setting the timeouts", subject, SinkPublishError):
                timeout = str(settings.publish_timeout_ms)
                cur.execute(
                    "SELECT set_config('statement_timeout', %s, false),"
                    " set_config('lock_timeout', %s, false),"
                    " set_config('idle_in_transaction_session_timeout', %s, false)",
                    [timeout, timeout, timeout],
                )
            yield cur

    @contextlib.contextmanager
    def _step(
        self, settings: _Settings, step: str, subject: str, kind: type[SinkPublishError]
    ) -> Iterator[None]:
        """Raise a database error in the block as an outage, a refusal, or ``kind``."""
        psycopg = require_psycopg(_NAME)
        try:
            yield
        except psycopg.Error as exc:
            judged = database_error(exc, step=step, subject=subject, at=settings.at)
            if judged is not None:
                raise judged from exc
            state = getattr(exc, "sqlstate", None) or "no SQLSTATE"
            cause = " ".join(str(exc).split())
            msg = f"{_NAME}: {step} for {subject} at {settings.at} failed ({state}): {cause}"
            raise kind(msg) from exc


def _subject(lane: Lane) -> str:
    return f"lane {lane.name} of sink {lane.component!r} (marker {lane.qualified()!r})"


def _rollback(cur: Any) -> None:
    """Roll back after a failed step (a lost connection rolls back on the server anyway)."""
    try:
        cur.connection.rollback()
    except Exception as exc:  # noqa: BLE001 - the step's own error is the one raised
        log.debug("%s: rolling back a failed step: %s: %s", _NAME, type(exc).__name__, exc)


# Types ``_plain`` keeps as they are (exact types: a subclass goes the long way).
_AS_IS = frozenset({str, bool, float, bytes, type(None)})


def _plain_column(values: Sequence[Any], column: str) -> Sequence[Any]:
    """``_plain`` of every value of a column: the column itself when it holds only plain ones."""
    kinds = set(map(type, values))
    if kinds <= _AS_IS:
        return values
    if kinds == {int} and min(values) in _INT_RANGE and max(values) in _INT_RANGE:
        return values
    return [_plain(v, column) for v in values]


def _plain(value: Any, column: str) -> Any:
    """``value`` as a plain value msgpack carries and psycopg writes (module docstring)."""
    if value is None or isinstance(value, str | bool | float | bytes):
        return value
    if isinstance(value, int):
        return value if value in _INT_RANGE else str(value)
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    if isinstance(value, datetime.date | datetime.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, list | tuple):
        items = [_plain(v, column) for v in value]
        if any(isinstance(v, dict) for v in items):
            msg = (
                f"{_NAME}: column {column!r}: a list holding a mapping cannot be an array; "
                "write JSON as a mapping, or as its text"
            )
            raise SinkStageError(msg)
        return items
    if isinstance(value, Mapping):
        if not all(isinstance(k, str) for k in value):
            msg = (
                f"{_NAME}: column {column!r}: a mapping for JSON needs string keys, got "
                f"{value!r:.80}"
            )
            raise SinkStageError(msg)
        return {k: _json(v, column) for k, v in value.items()}
    msg = (
        f"{_NAME}: column {column!r}: a value of type {type(value).__qualname__} ({value!r:.60}) "
        "cannot be written; give a str, number, bool, bytes, date/time, Decimal, UUID, list or "
        "mapping (a mapper can convert it)"
    )
    raise SinkStageError(msg)


def _json(value: Any, column: str) -> Any:
    """A value inside a JSON mapping: what JSON holds (dates and decimals as text)."""
    if isinstance(value, Mapping):
        return _plain(value, column)
    if isinstance(value, list | tuple):
        return [_json(v, column) for v in value]
    if isinstance(value, bytes | bytearray | memoryview):
        msg = f"{_NAME}: column {column!r}: JSON has no bytes (got {bytes(value)!r:.60})"
        raise SinkStageError(msg)
    return _plain(value, column)


def _keyable(value: Any) -> Any:
    """A key value as msgpack packs it (a ``jsonb`` parameter as its mapping)."""
    return getattr(value, "obj", value)
