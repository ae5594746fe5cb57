"""The lease contract (``providers._lease``), one suite over every provider that keeps leases.

A durable provider (fakeredis, a real redis-server, the extlib SQLite file) hands out leases
and fences its states' writes; the in-memory provider, whose state lives in one driver, has no
lease store. States come from ``StateFactory.get_state`` with ``FENCE_EPOCH_KEY`` in the config,
as a driver's tasks get them, so the factory's part of step 3 is exercised too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
import test_state_contract
from test_state_contract import Backend

from providers import (
    FENCE_EPOCH_KEY,
    KeyValueState,
    Lease,
    LeaseHeldError,
    LeaseHolder,
    LeaseLostError,
    LeaseStore,
    StateFactory,
    StateFencedError,
    get_provider,
)

# The contract suite's fixture: a Backend per provider (memory, fakeredis, redis, sqlite).
backend = test_state_contract.backend
LEASED = ["fakeredis", pytest.param("redis", marks=pytest.mark.redis), "sqlite"]
leased = pytest.mark.parametrize("backend", LEASED, indirect=True)

FIRST = LeaseHolder("host-a", 101, 1_780_000_000.0, process="9001", token="supervisor-1")
SECOND = LeaseHolder("host-b", 202, 1_780_000_100.0)
TTL_MS = 60_000
# How long a lapse may take to show under load before a test gives up (never a fixed wait).
DEADLINE_S = 10.0


def scope_of(backend: Backend) -> str:
    """The scope the backend's namespace is under (``contract-xxxxxxxx/``)."""
    return backend.namespace.split("/")[0] + "/"


def leases(backend: Backend) -> LeaseStore:
    conf = backend.conf()
    store = get_provider(conf).lease_store(conf)
    assert isinstance(store, LeaseStore)
    return store


def fenced_state(backend: Backend, epoch: int, namespace: str | None = None) -> Any:
    """A state as a driver of lease ``epoch`` and its tasks get it (``FENCE_EPOCH_KEY``)."""
    conf = {**backend.conf(), FENCE_EPOCH_KEY: epoch}
    state = StateFactory.get_state(namespace or backend.namespace, conf)
    assert isinstance(state, KeyValueState)
    return state


def image(state: Any) -> tuple[Any, dict[Any, Any], Any, dict[Any, Any]]:
    """A namespace's stored image, decoded: (committed txid, committed, prepared txid, delta)."""
    committed_txid, prepared_txid = state.stored_txids()
    committed = {state.decode_key(k): state.decode_value(v) for k, v in state.scan_committed()}
    prepared = {
        state.decode_key(k): None if v is None else state.decode_value(v)
        for k, v in state.scan_prepared()
    }
    return committed_txid, committed, prepared_txid, prepared


def committed_then_prepared(state: Any) -> None:
    """Committed {a: 1, b: 2} at txid 1; prepared at txid 2: a -> 10, b deleted, c -> 3."""
    state.put("a", 1)
    state.put("b", 2)
    state.prepare_commit(1)
    state.commit(1)
    state.put("a", 10)
    state.delete("b")
    state.put("c", 3)
    state.prepare_commit(2)


WRITTEN = (1, {"a": 1, "b": 2}, 2, {"a": 10, "b": None, "c": 3})


def lapsed(store: LeaseStore, scope: str) -> Lease:
    """Poll until the scope's lease has lapsed (by the store's clock), with a deadline."""
    deadline = time.monotonic() + DEADLINE_S
    while True:
        lease = store.read(scope)
        assert lease is not None
        if not lease.live:
            return lease
        assert time.monotonic() < deadline, f"lease {lease} did not lapse in {DEADLINE_S} s"
        time.sleep(0.02)


# --- who has a lease store ----------------------------------------------------------------------
def test_a_provider_whose_state_lives_in_the_driver_has_no_lease_store(backend: Backend) -> None:
    conf = backend.conf()
    store = get_provider(conf).lease_store(conf)
    if backend.name == "memory":
        assert store is None
    else:
        assert isinstance(store, LeaseStore)


