"""``KafkaSpout`` against a real Kafka-protocol broker (Tansu, ``kafka_fixtures``), in the driver
and in a reader: exact records, offsets and messages.

The reader is driven as a PREPARE's task drives it: the driver's ``ends`` first, then
``open_reader(..., end=...)``. Where Tansu differs from Apache Kafka the test says so
(``kafka_fixtures`` lists the differences); a behaviour this broker cannot show is asserted to
Kafka's semantics and marked ``xfail(strict=True)`` with the difference as its reason, so the
record the broker wrongly gives is seen, never hidden.
"""

from __future__ import annotations

import json
import pickle
import time
from typing import Any

import msgpack
import pytest
from kafka_fixtures import KafkaBroker, produce

from statefulbolts.connectors.kafka import (
    DefaultRecordTranslator,
    KafkaEnd,
    KafkaRecordError,
    KafkaSpout,
    KafkaTopicNotFoundError,
    KafkaUnavailableError,
)
from statefulbolts.connectors.kafka._client import Cluster
from statefulbolts.errors import ConfigError

pytestmark = pytest.mark.kafka
CONF: dict[str, Any] = {"topology.name": "kafka-test"}


def _read(spout: KafkaSpout, partition: str, position: Any, n: int, end: KafkaEnd) -> Any:
    reader = spout.open_reader(CONF, None, partition, position, end=end)  # type: ignore[arg-type]
    try:
        return reader.read(n), reader.gap()
    finally:
        reader.close()


def _values(batch: Any) -> list[Any]:
    return [r[4] for r in batch.records]


def test_a_reader_reads_from_an_exact_offset_up_to_the_listed_end(
    kafka_broker: KafkaBroker, kafka_topic: Any
) -> None:
    topic = kafka_topic(partitions=2)
    produce(kafka_broker, topic, [f"a{i}".encode() for i in range(5)], partition=0)
    produce(kafka_broker, topic, [b"b0"], partition=1, keys=[b"k"])
    spout = KafkaSpout(topic, bootstrap_servers=kafka_broker.bootstrap)
    assert spout.partitions(CONF) == [f"{topic}/0", f"{topic}/1"]
    ends = spout.ends(CONF, spout.partitions(CONF))
    assert ends == {f"{topic}/0": KafkaEnd(0, 5, 5, 0), f"{topic}/1": KafkaEnd(0, 1, 1, 0)}
    produce(kafka_broker, topic, [b"a5-later"], partition=0)  # after the listing
    first, gap = _read(spout, f"{topic}/0", None, 3, ends[f"{topic}/0"])
    assert first.records == [[topic, 0, i, None, f"a{i}"] for i in range(3)]
    assert (first.position, gap) == (3, None)
    # Any attempt reads up to the listed end, however much was written since.
    rest, _ = _read(spout, f"{topic}/0", 3, 100, ends[f"{topic}/0"])
    assert (_values(rest), rest.position) == (["a3", "a4"], 5)
    again, _ = _read(spout, f"{topic}/0", 3, 100, ends[f"{topic}/0"])
    assert again == rest
    keyed, _ = _read(spout, f"{topic}/1", None, 10, ends[f"{topic}/1"])
    assert keyed.records == [[topic, 1, 0, "k", "b0"]] and keyed.position == 1
    at_end, _ = _read(spout, f"{topic}/0", 5, 10, ends[f"{topic}/0"])
    assert (at_end.records, at_end.position) == ([], 5)
    # The next listing has the later record; has_more and the lags say so.
    later = spout.ends(CONF, [f"{topic}/0"])[f"{topic}/0"]
    assert later.end == 6 and spout.has_more(CONF, f"{topic}/0", 5)
    assert spout.lags({f"{topic}/0": 5})[f"{topic}/0"] == 1
    assert _values(_read(spout, f"{topic}/0", 5, 10, later)[0]) == ["a5-later"]


