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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from statefulbolts._topology import (
    CHECKPOINT_STREAM_ID,
    ExecutorKind,
    GlobalStreamId,
    GroupingKind,
    StormTopology,
)
from statefulbolts._tuple import Fields

# Record kinds. A tuple record is
#   (TUPLE, dest_comp, dest_task, src_comp, src_task, stream, seq, values, anchors)
# with component and stream indices from the plan; side records are
#   (ACKS, {root: xor}), (FAILS, [root, ...]), (METRICS, comp, task, {...}),
#   (STATE, namespace, changes), (ERROR, comp, task, text), (HOOKS, comp, task, [...]).
TUPLE, ACKS, FAILS, METRICS, STATE, ERROR = range(6)


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
        self._slot_of = [
            {pair: s for s, pair in enumerate(level.slots)} for level in self.levels
        ]

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


class Router:
    """Chooses destination tasks for an emitting task, as its groupings say."""

    __slots__ = ("_routes", "_rr", "_rr_start")

    def __init__(self, plan: ExecutionPlan, comp: int, task: int) -> None:
        self._routes = plan.routes
        # Round-robin counters start at the emitting task's index, so tasks spread differently.
        self._rr: dict[tuple[int, int], int] = {}
        self._rr_start = task

    def targets(self, comp: int, stream: int, values: Sequence[Any]) -> list[tuple[int, int]]:
        """(dest component, dest task) pairs for one emit."""
        out: list[tuple[int, int]] = []
        for route in self._routes.get((comp, stream), ()):
            kind, n = route.kind, route.n_tasks
            if kind is GroupingKind.FIELDS:
                key = [values[p] for p in route.positions]
                out.append((route.dest, stable_hash(key) % n))
            elif kind is GroupingKind.ALL:
                out.extend((route.dest, t) for t in range(n))
            elif kind is GroupingKind.GLOBAL:
                out.append((route.dest, 0))
            else:  # shuffle, none, local-or-shuffle
                rr_key = (stream, route.dest)
                i = self._rr.get(rr_key, self._rr_start)
                self._rr[rr_key] = i + 1
                out.append((route.dest, i % n))
        return out
