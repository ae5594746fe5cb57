"""Running a job's tasks in this process, stage after stage, instead of as a Spark job.

Some jobs are too small to be worth Spark's scheduling: a transactional batch's commit phase
against state the driver holds (the in-memory provider) moves a few thousand per-key updates
into maps that live in the driver anyway, and a Spark job of one Python stage costs 35-60 ms on
a 2-core machine however little it carries. ``run_inline`` runs such a job's tasks with the
same code a Spark task runs (``run_task``), in stage order, each stage's output keyed to the
next stage's slots the way ``partitionBy`` would, and reduces the acks as the driver does after
a Spark job. What differs: no images are shipped (a driver-owned provider's states are the
driver's own, written in place), no Python worker tuning (``run_task(in_worker=False)``), and a
task's fatal error is raised here, as the ``TaskFailedError`` a Spark task would raise, instead
of arriving wrapped in Spark's exception.

No pyspark here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from statefulbolts.runtime._program import TaskJob
from statefulbolts.runtime._records import JobResult
from statefulbolts.runtime._results import reduce_acks
from statefulbolts.runtime._task import run_task

__all__ = ["run_inline"]


def run_inline(job: TaskJob, topology: bytes, inputs: Sequence[Sequence[Any]]) -> JobResult:
    """Run every stage of ``job`` here; ``inputs[s]`` feeds slot ``s`` of the first stage."""
    layout = job.layout
    if job.images is not None:
        msg = "an inline job uses the driver's own state: it ships no images"
        raise ValueError(msg)
    if layout.depth == 0:
        return JobResult()
    n0 = len(layout.stages[0])
    fed: list[list[tuple[int, list[Any]]]] = [
        [(s, list(inputs[s]) if s < len(inputs) else [])] for s in range(n0)
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
