"""The seam between the runtime and a protocol inside a task: ``TaskProgram`` and ``TaskJob``.

A job's ``TaskProgram`` is the protocol's part in every task of the job, shipped with the job:
it says which streams are control streams, whether tuple trees are tracked, what an exception
means, and makes each task's ``TaskExecutor``, whose steps (``prepare``, ``control``,
``finish``, ``cleanup``) the runtime calls in order around the task's tuples. The checkpoint
protocol's program is ``checkpoint.CheckpointTaskProgram``; the transactional protocol's is
``statefulbolts.transactional``'s ``BatchTaskProgram``. ``TaskJob`` is everything else a task of
the job needs.

No pyspark here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from statefulbolts.context import TopologyContext
from statefulbolts.listeners import NO_FAULTS, FaultListener
from statefulbolts.runtime._collector import TaskCollector
from statefulbolts.runtime._images import ShippedImage
from statefulbolts.runtime._local_files import LocalFiles
from statefulbolts.runtime._plan import ExecutionPlan, JobLayout
from statefulbolts.topology import ComponentSpec
from statefulbolts.tuples import Tuple

__all__ = ["TaskExecutor", "TaskInfo", "TaskJob", "TaskProgram"]


class TaskInfo(NamedTuple):
    """Which task is running, for a protocol's decisions and its fault hooks."""

    component: str
    task: int
    txid: int
    attempt: int  # Spark's attempt number of this task (0 outside Spark)


class TaskExecutor(Protocol):
    """One component task in one job, as a protocol runs it.

    Optional: ``before_data(plan, batches)``, called before the first data tuple;
    ``system_tuples``, tuples the protocol delivers to the data target after ``before_data``
    and before the first data tuple, untracked (tick tuples); and ``lineage_sink``, an object
    whose ``lineage`` the runtime sets to each data tuple's root before executing it
    (``None``: none); ``batch_target``, read after ``prepare``: where data batches go as
    ``ColumnBatch`` columns instead of a tuple at a time (``None``: nowhere), for a bolt that
    takes them (``BasicBolt.execute_batch``, ``StatefulBolt.execute_batch``). For a bolt that
    takes tuples, also read after ``prepare``: ``basic_rows``, a ``BasicBolt``'s step taken
    apart (``BasicBoltExecutor.basic_rows``), or ``row_acks``, where the data target's acks go
    (``_rows.RowAcks``); either lets the runtime's row loop (``_rows``) feed it.
    """

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: TaskCollector
    ) -> Callable[[Tuple], None]:
        """Prepare the component; return the function data tuples go to (the hot path)."""

    def control(self, tuple_: Tuple) -> None:
        """Take a tuple of a control stream; they come after every data tuple."""

    def finish(self) -> Any:
        """End the task's part of the job; the value returned goes back in its report."""

    def cleanup(self) -> None:
        """Release what ``prepare`` made."""


class TaskProgram(Protocol):
    """A protocol's part in the tasks of one job: shipped with the job, asked by every task."""

    @property
    def data_free(self) -> str | None:
        """Set when the job carries no data: names its step (data emits are then errors)."""

    @property
    def tracking(self) -> bool:
        """Whether tuple trees are tracked (XOR acks); without it a task settles nothing."""

    def failure(self, exc: Exception) -> Any:
        """What ``exc`` means if it fails the task by the protocol's rules (not a crash).

        ``None``: a crash, which Spark retries and which fails the job. Anything else: the
        task is failed on purpose (its report's ``result``); it sends nothing on, and every
        task after it in the job is skipped (``Aborted``).
        """

    def is_control(self, stream_id: str) -> bool:
        """Whether tuples of ``stream_id`` are control tuples (fed after all data)."""

    def executor(self, spec: ComponentSpec, info: TaskInfo) -> TaskExecutor:
        """The executor of one task of ``spec``."""


@dataclass
class TaskJob:
    """Everything every task of one job needs, shipped with the job's closure."""

    plan: ExecutionPlan
    layout: JobLayout
    program: TaskProgram
    topology_name: str
    conf: Mapping[str, Any]
    txid: int
    ackers: int
    # A driver-owned provider's state: namespace -> image (whole, or a ``ShippedImage`` a
    # worker resolves against the copy it kept), for the tasks under whose roots they are;
    # ``None`` when the job uses no driver-owned state.
    images: dict[str, bytes | ShippedImage] | None = None
    # Told at every fault point of a task (``statefulbolts.listeners``); a no-op by default.
    faults: FaultListener = NO_FAULTS
    # The leading values every tuple of the job shares, not shipped (``ExecutionPlan.lead``).
    lead: tuple[Any, ...] = ()
    # Where the tasks' state lives: a task's namespaces are ``<root>/<component>-<task>[/...]``.
    state_root: str = ""
    # On a local master, where a task writes a change log too large to send back in its
    # result (``_local_files``); ``None``: every log goes in the result.
    spill: LocalFiles | None = None
