"""InMemoryKeyValueState and its provider, with our fixes (docs/guarantees.md)."""

from __future__ import annotations

from contextlib import contextmanager

import pytest

from providers import (
    DriverOwnedStateProvider,
    InMemoryKeyValueState,
    InMemoryKeyValueStateProvider,
    StateFactory,
    StateSerializationError,
    StateTransactionError,
)

NS = "topo/count-0"


@pytest.fixture
def store(monkeypatch):
    """A private, empty provider store for the test."""
    fresh: dict = {}
    monkeypatch.setattr(InMemoryKeyValueStateProvider, "_store", fresh)
    return fresh


def committed(state: InMemoryKeyValueState) -> dict:
    """What a brand-new state object on the same image reads (committed + prepared)."""
    return dict(InMemoryKeyValueState(state.namespace, state._image))


# ----------------------------------------------------------------- reads and writes


def test_put_get_delete_and_defaults():
    state = InMemoryKeyValueState(NS)
    assert state.get("a") is None
    assert state.get("a", 0) == 0
    state.put("a", 1)
    state.put("b", {"x": [1, 2]})
    assert state.get("a") == 1
    assert state.get("a", 0) == 1
    assert state.get("b") == {"x": [1, 2]}
    assert state.delete("a") == 1
    assert state.delete("a") is None
    assert state.delete("never") is None
    assert state.get("a") is None
    assert dict(state) == {"b": {"x": [1, 2]}}
    assert len(state) == 1


def test_none_value_is_rejected():
    state = InMemoryKeyValueState(NS)
    with pytest.raises(StateSerializationError, match="None is not a storable value.*'k'"):
        state.put("k", None)
    assert dict(state) == {}


def test_unencodable_value_is_rejected_naming_the_key():
    state = InMemoryKeyValueState(NS)
    with pytest.raises(StateSerializationError, match="value for key 'k' cannot be stored"):
        state.put("k", object())


def test_mutating_a_put_object_afterwards_does_not_change_state():
    state = InMemoryKeyValueState(NS)
    value = [1, 2]
    state.put("k", value)
    value.append(3)
    assert state.get("k") == [1, 2]
    state.prepare_commit(0)
    state.commit(0)
    value.append(4)
    assert state.get("k") == [1, 2]
    got = state.get("k")
    got.append(99)  # nor does mutating what get returned
    assert state.get("k") == [1, 2]


def test_iteration_yields_each_live_key_once_newest_value_wins():
    state = InMemoryKeyValueState(NS)
    state.put("a", 1)
    state.put("b", 1)
    state.put("c", 1)
    state.prepare_commit(0)
    state.commit(0)
    state.put("b", 2)
    state.delete("c")
    state.prepare_commit(1)
    state.put("a", 3)
    state.put("d", 3)
    assert sorted(state) == [("a", 3), ("b", 2), ("d", 3)]
    assert len(state) == 3
    assert sorted(state.items()) == sorted(state)


# ----------------------------------------------------------------- prepare / commit / rollback


def test_prepare_then_commit_makes_writes_durable():
    state = InMemoryKeyValueState(NS)
    state.put("a", 1)
    state.prepare_commit(0)
    assert (state.prepared_txid, state.committed_txid) == (0, None)
    state.commit(0)
    assert (state.prepared_txid, state.committed_txid) == (None, 0)
    state.put("b", 2)
    state.rollback()
    assert dict(state) == {"a": 1}


def test_rollback_drops_pending_and_prepared_writes():
    state = InMemoryKeyValueState(NS)
    state.put("a", 1)
    state.prepare_commit(0)
    state.commit(0)
    state.put("a", 2)
    state.put("b", 2)
    state.prepare_commit(1)
    state.put("c", 3)
    state.rollback()
    assert dict(state) == {"a": 1}
    assert (state.prepared_txid, state.committed_txid) == (None, 0)
    # The rolled-back txid can be prepared again.
    state.put("d", 4)
    state.prepare_commit(1)
    state.commit(1)
    assert dict(state) == {"a": 1, "d": 4}


def test_rollback_with_nothing_committed_empties_the_state():
    state = InMemoryKeyValueState(NS)
    state.put("a", 1)
    state.prepare_commit(0)
    state.rollback()
    assert dict(state) == {}
    assert state.get("a") is None


def test_rollback_does_not_alias_the_committed_snapshot_storm_returns_b():
    """Storm's sequence: put a, prepare 1, commit 1, rollback, put b, rollback."""
    state = InMemoryKeyValueState(NS)
    state.put("a", 1)
    state.prepare_commit(1)
    state.commit(1)
    state.rollback()
    state.put("b", 2)
    state.rollback()
    assert state.get("b") is None  # Storm returns 2: its live map *is* the committed one
    assert dict(state) == {"a": 1}


