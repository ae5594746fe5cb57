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

import gc
import pickle
import time
import traceback
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from statefulbolts.acker import DeliveryLedger, id_base
from statefulbolts.collectors import Anchors, BasicOutputCollector, OutputCollector
from statefulbolts.components import BasicBolt, BasicBoltExecutor
from statefulbolts.context import TopologyContext
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
    id_column,
    stable_hash,
)
from statefulbolts.topology import ExecutorKind, StormTopology
from statefulbolts.tuples import DEFAULT_STREAM, Tuple

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
    """The raw collector of a bolt task: routes emits and keeps this task's ``DeliveryLedger``.

    An emit records, per destination batch, the value and the roots of its anchors; the ids
    that XOR acking needs are made by the task the tuple is delivered to (see ``acker``).

    In a flat job (COMMIT, ROLLBACK, INITSTATE: no data, every stateful task in one stage) the
    forwarded checkpoint goes nowhere, and a data emit is an error: there is no stage after it.
    """

    def __init__(
        self,
        plan: ExecutionPlan,
        comp: int,
        task: int,
        level: int,
        txid: int,
        name: str,
        flat_action: str | None = None,
    ) -> None:
        self.comp, self.task, self._level = comp, task, level
        self._task_id = plan.task_ids[comp][task]
        self._name = name
        self._flat_action = flat_action
        self._streams = plan.stream_index[comp]
        self._fields = plan.fields[comp]
        self._widths = [len(f) for f in plan.fields[comp]]
        self._router = Router(plan, comp, task)
        self._key_for = plan.key_for
        self._cp_stream = plan.checkpoint_stream[comp]
        self.batches: dict[tuple[int, int, int], list[Any]] = {}
        # Fields grouping on one str field: remember which batch a value goes to, with the first
        # str object of that value: (field position, {value: (batch, value)}, dest, n_tasks).
        self._memo: dict[int, tuple[int, dict[str, tuple[list[Any], str]], int, int]] = {}
        for stream in range(len(self._widths)):
            single = self._router.single_field_route(stream)
            if single is not None:
                dest, pos, n = single
                self._memo[stream] = (pos, {}, dest, n)
        # The same caches by stream name, for the one-field data streams ``emit`` has a fast
        # path for (none in a flat job, where a data emit is an error).
        self._fast: dict[str, dict[str, tuple[list[Any], str]]] = {}
        if flat_action is None:
            self._fast = {
                name: self._memo[s][1]
                for name, s in self._streams.items()
                if s in self._memo and self._widths[s] == 1
            }
        self.ledger = DeliveryLedger(id_base(txid, comp, task))
        # Acks only keep the tuple (the ledger's own list methods); ``settle`` does the rest.
        self.ack = self.ledger.ack  # type: ignore[method-assign,assignment]
        self.ack_many = self.ledger.ack_many  # type: ignore[method-assign,assignment]
        self.fails: list[int] = []
        self.errors: list[str] = []
        # Fast-path emits count nothing: each appends one value to one batch, so ``emitted``
        # is what the general path counted plus what it did not append.
        self._emits = 0  # counted by the general path
        self._appends = 0  # values the general path appended
        self.failed = 0

    def _bad_emit(self, values: Sequence[Any], stream: str) -> TopologyError:
        s = self._streams.get(stream)
        if s is None:
            msg = (
                f"bolt {self._name!r} task {self._task_id} emitted on undeclared stream "
                f"{stream!r}; "
                f"it declares {sorted(self._streams)}"
            )
        elif self._flat_action is not None:
            msg = (
                f"bolt {self._name!r} task {self._task_id} emitted {list(values)!r} during "
                f"{self._flat_action}; bolts may emit only while executing tuples (not from "
                "init_state or the pre_commit / pre_rollback hooks of a data-free checkpoint)"
            )
        else:
            msg = (
                f"bolt {self._name!r} emitted {len(values)} values on stream {stream!r}, which "
                f"declares {self._widths[s]} fields {self._fields[s].to_list()}"
            )
        return TopologyError(msg)

    def emit(
        self, values: Sequence[Any], anchors: Anchors = None, stream: str = DEFAULT_STREAM
    ) -> None:
        """Route one tuple to its destination tasks, with the roots of its anchors."""
        # Fast path, the shape of most emits: one anchor on at most one tree, a data stream
        # whose single-field fields grouping already routed this value (see ``_memo``).
        cache = self._fast.get(stream)
        if (
            cache is not None
            and type(anchors) is Tuple
            and anchors._more is None
            and len(values) == 1
        ):
            value = values[0]
            entry = cache.get(value) if type(value) is str else None
            if entry is not None:
                # The value shipped is the first equal str this task emitted: the pickled batch
                # then holds each distinct word once (later ones are memo references), and the
                # next stage gets one object per word, its hash computed once.
                batch, value = entry
                batch[0].append(value)
                batch[1].append(anchors._root)
                return
        self._emit(values, anchors, stream)

    @property
    def emitted(self) -> int:
        """Data tuples emitted (one per ``emit``, whatever the number of destinations)."""
        appended = sum(len(batch[0]) for batch in self.batches.values())
        return self._emits + appended - self._appends

    def basic_collector(self, out: OutputCollector) -> BasicOutputCollector:
        """The ``BasicOutputCollector`` of a ``BasicBolt`` on this task, fast path inlined."""
        return _TaskBasicCollector(out, self)

    def _emit(self, values: Sequence[Any], anchors: Anchors, stream: str) -> None:
        s = self._streams.get(stream)
        if s is None or len(values) != self._widths[s]:
            raise self._bad_emit(values, stream)
        if self._flat_action is not None:
            if s == self._cp_stream:
                return
            raise self._bad_emit(values, stream)
        memo = self._memo.get(s)
        value = values[memo[0]] if memo is not None else None
        if memo is not None and type(value) is str:
            cache = memo[1]
            entry = cache.get(value)
            if entry is None:
                entry = (self._batch(memo[2], stable_hash((value,)) % memo[3], s), value)
                if len(cache) < 100_000:
                    cache[value] = entry
            targets: Sequence[list[Any]] = (entry[0],)
        else:
            targets = [self._batch(d, t, s) for d, t in self._router.targets(self.comp, s, values)]
        if s != self._cp_stream:
            self._emits += 1
        if not targets:
            return
        self._appends += len(targets)
        # Single-field streams ship bare values; the receiver wraps them back in a list.
        vals = values[0] if self._widths[s] == 1 else list(values)
        root = 0
        more: tuple[int, ...] | None = None
        if isinstance(anchors, Tuple):
            root = anchors._root
            if anchors._more:
                more = tuple(r for r, _ in anchors._more if r != root)
        elif anchors:
            # Every tree of every anchor, each once, in anchor order.
            roots = list(dict.fromkeys(r for a in anchors for r, _ in a.anchors))
            if roots:
                root = roots[0]
                more = tuple(roots[1:])
        for batch in targets:
            if more:
                if batch[2] is None:
                    batch[2] = {}
                batch[2][len(batch[0])] = more
            batch[0].append(vals)
            batch[1].append(root)

    def _batch(self, dest: int, dtask: int, stream: int) -> list[Any]:
        key = (dest, dtask, stream)
        batch = self.batches.get(key)
        if batch is None:
            # values, first roots (0: untracked), {position: further roots} or None
            batch = self.batches[key] = [[], [], None]
        return batch

    def records(self) -> Iterator[tuple[int, Any]]:
        """``(next-stage key, batch record)`` for everything emitted."""
        comp, task, level, key_for = self.comp, self.task, self._level, self._key_for
        for (dest, dtask, s), (vals, roots, more) in self.batches.items():
            rec = (TUPLE, dest, dtask, comp, task, s, vals, id_column(roots), more)
            yield key_for(level, dest, dtask), rec

    def ack(self, tuple_: Tuple) -> None:
        """Ack a tuple this task was given (settled by the ledger when the task ends)."""
        self.ledger.ack(tuple_)

    def ack_many(self, tuples: Sequence[Tuple]) -> None:
        """``ack`` each of ``tuples`` (a stateful task releases its held acks at once)."""
        self.ledger.ack_many(tuples)

    def fail(self, tuple_: Tuple) -> None:
        """Fail every root of the tuple."""
        self.fails.extend(root for root, _ in tuple_.anchors)
        if tuple_.source_stream_id != "$checkpoint":
            self.failed += 1

    def report_error(self, error: BaseException) -> None:
        """Keep the error; it is logged by the driver and counted in metrics."""
        text = "".join(traceback.format_exception_only(type(error), error)).strip()
        self.errors.append(text)


