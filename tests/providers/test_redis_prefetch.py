"""Reading state ahead: ``KeyValueState.prefetch``, the keys a task hands it, and when.

The Redis state reads the committed values of many keys in one ``HMGET`` per 10,000 and answers
the ``get`` calls that follow from its read cache; nothing a read returns may change. Checked
against fakeredis and a real redis-server, counting the reads each sends. Then the keys a
stateful task prefetches (``checkpoint._prefetch``: the values its input is fields-grouped on)
and the moment it does (``CheckpointTask.before_data``: after the state is ready, before the
first tuple).
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest

from checkpoint import Action, CheckpointTask, check_stored_txids
from checkpoint._prefetch import grouped_keys
from providers import KeyValueState
from providers.memory import InMemoryKeyValueState, InMemoryKeyValueStateProvider
from providers.redis import RedisKeyValueState
from statefulbolts import Fields, StatefulBolt, TopologyBuilder
from statefulbolts.components import BasicBolt
from statefulbolts.context import TopologyContext
from statefulbolts.runtime._plan import ExecutionPlan
from statefulbolts.runtime._program import TaskInfo
from statefulbolts.runtime._records import TupleBatch
from statefulbolts.testing import RecordingCollector, make_tuple


class CountingClient:
    """A Redis client that records each read it sends: ``(command, fields asked)``.

    Everything else passes through; the scripts (load, prepare, commit) go uncounted.
    """

    READS = frozenset({"hget", "hmget", "hgetall", "hscan"})

    def __init__(self, client: Any) -> None:
        self._client = client
        self.reads: list[tuple[str, int]] = []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._client, name)
        if name not in self.READS:
            return attr

        def read(*args: Any, **kwargs: Any) -> Any:
            fields = args[1] if name == "hmget" else [args[1]] if len(args) > 1 else []
            self.reads.append((name, len(fields)))
            return attr(*args, **kwargs)

        return read


@pytest.fixture(params=["fakeredis", pytest.param("redis", marks=pytest.mark.redis)])
def client(request: pytest.FixtureRequest) -> Iterator[CountingClient]:
    if request.param == "fakeredis":
        import fakeredis

        yield CountingClient(fakeredis.FakeRedis(server=fakeredis.FakeServer()))
        return
    raw = request.getfixturevalue("redis_db").client()
    yield CountingClient(raw)
    raw.close()


def committed(client: CountingClient, ns: str, values: dict[Any, Any], txid: int = 1) -> None:
    """Commit ``values`` to ``ns`` through a state of its own; forget its reads."""
    writer = RedisKeyValueState(ns, client)
    for key, value in values.items():
        writer.put(key, value)
    writer.prepare_commit(txid)
    writer.commit(txid)
    client.reads.clear()


def test_prefetch_reads_every_key_in_one_hmget_and_get_answers_from_it(
    client: CountingClient,
) -> None:
    committed(client, "t/words-0", {f"w{i}": i for i in range(100)} | {"nested": {"n": [1]}})
    state = RedisKeyValueState("t/words-0", client)
    wanted = [f"w{i}" for i in range(100)] + ["nested", "absent", "gone", "w5"]

    state.prefetch(iter(wanted))

    assert client.reads == [("hmget", 103)]  # each distinct key once
    assert [state.get(f"w{i}") for i in range(100)] == list(range(100))
    assert state.get("nested") == {"n": [1]}
    assert state.get("absent") is None
    assert state.get("gone", 0) == 0
    assert state.get_many(["w1", "absent"], -1) == [1, -1]
    assert client.reads == [("hmget", 103)]  # absent keys too: no HGET after the prefetch
    state.prefetch(wanted)
    assert client.reads == [("hmget", 103)]  # nothing new to read
    assert state.get("never-prefetched") is None
    assert client.reads == [("hmget", 103), ("hget", 1)]  # a miss falls back to one read


def test_a_tasks_check_of_its_stored_txids_reads_nothing_after_the_load(
    client: CountingClient,
) -> None:
    committed(client, "t/check-0", {"storm": 1}, txid=4)
    state = RedisKeyValueState("t/check-0", client)
    check_stored_txids(state, Action.PREPARE, 5)  # as every stateful task does, first thing
    assert client.reads == []  # the load script's reply had ns$txid
    # Any later call reads the record now: another writer may have moved it since the load.
    other = RedisKeyValueState("t/check-0", client)
    other.put("storm", 2)
    other.prepare_commit(5)
    assert state.stored_txids() == (4, 5)
    assert client.reads == [("hmget", 2)]
    # So does the first call after a write of the state's own.
    fresh = RedisKeyValueState("t/check-0", client)
    fresh.supersede_prepared(5)
    fresh.prepare_commit(5)
    client.reads.clear()
    assert fresh.stored_txids() == (4, 5)
    assert client.reads == [("hmget", 2)]


def test_a_write_of_this_transaction_wins_over_the_prefetched_value(
    client: CountingClient,
) -> None:
    committed(client, "t/writes-0", {"a": 1, "b": 2, "c": 3, "d": [4]})
    state = RedisKeyValueState("t/writes-0", client)
    state.put("c", 30)  # written before the prefetch: not asked for
    state.put("d", [40])  # a value the fast path does not take: in the pending delta
    state.prefetch(["a", "b", "c", "d"])
    assert client.reads == [("hmget", 2)]

    state.put("a", 10)
    assert state.delete("b") == 2
    assert [state.get(k) for k in "abcd"] == [10, None, 30, [40]]
    state.prepare_commit(2)
    assert [state.get(k) for k in "abcd"] == [10, None, 30, [40]]  # from the prepared delta
    state.commit(2)
    assert [state.get(k) for k in "abcd"] == [10, None, 30, [40]]
    assert client.reads == [("hmget", 2)]
    assert dict(RedisKeyValueState("t/writes-0", client)) == {"a": 10, "c": 30, "d": [40]}


def test_after_a_rollback_the_committed_value_is_read_not_the_dropped_write(
    client: CountingClient,
) -> None:
    committed(client, "t/rollback-0", {"a": 1})
    state = RedisKeyValueState("t/rollback-0", client)
    state.prefetch(["a", "b"])
    state.put("a", 99)
    state.put("b", 99)
    state.prepare_commit(2)
    state.rollback()
    assert (state.get("a"), state.get("b")) == (1, None)
    state.put("a", state.get("a") + 1)
    state.prepare_commit(2)
    state.commit(2)
    state.prefetch(["a"])
    assert state.get("a") == 2
    assert client.reads == [("hmget", 2)]
    assert RedisKeyValueState("t/rollback-0", client).get("a") == 2


def test_the_next_transaction_reads_what_another_state_committed_meanwhile(
    client: CountingClient,
) -> None:
    # On Spark each transaction of a task has its own state object (and read cache).
    committed(client, "t/next-0", {"a": 1, "b": 2})
    first = RedisKeyValueState("t/next-0", client)
    first.prefetch(["a", "b"])
    first.put("a", first.get("a") + 1)
    first.prepare_commit(2)
    first.commit(2)
    other = RedisKeyValueState("t/next-0", client)
    other.put("b", 20)
    other.put("c", 30)
    other.prepare_commit(3)
    other.commit(3)

    second = RedisKeyValueState("t/next-0", client)
    client.reads.clear()
    second.prefetch(["a", "b", "c"])
    assert [second.get(k) for k in "abc"] == [2, 20, 30]
    assert client.reads == [("hmget", 3)]


def test_a_retry_after_supersede_reads_committed_values_not_the_lost_attempts(
    client: CountingClient,
) -> None:
    committed(client, "t/retry-0", {"a": 1})
    lost = RedisKeyValueState("t/retry-0", client)
    lost.put("a", 50)
    lost.put("b", 50)
    lost.prepare_commit(2)

    retry = RedisKeyValueState("t/retry-0", client)
    retry.supersede_prepared(2)
    client.reads.clear()
    retry.prefetch(["a", "b"])
    assert client.reads == [("hmget", 2)]  # the stored delta no longer answers for them
    assert (retry.get("a"), retry.get("b")) == (1, None)
    retry.put("a", retry.get("a") + 1)
    retry.prepare_commit(2)
    retry.commit(2)
    assert (retry.get("a"), retry.get("b")) == (2, None)
    assert dict(RedisKeyValueState("t/retry-0", client)) == {"a": 2}


def test_replace_stored_drops_what_was_prefetched(client: CountingClient) -> None:
    committed(client, "t/replace-0", {"a": 1})
    state = RedisKeyValueState("t/replace-0", client)
    state.prefetch(["a", "b"])
    pack = msgpack.packb
    state.replace_stored(7, [(pack("a"), pack(70)), (pack("b"), pack(80))], None, {})
    assert (state.get("a"), state.get("b")) == (70, 80)


def test_a_key_the_serializer_refuses_is_skipped(client: CountingClient) -> None:
    committed(client, "t/odd-0", {"a": 1})
    state = RedisKeyValueState("t/odd-0", client)
    state.prefetch([object(), "a"])
    assert client.reads == [("hmget", 1)]
    assert state.get("a") == 1


class _NeverIterated:
    def __iter__(self) -> Iterator[Any]:
        raise AssertionError("the keys of an empty namespace must not be iterated")


def test_a_namespace_empty_at_the_load_is_read_not_at_all(client: CountingClient) -> None:
    state = RedisKeyValueState("t/empty-0", client)
    state.prefetch(_NeverIterated())  # nothing committed: the hint is not even computed
    state.put("a", 1)
    assert (state.get("a"), state.get("b"), state.get_many(["c", "a"], 0)) == (1, None, [0, 1])
    state.prepare_commit(1)
    state.commit(1)
    assert (state.get("a"), state.get("b", 7)) == (1, 7)  # what it committed, it knows
    assert client.reads == []
    # The next transaction's state finds the hash no longer empty, and reads as before.
    later = RedisKeyValueState("t/empty-0", client)
    later.prefetch(["a", "b"])
    assert (later.get("a"), later.get("b")) == (1, None)
    assert client.reads == [("hmget", 2)]


def test_an_empty_namespace_reads_again_once_it_may_hold_what_it_did_not_write(
    client: CountingClient,
) -> None:
    # A delta committed by someone else (the COMMIT reply "already committed"): not cached.
    state = RedisKeyValueState("t/empty-1", client)
    state.prefetch(["x"])
    other = RedisKeyValueState("t/empty-1", client)
    other.put("x", 2)
    other.prepare_commit(2)
    other.commit(2)
    state.commit(2)
    assert state.get("x") == 2
    assert client.reads == [("hget", 1)]
    # A replaced image: read from the store, not taken for absent.
    state = RedisKeyValueState("t/empty-2", client)
    state.prefetch(["a"])
    pack = msgpack.packb
    state.replace_stored(7, [(pack("a"), pack(70))], None, {})
    assert state.get("a") == 70
    # A namespace with an expiry index reads (the index may hide what the hash holds).
    ttl = RedisKeyValueState("t/empty-3", client)
    client.zadd(ttl.ttl_key, {b"\xa1z": 1})
    indexed = RedisKeyValueState("t/empty-3", client)
    keys = iter(["a"])
    indexed.prefetch(keys)
    assert next(keys, None) is None  # taken: read with the index (one pipelined round trip)


@pytest.mark.parametrize("seed", range(12))
def test_a_state_that_began_empty_reads_what_a_model_of_its_layers_says(
    client: CountingClient, seed: int
) -> None:
    """Random writes, reads, prepares, commits, rollbacks and reloads against a dict model."""
    rng = random.Random(seed)
    ns = f"t/model-{seed}"
    keys = [f"k{i}" for i in range(10)]
    state = RedisKeyValueState(ns, client)
    state.prefetch(_NeverIterated())
    committed: dict[str, Any] = {}
    view: dict[str, Any] = {}
    txid, reloaded = 0, False
    for _ in range(150):
        op, key = rng.random(), rng.choice(keys)
        if op < 0.35:
            value = rng.choice([rng.randint(0, 9), [rng.randint(0, 9)], "s"])
            state.put(key, value)
            view[key] = value
        elif op < 0.45:
            assert state.delete(key) == view.pop(key, None)
        elif op < 0.7:
            assert state.get(key) == view.get(key)
        elif op < 0.8:
            some = rng.sample(keys, 3)
            assert state.get_many(some) == [view.get(k) for k in some]
        elif op < 0.93:
            txid += 1
            state.prepare_commit(txid)
            if rng.random() < 0.7:
                state.commit(txid)
                committed = dict(view)
            else:
                state.rollback()
                view = dict(committed)
        else:  # the next task's object: the writes not committed are gone with this one
            state = RedisKeyValueState(ns, client)
            state.prefetch(list(keys))
            view, reloaded = dict(committed), True
        if not reloaded:
            assert client.reads == []  # it began empty: nothing to read, whatever it did
    assert dict(RedisKeyValueState(ns, client)) == committed


@pytest.mark.redis
def test_prefetching_10000_keys_costs_a_handful_of_commands(redis_db: Any) -> None:
    admin = redis_db.client()
    raw = redis_db.client()
    ns = "t/many-0"
    writer = RedisKeyValueState(ns, raw)
    for i in range(10_000):
        writer.put(f"w{i}", i)
    writer.prepare_commit(1)
    writer.commit(1)
    state = RedisKeyValueState(ns, raw)
    words = [f"w{i}" for i in range(0, 10_000, 2)] + [f"w{i}" for i in range(1, 10_000, 2)]
    admin.config_resetstat()

    state.prefetch(words + [f"absent{i}" for i in range(5_000)])
    counts = [state.get(w, 0) + 1 for w in words]
    found = [state.get(f"absent{i}") for i in range(5_000)]

    stats = admin.info("commandstats")
    assert stats["cmdstat_hmget"]["calls"] == 2  # 15,000 fields, 10,000 per HMGET
    assert "cmdstat_hget" not in stats
    assert counts == [int(w[1:]) + 1 for w in words]
    assert found == [None] * 5_000
    raw.close()
    admin.close()


# --------------------------------------------------------------------------- the default
class _Untouchable:
    def __iter__(self) -> Iterator[Any]:
        raise AssertionError("the default prefetch must not iterate the keys")


def test_the_default_prefetch_ignores_the_keys_without_iterating_them() -> None:
    state = InMemoryKeyValueState(f"t-{uuid.uuid4().hex[:8]}/count-0")
    state.put("a", 1)
    state.prefetch(_Untouchable())
    assert state.get("a") == 1
    assert KeyValueState.prefetch is InMemoryKeyValueState.prefetch


# --------------------------------------------------------------------------- the keys
class Emit(BasicBolt):
    """Declares its fields; runs nowhere (the plan only needs the wiring)."""

    def __init__(self, *fields: str) -> None:
        self.fields = Fields(list(fields))

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        """Never called."""

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(self.fields)


class Recorder(StatefulBolt):
    """Logs ``init_state`` and each word it counts into ``log``."""

    def __init__(self, log: list[Any]) -> None:
        self.log = log

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def init_state(self, state: Any) -> None:
        self.state = state
        self.log.append("init_state")

    def execute(self, tuple: Any) -> None:  # noqa: A002
        word = tuple.get_value(0)
        self.log.append(("execute", word))
        self.state.put(word, self.state.get(word, 0) + 1)


def wiring(log: list[Any] | None = None) -> tuple[ExecutionPlan, Any]:
    """``pairs`` (word, n) and ``words`` (word) into ``count`` by word, ``both`` by both."""
    builder = TopologyBuilder()
    builder.set_bolt("pairs", Emit("word", "n"), 2)
    builder.set_bolt("words", Emit("word"))
    builder.set_bolt("count", Recorder(log if log is not None else []), 2).fields_grouping(
        "pairs", "word"
    ).fields_grouping("words", "word")
    builder.set_bolt("both", Emit("x"), 2).fields_grouping("pairs", ["word", "n"])
    builder.set_bolt("any", Emit("x"), 2).shuffle_grouping("pairs")
    topology = builder.create_topology()
    return ExecutionPlan(topology), topology


def batch(plan: ExecutionPlan, src: str, dest: str, values: list[Any]) -> TupleBatch:
    s, d = plan.index[src], plan.index[dest]
    return TupleBatch(d, 0, s, 0, plan.stream_index[s]["default"], values, [0] * len(values), None)


def test_the_keys_are_the_distinct_values_of_the_one_grouping_field() -> None:
    plan, _ = wiring()
    batches = [
        batch(plan, "pairs", "count", [["b", 1], ["a", 2], ["b", 3]]),
        batch(plan, "words", "count", ["c", "a", 7, "c"]),
    ]
    keys = list(grouped_keys(plan, batches))
    assert sorted(keys, key=str) == [7, "a", "b", "c"]
    assert len(keys) == 4  # each once


def test_no_keys_from_a_grouping_on_two_fields_or_a_shuffle() -> None:
    plan, _ = wiring()
    rows = [["a", 1], ["b", 2]]
    assert list(grouped_keys(plan, [batch(plan, "pairs", "both", rows)])) == []
    assert list(grouped_keys(plan, [batch(plan, "pairs", "any", rows)])) == []


def test_unhashable_values_are_left_out() -> None:
    plan, _ = wiring()
    rows = [[["a"], 1], ["b", 2], [{"c": 1}, 3], ["b", 4]]
    assert list(grouped_keys(plan, [batch(plan, "pairs", "count", rows)])) == ["b"]


# --------------------------------------------------------------------------- the moment
@pytest.fixture
def prefetched(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """The in-memory state's prefetch, recording the keys into the list yielded."""
    log: list[Any] = []

    def prefetch(self: Any, keys: Any) -> None:
        log.append(("prefetch", sorted(keys)))  # a set: in no particular order

    monkeypatch.setattr(InMemoryKeyValueState, "prefetch", prefetch)
    yield log


