"""The transactional Kafka spouts against a real Kafka-protocol broker (Tansu, ``kafka_fixtures``).

Their emitters and coordinators are driven as the runtime drives them (``_emitting``): a new
batch from the partition's last meta, a replay with the stored meta (as msgpack gives it
back), an opaque emission from the meta it is given. Exact records, metas and messages.

Tansu cannot expire records (no DeleteRecords, no retention): a partition whose first
offsets expired is shown by raising the first offset in the listing the emitter gets (the
records are the broker's); a topic deleted and made again is the real thing.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Sequence
from typing import Any

import msgpack
import pytest
from kafka_fixtures import KafkaBroker, produce

from statefulbolts.connectors.kafka import (
    KafkaEnd,
    KafkaGapError,
    KafkaReplayError,
    KafkaSpout,
    KafkaTopicNotFoundError,
    KafkaTransactionalSpout,
    KafkaUnavailableError,
    OpaqueKafkaTransactionalSpout,
)
from statefulbolts.errors import ConfigError, FailedException
from statefulbolts.transactional import BatchOutputCollector, TransactionAttempt
from statefulbolts.tuples import DEFAULT_STREAM

pytestmark = pytest.mark.kafka
CONF: dict[str, Any] = {"topology.name": "kafka-tx-test"}
EMPTY = hashlib.blake2b(digest_size=16).hexdigest()


class Recorder(BatchOutputCollector):
    def __init__(self) -> None:
        self.emitted: list[list[Any]] = []
        self.errors: list[BaseException] = []

    def emit(self, values: Sequence[Any], stream: str = DEFAULT_STREAM) -> list[int]:
        assert stream == DEFAULT_STREAM
        self.emitted.append(list(values))
        return [0]

    def report_error(self, error: BaseException) -> None:
        self.errors.append(error)


def _tx(txid: int, attempt: int = 1) -> TransactionAttempt:
    return TransactionAttempt(txid, attempt)


def _stored(meta: Any) -> Any:
    return msgpack.unpackb(msgpack.packb(meta))  # as the runtime stores it


def _new(spout: Any, txid: int, p: int, last: Any) -> tuple[list[str], Any, Recorder]:
    collector = Recorder()
    meta = spout.get_emitter(CONF, None).emit_partition_batch_new(_tx(txid), collector, p, last)
    assert all(v[0] == _tx(txid) for v in collector.emitted)
    return [v[5] for v in collector.emitted], _stored(meta), collector


def _replay(spout: Any, txid: int, p: int, meta: Any) -> list[str]:
    collector = Recorder()
    spout.get_emitter(CONF, None).emit_partition_batch(_tx(txid, 9), collector, p, meta)
    assert all(v[0] == _tx(txid, 9) for v in collector.emitted)
    return [v[5] for v in collector.emitted]


def _opaque(spout: Any, txid: int, p: int, last: Any) -> tuple[list[str], Any, Recorder]:
    collector = Recorder()
    meta = spout.get_emitter(CONF, None).emit_partition_batch(_tx(txid), collector, p, last)
    return [v[5] for v in collector.emitted], _stored(meta), collector


def _digest(*records: tuple[int, bytes]) -> str:
    digest = hashlib.blake2b(digest_size=16)
    for offset, value in records:
        digest.update(offset.to_bytes(8, "big", signed=True))
        digest.update((-1).to_bytes(8, "big", signed=True))  # no key
        digest.update(len(value).to_bytes(8, "big", signed=True) + value)
    return digest.hexdigest()


def _meta(topic: str, partition: int, first: int, values: list[bytes]) -> dict[str, Any]:
    records = [(first + i, v) for i, v in enumerate(values)]
    return {
        "topic": topic,
        "partition": partition,
        "first": first,
        "next": first + len(values),
        "count": len(values),
        "digest": _digest(*records),
    }


def _expire(monkeypatch: pytest.MonkeyPatch, partition_id: str, low: int) -> None:
    """Make the listings say ``partition_id``'s offsets below ``low`` expired (module docstring)."""
    ends = KafkaSpout.ends

    def expired(self: KafkaSpout, conf: Any, partitions: Any) -> dict[str, KafkaEnd]:
        found = ends(self, conf, partitions)
        if partition_id in found:
            end = found[partition_id]
            found[partition_id] = end._replace(low=low, first=max(end.first, low))
        return found

    monkeypatch.setattr(KafkaSpout, "ends", expired)


