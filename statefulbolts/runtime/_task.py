"""What one Spark task runs: one task of one bolt for one transaction.

A task is, in Storm's words, a worker that (re)starts: it builds a fresh bolt from the shipped
topology, restores the last committed state, takes the transaction's tuples in a deterministic
order (per source task in emit order, sources sorted, checkpoint tuples last), and returns what it
emitted (keyed for the next stage) plus side records: XOR acks pre-combined per root, fails,
metrics, errors and, for driver-owned state, the changes its state made. Deterministic order and
ids mean a Spark retry of the task reproduces the same output.

No pyspark here: this module runs inside Spark's Python workers but is plain Python.
"""

from __future__ import annotations

import pickle
import time
import traceback
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from statefulbolts._collectors import Anchors, OutputCollector, anchor_list
from statefulbolts._context import TopologyContext
from statefulbolts._topology import ExecutorKind, StormTopology
from statefulbolts._tuple import DEFAULT_STREAM, Tuple
from statefulbolts.acker import id_base
from statefulbolts.errors import TaskFailedError, TopologyError
from statefulbolts.runtime._plan import (
    ACKS,
    ERROR,
    FAILS,
    METRICS,
    STATE,
    TUPLE,
    ExecutionPlan,
    Router,
)

TASK_ERROR_MARK = "[statefulbolts-task"


@dataclass
class TaskEnv:
    """Everything a task needs, shipped with the job's closure."""

    plan: ExecutionPlan
    topology_name: str
    conf: Mapping[str, Any]
    txid: int
    action: str | None
    ackers: int
    images: dict[str, bytes] = field(default_factory=dict)
    provider: str | None = None
    faults: Any = None


def _load_topology(blob: Any) -> StormTopology:
    data = blob.value if hasattr(blob, "value") else blob
    return pickle.loads(data)  # noqa: S301 - our own cloudpickled topology


class TaskCollector(OutputCollector):
    """The raw collector of a bolt task: routes emits and keeps the XOR ledger of this task."""

    def __init__(
        self, plan: ExecutionPlan, comp: int, task: int, level: int, txid: int, name: str
    ) -> None:
        self.comp, self.task, self._level = comp, task, level
        self._name = name
        self._streams = plan.stream_index[comp]
        self._fields = plan.fields[comp]
        self._router = Router(plan, comp, task)
        self._key_for = plan.key_for
        self._cp_stream = plan.checkpoint_stream[comp]
        self._base = id_base(txid, comp, task)
        self._n = 0
        self.seq = 0
        self.buckets: dict[int, list[Any]] = {}
        self.xor: dict[int, int] = {}
        self.fails: list[int] = []
        self.errors: list[str] = []
        self.emitted = 0
        self.acked = 0
        self.failed = 0

    def emit(
        self, values: Sequence[Any], anchors: Anchors = None, stream: str = DEFAULT_STREAM
    ) -> None:
        """Route one tuple to its destination tasks, with fresh edge ids per anchor."""
        s = self._streams.get(stream)
        if s is None:
            msg = (
                f"bolt {self._name!r} task {self.task} emitted on undeclared stream {stream!r}; "
                f"it declares {sorted(self._streams)}"
            )
            raise TopologyError(msg)
        if len(values) != len(self._fields[s]):
            msg = (
                f"bolt {self._name!r} emitted {len(values)} values on stream {stream!r}, which "
                f"declares {len(self._fields[s])} fields {self._fields[s].to_list()}"
            )
            raise TopologyError(msg)
        vals = list(values)
        parents = anchor_list(anchors)
        buckets = self.buckets
        for dest, dtask in self._router.targets(self.comp, s, vals):
            self.seq += 1
            anch: tuple[tuple[int, int], ...] = ()
            if parents:
                roots: dict[int, int] = {}
                for parent in parents:
                    if parent.anchors:
                        self._n += 1
                        edge = hash((self._base, self._n)) or 1
                        parent.ack_val ^= edge
                        for root, _ in parent.anchors:
                            roots[root] = roots.get(root, 0) ^ edge
                anch = tuple(roots.items())
            rec = (TUPLE, dest, dtask, self.comp, self.task, s, self.seq, vals, anch)
            key = self._key_for(self._level, dest, dtask)
            bucket = buckets.get(key)
            if bucket is None:
                buckets[key] = [rec]
            else:
                bucket.append(rec)
        if s != self._cp_stream:
            self.emitted += 1

    def ack(self, tuple_: Tuple) -> None:
        """XOR the tuple's id and the ids of its children into each of its roots."""
        xor = self.xor
        extra = tuple_.ack_val
        for root, edge in tuple_.anchors:
            xor[root] = xor.get(root, 0) ^ edge ^ extra
        if tuple_.source_stream_id != "$checkpoint":
            self.acked += 1

    def fail(self, tuple_: Tuple) -> None:
        """Fail every root of the tuple."""
        self.fails.extend(root for root, _ in tuple_.anchors)
        if tuple_.source_stream_id != "$checkpoint":
            self.failed += 1

    def report_error(self, error: BaseException) -> None:
        """Keep the error; it is logged by the driver and counted in metrics."""
        text = "".join(traceback.format_exception_only(type(error), error)).strip()
        self.errors.append(text)


def _ordered(groups: dict[tuple[int, int], list[Any]]) -> Iterator[Any]:
    for key in sorted(groups):
        recs = groups[key]
        if any(recs[i][6] > recs[i + 1][6] for i in range(len(recs) - 1)):
            recs.sort(key=lambda r: r[6])
        yield from recs