def test_has_more_after_a_commit_sees_what_was_written_during_the_transactions_reads(
    kafka_broker: KafkaBroker, kafka_topic: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A PREPARE lists the ends, its task reads up to them, records arrive meanwhile, and the
    # commit lands within the listing's half second: the idle check must not trust that listing.
    topic = kafka_topic()
    partition = f"{topic}/0"
    produce(kafka_broker, topic, [f"w{i}".encode() for i in range(3)], partition=0)
    spout = KafkaSpout(topic, bootstrap_servers=kafka_broker.bootstrap)
    listings: list[int] = []
    real = spout._offsets
    monkeypatch.setattr(spout, "_offsets", lambda *a: listings.append(1) or real(*a))
    end = spout.ends(CONF, [partition])[partition]
    batch, _ = _read(spout, partition, None, 100, end)
    produce(kafka_broker, topic, [b"during"], partition=0)  # while the transaction ran
    spout.committed(CONF, {partition: batch.position})
    assert batch.position == 3 and spout.has_more(CONF, partition, 3)
    # The next PREPARE's ends reuse that fresh listing: one broker round trip per transaction.
    assert spout.ends(CONF, [partition])[partition].end == 4
    assert len(listings) == 2
    # After that commit, nothing more was written: "no", and asking again costs no listing.
    spout.committed(CONF, {partition: 4})
    assert not spout.has_more(CONF, partition, 4) and not spout.has_more(CONF, partition, 4)
    assert len(listings) == 3


def test_a_commit_marker_before_the_end_still_brings_the_position_to_the_end(
    kafka_broker: KafkaBroker, kafka_topic: Any
) -> None:
    # Three records in a committed transaction: offset 3 is its marker, which no reader gets.
    topic = kafka_topic()
    producer = kafka_broker.producer(**{"transactional.id": f"{topic}-tx"})
    producer.init_transactions(15)
    producer.begin_transaction()
    for i in range(3):
        producer.produce(topic, value=f"c{i}".encode(), partition=0)
    producer.commit_transaction(15)
    spout = KafkaSpout(topic, bootstrap_servers=kafka_broker.bootstrap)
    end = spout.ends(CONF, [f"{topic}/0"])[f"{topic}/0"]
    assert end == KafkaEnd(0, 4, 4, 0)  # the marker occupies offset 3
    batch, _ = _read(spout, f"{topic}/0", None, 100, end)
    assert (_values(batch), batch.position) == (["c0", "c1", "c2"], 4)
    # From just before the marker: nothing to read, and the position still reaches the end.
    only_marker, _ = _read(spout, f"{topic}/0", 3, 100, end)
    assert (only_marker.records, only_marker.position) == ([], 4)
    assert not spout.has_more(CONF, f"{topic}/0", 4)


def _transactions(broker: KafkaBroker, topic: str) -> None:
    """Committed c0-c2, aborted a0-a1 (sent before the abort), committed c3-c4."""
    producer = broker.producer(**{"transactional.id": f"{topic}-tx"})
    producer.init_transactions(15)
    for values, commit in ((["c0", "c1", "c2"], True), (["a0", "a1"], False), (["c3", "c4"], True)):
        producer.begin_transaction()
        for value in values:
            producer.produce(topic, value=value.encode(), partition=0)
        producer.flush(15)
        (producer.commit_transaction if commit else producer.abort_transaction)(15)


def test_records_of_transactions_reach_the_end_past_markers_and_aborted_records(
    kafka_broker: KafkaBroker, kafka_topic: Any
) -> None:
    # Offsets: c0-c2 0-2, marker 3, a0-a1 4-5, abort marker 6, c3-c4 7-8, marker 9.
    topic = kafka_topic()
    _transactions(kafka_broker, topic)
    spout = KafkaSpout(topic, bootstrap_servers=kafka_broker.bootstrap)
    end = spout.ends(CONF, [f"{topic}/0"])[f"{topic}/0"]
    assert end == KafkaEnd(0, 10, 10, 0)
    batch, _ = _read(spout, f"{topic}/0", 7, 100, end)
    assert (_values(batch), batch.position) == (["c3", "c4"], 10)
    read_all = KafkaSpout(
        topic, bootstrap_servers=kafka_broker.bootstrap, isolation_level="read_uncommitted"
    )
    every, _ = _read(read_all, f"{topic}/0", None, 100, end)
    assert (_values(every), every.position) == (["c0", "c1", "c2", "a0", "a1", "c3", "c4"], 10)


@pytest.mark.xfail(
    strict=True,
    reason=(
        "Tansu differs from Kafka: its Fetch response lists no aborted transactions, so "
        "librdkafka gives read_committed readers an aborted transaction's records (a0, a1)"
    ),
)
def test_read_committed_leaves_an_aborted_transactions_records_out(
    kafka_broker: KafkaBroker, kafka_topic: Any
) -> None:
    topic = kafka_topic()
    _transactions(kafka_broker, topic)
    spout = KafkaSpout(topic, bootstrap_servers=kafka_broker.bootstrap)
    end = spout.ends(CONF, [f"{topic}/0"])[f"{topic}/0"]
    batch, _ = _read(spout, f"{topic}/0", None, 100, end)
    assert (_values(batch), batch.position) == (["c0", "c1", "c2", "c3", "c4"], 10)


def test_an_open_transaction_holds_the_end_until_it_commits(
    kafka_broker: KafkaBroker, kafka_topic: Any
) -> None:
    topic = kafka_topic()
    produce(kafka_broker, topic, [b"before"], partition=0)
    producer = kafka_broker.producer(**{"transactional.id": f"{topic}-open"})
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce(topic, value=b"pending", partition=0)
    producer.flush(15)
    spout = KafkaSpout(topic, bootstrap_servers=kafka_broker.bootstrap)
    open_end = spout.ends(CONF, [f"{topic}/0"])[f"{topic}/0"]
    # Kafka's last stable offset is the open transaction's first offset (1); Tansu answers 0.
    # Either way no record of the open transaction is read.
    assert (open_end.end, open_end.high) == (0, 2)
    held, _ = _read(spout, f"{topic}/0", None, 10, open_end)
    assert (held.records, held.position) == ([], 0)
    producer.commit_transaction(15)
    end = spout.ends(CONF, [f"{topic}/0"])[f"{topic}/0"]
    batch, _ = _read(spout, f"{topic}/0", 0, 10, end)
    assert (_values(batch), batch.position) == (["before", "pending"], 3)


def test_a_position_past_a_recreated_topics_end_reads_it_again_and_says_so(
    kafka_broker: KafkaBroker, kafka_topic: Any
) -> None:
    topic = kafka_topic()
    produce(kafka_broker, topic, [f"old{i}".encode() for i in range(6)], partition=0)
    spout = KafkaSpout(topic, bootstrap_servers=kafka_broker.bootstrap)
    kafka_broker.delete_topic(topic)
    kafka_broker.create_topic(topic)
    produce(kafka_broker, topic, [b"new0", b"new1"], partition=0)
    end = spout.ends(CONF, [f"{topic}/0"])[f"{topic}/0"]
    assert end == KafkaEnd(0, 2, 2, 0)
    assert spout.has_more(CONF, f"{topic}/0", 6)  # a jump to make
    batch, gap = _read(spout, f"{topic}/0", 6, 10, end)
    assert (_values(batch), batch.position) == (["new0", "new1"], 2)
    assert (gap.start, gap.resumed, gap.lost) == (6, 0, None)
    assert gap.reason == (
        "the partition now ends at offset 2, before the saved position 6: the topic was "
        "deleted and made again, or cut short; reading it again from its first offset 0 "
        "(a jump back)"
    )


def test_a_position_before_the_first_offset_skips_forward_and_says_so(
    kafka_broker: KafkaBroker, kafka_topic: Any
) -> None:
    # Tansu cannot expire records (no DeleteRecords, no retention): the end the driver would
    # list after retention removed offsets 0-3 is given by hand; the records are the broker's.
    topic = kafka_topic()
    produce(kafka_broker, topic, [f"r{i}".encode() for i in range(7)], partition=0)
    spout = KafkaSpout(topic, bootstrap_servers=kafka_broker.bootstrap)
    batch, gap = _read(spout, f"{topic}/0", 1, 10, KafkaEnd(low=4, end=7, high=7, first=4))
    assert (_values(batch), batch.position) == (["r4", "r5", "r6"], 7)
    assert (gap.start, gap.resumed, gap.lost) == (1, 4, 3)
    assert gap.reason.startswith("offsets 1 to 3 are no longer in the topic")


def test_a_topic_that_does_not_exist_is_an_error_naming_it(
    kafka_broker: KafkaBroker, kafka_topic: Any
) -> None:
    there = kafka_topic()
    spout = KafkaSpout([there, "no-such-topic"], bootstrap_servers=kafka_broker.bootstrap)
    with pytest.raises(KafkaTopicNotFoundError) as missing:
        spout.partitions(CONF)
    assert str(missing.value) == (
        f"KafkaSpout: topic 'no-such-topic' not found on the Kafka cluster at "
        f"{kafka_broker.bootstrap}; create it, or fix the topic names or "
        "'kafka.bootstrap.servers'"
    )
    with pytest.raises(KafkaTopicNotFoundError, match="topic 'no-such-topic' not found"):
        spout.check_config(CONF)
    # Listing made nothing: asking for every topic never creates one.
    assert "no-such-topic" not in kafka_broker.admin().list_topics(timeout=5).topics


def test_a_pattern_picks_up_a_new_matching_topic(
    kafka_broker: KafkaBroker, kafka_topic: Any
) -> None:
    first = kafka_topic(partitions=2, prefix="pat-a")
    kafka_topic(prefix="other")
    spout = KafkaSpout(pattern=r"pat-[ab]-.*", bootstrap_servers=kafka_broker.bootstrap)
    assert spout.partitions(CONF) == [f"{first}/0", f"{first}/1"]
    second = kafka_topic(prefix="pat-b")
    deadline = time.monotonic() + 10  # the listing is kept a second
    while f"{second}/0" not in spout.partitions(CONF) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert spout.partitions(CONF) == sorted([f"{first}/0", f"{first}/1", f"{second}/0"])


def test_a_broker_that_does_not_answer_is_an_outage_naming_what_was_done() -> None:
    from redis_fixtures import free_port

    nowhere = f"127.0.0.1:{free_port()}"
    conf = {**CONF, "kafka.timeout.ms": 300}
    spout = KafkaSpout("clicks", bootstrap_servers=nowhere)
    started = time.monotonic()
    with pytest.raises(KafkaUnavailableError) as listing:
        spout.partitions(conf)
    assert time.monotonic() - started < 5
    assert str(listing.value).startswith(
        "listing topics of the cluster (KafkaSpout(['clicks'])): the Kafka cluster at "
        f"{nowhere} did not answer: KafkaException: "
    )
    assert "topology.state.backend.timeout.secs" in str(listing.value)
    reader = spout.open_reader(conf, None, "clicks/0", 0, end=KafkaEnd(0, 5, 5, 0))  # type: ignore[arg-type]
    with pytest.raises(KafkaUnavailableError) as reading:
        reader.read(10)
    assert str(reading.value).startswith(
        "reading from offset 0 partition 'clicks/0' (KafkaSpout): the Kafka cluster at "
        f"{nowhere} did not answer: TimeoutError: no records nor end of partition"
    )
    spout.check_config(conf)  # a cluster away is warned about, not refused: it is waited out


def test_start_latest_and_committed_pin_where_a_new_partition_begins(
    kafka_broker: KafkaBroker, kafka_topic: Any
) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    topic = kafka_topic(partitions=2)
    produce(kafka_broker, topic, [b"x0", b"x1", b"x2"], partition=0)
    produce(kafka_broker, topic, [b"y0"], partition=1)
    latest = KafkaSpout(topic, bootstrap_servers=kafka_broker.bootstrap, start="latest")
    assert latest.has_more(CONF, f"{topic}/0", None)  # a first read pins the end
    end = latest.ends(CONF, [f"{topic}/0"])[f"{topic}/0"]
    assert end.first == 3
    assert _read(latest, f"{topic}/0", None, 10, end)[0].position == 3
    group = f"{topic}-group"
    [done] = (
        kafka_broker.admin()
        .alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 2)])]
        )
        .values()
    )
    done.result(15)
    committed = KafkaSpout(
        topic, bootstrap_servers=kafka_broker.bootstrap, start="committed", group_id=group
    )
    ends = committed.ends(CONF, [f"{topic}/0", f"{topic}/1"])
    # Partition 0 at the group's offset; partition 1, which the group has none for, earliest.
    assert (ends[f"{topic}/0"].first, ends[f"{topic}/1"].first) == (2, 0)
    assert _values(_read(committed, f"{topic}/0", None, 10, ends[f"{topic}/0"])[0]) == ["x2"]


