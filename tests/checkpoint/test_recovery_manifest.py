"""checkpoint._manifest: saving a transaction's message ids and reading them back on recovery."""

from __future__ import annotations

import dataclasses
import enum
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from checkpoint import MANIFEST_KEY, CheckPointState, SpoutMessages, TransactionManifest, TxPhase
from providers import (
    STATE_PROVIDER_KEY,
    InMemoryKeyValueState,
    InMemoryKeyValueStateProvider,
    KeyValueState,
    StateFactory,
)
from statefulbolts.errors import CheckpointError

GROUPS = [
    SpoutMessages("words", 0, ["1700000000000-0", "1700000000000-1"]),
    SpoutMessages("words", 1, [7, 8, 9]),
    SpoutMessages("numbers", 0, [-1]),
]


class Store:
    """The checkpoint spout's state of one provider: ``open()`` is what a restarted driver gets."""

    def __init__(self, provider: str) -> None:
        self.conf = {STATE_PROVIDER_KEY: provider}
        self.namespace = f"manifest-{uuid.uuid4().hex[:8]}/$checkpointspout-0"

    def open(self) -> KeyValueState:
        state = StateFactory.get_state(self.namespace, self.conf)
        assert isinstance(state, KeyValueState)
        return state


@pytest.fixture(params=["memory", "fakeredis"])
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    if request.param == "memory":
        s = Store("providers.memory.InMemoryKeyValueStateProvider")
        yield s
        InMemoryKeyValueStateProvider.drop(s.namespace.split("/")[0])
    else:
        import fakeredis

        from providers.redis import override_client

        with override_client(fakeredis.FakeRedis(server=fakeredis.FakeServer())):
            yield Store("providers.redis.RedisKeyValueStateProvider")


def saved(store: Store, txid: int, groups: list[SpoutMessages]) -> None:
    """What a driver does before COMMITTING(txid): save the manifest, then commit the state."""
    state = store.open()
    assert TransactionManifest(state).save(txid, groups) is True
    state.commit()


# --------------------------------------------------------------------------- round trip
def test_committed_transaction_gives_back_its_messages_after_a_restart(store):
    saved(store, 4, GROUPS)
    manifest = TransactionManifest(store.open())
    assert manifest.recover(CheckPointState(4, TxPhase.COMMITTED)) == GROUPS
    assert not manifest.pending
    assert manifest.committed(4) == []  # handed out once


def test_committing_transaction_waits_for_its_commit(store):
    saved(store, 4, GROUPS)
    manifest = TransactionManifest(store.open())
    assert manifest.recover(CheckPointState(4, TxPhase.COMMITTING)) == []
    assert manifest.pending
    assert manifest.committed(3) == [] and manifest.committed(5) == []
    assert manifest.pending  # another txid's commit does not release them
    assert manifest.committed(4) == GROUPS
    assert not manifest.pending
    assert manifest.committed(4) == []


def test_the_stored_form_is_plain_lists_under_txn(store):
    saved(store, 2, GROUPS[:2])
    assert store.open().get(MANIFEST_KEY) == {
        "txid": 2,
        "spouts": [
            ["words", 0, ["1700000000000-0", "1700000000000-1"]],
            ["words", 1, [7, 8, 9]],
        ],
    }


def test_tuple_and_set_message_ids_come_back_as_the_spout_gave_them(store):
    """A spout keeps its pending messages by id: a restart must ack ``("p", 7)``, not a list."""
    groups = [SpoutMessages("events", 0, [("p0", 7), ("p1", (3, "x")), frozenset({1, 2}), 9])]
    saved(store, 4, groups)
    [recovered] = TransactionManifest(store.open()).recover(CheckPointState(4, TxPhase.COMMITTED))
    assert recovered == groups[0]
    assert [type(i) for i in recovered.msg_ids] == [tuple, tuple, frozenset, int]
    assert type(recovered.msg_ids[1][1]) is tuple


class Kind(enum.IntEnum):
    A = 1


@dataclasses.dataclass(frozen=True)
class Offset:
    partition: int
    offset: int


@pytest.mark.parametrize("bad", [Kind.A, Offset(0, 7), ("p", Kind.A)])
def test_ids_that_would_not_read_back_as_they_are_fall_back_to_at_least_once(store, caplog, bad):
    """An IntEnum would come back an int, a dataclass a dict: acking those finds nothing."""
    caplog.set_level(logging.WARNING, logger="checkpoint._manifest")
    state = store.open()
    assert TransactionManifest(state).save(3, [SpoutMessages("words", 0, [1, bad])]) is False
    assert state.get(MANIFEST_KEY) == {"txid": 3, "spouts": None}
    [warning] = manifest_warnings(caplog)
    assert "message ids cannot be kept exactly: msgpack cannot encode an object of type" in warning


