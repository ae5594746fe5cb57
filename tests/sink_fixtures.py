"""Targets for the sink contract suite besides the real ones: a dict in this process, a SQLite file.

``MemorySink`` keeps its target in this process (a registry by name, so pickled copies in the
same process share it): for the bolt's unit tests, driven without Spark. ``SqliteSink`` keeps
it in a SQLite file, one SQL transaction per publish: a real atomic target that every process
of a local Spark application reaches, for tests that run the bolt on Spark without a broker.
Neither ships: they show, in a few lines each, what ``statefulbolts.connectors.sinks.Sink``
asks of a target, as a PostgreSQL, Redis or files sink will do it.

Both can be told to fail their next publish after writing its records and before its commit
(``fail_next_publish``), for the contract's atomicity test.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from statefulbolts.connectors.sinks import (
    Lane,
    PublishResult,
    Sink,
    SinkFencedError,
    SinkPublishError,
    StagedBatch,
)
from statefulbolts.context import TopologyContext
from statefulbolts.tuples import Tuple

__all__ = ["MemorySink", "MemoryTarget", "SqliteSink", "header", "memory_target", "read_topic"]


@dataclass
class MemoryTarget:
    """What a ``MemorySink`` wrote: records in order, and each lane's ``(txid, epoch)``."""

    records: list[tuple[str, int, Any]] = field(default_factory=list)  # (lane, txid, record)
    markers: dict[str, tuple[int, int | None]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)
    fail_next: bool = False
    # The lanes ``Sink.warm`` was called for, in order, with what was published then.
    warmed: list[tuple[str, int]] = field(default_factory=list)

    def values(self) -> list[Any]:
        """The records, in the order they became visible."""
        return [r for _, _, r in self.records]


_TARGETS: dict[str, MemoryTarget] = {}


def memory_target(name: str) -> MemoryTarget:
    """The target named ``name`` (made empty the first time)."""
    return _TARGETS.setdefault(name, MemoryTarget())


class MemorySink(Sink):
    """A sink whose target is a ``MemoryTarget`` of this process; a record is the tuple's values."""

    def __init__(self, target: str) -> None:
        self.target = target

    @property
    def name(self) -> str:
        return f"memory target {self.target!r}"

    def _t(self) -> MemoryTarget:
        return memory_target(self.target)

    def stage(self, tuple_: Tuple) -> Any:
        return list(tuple_.values)

    def warm(self, lane: Lane) -> None:
        target = self._t()
        target.warmed.append((lane.name, len(target.records)))

    def published(self, lane: Lane) -> int | None:
        marker = self._t().markers.get(lane.qualified())
        return None if marker is None else marker[0]

    def publish(
        self, lane: Lane, txid: int, batches: Sequence[StagedBatch], epoch: int | None
    ) -> PublishResult:
        target = self._t()
        with target.lock:  # the atomic step
            marker, stored_epoch = target.markers.get(lane.qualified(), (None, None))
            if epoch is not None and stored_epoch is not None and stored_epoch > epoch:
                msg = f"lane {lane.name}: epoch {epoch} is below the stored {stored_epoch}"
                raise SinkFencedError(msg)
            due = [b for b in batches if b.txid <= txid and (marker is None or b.txid > marker)]
            if not due or (marker is not None and marker >= txid):
                return PublishResult(txid, (), 0, marker)
            written = [(lane.name, b.txid, r) for b in due for r in b.records]
            if target.fail_next:
                target.fail_next = False
                msg = "injected: the publish fails before its commit"
                raise SinkPublishError(msg)
            target.records.extend(written)
            target.markers[lane.qualified()] = (txid, epoch)
            return PublishResult(txid, tuple(b.txid for b in due), len(written), marker)

    def write(self, records: Sequence[Any]) -> None:
        target = self._t()
        with target.lock:
            target.records.extend(("write", -1, r) for r in records)


