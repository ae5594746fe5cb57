"""The transactional protocol's part in a Spark task: emitters, fresh batch bolts, ``finish_batch``.

A job runs one phase of one batch attempt (docs/protocol/transactional.md): the emitters
of the attempt, its processing phase, or its commit phase. In every task:

1. The component is new: the task unpickled the topology, so a ``BatchBolt`` is a fresh copy
   per (task, attempt), as Storm's ``BatchBoltExecutor`` makes one. It is prepared with the
   attempt as its id and a ``BatchOutputCollector`` that refuses a tuple whose first value is
   not the attempt. A ``BasicBolt`` runs through ``BasicBoltExecutor`` with the same check.
2. Its tuples come in: every tuple of the batch meant for this task is in the task's input,
   because every upstream task finished before this stage started (one Spark stage per level).
3. ``finish``: ``finish_batch()``, exactly once, even for a task that got no tuple. The end of
   the task's input is the end of the batch for it: no counts or reports travel (Storm's
   ``CoordinatedBolt`` needs them because its tuples stream).
4. An emitter task (the spout's component in an emit job) has no input; ``finish`` asks the
   user's emitter for the batch, as ``EmitOrder`` says (§4), and returns the partition metas.

A ``FailedException`` anywhere fails the task on purpose (``failure``): the runtime skips every
task after it in the job, so no committer ever finishes on half a batch, and the driver fails the
attempt. Any other exception is a crash: Spark retries the task.

Every emitted tuple carries its lineage where a tracked tuple carries its root (``_deadletters``):
the emitters number what they emit, a ``BasicBolt``'s emits inherit their anchor's, and a batch
bolt's emits inherit the lineage of the tuple it is executing (none from ``finish_batch``). An
emission leaves out the places the driver's ``EmitOrder`` says were dead-lettered.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from providers import KeyValueState, StateFactory, fence_epoch
from statefulbolts.collectors import Anchors, BasicOutputCollector, OutputCollector
from statefulbolts.components import BasicBolt, BasicBoltExecutor
from statefulbolts.context import TopologyContext
from statefulbolts.errors import FailedException, TopologyError
from statefulbolts.listeners import NO_FAULTS, FaultListener
from statefulbolts.topology import ComponentSpec
from statefulbolts.transactional._attempt import TransactionAttempt
from statefulbolts.transactional._bolts import BatchOutputCollector
from statefulbolts.transactional._lineage import REPLAYED, LineageOut
from statefulbolts.transactional._maps import StateBackingMap
from statefulbolts.transactional._owner import enter_task, leave_task
from statefulbolts.tuples import DEFAULT_STREAM, Tuple

__all__ = [
    "BatchFailed",
    "BatchTaskProgram",
    "EmitKind",
    "EmitOrder",
    "EmitResult",
    "MapSource",
    "PartitionEmit",
    "SpoutKind",
    "StateMaps",
    "TransactionalContext",
]


class _Emits(Protocol):
    """The runtime's task collector, as this module uses it."""

    def emit(self, values: Sequence[Any], anchors: Anchors = None, stream: str = ...) -> None:
        """Route one tuple."""

    def emit_to(
        self, values: Sequence[Any], stream: str = ..., root: int = ..., skip: int = ...
    ) -> list[int]:
        """Route one unanchored tuple without its first ``skip`` values; the task ids.

        ``root`` goes in the tuple's root column.
        """

    def fast_routes(self) -> dict[str, Any]:
        """The fast path's memos by stream name: ``memo[value]`` routes a ``str`` value."""

    def report_error(self, error: BaseException) -> None:
        """Keep a reported error."""


class BatchFailed(NamedTuple):
    """A task failed its batch attempt on purpose (a ``FailedException``)."""

    type_name: str
    message: str

    @property
    def cause(self) -> str:
        """``Type: message``."""
        return f"{self.type_name}: {self.message}"