# --- acquire, renew, release ----------------------------------------------------------------
@leased
def test_a_scope_never_taken_has_no_lease_and_no_holders(backend: Backend) -> None:
    store = leases(backend)
    assert store.read(scope_of(backend)) is None
    assert store.holders(scope_of(backend)) == {}


@leased
def test_epochs_strictly_increase_across_grants(backend: Backend) -> None:
    store, scope = leases(backend), scope_of(backend)
    first = store.acquire(scope, FIRST, TTL_MS)
    assert (first.scope, first.holder, first.ttl_ms, first.live) == (scope, FIRST, TTL_MS, True)
    assert 0 < first.remaining_ms <= TTL_MS
    assert store.release(scope, first.epoch)
    second = store.acquire(scope, SECOND, TTL_MS)
    third = store.acquire(scope, FIRST, TTL_MS, over=second.epoch)
    assert first.epoch < second.epoch < third.epoch
    read = store.read(scope)
    assert read is not None
    assert (read.epoch, read.holder, read.live) == (third.epoch, FIRST, True)


@leased
def test_a_live_lease_stays_with_its_holder(backend: Backend) -> None:
    store, scope = leases(backend), scope_of(backend)
    first = store.acquire(scope, FIRST, TTL_MS)
    with pytest.raises(LeaseHeldError) as info:
        store.acquire(scope, SECOND, TTL_MS)
    held = info.value.lease
    assert held is not None
    assert (held.epoch, held.holder, held.live) == (first.epoch, FIRST, True)
    message = str(info.value)
    assert scope in message
    assert FIRST.describe() in message
    assert " s left" in message
    assert f"over={first.epoch}" in message
    after = store.read(scope)
    assert after is not None
    assert (after.epoch, after.holder) == (first.epoch, FIRST)


@leased
def test_over_the_live_epoch_takes_over_and_a_wrong_epoch_is_refused(backend: Backend) -> None:
    store, scope = leases(backend), scope_of(backend)
    first = store.acquire(scope, FIRST, TTL_MS)
    with pytest.raises(LeaseHeldError) as info:
        store.acquire(scope, SECOND, TTL_MS, over=first.epoch + 1)
    assert info.value.lease is not None and info.value.lease.holder == FIRST
    taken = store.acquire(scope, SECOND, TTL_MS, over=first.epoch)
    assert taken.epoch > first.epoch
    assert taken.holder == SECOND
    with pytest.raises(LeaseHeldError):
        store.acquire(scope, FIRST, TTL_MS, over=first.epoch)  # the epoch it no longer has


@leased
def test_of_concurrent_take_overs_of_one_lease_exactly_one_wins(backend: Backend) -> None:
    store, scope = leases(backend), scope_of(backend)
    first = store.acquire(scope, FIRST, TTL_MS)
    contenders = [LeaseHolder(f"host-{i}", 300 + i, 0.0) for i in range(4)]
    start = threading.Barrier(len(contenders))
    won: list[Lease] = []
    refused: list[LeaseHeldError] = []

    def take_over(holder: LeaseHolder) -> None:
        start.wait()
        try:
            won.append(store.acquire(scope, holder, TTL_MS, over=first.epoch))
        except LeaseHeldError as exc:
            refused.append(exc)

    threads = [threading.Thread(target=take_over, args=(h,)) for h in contenders]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=DEADLINE_S)
    assert len(won) == 1
    assert len(refused) == len(contenders) - 1
    winner = won[0]
    assert [exc.lease.epoch for exc in refused if exc.lease] == [winner.epoch] * len(refused)
    read = store.read(scope)
    assert read is not None
    assert (read.epoch, read.holder) == (winner.epoch, winner.holder)


