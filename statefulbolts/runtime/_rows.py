"""Feeding a per-tuple bolt over columns: one reused ``Tuple``, acks settled as runs.

A bolt written the Storm way (``BasicBolt.execute(tuple, collector)``, a ``StatefulBolt`` or
any ``Bolt`` that acks through its collector) gets one ``Tuple`` per value of its input. The
reference loop (``_task._feed``) makes a new object for each and every ack keeps it alive
until the ledger settles it: for a counting bolt's 500,000 tuples a task, the tuples, their
acks and the settling were half its time. This loop gives the bolt the same tuples and
settles the same acks, with less work:

1. **One ``Tuple`` per batch, renewed when kept.** The loop fills the same object with each
   row (values, root, number; the source fields are the batch's) and, after the bolt returns,
   asks CPython how many references it has (``sys.getrefcount``). More than the loop's own:
   the bolt kept it (stored it, held it to ack later, put it in a list of anchors it kept, or
   its collector holds it), so the loop leaves it as it is, the row's tuple for good, and
   fills a new one from the next row. A bolt never sees a tuple change under it.
2. **Acks as runs.** Where the bolt acked the row's tuple exactly once and kept it nowhere
   else, the ack is taken back out of the list it went into (``RowAcks.acked``: the tuple is
   its last item and nothing else holds it) and the row joins a run; a run of rows each acked
   once, in order, is acked as one ``ColumnBatch`` (``RowAcks.ack_batch``), which the
   ledger settles in one step (``acker.DeliveryLedger.ack_run``) or a stateful bolt's
   collector holds until its checkpoint, as it holds a batch bolt's. Any other row (not
   acked, acked twice, acked and kept, failed) ends the run and keeps what the bolt did to it
   as it is: its acks stay in the list as tuples, which the ledger reckons one by one. So the
   XOR of every root is what the reference loop's acks give.
3. **A ``BasicBolt``'s acks are the loop's** (``feed_basic``): its executor acks each tuple
   it executed unless ``FailedException`` failed it, so the loop calls the bolt's own
   ``execute`` with its ``BasicOutputCollector`` (one Python frame less per tuple), acks
   every row it executed as runs, and hands a ``FailedException`` to the executor
   (``BasicRows.failed``: reported if it is a ``ReportedFailedException``, then the tuple
   failed), which ends the run there.

The stretch of rows that join a run, the common case, runs in C where it was built
(``_native/_rowloop.c``: the same steps, the Python loop's own bookkeeping per row was as long
as a counting bolt's ``execute``); the first row that does not join comes back to the Python
loop, and the rest of the batch goes on in C. Without the compiled module the Python loop runs
every row.

A transactional job's tuples (``feed_lead``) get step 1: one reused ``Tuple``, the batch's
attempt put back in front of each row's values, the lineage told; that protocol tracks no
tuple, so there is nothing to settle.

The reference loop stays: the runtime uses it where this one does not apply (a fault listener
counting tuples, an executor that offers neither ``row_acks`` nor ``basic_rows``), and
wherever a job's conf sets
``REFERENCE_KEY`` (the equivalence suite runs every topology both ways,
``tests/engine/test_fast_path_equivalence.py``). Reference counts are CPython's (up to 3.13,
with the GIL): elsewhere (``REUSABLE`` false) the reference loop runs every per-tuple bolt.

Which tuple raised is found as ``_task._feed`` finds it: the loop's handler looks at the
traceback; ``t`` is the row's tuple, left as the bolt last saw it.

No pyspark here: this module runs inside Spark's Python workers but is plain Python.
"""

from __future__ import annotations

import sys
import sysconfig
from array import array
from collections.abc import Callable, Mapping, Sequence
from types import CodeType
from typing import Any, Protocol

from statefulbolts.components import BasicRows
from statefulbolts.errors import FailedException
from statefulbolts.tuples import ColumnBatch, Fields, Tuple

try:
    from statefulbolts.runtime._native import _rowloop
except ImportError:  # not compiled at install (no C compiler), or imported from a zip
    _rowloop = None  # type: ignore[assignment]
else:
    _rowloop.bind(Tuple)

__all__ = [
    "REFERENCE_KEY",
    "REUSABLE",
    "LineageSink",
    "RowAcks",
    "fast",
    "feed_basic",
    "feed_lead",
    "feed_rows",
]

# A job conf key (not a ``topology.*`` key, so never validated or warned about): true runs
# every per-tuple bolt through the reference loop. For the equivalence suite, and to rule
# this loop out when chasing a bug.
REFERENCE_KEY = "statefulbolts.internal.reference.tuples"

# Whether a ``Tuple``'s reference count tells that nothing but the loop holds it; where it
# does not, the runtime feeds every per-tuple bolt through the reference loop. CPython with the
# GIL, up to 3.13: 3.14 may pass a local to a call without counting the reference (borrowed
# stack references), and whether it does may differ between two places of the loop.
REUSABLE = (
    sys.implementation.name == "cpython"
    and sys.version_info < (3, 14)
    and not sysconfig.get_config_var("Py_GIL_DISABLED")
)