class EmitResult(NamedTuple):
    """What an emitter task returns: the metas of the partitions it emitted, by partition."""

    metas: dict[int, Any]
    partitions: int  # how many partitions the spout has, as this task saw it (opaque spouts)
    # The dead-lettered tuples it left out: lineage -> (stream, values without the attempt, or
    # None when a dead letter cannot keep them as they are).
    dropped: dict[int, tuple[str, list[Any] | None]] = {}  # a new dict per emission (_EmitTask)


class SpoutKind(enum.StrEnum):
    """The kind of a transactional spout, which says how its emissions replay (§4).

    Example:
        >>> SpoutKind("opaque") is SpoutKind.OPAQUE
        True
        >>> SpoutKind("x")
        Traceback (most recent call last):
        ...
        ValueError: unknown kind of transactional spout 'x': not one of plain, partitioned, opaque
    """

    PLAIN = "plain"
    PARTITIONED = "partitioned"  # exact replays, from metas stored before processing
    OPAQUE = "opaque"  # replays may differ; metas stored at commit

    @classmethod
    def _missing_(cls, value: object) -> SpoutKind:
        allowed = ", ".join(k.value for k in cls)
        msg = f"unknown kind of transactional spout {value!r}: not one of {allowed}"
        raise ValueError(msg)


class EmitKind(enum.StrEnum):
    """What one partition of a partitioned spout emits for an attempt (``PartitionEmit``).

    Example:
        >>> EmitKind("replay") is EmitKind.REPLAY
        True
        >>> EmitKind("again")
        Traceback (most recent call last):
        ...
        ValueError: unknown partition emission 'again': not one of replay, new, skip
    """

    REPLAY = "replay"  # emit exactly the stored batch again
    NEW = "new"  # a first emission, from the partition's latest earlier meta
    SKIP = "skip"  # a later txid was already stored: emit nothing

    @classmethod
    def _missing_(cls, value: object) -> EmitKind:
        allowed = ", ".join(k.value for k in cls)
        msg = f"unknown partition emission {value!r}: not one of {allowed}"
        raise ValueError(msg)


class PartitionEmit(NamedTuple):
    """One partition's part of an ``EmitOrder`` of a partitioned spout: what, from which meta.

    A ``NamedTuple`` (immutable), so it still equals the ``(kind, meta)`` pair it replaced.

    Example:
        >>> order = PartitionEmit(EmitKind.NEW, [0, 3])
        >>> order.kind, order.meta, order == ("new", [0, 3])
        (<EmitKind.NEW: 'new'>, [0, 3], True)
    """

    kind: EmitKind
    meta: Any  # the batch to replay (REPLAY), the meta to start from (NEW), None (SKIP)


@dataclass(frozen=True)
class EmitOrder:
    """What the driver asks every emitter task of one attempt to emit (§4).

    ``kind`` is the spout's ``SpoutKind``. For a partitioned spout, ``partitions`` holds a
    ``PartitionEmit`` for every partition below the partition count (``coordinator_meta``):
    replay exactly a stored batch, emit a new one from the partition's latest earlier meta, or
    skip it. For an opaque spout it holds per partition the meta to continue from (any
    partition not there starts from None). Task ``i`` of ``k`` emits the partitions ``p``
    with ``p % k == i``.
    """

    kind: SpoutKind
    coordinator_meta: Any
    committed_txid: int | None
    partitions: Mapping[int, Any] = field(default_factory=dict)
    # The spout as it is on the driver now, shipped with this emission: a spout whose data
    # lives in the object (the memory spouts) is read live.
    spout: Any = None
    # Dead letters: the lineages this emission leaves out, and the (record id, stream,
    # values) it takes in (emitted by task 0, after its partitions).
    removed: frozenset[int] = frozenset()
    replayed: tuple[tuple[str, str, list[Any]], ...] = ()