@leased
def test_renew_extends_the_holders_lease_and_fails_once_taken_over(backend: Backend) -> None:
    store, scope = leases(backend), scope_of(backend)
    first = store.acquire(scope, FIRST, 5_000)
    renewed = store.renew(scope, first.epoch, TTL_MS)
    assert (renewed.epoch, renewed.holder, renewed.ttl_ms) == (first.epoch, FIRST, TTL_MS)
    assert 5_000 < renewed.remaining_ms <= TTL_MS
    taken = store.acquire(scope, SECOND, TTL_MS, over=first.epoch)
    with pytest.raises(LeaseLostError) as info:
        store.renew(scope, first.epoch, TTL_MS)
    lost = info.value.lease
    assert lost is not None
    assert (lost.epoch, lost.holder) == (taken.epoch, SECOND)
    assert scope in str(info.value)
    assert SECOND.describe() in str(info.value)
    read = store.read(scope)
    assert read is not None and read.epoch == taken.epoch  # the failed renewal wrote nothing


@leased
def test_release_then_acquire_is_immediate(backend: Backend) -> None:
    store, scope = leases(backend), scope_of(backend)
    first = store.acquire(scope, FIRST, TTL_MS)
    assert not store.release(scope, first.epoch + 1)  # not its epoch: nothing changes
    still = store.read(scope)
    assert still is not None and still.live
    assert store.release(scope, first.epoch)
    released = store.read(scope)
    assert released is not None
    assert (released.epoch, released.holder, released.live) == (first.epoch, FIRST, False)
    second = store.acquire(scope, SECOND, TTL_MS)  # no over, no waiting
    assert second.epoch > first.epoch
    assert not store.release(scope, first.epoch)


@leased
def test_a_short_lease_lapses_and_goes_to_another_without_over(backend: Backend) -> None:
    store, scope = leases(backend), scope_of(backend)
    first = store.acquire(scope, FIRST, 200)
    gone = lapsed(store, scope)
    assert (gone.epoch, gone.holder) == (first.epoch, FIRST)
    assert "lapsed, last held by" in gone.describe()
    second = store.acquire(scope, SECOND, TTL_MS)
    assert second.epoch > first.epoch
    with pytest.raises(LeaseLostError):
        store.renew(scope, first.epoch, TTL_MS)


@leased
def test_a_lapsed_lease_nobody_took_is_renewed(backend: Backend) -> None:
    store, scope = leases(backend), scope_of(backend)
    first = store.acquire(scope, FIRST, 200)
    lapsed(store, scope)
    renewed = store.renew(scope, first.epoch, TTL_MS)
    assert (renewed.epoch, renewed.live) == (first.epoch, True)
    with pytest.raises(LeaseHeldError):
        store.acquire(scope, SECOND, TTL_MS)


@leased
def test_holders_are_the_recent_grants_by_epoch(backend: Backend) -> None:
    store, scope = leases(backend), scope_of(backend)
    granted: dict[int, LeaseHolder] = {}
    lease = None
    for i in range(20):
        holder = LeaseHolder(f"host-{i}", 1000 + i, 1_780_000_000.0 + i, token=f"t{i}")
        lease = store.acquire(scope, holder, TTL_MS, over=None if lease is None else lease.epoch)
        granted[lease.epoch] = holder
    found = store.holders(scope)
    epochs = sorted(granted)
    assert list(found) == epochs[-16:]  # by epoch, the last 16 (the contract asks for 8)
    assert found == {e: granted[e] for e in epochs[-16:]}


@leased
def test_bad_scopes_and_times_to_live_are_refused(backend: Backend) -> None:
    store = leases(backend)
    with pytest.raises(ValueError, match="ending in '/'"):
        store.acquire("wc", FIRST, TTL_MS)
    with pytest.raises(ValueError, match="ttl_ms must be a positive int"):
        store.acquire(scope_of(backend), FIRST, 0)
    assert store.read(scope_of(backend)) is None


# --- fencing --------------------------------------------------------------------------------
def _prepare(state: Any) -> None:
    state.put("z", 9)
    state.prepare_commit(2)  # the same txid again: would merge


