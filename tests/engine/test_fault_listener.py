"""The fault listener: a no-op by default, ``FaultPlan`` when ``topology.faults`` configures one."""

from __future__ import annotations

from typing import Any

import pytest

from recovery import Attempts, FaultKind, FaultPlan, InjectedFault
from statefulbolts.errors import ConfigError
from statefulbolts.listeners import NO_FAULTS, KillPoint, TaskPoint


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
    NO_FAULTS.on_driver_tasks({"count"}, tuple(TaskPoint), "topology.state.commit.location")
    assert FaultPlan.from_conf({}) is None


def test_the_config_s_strings_are_read_into_the_enums() -> None:
    plan = _plan({"component": "count", "task": 1, "at_tuple": 2, "kind": "raise"})
    assert FaultPlan.from_conf({"topology.faults": {"tasks": [plan.tasks[0].__dict__]}}) == plan
    [fault] = _plan(
        {"component": "count", "task": 0, "kind": "hold", "attempts": "every", "at": "committed",
         "marker": "/tmp/m"}
    ).tasks  # fmt: skip
    assert (fault.kind, fault.attempts, fault.at) == (
        FaultKind.HOLD, Attempts.EVERY, TaskPoint.COMMITTED
    )  # fmt: skip
    with pytest.raises(ConfigError, match=r"attempts first\|every .*'sometimes'"):
        _plan({"component": "count", "task": 0, "attempts": "sometimes"})


def test_a_raise_fault_fires_before_its_tuple_in_its_task_only() -> None:
    plan = _plan({"component": "count", "task": 1, "at_tuple": 2, "kind": "raise"})
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


def test_faults_that_need_a_worker_refuse_tasks_the_driver_runs_at_their_point() -> None:
    plan = _plan(
        {"component": "split", "task": 0, "kind": "crash", "attempts": "every"},
        {"component": "count", "task": 0, "kind": "raise", "attempts": "first"},
        {"component": "sum", "task": 0, "kind": "raise", "attempts": "every"},
        {"component": "keep", "task": 0, "kind": "crash", "at": "committed"},
    )
    setting = "topology.transactional.commit.location"
    with pytest.raises(ConfigError) as refused:
        plan.on_driver_tasks({"split", "count", "sum"}, tuple(TaskPoint), setting)
    assert "['count', 'split']" in str(refused.value)
    assert f"set {setting} to 'executors'" in str(refused.value)
    plan.on_driver_tasks({"sum"}, tuple(TaskPoint), setting)  # fires on every attempt: fine
    # A COMMIT done by the driver passes only the committed point: tuple faults cannot fire.
    plan.on_driver_tasks({"split", "count"}, (TaskPoint.COMMITTED,), setting)
    with pytest.raises(ConfigError, match=r"\['keep'\] \(at committed\)"):
        plan.on_driver_tasks({"keep"}, (TaskPoint.COMMITTED,), setting)