class MapSource(Protocol):
    """Where committers' backing maps live (the runtime gives one per job)."""

    def backing_map(self, namespace: str) -> Any:
        """A ``BackingMap`` over ``namespace`` of the topology's state provider."""


@dataclass(frozen=True)
class StateMaps:
    """Committers' maps in the topology's state provider: a ``StateBackingMap`` per namespace.

    The state is a system state (plain msgpack), whatever serializers the provider config names:
    the maps store their own ``[txid, value]`` forms.
    """

    conf: Mapping[str, Any]

    def backing_map(self, namespace: str) -> StateBackingMap:
        """A new map over ``namespace`` (one per attempt: a failed write spoils a map)."""
        state = StateFactory.get_system_state(namespace, self.conf)
        if not isinstance(state, KeyValueState):
            msg = f"state {namespace!r} is a {type(state).__qualname__}, not a KeyValueState"
            raise TopologyError(msg)
        return StateBackingMap(state)


class TransactionalContext(TopologyContext):
    """The ``TopologyContext`` of a transactional task, with the topology's maps.

    ``backing_map(name)`` is a ``BackingMap`` in the topology's state provider, of this task
    alone (``$transactional/<id>/<component>-<task index>/<name>``): wrap it in a
    ``TransactionalMap`` or an ``OpaqueMap``. It outlives the task, the attempt and the driver
    (with a durable provider), which a ``MemoryBackingMap`` made in a task does not.
    """

    def __init__(
        self,
        base: TopologyContext,
        transactional_id: str,
        attempt: TransactionAttempt,
        maps: MapSource | None,
    ) -> None:
        super().__init__(
            base.topology, base.topology_name, base.this_component_id, base.this_task_index
        )
        self.transactional_id = transactional_id
        self.attempt = attempt
        self._maps = maps

    def state_namespace(self) -> str:
        """``$transactional/<id>/<component>-<task index>``: this task's state, by its id."""
        return (
            f"$transactional/{self.transactional_id}/"
            f"{self.this_component_id}-{self.this_task_index}"
        )

    def backing_map(self, name: str = "default") -> Any:
        """This task's backing map ``name`` in the topology's state provider."""
        if self._maps is None:
            msg = f"component {self.this_component_id!r}: no state provider to keep maps in"
            raise TopologyError(msg)
        return self._maps.backing_map(f"{self.state_namespace()}/{name}")


def _refuse(values: Sequence[Any], stream: str, attempt: TransactionAttempt, where: str) -> None:
    """Raise unless ``values`` starts with ``attempt`` (by identity, as it usually does)."""
    if values and (values[0] is attempt or values[0] == attempt):
        return
    first = repr(values[0]) if values else "nothing"
    msg = (
        f"{where} emitted {list(values)!r} on stream {stream!r}: the first value of every "
        f"tuple of a transactional topology must be the batch's attempt {attempt}, got {first}"
    )
    raise TopologyError(msg)


# Every tuple of a job carries the job's attempt first; the runtime does not ship it (it puts
# it back in front where the tuple is delivered), so these collectors check it and pass on the
# rest (``values[1:]``).


class _BatchCollector(BatchOutputCollector):
    """A batch bolt's or an emitter's collector: attempt first, unanchored, target ids back.

    ``lineage`` is what its emits carry: the executing tuple's (``_BatchTask``), or the place
    being emitted (``LineageOut``); 0 for none.
    """

    def __init__(self, out: _Emits, attempt: TransactionAttempt, where: str) -> None:
        self._out, self._attempt, self._where = out, attempt, where
        self.lineage = 0

    def emit(self, values: Sequence[Any], stream: str = DEFAULT_STREAM) -> list[int]:
        """Emit ``values`` (the attempt first) on ``stream``; the global task ids it went to."""
        if not values or values[0] is not self._attempt:
            _refuse(values, stream, self._attempt, self._where)
        return self._out.emit_to(values, stream, self.lineage, 1)

    def emit_with_lineage(self, values: Sequence[Any], stream: str, lineage: int) -> list[int]:
        """``emit``, carrying ``lineage`` (an emitter's place, ``LineageOut``) for this tuple."""
        if not values or values[0] is not self._attempt:
            _refuse(values, stream, self._attempt, self._where)
        return self._out.emit_to(values, stream, lineage, 1)

    def report_error(self, error: BaseException) -> None:
        """Keep the error (it fails nothing)."""
        self._out.report_error(error)


