"""The fault listener: a no-op by default, ``FaultPlan`` when ``topology.faults`` configures one."""

from __future__ import annotations

from typing import Any

import pytest

from recovery import FaultPlan, InjectedFault, KillPoint, fault_listener
from statefulbolts.listeners import NO_FAULTS


def _plan(*tasks: dict[str, Any]) -> FaultPlan:
    plan = FaultPlan.from_conf({"topology.faults": {"tasks": list(tasks)}})
    assert plan is not None
    return plan


def test_without_faults_every_hook_is_a_no_op_and_the_target_is_the_executors_own() -> None:
    seen: list[Any] = []
    assert NO_FAULTS.tuple_target(seen.append, "count", 0, 1, 0) == seen.append
    NO_FAULTS.on_task_prepared("count", 0, 1, 0)
    NO_FAULTS.on_task_committed("count", 0, 1)
    NO_FAULTS.on_driver(KillPoint.AFTER_PREPARE, 1)
    assert NO_FAULTS.needing_workers({"count"}) == frozenset()
    assert fault_listener({}) is NO_FAULTS


def test_a_raise_fault_fires_before_its_tuple_in_its_task_only() -> None:
    plan = _plan({"component": "count", "task": 1, "at_tuple": 2, "kind": "raise"})
    assert fault_listener({"topology.faults": {"tasks": [plan.tasks[0].__dict__]}}) == plan
    executed: list[str] = []
    other = plan.tuple_target(executed.append, "count", 0, 5, 0)
    assert other == executed.append  # no fault can fire in task 0: nothing wraps it
    target = plan.tuple_target(executed.append, "count", 1, 5, 0)
    target("a")
    target("b")
    with pytest.raises(InjectedFault, match=r"count task 1 at tuple 2 \(txid 5\)"):
        target("c")
    assert executed == ["a", "b"]


def test_a_first_attempt_fault_does_not_fire_on_sparks_retry() -> None:
    plan = _plan({"component": "count", "task": 0, "at_tuple": 0, "kind": "raise"})
    executed: list[str] = []
    plan.tuple_target(executed.append, "count", 0, 1, attempt=1)("a")
    assert executed == ["a"]


def test_faults_that_need_a_worker_are_crashes_and_first_attempt_ones() -> None:
    plan = _plan(
        {"component": "split", "task": 0, "kind": "crash", "attempts": "every"},
        {"component": "count", "task": 0, "kind": "raise", "attempts": "first"},
        {"component": "sum", "task": 0, "kind": "raise", "attempts": "every"},
    )
    assert plan.needing_workers({"split", "count", "sum"}) == {"split", "count"}
    assert plan.needing_workers({"sum"}) == frozenset()
