"""The checkpoint protocol's driver loop: one checkpoint transaction is one Spark job.

``CheckpointRunner`` owns the user spouts (``SpoutTasks``), the ledger of their live tuples
(``RootLedger``), the ``CheckpointSpout`` and the transaction manifest, and runs every job
through the ``Engine``. A step of its loop:

1. Gather: call the user spouts' ``next_tuple`` (within ``topology.max.spout.pending``) into the
   emit buffer. Gathering goes on while a job runs, so spouts and Spark overlap.
2. When no job runs, ask the checkpoint spout for its next action (``_next_transaction``). An
   action that carries data (PREPARE) takes the whole buffer with it, and the tick tuples due
   by the driver's clock (``_ticks``; a PREPARE replayed takes the same ticks again,
   ``_txstart``); the others (COMMIT, ROLLBACK, INITSTATE) are one data-free stage over the
   stateful tasks. An idle topology (nothing buffered, no tick due) runs no empty PREPAREs.
   When a PREPARE is due is the checkpoint spout's cadence: by default as soon as the last
   transaction committed, if anything waits (``_tuples_wait``), so under load the transactions
   run one after the other and each carries what arrived during the one before.
3. When the job ends (``_finish``): apply driver-owned state changes, settle every root the job
   carried, and move the checkpoint spout on (``_advance``): a successful PREPARE is the commit
   decision (the manifest is saved, then COMMITTING); a successful COMMIT acks the spout tuples
   of its transaction; a ROLLBACK fails every tuple not yet committed; a failed action starts
   the spout's recovery.
4. A failed job rolls back through the checkpoint spout's recovery, after a backoff; a state
   backend outage is waited out instead (``topology.state.backend.timeout.secs``); after
   ``topology.max.transaction.retries`` consecutive failures the topology stops with an error
   naming component, task, txid and cause. A job that failed on a poison tuple dead-letters
   its spout tuple first, and is retried at once without it (``_deadletters``).

Partitioned spouts (``_partitioned``) are not gathered here: each PREPARE's job reads them in
its first stage, from the positions the last commit saved, and the driver saves the positions
they end at with COMMITTING(t), in the same commit. A PREPARE is due for them while any of
their partitions may hold more (``PartitionedSpout.has_more``).

A topology without stateful bolts has no checkpoint spout: its jobs are batches, one after the
other while tuples wait (under the ``interval`` cadence, one per checkpoint interval), and its
tuples are acked as soon as their job ends. A batch carries the
ticks due when it starts; a batch that fails gives its ticks back to the next one.
"""

from __future__ import annotations

import concurrent.futures
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from checkpoint._deadletters import CheckpointDeadLetters
from checkpoint._jobs import CheckpointJobs
from checkpoint._ledger import RootLedger
from checkpoint._manifest import SpoutMessages, TransactionManifest
from checkpoint._partitioned import PartitionedSpouts
from checkpoint._spouts import SpoutTask, SpoutTasks
from checkpoint._state import Action, TxPhase
from checkpoint._ticks import TickSchedule
from checkpoint._txstart import TransactionStarts
from checkpoint.progress import CheckpointProgress
from checkpoint.spout import CheckpointSpout
from providers import FATAL_STATE_ERRORS
from statefulbolts.clock import Clock
from statefulbolts.collectors import SpoutOutputCollector
from statefulbolts.context import TopologyContext
from statefulbolts.deadletter import Verdict
from statefulbolts.errors import CheckpointError, TopologyError, TopologyFailedError
from statefulbolts.listeners import FaultListener, KillPoint
from statefulbolts.namespaces import TaskNamespace, topology_prefix
from statefulbolts.protocol_runner import ProtocolRunner
from statefulbolts.runtime import (
    HeldLease,
    JobLayout,
    JobResult,
    LateInputs,
    Progress,
    Router,
    TransactionInfo,
    TupleBatch,
    describe_job_failure,
    worker_traceback,
)
from statefulbolts.state import merged_state
from statefulbolts.ticks import tick_frequencies
from statefulbolts.topology import CHECKPOINT_COMPONENT_ID, StormTopology
from statefulbolts.tuples import DEFAULT_STREAM

T = TypeVar("T")