# Rows per chunk: the young-garbage check runs between chunks, as in ``_task._feed``.
CHUNK = 1 << 15

# Fields, component, task id and stream of every tuple of a batch (``_task._feed``'s source).
Source = tuple[Fields, str, int, str]


# Whether ``feed_rows`` runs the rows that join a run in C (``_native/_rowloop.c``). Tests turn
# it off to keep the Python loop, which does the same, covered.
COMPILED = _rowloop is not None


def _compiled(values: Sequence[Any], roots: Sequence[int], acked: Any = None) -> Any:
    """``_rowloop.stretch`` (``stretch_basic`` without ``acked``) if it may run this batch.

    It reads the columns as lists (the roots also as the ``array('q')`` a batch ships them in),
    and a bolt's acks from a list; ``None``: the Python loop runs the batch.
    """
    if not COMPILED or type(values) is not list:
        return None
    if not (type(roots) is list or (type(roots) is array and roots.typecode == "q")):
        return None
    if acked is None:
        return _rowloop.stretch_basic
    return _rowloop.stretch if type(acked) is list else None


def fast(conf: Mapping[str, Any]) -> bool:
    """Whether a job with ``conf`` feeds per-tuple bolts through this module's loops."""
    return REUSABLE and not conf.get(REFERENCE_KEY)


class RowAcks(Protocol):
    """Where a bolt's acks of its data tuples go, and how a run of them is acked at once.

    An ack of the tuple ``t`` appends ``t`` to ``acked`` (the task's ledger, or a stateful
    bolt's collector holding acks until the checkpoint); ``ack_batch(batch)`` does what an
    ack of each tuple of ``batch`` does, in one step.
    """

    @property
    def acked(self) -> list[Any]:
        """The list an ack appends its tuple to."""

    def ack_batch(self, batch: ColumnBatch) -> None:
        """Ack every tuple of ``batch``."""


def _blank(source: Source) -> Tuple:
    """A tuple of the batch's source, to be filled with each row."""
    t = object.__new__(Tuple)
    t.fields, t.source_component, t.source_task, t.source_stream_id = source
    t._more = None
    return t


def _run(
    ack_batch: Callable[[ColumnBatch], None],
    values: Sequence[Any],
    roots: Sequence[int],
    start: int,
    stop: int,
    first: int,
    single: bool,
    source: Source,
) -> None:
    """Ack the tuples numbered ``start`` to ``stop`` (exclusive) as one run, if any."""
    if start < stop:
        f, cid, tid, sid = source
        a, b = start - first, stop - first
        ack_batch(
            ColumnBatch(values[a:b], f, cid, tid, sid, single=single, roots=roots[a:b], first=start)
        )


def feed_rows(
    execute: Callable[[Tuple], None],
    acks: RowAcks,
    values: Sequence[Any],
    roots: Sequence[int],
    first: int,
    single: bool,
    source: Source,
    chunked: Callable[[], None],
    failing: list[Tuple],
) -> None:
    """One batch of single-tree tuples into ``execute``, its acks settled as runs (steps 1-2).

    ``first`` is the ledger's number of the first tuple; ``single``: a one-field stream,
    whose rows are bare values; ``chunked`` runs before each chunk.
    """
    acked, ack_batch, refs = acks.acked, acks.ack_batch, sys.getrefcount
    t = _blank(source)
    alone = refs(t)  # the loop's own references
    held = alone + 1  # and the ack list's
    n = len(values)
    run = number = first  # the number of the first tuple of the current run; of this one
    stretch = _compiled(values, roots, acked)
    try:
        for start in range(0, n, CHUNK):
            chunked()  # may settle (empty) the ack list
            stop = min(start + CHUNK, n)
            at = start
            while stretch is not None and at < stop:
                # The rows that join the run, in C; ``i``: the first that did not, or ``stop``.
                i, error = stretch(execute, acked, values, roots, t, at, stop, first, single)
                number = first + i
                if error is not None:
                    raise error  # from here, so its traceback reads as the loop below's
                if i == stop:
                    at = stop
                    break
                at = i + 1
                _run(ack_batch, values, roots, run, number, first, single, source)
                run = number + 1
                if refs(t) != alone:
                    t = _blank(source)  # the bolt kept this one
            # The ack list's length once the row's tuple is acked: a row acked once and kept
            # nowhere leaves the list as it found it, so this holds until another row does not.
            grown = len(acked) + 1
            for vals, root, number in zip(
                values[at:stop], roots[at:stop], range(first + at, first + stop),
                strict=True,
            ):  # fmt: skip
                t.values = [vals] if single else vals
                t._root = root
                t._edge = number
                execute(t)
                if refs(t) == held and len(acked) == grown and acked[-1] is t:
                    del acked[-1]  # acked once, kept nowhere: the row joins the run
                    continue
                _run(ack_batch, values, roots, run, number, first, single, source)
                run = number + 1
                grown = len(acked) + 1
                if refs(t) != alone:
                    t = _blank(source)  # the bolt kept this one
            _run(ack_batch, values, roots, run, first + stop, first, single, source)
            run = first + stop
    except Exception as exc:
        # The rows before the one that raised keep their acks, as the reference loop's would.
        _run(ack_batch, values, roots, run, number, first, single, source)
        if _raised_executing(exc, chunked.__code__):
            failing.append(t)
        raise


