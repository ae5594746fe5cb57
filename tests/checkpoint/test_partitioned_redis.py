"""``PartitionedRedisStreamSpout`` on a real redis-server: exact counts through kills and rescales.

The word count of ``partitioned_topologies`` (``split`` -> stateful ``count``) reads Redis
streams, each a partition, on the inline engine. The verdict is the committed state of
``count`` against a ``Counter`` over every entry of the streams, and the positions the driver
holds against each stream's last entry id: a transaction read twice, or lost, shows in both.
The state is in the same redis-server (durable across a driver's death, which is simulated in
process by ``partitioned_topologies``' ``DriverDies``). The kill test loops over the seeds of
``STATEFULBOLTS_PARTITIONED_SEEDS`` (default ``"0-3"``).
"""

from __future__ import annotations

from typing import Any

import pytest
import topologies as topo
from partitioned_topologies import (
    POINTS,
    DriverDies,
    add_entries,
    dies,
    fill_streams,
    finish,
    seeds,
    start_driver,
    stream_conf,
    stream_counts,
    stream_word_count,
)
from redis_fixtures import RedisServer

from providers import StateBackendRefusedError
from statefulbolts import PartitionedRedisStreamSpout
from statefulbolts.errors import ConfigError, TopologyError

STREAMS = ["wc:0", "wc:1", "wc:2"]


def test_the_word_count_over_three_streams_is_exact_while_entries_are_appended(
    redis_db: RedisServer,
) -> None:
    client = redis_db.client()
    fill_streams(client, STREAMS, 15)
    appended: list[int] = []

    def grow(info: Any) -> None:
        # After the first commit, and again after the third: more entries on streams read from.
        if str(info.action) == "COMMIT" and info.txid in (1, 3) and info.txid not in appended:
            appended.append(info.txid)
            add_entries(client, "wc:1", 70 + info.txid, 6)
            add_entries(client, "wc:2", 80 + info.txid, 4)

    spout = PartitionedRedisStreamSpout(STREAMS)
    runner = start_driver(
        topo.new_key("rwc"), stream_conf(redis_db), stream_word_count(spout), on_transaction=grow
    )
    counts, positions = finish(runner, "streams")
    assert appended == [1, 3]
    want, last = stream_counts(client, STREAMS)
    assert counts == want
    assert positions == last


