"""Where a transactional batch's commit phase runs: ``topology.transactional.commit.location``.

"auto" runs it in the driver, for in-memory and Redis maps alike (a commit-phase fault that
needs a Spark worker is refused, never a reason to move it); "driver" and "executors" force
it. The committers log their process id, so each test sees where they ran; Spark's status
tracker shows whether COMMIT jobs ran.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import topologies as topo
import tx_topologies as tx

from statefulbolts import (
    MemoryTransactionalSpout,
    TopologyFailedError,
    TransactionalTopologyBuilder,
)
from statefulbolts.config import validate_config
from statefulbolts.errors import ConfigError
from statefulbolts.transactional._jobs import _commit_here
from statefulbolts.transactional.runner import TransactionalRunner

pytestmark = pytest.mark.spark

TIMEOUT = 240
DATA = {
    0: [["cat"], ["dog"], ["cat"], ["apple"], ["dog"], ["cat"], ["pear"]],
    1: [["dog"], ["fig"], ["cat"], ["fig"]],
    2: [["apple"], ["cat"], ["dog"], ["dog"], ["kiwi"], ["cat"]],
}
KEY = "topology.transactional.commit.location"


def words_topology(tid: str, log: tx.Log, fail: Any = None) -> Any:
    spout = MemoryTransactionalSpout(DATA, ["word"], 2)
    b = TransactionalTopologyBuilder(tid, "spout", spout, 2)
    b.set_bolt("ones", tx.Ones(), 2).shuffle_grouping("spout")
    b.set_bolt("count", tx.Recorder(log), 2).fields_grouping("ones", ["word"])
    b.set_committer_bolt("commit", tx.CountCommitter(log, fail=fail), 2).fields_grouping(
        "count", ["key"]
    )
    return b.build_topology()


def conf(location: str | None, pending: int = 1, **extra: Any) -> dict[str, Any]:
    found = {"topology.max.spout.pending": pending, "topology.state.checkpoint.interval.ms": 100}
    if location is not None:
        found[KEY] = location
    return {**found, **extra}


def run(cluster: Any, tid: str, topology: Any, config: dict[str, Any]) -> Any:
    handle = cluster.submit_topology(tid, config, topology)
    handle.await_idle(TIMEOUT)
    return handle


def commit_jobs(spark: Any, tid: str, txids: list[int]) -> list[int]:
    """Spark job ids of the topology's COMMIT jobs (one group per txid and attempt)."""
    tracker = spark.sparkContext.statusTracker()
    found: list[int] = []
    for txid in txids:
        for attempt in range(1, 40):
            found += tracker.getJobIdsForGroup(f"{tid}/COMMIT/txid={txid}/attempt={attempt}")
    return found


def committer_pids(folder: Path) -> set[int]:
    return {e["pid"] for e in tx.events(folder, kind="finish", component="commit")}


def expected() -> dict[str, int]:
    return tx.total(DATA)


# ---------------------------------------------------------------- the decision


def test_auto_is_the_driver_for_every_provider() -> None:
    topology = words_topology("decide", tx.Log("/nonexistent"))
    assert _commit_here("auto", topology) is True
    assert _commit_here("driver", topology) is True
    assert _commit_here("executors", topology) is False


def test_auto_refuses_commit_phase_faults_that_need_a_worker_instead_of_moving_the_commit() -> None:
    def runner(faults: dict[str, Any], location: str | None = None) -> TransactionalRunner:
        topology = words_topology("decide", tx.Log("/nonexistent"))
        config = conf(location, **{"topology.faults": {"tasks": [faults]}})
        made = TransactionalRunner("decide", config, topology, None, engine="inline")
        assert made.jobs.commit_here is (location != "executors")
        return made

    on_commit = {"component": "commit", "task": 0, "kind": "raise"}
    with pytest.raises(ConfigError, match=r"\['commit'\].*commit.location to 'executors'"):
        runner(on_commit)
    # None needs a worker under the commit phase: not in it, or on every attempt.
    runner({"component": "count", "task": 0, "kind": "crash"})
    runner({"component": "commit", "task": 0, "kind": "raise", "attempts": "every"})
    # Said outright, the driver it is: the user asked for it; and the executors take any.
    runner(on_commit, "driver")
    runner(on_commit, "executors")


def test_a_wrong_location_names_the_key_and_the_allowed_values() -> None:
    with pytest.raises(ConfigError) as info:
        validate_config({KEY: "here"})
    text = str(info.value)
    assert KEY in text and "'auto', 'driver' or 'executors'" in text and "here" in text


# ---------------------------------------------------------------- on Spark, in memory


@pytest.mark.parametrize(
    ("store", "location", "in_driver"),
    [
        ("memory", None, True),
        ("memory", "driver", True),
        ("memory", "executors", False),
        pytest.param("redis", None, True, marks=pytest.mark.redis),
        pytest.param("redis", "executors", False, marks=pytest.mark.redis),
    ],
)
def test_the_commit_runs_where_the_location_says_and_counts_stay_exact(
    spark: Any,
    cluster: Any,
    tmp_path: Path,
    store: str,
    location: str | None,
    in_driver: bool,
    request: pytest.FixtureRequest,
) -> None:
    from outage_topologies import redis_conf

    log, tid = tx.Log(tmp_path), topo.new_key(f"where-{store}")
    config = conf(location, pending=2)
    if store == "redis":
        config |= redis_conf(request.getfixturevalue("redis_db").port)
    handle = run(cluster, tid, words_topology(tid, log), config)
    assert handle.read_state("commit") == expected()
    pids = committer_pids(tmp_path)
    assert pids, "no committer finished a batch"
    txids = [t["txid"] for t in handle.metrics()["transactions"] if t["ok"]]
    if in_driver:
        assert pids == {os.getpid()}
        assert commit_jobs(spark, tid, txids) == []
    else:
        assert os.getpid() not in pids
        assert len(commit_jobs(spark, tid, txids)) >= len(txids)
    # Processing ran on the executors either way.
    counters = {e["pid"] for e in tx.events(tmp_path, kind="finish", component="count")}
    assert counters and os.getpid() not in counters