def feed_basic(
    rows: BasicRows,
    values: Sequence[Any],
    roots: Sequence[int],
    first: int,
    single: bool,
    source: Source,
    chunked: Callable[[], None],
    failing: list[Tuple],
) -> None:
    """One batch of single-tree tuples into a ``BasicBolt``, acked as runs (steps 1 and 3)."""
    execute, basic, failed, ack_batch = rows
    refs = sys.getrefcount
    t = _blank(source)
    basic._input = t  # as ``BasicBoltExecutor.execute`` sets it; here once per object
    alone = refs(t)
    n = len(values)
    run = number = first
    stretch = _compiled(values, roots)
    try:
        for start in range(0, n, CHUNK):
            chunked()
            stop = min(start + CHUNK, n)
            at = start
            while stretch is not None and at < stop:
                # The rows that run normally, in C; ``i``: the first that raised or was kept.
                i, error = stretch(execute, basic, values, roots, t, at, stop, first, single)
                number = first + i
                if i == stop:
                    at = stop
                    break
                at = i + 1
                if isinstance(error, FailedException):
                    _run(ack_batch, values, roots, run, number, first, single, source)
                    run = number + 1
                    failed(t, error)
                elif error is not None:
                    raise error  # from here, so its traceback reads as the loop below's
                error = None  # its traceback holds the bolt's frame, and so ``t``
                if refs(t) != alone:
                    t = _blank(source)  # the bolt kept this one
                    basic._input = t
            for vals, root, number in zip(
                values[at:stop], roots[at:stop], range(first + at, first + stop),
                strict=True,
            ):  # fmt: skip
                t.values = [vals] if single else vals
                t._root = root
                t._edge = number
                try:
                    execute(t, basic)
                except FailedException as exc:
                    _run(ack_batch, values, roots, run, number, first, single, source)
                    run = number + 1
                    failed(t, exc)
                if refs(t) != alone:
                    t = _blank(source)  # the bolt kept this one
                    basic._input = t
            _run(ack_batch, values, roots, run, first + stop, first, single, source)
            run = first + stop
    except Exception as exc:
        _run(ack_batch, values, roots, run, number, first, single, source)
        if _raised_executing(exc, chunked.__code__):
            failing.append(t)
        raise


class LineageSink(Protocol):
    """What a transactional batch bolt's collector is to the loop: told each tuple's root."""

    lineage: int


def feed_lead(
    execute: Callable[[Tuple], None],
    head: Any,
    sink: LineageSink,
    values: Sequence[Any],
    roots: Sequence[int],
    first: int,
    single: bool,
    source: Source,
    chunked: Callable[[], None],
    failing: list[Tuple],
) -> None:
    """One batch of a job whose tuples lead with a shared value (step 1 only).

    A transactional job's tuples all start with the batch's attempt (``head``: the runtime
    does not ship it, and puts it back in front here as the reference loop does), and ``sink``
    (a batch bolt's collector, or a stand-in) is told each tuple's root before the bolt
    executes it: what the bolt emits then carries it as its lineage. The protocol tracks no
    tuple (a batch is done when its tasks end), so there are no runs: whatever a bolt does
    with an ack keeps the tuple, and the loop takes a new one.
    """
    refs = sys.getrefcount
    t = _blank(source)
    alone = refs(t)
    n = len(values)
    try:
        for start in range(0, n, CHUNK):
            chunked()
            stop = min(start + CHUNK, n)
            for vals, root, number in zip(
                values[start:stop], roots[start:stop], range(first + start, first + stop),
                strict=True,
            ):  # fmt: skip
                t.values = [head, vals] if single else [head, *vals]
                t._root = root
                t._edge = number
                sink.lineage = root
                execute(t)
                if refs(t) != alone:
                    t = _blank(source)  # the bolt kept this one
    except Exception as exc:
        if _raised_executing(exc, chunked.__code__):
            failing.append(t)
        raise


_RUNTIME = (_run.__code__, _blank.__code__)


def _raised_executing(exc: BaseException, chunked: CodeType) -> bool:
    """Whether ``exc``, caught by a loop here, came out of the bolt (not out of the loop).

    The traceback's first entry is the loop's own frame; the next is the function it called.
    No next entry: the loop itself raised. ``chunked``, ``_run`` and ``_blank`` are the
    runtime's, not the bolt's (``_task._raised_executing``, with this module's calls).
    """
    here = exc.__traceback__
    called = here.tb_next if here is not None else None
    if called is None:
        return False
    code = called.tb_frame.f_code
    return code is not chunked and code not in _RUNTIME