@pytest.mark.xfail(
    strict=True,
    reason=(
        "Tansu differs from Kafka: ListOffsets for a timestamp answers the first offset "
        "whatever the timestamp (Kafka: the first record at or after it, else the end)"
    ),
)
def test_start_at_a_timestamp_begins_at_the_first_record_at_or_after_it(
    kafka_broker: KafkaBroker, kafka_topic: Any
) -> None:
    topic = kafka_topic()
    produce(kafka_broker, topic, [b"t0", b"t1", b"t2"], partition=0, timestamps=[1000, 2000, 3000])
    firsts = {}
    for ms in (1500, 3000, 9000):
        spout = KafkaSpout(topic, bootstrap_servers=kafka_broker.bootstrap, start=ms)
        firsts[ms] = spout.ends(CONF, [f"{topic}/0"])[f"{topic}/0"].first
    assert firsts == {1500: 1, 3000: 2, 9000: 3}


def test_a_timestamp_start_takes_the_clusters_answer_and_the_end_when_none(
    monkeypatch: pytest.MonkeyPatch, kafka_broker: KafkaBroker, kafka_topic: Any
) -> None:
    # In addition to the broker (whose timestamp lookup is Tansu's, above): the spout takes the
    # offset the lookup answers, the end for a partition with no record that late, and asks
    # once per partition.
    topic = kafka_topic(partitions=2)
    produce(kafka_broker, topic, [b"a", b"b"], partition=0)
    asked: list[Any] = []

    def at_time(self: Cluster, partitions: Any, ms: int) -> dict[Any, int | None]:
        asked.append((sorted(partitions), ms))
        return {tp: (1 if tp[1] == 0 else None) for tp in partitions}

    monkeypatch.setattr(Cluster, "at_time", at_time)
    spout = KafkaSpout(topic, bootstrap_servers=kafka_broker.bootstrap, start=1500)
    parts = [f"{topic}/0", f"{topic}/1"]
    ends = spout.ends(CONF, parts)
    assert (ends[parts[0]].first, ends[parts[1]].first) == (1, 0)
    spout.ends(CONF, parts)
    assert asked == [([(topic, 0), (topic, 1)], 1500)]