def task_of(topology: Any, name: str, component: str, action: Action) -> tuple[CheckpointTask, Any]:
    """Task 0 of ``component`` in ``action`` of txid 0 (a COMMIT finds txid 0 prepared)."""
    spec = topology.component(component)
    if action is Action.COMMIT:
        InMemoryKeyValueStateProvider().new_state(f"{name}/{component}-0", {}).prepare_commit(0)
    task = CheckpointTask(spec, action, 0, TaskInfo(component, 0, 0, 0))
    context = TopologyContext(topology, name, component, 0)
    execute = task.prepare({}, context, RecordingCollector())
    return task, execute


def test_a_stateful_task_prefetches_after_init_state_and_before_its_first_tuple(
    prefetched: list[Any],
) -> None:
    plan, topology = wiring(prefetched)
    name = f"pf-{uuid.uuid4().hex[:8]}"
    try:
        task, execute = task_of(topology, name, "count", Action.PREPARE)
        rows = [["b", 1], ["a", 2], ["b", 3]]
        task.before_data(plan, [batch(plan, "pairs", "count", rows)])
        for word, n in rows:
            execute(make_tuple([word, n], ["word", "n"], "pairs", 1))
    finally:
        InMemoryKeyValueStateProvider.drop(name)
    assert prefetched == [
        "init_state",
        ("prefetch", ["a", "b"]),
        ("execute", "b"),
        ("execute", "a"),
        ("execute", "b"),
    ]


def test_other_tasks_and_empty_inputs_prefetch_nothing(prefetched: list[Any]) -> None:
    plan, topology = wiring(prefetched)
    name = f"pf-{uuid.uuid4().hex[:8]}"
    try:
        stateful, _ = task_of(topology, name, "count", Action.COMMIT)
        stateful.before_data(plan, [])
        forwarder, _ = task_of(topology, name, "both", Action.PREPARE)
        forwarder.before_data(plan, [batch(plan, "pairs", "count", [["a", 1]])])
    finally:
        InMemoryKeyValueStateProvider.drop(name)
    assert prefetched == ["init_state"]
