"""The driver's failure gate: retries, outages, and the errors that stop a topology at once."""

from __future__ import annotations

import threading

import pytest

from providers import StateBackendError, StateBackendRefusedError, StateLostError
from recovery.gate import Failure, FailureGate
from statefulbolts.config import validate_config
from statefulbolts.errors import TopologyFailedError
from statefulbolts.testing import ManualClock


def _gate(**conf: object) -> tuple[FailureGate, ManualClock]:
    clock = ManualClock()
    tc = validate_config(conf)
    return FailureGate("wc", tc, clock, threading.Event()), clock


def test_a_fatal_failure_stops_at_once_and_names_where() -> None:
    gate, _ = _gate()
    with pytest.raises(TopologyFailedError) as info:
        gate.failed(
            "INITSTATE(7)", 7, "StateLostError: gone", component="count", task=3,
            failure=Failure.FATAL,
        )  # fmt: skip
    err = info.value
    assert (err.component, err.task, err.txid) == ("count", 3, 7)
    assert "INITSTATE(7) failed in component 'count' task 3: StateLostError: gone" in str(err)


def test_an_ordinary_failure_backs_off_first() -> None:
    gate, clock = _gate()
    gate.failed("PREPARE(2)", 2, "boom", component="count", task=1)
    assert not gate.ready()
    clock.advance(60_000)
    assert gate.ready()


@pytest.mark.parametrize("error", [StateLostError("lost"), StateBackendRefusedError("OOM")])
def test_a_fatal_error_in_a_driver_side_call_is_not_waited_out(error: Exception) -> None:
    gate, clock = _gate()
    calls = []

    def call() -> None:
        calls.append(1)
        raise error

    with pytest.raises(TopologyFailedError, match=type(error).__name__):
        gate.with_backend("saving checkpoint state", call)
    assert calls == [1]
    assert clock.now_ms() == 0  # no sleep


def test_an_outage_in_a_driver_side_call_is_waited_out() -> None:
    gate, clock = _gate()
    outcomes = [StateBackendError("down"), StateBackendError("down"), "ok"]

    def call() -> str:
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert gate.with_backend("saving checkpoint state", call) == "ok"
    assert clock.now_ms() > 0
    assert gate.backend_errors == 2


def test_a_topology_stopped_by_a_fatal_state_error_exits_2_for_the_supervisor() -> None:
    from statefulbolts.cli import exit_code_for

    gate, _ = _gate()
    with pytest.raises(TopologyFailedError) as fatal:
        gate.failed("PREPARE(3)", 3, "StateBackendRefusedError: OOM", failure=Failure.FATAL)
    assert fatal.value.fatal and exit_code_for(fatal.value) == 2
    with pytest.raises(TopologyFailedError) as retries:
        for _ in range(10):  # past topology.max.transaction.retries
            gate.failed("PREPARE(3)", 3, "boom")
    assert not retries.value.fatal and exit_code_for(retries.value) == 1
