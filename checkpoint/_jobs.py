"""The jobs of the checkpoint protocol: what each action runs, over which tasks, fed with what.

- An action that carries data (PREPARE; and every batch of a topology without stateful bolts)
  runs every bolt, stage by stage, fed with the spouts' buffered tuples; the checkpoint tuple
  follows the data of each first-stage task it reaches, and every task forwards it after its
  own data, so each task sees the barrier from all of its inputs after all of their data.
- Tick tuples (``checkpoint._ticks``) go with a job that carries data: every task of a ticking
  bolt gets the ticks the driver took for the job, before its data.
- A small data job's stateless head (its leading stages of stateless bolts) may run in the
  driver, the rest on Spark (``checkpoint._head``, ``topology.driver.head``): the word count's
  PREPARE is then one Spark stage.
- A data-free action (COMMIT, ROLLBACK, INITSTATE) is one stage over the stateful tasks, each
  fed the checkpoint tuple from every one of its checkpoint input tasks, as if forwarded down
  the DAG: forwarders have no state and no hooks, so skipping them changes nothing but the cost
  (one stage instead of one per level).

A driver-owned provider's state goes with every job of a checkpointed topology (as
``ImageShipper`` descriptors: what changed since a worker's copy, see ``_images``): each
stateful task restarts from it, and the driver applies what the tasks did once the job
succeeded.

A COMMIT that runs no user code (``checkpoint.commit_hooks`` finds no ``pre_commit``) is no job
at all under ``topology.state.commit.location`` "auto" (``commit_here``): the driver commits
every stateful task's state through the provider, a driver-owned one by applying the change log
a task would have returned (``commit_changes``), so the workers' kept images follow.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Collection, Mapping, Sequence
from typing import Any

from checkpoint._expected import check_stored_txids
from checkpoint._head import HEAD_KEY, DriverHead, HeadMode, fed
from checkpoint._ledger import RootLedger
from checkpoint._partitioned import TaskReads
from checkpoint._spouts import SpoutTask
from checkpoint._state import Action
from checkpoint._ttl import component_ttls
from checkpoint.driver_commit import commit_hooks
from checkpoint.task import CheckpointTaskProgram
from providers import DriverOwnedStateProvider, StateBackendError, StateFactory, StateProvider
from statefulbolts.config import Config
from statefulbolts.listeners import NO_FAULTS, FaultListener, TaskPoint
from statefulbolts.namespaces import (
    TaskNamespace,
    timers_namespace,
    topology_prefix,
    window_namespace,
)
from statefulbolts.runtime import (
    ExecutionPlan,
    ImageShipper,
    JobLayout,
    JobResult,
    JobSpec,
    LateInputs,
    ShippedImage,
    TupleBatch,
    encode_task_error,
)
from statefulbolts.timers import uses_timers
from statefulbolts.topology import CHECKPOINT_STREAM_ID, StormTopology
from statefulbolts.windowing import WindowedBoltExecutor

__all__ = ["CheckpointJobs"]

COMMIT_LOCATION = Config.TOPOLOGY_STATE_COMMIT_LOCATION


class CheckpointJobs:
    """Builds the ``JobSpec`` of each action of one checkpointed (or plain) topology."""

    def __init__(
        self,
        name: str,
        topology: StormTopology,
        plan: ExecutionPlan,
        ledger: RootLedger,
        images: ImageShipper | None,
        *,
        ackers: int,
        faults: FaultListener = NO_FAULTS,
        provider: StateProvider | None = None,
        conf: Mapping[str, Any] | None = None,
        commit_location: str = "auto",
        driver_head: HeadMode = "never",
        head_budget_ms: float = 0.0,
        ticking: Collection[str] = (),
    ) -> None:
        self._name, self._topology, self._plan, self._ledger = name, topology, plan, ledger
        self._prefix = topology_prefix(name)
        self._shipper = images
        self._ackers, self._faults = ackers, faults
        self._provider, self._conf = provider, conf or {}
        self.spout: SpoutTask | None = None  # the checkpoint spout's task, once it opened
        self.commits_here = _commits_here(commit_location, topology, provider)
        if self.commits_here:
            # A COMMIT done here tells the listener each state committed, in the driver: a
            # fault there that needs a Spark worker refuses the run.
            stateful = [cid for cid, spec in topology.components.items() if spec.is_stateful]
            faults.on_driver_tasks(stateful, (TaskPoint.COMMITTED,), COMMIT_LOCATION)
        # State TTL per stateful component, validated now: a bad setting fails the submit.
        self._ttls = component_ttls(topology, self._conf)
        # Components whose tasks keep timers beside their state (``statefulbolts.timers``),
        # and windowed bolts, whose windows are (``statefulbolts.windowing``).
        self._timed = frozenset(
            cid for cid, spec in topology.components.items() if uses_timers(spec.obj)
        )
        self._windowed = frozenset(
            cid
            for cid, spec in topology.components.items()
            if isinstance(spec.obj, WindowedBoltExecutor)
        )
        # The bolts a data job's head may hold (``checkpoint._head``, rule 1).
        movable = {
            plan.index[cid]
            for cid, spec in topology.components.items()
            if not (spec.is_spout or spec.is_stateful)
            and cid not in self._timed
            and cid not in self._windowed
            and cid not in ticking
        }
        self.head = DriverHead(
            driver_head, head_budget_ms, plan.layout(plan.bolts(), chain=True), movable
        )
        if self.head.components:
            # The head's tasks may run in the driver: a fault there that needs a Spark worker
            # refuses the run, naming the setting that keeps them on Spark.
            names = [plan.component_ids[c] for c in sorted(self.head.components)]
            faults.on_driver_tasks(names, (TaskPoint.TUPLE,), HEAD_KEY, away="never")

    def job(
        self,
        txid: int,
        action: Action | None,
        records: list[TupleBatch],
        tuples: int,
        *,
        ticks: Mapping[str, tuple[int, int]] | None = None,
        started_ms: float | None = None,
        reads: Mapping[tuple[str, int], TaskReads] | None = None,
        late: bool = False,
    ) -> tuple[JobSpec, int | None]:
        """The job of ``action`` (``None``: a plain batch); and the checkpoint tuple's root.

        ``ticks``: per ticking bolt, ``(tick tuples, rate_secs)`` for each of its tasks (only
        in a job that carries data: every bolt task runs in it); ``started_ms``: the
        transaction's timestamp (``checkpoint._txstart``); ``reads``: what each partitioned
        spout task reads (``checkpoint._partitioned``): their components run first in the job.
        """
        plan = self._plan
        cp_root = None
        if action is None or action.carries_data:
            spouts = sorted({plan.index[cid] for cid, _ in reads or {}})
            # No task fails a job on purpose: every boundary that can chain does.
            layout = plan.layout([*spouts, *plan.bolts()], chain=True)
            inputs: list[list[Any]] = self.place(layout, records)
            if action is not None and layout.depth:
                cp_root = self._add_checkpoint(inputs, layout, txid, action)
            ackers = self._ackers
            # The head moves only in the layout it was chosen for: no partitioned spout reads.
            head = 0 if spouts else self.head.stages(tuples if late else fed(records))
        else:
            layout = plan.flat_layout(plan.stateful_tasks())
            inputs, cp_root = self._checkpoint_per_task(txid, action)
            ackers, head = 0, 0
        carries = action is None or action.carries_data
        program = CheckpointTaskProgram(
            action,
            txid,
            self._faults,
            dict(ticks or {}) if carries else {},
            started_ms,
            self._ttls if action is not None else {},
            dict(reads or {}) if carries else {},
        )
        spec = JobSpec(
            layout,
            program,
            inputs,
            txid,
            f"{tuples} tuples",
            ackers=ackers,
            images=self._images(),
            action=action or "BATCH",  # an ``Action`` is the ``str`` the engine takes
            driver_stages=head,
            late=LateInputs() if late else None,
        )
        return spec, cp_root

    @staticmethod
    def place(layout: JobLayout, records: Sequence[TupleBatch]) -> list[list[TupleBatch]]:
        """``records`` per first-stage slot of ``layout`` (a late-cut job's data)."""
        inputs: list[list[TupleBatch]] = [[] for _ in layout.stages[0]] if layout.depth else []
        for r in records:
            inputs[layout.key_for(-1, r.dest, r.dest_task)].append(r)
        return inputs

    def observe(self, result: JobResult, records: Sequence[TupleBatch]) -> None:
        """A data job fed ``records`` succeeded: what its head cost (``DriverHead.observe``)."""
        self.head.observe(result, records)

    def commit_here(self, txid: int) -> tuple[concurrent.futures.Future[JobResult], int]:
        """COMMIT(txid) done by the driver, no job (see the module docstring).

        The future is done: an empty result (every state committed), or the error of the first
        state that could not commit, encoded as its task's would be.
        """
        done = concurrent.futures.Future[JobResult]()
        root = self._ledger.new_root()  # the checkpoint tuple's, as the job would have had
        try:
            self._commit_all(txid)
        except Exception as exc:  # as a failed Spark job's future holds it
            done.set_exception(exc)
        else:
            done.set_result(JobResult())
        return done, root

    def _commit_all(self, txid: int) -> None:
        plan, faults = self._plan, self._faults
        tasks = [(plan.component_ids[c], t) for c, t in plan.stateful_tasks()]
        done = self._commit_at_once(tasks, txid)
        for cid, t in tasks:
            try:
                for namespace in self._namespaces(cid, t):
                    if namespace not in done:
                        self._commit_one(namespace, txid)
            except Exception as exc:
                spec = self._topology.component(cid)
                raise encode_task_error(exc, cid, t, txid, spec.user_class) from exc
            faults.on_task_committed(cid, t, txid)

    def _commit_at_once(self, tasks: list[tuple[str, int]], txid: int) -> set[str]:
        """The namespaces the provider committed in one go (``StateProvider.commit_namespaces``).

        Not with a fault listener: its mid-commit faults need the tasks committed one at a
        time, each told to it before the next commits. A store that could not be reached
        commits nothing here; the one-by-one path then reports it against its task.
        """
        provider = self._provider
        if (
            provider is None
            or self._faults is not NO_FAULTS
            or isinstance(provider, DriverOwnedStateProvider)
        ):
            return set()
        names = [ns for cid, t in tasks for ns in self._namespaces(cid, t)]
        try:
            return set(provider.commit_namespaces(self._conf, names, txid))
        except StateBackendError:
            return set()

    def _commit_one(self, namespace: str, txid: int) -> None:
        provider = self._provider
        state = StateFactory.get_state(namespace, self._conf)
        check_stored_txids(state, Action.COMMIT, txid)  # as a task's COMMIT would
        if isinstance(provider, DriverOwnedStateProvider):
            changes = provider.commit_changes(namespace, txid)
            if changes is None:
                return
            if self._shipper is not None:
                self._shipper.apply_changes(namespace, changes)
            else:
                provider.apply_changes(namespace, changes)
            return
        state.commit(txid)

    def _add_checkpoint(
        self, inputs: list[list[Any]], layout: JobLayout, txid: int, action: Action
    ) -> int:
        """Put the checkpoint tuple after the data of every first-stage task it reaches."""
        st = self.spout
        assert st is not None  # noqa: S101 - a checkpointed topology opened its spout
        root = self._ledger.new_root()
        vals = [txid, action.value]
        for dest, dtask in st.router.targets(st.comp, 0, vals):
            batch = TupleBatch(dest, dtask, st.comp, st.task, 0, [vals], [root], None)
            inputs[layout.key_for(-1, dest, dtask)].append(batch)
        return root

    def _checkpoint_per_task(self, txid: int, action: Action) -> tuple[list[list[Any]], int]:
        """A data-free action for every stateful task, from each of its checkpoint inputs."""
        plan = self._plan
        root = self._ledger.new_root()
        vals = [txid, action.value]
        per_task: list[list[Any]] = []
        for c, t in plan.stateful_tasks():
            batches = []
            for inp in self._topology.inputs(plan.component_ids[c]):
                if inp.source.stream_id != CHECKPOINT_STREAM_ID:
                    continue
                src = plan.index[inp.source.component_id]
                s = plan.checkpoint_stream[src]
                assert s is not None  # noqa: S101 - every source declares $checkpoint
                for src_task in plan.sending_tasks(src, s, c, t):
                    batches.append(TupleBatch(c, t, src, src_task, s, [vals], [root], None))
            per_task.append(batches)
        return per_task, root

    def _namespaces(self, component: str, task: int) -> list[str]:
        """A stateful task's namespaces: its state's, its timers' and its windows' if it has."""
        task_ns = TaskNamespace(self._prefix, component, task)
        own = str(task_ns)
        found = [own]
        if component in self._timed:
            found.append(timers_namespace(own))
        if component in self._windowed:
            found.append(window_namespace(task_ns))
        return found

    def _images(self) -> dict[str, bytes | ShippedImage] | None:
        """The driver-owned state of every stateful task, shipped with its job."""
        if self._shipper is None:
            return None
        names = self._plan.component_ids
        return self._shipper.ship(
            ns for c, t in self._plan.stateful_tasks() for ns in self._namespaces(names[c], t)
        )


def _commits_here(
    where: str,
    topology: StormTopology,
    provider: StateProvider | None,
) -> bool:
    """Whether COMMITs are done by the driver (``topology.state.commit.location``).

    "executors": never. "auto": when the topology has stateful bolts, none of them has a
    ``pre_commit`` (``checkpoint.commit_hooks``), and the provider can commit from here (a
    driver-owned one must give the change log, ``commit_changes``). Injected faults
    (``topology.faults``) never change the answer: a COMMIT feeds a task no data tuple, so only
    a fault ``"at": "committed"`` fires in it (one that needs a Spark worker refuses the run,
    ``FaultListener.on_driver_tasks``), and the mid-commit driver kill fires here as in a
    task. Any other
    provider can: Spark runs a task wherever it likes, so a namespace must be reachable from
    every process of the application, and the driver already keeps the checkpoint spout's
    state there.
    """
    if where != "auto" or provider is None or commit_hooks(topology):
        return False
    stateful = {cid for cid in topology.components if topology.component(cid).is_stateful}
    if not stateful:
        return False
    if isinstance(provider, DriverOwnedStateProvider):
        return type(provider).commit_changes is not DriverOwnedStateProvider.commit_changes
    return True
