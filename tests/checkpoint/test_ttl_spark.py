"""State TTL on local Spark with a real redis-server: expired counts leave Redis itself.

The word count bolt runs in Spark's Python workers against Redis; the driver's manual clock
fixes each transaction's timestamp. What is checked is Redis: the committed hashes and their
``$ttl`` expiry indexes hold exactly the live keys.
"""

from __future__ import annotations

import collections
import json
import uuid
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest

from examples.wordcount import WordCount
from statefulbolts import Fields, TopologyBuilder
from statefulbolts.clock import ManualClock
from tests.checkpoint.test_ttl_runner import FEEDS, START_MS, FeedSpout, feed

pytestmark = [pytest.mark.spark, pytest.mark.redis]


@pytest.fixture
def name() -> Iterator[str]:
    name = f"ttl-spark-{uuid.uuid4().hex[:8]}"
    FEEDS[name] = collections.deque()
    yield name
    FEEDS.pop(name, None)


def test_expired_counts_are_deleted_from_redis(cluster: Any, redis_db: Any, name: str) -> None:
    conf = {
        "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
        "topology.state.provider.config": json.dumps(
            {"jedisPoolConfig": {"host": redis_db.host, "port": redis_db.port}}
        ),
        "topology.state.ttl.secs": 10,
    }
    builder = TopologyBuilder()
    builder.set_spout("words", FeedSpout(name), 1)
    builder.set_bolt("count", WordCount(), 2).fields_grouping("words", Fields("word"))
    clock = ManualClock(START_MS)
    handle = cluster.submit_topology(name, conf, builder.create_topology(), clock=clock)
    try:
        feed(name, "a", "b", "a")
        assert handle.await_idle(120).read_state("count") == {"a": 2, "b": 1}
        clock.advance(10_000)  # a and b expire at START_MS + 10_000: now
        feed(name, "c")
        assert handle.await_idle(120).read_state("count") == {"c": 1}
    finally:
        cluster.kill_topology(name)
    client = redis_db.client()
    fields: set[str] = set()
    index: dict[str, float] = {}
    for task in (0, 1):
        base = f"{name}/count-{task}"
        fields |= {msgpack.unpackb(k) for k in client.hkeys(base)}
        index |= {
            msgpack.unpackb(k): s for k, s in client.zrange(f"{base}$ttl", 0, -1, withscores=True)
        }
    assert fields == {"c"}
    assert index == {"c": START_MS + 20_000}
