"""How a topology is laid out on Spark: levels of bolts, task slots, and routes.

Bolts are grouped into levels: a bolt's level is one more than the highest level among its
sources (spouts are level -1, so bolts fed only by spouts are level 0). One Spark stage runs one
level; its partitions ("slots") are the tasks of every bolt on that level. Between two levels, a
``partitionBy`` on the slot index moves each emitted tuple to its destination task. Tuples bound
for a later level, and the side records every task produces (XOR acks, metrics, state changes),
ride along ("carry") through the levels in between, so one transaction is one linear chain of
stages and one Spark job.

Everything here is plain Python and is pickled to the tasks.
"""

from __future__ import annotations

import zlib
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from statefulbolts.topology import (
    CHECKPOINT_STREAM_ID,
    ExecutorKind,
    GlobalStreamId,
    GroupingKind,
    StormTopology,
)
from statefulbolts.tuples import Fields

# Record kinds. Tuples travel in batches, one per (source task, stream, destination task):
#   (TUPLE, dest_comp, dest_task, src_comp, src_task, stream, values, roots, more)
# in emit order, with component and stream indices from the plan. Columns, not rows, because
# pickling a few long lists costs a fraction of pickling many small tuples: ``values`` holds each
# tuple's values (the bare value when the stream has one field), ``roots`` its first root id (0
# when untracked; a list, or an ``id_column`` array), ``more`` maps a position to the further
# roots of a tuple anchored to several trees (or is None). A tuple's own acking id is made by the
# task it is delivered to (``statefulbolts.acker``). Side records are
#   (ACKS, {root: xor}), (FAILS, [root, ...]), (METRICS, comp, task, {...}),
#   (STATE, namespace, changes), (ERROR, comp, task, text), (HOOKS, comp, task, [...]).
TUPLE, ACKS, FAILS, METRICS, STATE, ERROR = range(6)


def id_column(ids: list[int]) -> array[int]:
    """A batch's root ids as a signed 64-bit array: it pickles as one block of bytes.

    Root ids are the driver's count from 1; they fit.
    """
    return array("q", ids)


def stable_hash(values: Sequence[Any]) -> int:
    """A hash of grouping values that is the same in every process.

    Python's own ``hash`` of ``str`` is salted per process, and tasks run in many processes.
    """
    if len(values) == 1:
        v = values[0]
        if isinstance(v, str):
            return zlib.crc32(v.encode("utf-8", "surrogatepass"))
        if isinstance(v, bool):
            return int(v)
        if isinstance(v, int):
            return v & 0x7FFFFFFFFFFFFFFF
        if isinstance(v, bytes):
            return zlib.crc32(v)
    try:
        blob = msgpack.packb(list(values), use_bin_type=True)
    except (TypeError, ValueError):
        blob = repr(list(values)).encode("utf-8", "surrogatepass")
    return zlib.crc32(blob)


@dataclass(frozen=True)
class Route:
    """One consumer of one stream."""

    dest: int  # component index
    kind: GroupingKind
    positions: tuple[int, ...]  # field positions, for fields grouping
    n_tasks: int


@dataclass(frozen=True)
class Level:
    """One stage: the slots (component index, task index) it runs."""

    index: int
    slots: tuple[tuple[int, int], ...]

    def slot_of(self, comp: int, task: int) -> int:
        """The slot running task ``task`` of component ``comp`` on this level."""
        return self.slots.index((comp, task))


