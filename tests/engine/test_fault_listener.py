"""The fault listener: a no-op by default, ``FaultPlan`` when ``topology.faults`` configures one."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import topologies as topo
import tx_topologies as tx

from recovery import Attempts, FaultKind, FaultPlan, InjectedFault
from statefulbolts import LocalCluster, MemoryTransactionalSpout, TransactionalTopologyBuilder
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


def test_a_task_fault_that_could_never_fire_is_refused_naming_it_and_why() -> None:
    bolts, spouts = {"split": 2, "count": 3}, {"spout"}
    _plan({"component": "count", "task": 2}).on_topology(bolts, spouts)
    cases = {
        "spout": r"'spout' is a spout: its tasks take no input tuple \(nor do a transactional "
        r"topology's emitter tasks\)",
        "counter": r"the topology has no component 'counter'; its bolts: \['count', 'split'\]",
        "count": r"'count' has 3 tasks, 0 to 2",
    }
    for component, why in cases.items():
        task = 3 if component == "count" else 0
        plan = _plan({"component": component, "task": task, "kind": "crash"})
        with pytest.raises(
            ConfigError, match=rf"in '{component}' task {task} could never fire: {why}"
        ):
            plan.on_topology(bolts, spouts)


def _emitted_words(tid: str, folder: Path) -> Any:
    spout = MemoryTransactionalSpout({0: [["a"], ["b"]], 1: [["c"]]}, ["word"], 2)
    b = TransactionalTopologyBuilder(tid, "spout", spout, 2)
    b.set_bolt("ones", tx.Ones(), 2).shuffle_grouping("spout")
    b.set_committer_bolt("commit", tx.CountCommitter(tx.Log(folder)), 2).fields_grouping(
        "ones", ["word"]
    )
    return b.build_topology()


def test_a_run_whose_fault_could_never_fire_is_refused_at_submit(tmp_path: Path) -> None:
    # A crash meant for a transactional spout's emitter, or for a checkpointed topology's
    # spout, once ran the whole topology without ever firing: the chaos run "passed".
    emitter = {"component": "spout", "task": 0, "kind": "crash", "attempts": "first"}
    source = {"component": "sentences", "task": 0, "kind": "raise"}
    past = {"component": "count", "task": 2, "kind": "raise"}
    name = topo.new_key("never")
    with LocalCluster(engine="inline") as cluster:
        for fault, topology in [
            (emitter, _emitted_words(name, tmp_path)),
            (source, topo.wordcount(name, 10, 2)),
            (past, topo.wordcount(name, 10, 2)),
        ]:
            conf = {"topology.faults": {"tasks": [fault]}}
            with pytest.raises(
                ConfigError, match=rf"in '{fault['component']}' task \d could never"
            ):
                cluster.submit_topology(name, conf, topology)
        # A fault that can fire is taken: the run starts.
        conf = {"topology.faults": {"tasks": [{**past, "task": 1, "txid": 10**6}]}}
        cluster.submit_topology(name, conf, topo.wordcount(name, 10, 2)).kill()
