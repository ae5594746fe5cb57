"""``StatefulBoltExecutor``: runs a ``StatefulBolt`` through the checkpoint protocol."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from checkpoint._base import BaseStatefulBoltExecutor
from checkpoint._collectors import AckTrackingOutputCollector
from checkpoint._state import Action
from providers import KeyValueState, StateFactory
from statefulbolts.collectors import ColumnOutputCollector, OutputCollector
from statefulbolts.components import StatefulBolt
from statefulbolts.context import TopologyContext
from statefulbolts.errors import CheckpointError
from statefulbolts.namespaces import timers_namespace
from statefulbolts.timers import TimerBolt, TimerOutputCollector, TimerService, attach_timers
from statefulbolts.tuples import ColumnBatch, Tuple


class StatefulBoltExecutor(BaseStatefulBoltExecutor):
    """Gives the bolt its state on INITSTATE and runs its hooks around each state step.

    Data that arrives before INITSTATE waits in a buffer. Acks are held back: an ack made before
    PREPARE(t) is released when COMMIT(t) succeeds, and failed on ROLLBACK. The call order per
    action is Storm's:

    1. PREPARE(t): ``pre_prepare(t)``, ``state.prepare_commit(t)``, acks move to the prepared set,
       forward. Before INITSTATE the checkpoint is failed instead (the spout then recovers).
    2. COMMIT(t): ``pre_commit(t)``, ``state.commit(t)``, release the prepared acks, forward.
    3. ROLLBACK: ``pre_rollback()``, ``state.rollback()``, fail prepared and queued acks, forward.
    4. INITSTATE: the first time, ``init_state(state)`` then the buffered tuples in arrival order;
       afterwards ignored. Forward either way.

    A ``TimerBolt``'s timers are a second state (``states``), made from the same provider in
    the task's ``$timers`` namespace: every state step above is taken on both, and the bolt
    gets its ``TimerService`` before ``init_state``.

    A bolt that defines ``execute_batch`` may be given its data a batch at a time
    (``execute_batch`` here, which the runtime finds as ``batch_target``): when the bolt's
    ``execute_batch`` returns, the batch's acks are held as one (the collector's
    ``ack_batch``) and go through the steps above with the single tuples' acks: prepared,
    then released or failed. Before INITSTATE a batch waits in the buffer as its tuples.
    """

    bolt: StatefulBolt

    def __init__(self, bolt: StatefulBolt) -> None:
        if not isinstance(bolt, StatefulBolt):
            kind = f"{type(bolt).__module__}.{type(bolt).__qualname__}"
            msg = f"StatefulBoltExecutor needs a StatefulBolt, got {kind}"
            raise TypeError(msg)
        super().__init__(bolt)
        self._state: KeyValueState | None = None
        self._timer_state: KeyValueState | None = None
        self._timers: TimerService | None = None
        self._tracking: AckTrackingOutputCollector | None = None
        self._initialized = False
        self._pending: list[Tuple] = []
        self._prepared: list[Tuple] = []
        self._prepared_batches: list[ColumnBatch] = []
        self._columns: ColumnOutputCollector | None = None

    @property
    def state(self) -> KeyValueState:
        """The bolt's state."""
        if self._state is None:
            msg = "StatefulBoltExecutor used before prepare"
            raise CheckpointError(msg)
        return self._state

    @property
    def states(self) -> tuple[KeyValueState, ...]:
        """Every state the protocol steps: the bolt's, then its timers' if it has timers."""
        timers = self._timer_state
        return (self.state,) if timers is None else (self.state, timers)

    @property
    def initialized(self) -> bool:
        """Whether ``init_state`` has run."""
        return self._initialized

    def prepare(
        self,
        conf: Mapping[str, Any],
        context: TopologyContext,
        collector: OutputCollector,
        state: KeyValueState | None = None,
    ) -> None:
        """Get the state (namespace ``<topology>/<component>-<task index>``); prepare the bolt."""
        if state is None:
            made = StateFactory.get_state(context.state_namespace(), conf, context)
            if not isinstance(made, KeyValueState):
                msg = (
                    f"bolt {context.this_component_id!r}: the state provider returned "
                    f"{type(made).__qualname__}, not a KeyValueState"
                )
                raise CheckpointError(msg)
            state = made
        self._state = state
        self.init(context, collector)
        self._tracking = AckTrackingOutputCollector(collector, context)
        bolt = self.bolt
        if isinstance(bolt, TimerBolt):
            self._timer_state = _timer_state(conf, context)
            out = TimerOutputCollector(self._tracking)
            self._timers = TimerService(
                self._timer_state, lambda key, at, domain: bolt.on_timer(key, at, domain, out)
            )
        self._columns = ColumnOutputCollector(self._tracking)
        bolt.prepare(conf, context, self._tracking)

    def initialize(self) -> None:
        """Run INITSTATE's body without a checkpoint tuple (a task (re)starting from its state)."""
        if self._initialized:
            return
        if self._timers is not None and isinstance(self.bolt, TimerBolt):
            attach_timers(self.bolt, self._timers)
        self.bolt.init_state(self.state)
        self._initialized = True
        pending, self._pending = self._pending, []
        for tuple_ in pending:
            self.bolt.execute(tuple_)

    def handle_tuple(self, tuple_: Tuple) -> None:
        """Execute, or buffer until INITSTATE."""
        if self._initialized:
            self.bolt.execute(tuple_)
        else:
            self._pending.append(tuple_)

    @property
    def row_acks(self) -> AckTrackingOutputCollector | None:
        """Where the bolt's acks go and are held (the runtime's row loop settles them as runs)."""
        return self._tracking

    @property
    def batch_target(self) -> Callable[[ColumnBatch], None] | None:
        """``execute_batch`` when the bolt takes batches (``None`` when it does not)."""
        return self.execute_batch if self.bolt.takes_batches() else None

    def execute_batch(self, batch: ColumnBatch) -> None:
        """Execute the bolt on a batch and hold the acks of its tuples; buffer it before INITSTATE.

        An exception from the bolt goes on, no ack held: the caller fails the task (and first
        looks for the tuple that raises, through ``execute``), as an exception from ``execute``
        fails it.
        """
        tracking, out = self._tracking, self._columns
        if tracking is None or out is None:
            msg = "StatefulBoltExecutor used before prepare"
            raise CheckpointError(msg)
        if not self._initialized:
            self._pending.extend(batch.tuples())
            return
        out.set_batch(batch)
        self.bolt.execute_batch(batch, out)
        tracking.ack_batch(batch)

    def handle_checkpoint(self, cp: Tuple, action: Action, txid: int) -> None:
        """Run the hooks and the state step for ``action`` (see the class docstring)."""
        tracking = self._tracking
        if tracking is None:
            msg = "StatefulBoltExecutor used before prepare"
            raise CheckpointError(msg)
        if action is Action.PREPARE:
            if not self._initialized:
                self.collector.fail(cp)
                return
            self.bolt.pre_prepare(txid)
            for state in self.states:
                state.prepare_commit(txid)
            self._prepared.extend(tracking.drain())
            self._prepared_batches.extend(tracking.drain_batches())
        elif action is Action.COMMIT:
            self.bolt.pre_commit(txid)
            for state in self.states:
                state.commit(txid)
            self.release_prepared_acks()
        elif action is Action.ROLLBACK:
            self.bolt.pre_rollback()
            for state in self.states:
                state.rollback()
            for tuple_ in [*self._prepared, *tracking.drain()]:
                self.collector.fail(tuple_)
            for batch in [*self._prepared_batches, *tracking.drain_batches()]:
                for tuple_ in batch.tuples():
                    self.collector.fail(tuple_)
            self._prepared, self._prepared_batches = [], []
        elif action is Action.INITSTATE:
            self.initialize()
        self.forward(cp, action, txid)

    def fire_timers(self, now_ms: float) -> int:
        """A transaction that started at ``now_ms`` begins: fire the due timers; how many.

        Nothing for a bolt without timers, or before ``init_state``.
        """
        if self._timers is None or not self._initialized:
            return 0
        return self._timers.fire_due(now_ms)

    def release_prepared_acks(self) -> None:
        """Really ack every tuple of the prepared set.

        The Spark runtime calls this at the end of a PREPARE task: the task does not live until
        COMMIT, and the driver itself holds spout acks until COMMIT succeeds.
        """
        prepared, self._prepared = self._prepared, []
        batches, self._prepared_batches = self._prepared_batches, []
        collector = self.collector
        ack_many = getattr(collector, "ack_many", None)
        if ack_many is not None:
            ack_many(prepared)  # the runtime's collector acks a whole batch in one loop
        else:
            for tuple_ in prepared:
                collector.ack(tuple_)
        ack_batch = getattr(collector, "ack_batch", None)
        for batch in batches:
            if ack_batch is not None:
                ack_batch(batch)  # the runtime's ledger: one step per batch
            else:
                for tuple_ in batch.tuples():
                    collector.ack(tuple_)


def _timer_state(conf: Mapping[str, Any], context: TopologyContext) -> KeyValueState:
    """The timers' state: the bolt's provider, the task's ``$timers`` namespace, plain msgpack."""
    made = StateFactory.get_system_state(timers_namespace(context.state_namespace()), conf, context)
    if not isinstance(made, KeyValueState):
        msg = (
            f"bolt {context.this_component_id!r}: the state provider returned "
            f"{type(made).__qualname__} for its timers, not a KeyValueState"
        )
        raise CheckpointError(msg)
    return made
