"""What both protocols' runners share: construction, the stored state's shape, shutdown.

``ProtocolRunner`` sits between the engine's ``statefulbolts.runtime.TopologyRunner`` (the driver
loop, the lease, the stats; it knows no protocol) and each protocol's runner
(``checkpoint.runner.CheckpointRunner``, ``statefulbolts.transactional.runner
.TransactionalRunner``). It uses the engine and ``recovery`` (which stays clear of the engine)
and imports neither protocol: what differs comes in as arguments and a few methods each
protocol writes.

Construction, in this order, so nothing opens before what can be refused without opening it:

1. the config and the lease (``TopologyRunner``);
2. the run's fault listener: the one given (``faults=``), else a ``recovery.faults.FaultPlan``
   when ``topology.faults`` is set (refused if a task fault of it could never fire in this
   topology), else ``NO_FAULTS``. This is the one place that key is read, and a run without
   it never calls into ``recovery.faults``;
3. the protocol's own checks that need nothing opened (``_check_before_opening``: tick tuples);
4. the state provider (when the protocol keeps state), every component's key groups and the
   stored shape it wants (``recovery.evolve.wanted_shapes``);
5. the engine (``open_engine``, with the protocol's ``_engine_options``), its plan, and the
   image shipper of a driver-owned provider;
6. the failure gate (``recovery.gate.FailureGate``) and the committed-key counter
   (``StateKeyCounter`` over the protocol's ``_state_namespaces``).

When a job fails, ``_judged`` says what the failure is (``recovery.gate.classify``: retried,
waited out, or stopped at once because no retry can change it) after the protocol's dead
letters had their say (``statefulbolts.deadletter.Verdict``).

The protocol then builds its own parts inside ``_closing_engine``, so a part that refuses the
run leaves no engine open. At start ``_evolve`` brings the stored state to the wanted shapes
(``recovery.evolve``, with the protocol's ``StoredProgress``); after the loop ``_shutdown`` lets
the protocol stop its jobs (``_stop_jobs``), closes the engine, then the protocol's sources
(``_close_sources``).
"""

from __future__ import annotations

import contextlib
import logging
from abc import abstractmethod
from collections.abc import Callable, Collection, Iterator, Mapping
from typing import Any

from providers import DriverOwnedStateProvider, StateProvider, get_provider
from recovery.evolve import EvolutionReport, StoredProgress, evolve, wanted_shapes
from recovery.faults import FaultPlan
from recovery.gate import Failure, FailureGate, classify
from statefulbolts.clock import Clock
from statefulbolts.deadletter import Verdict
from statefulbolts.keygroups import component_key_groups
from statefulbolts.listeners import NO_FAULTS, FaultListener
from statefulbolts.runtime import (
    HeldLease,
    ImageShipper,
    StateKeyCounter,
    TopologyRunner,
    TransactionInfo,
    open_engine,
)
from statefulbolts.topology import StormTopology

__all__ = ["ProtocolRunner"]