class SqliteSink(Sink):
    """A sink whose target is a SQLite file: records and markers in one SQL transaction."""

    def __init__(self, path: str) -> None:
        self.path = path

    @property
    def name(self) -> str:
        return f"SQLite file {self.path!r}"

    def _db(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30, isolation_level=None)
        db.execute(
            "CREATE TABLE IF NOT EXISTS records "
            "(seq INTEGER PRIMARY KEY AUTOINCREMENT, lane TEXT, txid INTEGER, value TEXT)"
        )
        db.execute(
            "CREATE TABLE IF NOT EXISTS markers "
            "(lane TEXT PRIMARY KEY, txid INTEGER, epoch INTEGER)"
        )
        db.execute("CREATE TABLE IF NOT EXISTS faults (name TEXT PRIMARY KEY)")
        return db

    def open(self, conf: Mapping[str, Any], context: TopologyContext) -> None:
        self._db().close()

    def stage(self, tuple_: Tuple) -> Any:
        return "|".join(str(v) for v in tuple_.values)

    def published(self, lane: Lane) -> int | None:
        db = self._db()
        try:
            row = db.execute(
                "SELECT txid FROM markers WHERE lane = ?", (lane.qualified(),)
            ).fetchone()
        finally:
            db.close()
        return None if row is None else int(row[0])

    def fail_next_publish(self) -> None:
        db = self._db()
        try:
            db.execute("INSERT OR IGNORE INTO faults VALUES ('publish')")
        finally:
            db.close()

    def publish(
        self, lane: Lane, txid: int, batches: Sequence[StagedBatch], epoch: int | None
    ) -> PublishResult:
        db = self._db()
        try:
            db.execute("BEGIN IMMEDIATE")  # the atomic step: read the marker, write, move it
            row = db.execute(
                "SELECT txid, epoch FROM markers WHERE lane = ?", (lane.qualified(),)
            ).fetchone()
            marker, stored_epoch = (None, None) if row is None else (row[0], row[1])
            if epoch is not None and stored_epoch is not None and stored_epoch > epoch:
                db.execute("ROLLBACK")
                msg = f"lane {lane.name}: epoch {epoch} is below the stored {stored_epoch}"
                raise SinkFencedError(msg)
            due = [b for b in batches if b.txid <= txid and (marker is None or b.txid > marker)]
            if not due or (marker is not None and marker >= txid):
                db.execute("ROLLBACK")
                return PublishResult(txid, (), 0, marker)
            count = 0
            for b in due:
                for r in b.records:
                    db.execute(
                        "INSERT INTO records (lane, txid, value) VALUES (?, ?, ?)",
                        (lane.name, b.txid, r),
                    )
                    count += 1
            if db.execute("DELETE FROM faults WHERE name = 'publish'").rowcount:
                db.execute("ROLLBACK")
                db.execute("DELETE FROM faults WHERE name = 'publish'")
                msg = "injected: the publish fails before its commit"
                raise SinkPublishError(msg)
            db.execute(
                "INSERT OR REPLACE INTO markers VALUES (?, ?, ?)", (lane.qualified(), txid, epoch)
            )
            db.execute("COMMIT")
            return PublishResult(txid, tuple(b.txid for b in due), count, marker)
        finally:
            db.close()

    def write(self, records: Sequence[Any]) -> None:
        db = self._db()
        try:
            db.executemany(
                "INSERT INTO records (lane, txid, value) VALUES ('write', -1, ?)",
                [(r,) for r in records],
            )
        finally:
            db.close()

    def values(self) -> list[str]:
        """The records, in the order they became visible."""
        db = self._db()
        try:
            return [r[0] for r in db.execute("SELECT value FROM records ORDER BY seq")]
        finally:
            db.close()


def read_topic(
    bootstrap: str, topic: str, *, isolation: str = "read_committed", timeout_s: float = 30.0
) -> list[Any]:
    """Every record of ``topic`` a reader at ``isolation`` gets, partition by partition, in order.

    Reads each partition to its end as the fetches report it (the end-of-partition notice),
    never by a listed offset (Tansu's ListOffsets "latest" is short after a batch).
    """
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "sink-tests-reader",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": isolation,
        }
    )
    try:
        import time

        partitions = sorted(reader.list_topics(topic, timeout=timeout_s).topics[topic].partitions)
        reader.assign([TopicPartition(topic, p, 0) for p in partitions])
        per_partition: dict[int, list[Any]] = {p: [] for p in partitions}
        open_ = set(partitions)
        deadline = time.monotonic() + timeout_s
        while open_ and time.monotonic() < deadline:
            message = reader.poll(0.2)
            if message is None:
                continue
            error = message.error()
            if error is None:
                per_partition[message.partition()].append(message)
            elif error.code() == KafkaError._PARTITION_EOF:
                open_.discard(message.partition())
            else:
                raise RuntimeError(str(error))
        if open_:
            msg = f"partitions {sorted(open_)} of {topic!r} not read to their end"
            raise RuntimeError(msg)
        return [m for p in partitions for m in per_partition[p]]
    finally:
        reader.close()


def header(message: Any, name: str) -> str | None:
    """The value of header ``name`` of a consumed message, as text."""
    for key, value in message.headers() or ():
        if key == name:
            return None if value is None else value.decode()
    return None
