"""The driver's lease policy (``recovery.lease``): who may take over, renewal, release.

The store here is a small in-process ``LeaseStore`` that keeps the contract's rules, so that
the policy's decisions are tested without a server; every durable provider's own store is
checked against the same contract in ``tests/providers/test_lease_contract.py``, and the
drivers themselves against real stores in ``tests/recovery/test_one_driver.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import Any

import pytest

from providers import (
    Lease,
    LeaseHeldError,
    LeaseHolder,
    LeaseLostError,
    LeaseStore,
    StateBackendError,
    StateLostError,
)
from recovery.lease import (
    DriverLease,
    describe_lease,
    successor_reason,
    take_lease,
    this_holder,
)


class DictLeaseStore(LeaseStore):
    """The lease contract in a dict, with a clock the test moves."""

    def __init__(self) -> None:
        self.now = 0.0
        self.records: dict[str, dict[str, Any]] = {}
        self.released: list[tuple[str, int]] = []
        self.fail_renew: BaseException | None = None
        self.closed = 0

    def _lease(self, scope: str) -> Lease:
        r = self.records[scope]
        return Lease(scope, r["epoch"], r["holder"], r["ttl"], int(r["expires"] - self.now))

    def acquire(
        self, scope: str, holder: LeaseHolder, ttl_ms: int, *, over: int | None = None
    ) -> Lease:
        r = self.records.get(scope)
        if r is not None and r["expires"] > self.now and over != r["epoch"]:
            raise LeaseHeldError("held", lease=self._lease(scope))
        epoch = (r["epoch"] if r else 0) + 1
        self.records[scope] = {
            "epoch": epoch,
            "holder": holder,
            "ttl": ttl_ms,
            "expires": self.now + ttl_ms,
        }
        return self._lease(scope)

    def renew(self, scope: str, epoch: int, ttl_ms: int) -> Lease:
        if self.fail_renew is not None:
            raise self.fail_renew
        r = self.records.get(scope)
        if r is None or r["epoch"] != epoch:
            raise LeaseLostError("lost", lease=None if r is None else self._lease(scope))
        r["expires"] = self.now + ttl_ms
        return self._lease(scope)

    def release(self, scope: str, epoch: int) -> bool:
        self.released.append((scope, epoch))
        r = self.records.get(scope)
        if r is None or r["epoch"] != epoch:
            return False
        r["expires"] = self.now
        return True

    def read(self, scope: str) -> Lease | None:
        return self._lease(scope) if scope in self.records else None

    def holders(self, scope: str) -> dict[int, LeaseHolder]:
        r = self.records.get(scope)
        return {} if r is None else {r["epoch"]: r["holder"]}

    def close(self) -> None:
        self.closed += 1


def _holder(host: str = "h1", pid: int = 42, process: str = "boot-a/100", token: str = "") -> Any:
    return LeaseHolder(host, pid, 1_700_000_000.0, process=process, token=token)


# --- who may take a live lease over without --take-over ---------------------------------------
def test_a_live_lease_of_a_running_process_elsewhere_is_never_taken() -> None:
    live = Lease("wc/", 3, _holder(host="h2"), 20_000, 15_000)
    assert successor_reason(live, _holder(pid=7), alive=lambda pid: False) is None


def test_a_live_lease_of_a_running_process_here_is_never_taken() -> None:
    live = Lease("wc/", 3, _holder(), 20_000, 15_000)
    me = _holder(pid=7, process="boot-a/900")
    assert successor_reason(live, me, alive=lambda p: True) is None


def test_a_lapsed_lease_is_taken() -> None:
    lapsed = Lease("wc/", 3, _holder(host="h2"), 20_000, 0)
    assert successor_reason(lapsed, _holder(pid=7)) == "its lease lapsed"


def test_the_same_restart_token_takes_over_anywhere() -> None:
    live = Lease("wc/", 3, _holder(host="h2", token="sup-1"), 20_000, 15_000)
    reason = successor_reason(live, _holder(pid=7, token="sup-1"), alive=lambda p: True)
    assert reason is not None and "restart token" in reason
    other = successor_reason(live, _holder(pid=7, token="sup-2"), alive=lambda p: True)
    assert other is None


def test_a_gone_process_on_this_machine_is_taken_over() -> None:
    live = Lease("wc/", 3, _holder(), 20_000, 15_000)
    reason = successor_reason(live, _holder(pid=7, process="boot-a/900"), alive=lambda p: False)
    assert reason == "its process on this machine (host h1 pid 42) is gone"


def test_a_machine_restarted_since_is_taken_over() -> None:
    live = Lease("wc/", 3, _holder(process="boot-a/100"), 20_000, 15_000)
    reason = successor_reason(live, _holder(pid=42, process="boot-b/100"), alive=lambda p: True)
    assert reason == "this machine (host h1) restarted since"


def test_a_real_dead_process_and_a_reused_pid_are_told_from_a_live_one() -> None:
    me = this_holder(token="")
    child = subprocess.Popen([sys.executable, "-c", "pass"])  # noqa: S603 - our own interpreter
    child.wait()
    dead = Lease("wc/", 3, LeaseHolder(me.host, child.pid, 0.0, process=me.process), 20_000, 9)
    assert successor_reason(dead, me) is not None  # its pid no longer runs
    alive = Lease("wc/", 3, me, 20_000, 9_000)  # this very process, a runner of it holding it
    held = DriverLease(DictLeaseStore(), alive, "t")
    assert successor_reason(alive, this_holder(token="")) is None
    held.release()  # no runner of this process holds it now: a successor may take it
    reason = successor_reason(alive, this_holder(token=""))
    assert reason == "it was this process's, and no runner of it holds it any more"
    # Our own pid with another start time: a reused pid, so the holder is gone.
    boot = me.process.partition("/")[0]
    reused = LeaseHolder(me.host, os.getpid(), 0.0, process=f"{boot}/1")
    assert successor_reason(Lease("wc/", 3, reused, 20_000, 9_000), me) is not None


# --- take_lease ------------------------------------------------------------------------------
@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> DictLeaseStore:
    """Every provider hands out this one store."""
    one = DictLeaseStore()
    from providers.memory import InMemoryKeyValueStateProvider

    monkeypatch.setattr(InMemoryKeyValueStateProvider, "lease_store", lambda self, conf: one)
    return one


def test_a_second_driver_is_refused_with_one_line_naming_the_holder(store: DictLeaseStore) -> None:
    first = take_lease({}, "wc/", "topology 'wc'", holder=_holder(host="h2", pid=4242))
    assert first is not None and first.epoch == 1
    with pytest.raises(LeaseHeldError) as refused:
        take_lease({}, "wc/", "topology 'wc'", holder=_holder(pid=7))
    text = str(refused.value)
    assert "\n" not in text
    assert text.startswith("topology 'wc' is already running: host h2 pid 4242 (started ")
    assert "epoch 1" in text and "--take-over" in text and "lapses in 20.0 s" in text
    assert store.records["wc/"]["epoch"] == 1  # the refused driver took nothing


def test_take_over_fences_the_holder_and_its_renewal_reports_the_loss(
    store: DictLeaseStore,
) -> None:
    first = take_lease({}, "wc/", "topology 'wc'", holder=_holder(host="h2"))
    assert first is not None
    second = take_lease({}, "wc/", "topology 'wc'", take_over=True, holder=_holder(pid=7))
    assert second is not None and second.epoch == 2
    assert first.taken_over() is not None and first.taken_over().epoch == 2  # type: ignore[union-attr]
    assert second.taken_over() is None
    lost: list[BaseException] = []
    done = threading.Event()
    first.lease = Lease("wc/", 1, first.lease.holder, 200, 200)  # renew every 50 ms

    def on_lost(exc: BaseException) -> None:
        lost.append(exc)
        done.set()

    first.keep(on_lost)
    assert done.wait(10)
    assert isinstance(lost[0], LeaseLostError)
    first.release()
    assert store.records["wc/"]["epoch"] == 2 and store.records["wc/"]["expires"] > store.now


def test_a_lease_record_gone_from_the_store_is_lost_state_not_a_take_over(
    store: DictLeaseStore,
) -> None:
    lease = take_lease({}, "wc/", "topology 'wc'", holder=_holder())
    assert lease is not None
    lease.lease = Lease("wc/", 1, lease.lease.holder, 200, 200)  # renew every 50 ms
    del store.records["wc/"]  # the store restarted empty
    got: list[BaseException] = []
    done = threading.Event()
    lease.keep(lambda exc: (got.append(exc), done.set()))
    assert done.wait(10)
    lease.release()
    (lost,) = got
    assert isinstance(lost, StateLostError)
    assert str(lost).startswith(
        "topology 'wc': the state store no longer holds its lease (epoch 1) of 'wc/': it "
        "restarted empty, was flushed, or is another database."
    )
    assert lease.taken_over() is None  # nobody took it: not a take-over


def test_a_lapsed_lease_is_taken_without_a_flag(store: DictLeaseStore) -> None:
    take_lease({"topology.state.lease.timeout.secs": 1}, "wc/", "t", holder=_holder(host="h2"))
    store.now += 1000
    taken = take_lease({}, "wc/", "t", holder=_holder(pid=7))
    assert taken is not None and taken.epoch == 2


def test_release_ends_the_lease_so_the_next_start_does_not_wait(store: DictLeaseStore) -> None:
    first = take_lease({}, "wc/", "t", holder=_holder(host="h2"))
    assert first is not None
    first.release()
    assert store.released == [("wc/", 1)] and store.closed == 1
    again = take_lease({}, "wc/", "t", holder=_holder(pid=7))
    assert again is not None and again.epoch == 2


def test_an_unreachable_store_during_renewal_is_tried_again(store: DictLeaseStore) -> None:
    lease = take_lease({"topology.state.lease.timeout.secs": 1}, "wc/", "t", holder=_holder())
    assert lease is not None
    lease.lease = Lease("wc/", 1, lease.lease.holder, 200, 200)  # renew every 50 ms
    tries = threading.Semaphore(0)

    class Down(StateBackendError):
        def __init__(self) -> None:
            tries.release()
            super().__init__("down")

    store.renew = lambda scope, epoch, ttl: (_ for _ in ()).throw(Down())  # type: ignore[method-assign]
    lost: list[BaseException] = []
    lease.keep(lost.append)
    for _ in range(3):
        assert tries.acquire(timeout=10)  # three renewals failed on the outage...
    lease.release()
    assert not lost  # ... and none of them counted as losing the lease


def test_a_provider_without_leases_gets_none_and_memory_no_warning() -> None:
    assert take_lease({}, "wc/", "t") is None


def test_describe_lease() -> None:
    assert describe_lease(None).startswith("none")
    live = Lease("wc/", 3, _holder(host="h2"), 20_000, 12_345)
    assert describe_lease(live) == (
        "epoch 3, held by host h2 pid 42 (started 2023-11-14 22:13:20 UTC); lapses in 12.3 s "
        "unless renewed"
    )
    assert describe_lease(Lease("wc/", 3, _holder(host="h2"), 20_000, 0)).startswith(
        "epoch 3, lapsed, last held by host h2"
    )


def test_driver_lease_is_what_the_runner_needs() -> None:
    from statefulbolts.runtime import HeldLease

    lease: HeldLease = DriverLease(DictLeaseStore(), Lease("wc/", 1, _holder(), 1, 1), "t")
    assert lease.epoch == 1