# What a BasicBolt's acks go into: never anything (see ``_BasicCollector``).
_NO_ACKS: set[Any] = set()


class _BasicCollector(OutputCollector):
    """A ``BasicBolt``'s collector: attempt first; acks are free; a failed tuple fails the batch."""

    def __init__(self, out: _Emits, attempt: TransactionAttempt, where: str) -> None:
        self._out, self._attempt, self._where = out, attempt, where
        # BasicBoltExecutor acks every input, and nothing is tracked: an ack keeps nothing (a
        # C call on a set that stays empty, no Python frame). Into the task's ledger, as
        # before, it kept each tuple until the next chunk, and the runtime's row loop could
        # not reuse it (``runtime._rows.feed_lead``).
        self.ack = _NO_ACKS.discard  # type: ignore[method-assign,assignment]

    def emit(
        self, values: Sequence[Any], anchors: Anchors = None, stream: str = DEFAULT_STREAM
    ) -> None:
        """Emit ``values`` (the attempt first), anchored as the BasicBolt anchors it."""
        if not values or values[0] is not self._attempt:
            _refuse(values, stream, self._attempt, self._where)
        self._out.emit(values[1:], anchors, stream)

    def basic_collector(self, out: OutputCollector) -> BasicOutputCollector:
        """The ``BasicOutputCollector`` ``BasicBoltExecutor`` uses: one frame per emit."""
        return _AttemptBasicOutput(self._out, self._attempt, self._where)

    def ack(self, tuple_: Tuple) -> None:
        """Nothing to settle: a batch completes when its tasks end."""

    def fail(self, tuple_: Tuple) -> None:
        """The ``BasicBolt`` raised ``FailedException``: fail the whole batch attempt."""
        msg = f"{self._where} failed a tuple of batch {self._attempt}"
        raise FailedException(msg)

    def report_error(self, error: BaseException) -> None:
        """Keep the error (it fails nothing)."""
        self._out.report_error(error)


class _AttemptBasicOutput(BasicOutputCollector):
    """A BasicBolt's ``emit``: attempt checked and dropped, then the task collector's fast path.

    The path of most emits of a transactional topology (a split bolt's words): a one-field
    stream after the attempt, routed by fields grouping on that field, a ``str`` seen before;
    it appends to the destination batch as ``TaskCollector._emitter``'s fast path does.
    """

    __slots__ = ("_attempt", "_where", "_fast")

    def __init__(self, out: Any, attempt: TransactionAttempt, where: str) -> None:
        super().__init__(out)
        self._attempt, self._where = attempt, where
        self._fast = out.fast_routes()

    def emit(self, values: Sequence[Any], stream: str = DEFAULT_STREAM) -> None:
        """Emit anchored to the current input; ``values[0]`` must be the attempt."""
        if not values or values[0] is not self._attempt:
            _refuse(values, stream, self._attempt, self._where)
        cache = self._fast.get(stream)
        if cache is not None and len(values) == 2:
            value = values[1]
            if type(value) is str:  # see TaskCollector._emitter
                batch, value = cache[value]
                batch[0].append(value)
                anchor = self._input  # its lineage goes on (the tuple is never acked)
                batch[1].append(anchor._root if anchor is not None else 0)
                return
        self._direct.emit(values[1:], self._input, stream)


def _no_data(tuple_: Tuple) -> None:
    msg = f"an emitter task got a tuple ({tuple_!r}); emitters have no input"
    raise TopologyError(msg)


