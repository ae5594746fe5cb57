"""``RedisStreamSpout`` against a real redis-server: delivery, XACK, replay, crash re-delivery."""

from __future__ import annotations

import json
import time

import pytest
from recovery_topologies import CountWords

from statefulbolts import Fields, TopologyBuilder, TopologyContext
from statefulbolts.connectors.redis import RedisStreamSpout, load_stream, main, pending_count
from statefulbolts.errors import ConfigError
from statefulbolts.testing import RecordingSpoutCollector

pytestmark = pytest.mark.redis

STREAM = "sentences"


def _context(spout: RedisStreamSpout, task: int = 0, parallelism: int = 1) -> TopologyContext:
    builder = TopologyBuilder()
    builder.set_spout("reader", spout, parallelism)
    builder.set_bolt("count", CountWords(), 1).shuffle_grouping("reader")
    return TopologyContext(builder.create_topology(), "wc", "reader", task)


def _open(spout: RedisStreamSpout, conf: dict | None = None, task: int = 0, parallelism: int = 1):
    collector = RecordingSpoutCollector()
    spout.open(conf or {}, _context(spout, task, parallelism), collector)
    return collector


def _drain(spout: RedisStreamSpout, collector: RecordingSpoutCollector, calls: int = 200):
    for _ in range(calls):
        spout.next_tuple()
    return collector.take()


@pytest.fixture
def url(redis_db):
    return redis_db.url


@pytest.fixture
def client(redis_db):
    return redis_db.client(decode_responses=True)


def test_load_stream_adds_every_line_in_order(url, client):
    assert load_stream(url, STREAM, (f"line {i}" for i in range(2500)), batch=1000) == 2500
    entries = client.xrange(STREAM)
    assert [e[1] for e in entries[:2]] == [{"sentence": "line 0"}, {"sentence": "line 1"}]
    assert len(entries) == 2500 and entries[-1][1] == {"sentence": "line 2499"}


def test_emits_entries_with_their_ids_and_creates_the_group(url, client):
    ids = [client.xadd(STREAM, {"sentence": f"s{i}", "other": "x"}) for i in range(5)]
    spout = RedisStreamSpout(STREAM, redis_url=url, batch=2)
    collector = _open(spout)
    emitted = _drain(spout, collector)
    assert [e.values for e in emitted] == [[f"s{i}"] for i in range(5)]
    assert [e.message_id for e in emitted] == ids
    group = client.xinfo_groups(STREAM)[0]
    assert group["name"] == "wc" and group["pending"] == 5  # default group: the topology name
    consumers = client.xinfo_consumers(STREAM, "wc")
    assert [c["name"] for c in consumers] == ["wc/reader-0"]
    spout.close()


def test_missing_stream_is_created_empty_and_the_spout_idles(url, client):
    spout = RedisStreamSpout(STREAM, redis_url=url, poll_interval_ms=10_000)
    collector = _open(spout)
    assert _drain(spout, collector, 50) == []
    assert client.exists(STREAM) == 1  # MKSTREAM
    monitor_before = client.info("commandstats").get("cmdstat_xreadgroup", {}).get("calls", 0)
    assert _drain(spout, collector, 500) == []
    calls = client.info("commandstats").get("cmdstat_xreadgroup", {}).get("calls", 0)
    assert calls == monitor_before  # no polling while the poll interval runs
    spout.close()


def test_ack_sends_xack_on_the_next_call_and_close(url, client):
    load_stream(url, STREAM, [f"s{i}" for i in range(4)])
    spout = RedisStreamSpout(STREAM, redis_url=url)
    collector = _open(spout)
    emitted = _drain(spout, collector)
    spout.ack(emitted[0].message_id)
    spout.ack(emitted[1].message_id)
    assert pending_count(url, STREAM, "wc") == 4  # acks are batched until the next call
    spout.next_tuple()
    assert pending_count(url, STREAM, "wc") == 2
    pending = client.xpending_range(STREAM, "wc", "-", "+", 10)
    assert [p["message_id"] for p in pending] == [e.message_id for e in emitted[2:]]
    spout.ack(emitted[2].message_id)
    spout.close()
    assert pending_count(url, STREAM, "wc") == 1


