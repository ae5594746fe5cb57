"""The engine seam: what a protocol asks of the thing that runs its jobs.

A protocol (the checkpoint protocol's driver, the transactional protocol's) describes a job as a
``JobSpec``: which component tasks run, in which stages (``JobLayout``), the records each
first-stage task is fed, and its own ``TaskProgram`` (what a task does around its tuples). An
``Engine`` runs it and hands back a ``JobResult``: the roots left open (XOR acks), the failed
roots, every task's report and the tuples the tasks emitted for components outside the job.

Two engines implement the seam, chosen by name (``open_engine``):

- ``"spark"`` (``SparkEngine``): each job is a chain of Spark stages on a SparkSession, run
  on a thread of its own; a driver-owned provider's state is shipped to the tasks.
- ``"inline"`` (``InlineEngine``): each job's tasks run in this process, one after another,
  with the same task code; the state is the driver's own. No SparkSession: a protocol's tests
  run in milliseconds.

Every job is labelled (``job_labels``): its job group names the topology, the action and the
txid (``wc/PREPARE/txid=3``, ``wc/COMMIT/txid=3/attempt=2``) and its description says the same
in words (``wc: PREPARE txid=3 (120 tuples)``). A protocol cancels its jobs by its own
``JobSpec.group`` (the topology name when it gives none); whoever stops the whole topology at
once (``statefulbolts run --timeout``) cancels every job of it by ``topology_tag``.

Example (what a protocol driver does):

    engine = open_engine("spark", spark, topology, "wc", conf, max_jobs=1)
    layout = engine.plan.layout(engine.plan.bolts())
    spec = JobSpec(layout, program, inputs, txid=3, description="120 tuples", action="PREPARE")
    result = engine.submit(spec).result()  # a JobResult
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from providers import DriverOwnedStateProvider
from statefulbolts.listeners import FaultListener
from statefulbolts.runtime._images import ImageShipper, ShippedImage
from statefulbolts.runtime._late import LateInputs
from statefulbolts.runtime._plan import ExecutionPlan, JobLayout
from statefulbolts.runtime._program import TaskJob, TaskProgram
from statefulbolts.runtime._records import JobResult

__all__ = ["Engine", "JobLabels", "JobSpec", "job_labels", "tag", "task_job", "topology_tag"]


@dataclass(frozen=True)
class JobSpec:
    """One job, as a protocol asks for it.

    ``inputs[s]`` is the list of records for slot ``s`` of the first stage (``TupleBatch`` for
    data; a record for a task of a later stage is carried there). ``ackers`` > 0 reduces the
    acks over that many Spark partitions, 0 on the driver. ``images`` ships a driver-owned
    provider's state to the tasks under whose roots (``<state_root>/<component>-<task>``) the
    namespaces are (``ImageShipper.ship``: descriptors, or whole images); ``None`` when the job
    touches no driver-owned state. ``group`` is the key ``Engine.cancel`` cancels the job by
    (default: the topology name). ``action`` names the protocol step (``PREPARE``, ``COMMIT``,
    ...) and ``attempt`` the batch attempt, if any, for Spark's UI; ``description`` is free
    text shown after them (``120 tuples``).

    ``action`` is typed ``str`` because the engine imports no protocol: each protocol passes a
    member of its own ``StrEnum`` (``checkpoint.Action``, ``statefulbolts.transactional``'s
    ``BatchAction``), which is a ``str`` that formats as its value; the engine only shows it.

    ``driver_stages`` > 0: the protocol lets the engine run that many leading stages in the
    driver, with the same task code (``_inline.run_head``), and the rest as the job. The
    protocol decides which jobs may (stateless tasks only, a small batch: the checkpoint
    protocol's ``topology.driver.head``); the stages must end at a wide boundary before the
    last (``JobLayout.narrow``). An engine that runs every task here anyway ignores it.
    """

    layout: JobLayout
    program: TaskProgram
    inputs: Sequence[Sequence[Any]]
    txid: int
    description: str
    ackers: int = 0
    images: Mapping[str, bytes | ShippedImage] | None = None
    group: str | None = None
    state_root: str = ""
    # The leading values every tuple of the job shares (``ExecutionPlan.lead`` of them).
    lead: tuple[Any, ...] = ()
    action: str = "JOB"
    attempt: int | None = None
    driver_stages: int = 0
    # The data records, cut when the first task asks (``_late``): ``inputs`` then holds only
    # what the protocol fixed at submit (a checkpoint tuple), each slot's data going before it.
    late: LateInputs | None = None


class JobLabels(NamedTuple):
    """How a job shows in Spark: its job group and description, and its cancellation tag."""

    group: str
    description: str
    tag: str


def job_labels(topology: str, spec: JobSpec) -> JobLabels:
    """The Spark job group, description and tag of ``spec`` in topology ``topology``.

    Example:
        >>> spec = JobSpec(None, None, [], 3, "120 tuples", action="PREPARE")
        >>> labels = job_labels("wc", spec)
        >>> labels.group, labels.description, labels.tag
        ('wc/PREPARE/txid=3', 'wc: PREPARE txid=3 (120 tuples)', 'wc')
        >>> spec = JobSpec(None, None, [], 3, "", group="wc-3:2", action="COMMIT", attempt=2)
        >>> job_labels("wc", spec)[:2]
        ('wc/COMMIT/txid=3/attempt=2', 'wc: COMMIT txid=3 attempt=2')
    """
    group = f"{topology}/{spec.action}/txid={spec.txid}"
    description = f"{topology}: {spec.action} txid={spec.txid}"
    if spec.attempt is not None:
        group += f"/attempt={spec.attempt}"
        description += f" attempt={spec.attempt}"
    if spec.description:
        description += f" ({spec.description})"
    return JobLabels(group, description, tag(spec.group or topology))


def tag(key: str) -> str:
    """A Spark job tag for ``key`` (tags may not hold commas; escaped reversibly)."""
    return key.replace("%", "%25").replace(",", "%2C") or "%"


def topology_tag(topology: str) -> str:
    """The Spark job tag every job of ``topology`` carries, whatever its group.

    A topology name holds no ``/``: no group's tag is one of these.

    Example:
        >>> topology_tag("wc")
        '$topology/wc'
    """
    return tag(f"$topology/{topology}")


class Engine(Protocol):
    """Runs the jobs of one topology: the seam every protocol driver uses.

    ``plan`` is the topology's ``ExecutionPlan``. A job's future holds its ``JobResult``, or
    the error that failed it (a task's fatal error as ``TaskFailedError``, or the engine's).
    ``in_driver``: every task of every job runs in this process (the inline engine), so a
    protocol has nothing to move here (``JobSpec.driver_stages``). ``late_binding``: the engine
    takes a job whose input is cut when its first task asks (``JobSpec.late``, ``_late``).
    """

    plan: ExecutionPlan
    in_driver: bool
    late_binding: bool

    def image_shipper(self, provider: DriverOwnedStateProvider) -> ImageShipper | None:
        """What ships ``provider``'s images to the tasks; ``None``: the tasks use them here."""

    def submit(self, spec: JobSpec) -> concurrent.futures.Future[JobResult]:
        """Start ``spec``; the future holds its ``JobResult``."""

    def run_here(self, spec: JobSpec) -> concurrent.futures.Future[JobResult]:
        """Run ``spec``'s tasks in this process, now (``spec.images`` must be ``None``)."""

    def cancel(self, group: str) -> None:
        """Cancel the running jobs started under ``JobSpec.group`` ``group``."""

    def close(self, wait: bool = True) -> None:
        """Stop taking jobs and release what the engine holds."""


def task_job(
    name: str,
    conf: Mapping[str, Any],
    plan: ExecutionPlan,
    spec: JobSpec,
    faults: FaultListener,
) -> TaskJob:
    """What every task of ``spec`` needs, in topology ``name`` (whichever engine runs it)."""
    if len(spec.lead) != plan.lead:
        description = job_labels(name, spec).description
        msg = (
            f"job {description!r} gives {len(spec.lead)} leading values; its "
            f"topology's tuples have {plan.lead}"
        )
        raise ValueError(msg)
    return TaskJob(
        plan=plan,
        layout=spec.layout,
        program=spec.program,
        topology_name=name,
        conf=conf,
        txid=spec.txid,
        ackers=spec.ackers,
        images=None if spec.images is None else dict(spec.images),
        faults=faults,
        state_root=spec.state_root,
        lead=spec.lead,
    )
