"""``KafkaSpout`` on real Spark (the shared ``local[2]`` session) against the test broker.

The word count of ``partitioned_topologies`` reads Kafka topics in the PREPARE jobs' first stage:
through a driver killed at a seeded point (state in SQLite, a new driver on the same session),
a spout parallelism changed 1 -> 3 -> 2 across restarts, a Python worker crash in a bolt (Spark
runs the task again over the spout tasks' output), and a spout task crashed after more records
were written to its partition (its retry must stop at the end the driver listed). Counts and
positions are exact. The tests loop over ``STATEFULBOLTS_PARTITIONED_SEEDS`` (default ``"0"``:
a Spark run costs seconds).
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import topologies as topo
from kafka_fixtures import KafkaBroker
from partitioned_topologies import FAST, POINTS, DriverDies, Written, kafka_word_count, seeds

from checkpoint.runner import CheckpointRunner
from examples.kafka_wordcount import SENTENCES
from providers import STATE_PROVIDER_CONFIG_KEY, STATE_PROVIDER_KEY, load_module
from statefulbolts import PartitionBatch, PartitionReader
from statefulbolts.connectors.kafka import KafkaSpout

pytestmark = [pytest.mark.spark, pytest.mark.kafka]


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A config on a SQLite store of the test's own, closed after it."""
    yield {
        **FAST,
        "topology.max.spout.pending": 8,
        STATE_PROVIDER_KEY: "sqlite_state.SqliteKeyValueStateProvider",
        STATE_PROVIDER_CONFIG_KEY: json.dumps({"path": str(tmp_path / "state.db")}),
    }
    load_module("sqlite_state").close_connections()


def _run(
    spark: Any, name: str, conf: dict[str, Any], topology: Any, faults: Any = None
) -> tuple[dict[Any, Any], dict[str, Any]] | None:
    """A driver on the shared session until idle (``None`` if it died at its kill point)."""
    runner = CheckpointRunner(name, conf, topology, spark, faults=faults)
    runner.start()
    try:
        runner.await_idle(240)
        return runner.read_state("count"), runner.status()["partition_positions"]["kafka"]
    except SystemExit as died:
        assert "driver died" in str(died)
        return None
    finally:
        runner.kill()


def _failed_tasks(spark: Any, group: str) -> int:
    tracker = spark.sparkContext.statusTracker()
    [job] = tracker.getJobIdsForGroup(group)
    return sum(tracker.getStageInfo(s).numFailedTasks for s in tracker.getJobInfo(job).stageIds)


