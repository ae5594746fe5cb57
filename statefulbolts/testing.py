"""Drive one spout, bolt or checkpoint executor without Spark.

``RecordingCollector`` records what a component emitted, acked, failed and reported;
``make_tuple``, ``make_context`` and ``checkpoint_tuple`` build the inputs; ``ManualClock`` moves
time by hand. ``RecordingStatefulBolt`` and ``RecordingState`` log hook and state calls into one
list, and ``drive`` feeds an executor data tuples and whole checkpoint barriers (one ``$checkpoint``
tuple from every input task) and transaction starts (a ``TimerBolt``'s due timers fire), so the
exact protocol sequence can be asserted.

Example:
    >>> from examples.wordcount import SplitSentence
    >>> from statefulbolts import BasicBolt
    >>> from statefulbolts.components import BasicBoltExecutor
    >>> bolt = BasicBoltExecutor(SplitSentence())
    >>> out = RecordingCollector()
    >>> bolt.prepare({}, make_context("split"), out)
    >>> bolt.execute(make_tuple(["a b"], fields=["sentence"]))
    >>> [e.values for e in out.emitted], len(out.acked)
    ([['a'], ['b']], 1)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from providers import KeyValueState
from statefulbolts.clock import ManualClock
from statefulbolts.collectors import Anchors, OutputCollector, SpoutOutputCollector, anchor_list
from statefulbolts.components import Bolt, OutputFieldsDeclarer, Spout, StatefulBolt
from statefulbolts.context import TopologyContext
from statefulbolts.topology import (
    CHECKPOINT_COMPONENT_ID,
    CHECKPOINT_FIELDS,
    CHECKPOINT_STREAM_ID,
    StormTopology,
    TopologyBuilder,
)
from statefulbolts.tuples import DEFAULT_STREAM, ColumnBatch, Fields, Tuple

# ``drive``'s step ``(BEGIN, started_ms)``: a transaction starts (see ``drive``).
BEGIN = "BEGIN"

__all__ = [
    "BEGIN",
    "Emitted",
    "ManualClock",
    "RecordingCollector",
    "RecordingSpoutCollector",
    "RecordingState",
    "RecordingStatefulBolt",
    "checkpoint_barrier",
    "checkpoint_tuple",
    "drive",
    "make_context",
    "make_tuple",
]


@dataclass
class Emitted:
    """One emit seen by a recording collector."""

    values: list[Any]
    stream: str = DEFAULT_STREAM
    anchors: list[Tuple] = field(default_factory=list)
    message_id: Any = None


class RecordingCollector(OutputCollector):
    """An ``OutputCollector`` that records everything, in order, in ``events`` as well."""

    def __init__(self) -> None:
        self.emitted: list[Emitted] = []
        self.acked: list[Tuple] = []
        self.failed: list[Tuple] = []
        self.errors: list[BaseException] = []
        self.events: list[tuple[str, Any]] = []

    def emit(
        self, values: Sequence[Any], anchors: Anchors = None, stream: str = DEFAULT_STREAM
    ) -> None:
        """Record an emit."""
        record = Emitted(list(values), stream, anchor_list(anchors))
        self.emitted.append(record)
        self.events.append(("emit", record))

    def ack(self, tuple_: Tuple) -> None:
        """Record an ack."""
        self.acked.append(tuple_)
        self.events.append(("ack", tuple_))

    def fail(self, tuple_: Tuple) -> None:
        """Record a fail."""
        self.failed.append(tuple_)
        self.events.append(("fail", tuple_))

    def report_error(self, error: BaseException) -> None:
        """Record a reported error."""
        self.errors.append(error)
        self.events.append(("error", error))

    def on_stream(self, stream: str) -> list[Emitted]:
        """Emits on one stream."""
        return [e for e in self.emitted if e.stream == stream]


class RecordingSpoutCollector(SpoutOutputCollector):
    """A ``SpoutOutputCollector`` that records emits and errors."""

    def __init__(self) -> None:
        self.emitted: list[Emitted] = []
        self.errors: list[BaseException] = []

    def emit(
        self, values: Sequence[Any], message_id: Any = None, stream: str = DEFAULT_STREAM
    ) -> None:
        """Record an emit."""
        self.emitted.append(Emitted(list(values), stream, [], message_id))

    def report_error(self, error: BaseException) -> None:
        """Record a reported error."""
        self.errors.append(error)

    def take(self) -> list[Emitted]:
        """Return the emits so far and forget them."""
        out, self.emitted = self.emitted, []
        return out


def make_tuple(
    values: Sequence[Any],
    fields: Fields | Iterable[str] | None = None,
    component: str = "source",
    task: int = 1,
    stream: str = DEFAULT_STREAM,
) -> Tuple:
    """A tuple as if ``component`` task ``task`` emitted it on ``stream``."""
    if fields is None:
        names = Fields([f"field{i}" for i in range(len(values))])
    else:
        names = fields if isinstance(fields, Fields) else Fields(list(fields))
    return Tuple(list(values), names, component, task, stream)


def checkpoint_tuple(
    action: Any, txid: int, component: str = CHECKPOINT_COMPONENT_ID, task: int = 1
) -> Tuple:
    """A ``$checkpoint`` tuple ``(txid, action)`` from ``component`` task ``task``."""
    name = getattr(action, "value", action)
    return Tuple([txid, name], CHECKPOINT_FIELDS, component, task, CHECKPOINT_STREAM_ID)


class _Source(Spout):
    def __init__(self, fields: Fields) -> None:
        self._fields = fields

    def next_tuple(self) -> None:
        """Never called."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(self._fields)


