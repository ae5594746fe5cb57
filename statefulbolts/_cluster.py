"""``LocalCluster`` and ``TopologyHandle``: submitting topologies to a SparkSession.

The one module that wires the protocols to the engine: it picks each topology's runner
(``checkpoint.runner.CheckpointRunner``, or
``statefulbolts.transactional.runner.TransactionalRunner``).

One driver per topology: ``submit_topology`` takes the topology's lease in its state store
first (``recovery.lease``; ``take_topology_lease``), so a second driver of the same topology,
here or anywhere, is refused before anything runs, and a stale one is fenced off.

A topology whose config sets ``topology.ui.port`` gets its live dashboard and ``/metrics``
(``statefulbolts.ui``) from the moment it is submitted until its handle is killed (``kill``,
``kill_topology`` or the cluster's ``shutdown``); ``handle.ui_url`` says where.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from checkpoint.runner import CheckpointRunner
from providers import DriverOwnedStateProvider, get_provider, provider_name
from recovery.lease import DriverLease, take_lease
from statefulbolts.clock import Clock
from statefulbolts.components import SpoutReplayWarning
from statefulbolts.config import validate_config
from statefulbolts.errors import ConfigError, TopologyError
from statefulbolts.listeners import FaultListener
from statefulbolts.namespaces import topology_prefix, transactional_prefix
from statefulbolts.runtime import (
    ENGINES,
    HeldLease,
    TopologyRunner,
    TransactionInfo,
    build_session,
    topology_tag,
)
from statefulbolts.topology import StormTopology
from statefulbolts.transactional import TransactionalTopology
from statefulbolts.transactional.runner import TransactionalRunner

log = logging.getLogger(__name__)

# How long ``kill(wait=False)`` keeps cancelling jobs before it waits as ``kill`` does.
_KILL_NOW_SECONDS = 30.0


def lease_scope(name: str, topology: StormTopology | TransactionalTopology) -> str:
    """The namespace prefix a topology's lease covers: where its protocol keeps its state.

    A checkpointed topology's is its name's (``wc/``); a transactional topology keeps its
    progress under its transactional id (``$transactional/words/``).
    """
    if isinstance(topology, TransactionalTopology):
        return transactional_prefix(topology.transactional_id)
    return topology_prefix(name)


def take_topology_lease(
    name: str,
    conf: Mapping[str, Any] | None,
    topology: StormTopology | TransactionalTopology,
    *,
    take_over: bool = False,
) -> DriverLease | None:
    """Take the lease of topology ``name`` in its state store (``recovery.lease.take_lease``).

    ``None`` when the provider keeps no leases (state in memory lives in one driver).

    Raises:
        LeaseHeldError: another driver of the topology runs (the message says who, and how
            to take over).
        StateBackendError: the store could not be reached.
    """
    what = f"topology {name!r}"
    if isinstance(topology, TransactionalTopology):
        what = f"transactional id {topology.transactional_id!r} (topology {name!r})"
    return take_lease(
        dict(conf or {}), lease_scope(name, topology), what, take_over=take_over
    )


def warn_of_spouts_that_cannot_replay(
    name: str,
    conf: Mapping[str, Any] | None,
    topology: StormTopology | TransactionalTopology,
    *,
    leased: bool,
) -> None:
    """Warn (``SpoutReplayWarning``) of each spout that may count twice after a restart.

    A checkpointed topology with state, in a durable provider (one that keeps leases,
    ``leased``, or whose state the driver does not own), run with a spout that does not declare
    ``durable_source = True`` (``Spout.durable_source``): a restarted driver's instance of it
    may emit again what the committed state already counted. A transactional topology's spouts
    replay by their own protocol.
    """
    if not isinstance(topology, StormTopology) or not topology.has_stateful_bolt:
        return
    if not leased and isinstance(get_provider(dict(conf or {})), DriverOwnedStateProvider):
        return  # the driver's own state dies with it: a restart starts over, consistently
    for cid, spec in sorted(topology.spouts.items()):
        spout = spec.obj
        if spout is None or getattr(spout, "durable_source", None) is True:
            continue
        kind = f"{type(spout).__module__}.{type(spout).__qualname__}"
        says = (
            "declares durable_source = False"
            if spout.durable_source is False
            else "does not declare durable_source = True"
        )
        warnings.warn(
            f"topology {name!r}: spout {cid!r} ({kind}) {says}, and the state provider "
            f"{provider_name(dict(conf or {}))} keeps the counts across a driver restart: after "
            "one, what the spout emits again is counted again. Read a source that keeps its "
            "place (RedisStreamSpout, DirectorySpout, KafkaSpout), or make the spout resume "
            "after what its acks saw committed and set durable_source = True "
            "(docs/getting-started.md, 'A durable spout')",
            SpoutReplayWarning,
            stacklevel=3,
        )


class TopologyHandle:
    """A running topology.

    Example:
        >>> handle = cluster.submit_topology("wc", conf, topology)  # doctest: +SKIP
        >>> handle.await_idle(120)  # doctest: +SKIP
        >>> handle.read_state("count")["storm"]  # doctest: +SKIP
        3
    """

    def __init__(self, runner: TopologyRunner, cluster: LocalCluster, ui: Any = None) -> None:
        self._runner = runner
        self._cluster = cluster
        self._ui = ui

    @property
    def name(self) -> str:
        """The topology name."""
        return self._runner.name

    @property
    def error(self) -> BaseException | None:
        """Why the topology stopped, if it failed."""
        return self._runner.error

    def await_idle(self, timeout: float | None = 300) -> TopologyHandle:
        """Wait until spouts stopped emitting, nothing is pending and the last checkpoint committed.

        Raises:
            TimeoutError: not idle within ``timeout`` seconds (the message says where it is).
            TopologyFailedError: the topology stopped with an error.
        """
        self._runner.await_idle(timeout)
        return self

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Whether the topology is idle within ``timeout`` seconds (``await_idle`` that says).

        Raises:
            TopologyFailedError: the topology stopped with an error, or was killed first.
        """
        return self._runner.wait_idle(timeout)

    def read_state(self, component_id: str) -> dict[Any, Any]:
        """The committed state of a component, merged over its tasks, as a dict.

        A stateful bolt's ``KeyValueState``; for a transactional topology, the current values
        of a committer's ``backing_map()`` ("default"; ``read_map`` reads another).
        """
        return self._runner.read_state(component_id)

    def read_map(self, component_id: str, name: str = "default") -> dict[Any, Any]:
        """A transactional committer's backing map ``name``, merged over its tasks."""
        runner = self._runner
        if not isinstance(runner, TransactionalRunner):
            msg = f"topology {self.name!r} is not transactional: it has no committer maps"
            raise TopologyError(msg)
        return runner.read_state(component_id, name)

    def metrics(self) -> dict[str, Any]:
        """Per component (executed, emitted, acked, failed) and per transaction figures."""
        return self._runner.metrics()

    def status(self) -> dict[str, Any]:
        """Where the checkpoint spout and the ledger are now."""
        return self._runner.status()

    @property
    def ui_url(self) -> str | None:
        """The dashboard's URL (``topology.ui.port``), ``None`` without one or once killed."""
        ui = self._ui
        return ui.url if ui is not None and ui.running else None

    def kill(self, *, wait: bool = True) -> None:
        """Stop the topology after the running transaction, then its dashboard.

        ``wait=False``: without waiting for the running transaction: its Spark jobs are
        cancelled, as a crashed driver's would be, and a restarted driver recovers it the same
        way (``statefulbolts run --timeout``). A job of the inline engine runs to its end.
        """
        try:
            if not wait:
                self._kill_now()
            self._runner.kill()
        finally:
            if self._ui is not None:
                self._ui.stop()
            self._cluster._forget(self.name)

    def _kill_now(self) -> None:
        """Stop the driver loop, cancelling the topology's Spark jobs until it has stopped.

        Cancelled again while the loop winds down: a step under way when the loop was told
        to stop may still start one more job.
        """
        runner, spark = self._runner, self._cluster.spark
        runner.kill(timeout=0)  # no new step from now on
        deadline = time.monotonic() + _KILL_NOW_SECONDS
        while not runner.done and time.monotonic() < deadline:
            if spark is not None and spark.sparkContext._jsc is not None:
                spark.sparkContext.cancelJobsWithTag(topology_tag(self.name))
            runner.kill(timeout=0.2)

    @property
    def runner(self) -> TopologyRunner:
        """The driver loop (for tests and tools)."""
        return self._runner


