"""Exactly-once writes: the value rules, the maps, and the opaque map hole.

The map tests form one contract suite over every backing map: a dict, a provider's state (in
memory, fakeredis, a real redis-server) and Redis directly (fakeredis, a real redis-server).
"""

from __future__ import annotations

import copy
import json
import pickle
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import fakeredis
import msgpack
import pytest
from redis_fixtures import free_port

from providers import (
    STATE_PROVIDER_CONFIG_KEY,
    STATE_PROVIDER_KEY,
    InMemoryKeyValueStateProvider,
    KeyValueState,
    StateBackendError,
    StateFactory,
    StateSerializationError,
    StateTransactionError,
)
from providers.redis import override_client, reset_clients
from statefulbolts.transactional._attempt import TransactionAttempt
from statefulbolts.transactional._maps import (
    BackingMap,
    MemoryBackingMap,
    OpaqueMap,
    StateBackingMap,
    TransactionalMap,
)
from statefulbolts.transactional._redis_map import RedisBackingMap
from statefulbolts.transactional._values import OpaqueValue, TransactionalValue, txid_of


def add(n: int) -> Callable[[Any], int]:
    return lambda old: (old or 0) + n


# --- the value rules ---------------------------------------------------------------------------
def test_transactional_value_example_of_section_6() -> None:
    v = TransactionalValue(3, 10)
    v = TransactionalValue.apply(v, 4, add(5))
    assert v == TransactionalValue(4, 15)
    replayed = TransactionalValue.apply(v, 4, add(5))
    assert replayed == TransactionalValue(4, 15)
    assert replayed is v
    assert TransactionalValue.apply(v, 5, add(2)) == TransactionalValue(5, 17)
    assert TransactionalValue.apply(None, 1, add(2)) == TransactionalValue(1, 2)


def test_opaque_value_example_of_section_6() -> None:
    v = OpaqueValue(3, 10, 7)
    v = OpaqueValue.apply(v, 4, add(5))
    assert v == OpaqueValue(4, 15, 10)
    v = OpaqueValue.apply(v, 4, add(3))  # the failed batch 4's different replay
    assert v == OpaqueValue(4, 13, 10)
    assert OpaqueValue.apply(v, 5, add(2)) == OpaqueValue(5, 15, 13)
    assert OpaqueValue.apply(None, 1, add(2)) == OpaqueValue(1, 2, None)


def test_transactional_rule_would_keep_the_failed_batch() -> None:
    # Why §6 needs the opaque rule: the transactional one skips the different replay (+3) and
    # keeps the failed +5, while the spout goes on from the +3 batch's end.
    v = TransactionalValue.apply(TransactionalValue(3, 10), 4, add(5))
    v = TransactionalValue.apply(v, 4, add(3))
    assert TransactionalValue.apply(v, 5, add(2)) == TransactionalValue(5, 17)


def test_opaque_value_ahead_of_the_stream_raises() -> None:
    with pytest.raises(StateTransactionError, match="written by txid 6 cannot take txid 5"):
        OpaqueValue.apply(OpaqueValue(6, 1, 0), 5, add(1))


def test_values_take_an_attempt_by_its_txid() -> None:
    # The storm-starter pitfall (§7): an attempt never equals a stored int txid.
    v = TransactionalValue.apply(None, TransactionAttempt(4, 1), add(5))
    assert v == TransactionalValue(4, 5)
    assert TransactionalValue.apply(v, TransactionAttempt(4, 2), add(5)) is v
    o = OpaqueValue.apply(OpaqueValue(3, 10, 7), TransactionAttempt(4, 1), add(5))
    assert OpaqueValue.apply(o, TransactionAttempt(4, 2), add(3)) == OpaqueValue(4, 13, 10)
    assert txid_of(TransactionAttempt(9, 3)) == 9


@pytest.mark.parametrize("bad", ["4", 4.0, True, None, [4]])
def test_txid_must_be_an_int_or_an_attempt(bad: Any) -> None:
    with pytest.raises(TypeError, match="a txid must be an int or a TransactionAttempt; got"):
        txid_of(bad)
    with pytest.raises(TypeError, match="a txid must be an int"):
        TransactionalValue(bad, 1)


