"""recovery.retry: the one backoff and retry-budget policy, on a manual clock (no sleeping)."""

from __future__ import annotations

import itertools
import math

import pytest

from recovery.retry import RetryBudget, RetryPolicy, backend_outage, transaction_retries
from recovery.supervisor import RestartPolicy
from statefulbolts.clock import ManualClock


# --------------------------------------------------------------------------- the pure policy
def test_transaction_retries_double_from_a_tenth_of_a_second_to_five():
    policy = transaction_retries(5)
    delays = [policy.delay(n) for n in range(1, 10)]
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0, 5.0]


def test_backend_outage_doubles_from_a_quarter_second_to_five():
    policy = backend_outage(300)
    assert [policy.delay(n) for n in range(1, 9)] == [0.25, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0]


BASES = [0, 0.1, 0.2, 0.25, 0.5, 1, 2.5, 3.5]
CAPS = [0, 1.5, 5, 10, 30]


def test_delay_is_exactly_the_capped_doubling():
    for base, cap, n in itertools.product(BASES, CAPS, range(1, 40)):
        assert RetryPolicy(base_s=base, cap_s=cap).delay(n) == min(base * 2 ** (n - 1), cap)


def test_a_very_late_attempt_waits_the_cap_instead_of_overflowing():
    assert RetryPolicy(base_s=0.1, cap_s=5.0).delay(100_000) == 5.0
    assert RetryPolicy(base_s=1e300, cap_s=7.0).delay(2_000) == 7.0


def test_attempts_count_from_one():
    with pytest.raises(ValueError, match="counts failures from 1, got attempt 0"):
        transaction_retries(5).delay(0)


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"base_s": -0.1, "cap_s": 5.0}, "base_s must be 0 or more, got -0.1"),
        ({"base_s": 0.1, "cap_s": math.nan}, "cap_s must be 0 or more, got nan"),
        ({"base_s": 0.1, "cap_s": 5.0, "max_retries": -1}, "max_retries must be 0 or more"),
        ({"base_s": 0.1, "cap_s": 5.0, "max_elapsed_s": -2.0}, "max_elapsed_s must be 0 or more"),
    ],
)
def test_a_negative_or_nan_bound_is_refused_by_name(kwargs, named):
    with pytest.raises(ValueError, match=named):
        RetryPolicy(**kwargs)


def test_budget_by_count_allows_max_retries_then_gives_up():
    policy = transaction_retries(5)
    assert [policy.exhausted(n) for n in range(1, 8)] == [False] * 5 + [True] * 2
    assert RetryPolicy(base_s=1, cap_s=1, max_retries=0).exhausted(1)
    # A count budget ignores time, however long.
    assert not policy.exhausted(5, elapsed_s=1e9)


def test_budget_by_time_gives_up_only_after_the_limit_passed():
    policy = backend_outage(300)
    assert not policy.exhausted(1_000, elapsed_s=300.0)
    assert policy.exhausted(1, elapsed_s=300.001)


def test_a_policy_without_bounds_never_gives_up():
    assert not RetryPolicy(base_s=1, cap_s=2).exhausted(10**9, elapsed_s=1e12)


# --------------------------------------------------------------------------- the budget tracker
def test_transaction_budget_retries_max_times_then_returns_none():
    budget = RetryBudget(transaction_retries(5), ManualClock())
    delays = [budget.failed() for _ in range(6)]
    assert delays == [0.1, 0.2, 0.4, 0.8, 1.6, None]
    assert budget.attempts == 6 and budget.failing
    assert budget.failed() is None  # spent stays spent until a success


def test_success_resets_the_count_and_the_delay():
    budget = RetryBudget(transaction_retries(2), ManualClock())
    assert [budget.failed(), budget.failed()] == [0.1, 0.2]
    budget.succeeded()
    assert budget.attempts == 0 and not budget.failing
    assert [budget.failed(), budget.failed(), budget.failed()] == [0.1, 0.2, None]


def test_outage_budget_is_timed_from_its_first_failure():
    clock = ManualClock(50_000)
    budget = RetryBudget(backend_outage(300), clock)
    assert budget.elapsed == 0.0
    assert budget.failed() == 0.25
    clock.advance(120_000)
    assert budget.failed() == 0.5
    assert budget.elapsed == 120.0
    clock.advance(180_000)
    assert budget.failed() == 1.0  # 300 s exactly: not more than the limit yet
    clock.advance(1)
    assert budget.failed() is None
    assert budget.attempts == 4 and budget.elapsed == pytest.approx(300.001)


def test_a_new_outage_after_a_success_starts_its_own_clock():
    clock = ManualClock()
    budget = RetryBudget(backend_outage(10), clock)
    budget.failed()
    clock.advance(9_000)
    budget.succeeded()
    assert budget.elapsed == 0.0
    clock.advance(9_000)
    assert budget.failed() == 0.25  # 18 s after the first outage began, 0 s into this one
    clock.advance(9_000)
    assert budget.failed() == 0.5 and budget.elapsed == 9.0


def test_outage_delays_follow_attempts_since_the_outage_began():
    clock = ManualClock()
    budget = RetryBudget(backend_outage(300), clock)
    waits = []
    for _ in range(8):
        delay = budget.failed()
        assert delay is not None
        waits.append(delay)
        clock.sleep(delay)
    assert waits == [0.25, 0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0]
    assert budget.elapsed == sum(waits)  # time runs from the first failure, through every wait


def test_a_zero_delay_is_a_retry_not_a_give_up():
    budget = RetryBudget(RetryPolicy(base_s=0, cap_s=0, max_retries=1), ManualClock())
    assert budget.failed() == 0.0
    assert budget.failed() is None


# --------------------------------------------------------------------------- the supervisor
def test_restart_delays_are_unchanged():
    for backoff, cap, attempt in itertools.product(BASES, CAPS, range(40)):
        policy = RestartPolicy(max_restarts=5, backoff_s=backoff, max_backoff_s=cap)
        assert policy.delay(attempt) == min(backoff * 2 ** max(attempt - 1, 0), cap)


def test_restart_policy_is_the_retry_policy_with_restarts_as_retries():
    policy = RestartPolicy(max_restarts=3, backoff_s=0.5, max_backoff_s=3)
    assert policy.retry == RetryPolicy(base_s=0.5, cap_s=3, max_retries=3)
    crashed = [policy.should_restart(137, restarts) for restarts in range(5)]
    assert crashed == [True, True, True, False, False]
    assert RestartPolicy().retry == RetryPolicy(base_s=1.0, cap_s=30.0, max_retries=5)
    assert not RestartPolicy(max_restarts=0).should_restart(1, 0)