def test_a_commit_failed_in_the_driver_replays_the_batch_and_stays_exact(
    cluster: Any, tmp_path: Path
) -> None:
    log, tid = tx.Log(tmp_path), topo.new_key("driver-fail")
    fail = tx.FailOnce(tmp_path, txids=[2])
    handle = run(cluster, tid, words_topology(tid, log, fail=fail), conf(None, pending=3))
    assert handle.read_state("commit") == expected()
    assert committer_pids(tmp_path) == {os.getpid()}
    failed = [t for t in handle.metrics()["transactions"] if not t["ok"]]
    assert [(t["txid"], t["action"]) for t in failed] == [(2, "COMMIT")]
    # Txid 2 was processed again under a new attempt before it committed.
    attempts = {
        e["attempt"] for e in tx.events(tmp_path, kind="prepare", component="count", txid=2)
    }
    assert len(attempts) == 2
    assert handle.status()["current_txid"] > 2


class _BrokenCommitter(tx.CountCommitter):
    """Raises an error that is not a ``FailedException`` in every attempt of txid 2."""

    def finish_batch(self) -> None:
        if self.attempt.transaction_id == 2:
            msg = "cannot commit txid 2"
            raise KeyError(msg)
        super().finish_batch()


def test_an_error_in_a_driver_commit_stops_the_topology_naming_the_committer(
    cluster: Any, tmp_path: Path
) -> None:
    tid = topo.new_key("driver-broken")
    spout = MemoryTransactionalSpout(DATA, ["word"], 2)
    b = TransactionalTopologyBuilder(tid, "spout", spout, 2)
    b.set_bolt("ones", tx.Ones(), 2).shuffle_grouping("spout")
    b.set_committer_bolt("commit", _BrokenCommitter(tx.Log(tmp_path))).global_grouping("ones")
    topology = b.build_topology()
    config = conf(None, **{"topology.max.transaction.retries": 2})
    handle = cluster.submit_topology(tid, config, topology)
    with pytest.raises(TopologyFailedError) as info:
        handle.await_idle(TIMEOUT)
    err = info.value
    assert err.component == "commit" and err.txid == 2
    assert "_BrokenCommitter" in str(err) and "cannot commit txid 2" in str(err)
    # Txid 1 (two words of each of the three partitions) committed before and stays;
    # nothing of txid 2 was applied.
    assert sum(handle.read_state("commit").values()) == 6
    failed = [e for e in handle.runner.stats.error_log if e.kind == "failed"]
    assert failed and all(e.component == "commit" for e in failed)
    # The driver's own traceback, down to the user's finish_batch.
    assert all("_BrokenCommitter" in (e.traceback or "") for e in failed), failed[0].traceback
    assert all("KeyError" in (e.traceback or "") for e in failed)


# ---------------------------------------------------------------- pipelining


@pytest.mark.parametrize("pending", [1, 3])
def test_the_next_batch_is_processed_while_the_driver_commits(
    cluster: Any, tmp_path: Path, pending: int
) -> None:
    # Each commit takes 0.4 s in the driver. Pipelined (pending 3), later txids are emitted and
    # processed on the executors while the driver commits t; at pending 1 the next txid only
    # starts once t committed.
    log, tid = tx.Log(tmp_path), topo.new_key(f"overlap-{pending}")
    spout = MemoryTransactionalSpout(DATA, ["word"], 2)
    b = TransactionalTopologyBuilder(tid, "spout", spout, 2)
    b.set_bolt("ones", tx.Ones(), 2).shuffle_grouping("spout")
    b.set_bolt("count", tx.Recorder(log), 2).fields_grouping("ones", ["word"])
    committer = tx.CountCommitter(log, sleep=0.4)
    b.set_committer_bolt("commit", committer, 1).fields_grouping("count", ["key"])
    handle = run(cluster, tid, b.build_topology(), conf(None, pending=pending))
    assert handle.read_state("commit") == expected()
    commits = {
        e["txid"]: (e["t"], f["t"])
        for e in tx.events(tmp_path, kind="prepare", component="commit")
        for f in tx.events(tmp_path, kind="finish", component="commit", attempt=e["attempt"])
    }
    starts = {e["txid"]: e["t"] for e in tx.events(tmp_path, kind="prepare", component="count")}
    data_txids = sorted(t for t in commits if t + 1 in starts)
    assert len(data_txids) >= 3, commits
    overlapped = [t for t in data_txids if commits[t][0] < starts[t + 1] < commits[t][1]]
    if pending == 1:
        assert overlapped == []
        assert all(starts[t + 1] >= commits[t][1] for t in data_txids)
    else:
        assert overlapped, (commits, starts)