def test_stored_forms_round_trip_through_msgpack() -> None:
    t = TransactionalValue(4, {"n": [1, 2]})
    o = OpaqueValue(4, 15, 10)
    assert t.to_plain() == [4, {"n": [1, 2]}]
    assert o.to_plain() == [4, 15, 10]
    assert TransactionalValue.from_plain(msgpack.unpackb(msgpack.packb(t.to_plain()))) == t
    assert OpaqueValue.from_plain(msgpack.unpackb(msgpack.packb(o.to_plain()))) == o
    assert OpaqueValue.from_plain((1, None, None)) == OpaqueValue(1, None)


@pytest.mark.parametrize(
    ("cls", "plain", "message"),
    [
        (TransactionalValue, "abc", r"must be a list; found 'abc' \(str\)"),
        (TransactionalValue, 7, r"must be a list; found 7 \(int\)"),
        (TransactionalValue, [4, 15, 10], r"has 2 items; found 3: .*is it an opaque value"),
        (TransactionalValue, ["4", 15], r"int txid; found txid '4' \(str\) in \['4', 15\]"),
        (TransactionalValue, [True, 15], r"int txid; found txid True \(bool\)"),
        (OpaqueValue, [4, 15], r"has 3 items; found 2: .*is it a transactional value"),
        (OpaqueValue, [], r"has 3 items; found 0: \[\]"),
        (OpaqueValue, {"txid": 4}, r"must be a list; found \{'txid': 4\} \(dict\)"),
        (OpaqueValue, [None, 1, 2], r"int txid; found txid None \(NoneType\)"),
    ],
)
def test_from_plain_names_what_was_found(cls: Any, plain: Any, message: str) -> None:
    with pytest.raises(StateSerializationError, match=message):
        cls.from_plain(plain)


# --- the backing maps under test ---------------------------------------------------------------
class Backing:
    """One backing map under test; ``new()`` makes another object over the same storage."""

    def __init__(self, name: str, new: Callable[[], BackingMap]) -> None:
        self.name = name
        self.new = new


def _state_conf(provider: str, config: dict[str, Any]) -> dict[str, Any]:
    return {STATE_PROVIDER_KEY: provider, STATE_PROVIDER_CONFIG_KEY: json.dumps(config)}


def _state_backing(name: str, conf: dict[str, Any], namespace: str) -> Backing:
    def new() -> BackingMap:
        state = StateFactory.get_state(namespace, conf)
        assert isinstance(state, KeyValueState)
        return StateBackingMap(state)

    return Backing(name, new)


REDIS_PROVIDER = "providers.redis.RedisKeyValueStateProvider"


@pytest.fixture(
    params=[
        "memory",
        "state-memory",
        "state-fakeredis",
        pytest.param("state-redis", marks=pytest.mark.redis),
        "redis-fakeredis",
        pytest.param("redis", marks=pytest.mark.redis),
    ]
)
def backing(request: pytest.FixtureRequest) -> Iterator[Backing]:
    kind = request.param
    tag = uuid.uuid4().hex[:8]
    namespace = f"txmap-{tag}/count-0"
    if kind == "memory":
        shared = MemoryBackingMap()
        yield Backing(kind, lambda: shared)
    elif kind == "state-memory":
        yield _state_backing(kind, {}, namespace)
        InMemoryKeyValueStateProvider.drop(f"txmap-{tag}")
    elif kind == "state-fakeredis":
        with override_client(fakeredis.FakeRedis(server=fakeredis.FakeServer())):
            yield _state_backing(kind, _state_conf(REDIS_PROVIDER, {}), namespace)
    elif kind == "state-redis":
        server = request.getfixturevalue("redis_db")
        pool = {"host": server.host, "port": server.port}
        yield _state_backing(
            kind, _state_conf(REDIS_PROVIDER, {"jedisPoolConfig": pool}), namespace
        )
        reset_clients()
    elif kind == "redis-fakeredis":
        client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
        yield Backing(kind, lambda: RedisBackingMap(client, f"{tag}:", owner="count-0"))
    else:
        server = request.getfixturevalue("redis_db")
        made: list[RedisBackingMap] = []

        def new() -> BackingMap:
            made.append(RedisBackingMap(server.url, f"{tag}:", owner="count-0"))
            return made[-1]

        yield Backing(kind, new)
        for m in made:
            m.close()