class _Executor:
    """What every transactional task executor shares."""

    def __init__(self, spec: ComponentSpec, program: BatchTaskProgram, task: int) -> None:
        self.spec, self.program, self.task = spec, program, task
        self.where = f"component {spec.id!r} task {task}"
        self.lineage_sink: _BatchCollector | None = None

    def control(self, tuple_: Tuple) -> None:
        """No control tuples in this protocol."""

    def cleanup(self) -> None:
        """The task's user code is done: it no longer owns maps made without an owner."""
        leave_task()

    def _running(self, conf: Mapping[str, Any]) -> None:
        """From here to ``cleanup``, a map made without an owner belongs to this task.

        The maps it writes carry the lease epoch the driver put in ``conf``.
        """
        enter_task(self.spec.id, self.task, fence_epoch(conf))

    def _context(self, context: TopologyContext) -> TransactionalContext:
        p = self.program
        return TransactionalContext(context, p.transactional_id, p.attempt, p.maps)


class _BatchTask(_Executor):
    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: Any
    ) -> Callable[[Tuple], None]:
        self.bolt = self.spec.obj  # a fresh copy: this task unpickled the topology
        out = self.out = _BatchCollector(collector, self.program.attempt, self.where)
        self._running(conf)
        self.bolt.prepare(conf, self._context(context), out, self.program.attempt)
        if self.program.lineage and self.spec.outputs:
            # The runtime sets ``out.lineage`` to each tuple's before executing it: what the
            # bolt emits then inherits it (``runtime._task``).
            self.lineage_sink = out
        execute: Callable[[Tuple], None] = self.bolt.execute
        return execute

    def finish(self) -> None:
        self.out.lineage = 0  # what finish_batch emits comes from the whole batch
        self.bolt.finish_batch()
        program = self.program
        if program.committing:
            txid = program.attempt.transaction_id
            program.faults.on_task_committed(self.spec.id, self.task, txid)


class _BasicTask(_Executor):
    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: Any
    ) -> Callable[[Tuple], None]:
        self.bolt = BasicBoltExecutor(self.spec.obj)
        out = _BasicCollector(collector, self.program.attempt, self.where)
        self._running(conf)
        self.bolt.prepare(conf, self._context(context), out)
        return self.bolt.execute

    def finish(self) -> None:
        """A BasicBolt has no ``finish_batch``."""

    def cleanup(self) -> None:
        try:
            self.bolt.cleanup()
        finally:
            super().cleanup()


class _EmitTask(_Executor):
    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: Any
    ) -> Callable[[Tuple], None]:
        self.conf, self.context = conf, self._context(context)
        self.out = _BatchCollector(collector, self.program.attempt, self.where)
        return _no_data

    def finish(self) -> EmitResult:
        order = self.program.emit
        if order is None:
            msg = f"{self.where}: an emitter task ran without an emit order"
            raise TopologyError(msg)
        spout = order.spout if order.spout is not None else self.spec.obj
        emitter = spout.get_emitter(self.conf, self.context)
        dropped: dict[int, tuple[str, list[Any] | None]] = {}
        try:
            result = _emit(emitter, order, self.program.attempt, self.out, self.context, dropped)
        finally:
            emitter.close()
        if order.replayed and self.context.this_task_index == 0:
            sink = LineageOut(self.out, REPLAYED, order.removed, dropped)
            for _record, stream, values in order.replayed:
                sink.emit([self.program.attempt, *values], stream)
        return result._replace(dropped=dropped)


def _mine(partitions: int, context: TopologyContext) -> range:
    """The partitions task ``i`` of ``k`` emits: ``i, i + k, i + 2k, ...`` below ``partitions``."""
    return range(context.this_task_index, partitions, len(context.this_component_tasks))


