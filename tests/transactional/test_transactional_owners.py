"""``RedisBackingMap`` owners: each committer task keeps its own opaque record by default.

``OpaqueMap``'s record (the keys its last txid wrote, "the opaque map hole" in ``_maps``) is one
per owner. Without an owner, a map takes the transactional task that uses it
(``<component>-<task index>``), which the runtime marks while the task runs; a fixed owner shared
by two tasks is refused as soon as one reads a record the other wrote. Unit tests mark tasks as
the runtime does (``enter_task``) on fakeredis and a real redis-server; the Spark tests run a
real transactional topology whose committer (parallelism 2) keeps an ``OpaqueMap`` over
``RedisBackingMap`` with the default owner, through a failed commit replayed with a different
batch, and check the counts and the Redis keys exactly.
"""

from __future__ import annotations

import os
import random
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import fakeredis
import msgpack
import pytest
import topologies as topo
import tx_topologies as tx

from providers import StateTransactionError
from statefulbolts import (
    OpaqueMap,
    OpaqueMemoryTransactionalSpout,
    TopologyFailedError,
    TransactionalTopologyBuilder,
)
from statefulbolts.testing import make_context
from statefulbolts.transactional._owner import enter_task, leave_task, running_task
from statefulbolts.transactional._redis_map import RedisBackingMap

TIMEOUT = 240
# Varied by STATEFULBOLTS_SEED in loops: how many batches overlap, how often they start.
_RNG = random.Random(int(os.environ.get("STATEFULBOLTS_SEED", "0")))
PENDING = _RNG.choice([1, 2, 3])
INTERVAL_MS = _RNG.choice([20, 50, 100, 200])


def add(n: int) -> Callable[[Any], int]:
    return lambda old: (old or 0) + n


