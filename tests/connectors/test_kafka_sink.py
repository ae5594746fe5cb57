"""``KafkaSink`` against the Tansu broker: what a record becomes, the settings, and the faults a
publish step meets (a zombie producer, a lingering transaction, a broker away, a foreign group).

The contract every sink keeps is in ``test_sink_contract``; this file is what is Kafka's own.
Where Tansu differs from Apache Kafka the test says so (``kafka_fixtures``), and never hides a
record to pass.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

import confluent_kafka
import pytest
from confluent_kafka import ConsumerGroupTopicPartitions, IsolationLevel, TopicPartition
from confluent_kafka.admin import OffsetSpec
from sink_fixtures import header, read_topic

from statefulbolts.connectors.kafka import (
    PUBLISH_HEADER,
    TXID_HEADER,
    KafkaSink,
    KafkaSinkFenceError,
    KafkaUnavailableError,
    ProducerRecord,
    _producers,
)
from statefulbolts.connectors.kafka import _sink as sink_module
from statefulbolts.connectors.kafka._sink import _close
from statefulbolts.connectors.sinks import (
    Lane,
    SinkConfigError,
    SinkMarkerError,
    SinkPublishError,
    SinkStageError,
    StagedBatch,
)
from statefulbolts.testing import make_tuple

CONF: dict[str, Any] = {"topology.name": "kafka-sink"}
LANE = Lane("kafka-sink", "publish", 0, 1)


def _opened(sink: KafkaSink, conf: dict[str, Any] | None = None) -> KafkaSink:
    sink.open(conf or CONF, None)  # type: ignore[arg-type]
    return sink


def _staged(sink: KafkaSink, *rows: tuple[Any, ...], fields: tuple[str, ...] = ("key", "value")):
    return [sink.stage(make_tuple(list(r), fields=list(fields))) for r in rows]


def to_record(tuple_: Any) -> ProducerRecord | None:
    word, count = tuple_.values
    if count == 0:
        return None
    return ProducerRecord({"n": count}, key=word, topic=f"t-{word}", headers=[("h", "v")])


# ------------------------------------------------------------------ records (no broker)
def test_a_tuple_becomes_topic_partition_key_value_and_headers() -> None:
    sink = KafkaSink("counts", key="word", value="count", value_serializer="json")
    # The topic None: the sink's own, named when the record is written (no copy in the state).
    assert sink.stage(make_tuple(["storm", 3], fields=["word", "count"])) == [
        None,
        -1,
        b"storm",
        b"3",
        None,
    ]
    routed = KafkaSink(
        "default", topic_field="to", partition_field="p", headers_field="hs", value="v"
    )
    staged = routed.stage(make_tuple(["x", 2, [("a", "b")], "val"], fields=["to", "p", "hs", "v"]))
    assert staged == ["x", 2, None, b"val", [["a", b"b"]]]
    none_topic = routed.stage(make_tuple([None, None, (), "val"], fields=["to", "p", "hs", "v"]))
    assert none_topic == [None, -1, None, b"val", None]


def test_a_mapper_makes_the_record_or_leaves_the_tuple_out() -> None:
    sink = KafkaSink(mapper=to_record, value_serializer="json")
    made = sink.stage(make_tuple(["w", 2], fields=["word", "count"]))
    assert made == ["t-w", -1, b"w", b'{"n":2}', [["h", b"v"]]]
    assert sink.stage(make_tuple(["w", 0], fields=["word", "count"])) is None


@pytest.mark.parametrize(
    ("sink", "values", "fields", "match"),
    [
        (KafkaSink("t", key="word"), ["v"], ["value"], "the tuple has no field 'word'"),
        (KafkaSink("t"), [7], ["value"], "value serializer StringSerializer.*expected a str"),
        (KafkaSink("t", value_serializer="bytes"), ["s"], ["value"], "expected bytes"),
        (KafkaSink(value="value"), ["s"], ["value"], "a record with no topic"),
        (KafkaSink("t", partition_field="p"), [-4, "s"], ["p", "value"], "not a partition"),
    ],
)
def test_a_tuple_the_sink_cannot_stage_is_refused_naming_why(
    sink: KafkaSink, values: list[Any], fields: list[str], match: str
) -> None:
    with pytest.raises(SinkStageError, match=match):
        sink.stage(make_tuple(values, fields=fields))


# ------------------------------------------------------------------ settings (no broker)
def test_arguments_win_over_keys_and_kafka_keys_reach_the_producer() -> None:
    conf = {
        **CONF,
        "kafka.bootstrap.servers": "b1:9092",
        "kafka.topics": "sentences",  # the spout's: not a producer setting
        "kafka.security.protocol": "SASL_SSL",
        "sink.kafka.producer.compression.type": "lz4",
        "sink.kafka.topic": "from-conf",
        "sink.kafka.publish.timeout.ms": 5000,
        "sink.kafka.transaction.timeout.ms": 9000,
    }
    settings = KafkaSink("from-arg").settings(conf)
    assert (settings.topic, settings.marker_topic) == ("from-arg", "from-arg")
    assert (settings.publish_timeout_s, settings.transaction_timeout_ms) == (5.0, 9000)
    assert dict(settings.client) == {
        "bootstrap.servers": "b1:9092",
        "compression.type": "lz4",
        "security.protocol": "SASL_SSL",
    }


@pytest.mark.parametrize(
    ("conf", "match"),
    [
        ({"kafka.transactional.id": "x"}, "'kafka.transactional.id' is the sink's to decide"),
        ({"sink.kafka.producer.acks": "1"}, "'sink.kafka.producer.acks' is the sink's to decide"),
        (
            {"sink.kafka.publish.timeout.ms": 30000, "sink.kafka.transaction.timeout.ms": 30000},
            "'sink.kafka.transaction.timeout.ms' .30000 ms. must exceed "
            "'sink.kafka.publish.timeout.ms' .30000 ms.",
        ),
        ({"sink.kafka.publish.timeout.ms": "fast"}, "'sink.kafka.publish.timeout.ms'"),
        ({"sink.kafka.topic": "no spaces"}, "is not a Kafka topic name"),
    ],
)
def test_a_setting_that_cannot_work_is_refused_naming_the_key(
    conf: dict[str, Any], match: str
) -> None:
    with pytest.raises(SinkConfigError, match=match):
        KafkaSink("t").settings({**CONF, **conf})


def test_a_sink_with_no_topic_anywhere_has_nowhere_for_its_markers() -> None:
    with pytest.raises(SinkConfigError, match="no topic to keep the markers on"):
        KafkaSink(topic_field="to").settings(CONF)
    assert KafkaSink(topic_field="to", marker_topic="m").settings(CONF).marker_topic == "m"


def test_each_sink_task_has_a_stable_transactional_id() -> None:
    sink = KafkaSink("t", transactional_id_prefix="team-a.wc")
    assert sink.transactional_id(Lane("wc", "publish", 2, 4)) == "team-a.wc.publish.2of4"
    assert KafkaSink("t").transactional_id(Lane("wc", "out", 0, 1)) == "statefulbolts.wc.out.0of1"


# ------------------------------------------------------------------ on the broker


@pytest.mark.kafka
def test_check_config_refuses_a_missing_topic_and_an_unknown_producer_setting(
    kafka_broker: Any, kafka_topic: Any
) -> None:
    topic = kafka_topic()
    good = {**CONF, "kafka.bootstrap.servers": kafka_broker.bootstrap}
    KafkaSink(topic).check_config(good)
    with pytest.raises(SinkConfigError, match=r"topic 'nope-.*' not found .* never creates"):
        KafkaSink(f"nope-{topic}").check_config(good)
    with pytest.raises(SinkConfigError, match="refused its producer settings"):
        KafkaSink(topic).check_config({**good, "sink.kafka.producer.no.such.setting": 1})


@pytest.mark.kafka
def test_one_publish_writes_to_several_topics_and_sets_one_marker(
    kafka_broker: Any, kafka_topic: Any
) -> None:
    a, b = kafka_topic(), kafka_topic(partitions=2)
    sink = _opened(
        KafkaSink(
            a,
            topic_field="to",
            key="key",
            bootstrap_servers=kafka_broker.bootstrap,
            txid_headers=True,
        )
    )
    rows = [(a, "k1", "v1"), (b, "k2", "v2"), (b, "k3", "v3"), (None, "k4", "v4")]
    staged = _staged(sink, *rows, fields=("to", "key", "value"))
    result = sink.publish(LANE, 4, [StagedBatch(3, staged[:2]), StagedBatch(4, staged[2:])], None)
    assert (result.published, result.records) == ((3, 4), 4)
    in_a = read_topic(kafka_broker.bootstrap, a)
    in_b = read_topic(kafka_broker.bootstrap, b)
    assert [(m.key(), m.value(), header(m, TXID_HEADER)) for m in in_a] == [
        (b"k1", b"v1", "3"),
        (b"k4", b"v4", "4"),
    ]
    assert sorted((m.key(), m.value()) for m in in_b) == [(b"k2", b"v2"), (b"k3", b"v3")]
    assert len({header(m, PUBLISH_HEADER) for m in in_a + in_b}) == 1
    assert sink.published(LANE) == 4


@pytest.mark.kafka
def test_a_record_s_own_headers_are_published_and_written_beside_the_sink_s(
    kafka_broker: Any, kafka_topic: Any
) -> None:
    # Staged records keep their headers as msgpack gives them back (lists); the client takes
    # only (name, value) tuples.
    published, written = kafka_topic(), kafka_topic()
    for topic, at_once in ((published, False), (written, True)):
        sink = _opened(
            KafkaSink(
                topic,
                headers_field="hs",
                bootstrap_servers=kafka_broker.bootstrap,
                txid_headers=True,
            )
        )
        staged = _staged(sink, ([("trace", "t-1"), ("raw", b"\x00")], "v"), fields=("hs", "value"))
        if at_once:
            sink.write(staged)
        else:
            sink.publish(LANE, 1, [StagedBatch(1, staged)], None)
        [message] = read_topic(kafka_broker.bootstrap, topic)
        names = [name for name, _ in message.headers()]
        expected = ["trace", "raw"] + ([] if at_once else [TXID_HEADER, PUBLISH_HEADER])
        assert (message.value(), names, header(message, "trace")) == (b"v", expected, "t-1")
        assert dict(message.headers())["raw"] == b"\x00"


@pytest.mark.kafka
def test_a_big_transaction_is_published_whole_and_in_order(
    kafka_broker: Any, kafka_topic: Any
) -> None:
    topic = kafka_topic()
    sink = _opened(KafkaSink(topic, bootstrap_servers=kafka_broker.bootstrap))
    staged = [sink.stage(make_tuple([f"r{i:05d}"], fields=["value"])) for i in range(20_000)]
    batches = [StagedBatch(t, staged[t * 5000 : (t + 1) * 5000]) for t in range(4)]
    result = sink.publish(LANE, 3, batches, None)
    assert result.records == 20_000
    values = [m.value().decode() for m in read_topic(kafka_broker.bootstrap, topic)]
    assert values == [f"r{i:05d}" for i in range(20_000)]


@pytest.mark.kafka
def test_a_zombie_attempt_is_fenced_by_the_next_and_its_commit_refused(
    kafka_broker: Any, kafka_topic: Any
) -> None:
    """An earlier attempt of the lane's task, still running, opened a transaction and wrote.

    The next attempt's publish fences it (step 1) and publishes; the zombie's commit is then
    refused (Tansu refuses it with a timeout, not with Kafka's fenced code), and the marker
    is the next attempt's. On Tansu the zombie's records, aborted by the fence, still reach a
    read_committed reader: they carry the zombie's own publish header.
    """
    topic = kafka_topic()
    sink = _opened(
        KafkaSink(topic, bootstrap_servers=kafka_broker.bootstrap, publish_timeout_ms=5000)
    )
    zombie = sink._fence(sink._current(), LANE, deadline=time.monotonic() + 10)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie", headers=[(PUBLISH_HEADER, b"zombie-attempt")])
    assert zombie.flush(10) == 0
    staged = _staged(sink, ("k", "live"))
    assert sink.publish(LANE, 0, [StagedBatch(0, staged)], None).published == (0,)
    with pytest.raises(Exception) as refused:
        zombie.commit_transaction(5)
    assert refused.value.args[0].name() in ("_FENCED", "PRODUCER_FENCED", "_TIMED_OUT")
    _close(zombie)  # its close warns that it could not abort: it was fenced
    assert sink.published(LANE) == 0
    seen = [
        (m.value(), header(m, PUBLISH_HEADER)) for m in read_topic(kafka_broker.bootstrap, topic)
    ]
    live = [v for v, h in seen if h != "zombie-attempt"]
    assert live == [b"live"]
    assert [v for v, h in seen if h == "zombie-attempt"] == [b"zombie"]  # Tansu shows it


@pytest.mark.kafka
def test_abort_lingering_frees_read_committed_readers_of_a_killed_producer_s_transaction(
    kafka_broker: Any, kafka_topic: Any
) -> None:
    topic = kafka_topic()
    sink = _opened(KafkaSink(topic, bootstrap_servers=kafka_broker.bootstrap))
    sink.publish(LANE, 0, [StagedBatch(0, _staged(sink, ("k", "done")))], None)
    killed = sink._fence(sink._current(), LANE, deadline=time.monotonic() + 10)
    killed.begin_transaction()
    killed.produce(topic, value=b"left open")
    assert killed.flush(10) == 0  # and then the process dies: nothing aborts it

    def stable() -> int:
        spec = {TopicPartition(topic, 0): OffsetSpec.latest()}
        futures = kafka_broker.admin().list_offsets(
            spec, isolation_level=IsolationLevel.READ_COMMITTED
        )
        return next(iter(futures.values())).result(10).offset

    before = stable()
    assert sink.lane_markers(CONF, "kafka-sink", "publish") == {"0of1": 0}
    fenced = sink.abort_lingering(CONF, [LANE])
    assert fenced == ["statefulbolts.kafka-sink.publish.0of1"]
    # Stuck before the open transaction (Tansu: at 0 while any transaction is open; Kafka: at
    # its first offset, 2); past the abort marker after.
    assert before in (0, 2)
    assert stable() == 4
    assert sink.published(LANE) == 0


@pytest.mark.kafka
def test_a_broker_away_is_an_outage(kafka_topic: Any) -> None:
    from redis_fixtures import free_port

    sink = _opened(
        KafkaSink(
            "t",
            bootstrap_servers=f"127.0.0.1:{free_port()}",
            publish_timeout_ms=1000,
            transaction_timeout_ms=2000,
        )
    )
    with pytest.raises(KafkaUnavailableError, match=r"did not answer.*waited for"):
        sink.publish(LANE, 0, [StagedBatch(0, _staged(sink, ("k", "v")))], None)
    with pytest.raises(KafkaUnavailableError, match="reading the marker"):
        sink.published(LANE)


@pytest.mark.kafka
def test_a_foreign_consumer_s_offset_in_the_lane_s_group_is_refused_as_a_marker(
    kafka_broker: Any, kafka_topic: Any
) -> None:
    topic = kafka_topic()
    sink = _opened(KafkaSink(topic, bootstrap_servers=kafka_broker.bootstrap))
    group = sink.transactional_id(LANE)
    [future] = (
        kafka_broker.admin()
        .alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, [TopicPartition(topic, 0, 0)])]
        )
        .values()
    )
    future.result(10)
    with pytest.raises(SinkMarkerError, match="holds offset 0 .* another consumer shares"):
        sink.published(LANE)


def test_json_serializer_is_compact_and_keeps_unicode() -> None:
    sink = KafkaSink("t", value_serializer="json")
    staged = sink.stage(make_tuple([{"wörd": [1, 2]}], fields=["value"]))
    assert json.loads(staged[3]) == {"wörd": [1, 2]}
    assert staged[3] == '{"wörd":[1,2]}'.encode()


# ------------------------------------------------------------------ concurrent lanes
TANSU_CONCURRENT = (
    "Tansu difference: when two producers' transactions are open on one partition at once, a "
    "commit the broker acknowledged is sometimes not applied (its records stay invisible to "
    "read_committed readers and its offsets are not committed), at times for every later "
    "transaction of that producer too; Apache Kafka keeps each transactional id apart"
)


def _concurrent_commits(bootstrap: str, topic: str, rounds: int, partition_of: Any) -> list[Any]:
    """Two producers committing transactions (records and offsets) at once; commits lost."""
    import threading

    from confluent_kafka import Consumer, Producer

    lost: list[Any] = []
    stop = threading.Event()

    def run(idx: int) -> None:
        tid = f"{topic}-concurrent-{idx}"
        producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": tid})
        producer.init_transactions(10)
        reader = Consumer({"bootstrap.servers": bootstrap, "group.id": tid})
        metadata = reader.consumer_group_metadata()
        reader.close()
        admin = kafka_admin(bootstrap)
        for t in range(rounds):
            if stop.is_set():
                break
            producer.begin_transaction()
            for i in range(20):
                producer.produce(topic, key=f"w{i}".encode(), value=b"v", **partition_of(idx))
            producer.send_offsets_to_transaction([TopicPartition(topic, 0, t + 1)], metadata, 10)
            producer.commit_transaction(10)
            [future] = admin.list_consumer_group_offsets(
                [ConsumerGroupTopicPartitions(tid, [TopicPartition(topic, 0)])]
            ).values()
            if future.result(10).topic_partitions[0].offset != t + 1:
                lost.append((idx, t))
                stop.set()
        producer.close()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return lost


def kafka_admin(bootstrap: str) -> Any:
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap})


@pytest.mark.kafka
@pytest.mark.xfail(reason=TANSU_CONCURRENT, strict=True)
def test_concurrent_transactions_on_one_partition_each_commit(
    kafka_broker: Any, kafka_topic: Any
) -> None:
    """Asserted to Kafka's semantics; on Tansu a commit is lost within a few hundred rounds."""
    topic = kafka_topic(partitions=2)
    assert _concurrent_commits(kafka_broker.bootstrap, topic, 400, lambda idx: {}) == []


@pytest.mark.kafka
def test_lanes_on_partitions_of_their_own_each_commit(kafka_broker: Any, kafka_topic: Any) -> None:
    """What the tests and the demo do on Tansu: each sink task its own partitions."""
    topic = kafka_topic(partitions=2)
    lost = _concurrent_commits(kafka_broker.bootstrap, topic, 150, lambda idx: {"partition": idx})
    assert lost == []


def test_partitioning_by_task_gives_each_task_its_own_partition(
    kafka_broker: Any, kafka_topic: Any
) -> None:
    topic = kafka_topic(partitions=2)
    sink = KafkaSink(topic, partitioning="task", bootstrap_servers=kafka_broker.bootstrap)

    class Context:
        this_task_index = 3

    sink.open(CONF, Context())  # type: ignore[arg-type]
    assert sink.stage(make_tuple(["v"], fields=["value"]))[1] == 1  # 3 % 2
    explicit = KafkaSink(topic, partitioning="task", partition_field="p")
    explicit.open(CONF, Context())  # type: ignore[arg-type]
    assert explicit.stage(make_tuple(["v", 0], fields=["value", "p"]))[1] == 0
    with pytest.raises(ValueError, match="partitioning"):
        KafkaSink(topic, partitioning="round-robin")


def test_statefulbolts_run_checks_a_sink_s_topics_before_spark_starts(
    kafka_broker: Any, kafka_topic: Any
) -> None:
    from examples.kafka_to_kafka import build
    from statefulbolts.cli import check_before_spark

    topic = kafka_topic()
    conf = {**CONF, "kafka.bootstrap.servers": kafka_broker.bootstrap}
    check_before_spark(conf, topology=build(topic, topic, kafka_broker.bootstrap))
    with pytest.raises(SinkConfigError, match=r"topic 'gone-.*' not found"):
        check_before_spark(conf, topology=build(topic, f"gone-{topic}", kafka_broker.bootstrap))


# ------------------------------------------------------------------ the kept producers
def _kept(sink: KafkaSink, lane: Lane) -> Any:
    """The producer client this process keeps for ``lane`` (``None``: none)."""
    key = sink._producer_key(sink._current(), lane)
    kept = _producers.take_producer(key)
    if kept is None:
        return None
    _producers.keep_producer(key, kept)
    return kept.client


def _sink_and_lane(kafka_broker: Any, topic: str, name: str) -> tuple[KafkaSink, Lane]:
    """An opened sink writing to ``topic``, and a lane of its own (``name``) for the test."""
    sink = _opened(KafkaSink(topic, bootstrap_servers=kafka_broker.bootstrap))
    return sink, LANE._replace(component=f"{name}-{topic}")


def _values(bootstrap: str, topic: str) -> list[str]:
    return [m.value().decode() for m in read_topic(bootstrap, topic)]


@pytest.mark.kafka
def test_clients_a_process_keeps_are_closed_once_idle_and_made_again_when_needed(
    kafka_broker: Any, kafka_topic: Any
) -> None:
    # A worker outlives its topologies: a client of a cluster gone for good would retry for ever.
    topic = kafka_topic()
    sink, lane = _sink_and_lane(kafka_broker, topic, "idle")
    assert sink.publish(lane, 1, [StagedBatch(1, _staged(sink, ("k", "a")))], None).records == 1
    sink.write(_staged(sink, ("k", "b")))
    client = sink._current().client
    kept, writer = _kept(sink, lane), sink_module._WRITERS[client]
    assert client in sink_module._ADMINS  # the marker was read through it
    assert any(t.name == "kafka-sink-idle" and t.daemon for t in threading.enumerate())

    now = time.monotonic()
    _producers.close_idle(now)
    sink_module._close_idle_clients(now)
    assert _kept(sink, lane) is kept  # used just now: kept (and used again)
    assert sink_module._WRITERS[client] is writer

    later = time.monotonic() + _producers.KEPT_IDLE_S
    assert _producers.close_idle(later) >= 1
    assert sink_module._close_idle_clients(later) >= 2
    assert _kept(sink, lane) is None
    assert client not in sink_module._WRITERS and client not in sink_module._ADMINS
    for closed in (kept, writer.client):
        with pytest.raises(RuntimeError, match="closed"):
            closed.flush(0)
    # The next publish and write make their clients again; every record is there once.
    assert sink.publish(lane, 2, [StagedBatch(2, _staged(sink, ("k", "c")))], None).records == 1
    sink.write(_staged(sink, ("k", "d")))
    assert sorted(_values(kafka_broker.bootstrap, topic)) == ["a", "b", "c", "d"]


def test_a_producer_still_being_made_is_not_closed_as_idle() -> None:
    started, release = threading.Event(), threading.Event()
    made = _producers.LaneProducer()  # no client: nothing to connect or close

    def make() -> _producers.LaneProducer:
        started.set()
        release.wait(30)
        return made

    key: _producers.ProducerKey = ("idle-test-transactional-id", ())
    assert _producers.warm_producer(key, make)
    assert started.wait(30)
    _producers.close_idle(time.monotonic() + 10 * _producers.KEPT_IDLE_S)
    release.set()
    assert _producers.take_producer(key) is made


@pytest.mark.kafka
@pytest.mark.parametrize(
    ("given", "sparse"),
    [({}, False), ({"sink.kafka.producer.enable.sparse.connections": True}, True)],
    ids=["default", "the-config-s-own"],
)
def test_the_sink_s_producers_connect_to_every_broker_unless_the_config_says_otherwise(
    kafka_broker: Any,
    kafka_topic: Any,
    monkeypatch: pytest.MonkeyPatch,
    given: dict[str, Any],
    sparse: bool,
) -> None:
    # Sparse connections make a new producer's first coordinator query wait for a 500 ms timer
    # when no broker is connected yet (``_EAGER``): both producers connect eagerly by default.
    made: list[dict[str, Any]] = []

    class Recorded(confluent_kafka.Producer):  # type: ignore[misc]
        def __init__(self, config: dict[str, Any]) -> None:
            made.append(dict(config))
            super().__init__(config)

    monkeypatch.setattr(confluent_kafka, "Producer", Recorded)
    topic = kafka_topic()
    # A client id of its own: the process's at-least-once writer is made for these settings.
    conf = {**CONF, **given, "sink.kafka.producer.client.id": f"eager-{topic}"}
    sink = _opened(KafkaSink(topic, bootstrap_servers=kafka_broker.bootstrap), conf)
    lane = LANE._replace(component=f"eager-{topic}")
    assert sink.publish(lane, 1, [StagedBatch(1, _staged(sink, ("k", "a")))], None).records == 1
    sink.write(_staged(sink, ("k", "b")))
    assert sorted(("transactional.id" in c, c["enable.sparse.connections"]) for c in made) == [
        (False, sparse),
        (True, sparse),
    ]
    assert sorted(_values(kafka_broker.bootstrap, topic)) == ["a", "b"]


@pytest.mark.kafka
def test_a_lane_s_next_publish_reuses_its_producer_and_a_replayed_commit_writes_nothing_twice(
    kafka_broker: Any, kafka_topic: Any
) -> None:
    topic = kafka_topic()
    sink, lane = _sink_and_lane(kafka_broker, topic, "reuse")
    assert sink.publish(lane, 1, [StagedBatch(1, _staged(sink, ("k", "a")))], None).records == 1
    first = _kept(sink, lane)
    assert first is not None
    # The COMMIT run again (a driver killed after the publish): the kept producer reads the
    # marker and writes nothing.
    again = sink.publish(lane, 1, [StagedBatch(1, _staged(sink, ("k", "a")))], None)
    assert (again.published, again.marker_before) == ((), 1)
    assert sink.publish(lane, 2, [StagedBatch(2, _staged(sink, ("k", "b")))], None).records == 1
    assert _kept(sink, lane) is first  # no new producer, no init_transactions
    assert _values(kafka_broker.bootstrap, topic) == ["a", "b"]
    assert sink.published(lane) == 2


@pytest.mark.kafka
def test_a_kept_producer_a_newer_one_fenced_publishes_nothing_stale_and_is_replaced(
    kafka_broker: Any, kafka_topic: Any
) -> None:
    """Process A keeps the lane's producer; the task then runs in process B, which fences it.

    Back in A, the kept producer is no longer the lane's: a replayed COMMIT of what B
    published writes nothing (the marker says B did), and the next COMMIT's step finds the
    producer refused before any record goes out and publishes with a new one, once.
    """
    topic = kafka_topic()
    sink, lane = _sink_and_lane(kafka_broker, topic, "fenced")
    key = sink._producer_key(sink._current(), lane)
    sink.publish(lane, 1, [StagedBatch(1, _staged(sink, ("k", "a")))], None)
    in_a = _producers.take_producer(key)  # process A's keeping
    assert in_a is not None
    sink.publish(lane, 2, [StagedBatch(2, _staged(sink, ("k", "b")))], None)  # process B
    assert _kept(sink, lane) is not in_a.client
    _producers.keep_producer(key, in_a)  # back in process A, with its stale producer
    replayed = sink.publish(lane, 2, [StagedBatch(2, _staged(sink, ("k", "b")))], None)
    assert (replayed.published, replayed.marker_before) == ((), 2)
    result = sink.publish(lane, 3, [StagedBatch(3, _staged(sink, ("k", "c")))], None)
    assert (result.published, result.records, result.marker_before) == ((3,), 1, 2)
    assert _kept(sink, lane) not in (None, in_a.client)
    assert _values(kafka_broker.bootstrap, topic) == ["a", "b", "c"]
    assert sink.published(lane) == 3


@pytest.mark.kafka
def test_a_failed_publish_keeps_no_producer_and_the_next_one_publishes(
    kafka_broker: Any, kafka_topic: Any
) -> None:
    topic = kafka_topic()
    sink, lane = _sink_and_lane(kafka_broker, topic, "failed")
    sink.publish(lane, 1, [StagedBatch(1, _staged(sink, ("k", "a")))], None)
    kept = _kept(sink, lane)
    bad = [topic, 7, None, b"to a partition the topic lacks", None]
    with pytest.raises(SinkPublishError):
        sink.publish(lane, 2, [StagedBatch(2, [bad])], None)
    assert _kept(sink, lane) is None  # closed, not kept: it held an aborted transaction
    assert sink.publish(lane, 2, [StagedBatch(2, _staged(sink, ("k", "b")))], None).records == 1
    assert _kept(sink, lane) not in (None, kept)
    assert _values(kafka_broker.bootstrap, topic) == ["a", "b"]


@pytest.mark.kafka
def test_a_producer_warmed_during_the_prepare_is_the_one_its_commit_publishes_with(
    kafka_broker: Any, kafka_topic: Any
) -> None:
    topic = kafka_topic()
    sink, lane = _sink_and_lane(kafka_broker, topic, "warmed")
    key = sink._producer_key(sink._current(), lane)
    sink.warm(lane)
    warmed = _kept(sink, lane)  # waits for it to be made
    assert warmed is not None
    assert not _producers.warm_producer(key, _unused)  # one is kept: nothing more is made
    assert sink.publish(lane, 1, [StagedBatch(1, _staged(sink, ("k", "a")))], None).records == 1
    assert _kept(sink, lane) is warmed  # the COMMIT made no producer of its own
    assert _values(kafka_broker.bootstrap, topic) == ["a"]
    assert sink.published(lane) == 1


def _unused() -> Any:
    raise AssertionError("no producer should be made")


@pytest.mark.kafka
def test_a_commit_waits_for_the_producer_on_its_way_instead_of_fencing_it(
    kafka_broker: Any, kafka_topic: Any
) -> None:
    """A warm-up still making its producer when the COMMIT starts: the COMMIT takes that one.

    Made beside it, a producer of its own would be fenced by the warmed one's
    ``init_transactions`` if that ended later, failing the COMMIT.
    """
    topic = kafka_topic()
    sink, lane = _sink_and_lane(kafka_broker, topic, "coming")
    key = sink._producer_key(sink._current(), lane)
    release, made = threading.Event(), []

    def slow() -> Any:
        assert release.wait(60)
        made.append(sink._new_producer(sink._current(), lane, time.monotonic() + 30))
        return made[0]

    assert _producers.warm_producer(key, slow)
    results: list[Any] = []
    commit = threading.Thread(
        target=lambda: results.append(
            sink.publish(lane, 1, [StagedBatch(1, _staged(sink, ("k", "a")))], None)
        )
    )
    commit.start()
    commit.join(0.5)
    assert results == []  # waiting for the producer on its way
    release.set()
    commit.join(60)
    assert [r.records for r in results] == [1]
    assert _kept(sink, lane) is made[0].client
    assert _values(kafka_broker.bootstrap, topic) == ["a"]


@pytest.mark.kafka
def test_a_warm_up_that_fails_leaves_the_commit_to_make_its_own_producer(
    kafka_broker: Any, kafka_topic: Any
) -> None:
    topic = kafka_topic()
    sink, lane = _sink_and_lane(kafka_broker, topic, "unmade")

    def broken() -> Any:
        raise KafkaSinkFenceError("injected: the warm-up could not fence")

    assert _producers.warm_producer(sink._producer_key(sink._current(), lane), broken)
    assert sink.publish(lane, 1, [StagedBatch(1, _staged(sink, ("k", "a")))], None).records == 1
    assert _kept(sink, lane) is not None
    assert _values(kafka_broker.bootstrap, topic) == ["a"]
    assert sink.published(lane) == 1


def test_the_txid_headers_are_off_unless_asked_for() -> None:
    assert KafkaSink("t").txid_headers is False
    assert KafkaSink("t", txid_headers=True).txid_headers is True
