"""``KafkaSpout`` in the checkpoint protocol: exact counts through kills, rescales, gaps, outages.

The word count of ``partitioned_topologies`` (``kafka`` -> ``split`` -> stateful ``count``) reads
topics of the test broker (``kafka_fixtures``) on the inline engine, its state in SQLite (durable
across a driver's death, simulated in process by ``DriverDies``). The verdict: the committed
counts against a ``Counter`` of every sentence written, and the driver's positions against each
partition's end offset. The kill test loops over ``STATEFULBOLTS_PARTITIONED_SEEDS`` (default
``"0-3"``), the rescale test too (default ``"0"``): a seed picks the data, the kill point and
the transaction.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import topologies as topo
from kafka_fixtures import KafkaBroker, LoopbackRelay, tansu_binary
from partitioned_topologies import (
    FAST,
    POINTS,
    DriverDies,
    Written,
    dies,
    finish,
    kafka_word_count,
    seeds,
    start_driver,
)

from checkpoint.runner import CheckpointRunner
from examples.kafka_wordcount import SENTENCES
from providers import STATE_PROVIDER_CONFIG_KEY, STATE_PROVIDER_KEY, load_module
from statefulbolts.cli import check_before_spark
from statefulbolts.connectors.kafka import KafkaSpout, KafkaTopicNotFoundError
from statefulbolts.connectors.kafka._client import Cluster, Offsets
from statefulbolts.ui._metrics import TopologyCollector
from statefulbolts.ui._snapshot import snapshot

pytestmark = pytest.mark.kafka


@pytest.fixture
def sqlite(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A config on a SQLite store of the test's own, closed after it."""
    yield {
        **FAST,
        STATE_PROVIDER_KEY: "sqlite_state.SqliteKeyValueStateProvider",
        STATE_PROVIDER_CONFIG_KEY: json.dumps({"path": str(tmp_path / "state.db")}),
    }
    load_module("sqlite_state").close_connections()


def _spout(broker: KafkaBroker, topics: Any = None, **kwargs: Any) -> KafkaSpout:
    return KafkaSpout(topics, bootstrap_servers=broker.bootstrap, translator=SENTENCES, **kwargs)


def _group_offsets(broker: KafkaBroker, group: str, want: dict[str, int]) -> dict[str, int]:
    """The group's committed offsets of ``want``'s partitions, once they equal it (15 s)."""
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    parts = [TopicPartition(p.rpartition("/")[0], int(p.rpartition("/")[2])) for p in want]
    deadline, got = time.monotonic() + 15, {}
    while time.monotonic() < deadline:
        request = ConsumerGroupTopicPartitions(group, parts)
        [future] = broker.admin().list_consumer_group_offsets([request]).values()
        got = {f"{tp.topic}/{tp.partition}": tp.offset for tp in future.result(15).topic_partitions}
        if got == want:
            break
        time.sleep(0.05)
    return got


def test_the_word_count_is_exact_while_records_are_written_and_the_group_follows(
    kafka_broker: KafkaBroker, kafka_topic: Any, sqlite: dict[str, Any]
) -> None:
    topic = kafka_topic(partitions=3)
    written = Written()
    written.fill(kafka_broker, topic, 3, 12)
    grew: list[int] = []
    seen: list[Any] = []

    def grow(info: Any) -> None:
        if str(info.action) == "PREPARE" and not seen:  # the first PREPARE
            seen.append(runner.observe())  # the driver's thread: the lock is its own
        # After the first commit and the third: more records on partitions being read.
        if str(info.action) == "COMMIT" and info.txid in (1, 3) and info.txid not in grew:
            grew.append(info.txid)
            written.write(kafka_broker, topic, 1, 70 + info.txid, 6)
            written.write(kafka_broker, topic, 2, 80 + info.txid, 4)

    name = topo.new_key("kwc")
    wc = kafka_word_count(_spout(kafka_broker, topic))
    runner = CheckpointRunner(name, sqlite, wc, None, on_transaction=grow, engine="inline")
    runner.start()  # made first: its callback observes it
    try:
        runner.await_idle(60)
        counts = runner.read_state("count")
        positions = runner.status()["partition_positions"]["kafka"]
        observed = runner.observe()
    finally:
        runner.kill()
    assert grew == [1, 3]
    assert counts == written.counts()
    assert positions == written.ends() == {f"{topic}/0": 12, f"{topic}/1": 24, f"{topic}/2": 20}
    # Every record read: no lag; the spout's tuples counted; no gap.
    assert observed.partition_lags == {"kafka": dict.fromkeys(positions, 0)}
    assert observed.spout_lags["kafka"] == 0 and observed.spout_gaps == {"kafka": 0}
    assert observed.components["kafka"]["emitted"] == 56
    # The topology's progress, for monitoring tools, in the group named after it.
    assert _group_offsets(kafka_broker, name, positions) == positions
    # After the first PREPARE (4 records a task: task 0 has partitions 0 and 2, task 1 partition 1)
    # against the 12 a partition listed for it: the lag per partition, on the dashboard's body
    # and in Prometheus.
    lags = {f"{topic}/0": 10, f"{topic}/1": 8, f"{topic}/2": 10}
    [early] = seen
    assert early.partition_lags == {"kafka": lags} and early.spout_lags["kafka"] == 28
    assert snapshot(early, [], None)["partition_lag"] == {"kafka": lags}
    [family] = [
        f
        for f in TopologyCollector(lambda: early, ["kafka"]).collect()
        if f.name == "statefulbolts_spout_partition_lag"
    ]
    assert {s.labels["partition"]: s.value for s in family.samples} == lags


