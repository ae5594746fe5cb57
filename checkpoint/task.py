"""A checkpoint transaction's part in one bolt task: the steps the runtime calls, in order.

On Spark a task lives for one transaction: it is made, prepared, fed and dropped. What it does
around its tuples is this protocol's decision, written here and nowhere else:

1. ``prepare``: build the executor Storm's ``createTopology`` would (``StatefulBoltExecutor`` for
   a stateful bolt, ``CheckpointTupleForwarder`` for any other bolt of a checkpointed topology, a
   ``BasicBolt`` inside ``BasicBoltExecutor``) and prepare it. A stateful task then restarts from
   its committed state (INITSTATE's body); before a PREPARE it first supersedes whatever a lost
   earlier attempt of this task prepared (``State.supersede_prepared``), so a Spark retry cannot
   count the transaction twice. It returns where data tuples go: the user's bolt itself when the
   executor would only pass them on. A ``BasicBolt`` that takes its input as column batches
   (``execute_batch``) outside a stateful executor also offers ``batch_target``: the forwarder
   only passes data on, and its barrier is untouched, since ``$checkpoint`` tuples come after
   every data tuple and batch. So does a ``StatefulBolt`` that defines ``execute_batch``:
   its target is the stateful executor's, which holds each batch's acks until the commit.
2. ``before_data``: a stateful task hints its state with the keys its tuples will likely read,
   the values of the field its input is grouped on (``KeyValueState.prefetch``, ``_prefetch``):
   a store a round trip away reads them all at once instead of one ``get`` at a time.
   A ``TimerBolt``'s due timers fire next, at the start of a PREPARE, against the transaction's
   start time (``statefulbolts.timers``). Then the tick tuples the driver gave this bolt in this
   transaction (``system_tuples``), each task of the bolt all of them, before any data tuple
   (``checkpoint._ticks``).
3. ``control``: each ``$checkpoint`` tuple, after every data tuple, through the executor (the
   barrier, the hooks, the state step, the forward).
4. ``finish``: at the end of a PREPARE a stateful task releases its held acks (the driver holds
   the spout acks until COMMIT succeeds, because the task does not live until then). The run's
   fault listener is told here that a state prepared or committed (``TaskPoint``).

A partitioned spout's task (``checkpoint._partitioned``) runs first in a PREPARE job, with no
input: its ``finish`` reads the partitions the driver gave it and emits their records.

Example:
    >>> from checkpoint import Action
    >>> program = CheckpointTaskProgram(Action.COMMIT, 4)
    >>> program.data_free, program.is_control("$checkpoint"), program.is_control("default")
    ('COMMIT', True, False)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from checkpoint._expected import check_stored_txids
from checkpoint._partitioned import PartitionReadTask, TaskReads
from checkpoint._prefetch import BatchLike, PlanLike, grouped_keys
from checkpoint._state import Action
from checkpoint.executor import StatefulBoltExecutor
from checkpoint.forwarder import CheckpointTupleForwarder
from providers import StateTtl
from statefulbolts.collectors import OutputCollector
from statefulbolts.components import BasicBolt, BasicBoltExecutor, BasicRows, Bolt
from statefulbolts.context import TopologyContext
from statefulbolts.errors import TopologyError
from statefulbolts.listeners import NO_FAULTS, FaultListener
from statefulbolts.ticks import tick_tuple
from statefulbolts.topology import CHECKPOINT_STREAM_ID, ComponentSpec, ExecutorKind
from statefulbolts.tuples import ColumnBatch, Tuple
from statefulbolts.windowing import WindowedBoltExecutor

__all__ = ["CheckpointTask", "CheckpointTaskProgram", "TaskInfoLike"]


class TaskInfoLike(Protocol):
    """Which task runs (the runtime's ``TaskInfo``)."""

    @property
    def component(self) -> str:
        """The component id."""

    @property
    def task(self) -> int:
        """The task index."""

    @property
    def attempt(self) -> int:
        """Spark's attempt number of the task."""


@dataclass(frozen=True)
class CheckpointTaskProgram:
    """The checkpoint protocol's part in every task of one job (shipped with the job).

    ``action`` is ``None`` for a topology without stateful bolts: its batches carry data and
    no checkpoint. ``ticks``: per ticking bolt, ``(how many tick tuples, rate_secs)`` each of
    its tasks gets in this job. ``started_ms``: the transaction's timestamp, fixed by the
    driver when it first started and the same in every attempt and replay of the transaction
    (``checkpoint._txstart``); ``None`` only in jobs built without a driver. ``ttls``: the
    state TTL of each stateful component that has one (``checkpoint._ttl``), judged at
    ``started_ms``. ``reads``: in a PREPARE, the partitions and start positions of each
    partitioned spout task (``checkpoint._partitioned``); those tasks run first in the job.
    """

    action: Action | None
    txid: int
    faults: FaultListener = NO_FAULTS
    ticks: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    started_ms: float | None = None
    ttls: Mapping[str, StateTtl] = field(default_factory=dict)
    # In a PREPARE: what each partitioned spout task reads, by (component, task index).
    reads: Mapping[tuple[str, int], TaskReads] = field(default_factory=dict)

    @property
    def data_free(self) -> str | None:
        """The action's name when it carries no data (COMMIT, ROLLBACK, INITSTATE)."""
        if self.action is None or self.action.carries_data:
            return None
        return self.action.value

    @property
    def tracking(self) -> bool:
        """Tuple trees are tracked (whether acking is on is the spouts' business)."""
        return True

    def failure(self, exc: Exception) -> None:
        """No exception fails a task on purpose here: Spark retries it, then the job fails."""
        return None

    def is_control(self, stream_id: str) -> bool:
        """``$checkpoint`` tuples are control tuples: they come after every data tuple."""
        return stream_id == CHECKPOINT_STREAM_ID

    def executor(
        self, spec: ComponentSpec, info: TaskInfoLike
    ) -> CheckpointTask | PartitionReadTask:
        """The steps of one task of ``spec`` in this transaction (a spout's: its reads)."""
        if spec.is_spout:
            reads = self.reads.get((spec.id, info.task))
            if reads is None:
                msg = f"spout {spec.id!r} task {info.task} runs in a job that gives it no reads"
                raise TopologyError(msg)
            return PartitionReadTask(spec, reads)
        task = CheckpointTask(spec, self.action, self.txid, info, self.faults)
        task.started_ms = self.started_ms
        task.ttl = self.ttls.get(spec.id)
        due = self.ticks.get(spec.id)
        if due is not None:
            count, rate_secs = due
            task.system_tuples = [tick_tuple(rate_secs) for _ in range(count)]
        return task


class CheckpointTask:
    """One bolt task through one checkpoint transaction (see the module docstring)."""

    def __init__(
        self,
        spec: ComponentSpec,
        action: Action | None,
        txid: int,
        info: TaskInfoLike,
        faults: FaultListener = NO_FAULTS,
    ) -> None:
        obj = spec.obj
        if isinstance(obj, BasicBolt):
            obj = BasicBoltExecutor(obj)
        self._kind = spec.executor
        # Tick tuples for this task's bolt in this job; the runtime feeds them, untracked, to
        # the data target before the first data tuple.
        self.system_tuples: list[Tuple] = []
        self.started_ms: float | None = None  # the transaction's timestamp (see the program)
        self._action, self._txid, self._info, self._faults = action, txid, info, faults
        self.ttl: StateTtl | None = None  # this component's state TTL (``checkpoint._ttl``)
        # Set by ``prepare`` for a BasicBolt that takes column batches (see the module doc).
        self.batch_target: Callable[[ColumnBatch], None] | None = None
        # Set by ``prepare``, for the runtime's loop over a per-tuple bolt's rows: a
        # BasicBolt's step taken apart, or where any other bolt's acks go.
        self.basic_rows: BasicRows | None = None
        self.row_acks: Any = None
        self.bolt: Bolt
        if spec.executor is ExecutorKind.STATEFUL:
            self.bolt = StatefulBoltExecutor(obj)
        elif spec.executor is ExecutorKind.FORWARDER:
            self.bolt = CheckpointTupleForwarder(obj)
        else:
            self.bolt = obj

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> Callable[[Tuple], None]:
        """Prepare; a stateful task restores its committed state. Returns the data target."""
        bolt = self.bolt
        bolt.prepare(conf, context, collector)
        if isinstance(bolt, StatefulBoltExecutor):
            started = self.started_ms
            # Expiry is judged at the transaction's timestamp; without one (a job built
            # without a driver) nothing expires or is written with an expiry.
            bolt.state.set_transaction_time(
                None if started is None else int(started), self.ttl if started is not None else None
            )
            states = list(bolt.states)  # the bolt's, and its timers' if it has timers
            if isinstance(bolt.bolt, WindowedBoltExecutor):
                # A windowed bolt's windows live in a namespace of their own, checkpointed
                # with the task's state; its processing time is the transaction's.
                bolt.bolt.begin_transaction(self.started_ms)
                states.append(bolt.bolt.window_state)
            for state in states:
                if self._action is not None:
                    # A store that lost committed state must stop the topology, not restart
                    # it from what is left (``checkpoint._expected``).
                    check_stored_txids(state, self._action, self._txid)
                if self._action is Action.PREPARE:
                    # This attempt starts from the committed image: a delta an earlier attempt
                    # of this task prepared before it was lost must not be read, and is replaced.
                    state.supersede_prepared(self._txid)
            bolt.initialize()
            self.batch_target = bolt.batch_target
            self.row_acks = bolt.row_acks  # held until the checkpoint
            return bolt.bolt.execute
        passed = bolt.bolt if isinstance(bolt, CheckpointTupleForwarder) else bolt
        if isinstance(passed, BasicBoltExecutor):
            self.batch_target = passed.batch_target
            self.basic_rows = passed.basic_rows
        else:
            self.row_acks = collector  # a forwarder passes acks straight on too
        return passed.execute  # a forwarder passes data straight on

    def before_data(self, plan: PlanLike, batches: Sequence[BatchLike]) -> None:
        """Before the first data tuple: hint the state, then fire the due timers.

        Only a stateful task, once its state is ready for the transaction (``prepare``). The
        hint is the keys the tuples are grouped on; what the state does with it is its business
        (``KeyValueState.prefetch``); it never changes what the bolt reads. Timers fire in a
        PREPARE only, by the transaction's start time, which every attempt and replay of it
        shares, so a replay fires exactly what the failed attempt fired.
        """
        bolt = self.bolt
        if not isinstance(bolt, StatefulBoltExecutor) or not bolt.initialized:
            return
        if batches:
            bolt.state.prefetch(grouped_keys(plan, batches))
        if self._action is Action.PREPARE and self.started_ms is not None:
            bolt.fire_timers(self.started_ms)

    def control(self, tuple_: Tuple) -> None:
        """A ``$checkpoint`` tuple: the barrier and the action, through the executor."""
        self.bolt.execute(tuple_)

    def finish(self) -> None:
        """After the tuples: release held acks at the end of a PREPARE; tell the fault listener."""
        bolt, faults, info = self.bolt, self._faults, self._info
        if not isinstance(bolt, StatefulBoltExecutor):
            return
        if self._action is Action.PREPARE:
            bolt.release_prepared_acks()
            faults.on_task_prepared(info.component, info.task, self._txid, info.attempt)
        elif self._action is Action.COMMIT:
            faults.on_task_committed(info.component, info.task, self._txid)

    def cleanup(self) -> None:
        """Clean up the bolt."""
        self.bolt.cleanup()
