"""The three kinds of transactional spout: plain, partitioned and opaque partitioned.

A transactional spout is split in two:

- a **coordinator**, one object on the driver, that says when a new transaction may start and
  what defines its batch;
- **emitters**, one per emitter task, run inside Spark tasks, that emit the batch.

The runtime pickles the spout with each emit job and calls ``get_emitter`` in the task, so a
spout must pickle (with cloudpickle) and an emitter may be re-created between batches: keep what
must survive in the metadata, not in the emitter. ``close`` is called on every coordinator and
emitter object the runtime made.

**Metadata** (the coordinator's meta of a plain spout, the partition metas of the partitioned
ones) is stored by the runtime in the topology's state provider, serialized with msgpack. It must
therefore be built from ``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``, lists and
dicts with string keys; a tuple comes back as a list.

What each kind guarantees (``docs/protocol/transactional.md``), in short:
a partitioned spout replays the identical batch from the stored meta; an opaque spout is asked
again from the last committed meta and may emit a different batch.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from statefulbolts.components import Component, OutputFieldsDeclarer
from statefulbolts.transactional._attempt import TransactionAttempt
from statefulbolts.transactional._bolts import BatchOutputCollector

if TYPE_CHECKING:
    from statefulbolts.context import TopologyContext

__all__ = [
    "OpaquePartitionedTransactionalSpout",
    "PartitionedTransactionalSpout",
    "TransactionalSpout",
]


class TransactionalSpout(Component):
    """A spout whose coordinator defines each batch with one piece of metadata.

    The coordinator's ``initialize_transaction`` returns the meta of each new txid; every
    emitter task is given it (``emit_batch``) on every attempt, and together the tasks must emit
    the same tuples for the same meta. Declare the output fields with the attempt first.

    Example:
        >>> from statefulbolts.tuples import Fields
        >>> class Numbers(TransactionalSpout):
        ...     class Coordinator(TransactionalSpout.Coordinator):
        ...         def initialize_transaction(self, txid, prev_metadata):
        ...             start = 0 if prev_metadata is None else prev_metadata[1]
        ...             return [start, start + 2]  # emit numbers [start, start + 2)
        ...     class Emitter(TransactionalSpout.Emitter):
        ...         def emit_batch(self, tx, coordinator_meta, collector):
        ...             for n in range(*coordinator_meta):
        ...                 collector.emit([tx, n])
        ...     def get_coordinator(self, conf, context):
        ...         return Numbers.Coordinator()
        ...     def get_emitter(self, conf, context):
        ...         return Numbers.Emitter()
        ...     def declare_output_fields(self, declarer):
        ...         declarer.declare(Fields("tx", "n"))
        >>> coordinator = Numbers().get_coordinator({}, None)
        >>> coordinator.initialize_transaction(2, coordinator.initialize_transaction(1, None))
        [2, 4]
    """

    class Coordinator(ABC):
        """The driver side: when a new txid may start, and the meta that defines its batch."""

        @abstractmethod
        def initialize_transaction(self, txid: int, prev_metadata: Any) -> Any:
            """The meta of the batch of the **new** txid ``txid`` (msgpack-serializable).

            Called once per txid, never for a replay (the stored meta is reused).

            Args:
                txid: the new transaction id (1, 2, ...).
                prev_metadata: the meta of ``txid - 1``, or ``None`` for txid 1.

            Raises:
                FailedException: not now; the txid is started later.
            """

        def is_ready(self) -> bool:
            """May a new txid start? Polled often, so it must be fast. Default: always."""
            return True

        def close(self) -> None:  # noqa: B027 - optional hook
            """Release resources; called once when the runtime is done with this object."""

    class Emitter(ABC):
        """The task side: emits the batch a coordinator meta defines."""

        @abstractmethod
        def emit_batch(
            self, tx: TransactionAttempt, coordinator_meta: Any, collector: BatchOutputCollector
        ) -> None:
            """Emit this task's share of the batch ``coordinator_meta`` defines, as ``[tx, ...]``.

            Called on every emitter task for every attempt, in txid order. Raise
            ``FailedException`` to fail the attempt.
            """

        def cleanup_before(self, txid: int) -> None:  # noqa: B027 - optional hook
            """Txids below ``txid`` are committed: forget what was kept for them. Default: none."""

        def close(self) -> None:  # noqa: B027 - optional hook
            """Release resources; called once when the runtime is done with this object."""

    @abstractmethod
    def get_coordinator(
        self, conf: Mapping[str, Any], context: TopologyContext
    ) -> TransactionalSpout.Coordinator:
        """A new coordinator (on the driver)."""

    @abstractmethod
    def get_emitter(
        self, conf: Mapping[str, Any], context: TopologyContext
    ) -> TransactionalSpout.Emitter:
        """A new emitter for the task ``context`` describes (inside a Spark task)."""

    @abstractmethod
    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """Declare the emitted fields; the first one is the attempt."""


class PartitionedTransactionalSpout(Component):
    """A spout over numbered partitions whose batches replay identically.

    Storm's ``IPartitionedTransactionalSpout``. The coordinator only counts partitions
    (``num_partitions``, read when a txid first starts). For each partition, the first emission
    of a txid (``emit_partition_batch_new``) returns a *partition meta* that fully defines that
    partition's part of the batch; the runtime stores it before processing, and a replay of the
    txid calls ``emit_partition_batch`` with it, which must emit exactly the same tuples.
    Partition metas must be msgpack-serializable (see the module docstring).

    Example:
        >>> from statefulbolts.tuples import Fields
        >>> class Ranges(PartitionedTransactionalSpout):
        ...     class Coordinator(PartitionedTransactionalSpout.Coordinator):
        ...         def num_partitions(self):
        ...             return 2
        ...     class Emitter(PartitionedTransactionalSpout.Emitter):
        ...         def emit_partition_batch_new(self, tx, collector, partition, last):
        ...             start = 0 if last is None else last[1]
        ...             meta = [start, start + 10]
        ...             self.emit_partition_batch(tx, collector, partition, meta)
        ...             return meta
        ...         def emit_partition_batch(self, tx, collector, partition, meta):
        ...             for n in range(*meta):
        ...                 collector.emit([tx, partition, n])
        ...     def get_coordinator(self, conf, context):
        ...         return Ranges.Coordinator()
        ...     def get_emitter(self, conf, context):
        ...         return Ranges.Emitter()
        ...     def declare_output_fields(self, declarer):
        ...         declarer.declare(Fields("tx", "partition", "n"))
        >>> Ranges().get_coordinator({}, None).num_partitions()
        2
    """

    class Coordinator(ABC):
        """The driver side: how many partitions there are, and whether a new txid may start."""

        @abstractmethod
        def num_partitions(self) -> int:
            """The number of partitions now; read when a txid first starts."""

        def is_ready(self) -> bool:
            """May a new txid start? Polled often, so it must be fast. Default: always."""
            return True

        def close(self) -> None:  # noqa: B027 - optional hook
            """Release resources; called once when the runtime is done with this object."""

    class Emitter(ABC):
        """The task side: emits one partition's part of a batch, new or replayed."""

        @abstractmethod
        def emit_partition_batch_new(
            self,
            tx: TransactionAttempt,
            collector: BatchOutputCollector,
            partition: int,
            last_partition_meta: Any,
        ) -> Any:
            """Emit the next part of ``partition`` and return the meta that defines it.

            Called for the first emission of a (txid, partition). A meta must be returned even
            when nothing was emitted, so the next batch knows where to start.

            Args:
                tx: the attempt; the first value of every tuple emitted.
                collector: where to emit.
                partition: the partition index, ``0 <= partition < num_partitions()``.
                last_partition_meta: the meta of this partition's latest earlier txid, or
                    ``None`` if it has none.

            Returns:
                The msgpack-serializable meta that ``emit_partition_batch`` replays.
            """

        @abstractmethod
        def emit_partition_batch(
            self,
            tx: TransactionAttempt,
            collector: BatchOutputCollector,
            partition: int,
            partition_meta: Any,
        ) -> None:
            """Replay exactly the tuples ``partition_meta`` defines.

            Raise ``FailedException`` when they cannot be emitted again.
            """

        def close(self) -> None:  # noqa: B027 - optional hook
            """Release resources; called once when the runtime is done with this object."""

    @abstractmethod
    def get_coordinator(
        self, conf: Mapping[str, Any], context: TopologyContext
    ) -> PartitionedTransactionalSpout.Coordinator:
        """A new coordinator (on the driver)."""

    @abstractmethod
    def get_emitter(
        self, conf: Mapping[str, Any], context: TopologyContext
    ) -> PartitionedTransactionalSpout.Emitter:
        """A new emitter for the task ``context`` describes (inside a Spark task)."""

    @abstractmethod
    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """Declare the emitted fields; the first one is the attempt."""