# --- the backing map contract ------------------------------------------------------------------
def test_backing_map_put_get_delete_and_record(backing: Backing) -> None:
    b = backing.new()
    assert b.multi_get(["cat", "dog"]) == [None, None]
    assert b.get_record() is None
    b.multi_put(["cat", ("dog", 2), 7], [[1, 3], [1, {"x": [1]}], [1, 5]], record=[1, ["cat"]])
    other = backing.new()
    assert other.multi_get(["cat", ("dog", 2), 7, "emu"]) == [[1, 3], [1, {"x": [1]}], [1, 5], None]
    assert other.get_record() == [1, ["cat"]]
    other.multi_put(["cat", 7], [None, [2, 6]])  # None deletes; no record: the record stays
    assert backing.new().multi_get(["cat", 7]) == [None, [2, 6]]
    assert backing.new().get_record() == [1, ["cat"]]
    assert b.multi_get([]) == []


def test_backing_map_write_is_all_or_nothing(backing: Backing) -> None:
    b = backing.new()
    with pytest.raises(StateSerializationError, match="object"):
        b.multi_put(["a", "b"], [[1, 1], [1, object()]], record=[1, ["a", "b"]])
    fresh = backing.new()
    assert fresh.multi_get(["a", "b"]) == [None, None]
    assert fresh.get_record() is None


def test_the_record_slot_never_meets_a_key(backing: Backing) -> None:
    b = backing.new()
    b.multi_put(["x"], [[1, 1]], record=[1, ["x"]])
    sly = ["$record", ("$record",), "\xfe", "\xfecount-0", -1, b"\xfe", "", ()]
    b.multi_put(sly, [[2, i] for i in range(len(sly))])
    fresh = backing.new()
    assert fresh.get_record() == [1, ["x"]]
    assert fresh.multi_get(sly) == [[2, i] for i in range(len(sly))]
    assert fresh.multi_get(["x"]) == [[1, 1]]


def test_multi_put_needs_one_value_per_key(backing: Backing) -> None:
    with pytest.raises(ValueError, match="2 keys and 1 values"):
        backing.new().multi_put(["a", "b"], [[1, 1]])


# --- TransactionalMap --------------------------------------------------------------------------
def test_transactional_map_counts_a_replay_once(backing: Backing) -> None:
    m = TransactionalMap(backing.new())
    assert m.multi_update(1, ["cat", "dog"], [add(5), add(2)]) == [5, 2]
    # txid 2 commits, fails after its write, and the identical batch commits again.
    assert m.multi_update(2, ["cat", "emu"], [add(3), add(1)]) == [8, 1]
    replay = TransactionalMap(backing.new())
    assert replay.multi_update(2, ["cat", "emu"], [add(3), add(1)]) == [8, 1]
    assert replay.multi_update(3, ["dog"], [add(2)]) == [4]
    assert replay.multi_get(["cat", "dog", "emu", "fox"]) == [8, 4, 1, None]
    assert backing.new().multi_get(["cat"]) == [[2, 8]]


def test_transactional_map_compares_the_txid_of_an_attempt(backing: Backing) -> None:
    m = TransactionalMap(backing.new())
    m.multi_update(TransactionAttempt(1, 1), ["cat"], [add(5)])
    m.multi_update(TransactionAttempt(2, 2), ["cat"], [add(3)])
    # A new attempt of txid 2 (the storm-starter pitfall would add 3 again).
    again = TransactionalMap(backing.new())
    assert again.multi_update(TransactionAttempt(2, 3), ["cat"], [add(3)]) == [8]
    assert again.multi_get(["cat"]) == [8]


def test_transactional_map_refuses_a_stored_txid_ahead(backing: Backing) -> None:
    m = TransactionalMap(backing.new())
    m.multi_update(5, ["cat"], [add(1)])
    with pytest.raises(
        StateTransactionError, match=r"key 'cat' was written by txid 5, after txid 4"
    ):
        m.multi_update(4, ["dog", "cat"], [add(1), add(1)])
    assert m.multi_get(["dog", "cat"]) == [None, 1]


def test_transactional_map_reads_only_its_form(backing: Backing) -> None:
    OpaqueMap(backing.new()).multi_update(1, ["cat"], [add(1)])
    with pytest.raises(StateSerializationError, match="is it an opaque value"):
        TransactionalMap(backing.new()).multi_get(["cat"])


