"""In-memory partitioned spouts for tests and demos, transactional and opaque.

The data is a set of partitions, each a list of rows, held by the spout object and read live:
rows appended to a partition, or partitions added, on the driver's spout object are seen by the
next emission (the runtime pickles the spout, data included, with each emit job).

A partition's meta is ``[index, amount]``: the batch is the rows ``[index, index + amount)``. A
new batch starts where the partition's last one ended (``index + amount``, or 0) and takes
``min(take_per_batch, rows left)`` rows; it has a meta even when it is empty.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from statefulbolts.components import Component, OutputFieldsDeclarer
from statefulbolts.errors import FailedException
from statefulbolts.transactional._attempt import TransactionAttempt
from statefulbolts.transactional._bolts import BatchOutputCollector
from statefulbolts.transactional._spouts import (
    OpaquePartitionedTransactionalSpout,
    PartitionedTransactionalSpout,
)
from statefulbolts.tuples import Fields

if TYPE_CHECKING:
    from statefulbolts.context import TopologyContext

__all__ = ["MemoryTransactionalSpout", "OpaqueMemoryTransactionalSpout"]

Rows = Sequence[Sequence[Any]]
Partitions = Mapping[int, Rows] | Sequence[Rows]


class _MemorySpout(Component):
    """The data, the batch arithmetic and the output fields both memory spouts share."""

    TX_FIELD: ClassVar[str]
    """The attempt's field name: ``<module>.<qualname>/id`` of the spout class."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.TX_FIELD = f"{cls.__module__}.{cls.__qualname__}/id"

    def __init__(
        self, partitions: Partitions, fields: Fields | Iterable[str], take_per_batch: int
    ) -> None:
        name = type(self).__qualname__
        if isinstance(take_per_batch, bool) or not isinstance(take_per_batch, int):
            msg = f"{name}: take_per_batch must be an int, got {take_per_batch!r}"
            raise TypeError(msg)
        if take_per_batch < 1:
            msg = f"{name}: take_per_batch must be at least 1, got {take_per_batch}"
            raise ValueError(msg)
        if not isinstance(partitions, Mapping | Sequence) or isinstance(partitions, str | bytes):
            msg = (
                f"{name}: partitions must map the indexes 0..n-1 to lists of rows (a dict or a "
                f"list), got {type(partitions).__name__}"
            )
            raise TypeError(msg)
        self.fields = fields if isinstance(fields, Fields) else Fields(list(fields))
        if self.TX_FIELD in self.fields:
            msg = f"{name}: fields {self.fields.to_list()} must not contain {self.TX_FIELD!r}"
            raise ValueError(msg)
        # Kept by reference, never copied: changes made through the caller's object count too.
        self.partitions = partitions
        self.take_per_batch = take_per_batch
        for partition in range(self._num_partitions()):
            for offset, row in enumerate(self._rows(partition)):
                self._check_row(partition, offset, row)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """The default stream: ``[TX_FIELD] + fields``."""
        declarer.declare(Fields([self.TX_FIELD, *self.fields]))

    def _num_partitions(self) -> int:
        count = len(self.partitions)
        if isinstance(self.partitions, Mapping):
            keys = set(self.partitions)
            if keys != set(range(count)):
                missing = sorted(set(range(count)) - keys)
                extra = sorted(keys - set(range(count)), key=repr)
                msg = (
                    f"{type(self).__qualname__}: partitions must be numbered 0..{count - 1}; "
                    f"missing {missing}, unexpected {extra}"
                )
                raise ValueError(msg)
        return count

    def _rows(self, partition: int) -> Rows:
        try:
            return self.partitions[partition]
        except (KeyError, IndexError):
            msg = (
                f"{type(self).__qualname__}: no partition {partition}; there are "
                f"{len(self.partitions)} (0..{len(self.partitions) - 1})"
            )
            raise ValueError(msg) from None

    def _check_row(self, partition: int, offset: int, row: Any) -> None:
        if not isinstance(row, list | tuple) or len(row) != len(self.fields):
            msg = (
                f"{type(self).__qualname__}: row {offset} of partition {partition} must be a "
                f"list of {len(self.fields)} value(s) for fields {self.fields.to_list()}, "
                f"got {row!r}"
            )
            raise ValueError(msg)

    def _start(self, partition: int, meta: Any) -> int:
        """Where the batch after ``meta`` starts."""
        index, amount = self._parse(partition, meta)
        return index + amount

    def _parse(self, partition: int, meta: Any) -> tuple[int, int]:
        if meta is None:
            return 0, 0
        if isinstance(meta, list | tuple) and len(meta) == 2:
            index, amount = meta
            if all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in meta):
                return index, amount
        msg = (
            f"{type(self).__qualname__}: the meta of partition {partition} must be "
            f"[index, amount] with two non-negative ints, got {meta!r}"
        )
        raise ValueError(msg)

    def _emit_next(
        self,
        tx: TransactionAttempt,
        collector: BatchOutputCollector,
        partition: int,
        last: Any,
    ) -> list[int]:
        """Emit the batch after ``last``; return its meta ``[index, amount]``."""
        start = self._start(partition, last)
        left = len(self._rows(partition)) - start
        amount = max(0, min(self.take_per_batch, left))
        self._emit_rows(tx, collector, partition, start, amount)
        return [start, amount]

    def _emit_rows(
        self,
        tx: TransactionAttempt,
        collector: BatchOutputCollector,
        partition: int,
        index: int,
        amount: int,
    ) -> None:
        rows = self._rows(partition)
        for offset in range(index, index + amount):
            row = rows[offset]
            self._check_row(partition, offset, row)
            collector.emit([tx, *row])

    def __repr__(self) -> str:
        items = (
            self.partitions.items()
            if isinstance(self.partitions, Mapping)
            else enumerate(self.partitions)
        )
        sizes = {p: len(rows) for p, rows in items}
        return (
            f"{type(self).__qualname__}(rows per partition={sizes}, "
            f"fields={self.fields.to_list()}, take_per_batch={self.take_per_batch})"
        )