def test_fail_replays_the_same_entry_once(url):
    load_stream(url, STREAM, ["a", "b", "c"])
    spout = RedisStreamSpout(STREAM, redis_url=url)
    collector = _open(spout)
    first = _drain(spout, collector)
    spout.fail(first[1].message_id)
    spout.fail(first[1].message_id)  # a second fail before the replay: still one replay
    replayed = _drain(spout, collector)
    assert [(e.values, e.message_id) for e in replayed] == [(["b"], first[1].message_id)]
    spout.ack(first[1].message_id)
    spout.fail(first[1].message_id)  # acked: nothing to replay
    assert _drain(spout, collector) == []
    assert spout.replayed == 1
    spout.close()


def test_a_new_instance_with_the_same_consumer_gets_the_pending_entries_back(url, client):
    load_stream(url, STREAM, [f"s{i}" for i in range(10)])
    all_ids = [e[0] for e in client.xrange(STREAM)]
    crashed = RedisStreamSpout(STREAM, redis_url=url, batch=3)
    collector = _open(crashed, {"topology.max.spout.pending": 4})
    delivered = _drain(crashed, collector, 5)
    # Reads of 3 and then 1: never more read (delivered) than the pending cap lets it emit.
    assert [e.values[0] for e in delivered] == ["s0", "s1", "s2", "s3"]
    assert pending_count(url, STREAM, "wc") == 4
    crashed.ack(delivered[0].message_id)  # s0 and s1: their transaction committed
    crashed.ack(delivered[1].message_id)
    crashed.deactivate()  # sends the queued XACKs
    assert pending_count(url, STREAM, "wc") == 2
    # The crash: the instance is dropped without close(); s2 and s3 stay pending for its consumer.

    restarted = RedisStreamSpout(STREAM, redis_url=url, batch=3)
    collector = _open(restarted)
    again = _drain(restarted, collector)
    # The consumer's pending entries first, in id order, then the rest of the stream; nothing
    # twice, nothing acknowledged again.
    assert [e.message_id for e in again] == all_ids[2:]
    assert restarted.redelivered == 2
    for e in again:
        restarted.ack(e.message_id)
    restarted.close()
    assert pending_count(url, STREAM, "wc") == 0


def test_the_pending_cap_counts_replays_as_in_flight(url):
    load_stream(url, STREAM, [f"s{i}" for i in range(6)])
    spout = RedisStreamSpout(STREAM, redis_url=url, batch=10)
    collector = _open(spout, {"topology.max.spout.pending": 2})
    first = _drain(spout, collector, 3)
    assert [e.values[0] for e in first] == ["s0", "s1"]
    spout.fail(first[0].message_id)  # settled in the driver: room for its replay only
    assert [e.values[0] for e in _drain(spout, collector, 3)] == ["s0"]
    spout.ack(first[0].message_id)
    spout.ack(first[1].message_id)
    assert [e.values[0] for e in _drain(spout, collector, 1)] == ["s2", "s3"]
    spout.close()


def test_a_different_consumer_does_not_get_them_without_claim(url):
    load_stream(url, STREAM, ["a", "b"])
    first = RedisStreamSpout(STREAM, redis_url=url)
    _drain(first, _open(first))
    other = RedisStreamSpout(STREAM, redis_url=url, consumer="someone-else")
    assert _drain(other, _open(other)) == []
    claimer = RedisStreamSpout(STREAM, redis_url=url, consumer="claimer", claim_min_idle_ms=0)
    claimed = _drain(claimer, _open(claimer))
    assert [e.values for e in claimed] == [["a"], ["b"]]
    for spout in (first, other, claimer):
        spout.close()


