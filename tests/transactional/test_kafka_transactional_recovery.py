"""The Kafka crash demo's scenarios: a driver killed at each point over Kafka, restarted, exact.

Each scenario writes sentences to a new topic of four partitions on the test broker (Tansu) and
runs ``examples.kafka_transactional_crash``'s topology (a transactional Kafka spout, 2 tasks ->
``split`` -> committer ``count``, every state in Redis) as a child driver,
``statefulbolts run examples.kafka_transactional_crash:topology``, with ``topology.faults``
killing it at one point of txid ``K``. It checks that the driver died, what
``transactional_status`` says a restart replays, then starts the same topology again (in this
process: a restart is a new driver over the same Redis and topic) and checks with the demo's
own ``check``: every count equal to a plain count of the topic, each word's stored txid the
last txid whose batch held it (so every replay read the very records of its first attempt),
the restart's first commit the txid ``currtx`` pointed at, no txid committed twice.

Two more scenarios need what only Kafka can do to a stored batch: the topic deleted and made
again under a killed driver (Tansu cannot expire records; a remade topic is how the tests lose
offsets, see ``kafka_fixtures``). The partitioned spout's restart then stops with
``KafkaReplayError`` naming the partition, the txid and the offsets; the opaque spout's restart
reads the new topic from its start, reports the jump, and counts exactly what it read.

``STATEFULBOLTS_TX_SEED`` (default 0: K = 3, two txids in flight, two records per partition
and batch) varies K, ``topology.max.spout.pending`` and the batch size, for loops such as
``for s in $(seq 1 20); do STATEFULBOLTS_TX_SEED=$s pytest ... ; done``.
"""

from __future__ import annotations

import collections
import json
import os
import random
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kafka_fixtures import KafkaBroker
from recovery_topologies import run_driver_process

from examples import kafka_transactional_crash as demo
from examples.corpus import words
from examples.transactional_crash import corpus
from recovery.faults import KILLED_EXIT_CODE
from statefulbolts import LocalCluster
from statefulbolts.errors import TopologyFailedError
from statefulbolts.transactional import transactional_status

pytestmark = [pytest.mark.spark, pytest.mark.redis, pytest.mark.kafka]

ROOT = Path(__file__).resolve().parents[2]
SEED = int(os.environ.get("STATEFULBOLTS_TX_SEED", "0"))
PARTITIONS = 4
PER_PARTITION = 24
RUN_TIMEOUT = 150
TIMEOUT = 120
POINTS = ["during-processing", "after-processed", "mid-commit", "after-commit"]
COMMITTING = {"mid-commit", "after-commit"}
# These killed children and their restarts run on Spark (the emitters read Kafka in Spark
# tasks), the others on the inline engine: what is under test is the protocol across a real
# process death, and a JVM per child costs some 8 s.
ON_SPARK = {("during-processing", False), ("mid-commit", True)}


@dataclass(frozen=True)
class Plan:
    """What one scenario kills and how big its batches are."""

    txid: int
    pending: int
    take: int


def plan_for(point: str, seed: int = SEED) -> Plan:
    """Seed 0: txid 3, pending 2, take 2; other seeds vary all three (data lasts 8+ txids)."""
    if seed == 0:
        return Plan(3, 2, 2)
    rng = random.Random(f"kafka/{seed}/{point}")
    return Plan(rng.randint(1, 5), rng.randint(1, 3), rng.randint(2, 3))


@pytest.fixture
def conf_of(redis_db: Any) -> Any:
    def make(pending: int) -> dict[str, Any]:
        return demo.provider_conf(redis_db.url, pending)

    return make


def _data() -> dict[int, list[list[str]]]:
    return corpus(PARTITIONS, PER_PARTITION)


def _topic(broker: KafkaBroker, data: dict[int, list[list[str]]]) -> str:
    topic = broker.new_topic_name("ktx")
    demo.write_topic(broker.bootstrap, topic, data)
    return topic