@pytest.mark.parametrize("seed", seeds("0"))
def test_a_driver_killed_at_a_point_and_a_rescale_restart_exactly_on_spark(
    seed: int, spark: Any, kafka_broker: KafkaBroker, kafka_topic: Any, sqlite: dict[str, Any]
) -> None:
    # 3 partitions of 30 records, 8 a spout task a transaction. The first driver (1 spout
    # task) dies at the seed's point of txid t (1-3, at most 24 records read); the second (3
    # tasks, 24 a transaction) at another point of t + 1, which still has records to read; the
    # third (2 tasks) finishes, after more records were written while no driver ran.
    topic = kafka_topic(partitions=3)
    written = Written()
    written.fill(kafka_broker, topic, 3, 30, seed=seed)
    spout = KafkaSpout(topic, bootstrap_servers=kafka_broker.bootstrap, translator=SENTENCES)
    name = topo.new_key("kspark")
    txid = 1 + seed % 3
    first = DriverDies(POINTS[seed % 4], txid)
    again = DriverDies(POINTS[(seed // 4 + 1) % 4], txid + 1)
    assert _run(spark, name, sqlite, kafka_word_count(spout, 1), first) is None
    assert _run(spark, name, sqlite, kafka_word_count(spout, 3), again) is None
    written.write(kafka_broker, topic, 2, seed + 50, 6)
    done = _run(spark, name, sqlite, kafka_word_count(spout, 2))
    assert done is not None
    counts, positions = done
    assert counts == written.counts()
    assert positions == written.ends()


@pytest.mark.parametrize("seed", seeds("0"))
def test_a_python_worker_crash_in_a_bolt_is_spark_s_to_retry_and_counts_stay_exact(
    seed: int, spark: Any, cluster: Any, kafka_broker: KafkaBroker, kafka_topic: Any
) -> None:
    topic = kafka_topic(partitions=3)
    written = Written()
    written.fill(kafka_broker, topic, 3, 20, seed=seed)
    component, txid = ("count", "split")[seed % 2], 1 + (seed // 2) % 3
    crash = {
        "component": component,
        "task": (seed // 6) % 2,
        "kind": "crash",
        "txid": txid,
        "at_tuple": 1 + seed % 4,
    }
    conf = {**FAST, "topology.max.spout.pending": 10, "topology.faults": {"tasks": [crash]}}
    outcomes: list[bool] = []
    name = topo.new_key("kspark-crash")
    spout = KafkaSpout(topic, bootstrap_servers=kafka_broker.bootstrap, translator=SENTENCES)
    handle = cluster.submit_topology(
        name, conf, kafka_word_count(spout), on_transaction=lambda info: outcomes.append(info.ok)
    )
    handle.await_idle(240)
    assert handle.read_state("count") == written.counts()
    assert handle.status()["partition_positions"]["kafka"] == written.ends()
    assert all(outcomes)  # Spark ran the crashed task again: no transaction failed
    assert _failed_tasks(spark, f"{name}/PREPARE/txid={txid}") == 1


class CrashesAfterMoreIsWritten(KafkaSpout):
    """A ``KafkaSpout`` whose first read of ``victim`` writes more to it, then kills its worker.

    Each read is logged to ``log`` (partition, Spark attempt, start, position, records).
    """

    def __init__(self, topic: str, bootstrap: str, victim: str, log: Path, marker: Path) -> None:
        super().__init__(topic, bootstrap_servers=bootstrap, translator=SENTENCES)
        self.victim, self.log, self.marker = victim, str(log), str(marker)
        self.bootstrap = bootstrap

    def open_reader(
        self, conf: Any, context: Any, partition: str, position: Any, end: Any = None
    ) -> Any:
        inner = super().open_reader(conf, context, partition, position, end)
        spout = self

        class Logged(PartitionReader):
            def read(self, max_records: int) -> PartitionBatch:
                from pyspark import TaskContext

                batch = inner.read(max_records)
                task = TaskContext.get()
                entry = {
                    "partition": partition,
                    "attempt": task.attemptNumber() if task is not None else -1,
                    "start": position,
                    "position": batch.position,
                    "records": len(batch.records),
                }
                with open(spout.log, "a", encoding="utf-8") as f:
                    f.write(json.dumps(entry) + "\n")
                if partition == spout.victim and _first(spout.marker):
                    from confluent_kafka import Producer
                    from kafka_fixtures import SINGLE

                    topic, _, number = partition.rpartition("/")
                    more = Producer({"bootstrap.servers": spout.bootstrap, **SINGLE})
                    for i in range(4):
                        more.produce(topic, value=f"fig late {i}".encode(), partition=int(number))
                    more.flush(30)
                    os._exit(1)  # the Python worker dies, as a crash does
                return batch

        return Logged()


def _first(marker: str) -> bool:
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


def test_a_spout_task_run_again_after_more_was_written_reads_the_same_records(
    spark: Any, cluster: Any, kafka_broker: KafkaBroker, kafka_topic: Any, tmp_path: Path
) -> None:
    topic = kafka_topic(partitions=2)
    written = Written()
    written.fill(kafka_broker, topic, 2, 10)
    victim = f"{topic}/1"
    log, marker = tmp_path / "reads.jsonl", tmp_path / "crashed"
    spout = CrashesAfterMoreIsWritten(topic, kafka_broker.bootstrap, victim, log, marker)
    conf = {**FAST, "topology.max.spout.pending": 100}
    outcomes: list[bool] = []
    handle = cluster.submit_topology(
        topo.new_key("kspark-grow"),
        conf,
        kafka_word_count(spout),
        on_transaction=lambda info: outcomes.append(info.ok),
    )
    handle.await_idle(240)
    reads = [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]
    first, again, *later = [r for r in reads if r["partition"] == victim]
    assert (first["attempt"], again["attempt"]) == (0, 1)  # Spark ran the spout task again
    same = ("start", "position", "records")
    assert [again[k] for k in same] == [first[k] for k in same] == [None, 10, 10]
    # The later records are read from where the first read stopped, in one read or several (a
    # broker may list a partition's end short of a batch it has just taken).
    grown = [r for r in later if r["records"]]
    assert (grown[0]["start"], grown[-1]["position"]) == (10, 14)
    assert sum(r["records"] for r in grown) == 4
    for i in range(4):
        written.sentences[victim].append(f"fig late {i}")
    assert handle.read_state("count") == written.counts()
    assert handle.status()["partition_positions"]["kafka"] == written.ends()
    assert all(outcomes)