@pytest.fixture(params=["fakeredis", pytest.param("redis", marks=pytest.mark.redis)])
def client(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "fakeredis":
        yield fakeredis.FakeRedis(server=fakeredis.FakeServer())
    else:
        made = request.getfixturevalue("redis_db").client()
        yield made
        made.close()
    leave_task()


def keys(client: Any) -> list[bytes]:
    return sorted(client.keys("*"))


# ---------------------------------------------------------------- who owns a map
def test_outside_any_task_the_owner_is_empty_as_before(client: Any) -> None:
    backing = RedisBackingMap(client, "wc:")
    assert (running_task(), backing.owner) == (None, "")
    OpaqueMap(backing).multi_update(1, ["cat"], [add(1)])
    assert keys(client) == [b"wc:cat", b"wc:\xfe"]  # no task known: no writer kept


def test_a_map_made_without_an_owner_belongs_to_the_task_using_it(client: Any) -> None:
    shared = RedisBackingMap(client, "wc:")  # made outside any task, say at import
    for task, word in ((0, "cat"), (1, "dog")):
        enter_task("count", task)
        assert shared.owner == f"count-{task}"
        OpaqueMap(shared).multi_update(1, [word], [add(1)])
        leave_task()
    assert keys(client) == [
        b"wc:cat",
        b"wc:dog",
        b"wc:\xfdcount-0",
        b"wc:\xfdcount-1",
        b"wc:\xfecount-0",
        b"wc:\xfecount-1",
    ]
    assert msgpack.unpackb(client.get(b"wc:\xfecount-0")) == [1, ["cat"]]
    assert msgpack.unpackb(client.get(b"wc:\xfecount-1")) == [1, ["dog"]]
    assert client.get(b"wc:\xfdcount-1") == b"count-1"


def test_a_map_made_in_a_task_keeps_its_owner_in_a_thread_of_the_users(client: Any) -> None:
    enter_task("count", 3)
    backing = RedisBackingMap(client, "wc:")
    leave_task()
    seen: list[str] = []
    worker = threading.Thread(target=lambda: seen.append(backing.owner))
    worker.start()
    worker.join()
    assert seen == ["count-3"]
    assert RedisBackingMap(client, "wc:", context=make_context("count", 2, 4)).owner == "count-2"
    assert RedisBackingMap(client, "wc:", owner="mine").owner == "mine"
    with pytest.raises(ValueError, match="give owner or context, not both"):
        RedisBackingMap(client, "wc:", owner="x", context=make_context("count"))
    with pytest.raises(TypeError, match="context must be the TopologyContext"):
        RedisBackingMap(client, "wc:", context="count-0")


def test_an_opaque_replay_repairs_only_its_own_tasks_keys(client: Any) -> None:
    # Both tasks commit txid 1; task 0's commit then fails and its replay has no "ant".
    def commit(task: int, words: list[str], n: int) -> None:
        enter_task("count", task)
        OpaqueMap(RedisBackingMap(client, "wc:")).multi_update(1, words, [add(n) for _ in words])
        leave_task()

    commit(0, ["ant", "bee"], 1)
    commit(1, ["cat", "dog"], 1)  # with one shared record, this would overwrite task 0's
    commit(0, ["bee"], 5)
    reader = OpaqueMap(RedisBackingMap(client, "wc:"))
    assert reader.multi_get(["ant", "bee", "cat", "dog"]) == [None, 5, 1, 1]


def test_one_owner_shared_by_two_tasks_is_refused_before_anything_is_written(
    client: Any,
) -> None:
    enter_task("count", 0)
    OpaqueMap(RedisBackingMap(client, "wc:", owner="shared")).multi_update(1, ["cat"], [add(1)])
    enter_task("count", 1)
    before = {key: client.get(key) for key in keys(client)}
    with pytest.raises(StateTransactionError) as refused:
        OpaqueMap(RedisBackingMap(client, "wc:", owner="shared")).multi_update(2, ["dog"], [add(1)])
    assert "the record of owner 'shared' was written by task count-0 and task count-1 uses it" in (
        str(refused.value)
    )
    assert "leave owner out (each committer task is then '<component>-<task index>')" in str(
        refused.value
    )
    assert {key: client.get(key) for key in keys(client)} == before
    # The task that wrote it goes on; a record written outside any task is never refused.
    enter_task("count", 0)
    OpaqueMap(RedisBackingMap(client, "wc:", owner="shared")).multi_update(2, ["cat"], [add(1)])
    leave_task()
    OpaqueMap(RedisBackingMap(client, "wc:", owner="shared")).multi_update(3, ["cat"], [add(1)])
    assert client.get(b"wc:\xfdshared") is None
    enter_task("count", 1)
    OpaqueMap(RedisBackingMap(client, "wc:", owner="shared")).multi_update(4, ["cat"], [add(1)])
    assert OpaqueMap(RedisBackingMap(client, "wc:")).multi_get(["cat"]) == [4]


# ---------------------------------------------------------------- a real topology on Spark
class RedisOpaqueCommitter(tx.CountCommitter):
    """``CountCommitter`` with an ``OpaqueMap`` over ``RedisBackingMap(url, prefix)``.

    ``owner`` None: the default (the map is told no owner).
    """

    def __init__(
        self, log: tx.Log, url: str, prefix: str, owner: str | None = None, fail: Any = None
    ) -> None:
        super().__init__(log, fail=fail, opaque=True)
        self.url, self.prefix, self.owner = url, prefix, owner

    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        tx.Recorder.prepare(self, conf, context, collector, id)
        given = {} if self.owner is None else {"owner": self.owner}
        self.backing = RedisBackingMap(self.url, self.prefix, **given)
        self.map = OpaqueMap(self.backing)

    def finish_batch(self) -> None:
        try:
            super().finish_batch()
        finally:
            self.backing.close()


def _opaque_counts(cluster: Any, url: str, tmp_path: Path, owner: str | None) -> tuple[Any, Any]:
    """Run the opaque word count whose txid 2 commit fails once and replays other data."""
    log = tx.Log(tmp_path)
    fail = tx.FailOnce(tmp_path, txids=[2])
    data = tx.words_data(["dog cat apple dog", "cat mango", "happy mango zebra"])
    spout = OpaqueMemoryTransactionalSpout(data, ["word"], 2)
    b = TransactionalTopologyBuilder(topo.new_key("owners"), "spout", spout, 2)
    b.set_bolt("ones", tx.Ones(), 2).shuffle_grouping("spout")
    committer = RedisOpaqueCommitter(log, url, "counts:", owner=owner, fail=fail)
    b.set_committer_bolt("count", committer, 2).fields_grouping("ones", ["word"])
    changed: list[int] = []

    def change_the_data(info: Any) -> None:
        # When txid 2's commit fails, its replay reads different data.
        if not info.ok and not changed:
            changed.append(info.txid)
            spout.partitions[0].extend([["emu"], ["dog"]])
            spout.partitions[len(spout.partitions)] = [["yak"], ["yak"]]
            spout.set_disabled(1)
        elif info.ok and info.txid == 3:
            spout.set_disabled(1, False)

    conf = {
        "topology.max.spout.pending": PENDING,
        "topology.state.checkpoint.interval.ms": INTERVAL_MS,
        "topology.max.transaction.retries": 3,
    }
    handle = cluster.submit_topology(
        topo.new_key("owners"), conf, b.build_topology(), on_transaction=change_the_data
    )
    return handle, spout


@pytest.mark.spark
@pytest.mark.redis
def test_a_committer_of_parallelism_2_keeps_exact_counts_through_a_replayed_commit(
    cluster: Any, redis_db: Any, tmp_path: Path
) -> None:
    handle, spout = _opaque_counts(cluster, redis_db.url, tmp_path, owner=None)
    handle.await_idle(TIMEOUT)
    failed = [t for t in handle.metrics()["transactions"] if not t["ok"]]
    assert [(t["txid"], t["action"]) for t in failed] == [(2, "COMMIT")]
    want = tx.total(spout.partitions)
    words = sorted(want)
    with RedisBackingMap(redis_db.url, "counts:") as reader:
        assert dict(zip(words, OpaqueMap(reader).multi_get(words), strict=True)) == want
    client = redis_db.client()
    records = sorted(k for k in client.keys("counts:*") if k[7:8] in (b"\xfd", b"\xfe"))
    assert records == [
        b"counts:\xfdcount-0",
        b"counts:\xfdcount-1",
        b"counts:\xfecount-0",
        b"counts:\xfecount-1",
    ]
    assert {client.get(b"counts:\xfdcount-0"), client.get(b"counts:\xfdcount-1")} == {
        b"count-0",
        b"count-1",
    }
    # Each task's record lists its own words only (fields grouping: a word has one task).
    listed = [
        set(msgpack.unpackb(client.get(b"counts:\xfecount-%d" % t), raw=False)[1]) for t in (0, 1)
    ]
    assert not (listed[0] & listed[1])


@pytest.mark.spark
@pytest.mark.redis
def test_a_fixed_owner_shared_by_two_committer_tasks_stops_the_topology_naming_both(
    cluster: Any, redis_db: Any, tmp_path: Path
) -> None:
    handle, _ = _opaque_counts(cluster, redis_db.url, tmp_path, owner="shared")
    with pytest.raises(TopologyFailedError) as stopped:
        handle.await_idle(TIMEOUT)
    message = str(stopped.value)
    assert "StateTransactionError" in message
    assert "the record of owner 'shared' was written by task count-" in message
    assert "two tasks under one owner overwrite each other's record" in message
    assert stopped.value.component == "count"
