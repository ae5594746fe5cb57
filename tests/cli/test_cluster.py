"""On a real Spark standalone cluster: a worker machine dies mid-run and nothing is lost.

The cluster (``tests/standalone_cluster.py``) is a master and two one-core workers from
pyspark's ``spark-class``, all on 127.0.0.1. The driver runs in a subprocess
(``tests/cluster_driver.py``) because this test session already holds a ``local[2]``
SparkSession. Mid-run the test kills one worker's whole process tree at once: the worker JVM,
its executor JVM (``CoarseGrainedExecutorBackend``) and the executor's Python workers, as if
the machine died. The word count must still finish on the surviving worker with exact counts in
Redis. A third of its sentences come from a driver spout, a third from Redis streams read on
the executors by a ``PartitionedRedisStreamSpout``, a third from files read on the executors by a
``DirectorySpout`` (two tasks each: the lost executor held one of each, and Spark runs them
again on the survivor), so one machine's death covers every kind of source; the positions saved
with the checkpoint must be each stream's last entry and each file's size.

Where the kill lands is chosen, not left to timing: ``STATEFULBOLTS_FAULT_SEED`` (default 0;
loop it over seeds 0-19) picks the transaction t (3 to 6) and the job. In PREPARE(t), a
``"hold"`` fault (``recovery.faults``) stops one ``count`` task after its state prepared, the
test kills the machine while it waits, then releases it: the lost executor held spout and split
output of that job, which Spark reads again from the same positions and ends. In COMMIT(t)
(committed by the executors), the hold is in a ``count`` task after its state committed.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from outage_topologies import CHECKPOINT, counts_in_redis, decode_hash
from standalone_cluster import (
    LOOPBACK,
    DriverProcess,
    Standalone,
    alive,
    kill_tree,
    start_standalone,
)

from examples.wordcount import expected_counts
from statefulbolts.runtime._spark import is_loopback_master

SENTENCES = 4000
NAME = "wc-cluster"


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[Standalone]:
    """A master and two workers (1 core, 1 GiB each) on 127.0.0.1; every process killed after."""
    with start_standalone(tmp_path) as cluster:
        yield cluster


# ------------------------------------------------------------------------------ the test


def test_loopback_standalone_masters_are_recognised() -> None:
    assert is_loopback_master("spark://127.0.0.1:7077")
    assert is_loopback_master("spark://localhost:7077,127.0.0.1:7078")
    assert not is_loopback_master("spark://10.0.0.5:7077")
    assert not is_loopback_master("spark://127.0.0.1:7077,spark-2:7077")
    assert not is_loopback_master("yarn")
    assert not is_loopback_master("local[2]")


# A third of SENTENCES each from the driver spout (100 a transaction: ~14 transactions), from
# STREAMS streams and from STREAMS files (2 tasks of 100 each: ~7): all still read when the
# kill lands (transaction 3 to 6).
PENDING = 100
STREAMS = 4
SEED = int(os.environ.get("STATEFULBOLTS_FAULT_SEED", "0"))
TXID = 3 + SEED % 4
IN_PREPARE = (SEED // 4) % 2 == 0  # seeds 0-3, 8-11, ...: the kill lands in PREPARE(TXID)


@pytest.mark.spark
@pytest.mark.redis
@pytest.mark.slow
def test_worker_machine_dies_mid_run_and_counts_stay_exact(
    standalone: Standalone, redis_db: Any, tmp_path: Path
) -> None:
    started, begun = time.monotonic(), time.time()
    marker = tmp_path / "held"
    hold = {
        "component": "count", "task": SEED % 2, "at": "prepared" if IN_PREPARE else "committed",
        "kind": "hold", "txid": TXID, "marker": str(marker),
    }  # fmt: skip
    driver = DriverProcess(
        [
            "--master", standalone.url,
            "--redis-port", str(redis_db.port),
            "--sentences", str(SENTENCES),
            "--name", NAME,
            "--pending", str(PENDING),
            # COMMIT jobs too (not done by the driver): a COMMIT-aimed hold is in a task.
            "--commit-location", "executors",
            "--faults", json.dumps({"tasks": [hold]}),
            "--source", "mixed",
            "--streams", str(STREAMS),
            "--files-dir", str(tmp_path / "files"),
        ],
        tmp_path / "driver.log",
    )  # fmt: skip
    victim, survivor = standalone.workers
    try:
        deadline = time.monotonic() + 180
        ready = driver.next_event(deadline)
        assert ready["event"] == "ready", ready
        assert ready["executors"] == 2, ready
        assert (ready["driver_host"], ready["bind_address"]) == (LOOPBACK, LOOPBACK)

        # A count task of the aimed job waits, the job in flight, until released; by then a
        # few transactions committed, so both executors hold Python workers and shuffle data.
        while not marker.exists():
            assert time.monotonic() < deadline, driver.tail()
            assert driver.process.poll() is None, driver.tail()
            time.sleep(0.02)
        executors = victim.executor_pids()
        assert len(executors) == 1, (executors, victim.tail())
        assert len(survivor.executor_pids()) == 1, survivor.tail()
        killed_at = time.time()
        killed = kill_tree(victim.process.pid)
        assert executors[0] in killed
        (tmp_path / "held.release").touch()

        done = None
        while done is None:
            event = driver.next_event(deadline)
            if event["event"] == "done":
                done = event
            assert event["event"] != "error", f"{event}\n{driver.tail()}"
        assert driver.process.wait(timeout=60) == 0, driver.tail()
        after = [e for e in driver.seen if e["event"] == "tx" and e["t"] > killed_at]
    finally:
        driver.stop()

    assert not alive(victim.process.pid)
    assert not any(alive(pid) for pid in killed)
    assert survivor.process.poll() is None
    assert standalone.alive_workers() == 1
    # The kill landed in a running job (jobs run back to back), and the run went on and committed.
    in_flight = [e for e in after if e["t"] - e["seconds"] <= killed_at]
    assert in_flight, after[:3]
    aimed = ("PREPARE" if IN_PREPARE else "COMMIT", TXID)
    assert (in_flight[0]["action"], in_flight[0]["txid"]) == aimed, in_flight[0]
    assert any(e["action"] == "COMMIT" and e["ok"] for e in after), after
    client = redis_db.client()
    assert counts_in_redis(client, NAME) == dict(expected_counts(SENTENCES))
    assert not client.keys(f"{NAME}/*$prepare")
    assert done["executors"] == 1  # it finished on the surviving worker's executor alone
    # Spark saw the executor go (it was not idle: it had Python workers and shuffle output).
    assert "Lost executor" in driver.log.read_text(errors="replace"), driver.tail()
    # The streams and files were read whole, once: saved where each one ends.
    last = {
        key: client.xrevrange(key, count=1)[0][0].decode()
        for key in (f"{NAME}:in:{k}" for k in range(STREAMS))
    }
    sizes = {f.name: f.stat().st_size for f in (tmp_path / "files").iterdir()}
    assert len(sizes) == STREAMS
    saved = decode_hash(client.hgetall(f"{NAME}/{CHECKPOINT}"))["__positions"]
    assert saved["spouts"] == {"streams": last, "files": sizes}
    assert done["positions"] == {"streams": last, "files": sizes}
    for source in ("sentences", "streams", "files"):
        assert done["components"][source]["emitted"] >= SENTENCES // 3, source
    print(
        f"cluster run: {time.monotonic() - started:.1f} s; driver ready after "
        f"{ready['t'] - begun:.1f} s, kill at {killed_at - begun:.1f} s, done at "
        f"{done['t'] - begun:.1f} s; {done['transactions']} transactions "
        f"({done['failed_transactions']} failed), {len(after)} after the kill; in flight at the "
        f"kill: {in_flight[0]['action']}({in_flight[0]['txid']}) of {in_flight[0]['seconds']:.2f} s"
    )
