"""What travels between the driver, the Spark tasks of a job, and back: named record types.

A job's data moves as ``TupleBatch`` records: all tuples one source task emitted on one stream
for one destination task, as columns. Columns, not rows, because pickling a few long lists costs
a fraction of pickling many small tuples: ``values`` holds each tuple's values (the bare value
when the stream has one field), ``roots`` each tuple's first root id (0 when untracked; a list,
or an ``id_column`` array), and ``more`` maps a position to the further roots of a tuple
anchored to several trees (``None`` when there are none). Between tasks, and from the driver into
a job, ``values`` travel sealed: pickled by the sender (``bytes``), unpickled by the task they are
for (``_sealing``, ``TupleBatch.unsealed``). A tuple's own acking id is made by the
task it is delivered to (``statefulbolts.acker``). Components, tasks and streams are indices
from the ``ExecutionPlan``.

Besides tuples, a task sends ``AckLedger`` (XOR values per root it left open), ``Fails`` (roots it
failed) and one ``TaskReport`` (metrics, reported errors, state changes for a driver-owned
provider, and whatever its protocol's executor returned). All are NamedTuples: a record is
read by name, and a loop that needs speed unpacks it once.
"""

from __future__ import annotations

import pickle
from array import array
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

__all__ = [
    "AckLedger",
    "Aborted",
    "Fails",
    "JobResult",
    "ReportedError",
    "TaskMetrics",
    "TaskReport",
    "TupleBatch",
    "id_column",
]


class TupleBatch(NamedTuple):
    """Tuples of one (source task, stream) for one destination task, in emit order."""

    dest: int
    dest_task: int
    src: int
    src_task: int
    stream: int
    values: list[Any] | bytes  # bytes: sealed (pickled by the task or driver that sent it)
    roots: Sequence[int]
    more: dict[int, tuple[int, ...]] | None

    def column(self) -> list[Any]:
        """The values column as a list (unpickled if it travelled sealed)."""
        values = self.values
        if type(values) is bytes:
            column: list[Any] = pickle.loads(values)  # noqa: S301 - sealed by our own tasks
            return column
        return values  # type: ignore[return-value]

    def unsealed(self) -> TupleBatch:
        """This batch with its values as a list (unpickled if it travelled sealed)."""
        return self if type(self.values) is not bytes else self._replace(values=self.column())


class AckLedger(NamedTuple):
    """XOR values per root that a task (or the acker) left non-zero."""

    acks: dict[int, int]


class Fails(NamedTuple):
    """Roots whose trees a task failed."""

    roots: list[int]


class Aborted(NamedTuple):
    """A task's protocol failed it (``TaskProgram.failure``): every task after it is skipped.

    Sent to every slot of the next stage, which sends it on, so no task downstream of a failed
    one acts on a partial input (a committer must never finish on half a batch).
    """

    comp: int
    task: int


class ReportedError(NamedTuple):
    """An error a component reported (``report_error``) or a protocol recorded; not a crash.

    ``types`` are the exception's class names (``module.qualname``), most derived first, so the
    driver can decide on the type (``is_a``) without reading the text.
    """

    comp: int
    task: int
    types: tuple[str, ...]
    text: str  # ``Type: message``, as Python prints the exception
    # The formatted traceback, when the exception was raised before it was reported.
    traceback: str | None = None

    def is_a(self, *classes: type[BaseException]) -> bool:
        """Whether the reported exception was an instance of any of ``classes``."""
        return any(f"{cls.__module__}.{cls.__qualname__}" in self.types for cls in classes)


class TaskMetrics(NamedTuple):
    """What one task did in one job.

    ``seconds`` is the whole of ``run_task``; of it, ``setup`` went before the executor got its
    first step (sorting the input, loading the topology, the context, the collector, the
    state's images) and ``execute`` to the executor's steps (prepare, the tuples, finish: the
    user's code and the loops that feed it). The rest is the task's output: settling acks,
    sealing what was emitted, the state's changes.
    """

    executed: int
    emitted: int
    acked: int
    failed: int
    seconds: float
    setup: float = 0.0
    execute: float = 0.0


class TaskReport(NamedTuple):
    """Everything a task sends back besides tuples and acks: one per task per job."""

    comp: int
    task: int
    metrics: TaskMetrics
    errors: tuple[ReportedError, ...] = ()
    # (namespace, change log) per namespace of a driver-owned provider this task changed. A
    # large log may travel as a ``LocalFile`` (``_local_files``): the engine reads it back
    # before anything else sees the report.
    changes: tuple[tuple[str, bytes], ...] = ()
    # What the protocol's task executor returned from ``finish`` (None for most).
    result: Any = None
    # The Spark attempt of the task that sent it: above 0, earlier attempts failed and Spark
    # ran the task again (the engine then asks Spark what failed them: ``_retried``).
    attempt: int = 0
    # The component's registered metrics counted in this task (``statefulbolts.metrics``).
    counted: tuple[tuple[str, float], ...] = ()


def id_column(ids: list[int]) -> array[int]:
    """A batch's root ids as a signed 64-bit array: it pickles as one block of bytes.

    Root ids are the driver's count from 1; they fit.
    """
    return array("q", ids)


class JobTimings(NamedTuple):
    """Where a job's time went on the driver's engine thread, in seconds.

    ``before``: building the job (the tasks' shared description, sealing the spout tuples,
    the RDD chain and its pickled stage functions); ``spark``: Spark's run of it, from the
    submission to the last result collected (scheduling, shuffles, the Python workers, the
    tasks); ``after``: merging the results. ``head``: the job's first ``head_stages`` stages,
    run by the driver itself before Spark's part (``JobSpec.driver_stages``): their tasks,
    sealing the spout tuples for them and keying what they sent on (not in ``before``).

    A job whose input was cut late (``JobSpec.late``) built itself before its tuples were
    taken: ``asked`` is Spark's part before its first task asked for input (no tuple waited
    for it), ``feed`` the driver's work from that ask until the tasks could have their input
    (the protocol's cut, sealing and pickling it per slot; ``head`` apart); both are in
    ``spark``.
    """

    before: float
    spark: float
    after: float
    head: float = 0.0
    head_stages: int = 0
    asked: float = 0.0
    feed: float = 0.0


@dataclass
class JobResult:
    """What one job did, merged over its tasks.

    ``acks`` holds only roots whose XOR is not zero (a root every task reported nothing for had
    each tuple of its tree acked exactly once); ``outputs`` holds the tuples the job's tasks
    emitted for components outside the job, for the protocol to use (sealed, as they travelled:
    a next job takes them as they are, ``TupleBatch.column`` reads them); ``aborted`` says a task's
    protocol failed it (its report's ``result`` says why) and the tasks after it were skipped.
    ``retried`` holds the errors of task attempts that failed and that Spark's retry survived:
    errors that happened, to count and show, though the job succeeded.
    """

    acks: dict[int, int] = field(default_factory=dict)
    fails: set[int] = field(default_factory=set)
    reports: list[TaskReport] = field(default_factory=list)
    outputs: list[TupleBatch] = field(default_factory=list)
    aborted: bool = False
    retried: list[ReportedError] = field(default_factory=list)
    # Where the engine's time went (``None``: an engine that does not say, the inline one).
    timings: JobTimings | None = None

    @property
    def errors(self) -> list[ReportedError]:
        """Every error reported by the job's tasks, in report order."""
        return [e for report in self.reports for e in report.errors]
