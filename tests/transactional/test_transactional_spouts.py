"""The partitioned spouts: memory ones on §7's data, and Redis Streams ones on a real redis-server.

The emitter methods are driven directly, the way the runtime does (§4.2, §4.3): new batches with
the partition's last meta, replays with a stored meta.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import msgpack
import pytest
from redis_fixtures import free_port

from statefulbolts.connectors.redis import (
    OpaqueRedisStreamsTransactionalSpout,
    RedisStreamsTransactionalSpout,
    close_connections,
    load_streams,
)
from statefulbolts.errors import FailedException
from statefulbolts.transactional._attempt import TransactionAttempt
from statefulbolts.transactional._bolts import BatchOutputCollector
from statefulbolts.transactional._memory import (
    MemoryTransactionalSpout,
    OpaqueMemoryTransactionalSpout,
)
from statefulbolts.tuples import DEFAULT_STREAM

P0 = "cat dog chicken cat dog apple".split()
P1 = "cat dog apple banana".split()
P2 = ["cat"] * 5 + ["dog"] * 4


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


def _rows(words: list[str]) -> list[list[str]]:
    return [[w] for w in words]


def _tx(txid: int, attempt: int | None = None) -> TransactionAttempt:
    return TransactionAttempt(txid, txid if attempt is None else attempt)


def _new_batch(emitter: Any, txid: int, partitions: int, last: dict[int, Any]) -> tuple[Any, ...]:
    """One new txid over ``partitions``: emitted words per partition and the new metas."""
    words, metas = [], {}
    for p in range(partitions):
        collector = Recorder()
        meta = emitter.emit_partition_batch_new(_tx(txid), collector, p, last.get(p))
        assert all(v[0] == _tx(txid) for v in collector.emitted)
        words.append([v[1] for v in collector.emitted])
        metas[p] = msgpack.unpackb(msgpack.packb(meta))  # as the runtime stores it
    last.update(metas)
    return words, metas


def _replay(emitter: Any, txid: int, partition: int, meta: Any, attempt: int = 99) -> list[str]:
    collector = Recorder()
    emitter.emit_partition_batch(_tx(txid, attempt), collector, partition, meta)
    assert all(v[0] == _tx(txid, attempt) for v in collector.emitted)
    return [v[1] for v in collector.emitted]


def _opaque(emitter: Any, txid: int, partition: int, last: Any) -> tuple[list[str], Any]:
    collector = Recorder()
    meta = emitter.emit_partition_batch(_tx(txid), collector, partition, last)
    return [v[1] for v in collector.emitted], meta


# ----------------------------------------------------------------- memory, partitioned
@pytest.fixture
def memory() -> MemoryTransactionalSpout:
    return MemoryTransactionalSpout({0: _rows(P0), 1: _rows(P1), 2: _rows(P2)}, ["word"], 3)


def test_memory_batches_and_metas_of_the_starter_data(memory: MemoryTransactionalSpout) -> None:
    coordinator, emitter = memory.get_coordinator({}, None), memory.get_emitter({}, None)
    assert coordinator.num_partitions() == 3
    last: dict[int, Any] = {}
    batches = [_new_batch(emitter, txid, 3, last) for txid in range(1, 6)]
    words = [w for w, _ in batches]
    assert words[0] == [P0[0:3], P1[0:3], P2[0:3]]
    assert words[1] == [P0[3:6], P1[3:], P2[3:6]]
    assert words[2] == [[], [], P2[6:9]]
    assert words[3] == words[4] == [[], [], []]
    assert [sum(map(len, w)) for w in words] == [9, 7, 3, 0, 0]
    metas = [m for _, m in batches]
    assert metas[0] == {0: [0, 3], 1: [0, 3], 2: [0, 3]}
    assert metas[1] == {0: [3, 3], 1: [3, 1], 2: [3, 3]}
    assert metas[2] == {0: [6, 0], 1: [4, 0], 2: [6, 3]}
    assert metas[3] == metas[4] == {0: [6, 0], 1: [4, 0], 2: [9, 0]}


def test_memory_replay_is_exact_whatever_was_appended(memory: MemoryTransactionalSpout) -> None:
    emitter = memory.get_emitter({}, None)
    last: dict[int, Any] = {}
    _new_batch(emitter, 1, 3, last)
    first, metas = _new_batch(emitter, 2, 3, last)
    memory.partitions[1].append(["zebra"])  # type: ignore[attr-defined]
    memory.partitions[0].append(["yak"])  # type: ignore[attr-defined]
    assert [_replay(emitter, 2, p, metas[p]) for p in range(3)] == first
    assert _replay(emitter, 1, 0, [0, 3]) == P0[0:3]


def test_memory_reads_appended_rows_and_new_partitions_live(
    memory: MemoryTransactionalSpout,
) -> None:
    coordinator, emitter = memory.get_coordinator({}, None), memory.get_emitter({}, None)
    last: dict[int, Any] = {}
    for txid in (1, 2, 3):
        _new_batch(emitter, txid, 3, last)
    memory.partitions[0].extend([["a"], ["b"], ["c"], ["d"]])  # type: ignore[attr-defined]
    memory.partitions[3] = [["new"]]  # type: ignore[index]
    assert coordinator.num_partitions() == 4
    words, metas = _new_batch(emitter, 4, 4, last)
    assert words == [["a", "b", "c"], [], [], ["new"]]
    assert metas == {0: [6, 3], 1: [4, 0], 2: [9, 0], 3: [0, 1]}
    words, _ = _new_batch(emitter, 5, 4, last)
    assert words == [["d"], [], [], []]


def test_memory_replay_of_rows_that_are_gone_fails_the_batch() -> None:
    spout = MemoryTransactionalSpout([_rows(P1)], ["word"], 3)
    with pytest.raises(FailedException, match=r"rows \[3, 6\) of partition 0 .* only 4 rows"):
        _replay(spout.get_emitter({}, None), 2, 0, [3, 3])


def test_memory_spouts_name_what_is_wrong() -> None:
    with pytest.raises(ValueError, match="take_per_batch must be at least 1, got 0"):
        MemoryTransactionalSpout({0: []}, ["w"], 0)
    with pytest.raises(ValueError, match=r"row 1 of partition 0 must be a list of 1 value"):
        MemoryTransactionalSpout({0: [["a"], "b"]}, ["w"], 1)
    spout = MemoryTransactionalSpout({0: [["a"]]}, ["w"], 2)
    spout.partitions[2] = [["c"]]  # type: ignore[index]
    with pytest.raises(ValueError, match=r"numbered 0\.\.1; missing \[1\], unexpected \[2\]"):
        spout.get_coordinator({}, None).num_partitions()
    spout.partitions[1] = [["b", "extra"]]  # type: ignore[index]
    del spout.partitions[2]  # type: ignore[attr-defined]
    with pytest.raises(ValueError, match="row 0 of partition 1"):
        spout.get_emitter({}, None).emit_partition_batch_new(_tx(1), Recorder(), 1, None)
    with pytest.raises(ValueError, match=r"meta of partition 0 must be \[index, amount\]"):
        spout.get_emitter({}, None).emit_partition_batch_new(_tx(1), Recorder(), 0, {"i": 0})


# ----------------------------------------------------------------- memory, opaque
def test_opaque_memory_continues_from_the_meta_it_is_given() -> None:
    spout = OpaqueMemoryTransactionalSpout([_rows(["dog", "cat", "apple", "dog"])], ["word"], 2)
    emitter = spout.get_emitter({}, None)
    assert emitter.num_partitions() == 1
    words1, meta1 = _opaque(emitter, 1, 0, None)
    words2, meta2 = _opaque(emitter, 2, 0, meta1)
    assert (words1, meta1, words2, meta2) == (["dog", "cat"], [0, 2], ["apple", "dog"], [2, 2])
    # A replay of txid 2 after an append, from the committed meta of txid 1: a different batch
    # only if the data before the meta's end changed; here the same, and then the new row.
    spout.partitions[0].append(["emu"])  # type: ignore[attr-defined]
    assert _opaque(emitter, 2, 0, meta1) == (["apple", "dog"], [2, 2])
    assert _opaque(emitter, 3, 0, meta2) == (["emu"], [4, 1])
    assert _opaque(emitter, 4, 0, [4, 1]) == ([], [5, 0])


def test_opaque_memory_disabled_partition_emits_nothing_and_returns_none() -> None:
    spout = OpaqueMemoryTransactionalSpout({0: _rows(P0), 1: _rows(P1)}, ["word"], 3)
    emitter = spout.get_emitter({}, None)
    spout.set_disabled(1)
    assert spout.is_disabled(1) and not spout.is_disabled(0)
    assert _opaque(emitter, 1, 1, None) == ([], None)
    assert _opaque(emitter, 1, 0, None) == (P0[0:3], [0, 3])
    spout.set_disabled(1, disabled=False)  # False enables (Storm's flag was inverted, §9.12)
    assert _opaque(emitter, 2, 1, None) == (P1[0:3], [0, 3])
    spout.set_disabled(0, True)
    assert _opaque(emitter, 2, 0, [0, 3]) == ([], None)
    spout.partitions[2] = _rows(["new"])  # type: ignore[index]
    assert emitter.num_partitions() == 3
    assert _opaque(emitter, 2, 2, None) == (["new"], [0, 1])


# ----------------------------------------------------------------- Redis Streams
@pytest.fixture
def url(redis_db: Any) -> Iterator[str]:
    yield redis_db.url
    close_connections()


@pytest.fixture
def client(redis_db: Any) -> Any:
    return redis_db.client(decode_responses=True)


@pytest.fixture
def ids(url: str) -> dict[str, list[str]]:
    return load_streams(url, {"p0": P0, "p1": P1, "p2": P2}, field="word")


def _offline_url() -> str:
    return f"redis://127.0.0.1:{free_port()}/0"


@pytest.mark.redis
def test_load_streams_adds_entries_in_order(url: str, client: Any, ids: Any) -> None:
    assert {s: len(i) for s, i in ids.items()} == {"p0": 6, "p1": 4, "p2": 9}
    entries = client.xrange("p1")
    assert [e[0] for e in entries] == ids["p1"]
    assert [e[1] for e in entries] == [{"word": w} for w in P1]
    more = load_streams(url, {"p1": [{"word": "yak", "n": "2"}]})
    assert client.xrange("p1")[-1] == (more["p1"][0], {"word": "yak", "n": "2"})


@pytest.mark.redis
def test_redis_new_batches_and_metas(url: str, ids: Any) -> None:
    spout = RedisStreamsTransactionalSpout(url, ["p0", "p1", "p2", "empty"], ["word"], 3)
    assert spout.get_coordinator({}, None).num_partitions() == 4
    emitter = spout.get_emitter({}, None)
    last: dict[int, Any] = {}
    batches = [_new_batch(emitter, txid, 4, last) for txid in range(1, 5)]
    words = [w for w, _ in batches]
    assert words[0] == [P0[0:3], P1[0:3], P2[0:3], []]
    assert words[1] == [P0[3:6], P1[3:], P2[3:6], []]
    assert words[2] == [[], [], P2[6:9], []]
    assert words[3] == [[], [], [], []]
    m1, m2, m3, m4 = (m for _, m in batches)
    assert m1[0] == {"stream": "p0", "first": ids["p0"][0], "last": ids["p0"][2], "count": 3}
    assert m2[1] == {"stream": "p1", "first": ids["p1"][3], "last": ids["p1"][3], "count": 1}
    # An empty batch keeps the position; a stream never read has none.
    assert m3[0] == {"stream": "p0", "first": None, "last": ids["p0"][5], "count": 0}
    assert m4[2] == {"stream": "p2", "first": None, "last": ids["p2"][8], "count": 0}
    assert m4[3] == {"stream": "empty", "first": None, "last": None, "count": 0}
    more = load_streams(url, {"p1": ["zebra"], "empty": ["first"]}, field="word")
    words, metas = _new_batch(emitter, 5, 4, last)
    assert words == [[], ["zebra"], [], ["first"]]
    assert metas[3]["first"] == metas[3]["last"] == more["empty"][0]


@pytest.mark.redis
def test_redis_replay_is_exact(url: str, ids: Any) -> None:
    spout = RedisStreamsTransactionalSpout(url, ["p0", "p1", "p2"], ["word"], 3)
    emitter = spout.get_emitter({}, None)
    last: dict[int, Any] = {}
    _new_batch(emitter, 1, 3, last)
    first, metas = _new_batch(emitter, 2, 3, last)
    load_streams(url, {"p1": ["zebra"], "p0": ["yak"]}, field="word")
    fresh = spout.get_emitter({}, None)  # emitters may be re-created between batches
    assert [_replay(fresh, 2, p, metas[p]) for p in range(3)] == first
    empty = {"stream": "p0", "first": None, "last": ids["p0"][5], "count": 0}
    assert _replay(fresh, 3, 0, empty) == []


@pytest.mark.redis
def test_redis_replay_after_trimming_fails_naming_the_stream(
    url: str, client: Any, ids: Any
) -> None:
    spout = RedisStreamsTransactionalSpout(url, ["p0", "p1", "p2"], ["word"], 3)
    emitter = spout.get_emitter({}, None)
    last: dict[int, Any] = {}
    _, metas = _new_batch(emitter, 1, 3, last)
    client.xtrim("p0", maxlen=4, approximate=False)  # drops p0's first two entries
    with pytest.raises(FailedException) as info:
        _replay(emitter, 1, 0, metas[0])
    message = str(info.value)
    assert "stream 'p0'" in message
    assert f"{ids['p0'][0]}..{ids['p0'][2]}" in message
    assert "found 1" in message
    client.xdel("p1", ids["p1"][1])  # a deleted entry in the middle: also not exact
    with pytest.raises(FailedException, match="stream 'p1'"):
        _replay(emitter, 1, 1, metas[1])
    assert _replay(emitter, 1, 2, metas[2]) == P2[0:3]  # untouched streams still replay


@pytest.mark.redis
def test_opaque_redis_after_trimming_continues_with_what_is_there(
    url: str, client: Any, ids: Any
) -> None:
    spout = OpaqueRedisStreamsTransactionalSpout(url, ["p0"], ["word"], 3)
    emitter = spout.get_emitter({}, None)
    words1, meta1 = _opaque(emitter, 1, 0, None)
    assert words1 == P0[0:3]
    client.xtrim("p0", maxlen=1, approximate=False)  # only "apple" (the 6th entry) is left
    words2, meta2 = _opaque(emitter, 2, 0, meta1)
    assert words2 == ["apple"]
    assert meta2 == {"stream": "p0", "first": ids["p0"][5], "last": ids["p0"][5], "count": 1}
    # A replay of txid 1 from nothing also takes what is there.
    assert _opaque(emitter, 1, 0, None) == (["apple"], meta2)


@pytest.mark.redis
def test_opaque_redis_with_the_server_unreachable_returns_none(
    caplog: pytest.LogCaptureFixture,
) -> None:
    offline = _offline_url()
    spout = OpaqueRedisStreamsTransactionalSpout(offline, ["p0", "p1"], ["word"], 3, timeout=1)
    emitter = spout.get_emitter({}, None)
    assert emitter.num_partitions() == 2
    last = {"stream": "p0", "first": "1-0", "last": "1-2", "count": 3}
    with caplog.at_level(logging.WARNING, logger="statefulbolts.connectors.redis"):
        assert _opaque(emitter, 4, 0, last) == ([], None)
    assert "partition 0 unreachable" in caplog.text and offline in caplog.text
    by_pattern = OpaqueRedisStreamsTransactionalSpout(offline, "p*", ["word"], 3, timeout=1)
    assert by_pattern.get_emitter({}, None).num_partitions() == 0  # none known yet
    close_connections()


@pytest.mark.redis
def test_partitioned_redis_with_the_server_unreachable_fails_the_batch() -> None:
    offline = _offline_url()
    spout = RedisStreamsTransactionalSpout(offline, "p*", ["word"], 3, timeout=1)
    with pytest.raises(FailedException, match="starts later"):
        spout.get_coordinator({}, None).num_partitions()
    listed = RedisStreamsTransactionalSpout(offline, ["p0"], ["word"], 3, timeout=1)
    with pytest.raises(FailedException, match="txid 2 is retried"):
        listed.get_emitter({}, None).emit_partition_batch_new(_tx(2), Recorder(), 0, None)
    close_connections()


@pytest.mark.redis
def test_a_key_pattern_picks_up_new_streams_without_renumbering(url: str, client: Any) -> None:
    load_streams(url, {"words:b": ["b1"], "words:c": ["c1", "c2"]})
    client.set("words:not-a-stream", "x")
    spout = RedisStreamsTransactionalSpout(url, "words:*", ["value"], 5)
    coordinator, emitter = spout.get_coordinator({}, None), spout.get_emitter({}, None)
    assert coordinator.num_partitions() == 2
    last: dict[int, Any] = {}
    words, _ = _new_batch(emitter, 1, 2, last)
    assert words == [["b1"], ["c1", "c2"]]
    load_streams(url, {"words:a": ["a1"], "words:b": ["b2"]})  # "a" sorts first
    assert coordinator.num_partitions() == 3
    words, metas = _new_batch(emitter, 2, 3, last)
    assert words == [["b2"], [], ["a1"]]
    assert [metas[p]["stream"] for p in range(3)] == ["words:b", "words:c", "words:a"]
    assert client.lrange("statefulbolts:txstreams:words:*", 0, -1) == [
        "words:b",
        "words:c",
        "words:a",
    ]
    # Another spout object (another process, after a restart) numbers them the same way.
    again = RedisStreamsTransactionalSpout(url, "words:*", ["value"], 5)
    assert again.get_coordinator({}, None).num_partitions() == 3
    assert _replay(again.get_emitter({}, None), 2, 2, metas[2]) == ["a1"]


@pytest.mark.redis
def test_entries_without_a_field_are_skipped_and_reported_the_same_on_replay(
    url: str,
) -> None:
    load_streams(url, {"s": [{"word": "a", "n": "1"}, {"word": "b"}, {"word": "c", "n": "3"}]})
    spout = RedisStreamsTransactionalSpout(url, ["s"], ["n", "word"], 5)
    emitter = spout.get_emitter({}, None)
    collector = Recorder()
    meta = emitter.emit_partition_batch_new(_tx(1), collector, 0, None)
    assert [v[1:] for v in collector.emitted] == [["1", "a"], ["3", "c"]]
    assert meta["count"] == 3
    assert len(collector.errors) == 1 and "has no field(s) ['n']" in str(collector.errors[0])
    replayed = Recorder()
    emitter.emit_partition_batch(_tx(1, 2), replayed, 0, meta)
    assert [v[1:] for v in replayed.emitted] == [["1", "a"], ["3", "c"]]
    assert len(replayed.errors) == 1


@pytest.mark.redis
def test_a_moved_partition_list_is_refused(url: str, ids: Any) -> None:
    emitter = RedisStreamsTransactionalSpout(url, ["p1", "p0"], ["word"], 3).get_emitter({}, None)
    last = {"stream": "p0", "first": ids["p0"][0], "last": ids["p0"][2], "count": 3}
    with pytest.raises(ValueError, match="partition 0 is stream 'p1' now.*'p0'"):
        emitter.emit_partition_batch_new(_tx(2), Recorder(), 0, last)


@pytest.mark.redis
def test_one_connection_per_process_and_url(redis_db: Any, client: Any, ids: Any) -> None:
    close_connections()
    before = int(client.info("stats")["total_connections_received"])
    for txid in range(1, 21):
        spout = RedisStreamsTransactionalSpout(redis_db.url, ["p2"], ["word"], 1)
        emitter = spout.get_emitter({}, None)
        emitter.emit_partition_batch_new(_tx(txid), Recorder(), 0, None)
    after = int(client.info("stats")["total_connections_received"])
    assert after - before == 1
    close_connections()


def test_redis_spouts_name_what_is_wrong() -> None:
    url = "redis://127.0.0.1:6379/0"
    with pytest.raises(ValueError, match="partitions must be a key pattern or a non-empty list"):
        RedisStreamsTransactionalSpout(url, [], ["w"], 1)
    with pytest.raises(ValueError, match="listed twice"):
        RedisStreamsTransactionalSpout(url, ["a", "a"], ["w"], 1)
    with pytest.raises(ValueError, match="take_per_batch must be at least 1, got 0"):
        OpaqueRedisStreamsTransactionalSpout(url, "a*", ["w"], 0)
    with pytest.raises(ValueError, match="no partition 2 among the 2 streams"):
        RedisStreamsTransactionalSpout(url, ["a", "b"], ["w"], 1).get_emitter(
            {}, None
        ).emit_partition_batch_new(_tx(1), Recorder(), 2, None)
    emitter = RedisStreamsTransactionalSpout(url, ["a"], ["w"], 1).get_emitter({}, None)
    with pytest.raises(ValueError, match=r"meta of partition 0 must be a dict"):
        emitter.emit_partition_batch(_tx(1), Recorder(), 0, [0, 3])
