"""The emitters' partition metas on the driver."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from providers import InMemoryKeyValueStateProvider, StateFactory
from statefulbolts.transactional._emitting import OPAQUE, PARTITIONED, PLAIN, EmitterMetas
from statefulbolts.transactional._task import EmitOrder, EmitResult
from statefulbolts.transactional._txstate import TransactionalStateError


@pytest.fixture
def tid() -> Iterator[str]:
    name = f"emit-{uuid.uuid4().hex[:8]}"
    yield name
    InMemoryKeyValueStateProvider.drop(f"$transactional/{name}/")


def metas(kind: str, tid: str) -> EmitterMetas:
    return EmitterMetas(kind, tid, lambda ns: StateFactory.get_system_state(ns, {}))


def stored(m: EmitterMetas, p: int) -> dict[int, Any]:
    store = m.store(p)
    return {t: store.get(t) for t in store.txids()}


def test_partitioned_first_emission_is_new_and_its_meta_is_stored_at_once(tid: str) -> None:
    m = metas(PARTITIONED, tid)
    order = m.order(1, 2, None)
    assert order == EmitOrder(PARTITIONED, 2, None, {0: ("new", None), 1: ("new", None)})
    m.emitted(1, [EmitResult({0: [0, 3]}, 2), EmitResult({1: [0, 3]}, 2)])
    assert (stored(m, 0), stored(m, 1)) == ({1: [0, 3]}, {1: [0, 3]})
    # The next txid starts from each partition's latest meta.
    assert m.order(2, 2, None).partitions == {0: ("new", [0, 3]), 1: ("new", [0, 3])}


def test_partitioned_replays_use_the_stored_meta_and_never_start_anew(tid: str) -> None:
    m = metas(PARTITIONED, tid)
    m.order(1, 1, None)
    m.emitted(1, [EmitResult({0: [0, 3]}, 1)])
    m.failed_from(1)  # nothing kept for a partitioned spout: the stored meta stays
    assert m.order(1, 1, None).partitions == {0: ("replay", [0, 3])}
    # A driver restarted with the same id finds it too.
    again = metas(PARTITIONED, tid)
    assert again.order(1, 1, None).partitions == {0: ("replay", [0, 3])}


def test_partitioned_later_txid_stored_means_none_for_this_one(tid: str) -> None:
    m = metas(PARTITIONED, tid)
    m.store(0).override(5, [9, 3])  # a later txid already emitted this partition
    assert m.order(4, 1, None).partitions == {0: ("skip", None)}
    assert stored(m, 0) == {4: None, 5: [9, 3]}


def test_partitions_follow_the_count_taken_when_the_txid_started(tid: str) -> None:
    m = metas(PARTITIONED, tid)
    assert sorted(m.order(1, 2, None).partitions) == [0, 1]
    # A partition added later: absent from a replay of txid 1, present from txid 2 on.
    assert sorted(m.order(1, 2, None).partitions) == [0, 1]
    assert sorted(m.order(2, 3, 1).partitions) == [0, 1, 2]


def test_opaque_metas_are_kept_until_the_commit_then_stored(tid: str) -> None:
    m = metas(OPAQUE, tid)
    assert m.order(1, None, None).partitions == {}
    m.emitted(1, [EmitResult({0: [0, 2], 1: [0, 2]}, 2)])
    assert stored(m, 0) == {}  # not stored yet
    # txid 2 continues txid 1's latest emission, before txid 1 committed.
    assert m.order(2, None, None).partitions == {0: [0, 2], 1: [0, 2]}
    m.emitted(2, [EmitResult({0: [2, 2], 1: [2, 1]}, 2)])
    m.committed(1)
    assert (stored(m, 0), stored(m, 1)) == ({1: [0, 2]}, {1: [0, 2]})


def test_an_opaque_replay_starts_from_the_last_committed_meta(tid: str) -> None:
    m = metas(OPAQUE, tid)
    m.order(1, None, None)
    m.emitted(1, [EmitResult({0: [0, 2]}, 1)])
    m.committed(1)
    m.order(2, None, None)
    m.emitted(2, [EmitResult({0: [2, 2]}, 1)])
    m.order(3, None, None)
    m.emitted(3, [EmitResult({0: [4, 2]}, 1)])
    m.failed_from(2)  # 2 and 3 emit again
    assert m.order(2, None, 1).partitions == {0: [0, 2]}
    m.emitted(2, [EmitResult({0: [2, 1]}, 1)])  # a different batch this time
    assert m.order(3, None, 1).partitions == {0: [2, 1]}


def test_an_opaque_meta_left_by_a_half_failed_commit_is_deleted(tid: str) -> None:
    m = metas(OPAQUE, tid)
    m.store(0).override(1, [0, 2])
    m.store(0).override(2, [2, 2])  # stored by a commit of txid 2 that then failed
    assert m.order(2, None, 1).partitions == {0: [0, 2]}
    assert stored(m, 0) == {1: [0, 2]}


def test_a_restarted_driver_continues_every_opaque_partition_from_its_committed_meta(
    tid: str,
) -> None:
    m = metas(OPAQUE, tid)
    m.order(1, None, None)
    m.emitted(1, [EmitResult({0: [0, 2], 2: [0, 1]}, 3), EmitResult({1: [0, 2]}, 3)])
    m.committed(1)
    m.order(2, None, None)
    m.emitted(2, [EmitResult({0: [2, 2], 1: [2, 2], 2: [1, 1]}, 3)])  # never committed
    # A new driver keeps nothing in memory: it finds the partitions from the stored count.
    again = metas(OPAQUE, tid)
    assert again.known_partitions() == [0, 1, 2]
    assert again.order(2, None, 1).partitions == {0: [0, 2], 1: [0, 2], 2: [0, 1]}


def test_a_corrupt_opaque_partition_count_is_named(tid: str) -> None:
    index = StateFactory.get_system_state(f"$transactional/{tid}/partitions", {})
    index.put("count", "three")
    index.commit()
    with pytest.raises(TransactionalStateError, match=r"partitions.*'count' holds 'three'"):
        metas(OPAQUE, tid)


def test_after_a_commit_metas_below_it_go_and_its_own_stays(tid: str) -> None:
    m = metas(PARTITIONED, tid)
    for txid, meta in [(1, [0, 3]), (2, [3, 3]), (3, [6, 3])]:
        m.order(txid, 1, None)
        m.emitted(txid, [EmitResult({0: meta}, 1)])
    m.committed(2)
    assert stored(m, 0) == {2: [3, 3], 3: [6, 3]}


def test_a_plain_spout_has_no_partitions(tid: str) -> None:
    m = metas(PLAIN, tid)
    assert m.order(3, {"meta": 1}, 2) == EmitOrder(PLAIN, {"meta": 1}, 2)
    m.emitted(3, [EmitResult({}, 0)])
    m.committed(3)
    assert m.known_partitions() == []
    with pytest.raises(ValueError, match="unknown kind"):
        metas("wavy", tid)