class _TaskBasicCollector(BasicOutputCollector):
    """A ``BasicOutputCollector`` with ``TaskCollector.emit``'s fast path written into ``emit``.

    A split bolt emits several tuples per input: one frame less per emit is a tenth of its
    stage. Anything the fast path does not take goes the usual way.
    """

    __slots__ = ("_fast",)

    def __init__(self, out: OutputCollector, task: TaskCollector) -> None:
        super().__init__(out)
        self._fast = task._fast

    def emit(self, values: Sequence[Any], stream: str = DEFAULT_STREAM) -> None:
        """Emit anchored to the current input tuple."""
        anchor = self._input
        cache = self._fast.get(stream)
        if cache is not None and anchor is not None and anchor._more is None and len(values) == 1:
            value = values[0]
            entry = cache.get(value) if type(value) is str else None
            if entry is not None:  # see TaskCollector.emit
                batch, value = entry
                batch[0].append(value)
                batch[1].append(anchor._root)
                return
        BasicOutputCollector.emit(self, values, stream)


# Tuples per chunk of the hot loop, and the young objects that make a chunk boundary collect.
_CHUNK = 1 << 15
_YOUNG_LIMIT = 200_000
# The limit after a young collection found no garbage: a task of a million tuples collects once
# more at most, and cyclic garbage a bolt starts making later stays bounded (some 100 MB).
_QUIET_YOUNG_LIMIT = 1_000_000