def test_two_tasks_share_the_stream_without_overlap(url):
    load_stream(url, STREAM, [f"s{i}" for i in range(40)])
    a, b = (
        RedisStreamSpout(STREAM, redis_url=url, batch=5),
        RedisStreamSpout(STREAM, redis_url=url, batch=5),
    )
    ca, cb = _open(a, task=0, parallelism=2), _open(b, task=1, parallelism=2)
    got_a: list = []
    got_b: list = []
    for _ in range(30):
        got_a += _drain(a, ca, 1)
        got_b += _drain(b, cb, 1)
    assert got_a and got_b
    assert a.consumer == "wc/reader-0" and b.consumer == "wc/reader-1"
    values = sorted(v for e in got_a + got_b for v in e.values)
    assert values == sorted(f"s{i}" for i in range(40))
    a.close()
    b.close()


def test_fields_and_names_come_from_the_config(url, client):
    client.xadd("events", {"user": "ann", "n": "3"})
    client.xadd("events", {"user": "bob"})  # lacks "n": acked, skipped, reported
    spout = RedisStreamSpout(fields=("user", "n"), output_fields=("who", "count"))
    conf = {"redis.stream.url": url, "redis.stream.key": "events", "redis.stream.group": "g"}
    collector = _open(spout, conf)
    emitted = _drain(spout, collector)
    assert [e.values for e in emitted] == [["ann", "3"]]
    assert len(collector.errors) == 1 and "no field(s) ['n']" in str(collector.errors[0])
    spout.next_tuple()
    assert pending_count(url, "events", "g") == 1  # only ann's entry is pending
    declarer_fields = _context(spout).component_output_fields("reader")
    assert declarer_fields == Fields(["who", "count"])
    spout.close()


def test_deleted_pending_entries_are_acked_and_skipped(url, client):
    load_stream(url, STREAM, ["a", "b"])
    first = RedisStreamSpout(STREAM, redis_url=url)
    emitted = _drain(first, _open(first))
    client.xdel(STREAM, emitted[0].message_id)
    again = RedisStreamSpout(STREAM, redis_url=url)
    collector = _open(again)
    assert [e.values for e in _drain(again, collector)] == [["b"]]
    assert pending_count(url, STREAM, "wc") == 1
    again.close()


def test_bad_arguments_and_missing_stream_fail_clearly(url):
    with pytest.raises(ValueError, match="batch must be at least 1"):
        RedisStreamSpout(STREAM, batch=0)
    with pytest.raises(ValueError, match="one name per entry field"):
        RedisStreamSpout(STREAM, fields=("a", "b"), output_fields=("x",))
    with pytest.raises(ValueError, match="not both"):
        RedisStreamSpout(STREAM, redis_url=url, host="127.0.0.1")
    with pytest.raises(ConfigError, match="redis.stream.key"):
        _open(RedisStreamSpout(redis_url=url))


def test_the_spout_pickles_without_its_connection(url):
    import pickle

    spout = RedisStreamSpout(STREAM, redis_url=url)
    _open(spout)
    copy = pickle.loads(pickle.dumps(spout))
    assert copy._client is None and copy.stream == STREAM
    spout.close()


def test_command_line_load_and_info(url, tmp_path, capsys):
    lines = tmp_path / "lines.txt"
    lines.write_text("one two\nthree\n", encoding="utf-8")
    assert main(["load", "--url", url, "--stream", STREAM, str(lines)]) == 0
    assert json.loads(capsys.readouterr().out) == {"stream": STREAM, "added": 2}
    spout = RedisStreamSpout(STREAM, redis_url=url)
    _drain(spout, _open(spout))
    assert main(["info", "--url", url, "--stream", STREAM]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["length"] == 2 and info["groups"][0]["pending"] == 2
    spout.close()


def test_poll_interval_bounds_how_soon_new_entries_are_seen(url):
    spout = RedisStreamSpout(STREAM, redis_url=url, poll_interval_ms=100)
    collector = _open(spout)
    assert _drain(spout, collector, 5) == []
    load_stream(url, STREAM, ["late"])
    deadline = time.monotonic() + 2
    got: list = []
    while not got and time.monotonic() < deadline:
        got = _drain(spout, collector, 1)
    assert [e.values for e in got] == [["late"]]
    spout.close()
