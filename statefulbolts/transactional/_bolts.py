"""Batch bolts and what they emit through: ``BatchBolt``, ``Committer``, ``BatchOutputCollector``.

A transactional topology processes a batch per transaction attempt. A batch bolt sees the tuples
of one attempt, then is told the batch is over (``finish_batch``); it never acks or fails a tuple.
A bolt marked ``Committer`` finishes its batches in the commit phase, strictly in txid order.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from statefulbolts.components import Component
from statefulbolts.errors import TopologyError
from statefulbolts.transactional._attempt import TransactionAttempt
from statefulbolts.tuples import DEFAULT_STREAM, Tuple

if TYPE_CHECKING:
    from statefulbolts.context import TopologyContext

__all__ = ["BaseTransactionalBolt", "BatchBolt", "BatchOutputCollector", "Committer"]

IdT = TypeVar("IdT")


class BatchOutputCollector(ABC):
    """What a batch bolt or a transactional spout's emitter emits through.

    Emits are not anchored and nothing is acked: the runtime counts what each task sends and
    fails or replays whole batches. The first value of every emitted tuple must be the
    ``TransactionAttempt`` of the batch.

    Direct grouping is not supported (the topology declarer has no ``direct_grouping``), so
    ``emit_direct`` raises ``TopologyError``; route by a field with ``fields_grouping`` instead.

    Example:
        >>> class Recording(BatchOutputCollector):
        ...     def __init__(self):
        ...         self.emitted = []
        ...     def emit(self, values, stream="default"):
        ...         self.emitted.append((stream, list(values)))
        ...         return []
        ...     def report_error(self, error):
        ...         pass
        >>> collector = Recording()
        >>> collector.emit([TransactionAttempt(1, 1), "cat"])
        []
        >>> collector.emitted
        [('default', [TransactionAttempt(transaction_id=1, attempt_id=1), 'cat'])]
    """

    @abstractmethod
    def emit(self, values: Sequence[Any], stream: str = DEFAULT_STREAM) -> list[int]:
        """Emit ``values`` (``values[0]`` is the attempt) on ``stream``.

        Returns:
            The global task ids the tuple was sent to.
        """

    def emit_direct(self, task: int, values: Sequence[Any], stream: str = DEFAULT_STREAM) -> None:
        """Emit to one task: unsupported, because there is no direct grouping.

        Raises:
            TopologyError: always, naming the stream and the task asked for.
        """
        msg = (
            f"{type(self).__module__}.{type(self).__qualname__}.emit_direct(task={task!r}, "
            f"stream={stream!r}): direct grouping is not supported by statefulbolts; emit with "
            f"emit() and route by a field with fields_grouping (for example a 'task' field) instead"
        )
        raise TopologyError(msg)

    @abstractmethod
    def report_error(self, error: BaseException) -> None:
        """Record an error against this task; it fails nothing."""


class BatchBolt(Component, Generic[IdT]):
    """A bolt that processes one batch per object: Storm's ``IBatchBolt``.

    The runtime makes **one fresh copy of this object per (task, attempt)**, so fields set in
    ``prepare`` and ``execute`` belong to one batch only:

    1. ``prepare(conf, context, collector, id)`` once, before anything else of that attempt;
    2. ``execute(tuple)`` once per tuple of the attempt that reaches the task (accumulate here);
    3. ``finish_batch()`` exactly once, on every task, even one that received no tuple, after all
       of the task's tuples arrived; for a ``Committer`` also after the previous txid committed.
       It may emit.

    Every tuple's first value is the attempt (``tuple.get_value(0)``), and every tuple emitted
    must have the attempt first too, so ``declare_output_fields`` declares it as the first field.
    Raise ``FailedException`` from any method to fail the batch: this txid and every later active
    one are replayed with new attempts. There is no ack or fail to call.

    Example:
        >>> from statefulbolts.tuples import Fields
        >>> class CountBatch(BatchBolt):
        ...     def prepare(self, conf, context, collector, id):
        ...         self.collector, self.id, self.count = collector, id, 0
        ...     def execute(self, tuple):
        ...         self.count += 1
        ...     def finish_batch(self):
        ...         self.collector.emit([self.id, self.count])
        ...     def declare_output_fields(self, declarer):
        ...         declarer.declare(Fields("id", "count"))
        >>> bolt = CountBatch()
        >>> bolt.prepare({}, None, None, TransactionAttempt(1, 1))
        >>> bolt.count
        0
    """

    @abstractmethod
    def prepare(
        self,
        conf: Mapping[str, Any],
        context: TopologyContext,
        collector: BatchOutputCollector,
        id: IdT,  # noqa: A002 - Storm's parameter name
    ) -> None:
        """Start a batch: keep ``collector`` and ``id`` (the batch's attempt) for later."""

    @abstractmethod
    def execute(self, tuple: Tuple) -> None:  # noqa: A002 - Storm's parameter name
        """Take one tuple of the batch; ``tuple.get_value(0)`` is the attempt."""

    @abstractmethod
    def finish_batch(self) -> None:
        """The batch is complete on this task: emit the results (attempt first)."""


class BaseTransactionalBolt(BatchBolt[TransactionAttempt]):
    """A ``BatchBolt`` whose batch ``id`` is the ``TransactionAttempt``.

    Use ``id.transaction_id`` (the txid, the same on every replay) to make a write idempotent;
    never store the attempt id.

    Example:
        >>> class Total(BaseTransactionalBolt, Committer):
        ...     def prepare(self, conf, context, collector, id):
        ...         self.txid, self.total = id.transaction_id, 0
        ...     def execute(self, tuple):
        ...         self.total += tuple.get_value(1)
        ...     def finish_batch(self):
        ...         pass  # write (self.txid, self.total) unless the stored txid is self.txid
        >>> bolt = Total()
        >>> bolt.prepare({}, None, None, TransactionAttempt(4, 9))
        >>> bolt.txid
        4
    """


class Committer:
    """Marks a batch bolt as a committer: Storm's ``ICommitter``.

    A committer's ``finish_batch`` runs in the commit phase: for txid t only after txid t-1
    committed, one txid at a time. Its ``execute`` may run in either phase. Mix it into a
    ``BatchBolt`` (``class Sum(BaseTransactionalBolt, Committer)``), or add the bolt with
    ``set_committer_bolt``.

    Example:
        >>> class Sum(BaseTransactionalBolt, Committer):
        ...     def prepare(self, conf, context, collector, id): ...
        ...     def execute(self, tuple): ...
        ...     def finish_batch(self): ...
        >>> isinstance(Sum(), Committer)
        True
    """

    __slots__ = ()
