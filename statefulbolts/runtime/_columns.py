"""Feeding a batch bolt: a task's input as ``ColumnBatch`` columns, not a ``Tuple`` per value.

A ``BasicBolt`` or ``StatefulBolt`` that defines ``execute_batch`` takes each batch of its
data input (one source task, one stream, single-tree tuples) a chunk of rows at a time: one
call into the bolt, and one step of the task's ledger for the chunk's acks
(``TaskCollector.ack_batch``; a stateful bolt's executor holds the batch and takes that step
when the checkpoint releases its acks), where the per-tuple path (``_task._feed``) builds a
``Tuple``, calls the executor and appends an ack per value. The tuples are numbered by the
ledger exactly as the per-tuple path numbers them, so what the task settles and reports is the
same.

When ``execute_batch`` raises (anything but a ``BasicBolt``'s ``FailedException``, which its
executor turns into fails), the chunk runs again through the per-tuple path, whose failure
names the tuple that raised (the poison-tuple search of ``statefulbolts.deadletter`` needs
one). If no tuple raises there, the batch's own exception goes on. Either way the task fails,
as it would have on the per-tuple path: nothing the chunk did is kept.

No pyspark here: this module runs inside Spark's Python workers but is plain Python.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from statefulbolts.tuples import ColumnBatch, Fields

__all__ = ["ROWS", "feed_columns"]

# Rows per batch: the per-tuple loop's chunk, so the young-garbage check runs as often.
ROWS = 1 << 15

# Runs the per-tuple path over (rows, roots, first number, single, source): the search for
# the tuple that fails.
ByTuple = Callable[[Sequence[Any], Sequence[int], int, bool, tuple[Fields, str, int, str]], None]


def feed_columns(
    target: Callable[[ColumnBatch], None],
    values: Sequence[Any],
    roots: Sequence[int],
    first: int,
    single: bool,
    source: tuple[Fields, str, int, str],
    chunked: Callable[[], None],
    by_tuple: ByTuple,
) -> None:
    """One batch of single-tree tuples into ``target``, ``ROWS`` rows at a time.

    ``first`` is the ledger's number of the first tuple; ``single``: a one-field stream,
    whose rows are bare values; ``source``: fields, component, task id and stream of them all;
    ``chunked`` runs before each chunk (``_task._execute``'s compaction and garbage check).
    """
    fields, component, task, stream = source
    n = len(values)
    for start in range(0, n, ROWS):
        chunked()
        stop = min(start + ROWS, n)
        whole = start == 0 and stop == n
        rows = values if whole else values[start:stop]
        rooted = roots if whole else roots[start:stop]
        batch = ColumnBatch(
            rows, fields, component, task, stream, single=single, roots=rooted, first=first + start
        )
        try:
            target(batch)
        except Exception:
            # Raises, naming the tuple, if one raises.
            by_tuple(rows, rooted, first + start, single, source)
            raise