class _YoungGarbage:
    """Collects the youngest generation at chunk boundaries of a task that runs with GC off.

    It is there for cyclic garbage made by user code. The tuples of a task stay alive until its
    end (acks keep them), so a young collection mostly walks live tuples to find nothing: once
    one finds nothing, the bolt is taken to make no cycles, and the next waits 5 times longer.
    """

    __slots__ = ("limit",)

    def __init__(self) -> None:
        self.limit = _YOUNG_LIMIT

    def __call__(self) -> None:
        if gc.get_count()[0] > self.limit:
            self.limit = _YOUNG_LIMIT if gc.collect(0) else _QUIET_YOUNG_LIMIT


_frozen_in_this_process = False


def _freeze_long_lived() -> None:
    """Once per Python worker: take the objects alive now out of the collector's sight.

    PySpark's daemon runs a full ``gc.collect()`` after every task of a reused worker. A full
    collection walks every tracked object, some 50,000 once pyspark and this package are
    imported, and took 10-40 ms here: on the path between two stages of every job. What is
    alive before the first task is modules, classes and functions; freezing them (after
    importing what tasks use) leaves the collector only the objects made since.
    """
    global _frozen_in_this_process
    if _frozen_in_this_process:
        return
    _frozen_in_this_process = True
    import checkpoint.executor  # noqa: F401 - imported now so that they are frozen too
    import checkpoint.forwarder  # noqa: F401
    import providers  # noqa: F401

    gc.collect()
    gc.freeze()


def _ordered(batches: list[Any]) -> list[Any]:
    """Batches by (source component, source task, stream): a deterministic delivery order."""
    return sorted(batches, key=lambda r: (r[3], r[4], r[5]))