# --- both maps: argument checks ----------------------------------------------------------------
@pytest.mark.parametrize("map_class", [TransactionalMap, OpaqueMap])
def test_a_duplicate_key_raises_and_writes_nothing(backing: Backing, map_class: Any) -> None:
    m = map_class(backing.new())
    with pytest.raises(ValueError, match=r"got key\(s\) \['cat'\] more than once"):
        m.multi_update(1, ["cat", "dog", "cat"], [add(1), add(1), add(1)])
    assert m.multi_get(["cat", "dog"]) == [None, None]


@pytest.mark.parametrize("map_class", [TransactionalMap, OpaqueMap])
def test_bad_arguments_are_named(backing: Backing, map_class: Any) -> None:
    m = map_class(backing.new())
    with pytest.raises(ValueError, match="2 keys and 1 updaters"):
        m.multi_update(1, ["a", "b"], [add(1)])
    with pytest.raises(TypeError, match=r"map keys must be hashable.*got \['a'\] \(list\)"):
        m.multi_update(1, [["a"]], [add(1)])
    with pytest.raises(TypeError, match="the updater of key 'a' is not callable: 3"):
        m.multi_update(1, ["a"], [3])
    with pytest.raises(TypeError, match="a txid must be an int or a TransactionAttempt"):
        m.multi_update("1", ["a"], [add(1)])
    assert m.multi_get(["a", "b"]) == [None, None]


# --- OpaqueMap ---------------------------------------------------------------------------------
def test_opaque_map_example_of_section_6(backing: Backing) -> None:
    OpaqueMap(backing.new()).multi_update(3, ["k"], [lambda _old: 10])
    m = OpaqueMap(backing.new())
    m.multi_update(4, ["k"], [add(5)])
    assert backing.new().multi_get(["k"]) == [[4, 15, 10]]
    replay = OpaqueMap(backing.new())  # batch 4 failed after its write; its replay adds 3
    assert replay.multi_update(4, ["k"], [add(3)]) == [13]
    assert backing.new().multi_get(["k"]) == [[4, 13, 10]]
    assert replay.multi_update(5, ["k"], [add(2)]) == [15]
    assert backing.new().multi_get(["k"]) == [[5, 15, 13]]
    assert replay.multi_get(["k"]) == [15]


def test_opaque_map_refuses_a_value_ahead(backing: Backing) -> None:
    backing.new().multi_put(["cat"], [[5, 1, None]])  # a value of txid 5, and no record
    with pytest.raises(
        StateTransactionError, match="key 'cat' was written by txid 5, after txid 4"
    ):
        OpaqueMap(backing.new()).multi_update(4, ["dog", "cat"], [add(1), add(1)])
    OpaqueMap(backing.new()).multi_update(5, ["cat"], [add(1)])  # txid 5 again: from prev
    # The record of txid 5 alone is ahead of a commit of 4, whatever keys it touches.
    with pytest.raises(StateTransactionError, match="the record says txid 5 was written, after"):
        OpaqueMap(backing.new()).multi_update(4, ["dog"], [add(1)])
    assert OpaqueMap(backing.new()).multi_get(["cat", "dog"]) == [1, None]


def test_opaque_map_takes_an_attempt_by_its_txid(backing: Backing) -> None:
    OpaqueMap(backing.new()).multi_update(TransactionAttempt(1, 1), ["cat"], [add(5)])
    OpaqueMap(backing.new()).multi_update(TransactionAttempt(2, 2), ["cat"], [add(3)])
    replay = OpaqueMap(backing.new())
    assert replay.multi_update(TransactionAttempt(2, 3), ["cat"], [add(4)]) == [9]


# --- the opaque map hole (§6, required fix) ----------------------------------------------------
def _commit_one(backing: Backing) -> None:
    """Txid 1 commits A = 10 and K = 20."""
    OpaqueMap(backing.new()).multi_update(1, ["A", "K"], [add(10), add(20)])


