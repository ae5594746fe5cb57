"""What components emit through. The runtime and the test harness implement these."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

from statefulbolts.errors import UnanchoredEmitError
from statefulbolts.tuples import DEFAULT_STREAM, ColumnBatch, Tuple

Anchors = Tuple | Sequence[Tuple] | None


def anchor_list(anchors: Anchors) -> list[Tuple]:
    """Normalize ``emit``'s ``anchors`` argument (one tuple, a list, or ``None``)."""
    if anchors is None:
        return []
    if isinstance(anchors, Tuple):
        return [anchors]
    return list(anchors)


class SpoutOutputCollector(ABC):
    """Given to ``Spout.open``."""

    @abstractmethod
    def emit(
        self, values: Sequence[Any], message_id: Any = None, stream: str = DEFAULT_STREAM
    ) -> None:
        """Emit a tuple; with a ``message_id`` it is tracked and ``ack``/``fail`` follow."""

    @abstractmethod
    def report_error(self, error: BaseException) -> None:
        """Record an error against this spout task (the topology keeps running)."""


class OutputCollector(ABC):
    """Given to ``Bolt.prepare``."""

    @abstractmethod
    def emit(
        self, values: Sequence[Any], anchors: Anchors = None, stream: str = DEFAULT_STREAM
    ) -> None:
        """Emit a tuple anchored to ``anchors`` (a tuple or a list of tuples)."""

    @abstractmethod
    def ack(self, tuple_: Tuple) -> None:
        """Mark ``tuple_`` as fully processed by this bolt."""

    @abstractmethod
    def fail(self, tuple_: Tuple) -> None:
        """Fail ``tuple_``: its spout tuple is failed and replayed."""

    @abstractmethod
    def report_error(self, error: BaseException) -> None:
        """Record an error against this bolt task (the topology keeps running)."""


def anchored_target(collector: OutputCollector) -> OutputCollector:
    """Where anchored emits, acks and fails sent to ``collector`` may go directly.

    A collector that only adds a check on unanchored emits names the collector behind it in
    ``anchored_target``; a caller that always anchors (a ``BasicBolt``'s collector) skips it.
    """
    target = getattr(collector, "anchored_target", None)
    return target if isinstance(target, OutputCollector) else collector


class BasicOutputCollector:
    """Given to ``BasicBolt.execute``: emits are anchored to the input being executed."""

    __slots__ = ("_out", "_direct", "_input")

    def __init__(self, out: OutputCollector) -> None:
        self._out = out
        self._direct = anchored_target(out)
        self._input: Tuple | None = None

    def set_context(self, input_tuple: Tuple) -> None:
        """Set the tuple that following emits are anchored to."""
        self._input = input_tuple

    def emit(self, values: Sequence[Any], stream: str = DEFAULT_STREAM) -> None:
        """Emit anchored to the current input tuple."""
        anchor = self._input
        if anchor is None:  # outside execute: the checks of the full collector apply
            self._out.emit(values, anchor, stream)
        else:
            self._direct.emit(values, anchor, stream)

    def report_error(self, error: BaseException) -> None:
        """Record an error against this bolt task."""
        self._out.report_error(error)


class ColumnOutputCollector:
    """Given to ``BasicBolt.execute_batch``: each emit is anchored to tuples of the batch.

    ``emit(values, row)`` is what ``BasicOutputCollector.emit(values)`` is while the per-tuple
    path executes the batch's ``row``-th tuple: the emitted tuple joins that tuple's trees.
    ``row`` may also be a list of rows (an emit that sums up several tuples joins all their
    trees, as an emit anchored to several tuples does). ``emit_columns`` makes many emits in
    one call, given as columns.
    """

    __slots__ = ("_out", "_direct", "_batch", "_columns")

    def __init__(self, out: OutputCollector) -> None:
        self._out = out
        self._direct = anchored_target(out)
        self._batch: ColumnBatch | None = None
        # The runtime's collector takes many rooted emits at once (``TaskCollector``).
        self._columns = getattr(self._direct, "emit_columns", None)

    def set_batch(self, batch: ColumnBatch) -> None:
        """Set the batch that following emits are anchored to."""
        self._batch = batch

    def emit(
        self, values: Sequence[Any], row: int | Sequence[int], stream: str = DEFAULT_STREAM
    ) -> None:
        """Emit ``values`` on ``stream``, anchored to the batch's tuple(s) at ``row``."""
        batch = self._batch
        if batch is None:
            msg = (
                f"emit({list(values)!r}, row={row!r}) on stream {stream!r} outside "
                "execute_batch: there is no batch to anchor it to; a batch collector emits "
                "only while execute_batch runs"
            )
            raise UnanchoredEmitError(msg)
        if isinstance(row, int):
            self._direct.emit(values, batch.tuple(row), stream)
        else:
            self._direct.emit(values, [batch.tuple(r) for r in row], stream)

    def emit_columns(
        self,
        columns: Sequence[Sequence[Any]],
        rows: Sequence[int] | None = None,
        stream: str = DEFAULT_STREAM,
    ) -> None:
        """Emit one tuple per position ``i``: ``[c[i] for c in columns]``, anchored to ``rows[i]``.

        What ``emit([c[i] for c in columns], rows[i], stream)`` does for each ``i`` in order,
        in one call: ``columns`` holds a column per field of ``stream`` (one for a one-field
        stream), all as long as ``rows``. ``rows`` ``None``: every row of the batch, in order
        (the columns are then as long as the batch).

        Example (a bolt that emits each word's new count, one per input tuple)::

            collector.emit_columns([batch.column("word"), new_counts])
        """
        batch = self._batch
        if batch is None:
            msg = (
                f"emit_columns on stream {stream!r} outside execute_batch: there is no batch "
                "to anchor its tuples to; a batch collector emits only while execute_batch runs"
            )
            raise UnanchoredEmitError(msg)
        roots = batch._roots
        if rows is not None:
            roots = [roots[r] for r in rows]
        elif any(len(c) != len(roots) for c in columns):
            msg = (
                f"emit_columns without rows on stream {stream!r} takes one value per tuple of "
                f"the batch ({len(roots)}) in each column, got columns of lengths "
                f"{[len(c) for c in columns]}: give the rows they belong to"
            )
            raise ValueError(msg)
        bulk = self._columns
        if bulk is not None:
            bulk(columns, roots, stream)
            return
        # A collector without it (the testing harness's): one anchored emit at a time.
        anchor_rows = range(len(roots)) if rows is None else rows
        for values, row in zip(zip(*columns, strict=True), anchor_rows, strict=True):
            self._direct.emit(list(values), batch.tuple(row), stream)

    def report_error(self, error: BaseException) -> None:
        """Record an error against this bolt task."""
        self._out.report_error(error)
