"""``StatefulBoltExecutor``: runs a ``StatefulBolt`` through the checkpoint protocol."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from checkpoint._base import BaseStatefulBoltExecutor
from checkpoint._collectors import AckTrackingOutputCollector
from checkpoint._state import Action
from providers import KeyValueState, StateFactory
from statefulbolts.collectors import OutputCollector
from statefulbolts.components import StatefulBolt
from statefulbolts.context import TopologyContext
from statefulbolts.errors import CheckpointError
from statefulbolts.namespaces import timers_namespace
from statefulbolts.timers import TimerBolt, TimerOutputCollector, TimerService, attach_timers
from statefulbolts.tuples import Tuple


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
            self._prepared = []
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
        ack_many = getattr(self.collector, "ack_many", None)
        if ack_many is not None:
            ack_many(prepared)  # the runtime's collector acks a whole batch in one loop
            return
        for tuple_ in prepared:
            self.collector.ack(tuple_)


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
