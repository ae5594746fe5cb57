"""Fault injection by config (``topology.faults``) on real Spark: crashes, poison, restart."""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

import pytest
from outage_topologies import redis_conf
from topologies import logged_wordcount

from examples.corpus import sentence, words
from examples.wordcount import build, expected_counts
from providers import STATE_PROVIDER_CONFIG_KEY, STATE_PROVIDER_KEY
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


def _store_conf(store: str, request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    if store == "redis":
        return redis_conf(request.getfixturevalue("redis_db").port)
    if store == "sqlite":
        return {
            STATE_PROVIDER_KEY: "sqlite_state.SqliteKeyValueStateProvider",
            STATE_PROVIDER_CONFIG_KEY: json.dumps({"path": str(tmp_path / "state.sqlite3")}),
        }
    return {}


@pytest.mark.parametrize(
    "store", ["memory", pytest.param("redis", marks=pytest.mark.redis), "sqlite"]
)
@pytest.mark.parametrize("kind", ["crash", "raise"])
def test_an_attempt_lost_after_its_state_prepared_does_not_count_twice(
    cluster: Any, store: str, kind: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    # The first attempt of every count task prepares its transaction in the store and is then
    # lost, as when an executor dies after its task finished. The retry must start from the
    # committed state, not from the lost attempt's prepared delta, and replace that delta.
    log = tmp_path / "prepares.log"
    conf = {
        **_store_conf(store, request, tmp_path),
        "topology.max.spout.pending": 60,
        "topology.state.checkpoint.interval.ms": 50,
        **faults(
            *(
                {"component": "count", "task": task, "at": "prepared", "kind": kind}
                for task in (0, 1)
            )
        ),
    }
    name = f"fault-prepared-{store}-{kind}"
    handle = cluster.submit_topology(name, conf, logged_wordcount(300, 2, str(log)))
    handle.await_idle(TIMEOUT)
    assert handle.read_state("count") == dict(expected_counts(300))
    prepares = collections.Counter(log.read_text().splitlines())
    prepared = [t for t in handle.metrics()["transactions"] if t["action"] == "PREPARE"]
    assert len(prepared) >= 3, prepared  # several transactions, each with a lost attempt
    # Each task prepared each transaction twice: the lost attempt, then Spark's retry.
    assert set(prepares.values()) == {2}, prepares
    assert len(prepares) == 2 * len({t["txid"] for t in prepared})
    # No transaction failed: Spark's retry inside the job was enough.
    assert all(t["ok"] for t in handle.metrics()["transactions"])
    handle.kill()


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
    pending = {
        "topology.max.spout.pending": 100,
        "topology.max.transaction.retries": 2,
        "topology.deadletter.policy": "stop",  # the stop itself is under test
    }
    poison = {"component": "count", "task": 0, "at_tuple": 0, "kind": "raise", "txid": 1}
    topology = build(300, 2)
    handle = cluster.submit_topology(
        name, {**pending, **faults({**poison, "attempts": "every"})}, topology
    )
    with pytest.raises(TopologyFailedError) as info:
        handle.await_idle(TIMEOUT)
    err = info.value
    assert (err.component, err.task, err.txid) == ("count", 0, 1)  # its index
    assert "InjectedFault" in str(err) and "PREPARE(1)" in str(err)
    # What committed before the poison is exactly what the spout saw acked (acks follow
    # commits); the poisoned transaction left nothing behind.
    spout = handle.runner.spouts.tasks[0].spout
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