class _Sink(Bolt):
    def execute(self, tuple: Tuple) -> None:  # noqa: A002
        """Never called."""


class _StatefulSink(StatefulBolt):
    def init_state(self, state: Any) -> None:
        """Never called."""

    def execute(self, tuple: Tuple) -> None:  # noqa: A002
        """Never called."""


def make_context(
    component_id: str = "bolt",
    task_index: int = 0,
    parallelism: int = 1,
    *,
    topology: StormTopology | None = None,
    topology_name: str = "test",
    stateful: bool = True,
    checkpointed: bool | None = None,
    sources: dict[str, int] | None = None,
    source_fields: Sequence[str] = ("value",),
) -> TopologyContext:
    """A context for ``component_id`` task ``task_index``.

    Without ``topology``, builds one where ``component_id`` (stateful by default) subscribes to
    ``sources`` (name -> parallelism; default one spout ``source``), so checkpoint inputs are wired
    as the real builder does. ``checkpointed`` (default: same as ``stateful``) with
    ``stateful=False`` adds a stateful bolt ``<component_id>-state`` beside the component, so the
    component is a non-stateful bolt in a checkpointed topology: what ``CheckpointTupleForwarder``
    runs under.

    Example:
        >>> context = make_context("split", stateful=False, checkpointed=True)
        >>> sorted(context.topology.components)
        ['$checkpointspout', 'source', 'split', 'split-state']
    """
    if checkpointed is None:
        checkpointed = stateful
    if stateful and not checkpointed:
        msg = "make_context: a stateful component is always checkpointed; drop checkpointed=False"
        raise ValueError(msg)
    if topology is None:
        builder = TopologyBuilder()
        bolt: Bolt = _StatefulSink() if stateful else _Sink()
        declarer = builder.set_bolt(component_id, bolt, parallelism)
        extra = None
        if checkpointed and not stateful:
            extra = builder.set_bolt(f"{component_id}-state", _StatefulSink())
        for name, n in (sources or {"source": 1}).items():
            builder.set_spout(name, _Source(Fields(list(source_fields))), n)
            declarer.shuffle_grouping(name)
            if extra is not None:
                extra.shuffle_grouping(name)
        topology = builder.create_topology()
    return TopologyContext(topology, topology_name, component_id, task_index)


