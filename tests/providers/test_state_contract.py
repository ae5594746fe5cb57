"""The state contract, one suite over every provider: they must behave identically.

Providers: in-memory (the reference), Redis through fakeredis, a real redis-server, and the
extlib SQLite provider. States come from ``StateFactory.get_state`` so provider lookup (dotted
names, extlib on the path) is exercised too.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from providers import (
    STATE_PROVIDER_CONFIG_KEY,
    STATE_PROVIDER_KEY,
    InMemoryKeyValueStateProvider,
    KeyValueState,
    ProviderConfigError,
    StateFactory,
    StateSerializationError,
    StateTransactionError,
    StateTtl,
    TtlRefresh,
    get_provider,
)


@dataclasses.dataclass(frozen=True)
class Point:
    """A value class the contract restores through ``valueClass``."""

    x: int
    y: int


class Backend:
    """One provider under test: how to name it in the config and how to get its states."""

    def __init__(self, name: str, provider: str, config: dict[str, Any]) -> None:
        self.name = name
        self.provider = provider
        self.config = config
        self.namespace = f"contract-{uuid.uuid4().hex[:8]}/counter-0"

    def conf(self, **extra: Any) -> dict[str, Any]:
        # Storm passes the provider config as a JSON string; do the same.
        return {
            STATE_PROVIDER_KEY: self.provider,
            STATE_PROVIDER_CONFIG_KEY: json.dumps({**self.config, **extra}),
        }

    def state(self, namespace: str | None = None, **extra: Any) -> Any:
        state = StateFactory.get_state(namespace or self.namespace, self.conf(**extra))
        assert isinstance(state, KeyValueState)
        return state


@pytest.fixture(
    params=[
        "memory",
        "fakeredis",
        pytest.param("redis", marks=pytest.mark.redis),
        "sqlite",
    ]
)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    kind = request.param
    if kind == "memory":
        b = Backend(kind, "providers.memory.InMemoryKeyValueStateProvider", {})
        yield b
        InMemoryKeyValueStateProvider.drop(b.namespace.split("/")[0])
    elif kind == "fakeredis":
        import fakeredis

        from providers.redis import override_client

        client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
        with override_client(client):
            yield Backend(kind, "providers.redis.RedisKeyValueStateProvider", {})
    elif kind == "redis":
        server = request.getfixturevalue("redis_db")
        pool = {"host": server.host, "port": server.port}
        yield Backend(kind, "providers.redis.RedisKeyValueStateProvider", {"jedisPoolConfig": pool})
        from providers.redis import reset_clients

        reset_clients()
    else:
        b = Backend(
            kind, "sqlite_state.SqliteKeyValueStateProvider", {"path": str(tmp_path / "s.db")}
        )
        yield b
        from providers import load_module

        sqlite_state = load_module("sqlite_state")

        sqlite_state.close_connections()


def test_lookup_gives_the_configured_provider(backend: Backend) -> None:
    state = backend.state()
    module, _, provider_class = backend.provider.rpartition(".")
    assert type(state).__module__ == module
    assert type(state).__name__ == provider_class.removesuffix("Provider")
    assert state.committed_txid is None
    assert state.prepared_txid is None


def test_put_get_delete(backend: Backend) -> None:
    state = backend.state()
    state.put("storm", 1)
    state.put("spark", {"n": [1, 2]})
    state.put("storm", 2)
    assert state.get("storm") == 2
    assert state.get("spark") == {"n": [1, 2]}
    assert state.get("flink") is None
    assert state.get("flink", 0) == 0
    assert state.delete("storm") == 2
    assert state.get("storm") is None
    assert state.get("storm", "gone") == "gone"
    assert state.delete("never-there") is None
    assert dict(state) == {"spark": {"n": [1, 2]}}


def test_location_says_where_the_state_lives(backend: Backend) -> None:
    location = backend.state().location
    expected = {
        "memory": "memory",
        "fakeredis": "redis ",
        "redis": "redis 127.0.0.1:",
        "sqlite": f"sqlite {backend.config.get('path')}",
    }[backend.name]
    assert location.startswith(expected)
    assert "password" not in location


def test_get_many_reads_every_layer_in_order(backend: Backend) -> None:
    state = backend.state()
    state.put("committed", 1)
    state.put(("tuple", "key"), [1])
    state.put("gone", 5)
    state.prepare_commit(1)
    state.commit(1)
    state.put("prepared", 2)
    state.delete("gone")
    state.prepare_commit(2)
    fresh = backend.state()  # reads the committed map and the prepared delta from the store
    fresh.put("pending", {"n": 3})
    fresh.put("scalar", 4)
    keys = ["scalar", "committed", "absent", "prepared", "gone", "pending", ("tuple", "key")]
    assert fresh.get_many(keys) == [4, 1, None, 2, None, {"n": 3}, [1]]
    assert fresh.get_many(keys + ["committed"], 0) == [4, 1, 0, 2, 0, {"n": 3}, [1], 1]
    assert fresh.get_many([]) == []
    assert [fresh.get(k) for k in keys] == fresh.get_many(keys)


def test_put_many_writes_what_puts_one_by_one_write(backend: Backend) -> None:
    pairs = [
        ("b", 1),
        ("a", "text"),
        (("tuple", "key"), [1]),
        ("b", 2),  # written twice: the last value, in the place of the first write
        ("c", {"n": 3}),
        ("d", 2.5),
        ("e", "\u00e9t\u00e9"),  # not ASCII: outside the fresh layer
        ("a", 7),
    ]
    many, each = backend.state(), backend.state(f"{backend.namespace}-each")
    many.put("c", 0)  # an earlier write keeps its place
    each.put("c", 0)
    many.put_many(iter(pairs))  # any iterable, read once
    for key, value in pairs:
        each.put(key, value)
    keys = ["a", "b", ("tuple", "key"), "c", "d", "e", "absent"]
    expected = [7, 2, [1], {"n": 3}, 2.5, "\u00e9t\u00e9", None]
    assert many.get_many(keys) == each.get_many(keys) == expected
    assert list(many) == list(each)  # the same order of first writes too
    many.prepare_commit(1)
    many.commit(1)
    assert backend.state().get_many(keys) == expected


def test_put_many_stops_at_a_refused_pair_with_the_pairs_before_it_written(
    backend: Backend,
) -> None:
    state = backend.state()
    state.put("old", 1)
    with pytest.raises(StateSerializationError):
        state.put_many([("new", 2), ("old", object()), ("after", 3)])
    assert state.get_many(["new", "old", "after"]) == [2, 1, None]
    with pytest.raises(StateSerializationError, match="None"):
        state.put_many([("n", None)])
    assert state.get("n") is None


def test_update_many_reads_as_get_many_and_writes_as_put_many(backend: Backend) -> None:
    base = backend.state()
    base.put("committed", 1)
    base.put(("tuple",), [1])
    base.put("kept", 5)
    base.prepare_commit(1)
    base.commit(1)
    base.put("prepared", 2)
    base.prepare_commit(2)
    for pending in (False, True):  # a state that wrote nothing yet, and one that did
        state = backend.state()
        if pending:
            state.put("pending", {"n": 3})
        keys = ["committed", ("tuple",), "kept", "prepared", "absent", "pending", "committed"]
        seen: list[Any] = []

        def bump(old: list[Any], seen: list[Any] = seen, keys: list[Any] = keys) -> list[Any]:
            seen.extend(old)
            pairs = zip(keys, old, strict=True)
            return [None if key == "kept" else [key, value] for key, value in pairs]

        state.update_many(iter(keys), bump)  # any iterable, read once
        before = [1, [1], 5, 2, None, {"n": 3} if pending else None, 1]
        assert seen == before
        assert state.get_many(keys) == [
            [key, value] if key != "kept" else 5 for key, value in zip(keys, before, strict=True)
        ]
        with pytest.raises(ZeroDivisionError):  # update's own error: nothing written
            state.update_many(["absent", "kept"], lambda old: [1, 1 / 0])
        with pytest.raises(ValueError, match="returned 1 values for 2 keys"):
            state.update_many(["absent", "kept"], lambda old: [7])
        assert state.get_many(["absent", "kept"]) == [["absent", None], 5]
        with pytest.raises(StateSerializationError, match="value for key 'kept'"):
            state.update_many(["new", "kept", "after"], lambda old: [1, object(), 2])
        assert state.get_many(["new", "kept", "after"]) == [1, 5, None]
    state.prepare_commit(2)  # the prepared txid, with this state's writes added
    state.commit(2)
    assert backend.state().get_many(["committed", ("tuple",), "kept", "new"]) == [
        ["committed", 1],
        [("tuple",), [1]],
        5,
        1,
    ]


def test_stored_value_is_a_copy(backend: Backend) -> None:
    state = backend.state()
    value = [1, 2]
    state.put("k", value)
    value.append(3)
    state.prepare_commit(0)
    state.commit(0)
    assert state.get("k") == [1, 2]
    assert backend.state().get("k") == [1, 2]


def test_none_value_is_rejected(backend: Backend) -> None:
    state = backend.state()
    state.put("k", 1)
    with pytest.raises(StateSerializationError, match="None"):
        state.put("k", None)
    assert state.get("k") == 1


def test_unserializable_value_names_key_and_type(backend: Backend) -> None:
    state = backend.state()
    with pytest.raises(StateSerializationError) as info:
        state.put("weird", object())
    text = str(info.value)
    assert "'weird'" in text
    assert "builtins.object" in text
    assert backend.namespace in text
    assert state.get("weird") is None


def test_unserializable_key_is_rejected(backend: Backend) -> None:
    state = backend.state()
    with pytest.raises(StateSerializationError, match="builtins.object"):
        state.put(object(), 1)
    assert dict(state) == {}


@pytest.mark.parametrize("size", [0, 255, 256, 65_535, 65_536, 200_000])
def test_values_of_every_size_survive_commit_and_reopen(backend: Backend, size: int) -> None:
    # Envelope and serializer formats change at 256 bytes and at 64 KiB.
    value = "x" * size
    blob = bytes(range(256)) * (size // 256) + b"\x00" * (size % 256)
    state = backend.state()
    state.put("s", value)
    state.put("b", blob)
    state.prepare_commit(1)
    assert backend.state().get("s") == value  # a new object sees the prepared delta
    state.commit(1)
    reopened = backend.state()
    assert reopened.get("s") == value
    assert reopened.get("b") == blob
    assert dict(reopened) == {"s": value, "b": blob}


def test_storm_prepare_commit_rollback_scenario(backend: Backend) -> None:
    """Storm's testPrepareCommitRollback, with our fixed semantics."""
    state = backend.state()
    # 1. prepare a and b
    state.put("a", 1)
    state.put("b", 2)
    state.prepare_commit(1)
    assert (state.prepared_txid, state.committed_txid) == (1, None)
    assert (state.get("a"), state.get("b")) == (1, 2)
    # 2. rollback drops the prepared delta and the pending c; no stale prepare txid is left
    state.put("c", 3)
    state.rollback()
    assert [state.get(k) for k in "abc"] == [None, None, None]
    assert (state.prepared_txid, state.committed_txid) == (None, None)
    # 3. prepare and commit a and b
    state.put("a", 1)
    state.put("b", 2)
    state.prepare_commit(1)
    state.commit(1)
    assert (state.prepared_txid, state.committed_txid) == (None, 1)
    assert dict(state) == {"a": 1, "b": 2}
    # 4. an unprepared write is rolled back
    state.put("c", 3)
    state.rollback()
    assert state.get("c") is None
    assert state.get("a") == 1
    # 5. deletes return the old values and sit as tombstones
    state.put("c", 3)
    assert state.delete("b") == 2
    assert state.delete("c") == 3
    # 6. committing the tombstones deletes the keys
    state.prepare_commit(2)
    state.commit(2)
    assert dict(state) == {"a": 1}
    assert backend.state().get("b") is None
    # 7. a rollback after a prepare goes back to txid 2
    state.put("b", 2)
    state.prepare_commit(3)
    state.put("c", 3)
    state.rollback()
    assert [state.get(k) for k in "abc"] == [1, None, None]
    assert (state.prepared_txid, state.committed_txid) == (None, 2)
    fresh = backend.state()
    assert dict(fresh) == {"a": 1}
    assert (fresh.prepared_txid, fresh.committed_txid) == (None, 2)


