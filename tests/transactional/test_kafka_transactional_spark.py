"""The transactional Kafka spouts on real Spark: Python workers that die mid-batch.

``ktx_topologies``' word count (Kafka spout -> ``split`` -> committer ``count``, state in
Redis) reads a topic of 3-4 partitions on the test broker, on the shared ``local[2]`` session,
while three Python workers die in one run, each on its first Spark attempt, so that Spark
runs the task again inside the same batch attempt:

- ``split`` (processing phase) and ``count`` (commit phase, run on the executors) by
  ``topology.faults`` task faults of kind ``crash``;
- an emitter task, by the spout itself (``ktx_topologies.EmitterCrash``: ``topology.faults``
  cannot reach an emitter, which has no input tuples, and refuses a fault there), at its
  first emission of a partition in txid 1 or 2, after writing 0 or 3 more records to that
  partition (seeded), so that Spark's retry may list another end.

Afterwards the committed counts equal a plain count of what was written (each record has a
word of its own, so each record was counted exactly once), each txid committed once and in
order, no batch attempt failed, the spout's stored metas end at each partition's end, and the
log shows each crashed task run again by Spark (attempt 0, then 1) within one batch attempt,
and emitter task ``i`` of ``k`` reading the partitions ``p % k == i``.

Seeds vary the partitions, the records, the batch size, ``topology.max.spout.pending`` (1:
the emitters run inside the processing job), the spout's parallelism and where the workers
die. ``STATEFULBOLTS_KAFKA_TX_SEEDS=25`` runs seeds 0-24 (``a-b``: a to b); by default, seeds 0
and 1, each with both spouts.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kafka_fixtures import KafkaBroker
from ktx_topologies import (
    LOG_KEY,
    EmitterCrash,
    Params,
    Written,
    build,
    positions,
    read_by,
    read_log,
    seeds,
)

from examples import kafka_transactional_crash as demo

pytestmark = [pytest.mark.spark, pytest.mark.redis, pytest.mark.kafka]

TIMEOUT = 240


@dataclass(frozen=True)
class CrashPlan:
    """One seed's topic, topology and the three workers that die."""

    partitions: int
    records: int
    take: int
    pending: int
    spouts: int
    split: dict[str, Any]
    count: dict[str, Any]
    emitter_txid: int
    emitter_partition: int
    more: int

    @classmethod
    def of(cls, seed: int, opaque: bool) -> CrashPlan:
        """Seed 0: 4 partitions, pending 2, 2 spout tasks; others seeded. Crashes hit full
        batches (txid 1 or 2), so every crashed task has the tuple its fault waits for."""
        rng = random.Random(f"ktx-spark/{seed}/{opaque}")
        if seed == 0:
            partitions, records, take, pending, spouts = 4, 8, 2, 2, 2
        else:
            partitions, records, take = rng.randint(3, 4), rng.randint(6, 10), rng.randint(2, 3)
            pending, spouts = rng.randint(1, 3), rng.randint(1, 3)

        def fault(component: str) -> dict[str, Any]:
            return {"component": component, "task": rng.randrange(2), "kind": "crash",
                    "at_tuple": rng.randint(0, 1), "attempts": "first",
                    "txid": rng.randint(1, 2)}  # fmt: skip

        return cls(
            partitions,
            records,
            take,
            pending,
            spouts,
            fault("split"),
            fault("count"),
            rng.randint(1, 2),
            rng.randrange(partitions),
            rng.choice([0, 3]),
        )


def _spark_runs(log: Path, component: str, task: int, txid: int) -> list[tuple[int, int]]:
    """(batch attempt, Spark attempt) of each prepare of one task in one txid, sorted."""
    lines = read_log(log, kind="prepare", component=component, task=task, txid=txid)
    return sorted((line["attempt"], line["spark_attempt"]) for line in lines)


@pytest.mark.parametrize("opaque", [False, True], ids=["partitioned", "opaque"])
@pytest.mark.parametrize("seed", seeds(2))
def test_python_workers_dying_mid_batch_leave_kafka_counts_and_positions_exact(
    seed: int,
    opaque: bool,
    cluster: Any,
    kafka_broker: KafkaBroker,
    redis_db: Any,
    tmp_path: Path,
) -> None:
    plan = CrashPlan.of(seed, opaque)
    topic = kafka_broker.create_topic(kafka_broker.new_topic_name("ktx-spark"), plan.partitions)
    written = Written(kafka_broker.bootstrap, topic)
    written.fill(plan.partitions, plan.records, seed)
    more = written.sentences_for(f"more/{seed}", plan.more)
    marker = tmp_path / "emitter-crashed"
    crash = EmitterCrash(plan.emitter_txid, plan.emitter_partition, str(marker), tuple(more))
    tid = f"ktx-spark-{uuid.uuid4().hex[:8]}"
    params = Params(tid, kafka_broker.bootstrap, topic, opaque, plan.take, plan.spouts, crash)
    log = tmp_path / "tasks.jsonl"
    conf = {
        **demo.provider_conf(redis_db.url, plan.pending),
        "topology.faults": {"tasks": [plan.split, plan.count]},
        # A worker must die under the committer: the commit phase runs on the executors.
        "topology.transactional.commit.location": "executors",
        LOG_KEY: str(log),
    }
    handle = cluster.submit_topology(f"ktx-spark-{seed}", conf, build(params))
    handle.await_idle(TIMEOUT)
    counts = handle.read_state("count")
    transactions = handle.metrics()["transactions"]
    handle.kill()

    assert marker.exists(), f"{plan}: the emitter never reached its crash"
    written.add(plan.emitter_partition, more)
    # No batch attempt failed: Spark ran each dead worker's task again, inside its job.
    assert [t for t in transactions if not t["ok"]] == [], plan
    commits = [t["txid"] for t in transactions if t["action"] == "COMMIT"]
    assert commits == list(range(1, len(commits) + 1)), plan
    assert {w: n for w, n in counts.items() if n} == written.counts(), plan
    assert positions(conf, tid) == written.ends(), plan
    # Each crashed bolt task ran twice (Spark attempts 0 and 1) in one batch attempt; every
    # other task of that txid once.
    for fault in (plan.split, plan.count):
        runs = _spark_runs(log, fault["component"], fault["task"], fault["txid"])
        assert [s for _, s in runs] == [0, 1] and runs[0][0] == runs[1][0], (plan, fault, runs)
    # Emitter task i of k read the partitions p with p % k == i.
    k = plan.spouts
    assert read_by(log) == ({k}, {(p, p % k) for p in range(plan.partitions)}), plan
    emits = read_log(log, kind="emit", txid=plan.emitter_txid, partition=plan.emitter_partition)
    assert [e["spark_attempt"] for e in emits] == [0, 1], (plan, emits)
    assert emits[0]["attempt"] == emits[1]["attempt"], (plan, emits)
