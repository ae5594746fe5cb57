"""Kafka for transactional topologies: batches that replay exactly, and opaque ones.

``KafkaTransactionalSpout`` is a partitioned transactional spout: a txid's batch is a fixed
range of offsets per partition, stored before the batch is processed, and every replay reads
that range again and emits the very same records. ``OpaqueKafkaTransactionalSpout`` is an
opaque one: a replay reads on from the last committed offsets, so it may read another range
(records expired, a topic made again); its committers keep the value before each txid
(``OpaqueMap``). Both read on the executors, in the emit tasks, with the same reader as
``KafkaSpout`` (a consumer per read, assigned one partition at an exact offset), and write
nothing to Kafka: the runtime's stored metas are the position.

**Partitions.** The spouts read named topics (``topics=`` or ``kafka.topics``). The runtime
numbers a spout's partitions 0, 1, 2, ... and keeps each one's metas under its number for the
life of the transactional id, so a number must name the same topic-partition for good, while
topics gain partitions. With ``T`` topics, partition ``p`` is partition ``p // T`` of topic
``topics[p % T]``: a topic's new partitions take numbers no other partition had, and nothing
is renumbered. ``num_partitions()`` is ``T`` times the most partitions any of the topics has;
a number past its topic's partitions emits nothing until the topic grows. A pattern is
refused (a new matching topic would renumber the partitions), and so is a changed topic list
under a running transactional id (each meta names its topic-partition, checked on every use).
Emitter task ``i`` of ``k`` reads the partitions ``p`` with ``p % k == i``: one topic of four
partitions read by two emitter tasks gives task 0 partitions 0 and 2.

**Meta** of one partition's part of a batch, a msgpack-friendly dict:

=========  ==================================================================================
key        value
=========  ==================================================================================
topic      the topic
partition  the partition number in the topic
first      the offset the batch's read began at
next       the offset after the batch: where the partition's next batch starts
count      the records read (those the translator left out included)
digest     BLAKE2b (16 bytes, hex) of the records' offsets, keys and values
=========  ==================================================================================

**A new batch** (both spouts) reads up to ``take_per_batch`` records from ``next`` of the
partition's last meta (a partition never read starts at ``start``, as ``KafkaSpout``'s does),
never past the partition's readable end as the emitter listed it (the last stable offset
under ``read_committed``). An offset no longer in the topic (retention, deleted records) is
skipped forward to the first offset; an offset past the log end (the topic was deleted and
made again) reads the partition again from its first offset. Either jump is reported, never
silent: a warning in the task's and the driver's log naming the partition, the txid and the
offsets, and a ``KafkaGapError`` among the spout's reported errors (the dashboard's and
``statefulbolts_reported_errors_total``).

**An exact replay** (``KafkaTransactionalSpout``) reads ``first`` to ``next`` again and must
find ``count`` records with the same digest. When the range is no longer there (retention,
compaction, deleted records, the topic made again), the batch cannot be emitted again as it
was: ``KafkaReplayError`` (a ``StateLostError``) stops the topology at once, naming the
partition, the txid and the offsets. Storm's transactional Kafka spouts emitted what was left,
silently. Only the txids not yet committed are ever replayed (at most
``topology.max.spout.pending`` of them), so this needs a topology stopped, or failing, for
longer than the topic keeps its records.

**Opaque**: each emission, replays included, reads on from the meta it is given (the last
committed one, for a replay). Expired offsets are skipped as for a new batch. An unreachable
cluster makes a partition emit nothing for the txid (a warning; the previous meta is carried
forward, and the partition catches up later); ``num_partitions()`` then falls back to the last
count this process saw.

Faults, as ``KafkaSpout``'s: an unreachable cluster in the partitioned spout's emitter is an
outage (``KafkaUnavailableError``, waited out as the state backend's), in its coordinator a
txid that starts later; a refusal stops the topology; a named topic that does not exist is
``KafkaTopicNotFoundError``.

Example:
    >>> spout = KafkaTransactionalSpout(["clicks"], take_per_batch=500,
    ...                                 bootstrap_servers="127.0.0.1:9092")
    >>> spout.TX_FIELD
    'statefulbolts.connectors.kafka.KafkaTransactionalSpout/id'
    >>> spout.partition_of(("clicks", "views"), 5)
    KafkaPartition(topic='views', partition=2)
    >>> builder = TransactionalTopologyBuilder("clicks", "spout", spout, 2)  # doctest: +SKIP
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from statefulbolts.components import Component, OutputFieldsDeclarer
from statefulbolts.connectors.kafka._config import (
    KafkaGapError,
    KafkaReplayError,
    KafkaUnavailableError,
)
from statefulbolts.connectors.kafka._records import RecordTranslator
from statefulbolts.connectors.kafka._spout import KafkaEnd, KafkaPartition, KafkaSpout, RecordReader
from statefulbolts.errors import ConfigError, FailedException
from statefulbolts.transactional import (
    BatchOutputCollector,
    OpaquePartitionedTransactionalSpout,
    PartitionedTransactionalSpout,
    TransactionAttempt,
)
from statefulbolts.tuples import DEFAULT_STREAM, Fields

if TYPE_CHECKING:
    from statefulbolts.context import TopologyContext

__all__ = ["KafkaTransactionalSpout", "OpaqueKafkaTransactionalSpout"]

log = logging.getLogger(__name__)

_META_KEYS = ("topic", "partition", "first", "next", "count", "digest")
_DIGEST_BYTES = 16
# Where the spouts are imported from (``statefulbolts.connectors.kafka``).
_HOME = __name__.rpartition(".")[0]
# The partition count each opaque spout's emitters last listed in this process: the fallback
# while the cluster is away. Keyed by the bootstrap servers and the topics.
_last_counts: dict[tuple[str, tuple[str, ...]], int] = {}


def _new_digest() -> Any:
    return hashlib.blake2b(digest_size=_DIGEST_BYTES)


_EMPTY_DIGEST = _new_digest().hexdigest()


class _KafkaTransactional(Component):
    """Settings, partition numbers, reading and emitting, shared by both spouts."""

    TX_FIELD: ClassVar[str]
    """The attempt's field name: ``<module>.<qualname>/id`` of the spout class."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__module__ == __name__:
            # Ours are named by their public home, in the field name as in repr and pickle.
            cls.__module__ = _HOME
        cls.TX_FIELD = f"{cls.__module__}.{cls.__qualname__}/id"

    def __init__(
        self,
        topics: Sequence[str] | str | None = None,
        *,
        take_per_batch: int = 1000,
        bootstrap_servers: str | None = None,
        start: str | int | None = None,
        isolation_level: str | None = None,
        translator: RecordTranslator | None = None,
        key_deserializer: Any = "str",
        value_deserializer: Any = "str",
    ) -> None:
        name = type(self).__qualname__
        if isinstance(take_per_batch, bool) or not isinstance(take_per_batch, int):
            msg = f"{name}: take_per_batch must be an int, got {take_per_batch!r}"
            raise TypeError(msg)
        if take_per_batch < 1:
            msg = f"{name}: take_per_batch must be at least 1, got {take_per_batch}"
            raise ValueError(msg)
        try:
            # The reader, its settings and its listings are KafkaSpout's: one Kafka client.
            self.source = KafkaSpout(
                topics,
                bootstrap_servers=bootstrap_servers,
                start=start,
                isolation_level=isolation_level,
                translator=translator,
                key_deserializer=key_deserializer,
                value_deserializer=value_deserializer,
                commit_offsets=False,
            )
        except ValueError as exc:
            raise ValueError(_renamed(exc, name)) from None
        self.take_per_batch = take_per_batch
        for stream, fields in self.source.translator.streams().items():
            if self.TX_FIELD in fields:
                msg = f"{name}: stream {stream!r} fields {list(fields)} must not contain the "
                msg += f"attempt's field {self.TX_FIELD!r}"
                raise ValueError(msg)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """The translator's streams, each with the attempt's field first."""
        for stream, fields in self.source.translator.streams().items():
            declared = Fields([self.TX_FIELD, *fields])
            if stream == DEFAULT_STREAM:
                declarer.declare(declared)
            else:
                declarer.declare_stream(stream, declared)

    def __repr__(self) -> str:
        topics = self.source.topics
        return f"{type(self).__qualname__}({topics!r}, take_per_batch={self.take_per_batch})"

    # -------------------------------------------------------------- partitions
    def topics(self, conf: Mapping[str, Any]) -> tuple[str, ...]:
        """The topics read, in partition-number order.

        Raises:
            ConfigError: no topics, only a pattern (which would renumber the partitions), or a
                key of the ``kafka.*`` config is wrong.
        """
        name = type(self).__qualname__
        try:
            settings = self.source.settings(conf)
        except ConfigError as exc:
            raise ConfigError(_renamed(exc, name)) from None
        if settings.topics is None:
            msg = (
                f"{name} reads named topics (topics= or config 'kafka.topics'), not a pattern "
                f"({settings.pattern!r}): a partition's number must name the same "
                "topic-partition for the life of the transactional id, and a new matching "
                "topic would renumber them"
            )
            raise ConfigError(msg)
        return settings.topics

    def partition_counts(self, conf: Mapping[str, Any]) -> dict[str, int]:
        """Each topic's partitions now.

        Raises:
            KafkaTopicNotFoundError: a topic does not exist.
            KafkaUnavailableError: the cluster did not answer.
        """
        counts = dict.fromkeys(self.topics(conf), 0)
        for tp in map(KafkaPartition.parse, self.source.partitions(conf)):
            counts[tp.topic] = max(counts[tp.topic], tp.partition + 1)
        return counts

    def count_partitions(self, conf: Mapping[str, Any]) -> int:
        """The spout's number of partitions: the topics times the most any of them has."""
        counts = self.partition_counts(conf)
        return len(counts) * max(counts.values(), default=0)

    @staticmethod
    def partition_of(topics: Sequence[str], partition: int) -> KafkaPartition:
        """The topic-partition of the spout's partition number ``partition`` (module docstring)."""
        return KafkaPartition(topics[partition % len(topics)], partition // len(topics))

    def _check(self, partition: int, tp: KafkaPartition, meta: Any) -> dict[str, Any]:
        """A stored meta's shape, and that it is the meta of ``tp``."""
        name = type(self).__qualname__
        ints = ("partition", "first", "next", "count")
        if not (
            isinstance(meta, Mapping)
            and set(meta) == set(_META_KEYS)
            and isinstance(meta["topic"], str)
            and isinstance(meta["digest"], str)
            and all(isinstance(meta[k], int) and not isinstance(meta[k], bool) for k in ints)
            and 0 <= meta["first"] <= meta["next"]
            and 0 <= meta["count"] <= meta["next"] - meta["first"]
        ):
            msg = (
                f"{name}: the meta of partition {partition} must be a dict {{'topic': str, "
                "'partition': int, 'first': offset, 'next': offset, 'count': int, 'digest': "
                f"str}}, got {meta!r}"
            )
            raise ValueError(msg)
        if (meta["topic"], meta["partition"]) != tp:
            msg = (
                f"{name}: partition {partition} is {tp} now, but its stored meta is for "
                f"{meta['topic']}/{meta['partition']}: the topic list changed under a running "
                "transactional id; keep the list, or use a new transactional id"
            )
            raise ValueError(msg)
        return dict(meta)


def _renamed(exc: BaseException, name: str) -> str:
    """``exc``'s message, naming the transactional spout where it names its inner reader."""
    text = str(exc)
    return name + text.removeprefix("KafkaSpout") if text.startswith("KafkaSpout") else text


class _Reading:
    """One emitter object's reads: the ends listed once, then a ``RecordReader`` per partition.

    The runtime makes an emitter for each emission of each task, so the ends are those of the
    emission: listed at the first partition it reads (three requests over every partition of
    the spout at once), kept for the rest.
    """

    def __init__(self, spout: _KafkaTransactional, conf: Mapping[str, Any]) -> None:
        self.spout, self.conf = spout, conf
        self.topics = spout.topics(conf)
        self._ends: dict[str, KafkaEnd] | None = None

    def ends(self) -> dict[str, KafkaEnd]:
        """Every partition's ``KafkaEnd``, as listed at the first call."""
        if self._ends is None:
            source = self.spout.source
            self._ends = source.ends(self.conf, source.partitions(self.conf))
        return self._ends

    @property
    def listed(self) -> bool:
        """Whether this emission's ends were listed already."""
        return self._ends is not None

    def end_of(self, tp: KafkaPartition) -> KafkaEnd | None:
        """``tp``'s end, ``None`` if the topic has no such partition (now)."""
        return self.ends().get(str(tp))

    def reader(self, tp: KafkaPartition, position: int | None, end: KafkaEnd) -> RecordReader:
        """A reader of ``tp`` from ``position`` up to ``end``, digesting what it reads."""
        source = self.spout.source
        return RecordReader(source, source.settings(self.conf), tp, position, end, _new_digest())

    def read_new(
        self,
        tx: TransactionAttempt,
        collector: BatchOutputCollector,
        partition: int,
        tp: KafkaPartition,
        end: KafkaEnd,
        position: int | None,
    ) -> dict[str, Any]:
        """Read and emit a new batch of ``tp`` from ``position``; return its meta."""
        reader = self.reader(tp, position, end)
        batch = reader.read(self.spout.take_per_batch)
        gap = reader.gap()
        first = reader.start
        if gap is not None:
            first = gap.resumed
            _report_gap(self.spout, tx, collector, partition, tp, gap.reason)
        _emit(tx, collector, batch.stream, batch.records)
        return {
            "topic": tp.topic,
            "partition": tp.partition,
            "first": first,
            "next": batch.position,
            "count": reader.consumed,
            "digest": reader.digest.hexdigest(),
        }


def _emit(
    tx: TransactionAttempt,
    collector: BatchOutputCollector,
    stream: str,
    records: Sequence[Sequence[Any]],
) -> None:
    """Emit each record's values on ``stream``, the attempt first."""
    emit = collector.emit
    for values in records:
        emit([tx, *values], stream)


def _report_gap(
    spout: _KafkaTransactional,
    tx: TransactionAttempt,
    collector: BatchOutputCollector,
    partition: int,
    tp: KafkaPartition,
    reason: str,
) -> None:
    """Say that the read of ``tp`` jumped: a warning here, a reported error in the driver."""
    text = (
        f"{type(spout).__qualname__}: partition {partition} ({tp}), txid {tx.transaction_id}: "
        f"{reason}"
    )
    log.warning("%s", text)
    collector.report_error(KafkaGapError(text))


# ------------------------------------------------------------------ transactional
class KafkaTransactionalSpout(_KafkaTransactional, PartitionedTransactionalSpout):
    """Kafka topics as a partitioned transactional spout: every replay reads the same records.

    See the module docstring for the partition numbers, the metas and the faults.

    Args:
        topics: the topics (else config ``kafka.topics``), in a fixed order: partition ``p`` is
            partition ``p // len(topics)`` of ``topics[p % len(topics)]``.
        take_per_batch: the most records a batch reads from one partition.
        bootstrap_servers: ``host:port,...`` (else ``kafka.bootstrap.servers``, else
            ``localhost:9092``).
        start: where a partition never read starts: ``"earliest"`` (the default),
            ``"latest"``, ``"committed"`` or a timestamp in epoch ms (else ``kafka.start``).
        isolation_level: ``"read_committed"`` (the default) or ``"read_uncommitted"``.
        translator: a record to a tuple's values (default: ``topic, partition, offset, key,
            value``), on its stream; the attempt goes before them.
        key_deserializer: ``"bytes"``, ``"str"`` (the default), ``"json"``, ``"msgpack"`` or a
            ``Deserializer``.
        value_deserializer: the same, for the value.

    A replay whose records are gone raises ``KafkaReplayError`` (the topology stops), naming
    the partition, the txid and the offsets.

    Example:
        >>> spout = KafkaTransactionalSpout(["sentences"], take_per_batch=1000)
        >>> spout.TX_FIELD
        'statefulbolts.connectors.kafka.KafkaTransactionalSpout/id'
    """

    def get_coordinator(
        self, conf: Mapping[str, Any], context: TopologyContext
    ) -> PartitionedTransactionalSpout.Coordinator:
        """A coordinator counting the partitions (the topics are listed at each count)."""
        return _Coordinator(self, conf)

    def get_emitter(
        self, conf: Mapping[str, Any], context: TopologyContext
    ) -> PartitionedTransactionalSpout.Emitter:
        """An emitter of one emission of one task."""
        return _Emitter(self, conf)


class _Coordinator(PartitionedTransactionalSpout.Coordinator):
    def __init__(self, spout: KafkaTransactionalSpout, conf: Mapping[str, Any]) -> None:
        self._spout, self._conf = spout, conf

    def num_partitions(self) -> int:
        try:
            return self._spout.count_partitions(self._conf)
        except KafkaUnavailableError as exc:
            msg = f"{type(self._spout).__qualname__}: {exc}; the transaction starts later"
            raise FailedException(msg) from exc


class _Emitter(PartitionedTransactionalSpout.Emitter):
    def __init__(self, spout: KafkaTransactionalSpout, conf: Mapping[str, Any]) -> None:
        self._spout = spout
        self._reading = _Reading(spout, conf)

    def emit_partition_batch_new(
        self,
        tx: TransactionAttempt,
        collector: BatchOutputCollector,
        partition: int,
        last_partition_meta: Any,
    ) -> Any:
        spout, reading = self._spout, self._reading
        tp = spout.partition_of(reading.topics, partition)
        last = None
        if last_partition_meta is not None:
            last = spout._check(partition, tp, last_partition_meta)
        end = reading.end_of(tp)
        if end is None:  # a number past its topic's partitions (or the topic is away)
            if last is None:
                return None
            # Nothing to read: the next batch starts where this one would have.
            return {**last, "first": last["next"], "count": 0, "digest": _EMPTY_DIGEST}
        position = None if last is None else last["next"]
        return reading.read_new(tx, collector, partition, tp, end, position)

    def emit_partition_batch(
        self,
        tx: TransactionAttempt,
        collector: BatchOutputCollector,
        partition: int,
        partition_meta: Any,
    ) -> None:
        spout, reading = self._spout, self._reading
        tp = spout.partition_of(reading.topics, partition)
        meta = spout._check(partition, tp, partition_meta)
        first, after, count = meta["first"], meta["next"], meta["count"]
        if first == after:
            return
        listed = reading.end_of(tp)
        if listed is None or not listed.low <= first or listed.high < after:
            now = "no such partition" if listed is None else f"offsets {listed.low} to "
            if listed is not None:
                now += f"{listed.high - 1}" if listed.high > listed.low else "none (empty)"
            raise self._lost(tx, partition, tp, meta, f"the partition now holds {now}")
        # The range is read whole, up to ``next``: an end of its own, never past it.
        end = KafkaEnd(listed.low, after, listed.high, first)
        reader = reading.reader(tp, first, end)
        batch = reader.read(after - first)
        digest = reader.digest.hexdigest()
        if batch.position != after or reader.consumed != count or digest != meta["digest"]:
            found = f"{reader.consumed} records up to offset {batch.position}"
            if reader.consumed == count and batch.position == after:
                found += " that differ from those first read (another digest)"
            raise self._lost(tx, partition, tp, meta, f"found {found}")
        _emit(tx, collector, batch.stream, batch.records)

    def _lost(
        self,
        tx: TransactionAttempt,
        partition: int,
        tp: KafkaPartition,
        meta: Mapping[str, Any],
        found: str,
    ) -> KafkaReplayError:
        msg = (
            f"{type(self._spout).__qualname__}: cannot replay txid {tx.transaction_id} of "
            f"partition {partition} ({tp}): its batch was the {meta['count']} records at "
            f"offsets {meta['first']} to {meta['next'] - 1}, and {found}; the records were "
            "deleted (retention, compaction, deleted records) or the topic was made again, so "
            "the batch cannot be emitted again as it was. Keep records longer than a topology "
            "may be down, or read with OpaqueKafkaTransactionalSpout, whose replays may differ"
        )
        return KafkaReplayError(msg)


# ------------------------------------------------------------------ opaque
class OpaqueKafkaTransactionalSpout(_KafkaTransactional, OpaquePartitionedTransactionalSpout):
    """Kafka topics as an opaque partitioned spout: it reads on when records are gone.

    Arguments as ``KafkaTransactionalSpout``. Each emission reads the next ``take_per_batch``
    records after the meta it is given (a replay: after the last committed meta). Expired
    offsets are skipped and reported; an unreachable cluster makes a partition emit nothing for
    the txid (its meta carried forward). Count with an ``OpaqueMap``: a replay may read other
    records than the attempt before it.

    Example:
        >>> spout = OpaqueKafkaTransactionalSpout(["sentences"], take_per_batch=1000)
        >>> spout.get_coordinator({}, None).is_ready()
        True
    """

    def get_coordinator(
        self, conf: Mapping[str, Any], context: TopologyContext
    ) -> OpaquePartitionedTransactionalSpout.Coordinator:
        """A coordinator that is always ready."""
        return _OpaqueCoordinator()

    def get_emitter(
        self, conf: Mapping[str, Any], context: TopologyContext
    ) -> OpaquePartitionedTransactionalSpout.Emitter:
        """An emitter of one emission of one task."""
        return _OpaqueEmitter(self, conf)


class _OpaqueCoordinator(OpaquePartitionedTransactionalSpout.Coordinator):
    pass


class _OpaqueEmitter(OpaquePartitionedTransactionalSpout.Emitter):
    def __init__(self, spout: OpaqueKafkaTransactionalSpout, conf: Mapping[str, Any]) -> None:
        self._spout, self._conf = spout, conf
        self._reading = _Reading(spout, conf)
        self._away: KafkaUnavailableError | None = None

    def num_partitions(self) -> int:
        spout = self._spout
        topics = self._reading.topics
        key = (spout.source.settings(self._conf).bootstrap, topics)
        try:
            count = spout.count_partitions(self._conf)
        except KafkaUnavailableError as exc:
            if key not in _last_counts:
                raise  # nothing known yet: an outage, waited out
            log.warning(
                "%s: cannot list the topics (%s); using the %d partitions listed last",
                type(spout).__qualname__,
                exc,
                _last_counts[key],
            )
            return _last_counts[key]
        _last_counts[key] = count
        return count

    def emit_partition_batch(
        self,
        tx: TransactionAttempt,
        collector: BatchOutputCollector,
        partition: int,
        last_partition_meta: Any,
    ) -> Any:
        spout, reading = self._spout, self._reading
        tp = spout.partition_of(reading.topics, partition)
        last = None
        if last_partition_meta is not None:
            last = spout._check(partition, tp, last_partition_meta)
        if self._away is not None:
            return None  # the listing of this emission failed: no partition waits for it again
        try:
            end = reading.end_of(tp)
            if end is None:
                return None  # a number past its topic's partitions: nothing, the meta kept
            position = None if last is None else last["next"]
            return reading.read_new(tx, collector, partition, tp, end, position)
        except KafkaUnavailableError as exc:
            if not reading.listed:  # the listing failed: so would every partition's
                self._away = exc
            log.warning(
                "%s: partition %s (%s) unreachable (%s); txid %s emits nothing from it",
                type(spout).__qualname__,
                partition,
                tp,
                exc,
                tx.transaction_id,
            )
            return None
