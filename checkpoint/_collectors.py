"""Collectors the checkpoint executors hand to user bolts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from statefulbolts.collectors import Anchors, OutputCollector
from statefulbolts.context import TopologyContext
from statefulbolts.errors import UnanchoredEmitError
from statefulbolts.tuples import DEFAULT_STREAM, ColumnBatch, Tuple


class AnchoringOutputCollector(OutputCollector):
    """Refuses unanchored emits: in a stateful topology every emit must be anchored.

    ``anchors=None`` (the default) is refused; an explicit empty list is the deliberate way to emit
    an untracked tuple, as Storm's ``emit(stream, null, values)`` is.
    """

    def __init__(self, delegate: OutputCollector, context: TopologyContext) -> None:
        self._delegate = delegate
        self._context = context
        # Anchored emits, acks and fails pass through unchanged: callers that always anchor
        # may go straight to the delegate (see ``statefulbolts.collectors.anchored_target``).
        self.anchored_target: OutputCollector | None = delegate
        # A delegate that can refuse unanchored emits itself (the runtime's task collector,
        # with this same error) takes them directly: one Python frame less per emit.
        refuse = getattr(delegate, "refuse_unanchored", None)
        if refuse is not None:
            refuse()
            self.emit = delegate.emit  # type: ignore[method-assign]
        # Many emits at once, each anchored to one tree (``ColumnOutputCollector``): a
        # delegate that takes them takes them from here too, as it takes anchored emits.
        bulk = getattr(delegate, "emit_columns", None)
        if bulk is not None:
            self.emit_columns = bulk

    def emit(
        self, values: Sequence[Any], anchors: Anchors = None, stream: str = DEFAULT_STREAM
    ) -> None:
        """Emit anchored to ``anchors``; ``None`` raises ``UnanchoredEmitError``."""
        if anchors is None:
            ctx = self._context
            msg = (
                f"bolt {ctx.this_component_id!r} task {ctx.this_task_index} emitted "
                f"{list(values)!r} "
                f"on stream {stream!r} without anchors; bolts in a stateful topology must emit "
                "anchored tuples: pass anchors=<input tuple>"
            )
            raise UnanchoredEmitError(msg)
        self._delegate.emit(values, anchors, stream)

    def ack(self, tuple_: Tuple) -> None:
        """Ack at once."""
        self._delegate.ack(tuple_)

    def fail(self, tuple_: Tuple) -> None:
        """Fail at once."""
        self._delegate.fail(tuple_)

    def report_error(self, error: BaseException) -> None:
        """Report through the underlying collector."""
        self._delegate.report_error(error)


class AckTrackingOutputCollector(AnchoringOutputCollector):
    """Holds acks back: they are released when the checkpoint that covers them commits.

    A batch acked whole (``ack_batch``, a ``StatefulBolt.execute_batch`` that returned) is
    held as the batch, not as a tuple per row.
    """

    def __init__(self, delegate: OutputCollector, context: TopologyContext) -> None:
        super().__init__(delegate, context)
        self.anchored_target = None  # acks are held back here, so nothing may skip this
        self.acked: list[Tuple] = []
        self.acked_batches: list[ColumnBatch] = []
        # A stateful bolt acks every tuple it executes: its ``ack`` is the queue's own append,
        # with no Python frame in between (``drain`` rebinds it to the new queue).
        self.ack = self.acked.append  # type: ignore[method-assign,assignment]

    def ack(self, tuple_: Tuple) -> None:
        """Queue the ack until the next PREPARE moves it to the prepared set."""
        self.acked.append(tuple_)

    def ack_batch(self, batch: ColumnBatch) -> None:
        """Queue the acks of every tuple of ``batch``, as ``ack`` queues one tuple's."""
        self.acked_batches.append(batch)

    def drain(self) -> list[Tuple]:
        """Return the queued acks of single tuples and forget them."""
        acked, self.acked = self.acked, []
        self.ack = self.acked.append  # type: ignore[method-assign,assignment]
        return acked

    def drain_batches(self) -> list[ColumnBatch]:
        """Return the batches queued by ``ack_batch`` and forget them."""
        batches, self.acked_batches = self.acked_batches, []
        return batches