__all__ = ["CheckpointRunner"]

log = logging.getLogger(__name__)
# While a job runs: gather for a slice, then pause so the job thread can take the GIL.
_GATHER_SLICE = 0.001
_GATHER_PAUSE = 0.0001


@dataclass
class _Job:
    txid: int
    action: Action | None
    roots: list[int]
    started: float
    future: concurrent.futures.Future[JobResult]
    cp_root: int | None = None
    recovering: bool = False  # the checkpoint spout was recovering when the job started
    records: list[TupleBatch] = field(default_factory=list)  # the spout tuples it carries
    ticks: dict[str, int] = field(default_factory=dict)  # tick tuples per bolt (each task)
    layout: JobLayout | None = None  # its stages (None: no job, a COMMIT done here)
    # Seconds: how long the oldest tuple it took had waited in the buffer, and building it.
    waited: float = 0.0
    building: float = 0.0
    done_at: float = 0.0  # when its future completed (on the engine's thread)
    late: LateInputs | None = None  # its input, cut when its first task asks (``_cut``)


class _CheckpointCollector(SpoutOutputCollector):
    """Keeps the checkpoint spout's emits; the runner turns them into jobs."""

    def __init__(self) -> None:
        self.emits: list[tuple[int, Action]] = []

    def emit(self, values: Any, message_id: Any = None, stream: str = DEFAULT_STREAM) -> None:
        self.emits.append((int(values[0]), Action(values[1])))

    def report_error(self, error: BaseException) -> None:
        log.warning("checkpoint spout reported %s: %s", type(error).__name__, error)