def test_a_replay_without_k_restores_k(backing: Backing) -> None:
    _commit_one(backing)
    attempt1 = OpaqueMap(backing.new())
    assert attempt1.multi_update(2, ["A", "K"], [add(5), add(7)]) == [15, 27]
    # ... a later committer fails: txid 2 replays, and its batch has no tuple for K.
    replay = OpaqueMap(backing.new())
    assert replay.multi_update(2, ["A"], [add(3)]) == [13]
    assert replay.multi_get(["A", "K"]) == [13, 20]
    # K's tuples come in txid 3, and count once.
    assert OpaqueMap(backing.new()).multi_update(3, ["K"], [add(7)]) == [27]
    assert backing.new().multi_get(["A", "K"]) == [[2, 13, 10], [3, 27, 20]]


def test_a_key_new_in_the_failed_attempt_is_removed(backing: Backing) -> None:
    _commit_one(backing)
    OpaqueMap(backing.new()).multi_update(2, ["A", "N"], [add(5), add(4)])
    OpaqueMap(backing.new()).multi_update(2, ["A"], [add(5)])
    assert backing.new().multi_get(["N"]) == [None]
    assert OpaqueMap(backing.new()).multi_update(3, ["N"], [add(4)]) == [4]


def test_calls_of_one_attempt_accumulate_the_record(backing: Backing) -> None:
    _commit_one(backing)
    attempt1 = OpaqueMap(backing.new())
    attempt1.multi_update(2, ["A"], [add(5)])
    attempt1.multi_update(2, ["K"], [add(7)])  # must not restore A
    attempt1.multi_update(2, [], [])
    assert attempt1.multi_get(["A", "K"]) == [15, 27]
    # Both calls are on record: a replay with neither key restores both.
    replay = OpaqueMap(backing.new())
    assert replay.multi_update(2, ["B"], [add(1)]) == [1]
    assert replay.multi_get(["A", "K", "B"]) == [10, 20, 1]


def test_an_empty_replay_still_repairs(backing: Backing) -> None:
    _commit_one(backing)
    OpaqueMap(backing.new()).multi_update(2, ["A", "K"], [add(5), add(7)])
    assert OpaqueMap(backing.new()).multi_update(2, [], []) == []
    assert OpaqueMap(backing.new()).multi_get(["A", "K"]) == [10, 20]


def test_a_restored_key_updated_later_in_the_replay_starts_from_prev(backing: Backing) -> None:
    _commit_one(backing)
    OpaqueMap(backing.new()).multi_update(2, ["A", "K"], [add(5), add(7)])
    replay = OpaqueMap(backing.new())
    replay.multi_update(2, ["A"], [add(3)])
    assert replay.multi_update(2, ["K"], [add(1)]) == [21]
    # The replay fails too; a third attempt with K only restores A and redoes K.
    third = OpaqueMap(backing.new())
    assert third.multi_update(2, ["K"], [add(2)]) == [22]
    assert third.multi_get(["A", "K"]) == [10, 22]


def test_sets_and_tuples_in_map_values_read_back_with_their_types(backing: Backing) -> None:
    """Through every backing map the same codec as a provider's state: nothing turns a tuple
    into a list or a set into a sorted list on the way."""
    value = {"pair": (1, "a"), "seen": {"x", "y"}, "frozen": frozenset({(1, 2)}), "l": [()]}
    m = TransactionalMap(backing.new())
    m.multi_update(1, [("w", 1), "s"], [lambda _old: value, lambda _old: {3, 1}])
    read = TransactionalMap(backing.new()).multi_get([("w", 1), "s"])
    assert read == [value, {1, 3}]
    got = read[0]
    assert type(got["pair"]) is tuple and type(got["seen"]) is set
    assert type(got["frozen"]) is frozenset and type(next(iter(got["frozen"]))) is tuple
    assert type(got["l"][0]) is tuple and type(read[1]) is set
    # Updaters get the values back as they were written.
    m.multi_update(2, ["s"], [lambda old: {*old, 5} if isinstance(old, set) else "not a set"])
    assert TransactionalMap(backing.new()).multi_get(["s"]) == [{1, 3, 5}]


def test_map_values_stored_as_arrays_before_still_read_as_lists() -> None:
    client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    client.set(b"old:cat", msgpack.packb([4, [1, "a"]]))  # [txid, a tuple] written before
    assert RedisBackingMap(client, "old:", owner="count-0").multi_get(["cat"]) == [[4, [1, "a"]]]
    assert TransactionalMap(RedisBackingMap(client, "old:", owner="count-0")).multi_get(
        ["cat"]
    ) == [[1, "a"]]