class MemoryTransactionalSpout(_MemorySpout, PartitionedTransactionalSpout):
    """A partitioned transactional spout over in-memory rows; replays are exact.

    Args:
        partitions: a dict mapping 0..n-1 (or a list) to each partition's rows; a row is a list
            with one value per field and is emitted as ``[tx, *row]``. Read live.
        fields: the rows' field names; the spout declares ``[TX_FIELD] + fields``.
        take_per_batch: the most rows a batch takes from one partition.

    The coordinator's ``num_partitions()`` is ``len(partitions)`` and ``is_ready()`` is always
    true, so once the data is used up every new txid is empty.

    Example:
        >>> class Printing(BatchOutputCollector):
        ...     def emit(self, values, stream="default"):
        ...         print(values[1:])
        ...         return []
        ...     def report_error(self, error):
        ...         pass
        >>> spout = MemoryTransactionalSpout({0: [["cat"], ["dog"], ["emu"]]}, ["word"], 2)
        >>> emitter, out = spout.get_emitter({}, None), Printing()
        >>> meta = emitter.emit_partition_batch_new(TransactionAttempt(1, 1), out, 0, None)
        ['cat']
        ['dog']
        >>> meta
        [0, 2]
        >>> emitter.emit_partition_batch_new(TransactionAttempt(2, 2), out, 0, meta)
        ['emu']
        [2, 1]
    """

    def get_coordinator(
        self, conf: Mapping[str, Any], context: TopologyContext
    ) -> PartitionedTransactionalSpout.Coordinator:
        """A coordinator reading the partition count live."""
        return _Coordinator(self)

    def get_emitter(
        self, conf: Mapping[str, Any], context: TopologyContext
    ) -> PartitionedTransactionalSpout.Emitter:
        """An emitter reading the rows live."""
        return _Emitter(self)


