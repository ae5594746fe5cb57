"""Running a job's tasks in this process, stage after stage, instead of as a Spark job.

``run_inline`` runs a job's tasks with the same code a Spark task runs (``run_task``), in stage
order, each stage's output keyed to the next stage's slots the way ``partitionBy`` would, and
reduces the acks as the driver does after a Spark job. What travels between stages is what a
Spark job ships, sealed as a Spark job seals it (``_sealing``): a value that would not reach the
next task on Spark does not reach it here either. What differs: no images are shipped (a
driver-owned provider's states are the driver's own, written in place), no Python worker tuning
(``run_task(in_worker=False)``), no task retries, and a task's fatal error is raised here, as
the ``TaskFailedError`` a Spark task would raise, instead of arriving wrapped in Spark's
exception.

Two users:

- ``SparkEngine.run_here``: some jobs are too small to be worth Spark's scheduling. A
  transactional batch's commit phase against state the driver holds (the in-memory provider)
  moves a few thousand per-key updates into maps that live in the driver anyway, and a Spark job
  of one Python stage costs 35-60 ms on a 2-core machine however little it carries.
- ``InlineEngine``: the whole topology's jobs, for protocol tests without a SparkSession.

No pyspark here.
"""

from __future__ import annotations

import concurrent.futures
import gc
import pickle
from collections.abc import Mapping, Sequence
from typing import Any

from providers import DriverOwnedStateProvider
from statefulbolts.errors import TopologyError
from statefulbolts.listeners import NO_FAULTS, FaultListener
from statefulbolts.runtime._engine import JobSpec, task_job
from statefulbolts.runtime._images import ImageShipper
from statefulbolts.runtime._plan import ExecutionPlan
from statefulbolts.runtime._program import TaskJob
from statefulbolts.runtime._records import JobResult
from statefulbolts.runtime._results import reduce_acks
from statefulbolts.runtime._sealing import seal_inputs
from statefulbolts.runtime._task import run_task
from statefulbolts.topology import StormTopology

__all__ = ["InlineEngine", "freeze_topology", "run_inline"]


def run_inline(job: TaskJob, topology: bytes, inputs: Sequence[Sequence[Any]]) -> JobResult:
    """Run every stage of ``job`` here; ``inputs[s]`` feeds slot ``s`` of the first stage."""
    layout = job.layout
    if job.images is not None:
        msg = "an inline job uses the driver's own state: it ships no images"
        raise ValueError(msg)
    if layout.depth == 0:
        return JobResult()
    n0 = len(layout.stages[0])
    # The collector stays off for the whole job, unpickling the inputs included (a task turns
    # it off only for its own steps): this is the driver, whose heap a worker's
    # ``freeze_long_lived`` never froze, and a transactional commit unpickles tens of thousands
    # of young objects, enough to start a full collection of that heap (30 ms, as much as the
    # rest of the commit) in one commit of every run of the bench.
    was_on = gc.isenabled()
    gc.disable()
    try:
        sealed = seal_inputs(job.plan, job.txid, inputs)  # as a Spark job ships them
        fed: list[list[tuple[int, list[Any]]]] = [
            [(s, sealed[s] if s < len(sealed) else [])] for s in range(n0)
        ]
        out: list[tuple[int, list[Any]]] = []
        for k in range(layout.depth):
            out = []
            for slot, items in enumerate(fed):
                out.extend(run_task(job, topology, k, slot, items, in_worker=False))
            if k + 1 < layout.depth:
                fed = [[] for _ in layout.stages[k + 1]]
                for key, records in out:
                    fed[key].append((key, records))
        return reduce_acks(out)[0]
    finally:
        if was_on:
            gc.enable()


def task_copy(obj: Any) -> Any:
    """A task's own copy of a user object, as a Spark task would get it (a cloudpickle round trip).

    For what runs in the driver (a spout's tasks): each task gets an instance no other task
    shares, with what cloudpickle carries (lambdas, classes of ``__main__``).
    """
    from pyspark import cloudpickle

    return cloudpickle.loads(cloudpickle.dumps(obj))


def freeze_topology(topology: StormTopology, name: str) -> bytes:
    """``topology`` pickled, as every task loads its own fresh copy of it.

    The standard pickle when it can (a topology of module-level classes), else the cloudpickle
    Spark uses (lambdas, classes defined in a function or in ``__main__``).

    Raises:
        TopologyError: neither can serialize it.
    """
    try:
        return pickle.dumps(topology)
    except (pickle.PicklingError, AttributeError, TypeError):
        pass
    from pyspark import cloudpickle

    try:
        return cloudpickle.dumps(topology)
    except Exception as exc:
        msg = f"topology {name!r} cannot be serialized for its tasks: {exc}"
        raise TopologyError(msg) from exc


def _done(run: Any) -> concurrent.futures.Future[JobResult]:
    """A finished future: ``run()``'s result, or the error it raised (as a failed job's)."""
    done: concurrent.futures.Future[JobResult] = concurrent.futures.Future()
    try:
        done.set_result(run())
    except Exception as exc:  # the job failed, as a Spark job's future would
        done.set_exception(exc)
    return done


class InlineEngine:
    """Runs the jobs of one topology in this process, each as soon as it is submitted.

    The engine of ``LocalCluster(engine="inline")``: no SparkSession, no task retries (a task
    that fails fails its job at once, and the protocol retries the transaction), jobs one at a
    time. A driver-owned provider's state is the driver's own: nothing is shipped, the tasks
    read and write it in place, as a job run by ``SparkEngine.run_here`` does.

    Example:
        >>> from examples.wordcount import build
        >>> engine = InlineEngine(build(10, parallelism=2), "wc", {})
        >>> engine.plan.component_ids
        ['$checkpointspout', 'count', 'sentences', 'split']
        >>> engine.image_shipper(None) is None
        True
    """

    def __init__(
        self,
        topology: StormTopology,
        name: str,
        conf: Mapping[str, Any],
        *,
        faults: FaultListener = NO_FAULTS,
        max_jobs: int = 1,
        lead: int = 0,
        tasks_run_spouts: bool = True,
        key_groups: Mapping[str, int] | None = None,
    ) -> None:
        del max_jobs  # one job at a time: each runs when submitted
        self.name = name
        self.conf = conf
        self.plan = ExecutionPlan(topology, lead, key_groups)
        self.faults = faults
        self._topology = freeze_topology(
            topology if tasks_run_spouts else topology.without_spout_objects(), name
        )

    def image_shipper(self, provider: DriverOwnedStateProvider) -> ImageShipper | None:
        """``None``: the tasks run here, on the driver's own images."""
        return None

    def submit(self, spec: JobSpec) -> concurrent.futures.Future[JobResult]:
        """Run ``spec`` now; the future is done."""
        return self.run_here(spec)

    def run_here(self, spec: JobSpec) -> concurrent.futures.Future[JobResult]:
        """Run ``spec``'s tasks in this process, now; the future is done."""
        if spec.layout.depth == 0:
            return _done(JobResult)
        return _done(
            lambda: run_inline(
                task_job(self.name, self.conf, self.plan, spec, self.faults),
                self._topology,
                spec.inputs,
            )
        )

    def cancel(self, group: str) -> None:
        """Nothing runs between two calls: there is nothing to cancel."""

    def close(self, wait: bool = True) -> None:
        """Nothing to release."""
