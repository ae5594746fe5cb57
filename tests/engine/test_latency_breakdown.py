"""The latency breakdown: where a checkpoint job's time went, as its ``TransactionInfo.phases``.

Issue 36 measures each change by this breakdown, so its fields must exist and add up: the
runner's phases of a PREPARE on Spark (the driver running its split, Spark its count), and
``bench/latency.py``'s per-tuple parts, whose means are the mean latency.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import topologies as topo

from bench.latency import BREAKDOWN, FullRecord, JobStamp, breakdown

TIMEOUT = 60
RUNNER_PHASES = {"waited", "build", "engine", "spark", "task_setup", "task_execute", "task_output"}


@pytest.mark.spark
def test_a_prepare_on_spark_says_where_its_time_went(cluster: Any) -> None:
    name = topo.new_key("phases")
    infos: list[Any] = []
    handle = cluster.submit_topology(
        name,
        {"topology.state.checkpoint.interval.ms": 100},
        topo.wordcount(name, 20, 2),
        on_transaction=infos.append,
    )
    try:
        handle.await_idle(TIMEOUT)
    finally:
        handle.kill()
    prepares = [i for i in infos if i.action == "PREPARE" and i.ok]
    assert prepares
    for info in prepares:
        phases = info.phases
        # 20 sentences: the driver ran the split itself (``topology.driver.head`` auto).
        assert RUNNER_PHASES | {"head"} <= set(phases), phases
        assert all(v >= 0 for v in phases.values()), phases
        # Spark's tasks run inside Spark's run of the job, and that inside the job. Cut when its
        # first task asked (``topology.input.cut``, the default), the job ran its head and its
        # cut inside Spark's run, before its tasks had their input.
        tasks = phases["task_setup"] + phases["task_execute"] + phases["task_output"]
        assert tasks <= phases["spark"] <= info.seconds, phases
        assert {"scheduled", "feed"} <= set(phases), phases
        assert phases["feed"] + phases["head"] + tasks <= phases["spark"], phases
        assert phases["engine"] >= phases["feed"], phases
    assert sum(i.tuples for i in prepares) == 20


def _stamp(action: str, txid: int, submitted: float, done: float, **phases: float) -> JobStamp:
    stamp = JobStamp(action, txid, submitted, submitted, done)
    stamp.phases = dict(phases)
    return stamp


def test_the_bench_breakdown_adds_up_to_the_latency() -> None:
    # Two transactions; tuples 0-1 ride PREPARE(0), tuple 2 PREPARE(1).
    record = FullRecord(3)
    for i, (emit, ack) in enumerate([(0.000, 0.200), (0.040, 0.200), (0.110, 0.330)]):
        record.emitted(i, emit)
        record.ack(i, ack)
    phases = {"build": 0.002, "spark": 0.050, "task_setup": 0.010, "task_execute": 0.005}
    stamps = [
        _stamp("PREPARE", 0, 0.100, 0.170, task_output=0.003, **phases),
        _stamp("COMMIT", 0, 0.180, 0.190),
        _stamp("PREPARE", 1, 0.240, 0.300, task_output=0.001, head=0.004, **phases),
        _stamp("COMMIT", 1, 0.310, 0.320),
    ]
    found = breakdown(record, 3, stamps)
    assert found["tuples"] == 3
    assert set(BREAKDOWN) <= set(found)
    # Tuple 0: waits 98 ms, build 2, engine 70 - 50 = 20, Spark 50 - 18 = 32, framework 13,
    # user 5, settle 10, commit and ack 20: 200 ms.
    assert found["wait_for_prepare"]["max"] == pytest.approx(128.0)
    # Tuple 2's PREPARE ran its head in the driver: 4 of its 10 ms outside Spark.
    assert found["driver_engine"]["mean"] == pytest.approx((20 + 20 + 6) / 3, abs=0.01)
    assert found["driver_head"]["mean"] == pytest.approx(4 / 3, abs=0.01)
    assert found["task_framework"]["mean"] == pytest.approx((13 + 13 + 11) / 3, abs=0.01)
    assert found["user_code"]["mean"] == pytest.approx(5.0)
    assert found["commit"]["mean"] == pytest.approx((20 + 20 + 20) / 3, abs=0.01)
    assert found["sum_of_means_ms"] == pytest.approx(found["mean_ms"], abs=0.05)
    assert sum(found[n]["share"] for n in BREAKDOWN) == pytest.approx(1.0, abs=0.01)


def test_a_late_cut_starts_a_tuples_prepare_at_the_cut() -> None:
    # PREPARE(0) submitted at 100 ms, cut at 130 ms when its first task asked: tuple 1 (emitted
    # at 110 ms, after the submit) rides it too; tuple 2 (emitted at 135 ms) rides PREPARE(1).
    record = FullRecord(3)
    for i, (emit, ack) in enumerate([(0.000, 0.200), (0.110, 0.200), (0.135, 0.330)]):
        record.emitted(i, emit)
        record.ack(i, ack)
    phases = {"build": 0.002, "spark": 0.060, "task_setup": 0.010, "task_execute": 0.005}
    late = {"engine": 0.004, "scheduled": 0.032, "feed": 0.003}
    stamps = [
        _stamp("PREPARE", 0, 0.100, 0.170, task_output=0.003, **phases, **late),
        _stamp("COMMIT", 0, 0.180, 0.190),
        _stamp("PREPARE", 1, 0.240, 0.300, task_output=0.001, **phases, **late),
        _stamp("COMMIT", 1, 0.310, 0.320),
    ]
    stamps[0].cut, stamps[2].cut = 0.130, 0.262
    found = breakdown(record, 3, stamps)
    assert found["tuples"] == 3
    # Waits: 130 and 20 ms for PREPARE(0)'s cut, 127 ms for PREPARE(1)'s.
    assert found["wait_for_prepare"]["mean"] == pytest.approx((130 + 20 + 127) / 3, abs=0.01)
    assert found["driver_build"]["max"] == 0.0  # built before its tuples were taken
    assert found["driver_engine"]["mean"] == pytest.approx(4.0, abs=0.01)
    # From the cut to done: 40 ms, of which engine 4 and tasks 18: Spark's part 18 (PREPARE 0);
    # 38 ms, tasks 16: 18 (PREPARE 1).
    assert found["spark_scheduling"]["mean"] == pytest.approx(18.0, abs=0.01)
    assert found["sum_of_means_ms"] == pytest.approx(found["mean_ms"], abs=0.05)
    assert sum(found[n]["share"] for n in BREAKDOWN) == pytest.approx(1.0, abs=0.01)


def test_the_latency_bench_points_a_standalone_driver_at_loopback_and_the_checkout() -> None:
    from bench.latency import _cluster_conf

    assert _cluster_conf("local[2]") == {}
    conf = _cluster_conf("spark://127.0.0.1:7077")
    assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert conf["spark.executorEnv.SPARK_LOCAL_IP"] == "127.0.0.1"
    # The executors import the bench's bolts (``examples.wordcount``) from this checkout.
    assert (Path(conf["spark.executorEnv.PYTHONPATH"]) / "examples" / "wordcount.py").is_file()