def test_the_record_holds_tuple_keys(backing: Backing) -> None:
    OpaqueMap(backing.new()).multi_update(1, [("K", 1)], [add(20)])
    OpaqueMap(backing.new()).multi_update(2, [("A", 1), ("K", 1)], [add(1), add(7)])
    OpaqueMap(backing.new()).multi_update(2, [("A", 1)], [add(1)])
    assert OpaqueMap(backing.new()).multi_get([("A", 1), ("K", 1)]) == [1, 20]


def test_one_attempt_updates_a_key_once_per_txid(backing: Backing) -> None:
    m = OpaqueMap(backing.new())
    m.multi_update(1, ["A"], [add(5)])
    with pytest.raises(ValueError, match=r"key\(s\) \['A'\] were already updated for txid 1"):
        m.multi_update(1, ["B", "A"], [add(1), add(1)])
    assert m.multi_get(["A", "B"]) == [5, None]
    assert m.multi_update(2, ["A"], [add(1)]) == [6]


def test_a_committed_record_of_an_earlier_txid_restores_nothing(backing: Backing) -> None:
    _commit_one(backing)
    OpaqueMap(backing.new()).multi_update(2, ["A", "K"], [add(5), add(7)])
    assert OpaqueMap(backing.new()).multi_update(3, ["A"], [add(1)]) == [16]
    assert OpaqueMap(backing.new()).multi_get(["A", "K"]) == [16, 27]


# --- per backing -------------------------------------------------------------------------------
def test_memory_backing_map_cannot_be_copied() -> None:
    backing = MemoryBackingMap()
    for copier in (copy.copy, copy.deepcopy, pickle.dumps):
        with pytest.raises(TypeError, match="lives in the process that made it"):
            copier(backing)


def _fail_commits(state: KeyValueState) -> KeyValueState:
    """Make the state's commits fail, as a store that went down would."""

    def commit(txid: int | None = None) -> None:
        raise StateBackendError("store down during commit")

    state.commit = commit  # type: ignore[method-assign]
    return state


def test_state_backing_map_refuses_work_after_a_failed_write() -> None:
    namespace = f"txmap-{uuid.uuid4().hex[:8]}/count-0"
    state = StateFactory.get_state(namespace, {})
    assert isinstance(state, KeyValueState)
    broken = StateBackingMap(_fail_commits(state))
    with pytest.raises(StateBackendError, match="store down"):
        broken.multi_put(["a"], [[1, 1]])
    with pytest.raises(StateTransactionError, match="an earlier multi_put failed"):
        broken.multi_get(["a"])
    with pytest.raises(StateTransactionError, match="make a new state"):
        broken.multi_put(["b"], [[1, 1]])
    fresh = StateFactory.get_state(namespace, {})
    assert isinstance(fresh, KeyValueState)
    assert StateBackingMap(fresh).multi_get(["a"]) == [None]
    InMemoryKeyValueStateProvider.drop(namespace.split("/")[0])


def test_state_backing_map_refuses_work_after_a_failed_update_write_not_after_its_own_error():
    namespace = f"txmap-{uuid.uuid4().hex[:8]}/count-0"
    state = StateFactory.get_state(namespace, {})
    assert isinstance(state, KeyValueState)
    counts = TransactionalMap(StateBackingMap(state))
    assert counts.multi_update(3, ["a"], [add(1)]) == [1]
    ahead = TransactionalMap(StateBackingMap(StateFactory.get_state(namespace, {})))
    with pytest.raises(StateTransactionError, match="written by txid 3, after txid 2"):
        ahead.multi_update(2, ["a", "b"], [add(1), add(1)])
    assert ahead.multi_update(4, ["a", "b"], [add(1), add(1)]) == [2, 1]  # still usable
    broken = StateBackingMap(_fail_commits(StateFactory.get_state(namespace, {})))
    with pytest.raises(StateBackendError, match="store down"):
        TransactionalMap(broken).multi_update(5, ["a"], [add(1)])
    with pytest.raises(StateTransactionError, match="an earlier multi_put failed"):
        broken.multi_get(["a"])
    nothing = StateBackingMap(_fail_commits(StateFactory.get_state(namespace, {})))
    assert TransactionalMap(nothing).multi_update(4, ["a"], [add(1)]) == [2]  # a replay
    assert nothing.multi_get(["a", "b"]) == [[4, 2], [4, 1]]  # no write, no commit to fail
    InMemoryKeyValueStateProvider.drop(namespace.split("/")[0])


