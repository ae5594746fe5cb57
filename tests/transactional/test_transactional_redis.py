"""Transactional topologies on Redis end to end: durable spouts over streams, maps, restarts.

A real redis-server (the ``redis_db`` fixture) holds everything: the streams the spouts read,
the coordinator's and the partitions' metas, and the committers' maps.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

import pytest
import topologies as topo
import tx_topologies as tx

from statefulbolts import TransactionalTopologyBuilder
from statefulbolts.connectors.redis import close_connections
from statefulbolts.transactional import (
    OpaqueRedisStreamsTransactionalSpout,
    RedisStreamsTransactionalSpout,
    load_streams,
    transactional_status,
)

pytestmark = [pytest.mark.spark, pytest.mark.redis]

TIMEOUT = 240
LINES = {
    "tx-words:0": "cat dog chicken cat dog apple".split(),
    "tx-words:1": "cat dog apple banana".split(),
    "tx-words:2": "cat cat cat cat cat dog dog dog dog".split(),
}


@pytest.fixture
def redis(redis_db: Any) -> Any:
    yield redis_db
    close_connections()


def redis_conf(server: Any, pending: int = 2) -> dict[str, Any]:
    pool = {"jedisPoolConfig": {"host": server.host, "port": server.port}}
    return {
        "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
        "topology.state.provider.config": json.dumps(pool),
        "topology.max.spout.pending": pending,
        "topology.state.checkpoint.interval.ms": 100,
    }


def words_topology(spout: Any, tid: str, log: tx.Log, *, opaque: bool = False) -> Any:
    b = TransactionalTopologyBuilder(tid, "spout", spout, 2)
    b.set_bolt("ones", tx.Ones(), 2).shuffle_grouping("spout")
    b.set_committer_bolt("count", tx.CountCommitter(log, opaque=opaque), 2).fields_grouping(
        "ones", ["word"]
    )
    return b.build_topology()


def expected(lines: dict[str, list[str]]) -> dict[str, int]:
    return dict(collections.Counter(w for words in lines.values() for w in words))


def test_a_partitioned_stream_spout_counts_exactly_and_stores_its_progress(
    cluster: Any, redis: Any, tmp_path: Path
) -> None:
    url = f"redis://{redis.host}:{redis.port}/0"
    load_streams(url, LINES)
    tid = topo.new_key("streams")
    spout = RedisStreamsTransactionalSpout(url, sorted(LINES), ["value"], take_per_batch=3)
    conf = redis_conf(redis)
    handle = cluster.submit_topology(tid, conf, words_topology(spout, tid, tx.Log(tmp_path)))
    handle.await_idle(TIMEOUT)
    assert handle.read_state("count") == expected(LINES)
    handle.kill()

    # The store says where it stands: every txid committed, each partition at its stream's end.
    status = transactional_status(conf, tid)
    assert status.replays == [] and status.committed_txid == status.current_txid - 1
    assert sorted(status.partitions) == [0, 1, 2]
    for p, key in enumerate(sorted(LINES)):
        (meta,) = [m for m in status.partitions[p].values() if m is not None][-1:]
        ids = [e[0] for e in redis.client().xrange(key)]
        assert meta["stream"] == key and meta["last"] == ids[-1].decode()
    assert len(status.maps) == 2  # one map per committer task


def test_new_entries_after_a_restart_are_counted_once(
    cluster: Any, redis: Any, tmp_path: Path
) -> None:
    url = f"redis://{redis.host}:{redis.port}/0"
    load_streams(url, LINES)
    tid = topo.new_key("resume")
    spout = RedisStreamsTransactionalSpout(url, "tx-words:*", ["value"], take_per_batch=4)
    conf = redis_conf(redis, pending=3)
    first = cluster.submit_topology(tid, conf, words_topology(spout, tid, tx.Log(tmp_path)))
    first.await_idle(TIMEOUT)
    first.kill()
    more = {"tx-words:1": ["emu", "cat"], "tx-words:3": ["yak", "emu", "emu"]}
    load_streams(url, more)  # an append and a new stream the pattern finds
    spout = RedisStreamsTransactionalSpout(url, "tx-words:*", ["value"], take_per_batch=4)
    second = cluster.submit_topology(tid, conf, words_topology(spout, tid, tx.Log(tmp_path)))
    second.await_idle(TIMEOUT)
    everything = {k: LINES.get(k, []) + more.get(k, []) for k in {*LINES, *more}}
    assert second.read_state("count") == expected(everything)
    commits = [t["txid"] for t in second.metrics()["transactions"] if t["ok"]]
    # The second run went on from the first's next txid.
    firsts = [t["txid"] for t in first.metrics()["transactions"] if t["ok"]]
    assert commits[0] == firsts[-1] + 1
    second.kill()


def test_an_opaque_stream_spout_keeps_going_past_trimmed_entries(
    cluster: Any, redis: Any, tmp_path: Path
) -> None:
    url = f"redis://{redis.host}:{redis.port}/0"
    client = redis.client()
    load_streams(url, {"trim:0": ["a", "b", "c", "d"], "trim:1": ["e", "f"]})
    tid = topo.new_key("trim")
    log = tx.Log(tmp_path)
    fail = tx.FailOnce(tmp_path, txids=[2])
    spout = OpaqueRedisStreamsTransactionalSpout(url, ["trim:0", "trim:1"], ["value"], 2)
    b = TransactionalTopologyBuilder(tid, "spout", spout, 2)
    b.set_bolt("ones", tx.Ones(), 2).shuffle_grouping("spout")
    b.set_committer_bolt("count", tx.CountCommitter(log, fail=fail, opaque=True)).global_grouping(
        "ones"
    )
    trimmed: list[int] = []

    def trim_when_txid_2_fails(info: Any) -> None:
        # Its replay finds part of what its first attempt read trimmed away, plus new entries:
        # an opaque spout goes on from what is there, and the opaque map stays exact.
        if not info.ok and not trimmed:
            trimmed.append(info.txid)
            client.xtrim("trim:0", maxlen=1, approximate=False)
            load_streams(url, {"trim:0": ["g"]})

    handle = cluster.submit_topology(
        tid, redis_conf(redis), b.build_topology(), on_transaction=trim_when_txid_2_fails
    )
    handle.await_idle(TIMEOUT)
    assert trimmed == [2]
    counted = handle.read_state("count")
    # Each entry is counted at most once; what txid 1 committed stays; entries trimmed before
    # any committed batch read them are gone; every entry still there at the end is counted.
    assert set(counted.values()) == {1}
    survivors = {e[1][b"value"].decode() for e in client.xrange("trim:0")}
    assert survivors <= set(counted) and {"e", "f", "g"} <= set(counted)
    handle.kill()
