"""Partitioned spouts: sources read on the executors, their progress a position per partition.

A ``Spout`` runs in the driver: every tuple it emits enters the transaction's job from there,
and one driver caps what a topology can ingest. A ``PartitionedSpout`` is read inside the job
instead, as Flink reads source splits and Storm's Kafka spout reads offsets:

1. In the driver, before each PREPARE, ``partitions(conf)`` names the source's partitions
   (strings). Sorted, partition ``i`` goes to spout task ``i % parallelism``. A spout whose
   partitions grow also says where each one ends now (``ends(conf, partitions)``): the end
   goes with the partition to its task, and that PREPARE reads nothing after it.
2. In the job, each spout task opens a reader per partition it was given
   (``open_reader(conf, context, partition, position)``, plus ``end=`` from ``ends`` for a
   spout that defines it), at the position the last committed transaction ended at (``None``
   for a partition never read), and asks it for up to N records (``PartitionReader.read``).
   The reader returns the records and the position after them. The records go on as tuples
   of the spout's stream; nothing passes through the driver.
3. The job returns the end positions (and any gap a reader had to jump: ``PartitionReader.gap``,
   records the source no longer holds, logged and counted by the driver). The driver saves
   them with the checkpoint, in the commit that decides the transaction (COMMITTING), so the
   positions and the bolts' state commit together: a transaction that fails or rolls back is
   read again from the same positions, and a restarted driver starts where the last committed
   transaction ended, even with another spout parallelism (positions belong to partitions,
   not to tasks).

A position is any plain value the state can store as msgpack: an int offset, a Redis stream
id, a list of them. A reader must be deterministic: the same partition, position, end and count
read the same records. Spark may run a spout task more than once in one job (a retry after a
crash, or again after an executor holding its output was lost, while other tasks already
consumed the first attempt's output): every attempt must read the same records, or the job
counts some twice and others never. A source that only grows keeps that promise through
``ends``: the end is fixed in the driver, once per PREPARE, so an attempt run after more was
appended still stops where the first one did.

Only checkpointed topologies (with a stateful bolt) run partitioned spouts: their positions are
saved with the checkpoint. N is ``topology.max.spout.pending`` records per spout task per
transaction (``DEFAULT_MAX_RECORDS`` when it is unset), shared out between the task's
partitions.

Example:
    >>> class Numbers(PartitionedSpout):
    ...     '''Two partitions of the numbers below 10: the evens and the odds.'''
    ...     def partitions(self, conf):
    ...         return ["even", "odd"]
    ...     def open_reader(self, conf, context, partition, position):
    ...         return NumberReader(0 if partition == "even" else 1, position or 0)
    ...     def declare_output_fields(self, declarer):
    ...         declarer.declare(Fields("n"))
    >>> class NumberReader(PartitionReader):
    ...     def __init__(self, parity, index):
    ...         self.parity, self.index = parity, index
    ...     def read(self, max_records):
    ...         upto = min(self.index + max_records, 5)
    ...         records = [[2 * i + self.parity] for i in range(self.index, upto)]
    ...         return PartitionBatch(records, upto)
    >>> Numbers().open_reader({}, None, "odd", 3).read(10)
    PartitionBatch(records=[[7], [9]], position=5, stream='default')
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from statefulbolts.components import Spout
from statefulbolts.context import TopologyContext
from statefulbolts.errors import TopologyError
from statefulbolts.tuples import DEFAULT_STREAM, Fields  # noqa: F401 - the doctest's Fields

__all__ = ["DEFAULT_MAX_RECORDS", "Gap", "PartitionBatch", "PartitionReader", "PartitionedSpout"]

# Records per spout task per transaction when ``topology.max.spout.pending`` is unset.
DEFAULT_MAX_RECORDS = 100_000


class PartitionBatch(NamedTuple):
    """What one read of one partition returned.

    ``records``: each record is the values of one tuple on ``stream``; ``position``: where the
    next read of the partition starts (after the last record returned).
    """

    records: Sequence[Sequence[Any]]
    position: Any
    stream: str = DEFAULT_STREAM


class Gap(NamedTuple):
    """A jump a reader made because its source no longer holds what lies at its position.

    ``start``: the position the read was to start at; ``resumed``: where it read on from;
    ``lost``: how many positions (offsets) it passed over, when known (``None``: it went back,
    to a source that was deleted and made again); ``reason``: one line for a person (shown in
    the driver's warning, never parsed).
    """

    start: Any
    resumed: Any
    lost: int | None
    reason: str


class PartitionReader(ABC):
    """Reads one partition from one position, in a task of the job (see the module docstring)."""

    @abstractmethod
    def read(self, max_records: int) -> PartitionBatch:
        """Up to ``max_records`` records from the reader's position, and the position after.

        Fewer (none) when the partition holds no more now; the position is then where the
        records returned end (unchanged when there are none).
        """

    def gap(self) -> Gap | None:
        """After ``read``: the jump it made past records its source no longer holds, if any.

        A source whose old records expire (retention) or whose partition was made again says
        so here rather than stalling or going back in silence; the driver logs it as a
        warning and counts it (``PartitionedSpouts.gaps``) once the PREPARE that read it counts.
        """
        return None

    def close(self) -> None:  # noqa: B027 - most readers hold nothing
        """Release what the reader holds; called once, after ``read``."""


class PartitionedSpout(Spout):
    """A spout read on the executors, a position per partition (see the module docstring).

    Subclass it and define ``partitions``, ``open_reader`` and ``declare_output_fields``.
    ``has_more`` is an optional hint, asked in the driver: a topology whose partitioned spouts
    all answer ``False`` runs no transaction for them (it may go idle). Storm's spout methods
    (``next_tuple``, ``ack``, ``fail``) are not called: tuples of a partitioned spout are
    tracked and acked as any spout's, and what a failed transaction read is read again from
    its positions. A partitioned spout can replay after a restart (``durable_source``): its
    positions are committed with the state, and a restarted driver reads on from them.
    """

    durable_source = True

    @abstractmethod
    def partitions(self, conf: Mapping[str, Any]) -> Sequence[str]:
        """The partition ids of the source now (in the driver, before each PREPARE)."""

    @abstractmethod
    def open_reader(
        self,
        conf: Mapping[str, Any],
        context: TopologyContext,
        partition: str,
        position: Any,
    ) -> PartitionReader:
        """A reader of ``partition`` from ``position`` (``None``: its beginning), in a task.

        A spout that defines ``ends`` takes a keyword argument ``end`` too: the reader returns
        no record after it.
        """

    def ends(self, conf: Mapping[str, Any], partitions: Sequence[str]) -> Mapping[str, Any] | None:
        """Where each of ``partitions`` ends now (in the driver, once per PREPARE).

        Define it for a source that grows while the topology runs (appended files, streams):
        the PREPARE's tasks then get ``end=`` (this mapping's value for their partition,
        ``None`` if it has none) in ``open_reader``, and a reader returns no record after
        its end. Every Spark attempt of the task then reads the same records, however much
        was appended between them. ``None`` (the default): no ends, and ``open_reader`` is
        called without ``end``; for a source that does not change under its readers.
        """
        return None

    def has_more(self, conf: Mapping[str, Any], partition: str, position: Any) -> bool:
        """Whether ``partition`` may hold records after ``position`` (in the driver).

        The default, ``True``, makes every checkpoint interval run a transaction that reads.
        """
        return True

    def check_config(self, conf: Mapping[str, Any]) -> None:  # noqa: B027 - optional
        """Refuse a config that cannot work, before the topology starts (``statefulbolts run``).

        Called before Spark starts, as a state provider's ``check_config`` is: a source may
        validate its keys and look up what it names (a missing topic), in a moment. Raise a
        ``StatefulBoltsError`` naming the key or the missing thing; nothing by default.
        """

    def committed(self, conf: Mapping[str, Any], positions: Mapping[str, Any]) -> None:  # noqa: B027
        """After each commit decision (COMMITTING saved, in the driver): every partition's position.

        For a source with its own record of progress that monitoring tools read (a Kafka
        consumer group's offsets). Never read back for recovery: the positions saved with the
        checkpoint are the truth. It must not raise for a failure of that record (log it); it
        runs in the driver loop, so it should not block. Nothing by default.
        """

    def lags(self, positions: Mapping[str, Any]) -> Mapping[str, int] | None:
        """Per partition, how many records lie after ``positions`` (the committed ones).

        Asked from a dashboard's or a metrics scrape's thread, not the driver's: answer from
        what the spout already knows (the ends it last listed), with no I/O. ``None`` (the
        default): the source does not know.
        """
        return None

    def next_tuple(self) -> None:
        """Never called: a partitioned spout is read on the executors.

        Raises:
            TopologyError: always; only a checkpointed topology runs a partitioned spout.
        """
        kind = f"{type(self).__module__}.{type(self).__qualname__}"
        msg = (
            f"{kind} is a PartitionedSpout, read on the executors by the checkpoint runtime; "
            "it runs only in a topology with a stateful bolt"
        )
        raise TopologyError(msg)