class ExecutionPlan:
    """Indices, levels and routes for one topology."""

    def __init__(self, topology: StormTopology) -> None:
        self.component_ids: list[str] = sorted(topology.components)
        self.index = {cid: i for i, cid in enumerate(self.component_ids)}
        specs = [topology.component(cid) for cid in self.component_ids]
        self.parallelism = [s.parallelism for s in specs]
        self.is_spout = [s.is_spout for s in specs]
        self.executor = [s.executor for s in specs]
        self.task_ids = [topology.task_ids(cid) for cid in self.component_ids]
        self.streams: list[list[str]] = [sorted(s.outputs) for s in specs]
        self.stream_index: list[dict[str, int]] = [
            {name: i for i, name in enumerate(names)} for names in self.streams
        ]
        self.fields: list[list[Fields]] = [
            [s.outputs[name] for name in self.streams[i]] for i, s in enumerate(specs)
        ]
        self.widths: list[list[int]] = [[len(f) for f in per] for per in self.fields]
        self.checkpoint_stream: list[int | None] = [
            self.stream_index[i].get(CHECKPOINT_STREAM_ID) for i in range(len(specs))
        ]

        self.level_of: list[int] = [-1] * len(specs)
        for cid in topology.topological_bolts():
            sources = [i.source.component_id for i in topology.inputs(cid)]
            self.level_of[self.index[cid]] = 1 + max(
                (self.level_of[self.index[s]] for s in sources), default=-1
            )
        depth = 1 + max(self.level_of, default=-1)
        self.levels: list[Level] = []
        for lv in range(depth):
            slots = tuple(
                (c, t)
                for c in range(len(specs))
                if self.level_of[c] == lv
                for t in range(self.parallelism[c])
            )
            self.levels.append(Level(lv, slots))
        self._slot_of = [{pair: s for s, pair in enumerate(level.slots)} for level in self.levels]

        self.routes: dict[tuple[int, int], tuple[Route, ...]] = {}
        for c, spec in enumerate(specs):
            for name in spec.outputs:
                consumers = []
                for dest_id, grouping in topology.consumers(GlobalStreamId(spec.id, name)):
                    d = self.index[dest_id]
                    fields = spec.outputs[name]
                    positions = tuple(fields.index(f) for f in grouping.fields)
                    consumers.append(Route(d, grouping.kind, positions, self.parallelism[d]))
                consumers.sort(key=lambda r: r.dest)
                self.routes[(c, self.stream_index[c][name])] = tuple(consumers)

    @property
    def depth(self) -> int:
        """Number of bolt levels (stages per transaction, before the acker)."""
        return len(self.levels)

    def key_for(self, from_level: int, dest: int, task: int) -> int:
        """Partition key at level ``from_level + 1`` for a tuple bound to ``(dest, task)``."""
        nxt = from_level + 1
        if self.level_of[dest] == nxt:
            return self._slot_of[nxt][(dest, task)]
        return (dest * 7919 + task) % len(self.levels[nxt].slots)

    def stateful_tasks(self) -> list[tuple[int, int]]:
        """(component index, task index) of every stateful bolt task."""
        return [
            (c, t)
            for c in range(len(self.component_ids))
            if self.executor[c] is ExecutorKind.STATEFUL
            for t in range(self.parallelism[c])
        ]


# Grouping codes for the hot path (enum comparisons cost an attribute lookup per emit).
_SHUFFLE, _FIELDS, _ALL, _GLOBAL = range(4)
_CODE = {
    GroupingKind.SHUFFLE: _SHUFFLE,
    GroupingKind.NONE: _SHUFFLE,
    GroupingKind.LOCAL_OR_SHUFFLE: _SHUFFLE,
    GroupingKind.FIELDS: _FIELDS,
    GroupingKind.ALL: _ALL,
    GroupingKind.GLOBAL: _GLOBAL,
}


class Router:
    """Chooses destination tasks for one emitting task, as its groupings say.

    Shuffle-like groupings go round-robin, starting at the emitting task's index so that tasks
    spread differently; fields grouping hashes the selected values with ``stable_hash``.
    """

    __slots__ = ("_table", "_rr")

    def __init__(self, plan: ExecutionPlan, comp: int, task: int) -> None:
        self._table: dict[int, list[list[Any]]] = {}
        for (c, stream), routes in plan.routes.items():
            if c == comp:
                # [code, dest, n_tasks, positions, round-robin counter]
                self._table[stream] = [
                    [_CODE[r.kind], r.dest, r.n_tasks, r.positions, task] for r in routes
                ]
        self._rr = task

    def targets(self, comp: int, stream: int, values: Sequence[Any]) -> list[tuple[int, int]]:
        """(dest component, dest task) pairs for one emit of this task on ``stream``."""
        out: list[tuple[int, int]] = []
        for route in self._table.get(stream, ()):
            code, dest, n = route[0], route[1], route[2]
            if code == _FIELDS:
                positions = route[3]
                if len(positions) == 1:
                    out.append((dest, stable_hash((values[positions[0]],)) % n))
                else:
                    out.append((dest, stable_hash([values[p] for p in positions]) % n))
            elif code == _SHUFFLE:
                i = route[4]
                route[4] = i + 1
                out.append((dest, i % n))
            elif code == _ALL:
                out.extend((dest, t) for t in range(n))
            else:
                out.append((dest, 0))
        return out

    def single_shuffle_routes(self) -> dict[int, list[Any]]:
        """Per stream with one consumer, by shuffle: its live route ``[code, dest, n_tasks, _, i]``.

        The route is shared, not copied, so a caller that round-robins through it directly keeps
        the same counter as ``targets``.
        """
        return {
            stream: routes[0]
            for stream, routes in self._table.items()
            if len(routes) == 1 and routes[0][0] == _SHUFFLE
        }

    def single_field_route(self, stream: int) -> tuple[int, int, int] | None:
        """``(dest, position, n_tasks)`` when ``stream`` has one consumer, by one field."""
        routes = self._table.get(stream, ())
        if len(routes) == 1 and routes[0][0] == _FIELDS and len(routes[0][3]) == 1:
            return routes[0][1], routes[0][3][0], routes[0][2]
        return None