def test_reprepare_same_txid_merges_newer_wins(backend: Backend) -> None:
    state = backend.state()
    state.put("a", 1)
    state.put("b", 1)
    state.put("d", 1)
    state.prepare_commit(1)
    state.put("b", 2)
    state.put("c", 3)
    state.delete("d")
    state.prepare_commit(1)
    assert state.prepared_txid == 1
    assert dict(state) == {"a": 1, "b": 2, "c": 3}
    state.commit(1)
    assert dict(backend.state()) == {"a": 1, "b": 2, "c": 3}


def test_prepare_newer_txid_while_prepared_raises_and_keeps_writes(backend: Backend) -> None:
    state = backend.state()
    state.put("a", 1)
    state.prepare_commit(1)
    state.put("x", 9)
    with pytest.raises(StateTransactionError, match="txid 1 is prepared"):
        state.prepare_commit(2)
    assert state.prepared_txid == 1
    assert state.get("x") == 9
    state.prepare_commit(1)
    state.commit(1)
    assert dict(backend.state()) == {"a": 1, "x": 9}


def test_prepare_at_or_below_committed_raises(backend: Backend) -> None:
    state = backend.state()
    state.put("a", 1)
    state.prepare_commit(5)
    state.commit(5)
    for txid in (5, 4):
        state.put("b", txid)
        with pytest.raises(StateTransactionError, match="already committed"):
            state.prepare_commit(txid)
    assert state.prepared_txid is None
    state.prepare_commit(6)
    state.commit(6)
    assert dict(backend.state()) == {"a": 1, "b": 4}
    assert state.committed_txid == 6


