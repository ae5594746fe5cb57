"""How a topology is laid out on Spark: component indices, routes, and each job's stages.

``ExecutionPlan`` numbers components and streams and resolves every grouping into a ``Route``;
``Router`` picks destination tasks for one emitting task. A job runs a set of component tasks
(``JobLayout``): every bolt for a checkpoint transaction, the stateful bolts alone for a
data-free checkpoint step, one phase of a transaction of the transactional protocol. Inside a
job, components are grouped into stages: a component's stage is one more than the highest stage
among its sources in the job (a component fed only from outside the job is in stage 0). One
Spark stage runs one job stage; its partitions ("slots") are the tasks of its components.
Between two stages, a ``partitionBy`` on the slot index moves each emitted tuple to its
destination task, unless the boundary is *narrow* (``JobLayout.narrow``): a component fed only
by the component of the stage before, with as many tasks, through groupings that keep a tuple
on its task index (``Route.local``). Then task i's output is task i's input, Spark pipelines
both in one task (no shuffle, no serialization), and Storm's "none grouping runs in the thread
of its source" comes true. Tuples bound for a later stage or for a component outside the job,
and the side records every task produces, ride along ("carry") through the stages in between, so one
job is one linear chain of stages; what is bound outside the job comes back with its result.

Everything here is plain Python and is pickled to the tasks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from statefulbolts.errors import TopologyError
from statefulbolts.keygroups import DEFAULT_KEY_GROUPS, KeyGroups, stable_hash
from statefulbolts.streams import GlobalStreamId, GroupingKind
from statefulbolts.topology import CHECKPOINT_STREAM_ID, ExecutorKind, StormTopology
from statefulbolts.tuples import Fields


@dataclass(frozen=True)
class Route:
    """One consumer of one stream."""

    dest: int  # component index
    kind: GroupingKind
    positions: tuple[int, ...]  # field positions, for fields grouping
    n_tasks: int
    # A none or local-or-shuffle grouping between components of equal parallelism: task i
    # sends every tuple to task i (Storm lets a none grouping run in its source's thread; a
    # task's own index is the most local task there is), which lets a job chain the two.
    local: bool = False
    # Fields grouping: the owning task of each key group (``KeyGroups.owners``); a tuple goes
    # to ``owners[stable_hash(values) % len(owners)]``.
    owners: tuple[int, ...] = ()


class ExecutionPlan:
    """Indices, fields and routes for one topology; the layouts of its jobs.

    ``lead`` is how many leading values every tuple of a job shares (the transactional
    protocol's attempt: 1; else 0). They are not shipped: a task emits the rest, routes by it
    (``widths`` and ``Route.positions`` count without them), and the receiving task puts the
    job's leading values back in front (``fields`` stay the declared ones).
    """

    def __init__(
        self,
        topology: StormTopology,
        lead: int = 0,
        key_groups: Mapping[str, int] | None = None,
    ) -> None:
        self.lead = lead
        # Key groups per fields-grouped consumer (``component_key_groups``); the default for
        # any component not named.
        groups = dict(key_groups or {})
        self.component_ids: list[str] = sorted(topology.components)
        self.index = {cid: i for i, cid in enumerate(self.component_ids)}
        specs = [topology.component(cid) for cid in self.component_ids]
        self.parallelism = [s.parallelism for s in specs]
        self.is_spout = [s.is_spout for s in specs]
        self.executor = [s.executor for s in specs]
        # ``module.qualname`` of each component's class: errors raised outside a task name it.
        self.user_classes = [s.user_class for s in specs]
        self.task_ids = [topology.task_ids(cid) for cid in self.component_ids]
        self.streams: list[list[str]] = [sorted(s.outputs) for s in specs]
        self.stream_index: list[dict[str, int]] = [
            {name: i for i, name in enumerate(names)} for names in self.streams
        ]
        self.fields: list[list[Fields]] = [
            [s.outputs[name] for name in self.streams[i]] for i, s in enumerate(specs)
        ]
        self.widths: list[list[int]] = [[len(f) - lead for f in per] for per in self.fields]
        self.checkpoint_stream: list[int | None] = [
            self.stream_index[i].get(CHECKPOINT_STREAM_ID) for i in range(len(specs))
        ]

        self.sources: list[frozenset[int]] = [
            frozenset(self.index[i.source.component_id] for i in s.inputs) for s in specs
        ]
        # Bolts by index, each after all of its sources: the order stages are built in.
        self.topological = [self.index[cid] for cid in topology.topological_bolts()]

        self.routes: dict[tuple[int, int], tuple[Route, ...]] = {}
        for c, spec in enumerate(specs):
            for name in spec.outputs:
                consumers = []
                for dest_id, grouping in topology.consumers(GlobalStreamId(spec.id, name)):
                    d = self.index[dest_id]
                    fields = spec.outputs[name]
                    positions = tuple(fields.index(f) - lead for f in grouping.fields)
                    if any(p < 0 for p in positions):
                        msg = (
                            f"bolt {dest_id!r}: fields grouping on {list(grouping.fields)} of "
                            f"{spec.id!r} includes a field every tuple of a batch shares (the "
                            "attempt): group by another field"
                        )
                        raise TopologyError(msg)
                    local = grouping.chains(self.parallelism[c], self.parallelism[d])
                    n = self.parallelism[d]
                    owners: tuple[int, ...] = ()
                    if grouping.kind is GroupingKind.FIELDS:
                        count = groups.get(dest_id, max(DEFAULT_KEY_GROUPS, n))
                        owners = tuple(KeyGroups(count).owners(n))
                    consumers.append(Route(d, grouping.kind, positions, n, local, owners))
                consumers.sort(key=lambda r: r.dest)
                self.routes[(c, self.stream_index[c][name])] = tuple(consumers)

    def task_id(self, component: str, index: int) -> int:
        """Storm's global task id of task ``index`` of ``component`` (messages show the index)."""
        return self.task_ids[self.index[component]][index]

    def sending_tasks(self, src: int, stream: int, dest: int, task: int) -> Sequence[int]:
        """The tasks of ``src`` whose tuples on ``stream`` can reach task ``task`` of ``dest``."""
        if any(r.local for r in self.routes[(src, stream)] if r.dest == dest):
            return (task,)
        return range(self.parallelism[src])

    def bolts(self) -> list[int]:
        """Every bolt's index, each after all of its sources."""
        return list(self.topological)

    def tasks(self, comp: int) -> list[tuple[int, int]]:
        """``(comp, task)`` for every task of a component."""
        return [(comp, t) for t in range(self.parallelism[comp])]

    def layout(self, components: Iterable[int], chain: bool = False) -> JobLayout:
        """A job over every task of ``components``, staged by their sources within the job.

        With ``chain``, a boundary between two stages is narrow where it can be (see the module
        docstring): only for protocols where a task that fails its batch on purpose need not
        stop every task of the next stage (the job's outcome is a failure all the same).
        """
        members = set(components)
        stage: dict[int, int] = {}
        for c in [c for c in sorted(members) if self.is_spout[c]] + self.topological:
            if c in members and c not in stage:
                inside = [stage[s] for s in self.sources[c] if s in members and s in stage]
                stage[c] = 1 + max(inside, default=-1)
        depth = 1 + max(stage.values(), default=-1)
        stages = [
            [pair for c in sorted(stage) if stage[c] == k for pair in self.tasks(c)]
            for k in range(depth)
        ]
        narrow = [chain and self._chains(stages[k], stages[k + 1]) for k in range(depth - 1)]
        return JobLayout(len(self.component_ids), stages, narrow)

    def _chains(self, before: Sequence[tuple[int, int]], after: Sequence[tuple[int, int]]) -> bool:
        """Whether task i of one stage can feed task i of the next without a shuffle."""
        comps = {c for c, _ in before}
        nexts = {c for c, _ in after}
        if len(comps) != 1 or len(nexts) != 1:
            return False
        (a,), (c,) = comps, nexts
        if self.sources[c] != {a} or self.parallelism[a] != self.parallelism[c]:
            return False
        routes = [r for s in range(len(self.streams[a])) for r in self.routes[(a, s)]]
        return all(r.local for r in routes if r.dest == c)

    def flat_layout(self, tasks: Sequence[tuple[int, int]]) -> JobLayout:
        """A job of one stage over exactly ``tasks``, whatever their sources."""
        return JobLayout(len(self.component_ids), [list(tasks)])

    def stateful_tasks(self) -> list[tuple[int, int]]:
        """(component index, task index) of every stateful bolt task."""
        return [
            (c, t)
            for c in range(len(self.component_ids))
            if self.executor[c] is ExecutorKind.STATEFUL
            for t in range(self.parallelism[c])
        ]


# Grouping codes for the hot path (enum comparisons cost an attribute lookup per emit).
_SHUFFLE, _FIELDS, _ALL, _GLOBAL, _LOCAL = range(5)
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
    spread differently; fields grouping hashes the selected values with ``stable_hash`` into a
    key group and sends the tuple to the group's owner (``statefulbolts.keygroups``).
    """

    __slots__ = ("_table", "_rr")

    def __init__(self, plan: ExecutionPlan, comp: int, task: int) -> None:
        self._table: dict[int, list[list[Any]]] = {}
        for (c, stream), routes in plan.routes.items():
            if c == comp:
                # [code, dest, n_tasks, positions, round-robin counter (local: the task),
                #  key group owners (fields), key groups]
                self._table[stream] = [
                    [
                        _LOCAL if r.local else _CODE[r.kind],
                        r.dest,
                        r.n_tasks,
                        r.positions,
                        task,
                        r.owners,
                        len(r.owners),
                    ]
                    for r in routes
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
                    h = stable_hash((values[positions[0]],))
                else:
                    h = stable_hash([values[p] for p in positions])
                out.append((dest, route[5][h % route[6]]))
            elif code == _SHUFFLE:
                i = route[4]
                route[4] = i + 1
                out.append((dest, i % n))
            elif code == _LOCAL:
                out.append((dest, route[4]))
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

    def single_target(self, stream: int) -> tuple[int, int] | None:
        """``(dest, task)`` when every tuple of ``stream`` goes to that one task, whatever it is.

        One consumer, by a local route (the emitting task's own index), a global grouping, or
        any grouping but all into a one-task consumer.
        """
        routes = self._table.get(stream, ())
        if len(routes) != 1:
            return None
        code, dest, n = routes[0][0], routes[0][1], routes[0][2]
        if code == _LOCAL:
            return dest, routes[0][4]
        if code == _GLOBAL or n == 1:
            return dest, 0
        return None

    def single_field_route(self, stream: int) -> tuple[int, int, tuple[int, ...]] | None:
        """``(dest, position, key group owners)`` when ``stream`` has one consumer, by one field.

        The value at ``position`` goes to ``owners[stable_hash((value,)) % len(owners)]``.
        """
        routes = self._table.get(stream, ())
        if len(routes) == 1 and routes[0][0] == _FIELDS and len(routes[0][3]) == 1:
            return routes[0][1], routes[0][3][0], routes[0][5]
        return None


class JobLayout:
    """The stages of one job: which component tasks each runs, and where a tuple goes next.

    ``key_for(stage, dest, task)`` is the partition, in the stage after ``stage`` (-1: the
    first), of a record bound for task ``task`` of component ``dest``: that task's own slot
    when it runs in the next stage, otherwise a slot spread by destination, which carries the
    record on (to a later stage, or, for a component outside the job, to the job's result).
    ``narrow[k]`` says that stages k and k + 1 are chained: slot i's output stays in slot i, so
    a record bound for a stage reached through narrow boundaries only is keyed to its task's
    own slot there from the start.
    """

    def __init__(
        self,
        n_components: int,
        stages: Sequence[Sequence[tuple[int, int]]],
        narrow: Sequence[bool] = (),
    ) -> None:
        self.stages: tuple[tuple[tuple[int, int], ...], ...] = tuple(
            tuple(slots) for slots in stages
        )
        self.narrow: tuple[bool, ...] = tuple(narrow) or (False,) * max(len(self.stages) - 1, 0)
        if len(self.narrow) != max(len(self.stages) - 1, 0):
            msg = f"{len(self.narrow)} boundaries given for {len(self.stages)} stages"
            raise ValueError(msg)
        # The last stage reachable from stage k through narrow boundaries only.
        self._chained_to = list(range(len(self.stages)))
        for k in range(len(self.stages) - 2, -1, -1):
            if self.narrow[k]:
                self._chained_to[k] = self._chained_to[k + 1]
        self.stage_of: list[int | None] = [None] * n_components
        for k, slots in enumerate(self.stages):
            for comp, _ in slots:
                self.stage_of[comp] = k
        self._slot_of = [{pair: s for s, pair in enumerate(slots)} for slots in self.stages]

    @property
    def depth(self) -> int:
        """How many stages the job has."""
        return len(self.stages)

    def runs(self, comp: int) -> bool:
        """Whether the job runs tasks of component ``comp``."""
        return self.stage_of[comp] is not None

    def slot(self, stage: int, comp: int, task: int) -> int:
        """The slot of ``(comp, task)`` in ``stage``."""
        return self._slot_of[stage][(comp, task)]

    def pipelined(self, stage: int) -> frozenset[int]:
        """The components a record emitted in ``stage`` reaches through narrow boundaries only.

        Spark runs those stages in one Python task: what goes to them is never pickled.
        """
        last = self._chained_to[stage]
        return frozenset(
            comp for comp, at in enumerate(self.stage_of) if at is not None and stage < at <= last
        )

    def key_for(self, stage: int, dest: int, task: int) -> int:
        """The partition in stage ``stage + 1`` of a record bound for ``(dest, task)``."""
        nxt = stage + 1
        at = self.stage_of[dest]
        if at == nxt:
            return self._slot_of[nxt][(dest, task)]
        if at is not None and nxt < at <= self._chained_to[nxt]:
            return self._slot_of[at][(dest, task)]  # the same slot all along the chain
        return (dest * 7919 + task) % len(self.stages[nxt])