def _make_bolt(env: TaskEnv, topology: StormTopology, comp: int) -> Any:
    from checkpoint.executor import StatefulBoltExecutor
    from checkpoint.forwarder import CheckpointTupleForwarder

    plan = env.plan
    obj = topology.component(plan.component_ids[comp]).obj
    kind = plan.executor[comp]
    if kind is ExecutorKind.STATEFUL:
        return StatefulBoltExecutor(obj)
    if kind is ExecutorKind.FORWARDER:
        return CheckpointTupleForwarder(obj)
    return obj


def run_slot(
    env: TaskEnv, topology_blob: Any, level: int, slot: int, items: Iterable[Any]
) -> Iterator[tuple[int, list[Any]]]:
    """Run the bolt task in ``slot`` of ``level`` over its records; yield keyed output."""
    started = time.perf_counter()
    plan = env.plan
    comp, task = plan.levels[level].slots[slot]
    name = plan.component_ids[comp]
    final = level == plan.depth - 1
    n_next = max(env.ackers, 1) if final else len(plan.levels[level + 1].slots)

    groups: dict[tuple[int, int], list[Any]] = {}
    checkpoints: list[Any] = []
    carry: list[Any] = []
    acks: dict[int, int] = {}
    fails: list[int] = []
    side: list[Any] = []
    cp_streams = plan.checkpoint_stream
    for _key, recs in items:
        for r in recs:
            kind = r[0]
            if kind == TUPLE:
                if r[1] == comp and r[2] == task:
                    if r[5] == cp_streams[r[3]]:
                        checkpoints.append(r)
                    else:
                        group = groups.get((r[3], r[4]))
                        if group is None:
                            groups[(r[3], r[4])] = [r]
                        else:
                            group.append(r)
                else:
                    carry.append(r)
            elif kind == ACKS:
                for root, x in r[1].items():
                    acks[root] = acks.get(root, 0) ^ x
            elif kind == FAILS:
                fails.extend(r[1])
            else:
                side.append(r)

    topology = _load_topology(topology_blob)
    context = TopologyContext(topology, env.topology_name, name, task)
    collector = TaskCollector(plan, comp, task, level, env.txid, name)
    namespace = context.state_namespace()
    stateful = plan.executor[comp] is ExecutorKind.STATEFUL
    provider = None
    executed = 0
    try:
        bolt = _make_bolt(env, topology, comp)
        if stateful and namespace in env.images:
            from providers import get_provider

            provider = get_provider(env.conf)
            provider.import_image(namespace, env.images[namespace])  # type: ignore[attr-defined]
        if env.faults is not None:
            env.faults.on_task_start(env, name, task)
        bolt.prepare(env.conf, context, collector)
        if stateful:
            bolt.initialize()
        fields, comp_ids, task_ids, streams = plan.fields, plan.component_ids, plan.task_ids, plan.streams
        execute = bolt.execute
        faults = env.faults
        for r in _ordered(groups):
            src, s = r[3], r[5]
            t = Tuple(r[7], fields[src][s], comp_ids[src], task_ids[src][r[4]], streams[src][s], r[8])
            if faults is not None:
                faults.on_tuple(env, name, task, executed, t)
            execute(t)
            executed += 1
        for r in sorted(checkpoints, key=lambda r: (r[3], r[4])):
            src, s = r[3], r[5]
            t = Tuple(r[7], fields[src][s], comp_ids[src], task_ids[src][r[4]], streams[src][s], r[8])
            execute(t)
        if stateful and env.action == "PREPARE":
            bolt.release_prepared_acks()
        bolt.cleanup()
    except Exception as exc:
        user = topology.component(name).user_class
        msg = (
            f"{TASK_ERROR_MARK} component={name!r} task={context.this_task_id} txid={env.txid}] "
            f"{user} raised {type(exc).__name__}: {exc}"
        )
        raise TaskFailedError(
            msg, component=name, task=context.this_task_id, txid=env.txid, cause=repr(exc)
        ) from exc

    out = collector.buckets
    key_for = plan.key_for
    for r in carry:
        key = key_for(level, r[1], r[2])
        out.setdefault(key, []).append(r)
    for root, x in collector.xor.items():
        acks[root] = acks.get(root, 0) ^ x
    fails.extend(collector.fails)
    if provider is not None:
        changes = provider.take_changes(namespace)  # type: ignore[attr-defined]
        if changes is not None:
            side.append((STATE, namespace, changes))
    for text in collector.errors:
        side.append((ERROR, comp, task, text))
    side.append(
        (
            METRICS,
            comp,
            task,
            {
                "executed": executed,
                "emitted": collector.emitted,
                "acked": collector.acked,
                "failed": collector.failed,
                "seconds": time.perf_counter() - started,
            },
        )
    )

    if final and n_next > 1 and acks:
        split: list[dict[int, int]] = [{} for _ in range(n_next)]
        for root, x in acks.items():
            split[root % n_next][root] = x
        for k, part in enumerate(split):
            if part:
                out.setdefault(k, []).append((ACKS, part))
    elif acks:
        out.setdefault(slot % n_next, []).append((ACKS, acks))
    home = slot % n_next
    if fails:
        out.setdefault(home, []).append((FAILS, fails))
    out.setdefault(home, []).extend(side)
    yield from out.items()


def reduce_acks(items: Iterable[Any]) -> list[Any]:
    """The acker: combine XOR values per root and collect fails and other side records."""
    acks: dict[int, int] = {}
    fails: set[int] = set()
    side: list[Any] = []
    for _key, recs in items:
        for r in recs:
            kind = r[0]
            if kind == ACKS:
                for root, x in r[1].items():
                    acks[root] = acks.get(root, 0) ^ x
            elif kind == FAILS:
                fails.update(r[1])
            elif kind != TUPLE:
                side.append(r)
    return [(acks, fails, side)]