def test_recommit_of_committed_txid_is_a_noop(backend: Backend) -> None:
    state = backend.state()
    state.put("a", 1)
    state.prepare_commit(1)
    state.commit(1)
    state.put("a", 2)  # pending, not prepared: a retried COMMIT must not apply it
    state.commit(1)
    state.commit(1)
    assert state.committed_txid == 1
    assert state.prepared_txid is None
    assert backend.state().get("a") == 1
    # a retried COMMIT from a restarted task (a new state object) is a no-op too
    backend.state().commit(1)
    assert backend.state().get("a") == 1


def test_commit_without_matching_prepare_raises(backend: Backend) -> None:
    state = backend.state()
    state.put("a", 1)
    with pytest.raises(StateTransactionError, match="cannot commit txid 1"):
        state.commit(1)
    state.prepare_commit(1)
    with pytest.raises(StateTransactionError, match="prepared txid is 1"):
        state.commit(2)
    state.commit(1)
    with pytest.raises(StateTransactionError, match="committed txid is 1"):
        state.commit(2)
    with pytest.raises(StateTransactionError):
        state.commit(0)
    assert (state.committed_txid, state.prepared_txid) == (1, None)
    assert dict(backend.state()) == {"a": 1}


def test_commit_without_txid_writes_pending_directly(backend: Backend) -> None:
    state = backend.state()
    state.put("__state", [0, "COMMITTED"])
    state.put("gone", 1)
    state.commit()
    assert state.committed_txid == -1
    fresh = backend.state()
    assert dict(fresh) == {"__state": [0, "COMMITTED"], "gone": 1}
    assert fresh.committed_txid == -1
    state.delete("gone")
    state.put("__state", [1, "PREPARING"])
    state.commit()
    assert dict(backend.state()) == {"__state": [1, "PREPARING"]}
    # a real commit's txid is kept by later commit() calls
    state.put("a", 1)
    state.prepare_commit(3)
    state.commit(3)
    state.put("b", 2)
    state.commit()
    assert backend.state().committed_txid == 3
    assert dict(backend.state()) == {"__state": [1, "PREPARING"], "a": 1, "b": 2}


def test_commit_without_txid_leaves_pending_prepare(backend: Backend) -> None:
    state = backend.state()
    state.put("p", 1)
    state.prepare_commit(0)
    state.put("s", 2)
    state.commit()
    fresh = backend.state()
    assert (fresh.prepared_txid, fresh.committed_txid) == (0, -1)
    assert dict(fresh) == {"p": 1, "s": 2}
    fresh.rollback()
    assert dict(backend.state()) == {"s": 2}


def test_rollback_with_nothing_prepared(backend: Backend) -> None:
    state = backend.state()
    state.put("a", 1)
    state.rollback()
    assert state.get("a") is None
    assert (state.prepared_txid, state.committed_txid) == (None, None)
    state.put("a", 1)
    state.prepare_commit(1)
    state.commit(1)
    state.put("b", 2)
    state.delete("a")
    state.rollback()
    state.rollback()
    assert dict(state) == {"a": 1}
    assert (state.prepared_txid, state.committed_txid) == (None, 1)


def test_iteration_layers_each_key_once_tombstones_hidden(backend: Backend) -> None:
    state = backend.state()
    for key, value in {"a": 1, "b": 2, "c": 3, "d": 4}.items():
        state.put(key, value)
    state.prepare_commit(1)
    state.commit(1)
    state.put("b", 20)  # prepared overrides committed
    state.delete("c")  # prepared tombstone hides committed
    state.put("e", 5)
    state.prepare_commit(2)
    state.put("a", 10)  # pending overrides committed
    state.delete("e")  # pending tombstone hides prepared
    state.put("f", 6)
    items = list(state)
    keys = [k for k, _ in items]
    assert len(keys) == len(set(keys))
    assert dict(items) == {"a": 10, "b": 20, "d": 4, "f": 6}
    assert len(state) == 4
    assert dict(state.items()) == dict(items)


class Counted:
    """A value class that counts how many values were decoded into it (``made``)."""

    made = 0

    def __init__(self, n: int) -> None:
        type(self).made += 1
        self.n = n


def test_iter_keys_gives_the_keys_of_iteration_in_its_order_decoding_no_value(
    backend: Backend,
) -> None:
    state = backend.state(valueClass=f"{__name__}.Counted")
    for i in range(300):  # more than a page of every paged scan
        state.put(f"k{i}", i)
    state.prepare_commit(1)
    state.commit(1)
    state.put("k1", 10)
    state.delete("k2")
    state.put("new", 5)
    state.prepare_commit(2)
    state.put("k3", 30)
    state.delete("new")
    state.put("newer", 6)
    expected = [key for key, _ in state]
    assert len(expected) == 300 - 1 - 1 + 1 + 1 and "k2" not in expected
    Counted.made = 0
    assert list(state.iter_keys()) == expected
    assert Counted.made == 0
    assert len(state) == 300 and Counted.made == 0
    state.rollback()
    assert list(state.iter_keys()) == [key for key, _ in state] and len(state) == 300


def test_iteration_pages_through_many_committed_keys(backend: Backend) -> None:
    state = backend.state()
    for i in range(250):
        state.put(f"k{i}", i)
    state.prepare_commit(1)
    state.commit(1)
    for i in range(0, 250, 2):
        state.delete(f"k{i}")
    fresh_items = list(backend.state())
    assert len(fresh_items) == 250
    items = list(state)
    assert len(items) == 125
    assert dict(items) == {f"k{i}": i for i in range(1, 250, 2)}


def _committed(backend: Backend) -> None:
    """Commit ``{"a": 1}`` at txid 1."""
    state = backend.state()
    state.put("a", 1)
    state.prepare_commit(1)
    state.commit(1)


def _committed_and_prepared(backend: Backend) -> Any:
    state = backend.state()
    state.put("a", 1)
    state.put("b", 2)
    state.prepare_commit(1)
    state.commit(1)
    state.put("c", 3)
    state.delete("b")
    state.prepare_commit(2)
    state.put("x", 9)  # never prepared: dies with this state object
    return state