def _run_child(
    conf: dict[str, Any], params: demo.Params, tmp: Path, engine: str
) -> tuple[int, list[Any], str]:
    path = tmp / "killed.json"
    path.write_text(json.dumps(conf), encoding="utf-8")
    cmd = demo.child_command(path, "ktx-killed")
    cmd = [*cmd, "--engine", engine]
    return run_driver_process(cmd, ROOT, RUN_TIMEOUT, params.env())


def _restart(
    params: demo.Params, conf: dict[str, Any], engine: str, request: pytest.FixtureRequest
) -> Any:
    """The same topology again in this process, until idle: (committed txids, handle metrics)."""
    cluster = request.getfixturevalue("cluster") if engine == "spark" else None
    if cluster is None:
        cluster = LocalCluster(engine="inline")
        request.addfinalizer(cluster.shutdown)
    topology = demo.build(
        params.topic,
        params.bootstrap,
        opaque=params.opaque,
        take_per_batch=params.take_per_batch,
        transactional_id=params.transactional_id,
    )
    return cluster.submit_topology("ktx-restarted", conf, topology)


def _commits(events: list[dict[str, Any]]) -> list[int]:
    return [e["txid"] for e in events if e.get("action") == "COMMIT" and e["ok"]]


# --------------------------------------------------------------------------- driver kills
CASES = [pytest.param(p, False, id=p) for p in POINTS]
CASES.append(pytest.param("mid-commit", True, id="mid-commit-opaque"))