@pytest.mark.parametrize("seed", seeds())
def test_a_driver_killed_at_each_point_restarts_exactly(seed: int, redis_db: RedisServer) -> None:
    # 45 entries, 8 a transaction: PREPAREs 1-6. The seed picks the point and the txid.
    point, txid = POINTS[seed % 4], 1 + (seed // 4) % 5
    client = redis_db.client()
    fill_streams(client, STREAMS, 15, seed=seed)
    conf, name = stream_conf(redis_db), topo.new_key("rkill")
    spout = PartitionedRedisStreamSpout(STREAMS)
    dies(start_driver(name, conf, stream_word_count(spout), faults=DriverDies(point, txid)))
    counts, positions = finish(start_driver(name, conf, stream_word_count(spout)), "streams")
    want, last = stream_counts(client, STREAMS)
    assert counts == want
    assert positions == last


def test_the_spout_parallelism_changes_across_restarts_and_a_new_stream_is_picked_up(
    redis_db: RedisServer,
) -> None:
    # The pattern from the config: 1 task, killed after COMMITTED(2); 3 tasks, killed after
    # COMMITTED(4); then 2 tasks, with a new stream and more entries added while no driver ran.
    client = redis_db.client()
    streams = [f"wc:{i}" for i in range(4)]
    fill_streams(client, streams, 15)
    client.set("wc:not-a-stream", "left out: the pattern lists streams only")
    conf, name = {**stream_conf(redis_db), "redis.stream.pattern": "wc:*"}, topo.new_key("rscale")
    spout = PartitionedRedisStreamSpout()
    dies(start_driver(name, conf, stream_word_count(spout, 1), faults=DriverDies(POINTS[3], 2)))
    dies(start_driver(name, conf, stream_word_count(spout, 3), faults=DriverDies(POINTS[3], 4)))
    add_entries(client, "wc:9", 9, 11)
    add_entries(client, "wc:0", 10, 3)
    counts, positions = finish(start_driver(name, conf, stream_word_count(spout, 2)), "streams")
    want, last = stream_counts(client, [*streams, "wc:9"])
    assert counts == want
    assert positions == last


def test_a_key_that_is_not_a_stream_stops_the_topology_naming_it(redis_db: RedisServer) -> None:
    client = redis_db.client()
    fill_streams(client, ["wc:0"], 5)
    client.set("wc:plain", "a string, not a stream")
    spout = PartitionedRedisStreamSpout(["wc:0", "wc:plain"])
    runner = start_driver(topo.new_key("rwrong"), stream_conf(redis_db), stream_word_count(spout))
    try:
        # The driver meets it when it lists where each stream ends, before the PREPARE's job.
        with pytest.raises(StateBackendRefusedError) as failed:
            runner.await_idle(60)
    finally:
        runner.kill()
    text = str(failed.value)
    assert "stream 'wc:plain'" in text
    assert "key 'wc:plain' holds a string, not a stream" in text
    assert "list only stream keys" in text


# ------------------------------------------------------------------ the reader, directly
def _read(spout: PartitionedRedisStreamSpout, stream: str, position: Any, n: int) -> Any:
    reader = spout.open_reader({}, None, stream, position)  # type: ignore[arg-type]
    try:
        return reader.read(n)
    finally:
        reader.close()


def test_a_position_whose_entry_was_trimmed_reads_on_from_the_next(redis_db: RedisServer) -> None:
    client = redis_db.client()
    ids = [client.xadd("s", {"sentence": f"e{i}"}).decode() for i in range(6)]
    spout = PartitionedRedisStreamSpout("s", redis_url=redis_db.url)
    first = _read(spout, "s", None, 3)
    assert first.records == [["e0"], ["e1"], ["e2"]] and first.position == ids[2]
    # The writer trims the stream past the position, then deletes the entry after it.
    client.xtrim("s", minid=ids[3], approximate=False)
    client.xdel("s", ids[3])
    assert client.xrange("s", ids[2], ids[2]) == []
    assert spout.has_more({}, "s", first.position)
    rest = _read(spout, "s", first.position, 10)
    assert rest.records == [["e4"], ["e5"]] and rest.position == ids[5]
    assert not spout.has_more({}, "s", rest.position)
    # The last entry deleted too: the position is after every entry there is.
    client.xdel("s", ids[5])
    assert not spout.has_more({}, "s", rest.position)
    assert _read(spout, "s", rest.position, 10) == (([]), ids[5], "default")


def test_start_dollar_reads_only_entries_added_after_the_first_read(redis_db: RedisServer) -> None:
    client = redis_db.client()
    old = client.xadd("s", {"sentence": "old"}).decode()
    spout = PartitionedRedisStreamSpout("s", redis_url=redis_db.url, start="$")
    assert spout.has_more({}, "s", None)  # a stream never read: one read pins its end
    pinned = _read(spout, "s", None, 10)
    assert pinned.records == [] and pinned.position == old
    client.xadd("s", {"sentence": "new"})
    assert _read(spout, "s", pinned.position, 10).records == [["new"]]
    assert _read(spout, "s", None, 10).position != old  # an unread stream pins its end now


def test_settings_come_from_the_config_and_name_what_is_missing() -> None:
    spout = PartitionedRedisStreamSpout()
    assert spout.partitions({"redis.stream.keys": "b, a,c"}) == ["a", "b", "c"]
    with pytest.raises(ConfigError, match=r"no streams; pass streams= or pattern=.*redis\.stream"):
        spout.partitions({})
    with pytest.raises(ConfigError, match="both 'redis.stream.keys' and 'redis.stream.pattern'"):
        spout.partitions({"redis.stream.keys": ["a"], "redis.stream.pattern": "a*"})
    with pytest.raises(ValueError, match="start is 'later'"):
        PartitionedRedisStreamSpout(["a"], start="later")


def test_a_reader_reads_no_entry_past_the_end_the_driver_listed(redis_db: RedisServer) -> None:
    task: Any = None  # a reader outside a job: no task context
    client = redis_db.client()
    ids = [client.xadd("s", {"sentence": f"e{i}"}).decode() for i in range(3)]
    spout = PartitionedRedisStreamSpout(["s", "none"], redis_url=redis_db.url)
    ends = spout.ends({}, ["s", "none"])
    assert ends == {"s": ids[2], "none": "0-0"}
    later = client.xadd("s", {"sentence": "later"}).decode()  # after the listing
    # Any attempt of the task reads up to the listed end, however many entries came since.
    reader = spout.open_reader({}, task, "s", ids[0], end=ends["s"])
    assert reader.read(10) == ([["e1"], ["e2"]], ids[2], "default")
    assert spout.open_reader({}, task, "none", None, end="0-0").read(10).records == []
    # start="$" pins the listed end, not the stream's end when the task runs.
    dollar = PartitionedRedisStreamSpout("s", redis_url=redis_db.url, start="$")
    pinned = dollar.open_reader({}, task, "s", None, end=ends["s"]).read(10)
    assert pinned == ([], ids[2], "default")
    assert _read(dollar, "s", ids[2], 10) == ([["later"]], later, "default")
    with pytest.raises(TopologyError, match=r"end of stream 's' is 'last', expected an entry id"):
        spout.open_reader({}, task, "s", None, end="last")