def test_a_later_transaction_replaces_the_manifest(store):
    saved(store, 4, GROUPS)
    saved(store, 5, [SpoutMessages("words", 0, ["x"])])
    manifest = TransactionManifest(store.open())
    assert manifest.recover(CheckPointState(4, TxPhase.COMMITTED)) == []
    assert manifest.recover(CheckPointState(5, TxPhase.COMMITTED)) == [
        SpoutMessages("words", 0, ["x"])
    ]


def test_save_only_puts_the_caller_commits():
    state = InMemoryKeyValueState("t/$checkpointspout-0")
    TransactionManifest(state).save(1, GROUPS)
    assert state.get(MANIFEST_KEY)["txid"] == 1
    state.rollback()
    assert state.get(MANIFEST_KEY) is None


# --------------------------------------------------------------------------- phase rules
@pytest.mark.parametrize(
    "current",
    [
        CheckPointState(4, TxPhase.PREPARING),  # t rolls back: its messages are replayed
        CheckPointState(3, TxPhase.COMMITTED),  # the manifest is of a later transaction
        CheckPointState(5, TxPhase.COMMITTING),  # ... or of an earlier one
        CheckPointState(5, TxPhase.COMMITTED),
    ],
    ids=str,
)
def test_nothing_is_acked_unless_the_saved_transaction_may_have_committed(current):
    state = InMemoryKeyValueState("t/$checkpointspout-0")
    TransactionManifest(state).save(4, GROUPS)
    manifest = TransactionManifest(state)
    assert manifest.recover(current) == []
    assert not manifest.pending
    assert manifest.committed(current.txid) == [] and manifest.committed(4) == []


def test_a_fresh_state_has_nothing_to_recover():
    manifest = TransactionManifest(InMemoryKeyValueState("t/$checkpointspout-0"))
    assert manifest.recover(CheckPointState(-1, TxPhase.COMMITTED)) == []
    assert not manifest.pending


def test_recovering_again_forgets_what_was_pending():
    state = InMemoryKeyValueState("t/$checkpointspout-0")
    manifest = TransactionManifest(state)
    manifest.save(4, GROUPS)
    manifest.recover(CheckPointState(4, TxPhase.COMMITTING))
    assert manifest.pending
    manifest.recover(CheckPointState(4, TxPhase.PREPARING))
    assert not manifest.pending and manifest.committed(4) == []


# --------------------------------------------------------------------------- at-least-once fallback
def manifest_warnings(caplog: Any) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "checkpoint._manifest"]


def test_unserializable_ids_save_none_and_warn_once_per_manifest(store, caplog):
    caplog.set_level(logging.WARNING, logger="checkpoint._manifest")
    state = store.open()
    manifest = TransactionManifest(state)
    bad = [SpoutMessages("words", 0, ["ok", object()])]
    assert manifest.save(3, bad) is False
    assert state.get(MANIFEST_KEY) == {"txid": 3, "spouts": None}
    assert manifest.save(4, bad) is False
    assert state.get(MANIFEST_KEY) == {"txid": 4, "spouts": None}
    warnings = manifest_warnings(caplog)
    assert len(warnings) == 1 and "at-least-once" in warnings[0]
    assert manifest.save(5, GROUPS) is True  # ids that serialize are saved again
    assert TransactionManifest(state).save(6, bad) is False
    assert len(manifest_warnings(caplog)) == 2  # a new manifest object warns for itself


def test_a_manifest_without_ids_acks_nothing(store):
    state = store.open()
    TransactionManifest(state).save(3, [SpoutMessages("words", 0, [object()])])
    state.commit()
    manifest = TransactionManifest(store.open())
    assert manifest.recover(CheckPointState(3, TxPhase.COMMITTED)) == []
    assert manifest.recover(CheckPointState(3, TxPhase.COMMITTING)) == []
    assert not manifest.pending


# --------------------------------------------------------------------------- what is read back
@pytest.mark.parametrize(
    "value",
    [
        [3, [["words", 0, ["a"]]]],
        {"txid": "3", "spouts": None},
        {"txid": True, "spouts": None},
        {"txid": 3, "spouts": "words"},
        {"txid": 3, "spouts": [["words", "0", ["a"]]]},
        {"txid": 3, "spouts": [["words", 0]]},
        {"txid": 3, "spouts": [[0, 0, ["a"]]]},
    ],
)
def test_a_manifest_not_in_the_saved_form_is_a_checkpoint_error(value):
    state = InMemoryKeyValueState("t/$checkpointspout-0")
    state.put(MANIFEST_KEY, value)
    with pytest.raises(CheckpointError, match="saved transaction manifest"):
        TransactionManifest(state).recover(CheckPointState(3, TxPhase.COMMITTED))
