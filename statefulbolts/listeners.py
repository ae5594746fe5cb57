"""The fault listener: what production code tells at each point where a fault may be injected.

Production code calls one typed hook at each such point and never asks whether faults are
configured: the runners hold a ``FaultListener`` always, ``NO_FAULTS`` (which does nothing)
unless ``topology.faults`` configures a ``recovery.FaultPlan``. The points:

- ``tuple_target``: a task's data target, wrapped once per task (the no-op listener hands it
  back as it is, so the hot loop pays nothing);
- ``on_task_prepared`` / ``on_task_committed``: a stateful task's state prepared or committed
  a transaction (a committer's ``finish_batch`` in a commit phase is the latter);
- ``on_driver``: the driver reached one of a protocol's kill points (``recovery.KillPoint``).

Where a protocol runs a task is never decided by the listener: a run whose faults cannot fire
where its tasks run (``needing_workers``) is refused, with the setting that would move them.

Example:
    >>> def execute(tuple_):
    ...     return tuple_
    >>> NO_FAULTS.tuple_target(execute, "count", 0, txid=3, attempt=0) is execute
    True
    >>> NO_FAULTS.on_driver(None, 3)  # nothing happens
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any, Protocol

from statefulbolts.tuples import Tuple

__all__ = ["NO_FAULTS", "FaultListener", "NoFaults"]


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

    def on_driver(self, point: Any, txid: int) -> None:
        """The driver reached kill point ``point`` in transaction ``txid``."""

    def needing_workers(self, components: Collection[str]) -> frozenset[str]:
        """Those of ``components`` whose tasks' faults need a Spark worker to mean anything.

        A crash is a Python worker's death, and a fault on a task's first attempt only expects
        Spark to run the task again: neither can fire in a task run by the driver.
        """


class NoFaults:
    """The listener of a run without injected faults: every hook does nothing."""

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

    def on_driver(self, point: Any, txid: int) -> None:
        """Nothing."""

    def needing_workers(self, components: Collection[str]) -> frozenset[str]:
        """None of them."""
        return frozenset()

    def __repr__(self) -> str:
        return "NO_FAULTS"


NO_FAULTS: FaultListener = NoFaults()