@pytest.mark.parametrize("seed", seeds())
def test_a_driver_killed_at_each_point_restarts_exactly(
    seed: int, kafka_broker: KafkaBroker, kafka_topic: Any, sqlite: dict[str, Any]
) -> None:
    # 3 partitions of 15 records, 4 a spout task (2) a transaction: about 6 PREPAREs. The seed
    # picks the data, the kill point and the transaction.
    point, txid = POINTS[seed % 4], 1 + (seed // 4) % 5
    topic = kafka_topic(partitions=3)
    written = Written()
    written.fill(kafka_broker, topic, 3, 15, seed=seed)
    name = topo.new_key("kkill")
    wc = kafka_word_count(_spout(kafka_broker, topic))
    dies(start_driver(name, sqlite, wc, faults=DriverDies(point, txid)))
    counts, positions = finish(start_driver(name, sqlite, wc), "kafka")
    assert counts == written.counts()
    assert positions == written.ends()


@pytest.mark.parametrize("seed", seeds("0"))
def test_the_spout_parallelism_changes_and_a_new_matching_topic_is_picked_up(
    seed: int, kafka_broker: KafkaBroker, kafka_topic: Any, sqlite: dict[str, Any]
) -> None:
    # The pattern from the config: 1 task, killed after COMMITTED(2); 3 tasks, killed after
    # COMMITTED(4); then 2 tasks, with a new topic and more records written while none ran.
    prefix = topo.new_key("ks").replace("_", "-")
    first = kafka_topic(partitions=3, prefix=prefix)
    written = Written()
    written.fill(kafka_broker, first, 3, 15, seed=seed)
    kafka_topic(prefix="elsewhere")  # not matched
    conf = {**sqlite, "kafka.topic.pattern": re.escape(prefix) + "-.*"}
    conf["kafka.bootstrap.servers"] = kafka_broker.bootstrap
    spout = KafkaSpout(translator=SENTENCES)
    name = topo.new_key("kscale")
    dies(start_driver(name, conf, kafka_word_count(spout, 1), faults=DriverDies(POINTS[3], 2)))
    dies(start_driver(name, conf, kafka_word_count(spout, 3), faults=DriverDies(POINTS[3], 4)))
    second = kafka_topic(partitions=2, prefix=prefix)
    written.fill(kafka_broker, second, 2, 9, seed=seed + 7)
    written.write(kafka_broker, first, 0, seed + 99, 5)
    counts, positions = finish(start_driver(name, conf, kafka_word_count(spout, 2)), "kafka")
    assert counts == written.counts()
    assert positions == written.ends()
    assert set(positions) == {f"{first}/{p}" for p in range(3)} | {f"{second}/0", f"{second}/1"}


def test_a_topic_deleted_and_made_again_is_read_again_with_a_warning(
    kafka_broker: KafkaBroker,
    kafka_topic: Any,
    sqlite: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = kafka_topic()
    old = Written()
    old.fill(kafka_broker, topic, 1, 10)
    name = topo.new_key("krecreate")
    wc = kafka_word_count(_spout(kafka_broker, topic))
    counts, positions = finish(start_driver(name, sqlite, wc), "kafka")
    assert (counts, positions) == (old.counts(), {f"{topic}/0": 10})
    kafka_broker.delete_topic(topic)
    kafka_broker.create_topic(topic)
    new = Written()
    new.fill(kafka_broker, topic, 1, 3, seed=5)
    runner = start_driver(name, sqlite, wc)
    with caplog.at_level(logging.WARNING, logger="checkpoint._partitioned"):
        try:
            runner.await_idle(60)
            counts = runner.read_state("count")
            positions = runner.status()["partition_positions"]["kafka"]
            gaps = runner.observe().spout_gaps
        finally:
            runner.kill()
    # The new topic's records are new: counted on top of the old ones, none lost, none twice.
    both = Written()
    both.sentences = {f"{topic}/0": old.sentences[f"{topic}/0"] + new.sentences[f"{topic}/0"]}
    assert counts == both.counts()
    assert positions == {f"{topic}/0": 3}
    assert gaps == {"kafka": 1}
    [warning] = [r.getMessage() for r in caplog.records if "a jump back" in r.getMessage()]
    assert warning.startswith(
        f"spout 'kafka' partition '{topic}/0': the partition now ends at offset 3, before the "
        "saved position 10"
    )
    assert warning.endswith("read on from 0 instead of 10")


def test_offsets_expired_before_they_were_read_are_skipped_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
    kafka_broker: KafkaBroker,
    kafka_topic: Any,
    sqlite: dict[str, Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Tansu cannot expire records (kafka_fixtures): after the first run, the listing says
    # offsets 0-11 of partition 0 are gone, as ListOffsets earliest would after retention.
    topic = kafka_topic(partitions=2)
    written = Written()
    written.fill(kafka_broker, topic, 2, 6)
    name = topo.new_key("kexpire")
    wc = kafka_word_count(_spout(kafka_broker, topic))
    finish(start_driver(name, sqlite, wc), "kafka")
    written.fill(kafka_broker, topic, 2, 10, seed=3)  # offsets 6-15
    real = Cluster.offsets

    def retention(self: Cluster, partitions: Any, isolation: str) -> dict[Any, Offsets]:
        listed = real(self, partitions, isolation)
        return {
            tp: o._replace(low=12) if tp == (topic, 0) else o for tp, o in listed.items()
        }

    monkeypatch.setattr(Cluster, "offsets", retention)
    runner = start_driver(name, sqlite, wc)
    with caplog.at_level(logging.WARNING, logger="checkpoint._partitioned"):
        try:
            runner.await_idle(60)
            counts = runner.read_state("count")
            positions = runner.status()["partition_positions"]["kafka"]
            gaps = runner.observe().spout_gaps
        finally:
            runner.kill()
    lost = written.sentences[f"{topic}/0"][6:12]
    kept = Written()
    kept.sentences = {k: list(v) for k, v in written.sentences.items()}
    kept.sentences[f"{topic}/0"] = written.sentences[f"{topic}/0"][:6] + written.sentences[
        f"{topic}/0"
    ][12:]
    assert len(lost) == 6 and counts == kept.counts()
    assert positions == {f"{topic}/0": 16, f"{topic}/1": 16} and gaps == {"kafka": 1}
    messages = [r.getMessage() for r in caplog.records]
    [warning] = [m for m in messages if "no longer in the topic" in m]
    assert warning.startswith(
        f"spout 'kafka' partition '{topic}/0': offsets 6 to 11 are no longer in the topic "
        "(retention, deleted records or compaction): 6 offsets skipped; PREPARE("
    )
    assert warning.endswith(") read on from 12 instead of 6")


def test_a_missing_topic_stops_the_topology_and_is_refused_before_spark(
    kafka_broker: KafkaBroker, sqlite: dict[str, Any]
) -> None:
    spout = _spout(kafka_broker, "never-made")
    wc = kafka_word_count(spout)
    with pytest.raises(KafkaTopicNotFoundError, match="topic 'never-made' not found"):
        check_before_spark(sqlite, topology=wc)
    runner = start_driver(topo.new_key("kmissing"), sqlite, wc)
    try:
        with pytest.raises(KafkaTopicNotFoundError) as stopped:
            runner.await_idle(60)
    finally:
        runner.kill()
    assert str(stopped.value).startswith("KafkaSpout: topic 'never-made' not found")
    assert "never-made" not in kafka_broker.admin().list_topics(timeout=5).topics


def test_a_broker_that_is_down_is_waited_out_and_shown_as_an_outage(
    tmp_path: Path, sqlite: dict[str, Any]
) -> None:
    # The topology starts while its broker cannot be reached: the driver's listing fails and is
    # waited out as a store's outage (the dashboard shows the backend down). The broker runs on
    # its own port with the topic made and written, behind a relay that refuses connections;
    # when the relay opens, the count is exact.
    binary = tansu_binary()
    if binary is None:
        pytest.skip("the Kafka test broker is not installed (see kafka_fixtures)")
    late = KafkaBroker(binary, tmp_path).start()
    relay = LoopbackRelay(late.port)
    conf = {**sqlite, "kafka.timeout.ms": 300, "topology.state.backend.timeout.secs": 120}
    bootstrap = f"127.0.0.1:{relay.port}"
    spout = KafkaSpout("late", bootstrap_servers=bootstrap, translator=SENTENCES)
    try:
        late.create_topic("late", 2)
        written = Written()
        written.fill(late, "late", 2, 7)
        runner = start_driver(topo.new_key("kdown"), conf, kafka_word_count(spout))
        try:
            deadline = time.monotonic() + 30
            while not runner.observe().backend_down:
                assert time.monotonic() < deadline, "the outage never showed"
                assert runner.error is None, runner.error
                time.sleep(0.05)
            relay.open()
            runner.await_idle(90)
            counts = runner.read_state("count")
            positions = runner.status()["partition_positions"]["kafka"]
            observed = runner.observe()
        finally:
            runner.kill()
    finally:
        relay.close()
        late.stop()
    assert counts == written.counts() and positions == written.ends()
    assert observed.backend_errors >= 1 and not observed.backend_down
