"""A run without ``topology.faults`` never enters fault code (``recovery.faults``).

Every function and method ``recovery.faults`` defines is replaced, for the test, by one that
raises ``Tripped``: a run that made a ``FaultPlan`` (its ``__init__``, ``from_conf``), asked one
anything (``on_driver``, ``tuple_target``, ``on_driver_tasks``, ...) or called one of the
module's functions fails with it. Both protocols run to the end on both engines with every
commit where it runs anyway (the driver commits, "auto"), and hold ``NO_FAULTS``, the listener
the engine ships to every task (a Spark worker runs only what the driver pickled, and the driver
made nothing of ``recovery.faults``). A run that does configure faults trips at once: the
patch holds.
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import topologies as topo
import tx_topologies as tx

import recovery.faults
from examples.wordcount import expected_counts
from statefulbolts import LocalCluster, MemoryTransactionalSpout, TransactionalTopologyBuilder
from statefulbolts.listeners import NO_FAULTS

TIMEOUT = 240
ENGINES = ["inline", pytest.param("spark", marks=pytest.mark.spark)]
CONF = {"topology.state.checkpoint.interval.ms": 100}
DATA = {0: [["cat"], ["dog"], ["cat"]], 1: [["dog"], ["fig"]], 2: [["cat"], ["kiwi"]]}


class Tripped(AssertionError):
    """Fault code ran."""


def _tripwire(where: str) -> Any:
    def tripped(*args: Any, **kwargs: Any) -> Any:
        raise Tripped(f"fault code ran: {where}")

    return tripped


@pytest.fixture
def no_fault_code(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every function and method of ``recovery.faults`` raises ``Tripped``; their names."""
    module = recovery.faults
    patched = []
    for name, value in vars(module).items():
        if getattr(value, "__module__", None) != module.__name__:
            continue  # imported, not defined here
        if inspect.isfunction(value):
            monkeypatch.setattr(module, name, _tripwire(name))
            patched.append(name)
        elif inspect.isclass(value) and not issubclass(value, enum.Enum | BaseException):
            for attr, member in vars(value).items():
                if isinstance(member, staticmethod | classmethod | property) or inspect.isfunction(
                    member
                ):
                    where = f"{name}.{attr}"
                    wire = _tripwire(where)
                    if isinstance(member, property):
                        wire = property(wire)
                    monkeypatch.setattr(value, attr, wire)
                    patched.append(where)
    return patched


@pytest.fixture
def engine_cluster(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A ``LocalCluster`` on the engine ``request.param`` names (Spark: the shared session)."""
    if request.param == "spark":
        yield request.getfixturevalue("cluster")
        return
    with LocalCluster(engine="inline") as cluster:
        yield cluster


def _transactional(tid: str, folder: Path) -> Any:
    spout = MemoryTransactionalSpout(DATA, ["word"], 2)
    b = TransactionalTopologyBuilder(tid, "spout", spout, 2)
    b.set_bolt("ones", tx.Ones(), 2).shuffle_grouping("spout")
    b.set_committer_bolt("commit", tx.CountCommitter(tx.Log(folder)), 2).fields_grouping(
        "ones", ["word"]
    )
    return b.build_topology()


def test_the_tripwire_covers_the_plan_and_its_hooks(no_fault_code: list[str]) -> None:
    hooks = ("from_conf", "__init__", "on_driver", "tuple_target", "on_driver_tasks")
    for where in [*(f"FaultPlan.{hook}" for hook in hooks), "TaskFault.matches"]:
        assert where in no_fault_code
    with pytest.raises(Tripped):
        recovery.faults.FaultPlan.from_conf({})


@pytest.mark.parametrize("engine_cluster", ENGINES, indirect=True)
def test_a_run_without_faults_never_enters_fault_code(
    no_fault_code: list[str], engine_cluster: Any, tmp_path: Path
) -> None:
    name = topo.new_key("no-faults")
    handle = engine_cluster.submit_topology(name, CONF, topo.wordcount(name, 40, 2))
    try:
        handle.await_idle(TIMEOUT)
        assert handle.runner.faults is NO_FAULTS and handle.runner.engine.faults is NO_FAULTS
        assert handle.runner.jobs.commits_here  # the driver commits, as without the patch
        assert handle.read_state("count") == expected_counts(40)
    finally:
        handle.kill()

    tid = topo.new_key("no-faults-tx")
    handle = engine_cluster.submit_topology(tid, CONF, _transactional(tid, tmp_path))
    try:
        handle.await_idle(TIMEOUT)
        assert handle.runner.faults is NO_FAULTS and handle.runner.engine.faults is NO_FAULTS
        assert handle.runner.jobs.commit_here
        assert handle.read_state("commit") == tx.total(DATA)
    finally:
        handle.kill()


def test_a_run_with_faults_trips_the_wire(no_fault_code: list[str]) -> None:
    name = topo.new_key("faults")
    faults = {"tasks": [{"component": "count", "task": 0, "kind": "raise", "attempts": "every"}]}
    with LocalCluster(engine="inline") as cluster, pytest.raises(Tripped):
        cluster.submit_topology(
            name, {**CONF, "topology.faults": faults}, topo.wordcount(name, 4, 2)
        )