def _commit_without_txid(state: Any) -> None:
    state.put("z", 9)
    state.commit()


def _replace(state: Any) -> None:
    state.replace_stored(7, iter([(b"\xa1z", b"\x09")]), None, {})


WRITES: dict[str, Callable[[Any], None]] = {
    "prepare": _prepare,
    "commit": lambda state: state.commit(2),
    "commit without txid": _commit_without_txid,
    "rollback": lambda state: state.rollback(),
    "replace": _replace,
}


@leased
@pytest.mark.parametrize("write", list(WRITES))
def test_a_state_of_a_driver_taken_over_is_refused_and_writes_nothing(
    backend: Backend, write: str
) -> None:
    store, scope = leases(backend), scope_of(backend)
    first = store.acquire(scope, FIRST, TTL_MS)
    stale = fenced_state(backend, first.epoch)
    committed_then_prepared(stale)
    second = store.acquire(scope, SECOND, TTL_MS, over=first.epoch)
    reader = backend.state()  # unfenced, as the state tool reads
    assert image(reader) == WRITTEN
    # The stale driver's state object from before the take-over, and one it makes after.
    for state in (stale, fenced_state(backend, first.epoch)):
        with pytest.raises(StateFencedError) as info:
            WRITES[write](state)
        assert (info.value.epoch, info.value.fence) == (first.epoch, second.epoch)
        message = str(info.value)
        assert f"state {backend.namespace!r}" in message
        assert f"lease epoch {first.epoch} refused" in message
        assert f"written under epoch {second.epoch} since" in message
        assert image(backend.state()) == WRITTEN
        assert backend.state().stored_fence() == second.epoch
    conf = backend.conf()
    assert get_provider(conf).namespaces(conf, scope) == [backend.namespace]


@leased
def test_a_state_of_the_new_epoch_writes_every_step(backend: Backend) -> None:
    store, scope = leases(backend), scope_of(backend)
    first = store.acquire(scope, FIRST, TTL_MS)
    committed_then_prepared(fenced_state(backend, first.epoch))
    second = store.acquire(scope, SECOND, TTL_MS, over=first.epoch)
    state = fenced_state(backend, second.epoch)
    state.commit(2)  # the new driver finishes what the old one prepared
    state.put("d", 4)
    state.prepare_commit(3)
    state.rollback()
    state.put("e", 5)
    state.commit()
    assert image(backend.state()) == (2, {"a": 10, "c": 3, "e": 5}, None, {})
    state.replace_stored(8, iter([(b"\xa1z", b"\x09")]), None, {})
    assert image(backend.state()) == (8, {"z": 9}, None, {})
    assert backend.state().stored_fence() == second.epoch


@leased
def test_a_newer_epoch_raises_the_fence_and_an_older_one_is_then_refused(
    backend: Backend,
) -> None:
    first = fenced_state(backend, 3)
    first.put("a", 1)
    first.commit()
    assert backend.state().stored_fence() == 3
    newer = fenced_state(backend, 5)
    newer.put("a", 2)
    newer.prepare_commit(1)
    assert backend.state().stored_fence() == 5
    with pytest.raises(StateFencedError) as info:
        first.rollback()
    assert (info.value.epoch, info.value.fence) == (3, 5)
    newer.commit(1)
    assert image(backend.state()) == (1, {"a": 2}, None, {})


@leased
def test_a_state_no_driver_fenced_writes_and_leaves_the_fence(backend: Backend) -> None:
    store, scope = leases(backend), scope_of(backend)
    first = store.acquire(scope, FIRST, TTL_MS)
    committed_then_prepared(fenced_state(backend, first.epoch))
    tool = backend.state()  # the state tool and tests never call fence
    assert tool.stored_fence() == first.epoch
    tool.commit(2)
    tool.put("d", 4)
    tool.prepare_commit(3)
    tool.rollback()
    tool.put("e", 5)
    tool.commit()
    tool.replace_stored(6, iter([(b"\xa1z", b"\x09")]), None, {})
    assert image(backend.state()) == (6, {"z": 9}, None, {})
    assert backend.state().stored_fence() == first.epoch