class RecordingStatefulBolt(StatefulBolt):
    """A ``StatefulBolt`` that logs every hook call, in order, into ``calls``.

    ``calls`` gets ``("prepare",)``, ``("init_state",)``, ``("pre_prepare", txid)``,
    ``("pre_commit", txid)``, ``("pre_rollback",)`` and ``("execute", values)``. ``execute`` stores
    ``values[0] -> values[1:]`` in the state (when the tuple has at least one value), emits the
    values anchored to the input when ``emit`` is true, and acks the input. A hook named in
    ``raise_in`` raises ``RuntimeError("<hook> failed")`` after logging itself. Pass one ``calls``
    list to this bolt and to a ``RecordingState`` to see both in one sequence.

    Example:
        >>> from checkpoint import Action, StatefulBoltExecutor
        >>> from providers import InMemoryKeyValueState
        >>> calls = []
        >>> bolt = RecordingStatefulBolt(calls)
        >>> executor = StatefulBoltExecutor(bolt)
        >>> context, out = make_context("count"), RecordingCollector()
        >>> state = RecordingState(InMemoryKeyValueState("t/c-0"), calls)
        >>> executor.prepare({}, context, out, state)
        >>> drive(executor, context, [(Action.INITSTATE, -1), make_tuple(["a", 1])])
        >>> drive(executor, context, [(Action.PREPARE, 0), (Action.COMMIT, 0)])
        >>> calls  # doctest: +NORMALIZE_WHITESPACE
        [('prepare',), ('init_state',), ('execute', ['a', 1]), ('pre_prepare', 0),
         ('state.prepare_commit', 0), ('pre_commit', 0), ('state.commit', 0)]
    """

    def __init__(
        self,
        calls: list[tuple[Any, ...]] | None = None,
        *,
        emit: bool = False,
        raise_in: Iterable[str] = (),
        fields: Sequence[str] = ("value",),
    ) -> None:
        self.calls: list[tuple[Any, ...]] = [] if calls is None else calls
        self.emit = emit
        self.raise_in = frozenset(raise_in)
        self.fields = Fields(list(fields))
        self.state: KeyValueState | None = None
        self.collector: OutputCollector | None = None

    def _log(self, *call: Any) -> None:
        self.calls.append(call)
        if call[0] in self.raise_in:
            msg = f"{call[0]} failed"
            raise RuntimeError(msg)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """Declare ``fields`` on the default stream."""
        declarer.declare(self.fields)

    def prepare(self, conf: Any, context: TopologyContext, collector: OutputCollector) -> None:
        """Log and keep the collector."""
        self.collector = collector
        self._log("prepare")

    def init_state(self, state: KeyValueState) -> None:
        """Log and keep the state."""
        self.state = state
        self._log("init_state")

    def execute(self, tuple: Tuple) -> None:  # noqa: A002 - Storm's parameter name
        """Log, store, optionally emit anchored, and ack."""
        self._log("execute", list(tuple.values))
        if self.state is not None and len(tuple.values) >= 1:
            self.state.put(tuple.values[0], list(tuple.values[1:]))
        assert self.collector is not None  # noqa: S101 - prepare ran
        if self.emit:
            self.collector.emit(list(tuple.values), anchors=tuple)
        self.collector.ack(tuple)

    def pre_prepare(self, txid: int) -> None:
        """Log."""
        self._log("pre_prepare", txid)

    def pre_commit(self, txid: int) -> None:
        """Log."""
        self._log("pre_commit", txid)

    def pre_rollback(self) -> None:
        """Log."""
        self._log("pre_rollback")


class RecordingState(KeyValueState):
    """Wraps a ``KeyValueState`` and logs its transaction steps into ``calls``.

    ``calls`` gets ``("state.prepare_commit", txid)``, ``("state.commit", txid)`` (``txid`` is
    ``None`` for the no-argument commit) and ``("state.rollback",)``; reads and writes pass through
    unlogged. A step named in ``raise_in`` (``"state.commit"``, ...) raises
    ``RuntimeError("<step> failed")`` after logging itself, before reaching the wrapped state.

    Example:
        >>> from providers import InMemoryKeyValueState
        >>> calls = []
        >>> state = RecordingState(InMemoryKeyValueState("t/c-0"), calls)
        >>> state.put("k", 1)
        >>> state.prepare_commit(0)
        >>> state.commit(0)
        >>> calls, state.get("k")
        ([('state.prepare_commit', 0), ('state.commit', 0)], 1)
    """

    def __init__(
        self,
        inner: KeyValueState,
        calls: list[tuple[Any, ...]] | None = None,
        *,
        raise_in: Iterable[str] = (),
    ) -> None:
        self.inner = inner
        self.calls: list[tuple[Any, ...]] = [] if calls is None else calls
        self.raise_in = frozenset(raise_in)

    def _log(self, *call: Any) -> None:
        self.calls.append(call)
        if call[0] in self.raise_in:
            msg = f"{call[0]} failed"
            raise RuntimeError(msg)

    def prepare_commit(self, txid: int) -> None:
        """Log, then prepare the wrapped state."""
        self._log("state.prepare_commit", txid)
        self.inner.prepare_commit(txid)

    def commit(self, txid: int | None = None) -> None:
        """Log, then commit the wrapped state."""
        self._log("state.commit", txid)
        self.inner.commit(txid)

    def rollback(self) -> None:
        """Log, then roll back the wrapped state."""
        self._log("state.rollback")
        self.inner.rollback()

    def supersede_prepared(self, txid: int) -> None:
        """Log, then pass through (the wrapped state's own way, not the default rollback)."""
        self._log("state.supersede_prepared", txid)
        self.inner.supersede_prepared(txid)

    def put(self, key: Any, value: Any) -> None:
        """Pass through."""
        self.inner.put(key, value)

    def get(self, key: Any, default: Any = None) -> Any:
        """Pass through."""
        return self.inner.get(key, default)

    def delete(self, key: Any) -> Any:
        """Pass through."""
        return self.inner.delete(key)

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        """Pass through."""
        return iter(self.inner)

    def iter_keys(self) -> Iterator[Any]:
        """Pass through."""
        return self.inner.iter_keys()