class CheckpointRunner(ProtocolRunner):
    """Runs one topology of Storm's checkpointing protocol on an engine.

    ``engine``: "spark" (the default) runs its jobs on the SparkSession ``spark``; "inline"
    runs them in this process (``spark`` unused, may be ``None``).
    """

    kind = "checkpoint"

    def __init__(
        self,
        name: str,
        conf: Mapping[str, Any] | None,
        topology: StormTopology,
        spark: Any,
        *,
        clock: Clock | None = None,
        on_transaction: Callable[[TransactionInfo], None] | None = None,
        faults: FaultListener | None = None,
        engine: str = "spark",
        lease: HeldLease | None = None,
    ) -> None:
        if not isinstance(topology, StormTopology):
            msg = f"expected a StormTopology from create_topology(), got {type(topology).__name__}"
            raise TopologyError(msg)
        self.topology = topology
        stateful = [cid for cid, spec in topology.components.items() if spec.is_stateful]
        super().__init__(
            name,
            conf,
            topology,
            spark,
            stateful=stateful,
            keeps_state=topology.has_stateful_bolt,
            engine=engine,
            clock=clock,
            on_transaction=on_transaction,
            faults=faults,
            lease=lease,
        )
        prefix = topology_prefix(name)  # the name is valid: the base checked it
        # Each stateful component's namespaces, for the committed-key counter (``_advance``).
        self._namespaces = {
            cid: [str(TaskNamespace(prefix, cid, t)) for t in range(spec.parallelism)]
            for cid, spec in topology.components.items()
            if spec.is_stateful
        }
        self.starts: TransactionStarts | None = None  # each PREPARE's time and ticks, once open
        self.ledger = RootLedger(
            timeout_secs=self.tc.message_timeout_secs, timeouts=self.tc.enable_message_timeouts
        )
        with self._closing_engine():
            # Partitioned spouts are read in the PREPARE jobs (``_partitioned``), not here.
            self.partitioned = PartitionedSpouts(
                topology, self.plan, self.conf, self.tc.max_spout_pending
            )
            if self.partitioned and not topology.has_stateful_bolt:
                msg = (
                    f"topology {name!r}: partitioned spouts {list(self.partitioned.components)} "
                    "save their positions with the checkpoint, and this topology has no stateful "
                    "bolt to checkpoint; add one, or use a Spout"
                )
                raise TopologyError(msg)
            # A stateless head moves to the driver only from Spark's tasks (the inline engine
            # runs every task here), and only while the spouts are read here (a partitioned
            # spout is read by the job's first stage).
            moves = not self.engine.in_driver and not self.partitioned
            # A job's input cut when its first task asks (``statefulbolts.runtime._late``).
            self._late = self.engine.late_binding and self.tc.input_cut == "task-start"
            self.jobs = CheckpointJobs(
                name,
                topology,
                self.plan,
                self.ledger,
                self.images,
                ackers=self.tc.acker_partitions,
                faults=self.faults,
                provider=self.provider,
                conf=self.conf,
                commit_location=self.tc.state_commit_location,
                driver_head=self.tc.driver_head if moves else "never",
                head_budget_ms=self.tc.driver_head_budget_ms,
                ticking=self._tick_rates,
            )
            self.spouts = SpoutTasks(
                topology,
                self.plan,
                name,
                self.conf,
                self.ledger,
                self.stats,
                tracking=self.tc.tracking,
                max_pending=self.tc.max_spout_pending,
                skip=(CHECKPOINT_COMPONENT_ID, *self.partitioned.components),
            )
        self.cp: CheckpointSpout | None = None
        self._cp_out = _CheckpointCollector()
        self._job: _Job | None = None
        self._last_batch_ms: float | None = None
        self._plain_txid = 0
        self._yielded = time.perf_counter()
        self._buffered_since: float | None = None  # when the buffer last stopped being empty
        self._buffer_began_ms: float | None = None  # the same by the topology's clock
        self._manifest: TransactionManifest | None = None
        self.deadletters = CheckpointDeadLetters(
            name,
            self.tc,
            self.conf,
            self.plan,
            self.spouts,
            self.ledger,
            self.stats,
            self._failures,
            self.clock,
            self.faults,
        )

    # ----------------------------------------------------------------- what the base asks
    def _check_before_opening(self) -> None:
        """A bad tick frequency is the user's to fix, not a run's error: refused first."""
        frequencies = tick_frequencies(self.topology.components, self.tc.tick_tuple_freq_secs)
        self.ticks = TickSchedule(frequencies, self.clock.now_ms())
        self._tick_rates = frequencies

    def _engine_options(self) -> dict[str, Any]:
        # Spouts run here, in the driver (``_spouts``): tasks get the topology without them.
        return {"tasks_run_spouts": False}

    def _state_namespaces(self) -> Mapping[str, list[str] | None]:
        return self._namespaces

    # ----------------------------------------------------------------- lifecycle
    def _open_protocol(self) -> None:
        """Open the spouts, adapt the stored state, then open the checkpoint spout.

        If anything fails, close the spouts that opened (the base closes the engine).
        """
        opened = False
        try:
            self.spouts.open()
            opened = True
            self.deadletters.open_source()  # before recovery: a manifest may name replays
            if self.topology.has_stateful_bolt:
                name = self.name
                self._evolve(
                    topology_prefix(name),
                    CheckpointProgress(),
                    f"statefulbolts state evolve --conf <config file> --topology {name} "
                    "--topology-module <module>:<function building the topology>",
                )
                self._open_checkpoint_spout()
            self.deadletters.load()  # before any spout runs
        except BaseException:
            if opened:
                self.spouts.close()
            raise

    def _open_checkpoint_spout(self) -> None:
        cp = CheckpointSpout(self.clock, self._tuples_wait)
        c = self.plan.index[CHECKPOINT_COMPONENT_ID]
        st = SpoutTask(c, 0, cp, Router(self.plan, c, 0), CHECKPOINT_COMPONENT_ID)
        st.context = TopologyContext(self.topology, self.name, CHECKPOINT_COMPONENT_ID, 0)
        cp.open(self.conf, st.context, self._cp_out)
        self.jobs.spout, self.cp = st, cp
        assert cp.state is not None  # noqa: S101 - open() read it
        self._manifest = TransactionManifest(cp.state)
        self.partitioned.recover(cp.state)
        ticks, clock = self.ticks, self.clock
        self.starts = TransactionStarts(cp.state, clock.wall_ms, lambda: ticks.take(clock.now_ms()))
        # COMMITTED(t) saved with t's message ids: t committed, its spout acks may not have.
        self.spouts.ack_recovered(self._manifest.recover(cp.cur))

    def _stop_jobs(self) -> None:
        job, self._job = self._job, None
        if job is not None:
            if job.late is not None:  # its tasks wait for input no cut will give
                job.late.refuse(CheckpointError("the topology stopped before its input was cut"))
            try:
                job.future.result()
            except Exception:  # noqa: BLE001 - the topology is stopping; the job is abandoned
                log.info("job %s(%s) ended with an error while stopping", job.action, job.txid)

    def _close_sources(self) -> None:
        self.spouts.close()

    def _wait_a_little(self) -> None:
        self._yielded = time.perf_counter()
        job = self._job
        if job is not None:
            late = job.late
            waits: list[concurrent.futures.Future[Any]] = [job.future]
            if late is not None and not late.given:
                waits.append(late.asked)
            concurrent.futures.wait(waits, timeout=0.002, return_when="FIRST_COMPLETED")
        else:
            self._stop.wait(0.002)

    def _after_progress(self) -> None:
        # Gathering holds the GIL; the thread submitting the Spark job needs it for every py4j
        # reply and would otherwise wait a whole switch interval (5 ms) each time. A short
        # sleep hands it over.
        if self._job is not None and time.perf_counter() - self._yielded > _GATHER_SLICE:
            time.sleep(_GATHER_PAUSE)
            self._yielded = time.perf_counter()

    # ----------------------------------------------------------------- the loop
    def _step(self) -> bool:
        self.ledger.tick(self.clock.now_ms())
        self.deadletters.poll()
        if self.state_keys is not None:
            self.state_keys.tick()
        job = self._job
        if job is not None:
            late = job.late
            if late is not None and late.wanted and not late.given:
                self._cut(job)
            if job.future.done():
                self._job = None
                if late is not None and not late.given:  # the job ended before it asked
                    late.refuse(CheckpointError("the job ended before it took its input"))
                self._finish(job)
                return True
            return self._gather() > 0
        gathered = self._gather()
        if not self._failures.ready():
            return gathered > 0
        if self._next_transaction(gathered):
            self._set_idle(False)
            return True
        self._set_idle(gathered == 0 and self._quiet())
        return gathered > 0

    def _quiet(self) -> bool:
        """Nothing buffered, nothing live, the last checkpoint committed, not recovering."""
        cp = self.cp
        return (
            not self.spouts.buffered
            and not self.ledger.live
            and (cp is None or (not cp.recovering and cp.cur.phase is TxPhase.COMMITTED))
            and not self.ticks.due(self.clock.now_ms())
            and not (self.partitioned and self._partitioned_has_more())
        )

    def _gather(self) -> int:
        # While recovering, a crashed run's messages may still be acked by the recovery (see
        # the manifest); gathering now could replay them first. Without a manifest to deliver
        # (a fresh start, or a crash before the commit decision) the spouts need not wait.
        manifest = self._manifest
        if self.cp is not None and self.cp.recovering and manifest is not None and manifest.pending:
            return 0
        gathered = self.spouts.gather()
        if gathered and self._buffered_since is None:
            self._buffered_since = time.perf_counter()
            self._buffer_began_ms = self.clock.now_ms()
        return gathered

    def _partitioned_has_more(self) -> bool:
        """``PartitionedSpouts.has_more``, a source's outage waited out as the store's is."""
        return self._from_sources("asking partitioned spouts for more", self.partitioned.has_more)

    def _from_sources(self, what: str, call: Callable[[], T]) -> T:
        """``call`` (a partitioned spout's driver half), its source's outage waited out.

        A refusal stops the topology with the source's own error, which names it and the fix.
        """
        try:
            return self._failures.with_backend(what, call)
        except TopologyFailedError as exc:
            if exc.fatal and isinstance(exc.__cause__, FATAL_STATE_ERRORS):
                raise exc.__cause__ from None
            raise

    def _tuples_wait(self) -> bool:
        """Whether anything waits for a transaction: spout tuples buffered, or a tick due.

        Under the ``back-to-back`` cadence this makes a PREPARE due (``CheckpointSpout``), and a
        plain topology's batch. Tuples buffered while a spout is still producing (a backlog:
        ``SpoutTasks.producing``) wait for it to stop, for the pending limit or a full buffer,
        or for one interval since the buffer began: a transaction started on the first burst
        after a commit would carry 64 tuples of a backlog and leave the rest for the next.
        A partitioned spout's records are not counted: asking its source costs a listing or a
        broker round trip, so it is asked once per interval, as before.
        """
        now = self.clock.now_ms()
        if self.ticks.due(now):
            return True
        if not self.spouts.buffered:
            return False
        began = self._buffer_began_ms
        filling = began is not None and now - began <= self.tc.checkpoint_interval_ms
        return not (self.spouts.producing and filling)

    def _filling_first(self, gathered: int) -> bool:
        """Whether to hold the first transaction back (see ``SpoutTasks.still_filling``)."""
        interval = self.tc.checkpoint_interval_ms
        return self.spouts.still_filling(gathered, self.clock.now_ms(), interval)

    def _next_transaction(self, gathered: int) -> bool:
        """Start the next job if one is due; whether one started."""
        cp = self.cp
        if cp is None:
            return self._next_batch(gathered)
        needs_recovery = cp.recovering or cp.cur.phase is not TxPhase.COMMITTED
        ticking = self.ticks.due(self.clock.now_ms())
        nothing = not needs_recovery and not self.spouts.buffered and not ticking
        if nothing and not self.partitioned:
            return False  # nothing to checkpoint: skip empty PREPAREs
        if not cp.due():
            return False
        if nothing and not self._partitioned_has_more():
            return False  # asked once due: a partitioned spout may list a directory
        if not needs_recovery and not cp.has_checkpointed and self._filling_first(gathered):
            return False
        if not needs_recovery and self.starts is not None:
            # The spout saves PREPARING(t + 1) next: t + 1's time and ticks go in that commit.
            self.starts.begin(cp.cur.txid + 1)
        self._failures.with_backend("starting a checkpoint", cp.next_tuple)
        emits, self._cp_out.emits = self._cp_out.emits, []
        if not emits:
            return False
        txid, action = emits[-1]
        self._submit(txid, action)
        return True

    def _next_batch(self, gathered: int) -> bool:
        """A topology without checkpointing: a batch of what is buffered.

        It goes as the checkpoint spout's PREPARE would (``topology.state.checkpoint.cadence``):
        ``back-to-back``, as soon as the last batch ended; ``interval``, once per interval.
        """
        now = self.clock.now_ms()
        last = self._last_batch_ms
        if self.tc.checkpoint_cadence == "back-to-back":
            due = last is None or self._tuples_wait()
        else:
            due = last is None or now - last > self.tc.checkpoint_interval_ms
        if not ((self.spouts.buffered or self.ticks.due(now)) and due):
            return False
        if self._last_batch_ms is None and self._filling_first(gathered):
            return False
        self._last_batch_ms = now
        self._plain_txid += 1
        self._submit(self._plain_txid, None, self.ticks.take(now), self.clock.wall_ms())
        return True

    # ----------------------------------------------------------------- starting a job
    def _submit(
        self,
        txid: int,
        action: Action | None,
        ticks: dict[str, int] | None = None,
        started_ms: float | None = None,
    ) -> None:
        """Start ``action``'s job (``None``: a plain batch, with its ``ticks`` and time).

        A checkpoint action's time and ticks are its transaction's (``self.starts``).
        """
        carries = action is None or action.carries_data
        started = time.perf_counter()  # before: an inline job, or a commit here, runs in submit
        late = carries and self._late and not self.partitioned
        records: list[TupleBatch] = []
        roots: list[int] = []
        waited = 0.0
        if not late:
            records, roots = self.spouts.take() if carries else ([], [])
            waited = self._took(started) if carries else 0.0
        starts = self.starts
        if action is not None and starts is not None:
            started_ms = starts.time_of(txid)
            last = starts.last
            if carries and last is not None and last.txid == txid:
                ticks = dict(last.ticks)
        ticks = ticks or {}
        rates = self._tick_rates
        per_task = {cid: (n, rates[cid]) for cid, n in ticks.items() if n and cid in rates}
        reads = None
        if action is not None and action.carries_data and self.partitioned:
            # A source's outage (a Kafka broker away) is waited out as the store's is.
            reads = self._from_sources(
                "listing the partitioned spouts' partitions",
                lambda: self.partitioned.orders(txid, self.ledger.reserve),
            )
        cp_root: int | None
        layout = None
        if action is Action.COMMIT and self.jobs.commits_here:
            future, cp_root = self.jobs.commit_here(txid)
            built = started
        else:
            spec, cp_root = self.jobs.job(
                txid,
                action,
                records,
                self.spouts.buffered if late else len(roots),
                ticks=per_task,
                started_ms=started_ms,
                reads=reads,
                late=late,
            )
            layout, built = spec.layout, time.perf_counter()
            future = self.engine.submit(spec)
        recovering = self.cp is not None and self.cp.recovering
        job = _Job(txid, action, roots, started, future, cp_root, recovering, records, ticks)
        job.layout, job.waited, job.building = layout, waited, built - started
        job.late = spec.late if late and layout is not None else None
        future.add_done_callback(lambda _f: setattr(job, "done_at", time.perf_counter()))
        self._job = job

    def _took(self, now: float) -> float:
        """The buffer was just taken: how long its oldest tuple had waited (seconds)."""
        since, waited = self._buffered_since, 0.0
        if since is not None:
            self._buffered_since, waited = None, now - since
            self._buffer_began_ms = None
        return waited

    def _cut(self, job: _Job) -> None:
        """A late-cut job's first task asked for its input: take the buffer now (``_late``)."""
        late = job.late
        assert late is not None and job.layout is not None  # noqa: S101
        try:
            records, roots = self.spouts.take()
            job.waited = self._took(time.perf_counter())
            job.records, job.roots = records, roots
            late.give(self.jobs.place(job.layout, records))
        except BaseException as exc:
            late.refuse(exc)
            raise

    # ----------------------------------------------------------------- a job ended
    def _finish(self, job: _Job) -> None:
        finishing = time.perf_counter()
        seconds = finishing - job.started
        exc = job.future.exception()
        if exc is not None:
            self._job_failed(job, exc, seconds)
            return
        result = job.future.result()
        if job.action is None or job.action.carries_data:
            self.jobs.observe(result, job.records)  # what its head cost, for the next ones
        errors = self.stats.take_reports(result, self.plan, job.txid, self.images, log)
        ok = job.cp_root is None or (
            job.cp_root not in result.fails and not result.acks.get(job.cp_root, 0)
        )
        if ok and job.action is Action.PREPARE and self.partitioned:
            unread = self.partitioned.finished(job.txid, result)
            if unread is not None:
                log.warning("%s", unread)
                ok = False
        complete, failed = self.ledger.settle(job.roots, result, ok)
        if self.cp is None:
            self.ledger.ack(complete)
            self.deadletters.committed()
        else:
            self.ledger.await_commit(job.txid, complete)
            self._advance(job, ok, errors[-1] if errors else None)
        read = self.partitioned.read_in(job.txid)  # a partitioned spout's tuples (PREPARE)
        acked, failed = (len(complete) + read, failed) if ok else (len(complete), failed + read)
        info = TransactionInfo(
            job.txid, job.action, len(job.roots) + read, seconds, ok, acked, failed
        )
        info.recovery = job.recovering
        info.phases = _phases(job, result, finishing)
        if not ok:
            info.error = errors[-1].text if errors else "checkpoint failed"
        self.stats.record(info)

    def _advance(self, job: _Job, ok: bool, error: Any) -> None:
        """Move the checkpoint spout on after its action's job (step 3 of the module doc)."""
        cp, faults, txid, action = self.cp, self.faults, job.txid, job.action
        assert cp is not None and action is not None  # noqa: S101
        if not ok:
            self._failures.with_backend("recording a failed checkpoint", lambda: cp.fail(txid))
            cause = error.text if error is not None else "a checkpoint tuple was failed"
            failure, cause = self._judged(error, Verdict(False), cause)
            self._failures.failed(f"{action.value}({txid})", txid, cause, failure=failure)
            return
        if action.decides_commit:
            faults.on_driver(KillPoint.AFTER_PREPARE, txid)
            self._save_manifest(txid)
            if self.partitioned and cp.state is not None:
                self.partitioned.save(txid, cp.state)  # committed with COMMITTING(t)
        what = f"saving checkpoint state after {action.value}({txid})"
        self._failures.with_backend(what, lambda: cp.ack(txid))
        if action.decides_commit:
            self.partitioned.saved(txid)
            faults.on_driver(KillPoint.AFTER_COMMITTING_SAVED, txid)
        if action.makes_durable:
            self._failures.succeeded()
            self.deadletters.committed()
            faults.on_driver(KillPoint.AFTER_COMMITTED, txid)
            self.ledger.committed(txid)
            if self._manifest is not None:
                self.spouts.ack_recovered(self._manifest.committed(txid))
            if self.state_keys is not None:
                self.state_keys.committed(txid)
        elif action.discards:
            self.ledger.discard_awaiting()

    def _job_failed(self, job: _Job, exc: BaseException, seconds: float) -> None:
        error, component, task, cause = describe_job_failure(exc)
        name = job.action.value if job.action is not None else "BATCH"
        log.warning("%s(%s) failed (%s): %s", name, job.txid, component or "spark", cause)
        trace = worker_traceback(exc)
        # A poison tuple's spout tuple is dead-lettered (and acked) before the others fail.
        verdict = self.deadletters.isolate(job.txid, job.roots, job.records, error, trace)
        self.partitioned.failed(job.txid)
        self.ledger.fail_all(job.roots)
        cp = self.cp
        if cp is None:
            self.ticks.give_back(job.ticks)  # a batch is not replayed: the next one has them
        if cp is not None and job.cp_root is not None:
            self._failures.with_backend("recording a failed checkpoint", lambda: cp.fail(job.txid))
        failed = len(job.roots) - verdict.isolated
        info = TransactionInfo(job.txid, job.action, len(job.roots), seconds, False, 0, failed)
        info.error, info.recovery = cause, job.recovering
        if verdict.isolated:
            info.error = f"{cause}; its spout tuple was dead-lettered"
        self.stats.record(info, component=component, task=task, traceback=trace)
        what = f"{name}({job.txid})"
        if verdict.isolated:
            self._failures.isolated(what, job.txid)
            return
        failure, cause = self._judged(error, verdict, cause)
        self._failures.failed(
            what, job.txid, cause, component=component, task=task, failure=failure
        )

    # ----------------------------------------------------------------- the transaction manifest
    def _save_manifest(self, txid: int) -> None:
        """Before COMMITTING(t) is saved: the message ids t carried (``checkpoint._manifest``)."""
        cp = self.cp
        # A driver-owned provider's data dies with the driver, so no restart could read it: the
        # manifest would cost encoding every message id of the transaction for nothing.
        if cp is None or self._manifest is None or self._owned is not None:
            return
        tasks = self.spouts.tasks
        groups = [
            SpoutMessages(tasks[i].name, tasks[i].task, ids)
            for i, ids in self.ledger.awaiting_messages(txid).items()
        ]
        self._manifest.save(txid, groups)

    # ----------------------------------------------------------------- reading
    def status(self) -> dict[str, Any]:
        """A snapshot of where the topology is."""
        with self._lock:
            job = self._job
            return {
                "checkpoint": str(self.cp.cur) if self.cp else None,
                "recovering": self.cp.recovering if self.cp else False,
                "buffered": self.spouts.buffered,
                "live_roots": len(self.ledger.live),
                "awaiting_commit": self.ledger.awaiting,
                "job": (
                    f"{job.action.value if job.action else 'BATCH'}({job.txid})" if job else None
                ),
                "state_shape": self.shape_lines,
                "dead_letters": self.deadletters.status(),
                "partition_positions": self.partitioned.positions,
            }

    def read_state(self, component_id: str) -> dict[Any, Any]:
        """The committed state of a stateful component, merged over its tasks.

        What a transaction prepared and did not commit does not show (``merged_state``).
        """
        spec = self.topology.component(component_id)
        if not spec.is_stateful:
            msg = f"component {component_id!r} is not a stateful bolt"
            raise TopologyError(msg)
        with self._lock:
            prefix = topology_prefix(self.name)
            namespaces = [
                str(TaskNamespace(prefix, component_id, t)) for t in range(spec.parallelism)
            ]
            return merged_state(self.conf, namespaces)

    def _progress(self) -> Progress:
        """The checkpoint spout's phase, and its ``committed_txid``."""
        cp, job = self.cp, self._job
        running = f"{job.action.value if job.action else 'BATCH'}({job.txid})" if job else None
        pending = len(self.ledger.live)
        if cp is None:
            return Progress(f"running {running}" if running else "waiting", None, pending)
        cur = cp.cur
        phase = f"{cur}{' recovering' if cp.recovering else ''}"
        if running:
            phase += f", running {running}"
        return Progress(phase, cur.committed_txid, pending)

    def spout_lags(self) -> dict[str, int]:
        """Per spout component, what its source holds not yet acked (see ``SpoutTasks.lags``).

        A partitioned spout's: the sum of its partitions' (``partition_lags``).
        """
        partitioned = {cid: sum(p.values()) for cid, p in self.partition_lags().items()}
        return {**self.spouts.lags(), **partitioned}

    def partition_lags(self) -> dict[str, dict[str, int]]:
        """Per partitioned spout, per partition, the records after its committed position."""
        return self.partitioned.lags()

    def spout_gaps(self) -> dict[str, int]:
        """Per partitioned spout, the gaps its readers jumped (records their source lost)."""
        return dict(self.partitioned.gaps)

    def _counters(self) -> dict[str, dict[str, float]]:
        """The counters per component, spout emits included."""
        comps = super()._counters()
        emits = {**self.spouts.emitted_per_component(), **self.partitioned.emitted}
        for name, emitted in emits.items():
            comps.setdefault(name, {})["emitted"] = emitted
        for name, acked in self.partitioned.acked.items():
            comps.setdefault(name, {})["acked"] = acked
        return comps