def test_records_reach_a_tuple_through_deserializers_and_translators(
    kafka_broker: KafkaBroker, kafka_topic: Any
) -> None:
    topic = kafka_topic()
    produce(
        kafka_broker,
        topic,
        [json.dumps({"n": 1}).encode(), msgpack.packb({"n": 2}), b"\xff not json"],
        partition=0,
        keys=[b"k1", None, b"k3"],
        timestamps=[1_700_000_000_000, 1_700_000_000_500, 1_700_000_001_000],
        headers=[[("trace", b"t1")], None, None],
    )
    spout = KafkaSpout(
        topic,
        bootstrap_servers=kafka_broker.bootstrap,
        translator=DefaultRecordTranslator(timestamp=True, headers=True),
        key_deserializer="bytes",
        value_deserializer="json",
    )
    end = spout.ends(CONF, [f"{topic}/0"])[f"{topic}/0"]
    first, _ = _read(spout, f"{topic}/0", None, 1, end)
    assert first.records == [[topic, 0, 0, b"k1", {"n": 1}, 1_700_000_000_000, (("trace", b"t1"),)]]
    packed = KafkaSpout(
        topic, bootstrap_servers=kafka_broker.bootstrap, value_deserializer="msgpack"
    )
    assert _read(packed, f"{topic}/0", 1, 1, end)[0].records == [[topic, 0, 1, None, {"n": 2}]]
    with pytest.raises(KafkaRecordError) as bad:
        _read(spout, f"{topic}/0", 2, 1, end)
    assert str(bad.value).startswith(
        f"KafkaSpout: record {topic}/0 offset 2: the value's "
        "statefulbolts.connectors.kafka._records.JsonDeserializer raised UnicodeDecodeError"
    )