def test_state_backing_map_needs_a_key_value_state() -> None:
    with pytest.raises(TypeError, match="needs a providers.KeyValueState; got builtins.dict"):
        StateBackingMap({})  # type: ignore[arg-type]


def _redis_layout(client: Any) -> None:
    m = OpaqueMap(RedisBackingMap(client, "wc:", owner="count-3"))
    m.multi_update(1, ["cat", 7, ("dog", 2)], [add(2), add(1), add(4)])
    keys = sorted(client.keys("wc:*"))
    assert keys == sorted(
        [
            b"wc:cat",
            b"wc:\xff" + msgpack.packb(7),
            b"wc:\xff" + msgpack.packb(["dog", 2]),
            b"wc:\xfecount-3",
        ]
    )
    assert msgpack.unpackb(client.get(b"wc:cat")) == [1, 2, None]
    assert msgpack.unpackb(client.get(b"wc:\xfecount-3")) == [1, ["cat", 7, ["dog", 2]]]
    TransactionalMap(RedisBackingMap(client, "tx:")).multi_update(4, ["cat"], [add(15)])
    assert msgpack.unpackb(client.get(b"tx:cat")) == [4, 15]
    assert client.get(b"tx:\xfe") is None  # a TransactionalMap keeps no record


def test_redis_layout_on_fakeredis() -> None:
    _redis_layout(fakeredis.FakeRedis(server=fakeredis.FakeServer()))


@pytest.mark.redis
def test_redis_layout_on_a_real_server(redis_db: Any) -> None:
    _redis_layout(redis_db.client())


def test_owners_keep_separate_records() -> None:
    client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    OpaqueMap(RedisBackingMap(client, "wc:", owner="count-0")).multi_update(1, ["cat"], [add(1)])
    # Task 1 commits txid 1 with its own keys: task 0's cat is not stale for it.
    OpaqueMap(RedisBackingMap(client, "wc:", owner="count-1")).multi_update(1, ["dog"], [add(1)])
    assert OpaqueMap(RedisBackingMap(client, "wc:")).multi_get(["cat", "dog"]) == [1, 1]


def _monitored(server: Any, action: Callable[[], Any]) -> tuple[list[str], list[str]]:
    """What ``action`` made Redis run, seen by MONITOR: (commands clients sent, script commands).

    A client command is its name (``EVALSHA``); a script's command is its name and first key.
    """
    marker = f"end-{uuid.uuid4().hex}"
    sent: list[str] = []
    scripted: list[str] = []
    closing = server.client()
    closing.ping()  # connected now, so its handshake is not among what is seen
    with server.client().monitor() as monitor:
        action()
        closing.echo(marker)
        while True:
            seen = monitor.next_command()
            words = seen["command"].split(" ")
            if words[0].upper() == "ECHO" and words[1:] == [marker]:
                return sent, scripted
            if seen["client_type"] == "lua":
                scripted.append(f"{words[0].upper()} {words[1]}")
            else:
                sent.append(words[0].upper())


@pytest.mark.redis
def test_each_redis_multi_put_is_one_script_call(redis_db: Any) -> None:
    backing = RedisBackingMap(redis_db.url, "wc:", owner="count-0")
    OpaqueMap(backing).multi_update(1, ["A", "K"], [add(10), add(20)])
    OpaqueMap(backing).multi_update(2, ["A", "K", "N"], [add(5), add(7), add(1)])
    # The hole's repair: two new values, two restored keys (N deleted) and the record, all in
    # one script call: one MSET, one DEL (no task, no lease: the fence is not read).
    sent, scripted = _monitored(
        redis_db, lambda: OpaqueMap(backing).multi_update(2, ["A", "B"], [add(3), add(1)])
    )
    assert sent == ["MGET", "MGET", "EVALSHA"]  # record+writer, keys, the write
    assert [c.split(" ")[0] for c in scripted] == ["MSET", "DEL"]
    assert OpaqueMap(backing).multi_get(["A", "B", "K", "N"]) == [13, 1, 20, None]
    tx = TransactionalMap(RedisBackingMap(redis_db.client(), "tx:"))
    assert tx.multi_get(["a"]) == [None]  # connects
    sent, scripted = _monitored(
        redis_db, lambda: tx.multi_update(1, ["a", "b", "c"], [add(1), add(2), add(3)])
    )
    assert sent == ["MGET", "EVALSHA"]
    assert scripted == ["MSET tx:a"]
    assert tx.multi_get(["a", "b", "c"]) == [1, 2, 3]
    backing.close()