def test_new_state_sees_committed_data_and_pending_prepare(backend: Backend) -> None:
    _committed_and_prepared(backend)
    restarted = backend.state()
    assert (restarted.committed_txid, restarted.prepared_txid) == (1, 2)
    assert [restarted.get(k) for k in "abcx"] == [1, None, 3, None]
    assert dict(restarted) == {"a": 1, "c": 3}
    restarted.commit(2)
    after = backend.state()
    assert (after.committed_txid, after.prepared_txid) == (2, None)
    assert dict(after) == {"a": 1, "c": 3}


def test_rollback_through_new_state_drops_prepared_delta(backend: Backend) -> None:
    _committed_and_prepared(backend)
    restarted = backend.state()
    restarted.rollback()
    assert dict(restarted) == {"a": 1, "b": 2}
    after = backend.state()
    assert (after.committed_txid, after.prepared_txid) == (1, None)
    assert dict(after) == {"a": 1, "b": 2}
    after.put("d", 4)
    after.prepare_commit(2)  # the rolled-back txid is reused, as the checkpoint spout does
    after.commit(2)
    assert dict(backend.state()) == {"a": 1, "b": 2, "d": 4}


def test_a_superseding_attempt_reads_committed_and_replaces_the_prepared_delta(
    backend: Backend,
) -> None:
    # Committed {a: 1, b: 2} at txid 1; a lost attempt prepared txid 2: b deleted, c = 3.
    _committed_and_prepared(backend)
    retry = backend.state()
    retry.supersede_prepared(2)
    assert [retry.get(k) for k in "abc"] == [1, 2, None]
    assert dict(retry) == {"a": 1, "b": 2}
    retry.put("a", 11)
    retry.put("d", 4)
    retry.prepare_commit(2)
    # Exactly the retry's writes are prepared: the lost attempt's c and deletion of b are gone.
    assert dict(retry) == {"a": 11, "b": 2, "d": 4}
    seen = backend.state()
    assert (seen.committed_txid, seen.prepared_txid) == (1, 2)
    assert dict(seen) == {"a": 11, "b": 2, "d": 4}
    # A later prepare of the same txid by the same object merges again.
    retry.put("e", 5)
    retry.prepare_commit(2)
    retry.commit(2)
    assert dict(retry) == {"a": 11, "b": 2, "d": 4, "e": 5}
    assert dict(backend.state()) == {"a": 11, "b": 2, "d": 4, "e": 5}


SHARED_STORES = ["fakeredis", pytest.param("redis", marks=pytest.mark.redis), "sqlite"]


@pytest.mark.parametrize("backend", SHARED_STORES, indirect=True)
def test_a_superseding_attempt_lost_before_its_prepare_leaves_the_delta(backend: Backend) -> None:
    # Shared stores: two attempts of one task may run at once, and Spark kills the loser
    # anywhere. Superseding writes nothing, so the winner's delta survives a loser that dies
    # before its own prepare, and COMMIT still finds it.
    _committed_and_prepared(backend)
    loser = backend.state()
    loser.supersede_prepared(2)
    loser.put("a", 99)
    del loser  # killed: never prepares
    committer = backend.state()
    assert committer.prepared_txid == 2
    committer.commit(2)
    assert dict(backend.state()) == {"a": 1, "c": 3}


def test_superseding_a_txid_that_is_not_prepared_changes_nothing(backend: Backend) -> None:
    _committed_and_prepared(backend)  # txid 2 prepared
    retry = backend.state()
    retry.supersede_prepared(3)
    assert dict(retry) == {"a": 1, "c": 3}  # not the delta of txid 3: still read
    retry.put("a", 7)
    with pytest.raises(StateTransactionError, match="txid 2 is prepared"):
        retry.prepare_commit(3)
    assert backend.state().prepared_txid == 2
    assert dict(backend.state()) == {"a": 1, "c": 3}


@pytest.mark.parametrize("backend", SHARED_STORES, indirect=True)
def test_an_attempt_that_prepares_meanwhile_is_replaced_not_merged(backend: Backend) -> None:
    _committed(backend)
    late = backend.state()  # loaded while nothing is prepared
    late.supersede_prepared(2)
    early = backend.state()
    early.put("a", 2)
    early.put("only-early", 1)
    early.prepare_commit(2)
    late.put("a", 2)
    late.prepare_commit(2)
    assert dict(backend.state()) == {"a": 2}  # exactly the last attempt's writes


def test_superseding_with_nothing_prepared(backend: Backend) -> None:
    _committed(backend)
    fresh = backend.state()
    fresh.supersede_prepared(2)
    assert dict(fresh) == {"a": 1}
    fresh.put("a", 2)
    fresh.prepare_commit(2)
    fresh.commit(2)
    assert dict(backend.state()) == {"a": 2}


def test_a_state_older_than_a_rollback_cannot_prepare(backend: Backend) -> None:
    # A task attempt of PREPARE(2) outlives its failed job: the driver rolls txid 2 back and
    # retries it, and only then does the old attempt try to land its delta.
    _committed(backend)
    zombie = backend.state()
    zombie.put("a", 100)
    backend.state().rollback()  # the ROLLBACK(2) job
    retry = backend.state()
    retry.supersede_prepared(2)
    retry.put("a", 2)
    retry.prepare_commit(2)
    with pytest.raises(StateTransactionError, match="rolled back since this state was loaded"):
        zombie.prepare_commit(2)
    assert zombie.get("a") == 100  # a refused prepare keeps the pending writes
    backend.state().commit(2)
    assert dict(backend.state()) == {"a": 2}


def test_a_states_own_rollbacks_do_not_fence_it(backend: Backend) -> None:
    state = backend.state()
    for txid in (1, 1, 1):
        state.put("a", txid)
        state.prepare_commit(txid)
        state.rollback()
    state.put("a", 5)
    state.prepare_commit(1)
    state.commit(1)
    assert dict(backend.state()) == {"a": 5}


def test_namespaces_are_independent(backend: Backend) -> None:
    mine = backend.state()
    other_ns = backend.namespace.replace("counter-0", "counter-1")
    other = backend.state(other_ns)
    mine.put("k", "mine")
    mine.prepare_commit(1)
    mine.commit(1)
    other.put("k", "other")
    other.prepare_commit(7)
    assert backend.state().get("k") == "mine"
    assert backend.state(other_ns).get("k") == "other"
    assert backend.state(other_ns).committed_txid is None
    assert backend.state(other_ns).prepared_txid == 7


# --- values msgpack has no type for: sets, frozensets, tuples ----------------------------------
ODD_VALUES = {
    "tuple": (1, "a", b"b"),
    "set": {"storm", "spark"},
    "frozenset": frozenset({3, 1, 2}),
    "empty": ((), set(), frozenset()),
    "nested": {"pairs": [(1, (2, [3, {4}])), {("x", 1), ("y", 2)}], "by": {(1, 2): {"k"}}},
    "set of frozensets": {frozenset({1}), frozenset({"a", (2,)})},
}