def _partition_order(order: EmitOrder, partition: int) -> PartitionEmit:
    """The driver's order for ``partition``; it orders every partition below the count.

    Raises:
        ValueError: the order has no entry for ``partition`` (never guessed as a new batch).
    """
    found = order.partitions.get(partition)
    if found is None:
        msg = (
            f"the emit order of a partitioned spout has no entry for partition {partition} "
            f"(it orders {sorted(order.partitions)}); the driver orders every partition "
            f"below the partition count {order.coordinator_meta!r}"
        )
        raise ValueError(msg)
    return PartitionEmit(EmitKind(found[0]), found[1])


def _emit(
    emitter: Any,
    order: EmitOrder,
    attempt: TransactionAttempt,
    out: _BatchCollector,
    context: TopologyContext,
    dropped: dict[int, tuple[str, list[Any] | None]],
) -> EmitResult:
    """Ask the user's emitter for this task's share of the batch (§4); the metas it gives.

    Each slot (a partition; a plain spout's emitter task) emits through its own
    ``LineageOut``, which numbers its tuples and leaves out the removed ones.
    """
    metas: dict[int, Any] = {}

    def slot(number: int) -> LineageOut:
        return LineageOut(out, number, order.removed, dropped)

    if order.kind is SpoutKind.PLAIN:
        emitter.emit_batch(attempt, order.coordinator_meta, slot(context.this_task_index))
        if order.committed_txid is not None:
            emitter.cleanup_before(order.committed_txid)
        return EmitResult(metas, 0)
    if order.kind is SpoutKind.PARTITIONED:
        n = int(order.coordinator_meta or 0)
        for p in _mine(n, context):
            how, meta = _partition_order(order, p)
            if how is EmitKind.REPLAY and meta is not None:
                emitter.emit_partition_batch(attempt, slot(p), p, meta)
            elif how is EmitKind.NEW:
                metas[p] = emitter.emit_partition_batch_new(attempt, slot(p), p, meta)
        return EmitResult(metas, n)
    n = int(emitter.num_partitions())
    for p in _mine(n, context):
        last = order.partitions.get(p)
        meta = emitter.emit_partition_batch(attempt, slot(p), p, last)
        # A None meta (a disabled or unreachable partition) keeps the previous position: Storm
        # started the partition over from its beginning (docs/protocol/transactional.md).
        metas[p] = last if meta is None else meta
    return EmitResult(metas, n)


@dataclass(frozen=True)
class BatchTaskProgram:
    """The transactional protocol's part in every task of one job of one attempt."""

    attempt: TransactionAttempt
    transactional_id: str
    maps: MapSource | None = None
    emit: EmitOrder | None = None
    committing: bool = False
    faults: FaultListener = NO_FAULTS  # told when a committer committed (the mid-commit kill)
    # Whether batch bolts pass the executing tuple's lineage on (dead letters are isolated).
    lineage: bool = True

    @property
    def data_free(self) -> None:
        """Every job of this protocol may carry data."""
        return None

    @property
    def tracking(self) -> bool:
        """Batches are not acked tuple by tuple: a batch is done when its tasks end."""
        return False

    def is_control(self, stream_id: str) -> bool:
        """No control streams: the end of a task's input is the end of its batch."""
        return False

    def failure(self, exc: Exception) -> BatchFailed | None:
        """A ``FailedException`` fails the attempt on purpose; anything else is a crash."""
        if isinstance(exc, FailedException):
            return BatchFailed(type(exc).__name__, str(exc))
        return None

    def executor(self, spec: ComponentSpec, info: Any) -> _EmitTask | _BasicTask | _BatchTask:
        """The executor of one task: an emitter, a ``BasicBolt`` or a ``BatchBolt``."""
        if spec.is_spout:
            return _EmitTask(spec, self, info.task)
        if isinstance(spec.obj, BasicBolt):
            return _BasicTask(spec, self, info.task)
        return _BatchTask(spec, self, info.task)