# ----------------------------------------------------------------- partition numbers
def test_partition_numbers_interleave_the_topics_and_new_batches_read_fixed_ranges(
    kafka_broker: KafkaBroker, kafka_topic: Any
) -> None:
    a, b = kafka_topic(partitions=2), kafka_topic(partitions=1)
    produce(kafka_broker, a, [f"a{i}".encode() for i in range(5)], partition=0)
    produce(kafka_broker, a, [b"c0", b"c1"], partition=1)
    produce(kafka_broker, b, [b"b0", b"b1", b"b2"], partition=0)
    spout = KafkaTransactionalSpout(
        [a, b], take_per_batch=2, bootstrap_servers=kafka_broker.bootstrap
    )
    # Two topics, at most two partitions: 0 = a/0, 1 = b/0, 2 = a/1, 3 = b/1 (none yet).
    assert spout.get_coordinator(CONF, None).num_partitions() == 4
    last: dict[int, Any] = {}
    batches = []
    for txid in (1, 2, 3):
        words = {}
        for p in range(4):
            words[p], meta, collector = _new(spout, txid, p, last.get(p))
            assert collector.errors == []
            if meta is not None:
                last[p] = meta
            else:
                assert p == 3 and p not in last  # b/1 does not exist: nothing, no meta
        batches.append(words)
    assert batches == [
        {0: ["a0", "a1"], 1: ["b0", "b1"], 2: ["c0", "c1"], 3: []},
        {0: ["a2", "a3"], 1: ["b2"], 2: [], 3: []},
        {0: ["a4"], 1: [], 2: [], 3: []},
    ]
    assert last[0] == _meta(a, 0, 4, [b"a4"])
    assert last[1] == {**_meta(b, 0, 3, []), "digest": EMPTY}
    assert last[2] == _meta(a, 1, 2, [])
    # A tuple is the attempt, then the default translator's fields.
    _, _, collector = _new(spout, 4, 0, _meta(a, 0, 2, [b"a2"]))
    assert collector.emitted == [[_tx(4), a, 0, 3, None, "a3"], [_tx(4), a, 0, 4, None, "a4"]]


def test_a_replay_reads_the_stored_range_exactly_whatever_was_written_since(
    kafka_broker: KafkaBroker, kafka_topic: Any
) -> None:
    topic = kafka_topic()
    produce(kafka_broker, topic, [f"r{i}".encode() for i in range(3)], partition=0)
    spout = KafkaTransactionalSpout(
        topic, take_per_batch=2, bootstrap_servers=kafka_broker.bootstrap
    )
    first, meta1, _ = _new(spout, 1, 0, None)
    second, meta2, _ = _new(spout, 2, 0, meta1)
    assert (first, second) == (["r0", "r1"], ["r2"])
    assert meta2 == _meta(topic, 0, 2, [b"r2"])
    produce(kafka_broker, topic, [b"later0", b"later1"], partition=0)
    assert _replay(spout, 1, 0, meta1) == ["r0", "r1"]
    assert _replay(spout, 2, 0, meta2) == ["r2"]  # not the later records
    assert _replay(spout, 3, 0, _meta(topic, 0, 3, [])) == []  # an empty batch replays empty
    third, _, _ = _new(spout, 3, 0, meta2)
    assert third == ["later0", "later1"]