def test_committed_positions_reach_the_consumer_group(
    kafka_broker: KafkaBroker, kafka_topic: Any
) -> None:
    from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

    topic = kafka_topic(partitions=2)
    spout = KafkaSpout(topic, bootstrap_servers=kafka_broker.bootstrap)
    spout.committed({"topology.name": f"{topic}-topo"}, {f"{topic}/0": 4, f"{topic}/1": 0})
    request = ConsumerGroupTopicPartitions(
        f"{topic}-topo", [TopicPartition(topic, 0), TopicPartition(topic, 1)]
    )
    deadline, got = time.monotonic() + 15, None
    while time.monotonic() < deadline:
        [future] = kafka_broker.admin().list_consumer_group_offsets([request]).values()
        got = [tp.offset for tp in future.result(15).topic_partitions]
        if got == [4, 0]:
            break
        time.sleep(0.05)
    assert got == [4, 0]
    off = KafkaSpout(topic, bootstrap_servers=kafka_broker.bootstrap, commit_offsets=False)
    off.committed({"topology.name": f"{topic}-off"}, {f"{topic}/0": 1})
    assert off._cluster is None  # nothing was even connected


def test_the_spout_ships_without_its_driver_clients(
    kafka_broker: KafkaBroker, kafka_topic: Any
) -> None:
    topic = kafka_topic()
    spout = KafkaSpout(topic, bootstrap_servers=kafka_broker.bootstrap)
    spout.ends(CONF, spout.partitions(CONF))
    assert spout._cluster is not None
    shipped = pickle.loads(pickle.dumps(spout))
    assert shipped._cluster is None and shipped._seen == (None, 0.0, {})
    assert (shipped.topics, shipped.translator.fields) == ([topic], spout.translator.fields)


