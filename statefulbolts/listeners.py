"""The fault listener: what production code tells at each point where a fault may be injected.

Chaos testing (``topology.faults``, docs/operations/recovery.md) injects real failures at named
points of a run. Production code never asks whether faults are configured: it calls one typed
hook at each such point, on the run's ``FaultListener``, which is ``NO_FAULTS`` (every hook does
nothing) unless the run was given one (``faults=``) or configured one (``topology.faults``, read
in one place: ``statefulbolts.protocol_runner.ProtocolRunner``). The points:

- ``tuple_target``: a task's data target, wrapped once per task (the no-op listener hands it
  back as it is, so the hot loop pays nothing): ``TaskPoint.TUPLE``;
- ``on_task_prepared`` / ``on_task_committed``: a stateful task's state prepared or committed
  a transaction (a committer's ``finish_batch`` in a commit phase is the latter):
  ``TaskPoint.PREPARED``, ``TaskPoint.COMMITTED``;
- ``on_driver``: the driver reached one of a protocol's kill points (``KillPoint``);
- ``on_driver_tasks``: the driver itself runs some tasks' steps (a commit done in the driver,
  a small transaction's stateless head).
  Where a protocol runs a task is never decided by the listener: one whose faults cannot fire
  there refuses the run, naming the setting that moves the tasks to the executors.

Both enums live here, beside the interface, so the engine (``statefulbolts.runtime``), the
recovery policy (``recovery``) and both protocols name the same points.

Example:
    >>> def execute(tuple_):
    ...     return tuple_
    >>> NO_FAULTS.tuple_target(execute, "count", 0, txid=3, attempt=0) is execute
    True
    >>> NO_FAULTS.on_driver(KillPoint.AFTER_PREPARE, 3)  # nothing happens
    >>> KillPoint("mid-commit") is KillPoint.MID_COMMIT, TaskPoint("prepared").name
    (True, 'PREPARED')
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Collection
from typing import Protocol

from statefulbolts.tuples import Tuple

__all__ = ["NO_FAULTS", "FaultListener", "KillPoint", "NoFaults", "TaskPoint"]


class KillPoint(enum.Enum):
    """Where in a protocol the driver may be killed (``FaultListener.on_driver``).

    The checkpoint protocol's points, then the transactional protocol's; ``mid-commit`` is in
    both: some tasks have committed transaction t (a stateful task's state, a committer's
    ``finish_batch``), the driver has not recorded it. The ``deadletter-*`` points are in both
    too, in transaction t that failed on a poison tuple, in the order they happen: nothing
    written yet; its dead letter committed; the tuple excluded (its spout message acked, or
    its batch's removal stored), t's other tuples not yet replayed.
    """

    AFTER_PREPARE = "after-prepare"  # PREPARE(t) succeeded everywhere, COMMITTING(t) not saved
    AFTER_COMMITTING_SAVED = "after-committing-saved"  # COMMITTING(t) saved, no task committed
    MID_COMMIT = "mid-commit"  # some tasks committed t, COMMITTED(t) not saved
    AFTER_COMMITTED = "after-committed"  # COMMITTED(t) saved, spout acks not yet delivered
    DURING_PROCESSING = "during-processing"  # t's processing job just started
    AFTER_PROCESSED = "after-processed"  # t processed, its commit not started
    AFTER_COMMIT = "after-commit"  # t's commit job succeeded, currtx not yet moved past t
    # A change of the stored state's shape at start (``recovery.evolve``); "txid" counts steps.
    EVOLVE_STAGED = "evolve-staged"  # every new namespace staged, the swap recorded, not begun
    EVOLVE_MID_SWAP = "evolve-mid-swap"  # after target namespace number "txid" was swapped
    DEADLETTER_DECIDED = "deadletter-decided"  # t's poison tuple is to go; nothing written
    DEADLETTER_RECORDED = "deadletter-recorded"  # its record committed; the tuple still in
    DEADLETTER_EXCLUDED = "deadletter-excluded"  # the tuple taken out; t not replayed yet


class TaskPoint(enum.Enum):
    """Where in a task a fault may fire (``"at"`` of a ``topology.faults`` task fault)."""

    TUPLE = "tuple"  # before the task executes its n-th data tuple (``tuple_target``)
    PREPARED = "prepared"  # right after a stateful task's state prepared its transaction
    COMMITTED = "committed"  # right after a task's state committed its transaction


class FaultListener(Protocol):
    """Told at every fault point; may act there (crash, raise, kill the driver)."""

    def tuple_target(
        self,
        execute: Callable[[Tuple], None],
        component: str,
        task: int,
        txid: int,
        attempt: int,
    ) -> Callable[[Tuple], None]:
        """The data target of one task (``execute``, or a wrapper that acts before a tuple)."""

    def on_task_prepared(self, component: str, task: int, txid: int, attempt: int) -> None:
        """A stateful task's state just prepared ``txid``."""

    def on_task_committed(self, component: str, task: int, txid: int) -> None:
        """A task's state just committed ``txid`` (the mid-commit point)."""

    def on_driver(self, point: KillPoint, txid: int) -> None:
        """The driver reached kill point ``point`` in transaction ``txid``."""

    def on_driver_tasks(
        self,
        components: Collection[str],
        points: Collection[TaskPoint],
        setting: str,
        away: str = "executors",
    ) -> None:
        """The driver itself runs (or may run) ``components``' tasks through ``points``.

        ``setting`` is the config that moves them to Spark's executors, with the value
        ``away``. A listener whose faults need a Spark worker there (a crash is a Python
        worker's death; a fault on a task's first attempt only expects Spark to run the task
        again) raises a ``ConfigError`` naming ``setting`` and ``away``.
        """


class NoFaults:
    """The listener of a run without injected faults: every hook does nothing.

    A test's own listener subclasses it and overrides the hooks it acts at.
    """

    __slots__ = ()

    def tuple_target(
        self,
        execute: Callable[[Tuple], None],
        component: str,
        task: int,
        txid: int,
        attempt: int,
    ) -> Callable[[Tuple], None]:
        """``execute`` itself."""
        return execute

    def on_task_prepared(self, component: str, task: int, txid: int, attempt: int) -> None:
        """Nothing."""

    def on_task_committed(self, component: str, task: int, txid: int) -> None:
        """Nothing."""

    def on_driver(self, point: KillPoint, txid: int) -> None:
        """Nothing."""

    def on_driver_tasks(
        self,
        components: Collection[str],
        points: Collection[TaskPoint],
        setting: str,
        away: str = "executors",
    ) -> None:
        """Nothing: no fault, so nothing to refuse."""

    def __repr__(self) -> str:
        return "NO_FAULTS" if type(self) is NoFaults else f"{type(self).__name__}()"


NO_FAULTS: FaultListener = NoFaults()