def _types(value: Any) -> Any:
    """The type of ``value`` and of everything in it: equal values of other types differ here."""
    if isinstance(value, dict):
        return (dict, sorted((repr(k), _types(k), _types(v)) for k, v in value.items()))
    if isinstance(value, list | tuple):
        return (type(value), [_types(v) for v in value])
    if isinstance(value, set | frozenset):
        return (type(value), sorted((repr(v), _types(v)) for v in value))
    return type(value)


def _same(got: Any, want: Any) -> bool:
    return bool(got == want) and _types(got) == _types(want)


def test_sets_frozensets_and_tuples_round_trip_with_their_exact_types(backend: Backend) -> None:
    state = backend.state()
    for key, value in ODD_VALUES.items():
        state.put(key, value)
    assert all(_same(state.get(k), v) for k, v in ODD_VALUES.items())  # pending
    state.prepare_commit(1)
    prepared = backend.state()
    assert all(_same(prepared.get(k), v) for k, v in ODD_VALUES.items())
    state.commit(1)
    fresh = backend.state()
    assert all(_same(fresh.get(k), v) for k, v in ODD_VALUES.items())
    keys = list(ODD_VALUES)
    assert all(_same(g, ODD_VALUES[k]) for k, g in zip(keys, fresh.get_many(keys), strict=True))
    iterated = dict(backend.state())
    assert iterated.keys() == ODD_VALUES.keys()
    assert all(_same(iterated[k], v) for k, v in ODD_VALUES.items())
    system = StateFactory.get_system_state(backend.namespace + "-sys", backend.conf())
    system.put("record", ODD_VALUES["nested"])
    system.commit()
    again = StateFactory.get_system_state(backend.namespace + "-sys", backend.conf())
    assert _same(again.get("record"), ODD_VALUES["nested"])


def test_values_stored_as_arrays_before_still_read_as_lists(backend: Backend) -> None:
    """What an earlier version wrote for a tuple or a set (an array) reads as it always did."""
    old = {
        msgpack.packb("pair"): msgpack.packb([1, "a"]),
        msgpack.packb("nested"): msgpack.packb({"seen": ["a", "b"], "at": [[1, 2]]}),
    }
    backend.state().replace_stored(3, iter(old.items()), None, {})
    fresh = backend.state()
    assert _same(fresh.get("pair"), [1, "a"])
    assert _same(fresh.get("nested"), {"seen": ["a", "b"], "at": [[1, 2]]})
    assert _same(dict(fresh)["pair"], [1, "a"])


def test_a_tuple_key_keeps_its_encoding_and_a_frozenset_key_is_refused(backend: Backend) -> None:
    state = backend.state()
    state.put(("w", 1), "tuple key")
    state.prepare_commit(1)
    state.commit(1)
    fresh = backend.state()
    assert fresh.get(("w", 1)) == "tuple key"
    assert fresh.get(["w", 1]) == "tuple key"  # one array encoding, as ever
    assert list(fresh) == [(["w", 1], "tuple key")]  # keys read back as stored
    with pytest.raises(StateSerializationError) as info:
        fresh.put(frozenset({"a"}), 1)
    assert str(info.value) == (
        f"state {backend.namespace!r}: key frozenset({{'a'}}) cannot be stored: msgpack "
        "cannot encode a key of type builtins.frozenset: a frozenset cannot be a key (a set is a "
        "value only): use a tuple, tuple(sorted(key, key=repr)) being the key an earlier "
        "version stored it under"
    )
    # A frozenset key an earlier version stored (a sorted array) is found by that tuple.
    old_key = msgpack.packb(sorted({"b", "a"}, key=repr))
    backend.state().replace_stored(2, iter([(old_key, msgpack.packb(5))]), None, {})
    assert backend.state().get(tuple(sorted({"b", "a"}, key=repr))) == 5


def test_value_class_restores_dataclass(backend: Backend) -> None:
    state = backend.state(valueClass=f"{__name__}.Point")
    state.put("p", Point(1, 2))
    state.prepare_commit(1)
    state.commit(1)
    got = backend.state(valueClass=f"{__name__}.Point").get("p")
    assert got == Point(1, 2)


def test_key_and_value_class_restore_tuples(backend: Backend) -> None:
    state = backend.state(keyClass="tuple", valueClass="builtins.tuple")
    state.put(("w", 1), (1, "x"))
    state.prepare_commit(1)
    state.commit(1)
    items = list(backend.state(keyClass="tuple", valueClass="tuple"))
    assert items == [(("w", 1), (1, "x"))]


def test_a_bad_serializer_class_is_reported_in_the_same_words_everywhere(backend: Backend) -> None:
    with pytest.raises(ProviderConfigError) as info:
        backend.state(valueSerializerClass="collections.OrderedDict")
    assert str(info.value) == (
        "topology.state.provider.config: valueSerializerClass 'collections.OrderedDict' must "
        "have serialize(obj) -> bytes and deserialize(data) -> obj"
    )
    with pytest.raises(ProviderConfigError, match="field 'keyClass'"):
        backend.state(keyClass=5)


# --- counting committed keys (StateProvider.committed_key_counts) ---------------------------
def _key_counts(backend: Backend, *namespaces: str) -> dict[str, int] | None:
    conf = backend.conf()
    return get_provider(conf).committed_key_counts(conf, list(namespaces))


def test_committed_key_counts_count_what_is_committed_and_nothing_staged(backend: Backend) -> None:
    ns = backend.namespace
    other = ns.replace("counter-0", "counter-1")
    assert _key_counts(backend) == {}
    assert _key_counts(backend, ns, other, ns) == {ns: 0, other: 0}  # never written
    state = backend.state()
    for i in range(5):
        state.put(f"k{i}", i)
    assert _key_counts(backend, ns) == {ns: 0}  # pending in the state object
    state.prepare_commit(1)
    assert _key_counts(backend, ns) == {ns: 0}  # staged, not committed
    state.commit(1)
    assert _key_counts(backend, ns, other) == {ns: 5, other: 0}
    # A prepared transaction that adds and deletes, then is rolled back: nothing changes.
    state.put("k5", 5)
    state.delete("k0")
    state.delete("k1")
    state.prepare_commit(2)
    assert _key_counts(backend, ns) == {ns: 5}
    state.rollback()
    assert _key_counts(backend, ns) == {ns: 5}
    # A committed transaction that deletes two keys (one absent), adds one, rewrites one.
    state = backend.state()
    state.delete("k0")
    state.delete("k1")
    state.delete("never-there")
    state.put("k9", 9)
    state.put("k2", 20)
    state.prepare_commit(3)
    state.commit(3)
    assert _key_counts(backend, ns) == {ns: 4}
    assert sorted(k for k, _ in backend.state()) == ["k2", "k3", "k4", "k9"]
    # A commit without a txid (the checkpoint spout's save) counts at once.
    state.put("k10", 10)
    state.delete("k9")
    state.put("k11", 11)
    state.commit()
    assert _key_counts(backend, ns, other) == {ns: 5, other: 0}


