"""``RedisBackingMap``'s fence: a committer's ``multi_put`` of a driver taken over writes nothing.

The map carries the lease epoch of the task it runs in (``_owner.running_epoch``, which the
runtime takes from the task's config) and each ``multi_put`` checks and raises the prefix's
fence (``prefix + 0xFC``) in the same script call as the write. Tasks are marked as the runtime
marks them (``enter_task``), on fakeredis and on a real redis-server; the last tests check the
runtime's own marking, the round trips and a hash-tagged prefix on a cluster.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import fakeredis
import msgpack
import pytest
from redis_fixtures import single_node_cluster

from providers import FENCE_EPOCH_KEY, StateFencedError
from statefulbolts.components import BasicBolt
from statefulbolts.testing import make_context
from statefulbolts.transactional._attempt import TransactionAttempt
from statefulbolts.transactional._owner import enter_task, leave_task, running_epoch, running_task
from statefulbolts.transactional._redis_map import RedisBackingMap
from statefulbolts.transactional._task import BatchTaskProgram


@pytest.fixture(params=["fakeredis", pytest.param("redis", marks=pytest.mark.redis)])
def client(request: pytest.FixtureRequest) -> Iterator[Any]:
    if request.param == "fakeredis":
        yield fakeredis.FakeRedis(server=fakeredis.FakeServer())
    else:
        made = request.getfixturevalue("redis_db").client()
        yield made
        made.close()
    leave_task()


def stored(client: Any) -> dict[bytes, Any]:
    """Every key and its value: msgpack decoded, the fence and the writers (text) as stored."""
    found: dict[bytes, Any] = {}
    for key in client.keys("*"):
        raw = client.get(key)
        text = b"\xfc" in key or b"\xfd" in key
        found[key] = raw if text else msgpack.unpackb(raw, raw=False)
    return found


def test_outside_a_driver_the_map_writes_unfenced_and_leaves_the_fence(client: Any) -> None:
    backing = RedisBackingMap(client, "wc:", owner="count-0")
    backing.multi_put(["cat"], [[1, 1]], record=[1, ["cat"]])
    assert client.get(b"wc:\xfc") is None  # no epoch, no fence
    enter_task("count", 0, epoch=5)
    backing.multi_put(["cat"], [[2, 2]])
    leave_task()
    assert client.get(b"wc:\xfc") == b"5"
    backing.multi_put(["dog"], [[3, 1]])  # a script, a test: never refused
    assert client.get(b"wc:\xfc") == b"5"
    assert backing.multi_get(["cat", "dog"]) == [[2, 2], [3, 1]]


def test_a_task_of_an_older_epoch_is_refused_and_writes_nothing(client: Any) -> None:
    enter_task("count", 0, epoch=2)
    backing = RedisBackingMap(client, "wc:")
    backing.multi_put(["cat", 7], [[1, 3], [1, 4]], record=[1, ["cat", 7]])
    before = stored(client)
    assert before == {
        b"wc:cat": [1, 3],
        b"wc:\xff\x07": [1, 4],
        b"wc:\xfecount-0": [1, ["cat", 7]],
        b"wc:\xfdcount-0": b"count-0",
        b"wc:\xfc": b"2",
    }
    enter_task("count", 0, epoch=1)  # the driver that was taken over, still running
    with pytest.raises(StateFencedError) as info:
        backing.multi_put(["cat", "dog"], [[2, 9], None], record=[2, ["cat", "dog"]])
    assert (info.value.epoch, info.value.fence) == (1, 2)
    assert str(info.value).startswith(
        "map 'wc:' (owner 'count-0'): multi_put under lease epoch 1 refused: it was written "
        "under epoch 2 since; another driver of this topology took over"
    )
    assert stored(client) == before
    enter_task("count", 0, epoch=3)  # a newer driver raises the fence with its first write
    backing.multi_put(["cat"], [None])
    assert client.get(b"wc:\xfc") == b"3"
    assert client.get(b"wc:cat") is None


def test_a_map_made_in_a_task_carries_its_epoch_into_a_users_thread(client: Any) -> None:
    enter_task("count", 0, epoch=1)
    stale = RedisBackingMap(client, "wc:")
    leave_task()
    enter_task("count", 0, epoch=2)
    RedisBackingMap(client, "wc:").multi_put(["cat"], [[1, 1]])
    leave_task()
    raised: list[BaseException] = []

    def in_a_thread_of_the_users() -> None:
        try:
            stale.multi_put(["cat"], [[9, 9]])
        except StateFencedError as exc:
            raised.append(exc)

    thread = threading.Thread(target=in_a_thread_of_the_users)
    thread.start()
    thread.join(timeout=10)
    assert [type(e) for e in raised] == [StateFencedError]
    assert stale.multi_get(["cat"]) == [[1, 1]]


def test_the_running_tasks_epoch_wins_over_the_one_the_map_was_made_in(client: Any) -> None:
    backing = RedisBackingMap(client, "wc:", owner="count-0")  # made outside any task
    enter_task("count", 0, epoch=4)
    backing.multi_put(["cat"], [[1, 1]])
    enter_task("count", 0, epoch=3)
    with pytest.raises(StateFencedError):
        backing.multi_put(["cat"], [[2, 2]])
    assert backing.multi_get(["cat"]) == [[1, 1]]


def test_no_key_ever_meets_the_fence(client: Any) -> None:
    enter_task("count", 0, epoch=6)
    backing = RedisBackingMap(client, "wc:")
    sly = ["\xfc", "", b"\xfc", ("\xfc",), -4]
    backing.multi_put(sly, [[1, i] for i in range(len(sly))])
    assert client.get(b"wc:\xfc") == b"6"
    assert backing.multi_get(sly) == [[1, i] for i in range(len(sly))]


def test_the_runtime_gives_a_tasks_maps_the_epoch_of_its_config() -> None:
    seen: list[tuple[str | None, int | None]] = []

    class Committer(BasicBolt):
        def prepare(self, conf: Any, context: Any) -> None:
            seen.append((running_task(), running_epoch()))

        def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
            """Nothing to do: only prepare matters here."""

        def declare_output_fields(self, declarer: Any) -> None:
            """No output."""

    spec = SimpleNamespace(id="count", obj=Committer(), is_spout=False, outputs={})
    program = BatchTaskProgram(TransactionAttempt(1, 1), "words")
    task = program.executor(spec, SimpleNamespace(task=1))
    out = SimpleNamespace(ack=lambda tuple_: None, fast_routes=dict)
    context = make_context("count", task_index=1, parallelism=2)
    task.prepare({FENCE_EPOCH_KEY: 7}, context, out)
    task.cleanup()
    task.prepare({}, context, out)  # a driver without a lease
    task.cleanup()
    assert seen == [("count-1", 7), ("count-1", None)]
    assert (running_task(), running_epoch()) == (None, None)


def _monitored(server: Any, action: Any) -> tuple[list[str], list[str]]:
    """(commands clients sent, commands scripts ran) while ``action`` ran, seen by MONITOR."""
    marker = f"end-{uuid.uuid4().hex}"
    sent: list[str] = []
    scripted: list[str] = []
    closing = server.client()
    closing.ping()
    with server.client().monitor() as monitor:
        action()
        closing.echo(marker)
        while True:
            seen = monitor.next_command()
            words = seen["command"].split(" ")
            if words[0].upper() == "ECHO" and words[1:] == [marker]:
                return sent, scripted
            (scripted if seen["client_type"] == "lua" else sent).append(words[0].upper())


@pytest.mark.redis
def test_a_fenced_multi_put_is_one_round_trip(redis_db: Any) -> None:
    enter_task("count", 0, epoch=1)
    try:
        backing = RedisBackingMap(redis_db.client(), "wc:")
        backing.multi_put(["a"], [[1, 1]])  # loads the script
        enter_task("count", 0, epoch=2)
        sent, scripted = _monitored(
            redis_db, lambda: backing.multi_put(["a", "b"], [[2, 1], None], record=[2, ["a"]])
        )
    finally:
        leave_task()
    assert sent == ["EVALSHA"]
    assert scripted == ["GET", "MSET", "DEL", "SET"]  # the fence, the write, the fence raised


@pytest.mark.redis
def test_the_fence_shares_the_slot_of_a_hash_tagged_prefix_on_a_cluster(
    redis_server_factory: Any,
) -> None:
    from redis.cluster import ClusterNode, RedisCluster

    node = single_node_cluster(redis_server_factory)
    cluster = RedisCluster(startup_nodes=[ClusterNode(node.host, node.port)])
    try:
        enter_task("count", 0, epoch=2)
        backing = RedisBackingMap(cluster, "{counts}:")
        backing.multi_put(["cat", ("dog", 1)], [[1, 1], [1, 2]], record=[1, ["cat"]])
        admin = node.client()
        assert admin.get(b"{counts}:\xfc") == b"2"
        slots = {admin.cluster("keyslot", key) for key in admin.keys("*")}
        assert len(slots) == 1
        enter_task("count", 0, epoch=1)
        with pytest.raises(StateFencedError):
            backing.multi_put(["cat"], [[2, 2]])
        assert backing.multi_get(["cat", ("dog", 1)]) == [[1, 1], [1, 2]]
    finally:
        leave_task()
        cluster.close()