class OpaqueMemoryTransactionalSpout(_MemorySpout, OpaquePartitionedTransactionalSpout):
    """An opaque partitioned spout over in-memory rows, whose partitions can be disabled.

    Arguments and meta as ``MemoryTransactionalSpout``. A disabled partition emits nothing and
    its meta is ``None``, which makes the runtime keep the partition's previous meta; once
    enabled again it continues from there. A replay is a fresh read from the meta it is given,
    so appended rows and disabled partitions make it differ from the first emission.

    Example:
        >>> class Counting(BatchOutputCollector):
        ...     def __init__(self):
        ...         self.count = 0
        ...     def emit(self, values, stream="default"):
        ...         self.count += 1
        ...         return []
        ...     def report_error(self, error):
        ...         pass
        >>> spout = OpaqueMemoryTransactionalSpout([[["a"], ["b"]], [["c"]]], ["letter"], 5)
        >>> spout.set_disabled(1)
        >>> emitter, out = spout.get_emitter({}, None), Counting()
        >>> emitter.num_partitions()
        2
        >>> tx = TransactionAttempt(1, 1)
        >>> emitter.emit_partition_batch(tx, out, 0, None)
        [0, 2]
        >>> print(emitter.emit_partition_batch(tx, out, 1, None))
        None
        >>> out.count
        2
    """

    def __init__(
        self, partitions: Partitions, fields: Fields | Iterable[str], take_per_batch: int
    ) -> None:
        super().__init__(partitions, fields, take_per_batch)
        self._disabled: set[int] = set()

    def set_disabled(self, partition: int, disabled: bool = True) -> None:
        """Disable ``partition`` (``disabled=True``), or enable it again (``disabled=False``)."""
        if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
            msg = (
                f"{type(self).__qualname__}.set_disabled: partition must be a non-negative int, "
                f"got {partition!r}"
            )
            raise ValueError(msg)
        if disabled:
            self._disabled.add(partition)
        else:
            self._disabled.discard(partition)

    def is_disabled(self, partition: int) -> bool:
        """Whether ``partition`` is disabled."""
        return partition in self._disabled

    def get_coordinator(
        self, conf: Mapping[str, Any], context: TopologyContext
    ) -> OpaquePartitionedTransactionalSpout.Coordinator:
        """A coordinator that is always ready."""
        return _OpaqueCoordinator()

    def get_emitter(
        self, conf: Mapping[str, Any], context: TopologyContext
    ) -> OpaquePartitionedTransactionalSpout.Emitter:
        """An emitter reading the rows and the disabled partitions live."""
        return _OpaqueEmitter(self)


class _Coordinator(PartitionedTransactionalSpout.Coordinator):
    def __init__(self, spout: MemoryTransactionalSpout) -> None:
        self._spout = spout

    def num_partitions(self) -> int:
        return self._spout._num_partitions()


class _Emitter(PartitionedTransactionalSpout.Emitter):
    def __init__(self, spout: MemoryTransactionalSpout) -> None:
        self._spout = spout

    def emit_partition_batch_new(
        self,
        tx: TransactionAttempt,
        collector: BatchOutputCollector,
        partition: int,
        last_partition_meta: Any,
    ) -> list[int]:
        return self._spout._emit_next(tx, collector, partition, last_partition_meta)

    def emit_partition_batch(
        self,
        tx: TransactionAttempt,
        collector: BatchOutputCollector,
        partition: int,
        partition_meta: Any,
    ) -> None:
        spout = self._spout
        index, amount = spout._parse(partition, partition_meta)
        have = len(spout._rows(partition))
        if index + amount > have:
            msg = (
                f"{type(spout).__qualname__}: cannot replay rows [{index}, {index + amount}) of "
                f"partition {partition} for txid {tx.transaction_id}: it has only {have} rows"
            )
            raise FailedException(msg)
        spout._emit_rows(tx, collector, partition, index, amount)


class _OpaqueCoordinator(OpaquePartitionedTransactionalSpout.Coordinator):
    pass


class _OpaqueEmitter(OpaquePartitionedTransactionalSpout.Emitter):
    def __init__(self, spout: OpaqueMemoryTransactionalSpout) -> None:
        self._spout = spout

    def emit_partition_batch(
        self,
        tx: TransactionAttempt,
        collector: BatchOutputCollector,
        partition: int,
        last_partition_meta: Any,
    ) -> list[int] | None:
        if self._spout.is_disabled(partition):
            return None
        return self._spout._emit_next(tx, collector, partition, last_partition_meta)

    def num_partitions(self) -> int:
        return self._spout._num_partitions()