def test_committed_key_counts_of_a_provider_that_cannot_count_are_unknown(
    tmp_path: Path,
) -> None:
    # An extlib provider that implements only new_state: its sizes are unknown, not zero.
    (tmp_path / "countless_state.py").write_text(
        '"""A provider without committed_key_counts."""\n'
        "from providers import InMemoryKeyValueStateProvider, StateProvider\n\n\n"
        "class Provider(StateProvider):\n"
        '    """In-memory states, made by a provider that does not count them."""\n\n'
        "    def new_state(self, namespace, conf, context=None):\n"
        '        """The in-memory state."""\n'
        "        return InMemoryKeyValueStateProvider().new_state(namespace, conf, context)\n"
    )
    conf = {
        STATE_PROVIDER_KEY: "countless_state.Provider",
        "topology.state.extlib.dir": str(tmp_path),
    }
    namespace = f"countless-{uuid.uuid4().hex[:8]}/counter-0"
    state = StateFactory.get_state(namespace, conf)
    state.put("k", 1)
    state.commit()
    try:
        assert get_provider(conf).committed_key_counts(conf, [namespace]) is None
    finally:
        InMemoryKeyValueStateProvider.drop(namespace.split("/")[0])


# --- listing namespaces (StateProvider.namespaces) ------------------------------------------
def _topology(backend: Backend) -> str:
    return backend.namespace.split("/")[0]


def _saved(backend: Backend, namespace: str) -> None:
    """Leave a committed record in ``namespace`` (a no-txid commit, as the checkpoint spout)."""
    state = backend.state(namespace)
    state.put("k", 1)
    state.commit()


def test_namespaces_lists_what_prepared_committed_or_rolled_back(backend: Backend) -> None:
    topo = _topology(backend)
    committed = backend.state(f"{topo}/a-0")
    committed.put("k", 1)
    committed.prepare_commit(1)
    committed.commit(1)
    prepared = backend.state(f"{topo}/b-1")
    prepared.put("k", 1)
    prepared.prepare_commit(1)
    rolled_back = backend.state(f"{topo}/c-2")
    rolled_back.put("k", 1)
    rolled_back.rollback()
    _saved(backend, f"{topo}/$checkpointspout-0")
    assert backend.state(f"{topo}/read-0").get("k") is None  # read only: nothing stored
    backend.state(f"{topo}/pending-0").put("k", 1)  # never prepared: nothing stored
    _saved(backend, f"{topo}x/a-0")  # another topology whose name starts like ours

    conf = backend.conf()
    assert get_provider(conf).namespaces(conf, f"{topo}/") == [
        f"{topo}/$checkpointspout-0",
        f"{topo}/a-0",
        f"{topo}/b-1",
        f"{topo}/c-2",
    ]
    assert get_provider(conf).namespaces(conf, f"{topo}x/") == [f"{topo}x/a-0"]
    assert get_provider(conf).namespaces(conf, f"{topo}/z") == []


def test_namespaces_without_a_prefix_lists_everything_sorted(backend: Backend) -> None:
    topo = _topology(backend)
    ours = [f"{topo}/b-0", f"{topo}/a-0"]
    for namespace in ours:
        _saved(backend, namespace)
    conf = backend.conf()
    everything = get_provider(conf).namespaces(conf)
    assert everything is not None
    assert everything == sorted(everything)
    assert set(ours) <= set(everything)


def test_namespaces_matches_the_prefix_literally(backend: Backend) -> None:
    # Characters a Redis SCAN pattern would read as wildcards, and one that is not ASCII.
    topo = _topology(backend)
    names = sorted(f"{topo}-{part}/a-0" for part in ("*", "?", "[x]", "x", "\\", "ü"))
    for namespace in names:
        _saved(backend, namespace)
    conf = backend.conf()
    provider = get_provider(conf)
    for part in ("*", "?", "[x]", "x", "\\", "ü"):
        assert provider.namespaces(conf, f"{topo}-{part}/") == [f"{topo}-{part}/a-0"], part
    assert provider.namespaces(conf, f"{topo}-") == names


# --- the framework's own records (StateFactory.get_system_state) ----------------------------
USER_CLASSES = {"keyClass": "str", "valueClass": "int"}
SPOUT_RECORD = [3, "COMMITTED"]
MANIFEST = {"txid": 3, "tasks": {"count": [0, 1]}, "done": True}


def test_system_state_stores_plain_msgpack_whatever_the_user_classes(backend: Backend) -> None:
    conf = backend.conf(**USER_CLASSES)
    namespace = f"{_topology(backend)}/$checkpointspout-0"
    system = StateFactory.get_system_state(namespace, conf)
    system.put("__state", SPOUT_RECORD)
    system.put("manifest", MANIFEST)
    system.commit()

    again = StateFactory.get_system_state(namespace, conf)
    assert isinstance(again, KeyValueState)
    assert again.get("__state") == SPOUT_RECORD
    assert again.get("manifest") == MANIFEST
    assert dict(again) == {"__state": SPOUT_RECORD, "manifest": MANIFEST}
    # What a second run did before: the record read through the user's valueClass, int.
    with pytest.raises(TypeError):
        backend.state(namespace, **USER_CLASSES).get("__state")


def test_user_state_still_rebuilds_its_classes_beside_a_system_state(backend: Backend) -> None:
    conf = backend.conf(**USER_CLASSES)
    system = StateFactory.get_system_state(f"{_topology(backend)}/$checkpointspout-0", conf)
    system.put("__state", SPOUT_RECORD)
    system.commit()
    user = backend.state(**USER_CLASSES)
    user.put("a", 2.5)
    user.put("b", "7")
    user.prepare_commit(1)
    user.commit(1)
    got = sorted(backend.state(**USER_CLASSES))
    assert [(k, v, type(v)) for k, v in got] == [("a", 2, int), ("b", 7, int)]


# --- the stored image (KeyValueState.stored_txids ... replace_stored) -----------------------
def _image(state: Any) -> tuple[Any, dict[Any, Any], Any, dict[Any, Any]]:
    """A state's stored image, decoded: (committed txid, committed, prepared txid, prepared)."""
    committed_txid, prepared_txid = state.stored_txids()
    committed = {state.decode_key(k): state.decode_value(v) for k, v in state.scan_committed()}
    prepared = {
        state.decode_key(k): None if v is None else state.decode_value(v)
        for k, v in state.scan_prepared()
    }
    return committed_txid, committed, prepared_txid, prepared