def _phases(job: _Job, result: JobResult, finishing: float) -> dict[str, float]:
    """Where a job's time went, in seconds (``TransactionInfo.phases``; the latency breakdown).

    ``waited``: the oldest tuple it carries, in the buffer before the job was built;
    ``build``: the driver taking the buffer and building the job; then on the engine's thread
    ``head`` (the job's leading stages the driver ran itself, ``checkpoint._head``; only when
    it did), ``engine`` (the job's description, sealing, the RDD chain, merging the results) and
    ``spark`` (Spark's run of the job), of which the tasks' own ``task_setup``,
    ``task_execute`` (the executors' steps: the user's code and the loops feeding it) and
    ``task_output``, each a mean over the tasks Spark ran times its stages (what one tuple
    crossing every Spark stage waits); ``noticed``: job done -> the driver's loop took it up;
    ``settle``: settling its roots and moving the checkpoint spout on. A job whose input was
    cut when its first task asked (``topology.input.cut`` ``task-start``) also has
    ``scheduled``, its build and Spark's part before that ask (no tuple of it waited for
    those), and ``feed``, the cut and the sealing after it (within ``spark``); its ``engine``
    is then that ``feed`` and the merging, the engine's work on its tuples' path.
    """
    phases = {"waited": job.waited, "build": job.building}
    timings, layout = result.timings, job.layout
    if timings is not None and layout is not None:
        if timings.head_stages:
            phases["head"] = timings.head
        phases["engine"] = timings.before + timings.after
        phases["spark"] = timings.spark
        if job.late is not None:
            # Cut late: the build and Spark's scheduling before the first task asked came
            # before any of its tuples was taken (``scheduled``); ``feed`` is in ``spark``.
            phases["engine"] = timings.feed + timings.after
            phases["scheduled"] = timings.before + timings.asked
            phases["feed"] = timings.feed
        here = timings.head_stages
        reports = [r for r in result.reports if (layout.stage_of[r.comp] or 0) >= here]
        stages = layout.depth - here
        if reports and stages:
            per = stages / len(reports)
            setup = sum(r.metrics.setup for r in reports) * per
            execute = sum(r.metrics.execute for r in reports) * per
            total = sum(r.metrics.seconds for r in reports) * per
            phases |= {
                "task_setup": setup,
                "task_execute": execute,
                "task_output": total - setup - execute,
            }
    if job.done_at:
        phases["noticed"] = max(finishing - job.done_at, 0.0)
    phases["settle"] = time.perf_counter() - finishing
    return {k: round(v, 6) for k, v in phases.items()}
