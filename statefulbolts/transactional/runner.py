"""The transactional protocol's driver loop: batches processed in parallel, committed in order.

``TransactionalRunner`` holds the coordinator (``TransactionalSpoutCoordinator``, a pure state
machine whose ``currtx`` and metas live in the state provider), the emitters' partition metas
(``EmitterMetas``) and one ``_Batch`` per active txid, and runs each batch attempt's three jobs
through the ``Engine`` (``TransactionalJobs``). A step of its loop:

1. Settle every job that ended (``_ended``):

   - **emit** ended: the partition metas are stored (partitioned) or kept (opaque), and the
     processing job starts with what the emitters sent the processing phase;
   - **processing** ended: the batch is PROCESSED (``coordinator.ack``); what it sent to the
     commit phase waits with the batch;
   - **commit** ended: the opaque metas are stored, then the coordinator acks the commit, which
     moves ``currtx`` on and deletes the metas below it in one write.

   Any failure (a ``FailedException``, a task Spark gave up on, an aborted job) fails the
   attempt: it and every later active txid are dropped, their jobs cancelled, and the
   coordinator starts them again with new attempts (after a backoff; a state outage is waited
   out, as in the checkpoint protocol). A processing job that failed on a poison tuple first
   dead-letters the emitted tuple it came from, which every replay of its txid leaves out
   (``_isolation``); the replay starts at once.
2. Start the next emission, strictly one at a time and in txid order: t+1's partitions start
   where t's emission ended. With ``max.spout.pending`` 1 the emission is the first stage of
   the processing job (``TransactionalJobs.emit_and_process``): no other txid can wait for
   its metas, so the batch need not come back to the driver in between. Its partitioned metas
   are then stored when that job ends, still before any commit. Above 1, t+1's emission runs
   while t is processed, as Storm emits a txid's batch when the txid starts (a spout whose
   partitions grow shows the new rows in the same txids as in Storm).
3. Poll the coordinator (``sync``): it commits ``currtx`` when it is processed and starts new
   txids while fewer than ``topology.max.spout.pending`` are active. After a batch that emitted
   nothing committed, the active txids drain and new ones start one at a time, an interval
   apart (``Pacing``); the topology is idle when the last committed batch was empty and
   nothing is active.

Up to ``max.spout.pending`` processing jobs run at once; commits one at a time, in order.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from providers import KeyValueState, StateFactory
from recovery.gate import Failure
from statefulbolts.clock import Clock
from statefulbolts.context import TopologyContext
from statefulbolts.errors import TopologyError
from statefulbolts.listeners import FaultListener, KillPoint
from statefulbolts.namespaces import TaskNamespace, transactional_prefix
from statefulbolts.protocol_runner import ProtocolRunner
from statefulbolts.runtime import (
    HeldLease,
    JobResult,
    Progress,
    TransactionInfo,
    TupleBatch,
    describe_job_failure,
    worker_traceback,
)
from statefulbolts.state import merged_state
from statefulbolts.ticks import refuse_ticks
from statefulbolts.transactional._attempt import TransactionAttempt
from statefulbolts.transactional._coordinator import (
    FIRST_TXID,
    CoordinatorCommand,
    StartBatch,
    TransactionalSpoutCoordinator,
    opaque_coordinator,
    partitioned_coordinator,
)
from statefulbolts.transactional._deadletters import TransactionalDeadLetters
from statefulbolts.transactional._emitting import OPAQUE, PARTITIONED, PLAIN, EmitterMetas
from statefulbolts.transactional._jobs import TransactionalJobs
from statefulbolts.transactional._maps import read_backing_state
from statefulbolts.transactional._pacing import Pacing
from statefulbolts.transactional._phase import BatchAction, BatchPhase
from statefulbolts.transactional._spouts import (
    OpaquePartitionedTransactionalSpout,
    PartitionedTransactionalSpout,
)
from statefulbolts.transactional._task import BatchFailed, EmitResult
from statefulbolts.transactional._topology import TransactionalTopology
from statefulbolts.transactional.progress import TransactionalProgress

__all__ = ["TransactionalRunner"]

log = logging.getLogger(__name__)

# How often an idle driver asks the coordinator whether a new txid may start, at most.
_POLL_MS = 20.0


@dataclass
class _Batch:
    """One active txid on the driver: its live attempt and where it is."""

    attempt: TransactionAttempt
    meta: Any
    committed: int | None
    started: float = field(default_factory=time.perf_counter)
    phase: BatchPhase = BatchPhase.QUEUED
    future: concurrent.futures.Future[JobResult] | None = None
    tuples: int = 0
    to_commit: list[TupleBatch] = field(default_factory=list)
    job_started: float = 0.0
    phases: dict[str, float] = field(default_factory=dict)
    fused: bool = False  # its emitters run as the first stage of its processing job

    @property
    def txid(self) -> int:
        return self.attempt.transaction_id


class TransactionalRunner(ProtocolRunner):
    """Runs one transactional topology on an engine (see the module docstring).

    ``engine``: "spark" (the default) runs its jobs on the SparkSession ``spark``; "inline"
    runs them in this process (``spark`` unused, may be ``None``).
    """

    kind = "transactional"

    def __init__(
        self,
        name: str,
        conf: Mapping[str, Any] | None,
        topology: TransactionalTopology,
        spark: Any,
        *,
        clock: Clock | None = None,
        on_transaction: Callable[[TransactionInfo], None] | None = None,
        faults: FaultListener | None = None,
        engine: str = "spark",
        lease: HeldLease | None = None,
    ) -> None:
        if not isinstance(topology, TransactionalTopology):
            msg = f"expected a TransactionalTopology, got {type(topology).__name__}"
            raise TopologyError(msg)
        self.topology = topology
        super().__init__(
            name,
            conf,
            topology.topology,
            spark,
            stateful=topology.commit_phase,
            keeps_state=True,  # the coordinator's progress and the emitters' metas
            engine=engine,
            clock=clock,
            on_transaction=on_transaction,
            faults=faults,
            lease=lease,
        )
        provider = self.provider
        assert provider is not None  # noqa: S101 - keeps_state
        with self._closing_engine():
            self.jobs = TransactionalJobs(
                name,
                topology,
                self.plan,
                self.conf,
                provider,
                self.faults,
                self.images,
                self.tc.transactional_commit_location,
                lineage=self.tc.deadletter_policy == "isolate",
            )
        self.deadletters = TransactionalDeadLetters(
            name,
            topology.transactional_id,
            self.tc,
            self.conf,
            self._system_state,
            self.stats,
            self._failures,
            self.clock,
            self.plan.task_id,
            self.faults,
        )
        self._live: dict[int, _Batch] = {}
        self._coordinator: TransactionalSpoutCoordinator | None = None
        self._pacing: Pacing | None = None
        self._metas: EmitterMetas | None = None
        self._last_empty: bool | None = None
        self._next_poll = 0.0

    # ----------------------------------------------------------------- what the base asks
    def _check_before_opening(self) -> None:
        refuse_ticks(self.topology.topology.components, self.tc.tick_tuple_freq_secs, self.name)

    @property
    def max_pending(self) -> int:
        """Active txids at most (``topology.max.spout.pending``, 1 when unset)."""
        return self.tc.max_spout_pending or 1

    def _engine_options(self) -> dict[str, Any]:
        # Every tuple's first value is its batch's attempt: not shipped (``lead``).
        return {"max_jobs": self.max_pending + 2, "lead": 1}

    # ----------------------------------------------------------------- lifecycle
    def _open_protocol(self) -> None:
        """Adapt the stored state; open the spout's coordinator; resume where the id stopped."""
        tid = self.topology.transactional_id
        self._evolve(
            transactional_prefix(tid),
            TransactionalProgress(),
            f"statefulbolts state evolve --conf <config file> --id {tid} "
            "--topology-module <module>:<function building the topology>",
        )
        spout = self.topology.spout
        context = TopologyContext(self.topology.topology, self.name, self.topology.spout_id, 0)
        user = spout.get_coordinator(self.conf, context)
        if isinstance(spout, PartitionedTransactionalSpout):
            kind, adapted = PARTITIONED, partitioned_coordinator(user)
        elif isinstance(spout, OpaquePartitionedTransactionalSpout):
            kind, adapted = OPAQUE, opaque_coordinator(user)
        else:
            kind, adapted = PLAIN, user
        self._pacing = Pacing(adapted, self.clock, lambda: bool(self._live))
        state = self._system_state(f"{self.jobs.root}/coordinator")
        self._coordinator = TransactionalSpoutCoordinator(
            self._pacing, state, max_pending=self.max_pending
        )
        self._metas = EmitterMetas(kind, tid, self._system_state)
        coordinator = self._coordinator
        self.deadletters.open(kind, coordinator.curr, coordinator.metas.txids())

    def _system_state(self, namespace: str) -> KeyValueState:
        state = StateFactory.get_system_state(namespace, self.conf)
        if not isinstance(state, KeyValueState):
            msg = (
                f"the state provider made a {type(state).__name__} for {namespace!r}; the "
                "transactional protocol keeps its records in a KeyValueState"
            )
            raise TopologyError(msg)
        return state

    def _stop_jobs(self) -> None:
        for batch in self._live.values():
            if batch.future is not None:
                self.engine.cancel(self._group(batch))

    def _close_sources(self) -> None:
        if self._coordinator is not None:
            self._coordinator.close()

    def _wait_a_little(self) -> None:
        running = [b.future for b in self._live.values() if b.future is not None]
        if running:
            concurrent.futures.wait(running, timeout=0.002, return_when="FIRST_COMPLETED")
        else:
            self._stop.wait(0.002)

    def _state_namespaces(self) -> dict[str, list[str] | None]:
        """Per committer (and other commit-phase component with maps), its tasks' maps.

        Listed from the provider at each count: a task's map exists once it was first
        committed, and its name is the bolt's choice. ``None`` when the provider cannot list.
        """
        topology = self.topology
        prefix = transactional_prefix(topology.transactional_id)
        provider = self.provider
        assert provider is not None  # noqa: S101 - the protocol keeps state
        listed = provider.namespaces(self.conf, prefix)
        if listed is None:
            return dict.fromkeys(sorted(topology.committers))
        maps: dict[str, list[str]] = {cid: [] for cid in sorted(topology.committers)}
        for namespace in listed:
            task = TaskNamespace.parse(prefix, namespace)
            # Below the prefix are the protocol's records too ("partition-3": no map).
            if task is None or task.map is None or task.component not in topology.commit_phase:
                continue
            maps.setdefault(task.component, []).append(namespace)
        return dict(maps)

    def _group(self, batch: _Batch) -> str:
        return f"{self.name}-{batch.attempt}"

    # ----------------------------------------------------------------- the loop
    def _step(self) -> bool:
        progressed = False
        self.deadletters.poll()
        if self.state_keys is not None:
            self.state_keys.tick()
        for batch in list(self._live.values()):
            future = batch.future
            if future is not None and future.done() and self._live.get(batch.txid) is batch:
                batch.future = None
                self._ended(batch, future)
                progressed = True
        if self._failures.ready():
            progressed = self._poll() or progressed
            progressed = self._start_emit() or progressed
        self._set_idle(not self._live and self._last_empty is True)
        return progressed

    def _poll(self) -> bool:
        now = self.clock.now_ms()
        if now < self._next_poll:
            return False
        self._next_poll = now + _POLL_MS
        assert self._coordinator is not None  # noqa: S101 - opened
        commands = self._coordinator.sync()
        self._execute(commands)
        return bool(commands)

    def _execute(self, commands: list[CoordinatorCommand]) -> None:
        for command in commands:
            if isinstance(command, StartBatch):
                txid = command.attempt.transaction_id
                self._live[txid] = _Batch(command.attempt, command.metadata, command.committed_txid)
            else:
                batch = self._live[command.attempt.transaction_id]
                coordinator = self._coordinator
                assert coordinator is not None  # noqa: S101 - it gave the command
                self._failures.with_backend(
                    f"checking the store before committing txid {batch.txid}",
                    lambda: coordinator.check_store(batch.txid),  # noqa: B023 - called at once
                )
                batch.phase = BatchPhase.COMMITTING
                batch.started = time.perf_counter()
                spec = self.jobs.commit(batch.attempt, batch.to_commit)
                if self.jobs.commit_here:  # done when it returns; ``_step`` takes it next
                    batch.job_started = time.perf_counter()
                    batch.future = self.engine.run_here(spec)
                else:
                    self._submit(batch, spec)

    def _start_emit(self) -> bool:
        """Start the lowest queued emission, unless one runs: t+1 starts where t ended."""
        if any(b.phase is BatchPhase.EMITTING or b.fused for b in self._live.values()):
            return False
        queued = [b for b in self._live.values() if b.phase is BatchPhase.QUEUED]
        if not queued:
            return False
        batch = min(queued, key=lambda b: b.txid)
        assert self._metas is not None  # noqa: S101 - opened
        order = self._metas.order(batch.txid, batch.meta, batch.committed)
        order = dataclasses.replace(order, spout=self.topology.spout)
        order = self.deadletters.adjust(batch.txid, order)
        if self.max_pending == 1:
            batch.phase, batch.fused = BatchPhase.PROCESSING, True
            self._submit(batch, self.jobs.emit_and_process(batch.attempt, order))
            self.faults.on_driver(KillPoint.DURING_PROCESSING, batch.txid)
            return True
        batch.phase = BatchPhase.EMITTING
        self._submit(batch, self.jobs.emit(batch.attempt, order))
        return True

    def _submit(self, batch: _Batch, spec: Any) -> None:
        batch.job_started = time.perf_counter()
        batch.future = self.engine.submit(spec)

    # ----------------------------------------------------------------- a job ended
    def _ended(self, batch: _Batch, future: concurrent.futures.Future[JobResult]) -> None:
        phase = batch.phase
        batch.phases[phase.job.timing] = round(time.perf_counter() - batch.job_started, 4)
        exc = future.exception()
        if exc is not None:
            error, component, task, cause = describe_job_failure(exc)
            trace = worker_traceback(exc)
            # Before the commit phase nothing of the txid is written: an emitted tuple that does
            # not pickle (its emitter's own error, the emitting phase's) is left out as any.
            processing = phase is not BatchPhase.COMMITTING
            verdict = self.deadletters.isolate(batch.txid, processing, error, trace)
            if verdict.isolated:
                cause = f"{cause}; the emitted tuple it came from was dead-lettered"
                failure = Failure.TRANSIENT
            else:
                failure, cause = self._judged(error, verdict, cause)
            self._failed(batch, cause, component, task, failure, trace, isolated=verdict.isolated)
            return
        result = future.result()
        owned = self.images if phase is BatchPhase.COMMITTING else None
        errors = self.stats.take_reports(result, self.plan, batch.txid, owned, log)
        if result.aborted:
            self._failed(batch, *self._why_aborted(result, errors))
            return
        if phase is BatchPhase.EMITTING:
            self._emitted(batch, result)
        elif phase is BatchPhase.PROCESSING:
            if batch.fused:  # the emitters ran in this job (``_start_emit``)
                self._take_emission(batch, result)
                batch.to_commit = []
                batch.fused = False  # its emission is over: the next one may start
            self._processed(batch, result)
        elif phase is BatchPhase.COMMITTING:
            self._committed(batch)
        else:
            msg = f"txid {batch.txid}: a job ended while its batch was {phase.value}"
            raise AssertionError(msg)

    def _why_aborted(
        self, result: JobResult, errors: list[Any]
    ) -> tuple[str, str, int, Failure]:
        names = self.plan.component_ids
        for report in result.reports:
            if isinstance(report.result, BatchFailed):  # a FailedException: retried
                return report.result.cause, names[report.comp], report.task, Failure.TRANSIENT
        return "a task failed the batch", "", -1, Failure.TRANSIENT

    def _take_emission(self, batch: _Batch, result: JobResult) -> None:
        """Keep what the emitters of ``result`` returned: their metas, how many they emitted."""
        assert self._metas is not None  # noqa: S101
        spout = self.jobs.spout
        emits = [r for r in result.reports if r.comp == spout]
        results = [r.result for r in emits if isinstance(r.result, EmitResult)]
        self._metas.emitted(batch.txid, results)
        self.deadletters.emitted(batch.txid, results)
        batch.tuples = sum(r.metrics.emitted for r in emits)

    def _emitted(self, batch: _Batch, result: JobResult) -> None:
        self._take_emission(batch, result)
        batch.to_commit = [b for b in result.outputs if self.jobs.for_commit(b)]
        if not self.jobs.has_processing:
            self._processed(batch, JobResult())
            return
        batch.phase = BatchPhase.PROCESSING
        rest = [b for b in result.outputs if not self.jobs.for_commit(b)]
        self._submit(batch, self.jobs.processing(batch.attempt, rest))
        self.faults.on_driver(KillPoint.DURING_PROCESSING, batch.txid)

    def _processed(self, batch: _Batch, result: JobResult) -> None:
        batch.to_commit.extend(result.outputs)
        batch.phase = BatchPhase.PROCESSED
        self.faults.on_driver(KillPoint.AFTER_PROCESSED, batch.txid)
        assert self._coordinator is not None  # noqa: S101
        self._execute(self._coordinator.ack(batch.attempt))

    def _committed(self, batch: _Batch) -> None:
        coordinator, metas = self._coordinator, self._metas
        assert coordinator is not None and metas is not None  # noqa: S101
        self.faults.on_driver(KillPoint.AFTER_COMMIT, batch.txid)
        self._failures.with_backend(
            f"storing the metas of txid {batch.txid}", lambda: metas.committed(batch.txid)
        )
        del self._live[batch.txid]
        # Pacing first: the coordinator's ack starts the next txids at once.
        self._last_empty = batch.tuples == 0
        if self._pacing is not None:
            self._pacing.committed(self._last_empty, self.tc.checkpoint_interval_ms)
        commands = self._failures.with_backend(
            f"storing the commit of txid {batch.txid}",
            lambda: coordinator.ack(batch.attempt),
        )
        self._failures.succeeded()
        self.deadletters.committed(batch.txid)
        if self.state_keys is not None:
            self.state_keys.committed(batch.txid)
        seconds = time.perf_counter() - batch.started
        phases = dict(batch.phases)
        n = batch.tuples
        info = TransactionInfo(batch.txid, BatchAction.COMMIT, n, seconds, True, n, phases=phases)
        self.stats.record(info)
        self._execute(commands)

    def _failed(
        self,
        batch: _Batch,
        cause: str,
        component: str | None,
        task: int | None,
        failure: Failure,
        trace: str | None = None,
        *,
        isolated: bool = False,
    ) -> None:
        """Fail the attempt: drop it and every later active txid; the coordinator replays.

        ``failure``: what it is (``recovery.gate.Failure``); ``isolated``: it failed on a tuple
        now dead-lettered, and the replay starts at once.
        """
        assert self._coordinator is not None and self._metas is not None  # noqa: S101
        phase = batch.phase.job.label
        if batch.fused:
            phase = BatchAction.EMIT_PROCESS  # as its job is labelled
        log.warning("%s(%s) failed (%s): %s", phase, batch.attempt, component or "spark", cause)
        seconds = time.perf_counter() - batch.started
        info = TransactionInfo(
            batch.txid, phase, batch.tuples, seconds, False, 0, batch.tuples, cause
        )
        self.stats.record(
            info,
            component=component or None,
            task=task,
            traceback=trace,
        )
        for txid in [t for t in self._live if t >= batch.txid]:
            dropped = self._live.pop(txid)
            if dropped.future is not None:
                self.engine.cancel(self._group(dropped))
        self._metas.failed_from(batch.txid)
        commands = self._coordinator.fail(batch.attempt)
        what = f"{phase}({batch.attempt})"
        if isolated:
            self._failures.isolated(what, batch.txid)
        else:
            self._failures.failed(
                what,
                batch.txid,
                cause,
                component=component or None,
                task=task,
                failure=failure,
            )
        self._execute(commands)

    # ----------------------------------------------------------------- reading
    def status(self) -> dict[str, Any]:
        """Where the topology is: the next txid to commit, and every active one."""
        with self._lock:
            coord = self._coordinator
            return {
                "transactional_id": self.topology.transactional_id,
                "current_txid": coord.curr if coord is not None else None,
                "active": {
                    str(t): {
                        "attempt": str(b.attempt),
                        "phase": "emitting+processing" if b.fused else b.phase.value,
                    }
                    for t, b in sorted(self._live.items())
                },
                "state_shape": self.shape_lines,
                "dead_letters": self.deadletters.status(),
            }

    def _progress(self) -> Progress:
        """The active txids and their phases; the last committed txid (before ``currtx``)."""
        status = self.status()
        current = status.get("current_txid")
        active = status.get("active") or {}
        phase = ", ".join(f"{t}: {a.get('phase')}" for t, a in active.items()) or "waiting"
        committed = current - 1 if isinstance(current, int) and current > FIRST_TXID else None
        return Progress(phase, committed, None)

    def read_state(self, component_id: str, name: str = "default") -> dict[Any, Any]:
        """The committed values of a committer's map ``name``, merged over its tasks.

        Read from each state's committed map (``committed_items``): a write staged and not
        committed never shows.
        """
        spec = self.topology.topology.component(component_id)
        prefix = transactional_prefix(self.topology.transactional_id)
        namespaces = [
            str(TaskNamespace(prefix, component_id, task, name)) for task in range(spec.parallelism)
        ]
        with self._lock:
            return merged_state(
                self.conf,
                namespaces,
                system=True,
                entries=lambda items: read_backing_state(items).items(),
            )