def _committed_then_prepared(state: Any) -> None:
    """Committed {a: 1, b: [2], c: 3} at txid 4; prepared at 5: a -> 10, b deleted, d -> 'x'."""
    state.put("a", 1)
    state.put("b", [2])
    state.put("c", 3)
    state.prepare_commit(4)
    state.commit(4)
    state.put("a", 10)
    state.delete("b")
    state.put("d", "x")
    state.prepare_commit(5)
    state.put("pending", 1)  # this object's own writes are not part of the stored image


def test_stored_image_reads_each_layer_as_stored(backend: Backend) -> None:
    state = backend.state()
    _committed_then_prepared(state)
    assert state.supports_stored_image
    assert _image(state) == (4, {"a": 1, "b": [2], "c": 3}, 5, {"a": 10, "b": None, "d": "x"})
    # A new object reads the same, and the committed value of a prepared key is still there.
    fresh = backend.state()
    assert _image(fresh) == _image(state)
    assert [fresh.get_committed(k, "-") for k in ("a", "b", "d")] == [1, [2], "-"]
    assert [fresh.get(k, "-") for k in ("a", "b", "d")] == [10, "-", "x"]
    # Encoded keys and payloads are the serializers' bytes, the same in every provider.
    assert dict(fresh.scan_committed())[b"\xa1c"] == b"\x03"
    assert dict(fresh.scan_prepared())[b"\xa1b"] is None


def test_stored_image_of_a_namespace_never_written(backend: Backend) -> None:
    state = backend.state()
    assert _image(state) == (None, {}, None, {})


def test_replace_stored_installs_an_image_that_commits_and_rolls_back(backend: Backend) -> None:
    source = backend.state(f"{_topology(backend)}/source-0")
    _committed_then_prepared(source)
    target = backend.state()
    target.put("old", 1)
    target.prepare_commit(1)
    target.commit(1)
    target.rollback()  # a rollback count that the replaced image must not inherit
    target.replace_stored(4, source.scan_committed(), 5, dict(source.scan_prepared()))

    assert _image(backend.state()) == _image(source)
    assert backend.state().get("old") is None
    resumed = backend.state()
    resumed.commit(5)  # the prepared delta commits as the source's would have
    assert dict(backend.state()) == {"a": 10, "c": 3, "d": "x"}
    assert backend.state().stored_txids() == (5, None)
    again = backend.state()
    again.put("e", 1)
    again.prepare_commit(6)
    again.rollback()
    assert dict(backend.state()) == {"a": 10, "c": 3, "d": "x"}
    conf = backend.conf()
    assert backend.namespace in (get_provider(conf).namespaces(conf, _topology(backend)) or [])


def test_replace_stored_with_nothing_leaves_no_namespace(backend: Backend) -> None:
    state = backend.state()
    _committed_then_prepared(state)
    state.rollback()
    state.replace_stored(None, iter(()), None, {})
    assert _image(backend.state()) == (None, {}, None, {})
    conf = backend.conf()
    assert get_provider(conf).namespaces(conf, backend.namespace) == []
    first = backend.state()
    first.put("a", 1)
    first.prepare_commit(0)
    first.commit(0)
    assert dict(backend.state()) == {"a": 1}


def test_replace_stored_streams_a_large_committed_map(backend: Backend) -> None:
    n = 2500  # more than one page of every provider's writes and scans
    source = backend.state(f"{_topology(backend)}/source-0")
    for i in range(n):
        source.put(i, i * 2)
    source.prepare_commit(7)
    source.commit(7)
    streamed = (pair for pair in source.scan_committed())  # an iterator, read once
    backend.state().replace_stored(7, streamed, None, {})
    fresh = backend.state()
    assert fresh.stored_txids() == (7, None)
    assert sorted(fresh) == [(i, i * 2) for i in range(n)]
    assert sum(1 for _ in fresh.scan_committed()) == n


def test_replace_stored_refuses_a_delta_without_a_txid(backend: Backend) -> None:
    state = backend.state()
    state.put("a", 1)
    state.commit()
    with pytest.raises(StateTransactionError, match="prepared txid"):
        state.replace_stored(None, iter(()), None, {b"\xa1a": None})
    assert dict(backend.state()) == {"a": 1}


# --- time to live: a key written at T under a TTL of ttl is gone at T + ttl, alive at T + ttl - 1;
# cleanup is checked in the store itself (the Redis hash and its $ttl index, the SQLite rows).
TTL = StateTtl(1000)
READ_WRITE = StateTtl(1000, TtlRefresh.READ_WRITE)


def committed_at(backend: Backend, txid: int, now: int, ttl: StateTtl | None, **writes: Any) -> Any:
    """A fresh state at ``now`` that writes ``writes`` and commits them as ``txid``."""
    state = backend.state()
    state.set_transaction_time(now, ttl)
    for key, value in writes.items():
        state.put(key, value)
    state.prepare_commit(txid)
    state.commit(txid)
    return state


def at(backend: Backend, now: int, ttl: StateTtl | None = TTL) -> Any:
    state = backend.state()
    state.set_transaction_time(now, ttl)
    return state


def stored_keys(backend: Backend, state: KeyValueState) -> tuple[set[Any], dict[Any, int]]:
    """The committed keys and the expiry index exactly as the store holds them."""
    if backend.name in ("fakeredis", "redis"):
        client = state._client  # type: ignore[attr-defined]
        fields = {state.decode_key(k) for k in client.hkeys(state.committed_key)}  # type: ignore[attr-defined]
        index = client.zrange(state.ttl_key, 0, -1, withscores=True)  # type: ignore[attr-defined]
        return fields, {state.decode_key(k): int(s) for k, s in index}
    if backend.name == "sqlite":
        with sqlite3.connect(Path(state.path)) as conn:  # type: ignore[attr-defined]
            rows = conn.execute(
                "SELECT key, expiry FROM committed WHERE ns = ?", (backend.namespace,)
            ).fetchall()
        keys = {state.decode_key(k) for k, _ in rows}
        return keys, {state.decode_key(k): e for k, e in rows if e is not None}
    image = state._image  # type: ignore[attr-defined]
    return (
        {state.decode_key(k) for k in image.committed},
        {state.decode_key(k): e for k, e in image.expiry.items()},
    )