def checkpoint_barrier(context: TopologyContext, action: Any, txid: int) -> list[Tuple]:
    """A complete barrier: one ``$checkpoint`` tuple ``(txid, action)`` per input task.

    The input tasks are every task that sends ``context``'s task checkpoints, in task order:
    every task of each source, or, along a chain, the one with this task's index
    (``TopologyContext.sending_tasks``).

    Example:
        >>> context = make_context("count", sources={"a": 1, "b": 2})
        >>> [(t.source_component, t.source_task) for t in checkpoint_barrier(context, "PREPARE", 0)]
        [('$checkpointspout', 1)]
    """
    tasks = sorted(
        (task, source.component_id)
        for source in context.this_sources
        if source.stream_id == CHECKPOINT_STREAM_ID
        for task in context.sending_tasks(source)
    )
    return [checkpoint_tuple(action, txid, component, task) for task, component in tasks]


def drive(executor: Bolt, context: TopologyContext, steps: Iterable[Any]) -> None:
    """Feed ``executor`` (already prepared with ``context``) a sequence of steps, in order.

    A step is a ``Tuple`` (executed as is); a ``ColumnBatch``, given to the executor's
    ``batch_target`` (a bolt that defines ``execute_batch``, as the runtime gives it its
    batches); an ``(action, txid)`` pair, which delivers the
    complete barrier of ``checkpoint_barrier(context, action, txid)`` (``action`` may be an
    ``Action`` or its name); or ``("BEGIN", started_ms)``: a transaction starts at
    ``started_ms``, as the runtime starts each one before its data, so a ``TimerBolt``'s due
    timers fire and ``current_processing_time()`` is ``started_ms`` until the next ``BEGIN``
    (the executor must be a stateful one, and initialized: after an ``INITSTATE`` barrier).

    Example:
        >>> from checkpoint import CheckpointTupleForwarder
        >>> from examples.wordcount import SplitSentence
        >>> from statefulbolts.components import BasicBoltExecutor
        >>> forwarder = CheckpointTupleForwarder(BasicBoltExecutor(SplitSentence()))
        >>> context = make_context("split", stateful=False, checkpointed=True)
        >>> out = RecordingCollector()
        >>> forwarder.prepare({}, context, out)
        >>> drive(forwarder, context, [make_tuple(["a b"]), ("PREPARE", 0)])
        >>> [(e.stream, e.values) for e in out.emitted]
        [('default', ['a']), ('default', ['b']), ('$checkpoint', [0, 'PREPARE'])]
    """
    for step in steps:
        if isinstance(step, Tuple):
            executor.execute(step)
            continue
        if isinstance(step, ColumnBatch):
            target = getattr(executor, "batch_target", None)
            if target is None:
                msg = (
                    f"drive: {step!r} is a batch, but {type(executor).__qualname__} of "
                    f"{context.this_component_id!r} takes none: its bolt must define "
                    "execute_batch, and the executor be the one that runs it "
                    "(BasicBoltExecutor, StatefulBoltExecutor)"
                )
                raise TypeError(msg)
            target(step)
            continue
        action, txid = step
        if action == BEGIN:
            _begin(executor, context, txid)
            continue
        for cp in checkpoint_barrier(context, action, txid):
            executor.execute(cp)


def _begin(executor: Bolt, context: TopologyContext, started_ms: float) -> None:
    """``drive``'s ``("BEGIN", started_ms)``: fire the due timers, as a task does first."""
    fire = getattr(executor, "fire_timers", None)
    if fire is None:
        msg = (
            f"drive: a BEGIN step starts a transaction of a stateful bolt's executor; "
            f"{type(executor).__qualname__} of {context.this_component_id!r} is not one"
        )
        raise TypeError(msg)
    if not getattr(executor, "initialized", True):
        msg = (
            f"drive: BEGIN({started_ms}) before {context.this_component_id!r} was initialized: "
            "deliver an INITSTATE barrier first"
        )
        raise RuntimeError(msg)
    fire(started_ms)
