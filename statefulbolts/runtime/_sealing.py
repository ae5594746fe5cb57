"""Sealing: what a task emitted becomes the bytes that travel, once, where it was emitted.

Tuples travel between the tasks of a job as ``TupleBatch`` columns. The task that emitted a
batch pickles its values column itself (``seal_column``, with the cloudpickle Spark uses, so
whatever Spark would ship ships), and the batch travels *sealed*: its ``values`` are those
bytes. Spark then pickles a ``bytes`` (a copy), and the task the batch is for unpickles the
column (``TupleBatch.unsealed``), as Spark would have. Both engines run it, in the task code
(``run_task``): an inline job ships what a Spark job ships and fails where a Spark job fails.
The driver seals the spout tuples it ships into a job the same way (``seal_inputs``). A batch
for a stage Spark pipelines into the same Python task (``JobLayout.pipelined``) is never
pickled, by Spark or here: it goes on as objects (a count chained to its sink pickles nothing).

Why here and not in Spark: a value that cannot be pickled (a lock, a generator, a dict nested
a thousand deep) failed inside PySpark's serializer, after the task, naming no component and
no tuple. Sealed here, it is an error of the tuple whose processing emitted it, as if that
bolt's ``execute`` had raised it: an ``UnshippableValueError`` whose one-line message names the
component, task index, stream, field and the value's type (``unshippable``), which the
dead-letter policy takes like the user's own exception. The one value is found by pickling
the failed column value by value (``find_unshippable``); only a failure pays for that.

No pyspark here but its cloudpickle, imported on the first seal.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

from statefulbolts.errors import UnshippableValueError
from statefulbolts.runtime._plan import ExecutionPlan
from statefulbolts.runtime._records import TupleBatch
from statefulbolts.runtime._task_errors import (
    FailingTuple,
    encode_task_error,
    qualified_name,
    shown_values,
)

log = logging.getLogger(__name__)

__all__ = [
    "Unshippable",
    "emitted_facts",
    "find_unshippable",
    "seal_column",
    "seal_inputs",
    "unshippable",
    "unshippable_error",
]

_PROTOCOL = 5
# A pickling error's text in a message: its first line, at most this long.
_WHY_CAP = 200


def seal_column(values: list[Any]) -> bytes:
    """``values`` pickled as Spark pickles what it ships.

    With Spark's own cloudpickle: what it ships (lambdas, classes of ``__main__``) seals.

    Raises:
        Exception: whatever pickling a value raised (``PicklingError``, ``TypeError``, ...).
    """
    data: bytes = _cloudpickle().dumps(values, _PROTOCOL)
    return data


@functools.cache
def _cloudpickle() -> Any:
    from pyspark import cloudpickle

    return cloudpickle


class Unshippable(NamedTuple):
    """A value of a column that does not pickle.

    Its row, its field (``None``: a one-field stream), the value, what pickling it raised.
    """

    row: int
    field: int | None
    value: Any
    error: BaseException


def find_unshippable(values: Sequence[Any], width: int, start: int = 0) -> Unshippable | None:
    """The first value of ``values[start:]`` that does not pickle (``None``: all do).

    ``width`` is the stream's field count: a row of a wider stream is its values' list, whose
    fields are pickled one by one to name the field.
    """
    for row in range(start, len(values)):
        value = values[row]
        error = _pickling_error(value)
        if error is None:
            continue
        if width == 1:
            return Unshippable(row, None, value, error)
        for field, item in enumerate(value):
            item_error = _pickling_error(item)
            if item_error is not None:
                return Unshippable(row, field, item, item_error)
        return Unshippable(row, None, value, error)
    return None


def _pickling_error(value: Any) -> BaseException | None:
    try:
        seal_column([value])
    except Exception as exc:  # noqa: BLE001 - what a user's value raises is what we report
        return exc
    return None


def unshippable(
    kind: str, component: str, task_index: int, stream: str, field: str, found: Unshippable
) -> str:
    """The one line of an ``UnshippableValueError`` (``kind``: ``bolt`` or ``spout``).

    Example:
        >>> import threading
        >>> found = Unshippable(0, None, threading.Lock(), TypeError("cannot pickle 'lock'"))
        >>> print(unshippable("bolt", "split", 1, "default", "word", found))
        ... # doctest: +NORMALIZE_WHITESPACE
        bolt 'split' task index 1 emitted a value of type _thread.lock on stream 'default' field
        'word' that cannot be pickled to travel to the task it is for (TypeError: cannot pickle
        'lock'); emit values that pickle: no locks, sockets, open files or generators, no structure
        nested hundreds deep
    """
    error = found.error
    why = (str(error).strip().splitlines() or [""])[0][:_WHY_CAP]
    return (
        f"{kind} {component!r} task index {task_index} emitted a value of type "
        f"{qualified_name(type(found.value))} on stream {stream!r} field {field!r} that cannot "
        f"be pickled to travel to the task it is for ({type(error).__name__}: {why}); emit "
        "values that pickle: no locks, sockets, open files or generators, no structure nested "
        "hundreds deep"
    )


def _field_name(plan: ExecutionPlan, comp: int, stream: int, found: Unshippable) -> str:
    """The name of the field ``found`` is in (the stream's own fields, after the job's lead)."""
    names = plan.fields[comp][stream].to_list()[plan.lead :]
    position = 0 if found.field is None else found.field
    return names[position] if position < len(names) else str(position)


def emitted_facts(
    plan: ExecutionPlan, comp: int, task: int, stream: int, value: Any, root: int, trees: int
) -> FailingTuple:
    """The facts of a tuple a task emitted, as the tuple to blame (a spout's own tuple)."""
    values = [value] if plan.widths[comp][stream] == 1 else list(value)
    packed, text = shown_values(values)
    return FailingTuple(
        task,
        plan.component_ids[comp],
        plan.task_ids[comp][task],
        plan.streams[comp][stream],
        None if packed is None else values,
        text,
        root,
        trees if root else 0,
        task,
    )


def seal_inputs(plan: ExecutionPlan, txid: int, inputs: Sequence[Sequence[Any]]) -> list[list[Any]]:
    """The driver's records for a job's first stage, every tuple batch in them sealed.

    A batch sealed already (one a job sent back, fed into the next) goes as it is.

    Raises:
        TaskFailedError: a spout tuple does not pickle; as the error of that spout task,
            naming that tuple (``UnshippableValueError``).
    """
    return [[_sealed(plan, txid, r) for r in slot] for slot in inputs]


def _sealed(plan: ExecutionPlan, txid: int, record: Any) -> Any:
    if type(record) is not TupleBatch or isinstance(record.values, bytes):
        return record
    try:
        return record._replace(values=seal_column(record.values))
    except Exception as exc:
        error = _spout_tuple_error(plan, record)
        if error is None:
            raise
        facts = error.failing
        user_class = plan.user_classes[record.src]
        raise encode_task_error(
            error, facts.source_component, facts.task_index, txid, user_class, facts
        ) from exc


def _spout_tuple_error(plan: ExecutionPlan, batch: TupleBatch) -> UnshippableValueError | None:
    """The error of the spout tuple of ``batch`` that does not pickle (``None``: none alone)."""
    src, s = batch.src, batch.stream
    column = batch.column()
    found = find_unshippable(column, plan.widths[src][s])
    if found is None:
        return None
    root = int(batch.roots[found.row])
    more = (batch.more or {}).get(found.row, ())
    value = column[found.row]
    facts = emitted_facts(plan, src, batch.src_task, s, value, root, 1 + len(more))
    line = unshippable(
        "spout",
        plan.component_ids[src],
        batch.src_task,
        plan.streams[src][s],
        _field_name(plan, src, s, found),
        found,
    )
    return UnshippableValueError(line, facts)


# Executes again the ``i``-th tuple of an input batch whose first tuple was numbered ``first``.
Again = Callable[[TupleBatch, int, int], None]


def unshippable_error(
    plan: ExecutionPlan,
    comp: int,
    task: int,
    batches: dict[tuple[int, int, int], list[Any]],
    key: tuple[int, int, int],
    error: BaseException,
    inputs: Sequence[tuple[TupleBatch, int]],
    again: Again | None,
) -> UnshippableValueError:
    """The error a task raises when its batch ``key`` did not seal, naming the tuple to blame.

    ``batches`` are the task collector's (values, roots, more); ``inputs`` the task's data
    batches as delivered, each with the number of its first tuple. The tuple to blame:

    1. A spout's value (a partitioned spout's, an emitter's), or one emitted with no root: the
       emitted tuple itself, which is the spout tuple (or belongs to none).
    2. Else the input tuple whose processing emitted it: of the task's input tuples in the
       value's tree, the one there is, or, of several, the first that emits a value that does
       not pickle when executed again (``again``: the task fails anyway, and keeps nothing it
       did, as when a batch bolt's chunk is run again tuple by tuple). If none does (a bolt
       that emits it only once), the first.
    3. ``again`` ``None``: the tuples' processing is over (the protocol's ``finish`` emitted
       it, or a control tuple): no tuple, as for an exception raised there.
    """
    stream = key[2]
    width = plan.widths[comp][stream]
    values, roots, more = batches[key]
    kind = "spout" if plan.is_spout[comp] else "bolt"
    name, stream_name = plan.component_ids[comp], plan.streams[comp][stream]
    found = find_unshippable(values, width)
    if found is None:  # the column as a whole, not one value of it
        found = Unshippable(0, None, values, error)
    line = unshippable(kind, name, task, stream_name, _field_name(plan, comp, stream, found), found)
    root = int(roots[found.row]) if roots else 0
    extra = (more or {}).get(found.row, ())
    if plan.is_spout[comp] or not root:
        value = values[found.row] if values else None
        return UnshippableValueError(
            line, emitted_facts(plan, comp, task, stream, value, root, 1 + len(extra))
        )
    if again is None:
        return UnshippableValueError(line)
    candidates = [
        (b, first, i)
        for b, first in inputs
        for i, r in enumerate(b.roots)
        if r == root or (b.more is not None and root in b.more.get(i, ()))
    ]
    if not candidates:
        return UnshippableValueError(line)
    blamed = candidates[0]
    if len(candidates) > 1:
        blamed = _emitting(plan, comp, batches, candidates, again) or blamed
    b, _first, i = blamed
    return UnshippableValueError(line, _input_facts(plan, task, b, i))


def _emitting(
    plan: ExecutionPlan,
    comp: int,
    batches: dict[tuple[int, int, int], list[Any]],
    candidates: Sequence[tuple[TupleBatch, int, int]],
    again: Again,
) -> tuple[TupleBatch, int, int] | None:
    """The first of ``candidates`` that, executed again, emits a value that does not pickle."""
    widths = plan.widths[comp]
    for candidate in candidates:
        marks = {key: len(batch[0]) for key, batch in batches.items()}
        try:
            again(*candidate)
        except Exception as exc:  # noqa: BLE001 - not the failure being reported
            log.debug("executing a tuple again to find an unpicklable emit raised %r", exc)
            continue
        for key, batch in batches.items():
            if find_unshippable(batch[0], widths[key[2]], marks.get(key, 0)) is not None:
                return candidate
    return None


def _input_facts(plan: ExecutionPlan, task: int, batch: TupleBatch, i: int) -> FailingTuple:
    """The facts of the ``i``-th tuple of an (unsealed) input batch of task index ``task``."""
    src, s = batch.src, batch.stream
    value = batch.column()[i]
    values = [value] if plan.widths[src][s] == 1 else list(value)
    packed, text = shown_values(values)
    root = int(batch.roots[i])
    trees = 1 + len((batch.more or {}).get(i, ())) if root else 0
    return FailingTuple(
        task,
        plan.component_ids[src],
        plan.task_ids[src][batch.src_task],
        plan.streams[src][s],
        None if packed is None else values,
        text,
        root,
        trees,
        batch.src_task,
    )
