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

Three users:

- ``SparkEngine.run_here``: some jobs are too small to be worth Spark's scheduling. A
  transactional batch's commit phase against state the driver holds (the in-memory provider)
  moves a few thousand per-key updates into maps that live in the driver anyway, and a Spark job
  of one Python stage costs 35-60 ms on a 2-core machine however little it carries.
- ``SparkEngine.run`` of a job whose protocol lets the driver run its leading stages
  (``JobSpec.driver_stages``, ``run_head``): a small checkpoint transaction's stateless bolts
  run here and hand Spark what its first stage would have been fed, so a two-stage PREPARE
  is one Spark stage (a stage boundary costs a Spark job 20-40 ms on 2 cores).
- ``InlineEngine``: the whole topology's jobs, for protocol tests without a SparkSession.

No pyspark here.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import gc
import pickle
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from providers import DriverOwnedStateProvider
from statefulbolts.errors import TopologyError
from statefulbolts.listeners import NO_FAULTS, FaultListener
from statefulbolts.runtime._engine import JobSpec, task_job
from statefulbolts.runtime._images import ImageShipper
from statefulbolts.runtime._plan import ExecutionPlan
from statefulbolts.runtime._program import TaskJob
from statefulbolts.runtime._records import JobResult, ReportedError
from statefulbolts.runtime._results import reduce_acks
from statefulbolts.runtime._sealing import seal_inputs
from statefulbolts.runtime._spark import driver_attempt
from statefulbolts.runtime._stats import format_traceback
from statefulbolts.runtime._task import run_task
from statefulbolts.runtime._task_errors import decode_task_error, exception_types
from statefulbolts.topology import StormTopology

__all__ = ["RETRIED_HERE", "Head", "InlineEngine", "freeze_topology", "run_head", "run_inline"]

# What the text of each failed head attempt that the driver's retry survived ends with.
RETRIED_HERE = "(a failed attempt: the driver ran the task again, as Spark would, and it succeeded)"


def run_inline(job: TaskJob, topology: bytes, inputs: Sequence[Sequence[Any]]) -> JobResult:
    """Run every stage of ``job`` here; ``inputs[s]`` feeds slot ``s`` of the first stage."""
    layout = job.layout
    if job.images is not None:
        msg = "an inline job uses the driver's own state: it ships no images"
        raise ValueError(msg)
    if layout.depth == 0:
        return JobResult()
    return reduce_acks(_run_stages(job, topology, inputs, layout.depth))[0]


class Head(NamedTuple):
    """What a job's head, run here, sends on (``run_head``)."""

    records: list[list[Any]]  # for each slot of the stage after the head
    retried: list[ReportedError]  # the failed attempts a retry survived (``JobResult.retried``)


def run_head(
    job: TaskJob,
    topology: bytes,
    inputs: Sequence[Sequence[Any]],
    stages: int,
    attempts: int = 1,
) -> Head:
    """Run stages ``[0, stages)`` of ``job`` here; the records for each slot of stage ``stages``.

    The rest of the job runs elsewhere (``SparkEngine.run``): slot ``s`` of stage ``stages``
    is fed exactly ``records[s]``, which is what a ``partitionBy`` would have brought it
    (tuples, carried records, acks, fails, the head tasks' reports), so the job's result is
    the one it would have had. The head's tasks hold no state: their job ships them no images
    (a driver-owned provider's images are for the stateful tasks after them). A task that
    raises is run again from the same input, as Spark runs a failed task, up to ``attempts``
    times in all (Spark's ``spark.task.maxFailures``): a failure a retry survives is an error
    to count (``Head.retried``), and the last attempt's error fails the job.

    Raises:
        ValueError: ``stages`` leaves no stage to run elsewhere, or cuts a narrow boundary
            (what crosses one is not sealed: it would not travel as Spark ships it).
    """
    layout = job.layout
    if not 0 < stages < layout.depth or layout.narrow[stages - 1]:
        msg = (
            f"a job of {layout.depth} stages (narrow boundaries {list(layout.narrow)}) cannot "
            f"run its first {stages} here: the head must end at a wide boundary before the last"
        )
        raise ValueError(msg)
    retried: list[ReportedError] = []
    head = dataclasses.replace(job, images=None)
    out = _run_stages(head, topology, inputs, stages, attempts, retried)
    records: list[list[Any]] = [[] for _ in layout.stages[stages]]
    for key, part in out:
        records[key].extend(part)
    return Head(records, retried)


def _run_stages(
    job: TaskJob,
    topology: bytes,
    inputs: Sequence[Sequence[Any]],
    stop: int,
    attempts: int = 1,
    retried: list[ReportedError] | None = None,
) -> list[tuple[int, list[Any]]]:
    """Stages ``[0, stop)`` of ``job``, here: stage ``stop - 1``'s keyed output."""
    layout = job.layout
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
        for k in range(stop):
            out = []
            for slot, items in enumerate(fed):
                out.extend(_attempted(job, topology, k, slot, items, attempts, retried))
            if k + 1 < stop:
                fed = [[] for _ in layout.stages[k + 1]]
                for key, records in out:
                    fed[key].append((key, records))
        return out
    finally:
        if was_on:
            gc.enable()


def _attempted(
    job: TaskJob,
    topology: bytes,
    stage: int,
    slot: int,
    items: list[tuple[int, list[Any]]],
    attempts: int,
    retried: list[ReportedError] | None,
) -> list[tuple[int, list[Any]]]:
    """One task's keyed output, the task run up to ``attempts`` times until it succeeds.

    Each failed attempt but the last goes to ``retried``, as Spark's retry tells of one
    (``_retried``); the last one's error is raised.
    """
    attempt = 1
    while True:
        try:
            with driver_attempt(attempt - 1):  # what ``task_attempt`` says in the task
                return list(run_task(job, topology, stage, slot, items, in_worker=False))
        except Exception as exc:
            if attempt >= attempts or retried is None:
                raise
            comp, task = job.layout.stages[stage][slot]
            error = decode_task_error(exc)
            types = error.types if error is not None else exception_types(exc)
            cause = error.cause if error is not None else f"{type(exc).__name__}: {exc}"
            trace = format_traceback(exc.__cause__ or exc)
            retried.append(ReportedError(comp, task, types, f"{cause} {RETRIED_HERE}", trace))
            attempt += 1


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

    in_driver = True  # ``JobSpec.driver_stages`` changes nothing: every stage runs here
    late_binding = False  # every input is cut at submit: the tasks run in ``submit``

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