def test_a_key_expires_exactly_ttl_after_its_write(backend: Backend) -> None:
    committed_at(backend, 1, 5000, TTL, a=1)
    assert at(backend, 5999).get("a") == 1
    assert at(backend, 6000).get("a") is None
    assert at(backend, 6000).get("a", 0) == 0
    assert at(backend, 5999).get_many(["a", "b"]) == [1, None]
    assert at(backend, 6000).get_many(["a", "b"], 0) == [0, 0]
    assert dict(at(backend, 5999)) == {"a": 1}
    assert dict(at(backend, 6000)) == {}
    assert at(backend, 6000).delete("a") is None
    assert at(backend, 6000).get_committed("a") is None
    assert at(backend, 5999).get_committed("a") == 1
    assert sorted(at(backend, 0).scan_expiries()) == [(at(backend, 0)._encode_key("a"), 6000)]


def test_a_write_refreshes_the_expiry(backend: Backend) -> None:
    committed_at(backend, 1, 5000, TTL, a=1, b=1)
    committed_at(backend, 2, 5500, TTL, a=2)
    later = at(backend, 6000)
    assert (later.get("a"), later.get("b")) == (2, None)
    assert at(backend, 6499).get("a") == 2
    assert at(backend, 6500).get("a") is None


def test_a_read_refreshes_with_read_write(backend: Backend) -> None:
    committed_at(backend, 1, 5000, READ_WRITE, a=1, b=1)
    reader = at(backend, 5900, READ_WRITE)
    assert reader.get("a") == 1
    assert reader.get_many(["b"]) == [1]
    reader.prepare_commit(2)
    reader.commit(2)
    assert at(backend, 6899).get_many(["a", "b"]) == [1, 1]
    assert at(backend, 6900).get_many(["a", "b"]) == [None, None]


def test_a_read_does_not_refresh_with_write(backend: Backend) -> None:
    committed_at(backend, 1, 5000, TTL, a=1)
    reader = at(backend, 5900)
    assert reader.get("a") == 1
    assert dict(reader) == {"a": 1}
    reader.prepare_commit(2)
    reader.commit(2)
    assert at(backend, 6000).get("a") is None


def test_iteration_does_not_refresh_even_with_read_write(backend: Backend) -> None:
    committed_at(backend, 1, 5000, READ_WRITE, a=1)
    walker = at(backend, 5900, READ_WRITE)
    assert dict(walker) == {"a": 1}
    walker.prepare_commit(2)
    walker.commit(2)
    assert at(backend, 6000, READ_WRITE).get("a") is None


def test_a_write_without_ttl_clears_the_expiry(backend: Backend) -> None:
    committed_at(backend, 1, 5000, TTL, a=1)
    committed_at(backend, 2, 5500, None, a=2)
    state = at(backend, 10**9)
    assert state.get("a") == 2
    assert stored_keys(backend, state) == ({"a"}, {})


def test_commit_deletes_exactly_the_expired_keys_from_the_store(backend: Backend) -> None:
    committed_at(backend, 1, 1000, TTL, old=1, gone=1)
    committed_at(backend, 2, 1500, TTL, young=1)
    committed_at(backend, 3, 1700, None, forever=1)
    state = committed_at(backend, 4, 2000, TTL, old=2)  # at 2000: gone expired, old rewritten
    assert stored_keys(backend, state) == (
        {"old", "young", "forever"},
        {"old": 3000, "young": 2500},
    )
    assert dict(at(backend, 2000)) == {"old": 2, "young": 1, "forever": 1}
    assert state.committed_time() == 2000
    state = committed_at(backend, 5, 2500, TTL)
    assert stored_keys(backend, state) == ({"old", "forever"}, {"old": 3000})


def test_rollback_leaves_expiries_as_committed(backend: Backend) -> None:
    committed_at(backend, 1, 1000, TTL, a=1)
    state = at(backend, 1800)
    state.put("a", 2)
    state.put("b", 2)
    state.prepare_commit(2)
    before = stored_keys(backend, state)
    state.rollback()
    assert stored_keys(backend, state) == before == ({"a"}, {"a": 2000})
    assert at(backend, 1999).get("a") == 1
    assert at(backend, 2000).get("a") is None
    # The next transaction's commit cleans up at its own timestamp, not the rolled-back one's.
    state = committed_at(backend, 2, 1900, TTL)
    assert stored_keys(backend, state) == ({"a"}, {"a": 2000})
    assert state.committed_time() == 1900


def test_a_prepared_delta_expires_by_its_own_expiry(backend: Backend) -> None:
    state = at(backend, 1000)
    state.put("a", 1)
    state.prepare_commit(1)
    assert at(backend, 1999).get("a") == 1  # a new state sees the pending prepare
    assert at(backend, 2000).get("a") is None
    assert dict(at(backend, 2000)) == {}


def test_without_a_timestamp_nothing_expires(backend: Backend) -> None:
    committed_at(backend, 1, 1000, TTL, a=1)
    assert backend.state().get("a") == 1
    assert dict(backend.state()) == {"a": 1}


def test_a_ttl_without_a_timestamp_is_refused(backend: Backend) -> None:
    with pytest.raises(ValueError, match="a TTL needs the transaction's timestamp"):
        backend.state().set_transaction_time(None, TTL)


def test_replace_stored_carries_expiries_over(backend: Backend) -> None:
    source = committed_at(backend, 1, 1000, TTL, a=1, b=2)
    committed_at(backend, 2, 1100, None, c=3)
    target = backend.state(backend.namespace + "-copy")
    target.replace_stored(
        2,
        source.scan_committed(),
        None,
        {},
        expiries=source.scan_expiries(),
        committed_time=source.committed_time(),
    )
    copy = backend.state(backend.namespace + "-copy")
    assert copy.committed_time() == 1100
    copy.set_transaction_time(1999)
    assert dict(copy) == {"a": 1, "b": 2, "c": 3}
    copy.set_transaction_time(2000)
    assert dict(copy) == {"c": 3}


@pytest.mark.parametrize(
    "backend", ["fakeredis", pytest.param("redis", marks=pytest.mark.redis)], indirect=True
)
def test_redis_deletes_expired_keys_in_bounded_chunks(
    backend: Backend, monkeypatch: pytest.MonkeyPatch
) -> None:
    import providers.redis._state as redis_state

    monkeypatch.setattr(redis_state, "EXPIRED_PER_COMMIT", 2)
    committed_at(backend, 1, 1000, TTL, **{f"k{i}": i for i in range(5)})
    state = committed_at(backend, 2, 2000, TTL, live=1)
    keys, index = stored_keys(backend, state)
    assert len(keys) == 4 and "live" in keys and index["live"] == 3000  # 2 of 5 deleted
    assert dict(at(backend, 2000)) == {"live": 1}  # the 3 left are hidden meanwhile
    state = committed_at(backend, 3, 2001, TTL)
    assert len(stored_keys(backend, state)[0]) == 2
    state = committed_at(backend, 4, 2002, TTL)
    assert stored_keys(backend, state) == ({"live"}, {"live": 3000})