class ProtocolRunner(TopologyRunner):
    """The base of both protocols' runners (see the module docstring).

    Args:
        name: the topology's name.
        conf: its config.
        storm: the topology the engine runs (a transactional topology's inner one).
        spark: the SparkSession (``None`` with the inline engine).
        stateful: the components whose state is kept (key groups, stored shapes).
        keeps_state: whether the run opens the state provider.
        engine: "spark" or "inline".
        clock, on_transaction, lease: as ``TopologyRunner`` takes them.
        faults: the run's fault listener (default: from ``topology.faults``, see step 2).
    """

    def __init__(
        self,
        name: str,
        conf: Mapping[str, Any] | None,
        storm: StormTopology,
        spark: Any,
        *,
        stateful: Collection[str],
        keeps_state: bool,
        engine: str,
        clock: Clock | None = None,
        on_transaction: Callable[[TransactionInfo], None] | None = None,
        faults: FaultListener | None = None,
        lease: HeldLease | None = None,
    ) -> None:
        super().__init__(name, conf, clock=clock, on_transaction=on_transaction, lease=lease)
        self.faults: FaultListener = (
            faults if faults is not None else self._configured_faults(storm)
        )
        self._check_before_opening()
        self.provider: StateProvider | None = get_provider(self.conf) if keeps_state else None
        owned = self.provider if isinstance(self.provider, DriverOwnedStateProvider) else None
        self._owned = owned
        self.key_groups = component_key_groups(
            storm.components, self.tc.state_max_parallelism, stateful
        )
        self.wanted = wanted_shapes(storm.components, stateful, self.key_groups, self.conf)
        self.evolution: EvolutionReport | None = None
        self.engine = open_engine(
            engine,
            spark,
            storm,
            name,
            self.conf,
            faults=self.faults,
            key_groups=self.key_groups,
            **self._engine_options(),
        )
        self.plan = self.engine.plan
        self.images: ImageShipper | None = (
            None if owned is None else self.engine.image_shipper(owned)
        )
        # The driver's own logger: a wait or a retry is the protocol's, and is logged as such.
        self._failures = FailureGate(
            name, self.tc, self.clock, self._stop, logging.getLogger(type(self).__module__)
        )
        self.state_keys = (
            None
            if self.provider is None
            else StateKeyCounter(
                self.stats,
                self.clock,
                self.tc.state_size_interval_ms,
                self.provider,
                self.conf,
                self._state_namespaces,
            )
        )

    def _configured_faults(self, storm: StormTopology) -> FaultListener:
        """``topology.faults``' plan, or ``NO_FAULTS`` (step 2: the one reader of the key).

        A plan whose task faults could never fire in ``storm`` (a spout's task, a component or
        task it does not have) refuses the run (``FaultPlan.on_topology``).
        """
        if self.tc.faults is None:
            return NO_FAULTS
        plan = FaultPlan.from_conf(self.conf)
        if plan is None:
            return NO_FAULTS
        components = storm.components.values()
        plan.on_topology(
            {c.id: c.parallelism for c in components if not c.is_spout},
            {c.id for c in components if c.is_spout},
        )
        return plan

    # ----------------------------------------------------------------- what a protocol says
    def _check_before_opening(self) -> None:  # noqa: B027 - an optional hook
        """Refuse what needs nothing opened (step 3); nothing by default."""

    def _engine_options(self) -> dict[str, Any]:
        """The protocol's options for ``open_engine`` (``max_jobs``, ``lead``, ...)."""
        return {}

    @abstractmethod
    def _state_namespaces(self) -> Mapping[str, list[str] | None]:
        """Each stateful component's namespaces, for the committed-key counter."""

    @abstractmethod
    def _open_protocol(self) -> None:
        """Open the protocol's sources and progress before the loop (the engine is open)."""

    @abstractmethod
    def _stop_jobs(self) -> None:
        """After the loop: wait for, or cancel, the jobs still running."""

    def _close_sources(self) -> None:  # noqa: B027 - an optional hook
        """After the engine closed: close the protocol's sources (nothing by default)."""

    # ----------------------------------------------------------------- lifecycle
    def _judged(self, error: Any, verdict: Verdict, cause: str) -> tuple[Failure, str]:
        """What a job's failure is, and its ``cause`` as the gate tells it.

        ``error`` is the failing task's ``TaskError`` (``None``: no task's own); ``verdict``
        what the protocol's dead letters did with its tuple (not isolated: the caller goes on).
        """
        stop_policy = self.tc.deadletter_policy == "stop"
        failure = classify(error, stop_policy=stop_policy, repeated=verdict.repeated is not None)
        if verdict.why_not is not None:
            cause = f"{cause} (not dead-lettered: {verdict.why_not})"
        elif verdict.repeated is not None:
            cause = (
                f"{cause} (it failed {verdict.repeated} transactions on the same tuple, and "
                "topology.deadletter.policy is 'stop')"
            )
        return failure, cause

    @contextlib.contextmanager
    def _closing_engine(self) -> Iterator[None]:
        """Close the engine if the block raises (a part of the protocol refused the run)."""
        try:
            yield
        except BaseException:
            self.engine.close()
            raise

    def _open(self) -> None:
        """Open the protocol (``_open_protocol``); the engine closes if it fails."""
        with self._closing_engine():
            self._open_protocol()

    def _evolve(self, prefix: str, progress: StoredProgress, command: str) -> None:
        """Bring the stored state under ``prefix`` to the wanted shapes, or refuse.

        ``progress`` is the protocol's stored progress; ``command`` the offline command a
        refusal names. Not waited out: a store that cannot be reached fails the start at once.
        """
        tc = self.tc
        self.evolution = evolve(
            self.conf,
            prefix,
            self.wanted,
            progress=progress,
            renames=tc.state_renames,
            mode=tc.state_evolve,
            allow_orphaned=tc.state_allow_orphaned,
            faults=self.faults,
            command=command,
        )

    def _shutdown(self) -> None:
        """Stop the jobs, close the engine, then the sources, whatever fails on the way."""
        try:
            self._stop_jobs()
        finally:
            try:
                self.engine.close()
            finally:
                self._close_sources()

    # ----------------------------------------------------------------- reading
    @property
    def shape_lines(self) -> list[str]:
        """What the stored state's shape check said at start (none before it ran)."""
        return self.evolution.lines if self.evolution is not None else []

    def _failure_gate(self) -> FailureGate:
        return self._failures