class LocalCluster:
    """Runs topologies on a SparkSession: one you give, or one it makes for ``master``.

    For ``local`` masters every Spark address is bound to 127.0.0.1 and ``local[N]`` becomes
    ``local[N,F]`` so that a failed task is retried as on a cluster.

    ``engine="inline"`` runs every job's tasks in this process instead, with no SparkSession
    (``master`` and the Spark options are then unused): the same protocols, in milliseconds,
    for tests; a task that fails is not retried (its transaction is).

    Example:
        >>> with LocalCluster("local[2]") as cluster:  # doctest: +SKIP
        ...     handle = cluster.submit_topology("wc", {}, topology)
        ...     handle.await_idle(120)
    """

    def __init__(
        self,
        master: str = "local[2]",
        spark: Any | None = None,
        *,
        app_name: str = "statefulbolts",
        spark_conf: Mapping[str, Any] | None = None,
        task_max_failures: int = 4,
        engine: str = "spark",
    ) -> None:
        if engine not in ENGINES:
            known = ", ".join(f"{k!r} ({what})" for k, what in ENGINES.items())
            msg = f"LocalCluster: unknown engine {engine!r}; expected one of {known}"
            raise ConfigError(msg)
        self.engine = engine
        self._owns_session = spark is None and engine == "spark"
        if self._owns_session:
            spark = build_session(master, app_name, spark_conf, task_max_failures)
        self.spark: Any = spark  # None with the inline engine
        self._topologies: dict[str, TopologyHandle] = {}

    def submit_topology(
        self,
        name: str,
        conf: Mapping[str, Any] | None,
        topology: StormTopology | TransactionalTopology,
        *,
        clock: Clock | None = None,
        on_transaction: Callable[[TransactionInfo], None] | None = None,
        faults: FaultListener | None = None,
        take_over: bool = False,
        lease: HeldLease | None = None,
    ) -> TopologyHandle:
        """Start ``topology`` under ``name``; returns at once with a handle.

        The topology's lease is taken first (``take_topology_lease``; ``take_over`` takes it
        from a live driver), unless one taken earlier is given (``lease``: the CLI takes it
        before Spark starts). The runner releases it when it stops. ``faults``: a chaos test's
        fault listener (``statefulbolts.listeners``), in place of ``topology.faults``.

        Raises:
            LeaseHeldError: another driver of the topology runs.
            TopologyError: the wiring is wrong, or ``name`` is already running here.
        """
        if name in self._topologies:
            msg = f"a topology named {name!r} is already running on this cluster"
            raise TopologyError(msg)
        tc = validate_config(conf)
        if lease is None:
            lease = take_topology_lease(name, conf, topology, take_over=take_over)
        try:
            warn_of_spouts_that_cannot_replay(name, conf, topology, leased=lease is not None)
            runner = self._runner(name, conf, topology, clock, on_transaction, faults, lease)
        except BaseException:
            if lease is not None:
                lease.release()
            raise
        runner.start()  # releases the lease itself if opening fails
        ui = None
        if tc.ui_port is not None:
            try:
                ui = self._dashboard(runner, topology, tc.ui_host, tc.ui_port)
            except BaseException:
                runner.kill()
                raise
        handle = TopologyHandle(runner, self, ui)
        self._topologies[name] = handle
        return handle

    def _dashboard(self, runner: TopologyRunner, topology: Any, host: str, port: int) -> Any:
        """Start the dashboard of ``runner``; it shows the whole run (``Stats`` keep it all)."""
        from statefulbolts.ui import DashboardServer

        spark_ui = self.spark.sparkContext.uiWebUrl if self.spark is not None else None
        server = DashboardServer(runner, topology, host=host, port=port, spark_ui=spark_ui)
        server.start()
        return server

    def _runner(
        self,
        name: str,
        conf: Mapping[str, Any] | None,
        topology: Any,
        clock: Clock | None,
        on_transaction: Callable[[TransactionInfo], None] | None,
        faults: FaultListener | None,
        lease: HeldLease | None,
    ) -> TopologyRunner:
        """The protocol's runner: transactional, or checkpointing (which runs plain ones too)."""
        if isinstance(topology, TransactionalTopology):
            tid = topology.transactional_id
            for handle in self._topologies.values():
                other = handle.runner
                if isinstance(other, TransactionalRunner) and (
                    other.topology.transactional_id == tid
                ):
                    msg = (
                        f"topology {handle.name!r} already runs transactional id {tid!r}: two "
                        "live topologies may not share one (they would share its progress)"
                    )
                    raise TopologyError(msg)
            return TransactionalRunner(
                name,
                conf,
                topology,
                self.spark,
                clock=clock,
                on_transaction=on_transaction,
                faults=faults,
                engine=self.engine,
                lease=lease,
            )
        return CheckpointRunner(
            name,
            conf,
            topology,
            self.spark,
            clock=clock,
            on_transaction=on_transaction,
            faults=faults,
            engine=self.engine,
            lease=lease,
        )

    def kill_topology(self, name: str) -> None:
        """Kill the topology ``name``."""
        handle = self._topologies.get(name)
        if handle is None:
            msg = f"no topology named {name!r}; running: {sorted(self._topologies)}"
            raise TopologyError(msg)
        handle.kill()

    def _forget(self, name: str) -> None:
        self._topologies.pop(name, None)

    def shutdown(self) -> None:
        """Kill every topology, and stop the SparkSession if this cluster created it."""
        for handle in list(self._topologies.values()):
            handle.kill()
        if self._owns_session:
            self.spark.stop()

    def __enter__(self) -> LocalCluster:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