def test_a_redis_multi_put_names_the_value_msgpack_refuses() -> None:
    import fakeredis

    backing = RedisBackingMap(fakeredis.FakeRedis(), "wc:", owner="count-0")
    backing.multi_put(["ok"], [[1, 1]])
    with pytest.raises(StateSerializationError, match=r"the value of key 'bad'.*object"):
        backing.multi_put(["a", "bad", "c"], [[2, 1], [2, object()], [2, 3]])
    assert backing.multi_get(["ok", "a", "bad", "c"]) == [[1, 1], None, None, None]
    # A key given twice keeps its last value; None deletes.
    backing.multi_put(["ok", "ok", "x", "x"], [[3, 3], None, None, [3, 4]])
    assert backing.multi_get(["ok", "x"]) == [None, [3, 4]]


@pytest.mark.redis
def test_each_state_backed_multi_put_is_one_script_call(redis_db: Any) -> None:
    pool = {"host": redis_db.host, "port": redis_db.port}
    conf = _state_conf(REDIS_PROVIDER, {"jedisPoolConfig": pool})
    state = StateFactory.get_state("txmap-count/count-0", conf)
    assert isinstance(state, KeyValueState)
    m = OpaqueMap(StateBackingMap(state))
    sent, scripted = _monitored(
        redis_db, lambda: m.multi_update(1, ["A", "K", "N"], [add(5), add(7), add(1)])
    )
    # Reads: the record, then every key in one HMGET; then the whole write is one script.
    assert sent == ["HGET", "HMGET", "EVALSHA"]
    # Inside it: the values, whether the namespace keeps a TTL index (state TTL: none here, so
    # nothing to clean), the commit record.
    assert [c.split(" ")[0] for c in scripted] == ["HSET", "EXISTS", "HSETNX", "HGET"]
    reset_clients()


def test_redis_connection_errors_name_the_server_and_the_step() -> None:
    port = free_port()
    backing = RedisBackingMap(f"redis://127.0.0.1:{port}/0", "wc:", owner="count-0")
    for step, call in [
        ("multi_get", lambda: backing.multi_get(["cat"])),
        ("multi_put", lambda: backing.multi_put(["cat"], [[1, 1]])),
        ("get_record", backing.get_record),
    ]:
        with pytest.raises(StateBackendError) as info:
            call()
        message = str(info.value)
        assert f"Redis at 127.0.0.1:{port} could not be reached during {step}" in message
        assert "map 'wc:' (owner 'count-0')" in message
    backing.close()


@pytest.mark.redis
def test_a_stopped_server_fails_the_write_and_keeps_the_last_one(redis_server_factory: Any) -> None:
    server = redis_server_factory()
    backing = RedisBackingMap(server.url, "wc:")
    TransactionalMap(backing).multi_update(1, ["cat"], [add(1)])
    port = server.port
    server.stop()
    with pytest.raises(StateBackendError, match=f"127.0.0.1:{port} .* during multi_"):
        TransactionalMap(backing).multi_update(2, ["cat"], [add(1)])
    backing.close()


def test_redis_backing_map_arguments_are_checked() -> None:
    with pytest.raises(TypeError, match="prefix must be a str; got b'wc:'"):
        RedisBackingMap(fakeredis.FakeRedis(), b"wc:")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="decode_responses=False"):
        RedisBackingMap(fakeredis.FakeRedis(decode_responses=True), "wc:")
    with pytest.raises(ValueError, match="'http://x' is not a Redis URL"):
        RedisBackingMap("http://x", "wc:")
    backing = RedisBackingMap(fakeredis.FakeRedis(), "wc:")
    with pytest.raises(StateSerializationError, match="key '\\\\ud800' cannot be a Redis key"):
        backing.multi_get(["\ud800"])