@leased
def test_stored_fence_is_none_until_a_fenced_write_or_a_grant(backend: Backend) -> None:
    unfenced = backend.state()
    assert unfenced.stored_fence() is None
    unfenced.put("a", 1)
    unfenced.commit()
    assert backend.state().stored_fence() is None
    lease = leases(backend).acquire(scope_of(backend), FIRST, TTL_MS)
    assert backend.state().stored_fence() == lease.epoch


@leased
def test_the_grant_fences_every_namespace_under_the_scope_touched_or_not(
    backend: Backend,
) -> None:
    # Step 2: the new driver has made no state of any of these namespaces when the stale
    # driver writes them; the grant alone must have fenced them.
    store, scope = leases(backend), scope_of(backend)
    first = store.acquire(scope, FIRST, TTL_MS)
    under = [f"{scope}count-{i}" for i in range(3)] + [
        f"{scope}$checkpointspout-0",
        f"{scope}commit-0/default",
    ]
    outside = [f"{scope[:-1]}2/count-0", f"other-{scope}count-0"]
    for name in under + outside:
        state = fenced_state(backend, first.epoch, name)
        state.put("k", 1)
        state.prepare_commit(1)
    fenced_state(backend, first.epoch, under[1]).commit(1)
    fenced_state(backend, first.epoch, under[2]).rollback()
    second = store.acquire(scope, SECOND, TTL_MS, over=first.epoch)
    for name in under:
        assert backend.state(name).stored_fence() == second.epoch
        with pytest.raises(StateFencedError):
            fenced_state(backend, first.epoch, name).rollback()
    for name in outside:
        assert backend.state(name).stored_fence() == first.epoch
        fenced_state(backend, first.epoch, name).rollback()  # not this scope's: still allowed
    conf = backend.conf()
    assert get_provider(conf).namespaces(conf, scope) == sorted(under)


@leased
def test_the_fence_leaves_listing_counts_and_images_alone(backend: Backend) -> None:
    store, scope = leases(backend), scope_of(backend)
    lease = store.acquire(scope, FIRST, TTL_MS)
    state = fenced_state(backend, lease.epoch)
    committed_then_prepared(state)
    conf = backend.conf()
    provider = get_provider(conf)
    assert provider.namespaces(conf, scope) == [backend.namespace]
    assert provider.committed_key_counts(conf, [backend.namespace]) == {backend.namespace: 2}
    assert image(backend.state()) == WRITTEN
    assert backend.state().committed_txid == 1
    # Emptied by the tool, the namespace is gone, fence and all; a grant does not bring it back.
    backend.state().replace_stored(None, iter(()), None, {})
    assert provider.namespaces(conf, scope) == []
    assert backend.state().stored_fence() is None
    store.acquire(scope, SECOND, TTL_MS, over=lease.epoch)
    assert provider.namespaces(conf, scope) == []
    assert image(backend.state()) == (None, {}, None, {})


@leased
def test_epochs_keep_growing_after_the_scopes_namespaces_are_deleted(backend: Backend) -> None:
    store, scope = leases(backend), scope_of(backend)
    first = store.acquire(scope, FIRST, TTL_MS)
    state = fenced_state(backend, first.epoch)
    state.put("a", 1)
    state.commit()
    assert store.release(scope, first.epoch)
    backend.state().replace_stored(None, iter(()), None, {})
    conf = backend.conf()
    assert get_provider(conf).namespaces(conf, scope) == []
    second = store.acquire(scope, SECOND, TTL_MS)
    assert second.epoch > first.epoch
    # A driver of the first epoch that writes the namespace again is refused once the new
    # driver wrote it.
    fenced_state(backend, second.epoch).commit()
    with pytest.raises(StateFencedError):
        fenced_state(backend, first.epoch).commit()