def _make_bolt(env: TaskEnv, topology: StormTopology, comp: int) -> Any:
    from checkpoint.executor import StatefulBoltExecutor
    from checkpoint.forwarder import CheckpointTupleForwarder

    plan = env.plan
    obj = topology.component(plan.component_ids[comp]).obj
    if isinstance(obj, BasicBolt):
        obj = BasicBoltExecutor(obj)
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
    plan = env.plan
    comp, task = plan.levels[level].slots[slot]
    final = level == plan.depth - 1
    n_next = max(env.ackers, 1) if final else len(plan.levels[level + 1].slots)
    return _run_task(env, topology_blob, comp, task, level, slot, final, n_next, items, None)


def run_flat(
    env: TaskEnv, topology_blob: Any, slot: int, items: Iterable[Any]
) -> Iterator[tuple[int, list[Any]]]:
    """Run stateful task ``slot`` of a flat (data-free) checkpoint job."""
    comp, task = env.plan.stateful_tasks()[slot]
    return _run_task(
        env, topology_blob, comp, task, -1, slot, True, 1, items, env.action or "checkpoint"
    )


def _run_task(
    env: TaskEnv,
    topology_blob: Any,
    comp: int,
    task: int,
    level: int,
    slot: int,
    final: bool,
    n_next: int,
    items: Iterable[Any],
    flat_action: str | None,
) -> Iterator[tuple[int, list[Any]]]:
    started = time.perf_counter()
    _freeze_long_lived()
    plan = env.plan
    name = plan.component_ids[comp]

    batches: list[Any] = []
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
                        batches.append(r)
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
    collector = TaskCollector(plan, comp, task, level, env.txid, name, flat_action)
    namespace = context.state_namespace()
    stateful = plan.executor[comp] is ExecutorKind.STATEFUL
    provider = None
    executed = 0
    # No full garbage collections while the task runs: the tuples a stateful bolt holds until
    # the checkpoint are all alive, and every full collection walked all of them again (it was
    # half the time of a counting task). Young garbage is still collected between chunks.
    gc_enabled = gc.isenabled()
    gc.disable()
    _collect_young = _YoungGarbage()
    try:
        bolt = _make_bolt(env, topology, comp)
        if stateful and namespace in env.images:
            from providers import get_provider

            provider = get_provider(env.conf)
            provider.import_image(namespace, env.images[namespace])  # type: ignore[attr-defined]
        faults = env.faults
        attempt = 0
        if faults is not None:
            from statefulbolts.runtime._spark import task_attempt

            attempt = task_attempt()
        bolt.prepare(env.conf, context, collector)
        if stateful:
            if env.action == "PREPARE":
                # This attempt starts from the committed image: a delta an earlier attempt of
                # this task prepared before it was lost must not be read, and is replaced.
                bolt.state.supersede_prepared(env.txid)
            bolt.initialize()
        fields, comp_ids, streams = plan.fields, plan.component_ids, plan.streams
        task_ids = plan.task_ids
        # Data goes straight to the user's bolt when the wrapper would just pass it on.
        execute = bolt.execute
        if plan.executor[comp] is not ExecutorKind.PLAIN and (not stateful or bolt.initialized):
            execute = bolt.bolt.execute
        widths = plan.widths
        new = object.__new__
        deliver, compact = collector.ledger.deliver, collector.ledger.compact
        for r in _ordered(batches):
            src, s = r[3], r[5]
            f, cid, tid, sid = fields[src][s], comp_ids[src], task_ids[src][r[4]], streams[src][s]
            values, roots, more = r[6], r[7], r[8]
            single = widths[src][s] == 1
            first = deliver(roots, more)  # each tuple's number: first, first + 1, ...
            n = len(values)
            if more is None and faults is None:
                # The hot loop: no multi-anchored tuples, no fault injection. Tuples are built
                # slot by slot: without the call into ``Tuple.__init__`` this costs 40% less.
                # Chunks, so that the young-garbage check below runs in long batches too.
                for start in range(0, n, _CHUNK):
                    compact()  # the acks of the chunk before, if in order (a BasicBolt's are)
                    _collect_young()
                    stop = min(start + _CHUNK, n)
                    chunk = zip(
                        values[start:stop],
                        roots[start:stop],
                        range(first + start, first + stop),
                        strict=True,
                    )
                    for vals, root, number in chunk:
                        t = new(Tuple)
                        t.values = [vals] if single else vals
                        t.fields = f
                        t.source_component = cid
                        t.source_task = tid
                        t.source_stream_id = sid
                        t._root = root
                        t._edge = number
                        t._more = None
                        execute(t)
                executed += n
                continue
            for i, (vals, root) in enumerate(zip(values, roots, strict=True)):
                if i % _CHUNK == 0:
                    compact()
                    _collect_young()
                t = Tuple([vals] if single else vals, f, cid, tid, sid, (), root, first + i)
                if more is not None and i in more:
                    t._more = tuple((extra, first + i) for extra in more[i])
                if faults is not None:
                    faults.on_tuple(name, task, env.txid, attempt, executed)
                execute(t)
                executed += 1
        for r in _ordered(checkpoints):
            src, s = r[3], r[5]
            f, cid, tid, sid = fields[src][s], comp_ids[src], task_ids[src][r[4]], streams[src][s]
            first = deliver(r[7], r[8])
            for i, (vals, root) in enumerate(zip(r[6], r[7], strict=True)):
                bolt.execute(Tuple(vals, f, cid, tid, sid, (), root, first + i))
        if stateful and env.action == "PREPARE":
            bolt.release_prepared_acks()
            if faults is not None:
                faults.on_task_prepared(name, task, env.txid, attempt)
        if stateful and faults is not None and env.action == "COMMIT":
            faults.on_task_committed(name, task, env.txid)
        bolt.cleanup()
        # Usually every tuple was acked once, and the ledger has nothing to report.
        left, exact = collector.ledger.settle()
        if exact:
            acked = executed
        else:  # settled tuples are data: compact runs between data chunks only
            cp_id = "$checkpoint"
            held = sum(1 for t in collector.ledger.acked if t.source_stream_id != cp_id)
            acked = collector.ledger.settled + held
    except Exception as exc:
        user = topology.component(name).user_class
        msg = (
            f"{TASK_ERROR_MARK} component={name!r} task={context.this_task_id} txid={env.txid}] "
            f"{user} raised {type(exc).__name__}: {exc}"
        )
        raise TaskFailedError(
            msg, component=name, task=context.this_task_id, txid=env.txid, cause=repr(exc)
        ) from exc
    finally:
        # Free the task's tuples while the collector is still off: re-enabled with them alive,
        # its next automatic collection walked every one.
        collector.ledger.forget()
        if gc_enabled:
            gc.enable()

    out: dict[int, list[Any]] = {}
    for key, rec in collector.records():
        bucket = out.get(key)
        if bucket is None:
            out[key] = [rec]
        else:
            bucket.append(rec)
    if carry:
        key_for = plan.key_for
        for r in carry:
            out.setdefault(key_for(level, r[1], r[2]), []).append(r)
    for root, x in left.items():
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
                "acked": acked,
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
    acks: dict[int, int] | None = None
    fails: set[int] = set()
    side: list[Any] = []
    for _key, recs in items:
        for r in recs:
            kind = r[0]
            if kind == ACKS:
                # The biggest ledger so far is the base (unpickled here, so ours to change);
                # the smaller one is merged into it.
                part = r[1]
                if acks is None:
                    acks = part
                    continue
                if len(part) > len(acks):
                    acks, part = part, acks
                for root, x in part.items():
                    acks[root] = acks.get(root, 0) ^ x
            elif kind == FAILS:
                fails.update(r[1])
            elif kind != TUPLE:
                side.append(r)
    return [(acks if acks is not None else {}, fails, side)]