class OpaquePartitionedTransactionalSpout(Component):
    """A spout over numbered partitions that may emit a different batch on replay.

    Storm's ``IOpaquePartitionedTransactionalSpout``. Every emission, replays included, calls
    ``emit_partition_batch`` with the partition's meta to continue from: the meta of the
    partition's latest emission when that txid is still uncommitted, else the last committed
    one. The runtime stores a partition's meta only when its txid commits. Returning ``None``
    (nothing emitted, for example while the partition's source is unreachable) keeps the
    previous meta. Partition metas must be msgpack-serializable (see the module docstring).

    Example:
        >>> from statefulbolts.tuples import Fields
        >>> class Clock(OpaquePartitionedTransactionalSpout):
        ...     class Coordinator(OpaquePartitionedTransactionalSpout.Coordinator):
        ...         pass
        ...     class Emitter(OpaquePartitionedTransactionalSpout.Emitter):
        ...         def emit_partition_batch(self, tx, collector, partition, last):
        ...             tick = 0 if last is None else last + 1
        ...             collector.emit([tx, tick])
        ...             return tick
        ...         def num_partitions(self):
        ...             return 1
        ...     def get_coordinator(self, conf, context):
        ...         return Clock.Coordinator()
        ...     def get_emitter(self, conf, context):
        ...         return Clock.Emitter()
        ...     def declare_output_fields(self, declarer):
        ...         declarer.declare(Fields("tx", "tick"))
        >>> Clock().get_coordinator({}, None).is_ready()
        True
    """

    class Coordinator(ABC):  # noqa: B024 - every hook is optional
        """The driver side: whether a new txid may start."""

        def is_ready(self) -> bool:
            """May a new txid start? Polled often, so it must be fast. Default: always."""
            return True

        def close(self) -> None:  # noqa: B027 - optional hook
            """Release resources; called once when the runtime is done with this object."""

    class Emitter(ABC):
        """The task side: emits one partition's part of a batch, continuing from a meta."""

        @abstractmethod
        def emit_partition_batch(
            self,
            tx: TransactionAttempt,
            collector: BatchOutputCollector,
            partition: int,
            last_partition_meta: Any,
        ) -> Any:
            """Emit the next part of ``partition``, continuing from ``last_partition_meta``.

            Args:
                tx: the attempt; the first value of every tuple emitted.
                collector: where to emit.
                partition: the partition index, ``0 <= partition < num_partitions()``.
                last_partition_meta: where to continue from, or ``None`` to start.

            Returns:
                The msgpack-serializable meta of what was emitted, or ``None`` when nothing
                could be read (the previous meta is then carried forward).
            """

        @abstractmethod
        def num_partitions(self) -> int:
            """The number of partitions now; read at each emission."""

        def close(self) -> None:  # noqa: B027 - optional hook
            """Release resources; called once when the runtime is done with this object."""

    @abstractmethod
    def get_coordinator(
        self, conf: Mapping[str, Any], context: TopologyContext
    ) -> OpaquePartitionedTransactionalSpout.Coordinator:
        """A new coordinator (on the driver)."""

    @abstractmethod
    def get_emitter(
        self, conf: Mapping[str, Any], context: TopologyContext
    ) -> OpaquePartitionedTransactionalSpout.Emitter:
        """A new emitter for the task ``context`` describes (inside a Spark task)."""

    @abstractmethod
    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """Declare the emitted fields; the first one is the attempt."""
