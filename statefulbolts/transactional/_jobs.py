"""The three jobs of a transactional batch attempt, as ``JobSpec``s for the engine.

1. **Emit**: one stage, the spout's emitter tasks, each told by an ``EmitOrder`` what to emit;
   the spout object as it is on the driver goes with the job (memory spouts are read live). The
   emitted tuples come back to the driver, so the next attempt's emission may start from the
   metas this one returned (docs/protocol/transactional.md), so a tuple is never recomputed from
   lineage (an opaque replay may differ).
2. **Processing**: the processing-phase bolts (neither a committer nor downstream of one) in
   stages, fed with what the emitters sent them; what they send to the commit phase comes back.
3. **Commit**: the commit-phase components in stages, fed with everything the emitters and the
   processing phase sent them; committers use maps in the state provider under
   ``$transactional/<id>/<component>-<task>`` (a driver-owned provider's go with the job, as
   ``ImageShipper`` descriptors).

A commit job may also run in the driver instead of as a Spark job (``commit_here``, after
``topology.transactional.commit.location``): with a driver-owned provider ("auto") the maps
live in the driver anyway, and a commit applies a batch's few updates to them; a Spark job
for that costs more than the work and ships the maps to the tasks (``Engine.run_here``).

When only one txid may be active (``topology.max.spout.pending`` 1) no emission ever waits for
another's metas, so 1 and 2 are one job (``emit_and_process``): the emitters are its first stage
and their tuples go straight to the processing bolts, not through the driver. Only what the
commit phase needs, and the metas, come back.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from providers import StateProvider
from statefulbolts.config import Config
from statefulbolts.listeners import NO_FAULTS, FaultListener, TaskPoint
from statefulbolts.namespaces import TRANSACTIONAL_ROOT, TaskNamespace, transactional_prefix
from statefulbolts.runtime import (
    ExecutionPlan,
    ImageShipper,
    JobLayout,
    JobSpec,
    ShippedImage,
    TupleBatch,
)
from statefulbolts.transactional._attempt import TransactionAttempt
from statefulbolts.transactional._phase import BatchAction
from statefulbolts.transactional._task import BatchTaskProgram, EmitOrder, StateMaps
from statefulbolts.transactional._topology import TransactionalTopology

__all__ = ["TransactionalJobs"]

COMMIT_LOCATION = Config.TOPOLOGY_TRANSACTIONAL_COMMIT_LOCATION


class TransactionalJobs:
    """Builds the jobs of every attempt of one transactional topology."""

    def __init__(
        self,
        name: str,
        topology: TransactionalTopology,
        plan: ExecutionPlan,
        conf: Mapping[str, Any],
        provider: StateProvider,
        faults: FaultListener = NO_FAULTS,
        images: ImageShipper | None = None,
        commit_location: str = "auto",
        lineage: bool = True,
    ) -> None:
        self._name, self._topology, self._plan, self._conf = name, topology, plan, conf
        self._shipper = images
        self._provider = provider
        self._faults = faults
        self._lineage = lineage  # batch bolts pass lineages on (poison tuples are isolated)
        self.tid = topology.transactional_id
        self.root = f"{TRANSACTIONAL_ROOT}/{self.tid}"  # the prefix, without its last "/"
        self.spout = plan.index[topology.spout_id]
        commit = {plan.index[c] for c in topology.commit_phase}
        self.commit_components = frozenset(commit)
        self.processing_components = frozenset(
            plan.index[c] for c in topology.processing_phase if plan.index[c] != self.spout
        )
        self._emit_layout = plan.flat_layout(plan.tasks(self.spout))
        # The processing phase chains what it can (``JobLayout.narrow``): a task failing its
        # batch fails the attempt whatever the next stage does. The commit phase does not.
        self._fused_layout = plan.layout({self.spout} | self.processing_components, chain=True)
        self._processing_layout = plan.layout(self.processing_components, chain=True)
        self._commit_layout = plan.layout(commit)
        self.commit_here = _commit_here(commit_location, topology)
        if self.commit_here and commit_location == "auto":
            # The listener refuses a fault that needs a Spark worker there (said outright,
            # "driver" is the user's choice and stands).
            faults.on_driver_tasks(topology.commit_phase, tuple(TaskPoint), COMMIT_LOCATION)

    def emit(self, attempt: TransactionAttempt, order: EmitOrder) -> JobSpec:
        """The emit job of ``attempt``, as ``order`` says."""
        program = BatchTaskProgram(attempt, self.tid, emit=order, lineage=self._lineage)
        return self._spec(attempt, self._emit_layout, program, [], BatchAction.EMIT)

    def emit_and_process(self, attempt: TransactionAttempt, order: EmitOrder) -> JobSpec:
        """One job for both: the emitters of ``attempt`` as its first stage, then its P bolts."""
        program = BatchTaskProgram(attempt, self.tid, emit=order, lineage=self._lineage)
        return self._spec(attempt, self._fused_layout, program, [], BatchAction.EMIT_PROCESS)

    def processing(self, attempt: TransactionAttempt, emitted: Iterable[TupleBatch]) -> JobSpec:
        """The processing job of ``attempt``, fed with what its emitters sent the P bolts."""
        program = BatchTaskProgram(attempt, self.tid, lineage=self._lineage)
        return self._spec(attempt, self._processing_layout, program, emitted, BatchAction.PROCESS)

    def commit(self, attempt: TransactionAttempt, to_commit: Iterable[TupleBatch]) -> JobSpec:
        """The commit job of ``attempt``, fed with every tuple sent to the commit phase.

        Run in the driver when ``commit_here`` (its maps are the driver's own, not shipped).
        """
        # No lineage in the commit phase: a failure there is never isolated.
        program = BatchTaskProgram(
            attempt,
            self.tid,
            StateMaps(self._conf),
            committing=True,
            faults=self._faults,
            lineage=False,
        )
        spec = self._spec(attempt, self._commit_layout, program, to_commit, BatchAction.COMMIT)
        if self._shipper is None or self.commit_here:
            return spec
        return JobSpec(**{**spec.__dict__, "images": self._images()})

    @property
    def has_processing(self) -> bool:
        """Whether any bolt runs in the processing phase."""
        return self._processing_layout.depth > 0

    def for_commit(self, batch: TupleBatch) -> bool:
        """Whether ``batch`` goes to a component of the commit phase."""
        return batch.dest in self.commit_components

    def _spec(
        self,
        attempt: TransactionAttempt,
        layout: JobLayout,
        program: BatchTaskProgram,
        records: Iterable[TupleBatch],
        action: BatchAction,
    ) -> JobSpec:
        inputs: list[list[Any]] = [[] for _ in layout.stages[0]] if layout.depth else []
        for r in records:
            if layout.depth and layout.runs(r.dest):
                inputs[layout.key_for(-1, r.dest, r.dest_task)].append(r)
        return JobSpec(
            layout,
            program,
            inputs,
            attempt.transaction_id,
            "",
            group=f"{self._name}-{attempt}",
            state_root=self.root,
            lead=(attempt,),
            action=action,
            attempt=attempt.attempt_id,
        )

    def _images(self) -> dict[str, bytes | ShippedImage]:
        """A driver-owned provider's state of every commit-phase task (its maps).

        Told apart by ``TaskNamespace.parse``, not by a string prefix: ``count-2-0/default``
        is task 0 of ``count-2``, and no map of ``count``'s.
        """
        shipper = self._shipper
        assert shipper is not None  # noqa: S101
        names = self._plan.component_ids
        committing = {names[comp] for comp in self.commit_components}
        prefix = transactional_prefix(self.tid)
        found = []
        for namespace in self._provider.namespaces(self._conf, prefix) or []:
            task = TaskNamespace.parse(prefix, namespace)
            if task is not None and task.component in committing:
                found.append(namespace)
        return shipper.ship(found)


def _commit_here(where: str, topology: TransactionalTopology) -> bool:
    """Whether the commit phase runs in the driver (``topology.transactional.commit.location``).

    "driver" and "executors" say so. "auto": in the driver, whatever the provider (the driver
    keeps the coordinator's state in it, so it reaches it; an in-memory map lives there), as
    a commit phase is short and strictly one batch at a time, where a Spark job's own cost
    (tens of ms) would be most of it. Injected faults (``topology.faults``) never change it:
    under "auto", a run whose faults cannot fire in the driver is refused
    (``FaultListener.on_driver_tasks``).
    """
    if where != "auto":
        return where == "driver"
    return True
