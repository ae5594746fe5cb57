"""Task attempts that failed and that Spark's retry survived: what failed them, asked of Spark.

A task that raises fails its Spark attempt; Spark runs it again (``spark.task.maxFailures``),
and when the new attempt succeeds the job succeeds: nothing of the failure reaches the driver's
Python. Spark's executor logged it (``ERROR Executor: Exception in task ...``, fifty lines with
the task error's encoded marker), which the framework's log4j config leaves out at the default
level (``log4j2.properties``): the framework reports the error itself, here.

A task's report says its attempt (``TaskReport.attempt``). Only when one is above 0, after the
job, the engine asks Spark's status store (the data behind Spark's UI and REST API, kept
whether or not the UI runs) for the job's failed task attempts and their error text, once
Spark's listener bus has recorded them. Each text is decoded as the driver decodes a failed
job's (``decode_task_error``: component, task, the user's class, the exception's types and
message); a failure with no task error in it (a worker that crashed) is told by its most
telling line. They come back as ``ReportedError`` records (``JobResult.retried``), which the
driver counts and logs as it does a reported error (``Stats.take_reports``).

If Spark cannot say (its status store gone, or a JVM that does not answer), each task that
needed another attempt is still counted, as an error whose text says so.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from statefulbolts.runtime._plan import ExecutionPlan
from statefulbolts.runtime._records import ReportedError, TaskReport
from statefulbolts.runtime._stats import worker_traceback
from statefulbolts.runtime._task_errors import decode_task_error, describe_job_failure

__all__ = ["RETRIED", "failed_attempts", "retried_errors"]

log = logging.getLogger(__name__)

# What every retried error's text ends with.
RETRIED = "(a failed attempt: Spark ran the task again, and it succeeded)"
# How long to wait for Spark's listener bus to record the job's task ends.
_LISTENER_WAIT_MS = 5000
# Most task attempts read per stage attempt.
_MAX_TASKS = 100_000


def failed_attempts(sc: Any, group: str) -> list[str] | None:
    """The error text of every failed task attempt of the last job of job group ``group``.

    ``None`` when Spark's status store cannot say. Uses the status tracker and the status
    store behind Spark's UI (through Py4J: ``SparkContext.statusStore``, ``listenerBus``).
    """
    try:
        jsc = sc._jsc.sc()
        jsc.listenerBus().waitUntilEmpty(_LISTENER_WAIT_MS)
        tracker = sc.statusTracker()
        jobs = tracker.getJobIdsForGroup(group)
        if not jobs:
            return None
        job = tracker.getJobInfo(max(jobs))
        store = jsc.statusStore()
        texts: list[str] = []
        for stage in sorted(job.stageIds if job is not None else ()):
            info = tracker.getStageInfo(stage)
            for attempt in range(0 if info is None else info.currentAttemptId + 1):
                tasks = store.taskList(stage, attempt, _MAX_TASKS)
                for i in range(tasks.size()):
                    task = tasks.apply(i)
                    error = task.errorMessage()
                    if task.status() == "FAILED" and error.isDefined():
                        texts.append(str(error.get()))
    except Exception as exc:  # noqa: BLE001 - Spark's internals, through Py4J: say, and count
        log.info("Spark's status store could not tell what failed job %s's tasks: %s", group, exc)
        return None
    return texts


def retried_errors(
    plan: ExecutionPlan, reports: Sequence[TaskReport], texts: list[str] | None
) -> list[ReportedError]:
    """The ``ReportedError`` of each failed attempt ``texts`` tells of (see the module doc).

    ``texts`` ``None`` (Spark could not say): one per task whose report's attempt is above 0.
    A failure that names no task of the plan (a crashed worker) goes to the first task that
    needed another attempt.
    """
    again = [r for r in reports if r.attempt > 0]
    if not again:
        return []
    if texts is None:
        return [
            ReportedError(
                r.comp,
                r.task,
                (),
                f"{r.attempt} earlier attempt(s) of this task failed; Spark ran it again, and it "
                "succeeded (what failed them was not available: --spark-log WARN shows Spark's "
                "own log)",
            )
            for r in again
        ]
    out = []
    for text in texts:
        error = decode_task_error(RuntimeError(text))
        comp, task = again[0].comp, again[0].task
        if error is not None and error.component in plan.index:
            comp = plan.index[error.component]
            ids = plan.task_ids[comp]
            task = ids.index(error.task) if error.task in ids else task
        if error is not None:
            types, cause = error.types, error.cause
        else:
            types, cause = (), describe_job_failure(RuntimeError(text))[3]
        trace = worker_traceback(RuntimeError(text))
        out.append(ReportedError(comp, task, types, f"{cause} {RETRIED}", trace))
    return out