def test_a_client_setting_the_spout_decides_or_librdkafka_refuses_is_named(
    kafka_broker: KafkaBroker,
) -> None:
    spout = KafkaSpout("t", bootstrap_servers=kafka_broker.bootstrap)
    with pytest.raises(ConfigError, match=r"config 'kafka.enable.auto.commit' is the spout's"):
        spout.check_config({"kafka.enable.auto.commit": True})
    with pytest.raises(ConfigError) as typo:
        spout.check_config({"kafka.topicz": "a"})
    assert "config 'kafka.topicz': the Kafka client refused it" in str(typo.value)
    assert "did you mean 'kafka.topics'?" in str(typo.value)


class _SlowToTranslate(KafkaSpout):
    """A spout whose every record takes ``pause`` seconds to become a tuple's values."""

    pause = 0.02

    def record(self, message: Any) -> Any:
        time.sleep(self.pause)
        return super().record(message)


def test_a_read_longer_than_the_timeout_goes_on_while_records_come(
    kafka_broker: KafkaBroker, kafka_topic: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 60 records in consumes of 10, each record 20 ms: the read takes 1.2 s or more against a
    # 300 ms kafka.timeout.ms. The timeout is a wait without a record, so the read reaches its
    # fixed end; a bound on the whole read would fail it at every attempt, for ever.
    import statefulbolts.connectors.kafka._spout as spout_module

    monkeypatch.setattr(spout_module, "_CONSUME_BATCH", 10)
    topic = kafka_topic(partitions=1)
    produce(kafka_broker, topic, [f"r{i}".encode() for i in range(60)], partition=0)
    spout = _SlowToTranslate(topic, bootstrap_servers=kafka_broker.bootstrap)
    conf = {**CONF, "kafka.timeout.ms": 300}
    end = spout.ends(conf, [f"{topic}/0"])[f"{topic}/0"]
    reader = spout.open_reader(conf, None, f"{topic}/0", None, end=end)  # type: ignore[arg-type]
    try:
        started = time.monotonic()
        batch = reader.read(1000)
    finally:
        reader.close()
    assert time.monotonic() - started > 0.3 * 2  # longer than the timeout, by construction
    assert (_values(batch), batch.position) == ([f"r{i}" for i in range(60)], 60)