def test_recommit_of_the_committed_txid_is_a_no_op_storm_loops_forever():
    state = InMemoryKeyValueState(NS)
    state.put("a", 1)
    state.prepare_commit(3)
    state.commit(3)
    state.put("b", 2)  # pending, not part of txid 3
    state.commit(3)  # a retried COMMIT(3): Storm throws, and the spout retries forever
    assert state.committed_txid == 3
    assert committed(state) == {"a": 1}
    assert dict(state) == {"a": 1, "b": 2}


def test_commit_without_prepare_raises():
    state = InMemoryKeyValueState(NS)
    state.put("a", 1)
    with pytest.raises(StateTransactionError, match="cannot commit txid 0; prepared txid is None"):
        state.commit(0)


def test_commit_of_another_txid_than_the_prepared_one_raises():
    state = InMemoryKeyValueState(NS)
    state.prepare_commit(2)
    with pytest.raises(StateTransactionError, match="cannot commit txid 3; prepared txid is 2"):
        state.commit(3)


def test_commit_of_an_older_txid_than_the_committed_one_raises():
    state = InMemoryKeyValueState(NS)
    state.prepare_commit(5)
    state.commit(5)
    with pytest.raises(StateTransactionError, match="committed txid is 5"):
        state.commit(4)


def test_prepare_of_a_newer_txid_while_one_is_prepared_raises():
    state = InMemoryKeyValueState(NS)
    state.put("a", 1)
    state.prepare_commit(1)
    with pytest.raises(
        StateTransactionError, match="cannot prepare txid 2 while txid 1 is prepared"
    ):
        state.prepare_commit(2)
    assert state.prepared_txid == 1


def test_prepare_at_or_below_the_committed_txid_raises():
    state = InMemoryKeyValueState(NS)
    state.prepare_commit(4)
    state.commit(4)
    for txid in (3, 4):
        with pytest.raises(StateTransactionError, match="txid 4 is already committed"):
            state.prepare_commit(txid)


def test_preparing_the_same_txid_again_adds_newer_writes():
    state = InMemoryKeyValueState(NS)
    state.put("a", 1)
    state.put("b", 1)
    state.prepare_commit(1)
    state.put("b", 2)
    state.delete("a")
    state.put("c", 3)
    state.prepare_commit(1)
    state.commit(1)
    assert committed(state) == {"b": 2, "c": 3}


def test_no_arg_commit_commits_pending_writes_at_once():
    state = InMemoryKeyValueState(NS)
    state.put("__state", [0, "PREPARING"])
    state.commit()
    assert state.committed_txid == -1
    state.put("__state", [0, "COMMITTING"])
    state.commit()
    state.put("x", 1)
    state.rollback()
    assert dict(state) == {"__state": [0, "COMMITTING"]}
    assert state.committed_txid == -1


def test_storm_prepare_commit_rollback_sequence():
    """Storm's testPrepareCommitRollback steps, read on the in-memory state."""
    state = InMemoryKeyValueState(NS)
    state.put("a", 1)
    state.put("b", 2)
    state.prepare_commit(1)
    state.put("c", 3)
    state.rollback()
    assert [state.get(k) for k in "abc"] == [None, None, None]
    state.put("a", 1)
    state.put("b", 2)
    state.prepare_commit(1)
    state.commit(1)
    state.put("c", 3)
    state.rollback()
    assert [state.get(k) for k in "abc"] == [1, 2, None]
    state.put("c", 3)
    assert state.delete("b") == 2
    assert state.delete("c") == 3
    state.prepare_commit(2)
    state.commit(2)
    assert dict(state) == {"a": 1}
    state.put("b", 2)
    state.prepare_commit(3)
    state.put("c", 3)
    state.rollback()
    assert [state.get(k) for k in "abc"] == [1, None, None]
    assert (state.prepared_txid, state.committed_txid) == (None, 2)


# ----------------------------------------------------------------- provider


def test_provider_is_driver_owned_and_the_default(store):
    provider = InMemoryKeyValueStateProvider()
    assert isinstance(provider, DriverOwnedStateProvider)
    assert isinstance(StateFactory.get_state(NS, {}), InMemoryKeyValueState)


def test_new_state_on_the_same_namespace_sees_committed_data_and_pending_prepare(store):
    provider = InMemoryKeyValueStateProvider()
    first = provider.new_state(NS, {})
    first.put("a", 1)
    first.prepare_commit(0)
    first.commit(0)
    first.put("b", 2)
    first.prepare_commit(1)
    first.put("c", 3)  # pending in the first object only
    second = provider.new_state(NS, {})
    assert dict(second) == {"a": 1, "b": 2}
    assert (second.committed_txid, second.prepared_txid) == (0, 1)
    second.commit(1)  # the prepare of another object on the namespace can be committed
    assert dict(provider.new_state(NS, {})) == {"a": 1, "b": 2}
    other = provider.new_state("topo/count-1", {})
    assert dict(other) == {}


