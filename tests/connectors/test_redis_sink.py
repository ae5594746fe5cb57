"""``RedisSink`` against a real redis-server: its record kinds, its all-or-nothing script, and
the faults a publish meets (a lost reply, a flushed script cache, a server away, a key of
another type, a cluster's slots).

The contract every sink keeps is in ``test_sink_contract``; this file is what is Redis's own.
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest
from redis_fixtures import single_node_cluster

from providers import StateBackendError
from statefulbolts.connectors.redis import (
    SINK_MARKER_KEY,
    SINK_PREFIX_KEY,
    SINK_URL_KEY,
    HIncrBy,
    HSet,
    RedisSink,
    RedisSinkRefusedError,
    SetValue,
    XAdd,
    ZAdd,
)
from statefulbolts.connectors.sinks import (
    Lane,
    SinkConfigError,
    SinkMarkerError,
    SinkStageError,
    StagedBatch,
)
from statefulbolts.testing import make_tuple

CONF: dict[str, Any] = {"topology.name": "redis-sink"}
LANE = Lane("redis-sink", "publish", 0, 1)


def every_kind(tuple_: Any) -> list[Any]:
    word, n = tuple_.values
    return [
        HSet("last", word, n),
        HIncrBy("counts", word, n),
        ZAdd("ranks", word, n),
        XAdd("updates", {"word": word, "n": n}),
        SetValue(f"word:{word}", n),
    ]


def counts(tuple_: Any) -> HIncrBy:
    word, n = tuple_.values
    return HIncrBy("counts", word, n)


def _sink(server: Any, mapper: Any = every_kind, **kwargs: Any) -> RedisSink:
    sink = RedisSink(mapper, url=server.url, **kwargs)
    sink.open(CONF, None)  # type: ignore[arg-type]
    return sink


def _batch(sink: RedisSink, txid: int, *rows: tuple[str, int]) -> StagedBatch:
    return StagedBatch(txid, [sink.stage(make_tuple(list(r), fields=["word", "n"])) for r in rows])


# ------------------------------------------------------------------ records (no server)
def test_each_record_becomes_its_command_serialized_at_stage() -> None:
    sink = RedisSink(every_kind)
    assert sink.stage(make_tuple(["storm", 2], fields=["word", "n"])) == [
        ["H", b"last", b"storm", b"2"],
        ["I", b"counts", b"storm", 2],
        ["Z", b"ranks", b"storm", 2.0],
        ["X", b"updates", [b"word", b"storm", b"n", b"2"]],
        ["S", b"word:storm", b"2"],
    ]
    assert RedisSink(lambda t: None).stage(make_tuple(["x"])) is None
    as_json = RedisSink(lambda t: SetValue("k", {"a": [1]}), value_serializer="json")
    assert as_json.stage(make_tuple(["x"])) == [["S", b"k", b'{"a":[1]}']]


@pytest.mark.parametrize(
    ("made", "match"),
    [
        ("not a record", "not a record"),
        (SetValue("k", {"a": 1}), "give the sink value_serializer='json'"),
        (SetValue("k", float("nan")), "finite number"),
        (HIncrBy("k", "f", 1.5), "amount must be an int"),
        (HIncrBy("k", "f", True), "amount must be an int"),
        (HIncrBy("k", "f", 2**63), "beyond a 64-bit integer"),
        (ZAdd("k", "m", float("nan")), "score must be a number"),
        (XAdd("k", {}), "non-empty mapping"),
        (HSet(None, "f", "v"), "the key must be a str, bytes or int"),
    ],
)
def test_a_record_redis_cannot_take_is_refused_at_stage_naming_why(made: Any, match: str) -> None:
    with pytest.raises(SinkStageError, match=match):
        RedisSink(lambda t: made).stage(make_tuple(["x"]))


def test_the_sink_pickles_without_its_client_and_names_no_password(redis_db: Any) -> None:
    sink = _sink(redis_db)
    sink.published(LANE)  # connects
    copy = pickle.loads(pickle.dumps(sink))
    assert copy._client is None and copy._settings is None
    secret = RedisSink(counts, url="redis://:s3cret@10.0.0.5:6380/1")
    assert secret.name == "Redis at 10.0.0.5:6380"
    assert "s3cret" not in repr(secret) + secret.name


# ------------------------------------------------------------------ publish
def test_a_publish_runs_every_record_kind_and_a_replay_runs_none(redis_db: Any) -> None:
    sink = _sink(redis_db)
    client = redis_db.client()
    batches = [_batch(sink, 1, ("a", 2), ("b", 1)), _batch(sink, 2, ("a", 3))]
    result = sink.publish(LANE, 2, batches, 5)
    assert (result.published, result.records, result.marker_before) == ((1, 2), 15, None)
    again = sink.publish(LANE, 2, batches, 5)  # the COMMIT run again: HINCRBY not twice
    assert (again.published, again.records, again.marker_before) == ((), 0, 2)
    assert client.hgetall("counts") == {b"a": b"5", b"b": b"1"}
    assert client.hgetall("last") == {b"a": b"3", b"b": b"1"}
    assert client.zrange("ranks", 0, -1, withscores=True) == [(b"b", 1.0), (b"a", 3.0)]
    assert client.get("word:a") == b"3"
    entries = [e for _, e in client.xrange("updates")]
    assert entries == [
        {b"word": b"a", b"n": b"2", b"statefulbolts.txid": b"1"},
        {b"word": b"b", b"n": b"1", b"statefulbolts.txid": b"1"},
        {b"word": b"a", b"n": b"3", b"statefulbolts.txid": b"2"},
    ]
    assert client.hgetall("statefulbolts:sink:redis-sink:publish") == {
        b"redis-sink.publish.0of1": b"2",
        b"redis-sink.publish.0of1:epoch": b"5",
    }
    assert sorted(client.keys()) == sorted(
        [b"counts", b"last", b"ranks", b"updates", b"word:a", b"word:b"]
        + [b"statefulbolts:sink:redis-sink:publish"]
    )


def test_a_lost_reply_of_a_script_that_ran_publishes_nothing_twice(redis_db: Any) -> None:
    """The script ran, its reply was lost (a dropped connection): the retry finds the marker."""
    import redis

    class ReplyLost(RedisSink):
        def _run(self, keys: Any, args: Any) -> Any:
            super()._run(keys, args)
            raise redis.exceptions.ConnectionError("injected: the connection dropped")

    lost = ReplyLost(counts, url=redis_db.url)
    lost.open(CONF, None)  # type: ignore[arg-type]
    batches = [_batch(lost, 1, ("a", 1), ("a", 1))]
    with pytest.raises(StateBackendError, match="injected"):
        lost.publish(LANE, 1, batches, None)
    retried = _sink(redis_db, counts).publish(LANE, 1, batches, None)
    assert (retried.published, retried.marker_before) == ((), 1)
    assert redis_db.client().hget("counts", "a") == b"2"


def test_a_flushed_script_cache_loads_the_script_again(redis_db: Any) -> None:
    sink = _sink(redis_db, counts)
    sink.publish(LANE, 1, [_batch(sink, 1, ("a", 1))], None)
    redis_db.client().script_flush()  # a restarted server: EVALSHA answers NOSCRIPT
    assert sink.publish(LANE, 2, [_batch(sink, 2, ("a", 1))], None).published == (2,)
    assert redis_db.client().hget("counts", "a") == b"2"


@pytest.mark.parametrize(
    ("before", "mapper", "match"),
    [
        (lambda c: c.set("counts", "x"), counts, "key 'counts': HINCRBY needs a hash, .* string"),
        (lambda c: c.hset("counts", "a", "x"), counts, "HINCRBY of field a, which holds no int"),
        (
            lambda c: c.hset("counts", "a", 2**62 + 2**61),
            counts,
            "HINCRBY of field a would pass 64 bits",
        ),
        (lambda c: c.lpush("ranks", "x"), lambda t: ZAdd("ranks", "m", 1), "ZADD needs a zset"),
        (lambda c: c.set("updates", "x"), lambda t: XAdd("updates", {"f": 1}), "XADD needs a st"),
    ],
)
def test_a_write_that_would_fail_is_refused_before_any_write_of_the_publish(
    redis_db: Any, before: Any, mapper: Any, match: str
) -> None:
    client = redis_db.client()
    before(client)
    snapshot = {k: client.dump(k) for k in client.keys()}

    def first_a_good_write_then_the_bad(tuple_: Any) -> list[Any]:
        return [HSet("good", "f", "v"), mapper(tuple_)]

    sink = _sink(redis_db, first_a_good_write_then_the_bad)
    batch = _batch(sink, 1, ("a", 2**62))
    with pytest.raises(RedisSinkRefusedError, match=match):
        sink.publish(LANE, 1, [batch], None)
    assert {k: client.dump(k) for k in client.keys()} == snapshot  # nothing written, no marker
    assert sink.published(LANE) is None


def test_the_checks_follow_the_writes_before_them_in_one_publish(redis_db: Any) -> None:
    """A key set as a string and then used as a hash in one publish: refused, nothing written."""
    sink = _sink(redis_db, lambda t: [SetValue("k", "v"), HSet("k", "f", "v")])
    with pytest.raises(RedisSinkRefusedError, match="key 'k': HSET needs a hash"):
        sink.publish(LANE, 1, [StagedBatch(1, [sink.stage(make_tuple(["x"]))])], None)
    assert redis_db.client().keys() == []
    ok = _sink(redis_db, lambda t: [HSet("h", "f", "7"), HIncrBy("h", "f", 1)])
    ok.publish(LANE, 1, [StagedBatch(1, [ok.stage(make_tuple(["x"]))])], None)
    assert redis_db.client().hget("h", "f") == b"8"


def test_an_outage_is_a_state_backend_error_naming_the_server(redis_server_factory: Any) -> None:
    server = redis_server_factory()
    sink = _sink(server, counts)
    sink.publish(LANE, 1, [_batch(sink, 1, ("a", 1))], None)
    server.stop()
    with pytest.raises(StateBackendError, match=rf"127\.0\.0\.1:{server.port}"):
        sink.publish(LANE, 2, [_batch(sink, 2, ("a", 1))], None)
    server.start(server.port)  # the outage ends: the retry publishes (no persistence: from 0)
    assert sink.publish(LANE, 2, [_batch(sink, 2, ("a", 1))], None).published == (2,)


def test_a_marker_field_that_holds_no_txid_is_named(redis_db: Any) -> None:
    redis_db.client().hset("statefulbolts:sink:redis-sink:publish", LANE.qualified(), "oops")
    with pytest.raises(SinkMarkerError, match=r"holds 'oops', not a txid.*marker_key"):
        _sink(redis_db).published(LANE)


def test_lane_markers_lists_every_lane_of_the_component(redis_db: Any) -> None:
    sink = _sink(redis_db, counts, marker_key="shared-markers")
    for task, txid in ((0, 3), (1, 4)):
        lane = Lane("redis-sink", "publish", task, 2)
        sink.publish(lane, txid, [_batch(sink, txid, ("a", 1))], None)
    other = Lane("redis-sink", "other", 0, 1)
    sink.publish(other, 9, [_batch(sink, 9, ("a", 1))], None)
    assert sink.lane_markers(CONF, "redis-sink", "publish") == {"0of2": 3, "1of2": 4}
    assert sink.lane_markers(CONF, "redis-sink", "other") == {"0of1": 9}


# ------------------------------------------------------------------ settings
def test_check_config_takes_a_server_that_loads_the_script(redis_db: Any) -> None:
    RedisSink(counts).check_config({**CONF, SINK_URL_KEY: redis_db.url})
    assert redis_db.client().script_exists(_sha())[0]


def _sha() -> str:
    import hashlib

    from statefulbolts.connectors.redis import PUBLISH

    return hashlib.sha1(PUBLISH.encode()).hexdigest()


def test_check_config_refuses_what_cannot_work_naming_it() -> None:
    from redis_fixtures import free_port

    port = free_port()
    with pytest.raises(SinkConfigError, match=rf"Redis at 127\.0\.0\.1:{port} did not take"):
        RedisSink(counts, url=f"redis://127.0.0.1:{port}/0").check_config(CONF)
    with pytest.raises(SinkConfigError, match=r"config 'sink\.redis\.marker\.key'"):
        RedisSink(counts).check_config({**CONF, SINK_MARKER_KEY: 5})
    with pytest.raises(SinkConfigError, match="RedisSink"):
        RedisSink(counts, url="http://nowhere").check_config(CONF)


def test_on_a_cluster_keys_must_share_the_marker_key_s_slot(redis_server_factory: Any) -> None:
    node = single_node_cluster(redis_server_factory)
    spread = _sink(node, counts)
    with pytest.raises(SinkConfigError, match=r"key 'counts' is in cluster slot \d+, the marker"):
        spread.publish(LANE, 1, [_batch(spread, 1, ("a", 1))], None)

    def tagged(tuple_: Any) -> list[Any]:
        word, n = tuple_.values
        return [HIncrBy("{wc}:counts", word, n), XAdd("{wc}:updates", {"word": word})]

    sink = _sink(node, tagged, marker_key="{wc}:markers")
    assert sink.publish(LANE, 1, [_batch(sink, 1, ("a", 2))], None).published == (1,)
    assert node.client().hget("{wc}:counts", "a") == b"2"
    assert sink.published(LANE) == 1
    prefixed = _sink(node, counts, key_prefix="{p}:")  # one tag for the records and the marker
    assert prefixed.publish(LANE, 1, [_batch(prefixed, 1, ("a", 3))], None).published == (1,)
    assert node.client().hget("{p}:counts", "a") == b"3"
    assert node.client().hget("{p}:statefulbolts:sink:redis-sink:publish", LANE.qualified()) == b"1"


def test_a_key_prefix_from_the_config_goes_before_every_key(redis_db: Any) -> None:
    sink = RedisSink(counts, url=redis_db.url)
    sink.open({**CONF, SINK_PREFIX_KEY: "run7:"}, None)  # type: ignore[arg-type]
    sink.publish(LANE, 1, [_batch(sink, 1, ("a", 1))], None)
    sink.write([sink.stage(make_tuple(["b", 1], fields=["word", "n"]))])
    assert sorted(redis_db.client().keys()) == [
        b"run7:counts",
        b"run7:statefulbolts:sink:redis-sink:publish",
    ]
