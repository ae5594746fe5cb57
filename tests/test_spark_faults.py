"""Fault injection by config (``topology.faults``) on real Spark: crashes, poison, restart."""

from __future__ import annotations

import collections
from typing import Any

import pytest

from examples.corpus import sentence, words
from examples.wordcount import build, expected_counts
from statefulbolts import TopologyFailedError

pytestmark = pytest.mark.spark

TIMEOUT = 180


def faults(*tasks: dict[str, Any]) -> dict[str, Any]:
    return {"topology.faults": {"tasks": list(tasks)}}


def test_worker_crash_on_first_attempt_is_retried_and_exact(cluster: Any) -> None:
    conf = faults(
        {"component": "count", "task": 1, "at_tuple": 5, "kind": "crash", "attempts": "first"}
    )
    handle = cluster.submit_topology("fault-crash-first", conf, build(200, 2))
    handle.await_idle(TIMEOUT)
    assert handle.read_state("count") == dict(expected_counts(200))
    transactions = handle.metrics()["transactions"]
    # Spark retried the crashed task inside the job: no transaction failed or rolled back.
    assert all(t["ok"] for t in transactions)
    assert "ROLLBACK" not in [t["action"] for t in transactions]


def test_worker_crash_on_every_attempt_stops_with_the_task_named(cluster: Any) -> None:
    conf = {
        **faults(
            {"component": "count", "task": 0, "at_tuple": 2, "kind": "crash", "attempts": "every"}
        ),
        "topology.max.transaction.retries": 1,
    }
    handle = cluster.submit_topology("fault-crash-every", conf, build(50, 2))
    with pytest.raises(TopologyFailedError) as info:
        handle.await_idle(TIMEOUT)
    # A dead Python worker leaves no Python error to parse: the message names the Spark job
    # and what Spark reported; the txid is the transaction that kept failing.
    assert info.value.txid == 0
    assert "failed 2 times in a row" in str(info.value)
    assert handle.read_state("count") == {}
    handle.kill()


def test_poison_stops_the_topology_and_a_fixed_restart_carries_on(cluster: Any) -> None:
    name = "fault-poison"
    pending = {"topology.max.spout.pending": 100, "topology.max.transaction.retries": 2}
    poison = {"component": "count", "task": 0, "at_tuple": 0, "kind": "raise", "txid": 1}
    topology = build(300, 2)
    handle = cluster.submit_topology(
        name, {**pending, **faults({**poison, "attempts": "every"})}, topology
    )
    with pytest.raises(TopologyFailedError) as info:
        handle.await_idle(TIMEOUT)
    err = info.value
    assert (err.component, err.task, err.txid) == ("count", topology.task_ids("count")[0], 1)
    assert "InjectedFault" in str(err) and "PREPARE(1)" in str(err)
    # What committed before the poison is exactly what the spout saw acked (acks follow
    # commits); the poisoned transaction left nothing behind.
    spout = handle.runner._spouts[0].spout
    acked = sorted(set(range(spout.next_index)) - spout.pending)
    assert acked, "no transaction committed before the poisoned one"
    before: collections.Counter[str] = collections.Counter()
    for i in acked:
        before.update(words(sentence(i)))
    assert handle.read_state("count") == dict(before)
    handle.kill()

    # The bolt is "fixed" (no fault) and the same topology starts again in this driver, whose
    # in-memory store still holds the state: it recovers from PREPARING(1) and carries on.
    restarted = cluster.submit_topology(name, pending, build(300, 2))
    restarted.await_idle(TIMEOUT)
    actions = [(t["action"], t["txid"]) for t in restarted.metrics()["transactions"]]
    assert actions[:3] == [("ROLLBACK", 1), ("INITSTATE", 0), ("PREPARE", 1)]
    # The new spout replays all 300 sentences on top of what had committed.
    assert restarted.read_state("count") == dict(expected_counts(300) + before)
    restarted.kill()