def test_states_made_through_state_factory_share_the_store(store):
    state = StateFactory.get_state(NS, {})
    state.put("k", 1)
    state.prepare_commit(0)
    state.commit(0)
    assert StateFactory.get_state(NS, {}).get("k") == 1
    InMemoryKeyValueStateProvider.drop("topo/")
    assert StateFactory.get_state(NS, {}).get("k") is None


def test_drop_forgets_only_matching_namespaces(store):
    provider = InMemoryKeyValueStateProvider()
    for ns in ("a/x-0", "a/y-0", "b/x-0"):
        state = provider.new_state(ns, {})
        state.put("k", ns)
        state.commit()
    InMemoryKeyValueStateProvider.drop("a/")
    assert sorted(store) == ["b/x-0"]


@contextmanager
def process(monkeypatch, image_store: dict):
    """Run the block as if in the process whose provider store is ``image_store``."""
    with monkeypatch.context() as m:
        m.setattr(InMemoryKeyValueStateProvider, "_store", image_store)
        yield InMemoryKeyValueStateProvider()


def test_image_and_changes_round_trip_reproduce_identical_state(monkeypatch):
    driver: dict = {}
    task: dict = {}
    with process(monkeypatch, driver) as p:
        state = p.new_state(NS, {})
        state.put("a", 1)
        state.put("gone", 0)
        state.prepare_commit(0)
        state.commit(0)
        shipped = p.export_image(NS)

    # Transaction 1 on the task: PREPARE.
    with process(monkeypatch, task) as p:
        p.import_image(NS, shipped)
        state = p.new_state(NS, {})
        assert dict(state) == {"a": 1, "gone": 0}
        state.put("b", [1, {"x": 2}])
        state.delete("gone")
        state.put("a", 10)
        state.prepare_commit(1)
        changes = p.take_changes(NS)
        assert p.take_changes(NS) is None  # taken once
        task_image = p.export_image(NS)
    with process(monkeypatch, driver) as p:
        p.apply_changes(NS, changes)
        assert p.export_image(NS) == task_image
        assert dict(p.new_state(NS, {})) == {"a": 10, "b": [1, {"x": 2}]}
        assert p.new_state(NS, {}).prepared_txid == 1
        shipped = p.export_image(NS)

    # Transaction 2 on a fresh task process: COMMIT, then a rolled-back write.
    task2: dict = {}
    with process(monkeypatch, task2) as p:
        p.import_image(NS, shipped)
        state = p.new_state(NS, {})
        state.commit(1)
        state.put("c", 3)
        state.prepare_commit(2)
        state.rollback()
        changes = p.take_changes(NS)
        task_image = p.export_image(NS)
    with process(monkeypatch, driver) as p:
        p.apply_changes(NS, changes)
        assert p.export_image(NS) == task_image
        state = p.new_state(NS, {})
        assert dict(state) == {"a": 10, "b": [1, {"x": 2}]}
        assert (state.committed_txid, state.prepared_txid) == (1, None)


def test_no_arg_commit_round_trips_too(monkeypatch):
    driver: dict = {}
    with process(monkeypatch, driver) as p:
        shipped = p.export_image(NS)
    with process(monkeypatch, {}) as p:
        p.import_image(NS, shipped)
        state = p.new_state(NS, {})
        state.put("k", "v")
        state.commit()
        changes = p.take_changes(NS)
    with process(monkeypatch, driver) as p:
        p.apply_changes(NS, changes)
        state = p.new_state(NS, {})
        assert (dict(state), state.committed_txid) == ({"k": "v"}, -1)


def test_untouched_image_has_no_changes(monkeypatch):
    with process(monkeypatch, {}) as p:
        p.import_image(NS, InMemoryKeyValueStateProvider().export_image("other/x-0"))
        p.new_state(NS, {}).get("k")
        assert p.take_changes(NS) is None


def test_driver_side_states_keep_no_change_log(store):
    """The checkpoint spout saves on the driver several times per transaction, for the life of
    the run; nobody takes those changes, so recording them would grow without bound."""
    provider = InMemoryKeyValueStateProvider()
    state = provider.new_state("topo/$checkpointspout-0", {})
    for txid in range(1000):
        state.put("__state", [txid, "COMMITTED"])
        state.commit()
    assert provider.take_changes("topo/$checkpointspout-0") is None
    assert store["topo/$checkpointspout-0"].changes == []


def test_bad_change_log_raises(monkeypatch):
    import msgpack

    with process(monkeypatch, {}) as p, pytest.raises(StateTransactionError, match="'explode'"):
        p.apply_changes(NS, msgpack.packb([["explode"]]))