def test_a_replay_of_records_gone_stops_naming_partition_txid_and_offsets(
    kafka_broker: KafkaBroker, kafka_topic: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = kafka_topic()
    produce(kafka_broker, topic, [f"r{i}".encode() for i in range(6)], partition=0)
    spout = KafkaTransactionalSpout(
        topic, take_per_batch=4, bootstrap_servers=kafka_broker.bootstrap
    )
    _, meta1, _ = _new(spout, 1, 0, None)
    _, meta2, _ = _new(spout, 2, 0, meta1)
    assert (meta1["first"], meta1["next"], meta2["first"], meta2["next"]) == (0, 4, 4, 6)
    name = "KafkaTransactionalSpout"
    tail = (
        "; the records were deleted (retention, compaction, deleted records) or the topic was "
        "made again, so the batch cannot be emitted again as it was. Keep records longer than "
        "a topology may be down, or read with OpaqueKafkaTransactionalSpout, whose replays "
        "may differ"
    )

    # Retention took offsets 0-2: txid 1's range is gone, txid 2's is whole.
    with monkeypatch.context() as patched:
        _expire(patched, f"{topic}/0", 3)
        with pytest.raises(KafkaReplayError) as gone:
            _replay(spout, 1, 0, meta1)
        assert str(gone.value) == (
            f"{name}: cannot replay txid 1 of partition 0 ({topic}/0): its batch was the 4 "
            "records at offsets 0 to 3, and the partition now holds offsets 3 to 5" + tail
        )
        assert _replay(spout, 2, 0, meta2) == ["r4", "r5"]

    # The topic made again, shorter: txid 2's range is past its end.
    kafka_broker.delete_topic(topic)
    kafka_broker.create_topic(topic)
    produce(kafka_broker, topic, [b"n0", b"n1", b"n2", b"n3", b"n4"], partition=0)
    with pytest.raises(KafkaReplayError) as short:
        _replay(spout, 2, 0, meta2)
    assert str(short.value) == (
        f"{name}: cannot replay txid 2 of partition 0 ({topic}/0): its batch was the 2 records "
        "at offsets 4 to 5, and the partition now holds offsets 0 to 4" + tail
    )
    # ... and long enough, but other records: the digest tells.
    with pytest.raises(KafkaReplayError) as other:
        _replay(spout, 1, 0, meta1)
    assert str(other.value) == (
        f"{name}: cannot replay txid 1 of partition 0 ({topic}/0): its batch was the 4 records "
        "at offsets 0 to 3, and found 4 records up to offset 4 that differ from those first "
        "read (another digest)" + tail
    )


def test_a_new_batch_skips_expired_offsets_and_reads_a_remade_topic_again_saying_so(
    kafka_broker: KafkaBroker,
    kafka_topic: Any,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = kafka_topic()
    produce(kafka_broker, topic, [f"r{i}".encode() for i in range(8)], partition=0)
    for kind in (KafkaTransactionalSpout, OpaqueKafkaTransactionalSpout):
        spout = kind(topic, take_per_batch=3, bootstrap_servers=kafka_broker.bootstrap)
        emit = _new if kind is KafkaTransactionalSpout else _opaque
        last = _meta(topic, 0, 0, [b"r0"])  # txid 1 read offset 0; 1-4 expired since
        with monkeypatch.context() as patched:
            _expire(patched, f"{topic}/0", 5)
            caplog.clear()
            with caplog.at_level(logging.WARNING):
                words, meta, collector = emit(spout, 2, 0, last)
        assert words == ["r5", "r6", "r7"]
        assert meta == _meta(topic, 0, 5, [b"r5", b"r6", b"r7"])
        text = (
            f"{kind.__name__}: partition 0 ({topic}/0), txid 2: offsets 1 to 4 are no longer "
            "in the topic (retention, deleted records or compaction): 4 offsets skipped"
        )
        assert [type(e) for e in collector.errors] == [KafkaGapError]
        assert str(collector.errors[0]) == text
        assert [r.getMessage() for r in caplog.records] == [text]

    kafka_broker.delete_topic(topic)
    kafka_broker.create_topic(topic)
    produce(kafka_broker, topic, [b"n0", b"n1"], partition=0)
    for kind in (KafkaTransactionalSpout, OpaqueKafkaTransactionalSpout):
        spout = kind(topic, take_per_batch=3, bootstrap_servers=kafka_broker.bootstrap)
        emit = _new if kind is KafkaTransactionalSpout else _opaque
        words, meta, collector = emit(spout, 3, 0, _meta(topic, 0, 5, [b"r5", b"r6", b"r7"]))
        assert words == ["n0", "n1"] and meta == _meta(topic, 0, 0, [b"n0", b"n1"])
        assert [str(e) for e in collector.errors] == [
            f"{kind.__name__}: partition 0 ({topic}/0), txid 3: the partition now ends at "
            "offset 2, before the saved position 8: the topic was deleted and made again, or "
            "cut short; reading it again from its first offset 0 (a jump back)"
        ]


# ----------------------------------------------------------------- opaque
def test_opaque_emissions_continue_from_the_meta_they_are_given(
    kafka_broker: KafkaBroker, kafka_topic: Any
) -> None:
    topic = kafka_topic(partitions=2)
    produce(kafka_broker, topic, [f"r{i}".encode() for i in range(5)], partition=0)
    spout = OpaqueKafkaTransactionalSpout(
        [topic], take_per_batch=2, bootstrap_servers=kafka_broker.bootstrap
    )
    assert spout.get_emitter(CONF, None).num_partitions() == 2
    assert spout.get_coordinator(CONF, None).is_ready()
    one, meta1, _ = _opaque(spout, 1, 0, None)
    two, meta2, _ = _opaque(spout, 2, 0, meta1)
    assert (one, two) == (["r0", "r1"], ["r2", "r3"])
    # A replay of txid 2 after txid 1 committed starts from txid 1's meta; written since, more
    # records would not change a take of two, but a larger take reads on.
    assert _opaque(spout, 2, 0, meta1)[0] == ["r2", "r3"]
    wide = OpaqueKafkaTransactionalSpout(
        topic, take_per_batch=10, bootstrap_servers=kafka_broker.bootstrap
    )
    words, meta, _ = _opaque(wide, 2, 0, meta1)
    assert words == ["r2", "r3", "r4"] and meta == _meta(topic, 0, 2, [b"r2", b"r3", b"r4"])
    empty, meta_p1, _ = _opaque(spout, 1, 1, None)  # a partition with nothing yet
    assert empty == [] and meta_p1 == {**_meta(topic, 1, 0, []), "digest": EMPTY}


def test_an_unreachable_cluster_is_an_outage_or_an_empty_opaque_batch(
    caplog: pytest.LogCaptureFixture,
) -> None:
    offline = "127.0.0.1:9"  # nothing listens on the discard port
    conf = {**CONF, "kafka.timeout.ms": 500}
    partitioned = KafkaTransactionalSpout("t", bootstrap_servers=offline)
    with pytest.raises(FailedException, match="the transaction starts later$"):
        partitioned.get_coordinator(conf, None).num_partitions()
    with pytest.raises(KafkaUnavailableError, match="did not answer"):
        partitioned.get_emitter(conf, None).emit_partition_batch_new(_tx(1), Recorder(), 0, None)
    opaque = OpaqueKafkaTransactionalSpout("t", bootstrap_servers=offline)
    emitter = opaque.get_emitter(conf, None)
    with pytest.raises(KafkaUnavailableError):  # nothing listed yet in this process
        emitter.num_partitions()
    collector = Recorder()
    with caplog.at_level(logging.WARNING):
        assert emitter.emit_partition_batch(_tx(1), collector, 0, None) is None
        assert emitter.emit_partition_batch(_tx(1), collector, 1, None) is None  # not waited
    assert collector.emitted == []
    assert [r.getMessage().split(" unreachable")[0] for r in caplog.records] == [
        "OpaqueKafkaTransactionalSpout: partition 0 (t/0)"
    ]


def test_an_opaque_emitter_counts_the_partitions_it_listed_last_while_the_cluster_is_away(
    kafka_broker: KafkaBroker, kafka_topic: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    topic = kafka_topic(partitions=3)
    spout = OpaqueKafkaTransactionalSpout(topic, bootstrap_servers=kafka_broker.bootstrap)
    assert spout.get_emitter(CONF, None).num_partitions() == 3

    def away(self: Any, conf: Any) -> list[str]:
        raise KafkaUnavailableError("listing topics of the cluster: did not answer")

    monkeypatch.setattr(KafkaSpout, "partitions", away)
    assert spout.get_emitter(CONF, None).num_partitions() == 3


# ----------------------------------------------------------------- what is refused
def test_the_spouts_name_what_is_wrong(kafka_broker: KafkaBroker, kafka_topic: Any) -> None:
    with pytest.raises(ValueError, match="take_per_batch must be at least 1, got 0"):
        KafkaTransactionalSpout("t", take_per_batch=0)
    with pytest.raises(TypeError, match="take_per_batch must be an int"):
        OpaqueKafkaTransactionalSpout("t", take_per_batch=2.5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="^KafkaTransactionalSpout: topics must name at least"):
        KafkaTransactionalSpout([])
    by_pattern = KafkaTransactionalSpout(bootstrap_servers=kafka_broker.bootstrap)
    with pytest.raises(ConfigError) as pattern:
        by_pattern.get_coordinator({**CONF, "kafka.topic.pattern": "t-.*"}, None).num_partitions()
    assert str(pattern.value).startswith(
        "KafkaTransactionalSpout reads named topics (topics= or config 'kafka.topics'), not a "
        "pattern ('t-.*')"
    )
    missing = KafkaTransactionalSpout("no-such-topic", bootstrap_servers=kafka_broker.bootstrap)
    with pytest.raises(KafkaTopicNotFoundError, match="'no-such-topic' not found"):
        missing.get_coordinator(CONF, None).num_partitions()
    # A stored meta of another topic-partition: the topic list changed under the id.
    a, b = kafka_topic(), kafka_topic()
    moved = KafkaTransactionalSpout([b, a], bootstrap_servers=kafka_broker.bootstrap)
    with pytest.raises(ValueError) as wrong:
        _replay(moved, 1, 0, _meta(a, 0, 0, [b"x"]))
    assert str(wrong.value) == (
        f"KafkaTransactionalSpout: partition 0 is {b}/0 now, but its stored meta is for {a}/0: "
        "the topic list changed under a running transactional id; keep the list, or use a new "
        "transactional id"
    )
    with pytest.raises(ValueError, match="the meta of partition 0 must be a dict"):
        _replay(moved, 1, 0, [0, 3])
