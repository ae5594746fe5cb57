"""Which state keys a stateful task is about to read: the values its input is grouped on.

A keyed aggregation takes its input by a fields grouping on the key and keys its state by it (a
word count groups on ``word`` and counts under the word), so before a task runs its tuples, the
distinct values of that one field are the keys its ``get`` calls will ask for. The task hands
them to ``KeyValueState.prefetch``, which may read them all in one round trip instead of one per
key. A guess only: a bolt whose keys are something else gets nothing from it and loses nothing
but the read ahead, since every ``get`` still answers from the state as before.

Only an input taken by a fields grouping on exactly one field gives keys: a grouping on several
fields names a tuple of values, which is rarely how a bolt keys its state.

Example:
    >>> from types import SimpleNamespace as Record
    >>> by_word = Record(dest=1, kind=GroupingKind.FIELDS, positions=(0,))
    >>> plan = Record(routes={(0, 0): (by_word,)}, widths=[[2]])  # 0 emits (word, n) to 1
    >>> batch = Record(dest=1, src=0, stream=0, values=[["a", 1], ["b", 2], ["a", 3]])
    >>> sorted(grouped_keys(plan, [batch]))
    ['a', 'b']
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, Protocol

from statefulbolts.streams import GroupingKind

__all__ = ["BatchLike", "PlanLike", "RouteLike", "grouped_keys"]


class RouteLike(Protocol):
    """One consumer of one stream (the runtime's ``Route``)."""

    @property
    def dest(self) -> int:
        """The consuming component's index."""

    @property
    def kind(self) -> GroupingKind:
        """How the stream is grouped into the consumer."""

    @property
    def positions(self) -> tuple[int, ...]:
        """The grouping fields' positions in a tuple's shipped values."""


class PlanLike(Protocol):
    """What the runtime's ``ExecutionPlan`` tells about streams."""

    @property
    def routes(self) -> Mapping[tuple[int, int], Sequence[RouteLike]]:
        """``(source component, stream)``: the stream's consumers."""

    @property
    def widths(self) -> Sequence[Sequence[int]]:
        """Per source component and stream: how many values a tuple ships."""


class BatchLike(Protocol):
    """Tuples of one stream into one task (the runtime's ``TupleBatch``)."""

    @property
    def dest(self) -> int:
        """The receiving component's index."""

    @property
    def src(self) -> int:
        """The sending component's index."""

    @property
    def stream(self) -> int:
        """The stream's index in the sending component."""

    @property
    def values(self) -> Sequence[Any]:
        """Each tuple's values: the value itself when the stream has one field, else a list."""


def grouped_keys(plan: PlanLike, batches: Iterable[BatchLike]) -> Iterator[Any]:
    """The distinct values of the grouping field of every batch taken by a one-field grouping.

    Lazy: nothing is read until the first key is asked for, so a state that ignores the hint
    costs nothing. In no particular order (a set: the task's half a million words cost about
    half of what an ordered dict of them did); an unhashable value is left out.
    """
    found: set[Any] = set()
    for batch in batches:
        position = _grouping_position(plan, batch)
        if position is None:
            continue
        values = batch.values
        if plan.widths[batch.src][batch.stream] != 1:
            values = [vals[position] for vals in values]
        _add_distinct(found, values)
    yield from found


def _grouping_position(plan: PlanLike, batch: BatchLike) -> int | None:
    """Where the key is in the batch's values: its input's one grouping field, if it has one."""
    routes = [r for r in plan.routes.get((batch.src, batch.stream), ()) if r.dest == batch.dest]
    if len(routes) != 1:
        return None
    (route,) = routes
    if route.kind is not GroupingKind.FIELDS or len(route.positions) != 1:
        return None
    return route.positions[0]


def _add_distinct(found: set[Any], values: Sequence[Any]) -> None:
    """Add each value of ``values`` to ``found``; an unhashable value is skipped."""
    try:
        found.update(values)  # the common case, in C
    except TypeError:
        for value in values:
            try:
                found.add(value)
            except TypeError:
                continue  # left out: the hint may miss keys, a get reads them singly