@pytest.mark.parametrize(("point", "opaque"), CASES)
def test_a_driver_killed_at_a_point_over_kafka_is_restarted_and_counts_exactly(
    point: str,
    opaque: bool,
    kafka_broker: KafkaBroker,
    conf_of: Any,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    plan = plan_for(point)
    k = plan.txid
    data = _data()
    topic = _topic(kafka_broker, data)
    tid = f"ktx-{point}-{uuid.uuid4().hex[:6]}"
    params = demo.Params(tid, kafka_broker.bootstrap, topic, opaque, plan.take)
    conf = conf_of(plan.pending)
    engine = "spark" if (point, opaque) in ON_SPARK else "inline"

    # 1. The driver dies at the point, in txid K.
    fault = {"driver": {"point": point, "txid": k}}
    status, events, err = _run_child({**conf, "topology.faults": fault}, params, tmp_path, engine)
    assert status == KILLED_EXIT_CODE, f"{plan}: driver exited {status}, not killed:\n{err[-3000:]}"
    assert point == "mid-commit" or f"injected driver kill at {point} (txid {k})" in err
    first = _commits(events)
    assert first == list(range(1, len(first) + 1))

    # 2. What a restart will do, read from Redis: commit from currtx on, replaying K.
    before = transactional_status(conf, tid)
    current = before.current_txid
    assert current == (first[-1] + 1 if first else 1)
    assert k in before.replays, (plan, before)
    assert before.replays == list(range(current, current + len(before.replays)))
    assert len(before.replays) <= plan.pending
    stored = demo.stored_words(conf, tid)
    written = max((txid for txid, _ in stored.values()), default=0)
    if point in COMMITTING:
        assert current == k and written == k  # some committer holds K already
    else:
        assert current <= k and written < k  # processing writes no committed state
    if not opaque:
        # A partitioned spout's emitted txids have their offset ranges stored: K's, unless
        # the kill came while K's emitters ran inside its job (pending 1, during-processing).
        ranges = {t for metas in before.partitions.values() for t in metas}
        assert (k in ranges) == (plan.pending > 1 or point != "during-processing")

    # 3. The restart: the same topology, no fault, until idle; the demo's check.
    handle = _restart(params, conf, engine, request)
    handle.await_idle(TIMEOUT)
    metrics = handle.metrics()
    handle.kill()
    again = [t["txid"] for t in metrics["transactions"] if t["ok"] and t["action"] == "COMMIT"]
    assert again[0] == current and again == list(range(current, current + len(again)))
    assert all(t["ok"] for t in metrics["transactions"]), metrics["transactions"]
    assert metrics["errors"] == []  # no gap: nothing was skipped
    result = demo.check(conf, tid, first + again, data, plan.take)
    assert result["counts_exact"], result
    assert result["txids_as_planned"] and result["all_committed"], result
    assert result["committed_twice"] == [] and result["exact"]


# --------------------------------------------------------------------------- records gone
def _killed_then_remade(
    broker: KafkaBroker, conf: dict[str, Any], tmp: Path, opaque: bool
) -> tuple[demo.Params, dict[int, list[list[str]]], int]:
    """A driver killed at after-processed of txid 3 (1 committed, 2-3 stored); then the topic
    deleted and made again with two sentences per partition: (params, new data, committed)."""
    data = _data()
    topic = _topic(broker, data)
    params = demo.Params(f"ktx-gone-{uuid.uuid4().hex[:6]}", broker.bootstrap, topic, opaque, 4)
    fault = {"driver": {"point": "after-processed", "txid": 3}}
    status, events, err = _run_child({**conf, "topology.faults": fault}, params, tmp, "inline")
    assert status == KILLED_EXIT_CODE, err[-3000:]
    committed = transactional_status(conf, params.transactional_id).committed_txid or 0
    assert _commits(events) == list(range(1, committed + 1)) and committed <= 2
    broker.delete_topic(topic)
    new = {p: [[f"fresh words p{p} n{i}"] for i in range(2)] for p in range(PARTITIONS)}
    demo.write_topic(broker.bootstrap, topic, new)
    return params, new, committed


def test_a_partitioned_restart_whose_stored_offsets_are_gone_stops_naming_them(
    kafka_broker: KafkaBroker, conf_of: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    conf = conf_of(2)
    params, _, committed = _killed_then_remade(kafka_broker, conf, tmp_path, opaque=False)
    handle = _restart(params, conf, "inline", request)
    with pytest.raises(TopologyFailedError) as stopped:
        handle.await_idle(TIMEOUT)
    handle.kill()
    replay = committed + 1  # the first stored txid: records 4 * committed .. of each partition
    first, last = 4 * committed, 4 * committed + 3
    message = str(stopped.value)
    assert stopped.value.fatal, message  # stopped at once: no retry brings records back
    assert (
        f"KafkaReplayError: KafkaTransactionalSpout: cannot replay txid {replay} of partition "
        f"0 ({params.topic}/0): its batch was the 4 records at offsets {first} to {last}, and "
        "the partition now holds offsets 0 to 1; the records were deleted" in message
    )
    # Nothing of the lost batch was committed: the store still points at it.
    after = transactional_status(conf, params.transactional_id)
    assert after.current_txid == replay and replay in after.replays


def test_an_opaque_restart_reads_a_remade_topic_from_its_start_and_counts_what_it_read(
    kafka_broker: KafkaBroker, conf_of: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    conf = conf_of(2)
    params, new, committed = _killed_then_remade(kafka_broker, conf, tmp_path, opaque=True)
    handle = _restart(params, conf, "inline", request)
    handle.await_idle(TIMEOUT)
    counts = handle.read_state("count")
    metrics = handle.metrics()
    handle.kill()
    # The committed txids' records of the old topic (four a partition each), then all of the
    # new topic's: the replays of the stored txids read the new records instead of the old.
    want: collections.Counter[str] = collections.Counter()
    for rows in _data().values():
        for row in rows[: 4 * committed]:
            want.update(words(row[0]))
    for rows in new.values():
        for row in rows:
            want.update(words(row[0]))
    assert {w: n for w, n in counts.items() if n} == dict(want)
    jumps = [e for e in metrics["errors"] if "a jump back" in e]
    assert len(jumps) == PARTITIONS, metrics["errors"]
    position = 4 * committed
    assert (
        f"OpaqueKafkaTransactionalSpout: partition 0 ({params.topic}/0), txid {committed + 1}: "
        f"the partition now ends at offset 2, before the saved position {position}" in jumps[0]
    )


if __name__ == "__main__":  # pragma: no cover - a loop helper
    sys.exit(pytest.main([__file__, "-q"]))
