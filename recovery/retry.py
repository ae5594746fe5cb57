"""One backoff and retry-budget policy for everything that waits after a failure and tries again.

Three users share it, so the formula and the give-up rule live here and nowhere else:

- the driver retrying a failed transaction (``transaction_retries``);
- the driver waiting out a state backend outage, both when a job failed on the store and around
  its own state calls; the two share one outage, timed from its first failure
  (``backend_outage``);
- the supervisor restarting a crashed driver (``recovery.supervisor.RestartPolicy``).

The policy, in order:

1. Failures come in runs: a run starts with a failure and ends with a success. Failure ``n`` of
   a run (1, 2, ...) is its attempt number, and the run's elapsed time is measured from its
   first failure.
2. After failure ``n`` the caller waits ``min(base_s * 2 ** (n - 1), cap_s)`` seconds, then
   tries again.
3. The budget is spent, and the caller gives up instead, when ``n > max_retries`` (failure
   ``n`` would need an ``n``-th retry) or when the run has lasted more than ``max_elapsed_s``.
   Either bound may be absent; with neither, the caller retries forever.
4. A success ends the run: the next failure is attempt 1 again, timed afresh.

The three policies::

    who                        base     cap    budget
    failed transactions        0.1 s    5 s    topology.max.transaction.retries (default 5)
    state backend outage       0.25 s   5 s    topology.state.backend.timeout.secs (default 300)
    driver restarts            1 s      30 s   5 restarts (--backoff, --max-backoff, ...)

The supervisor keeps two counts where the others keep one: its budget counts every restart of
the session, while its delay restarts from attempt 1 once a restarted driver made progress
(``RestartPolicy`` and ``supervise`` say how). So it uses ``RetryPolicy`` alone, not
``RetryBudget``.
"""

from __future__ import annotations

from dataclasses import dataclass

from statefulbolts.clock import Clock

__all__ = ["RetryBudget", "RetryPolicy", "backend_outage", "transaction_retries"]

# Beyond this exponent 2.0 ** e overflows a float; every delay there is the cap anyway.
_MAX_EXPONENT = 1023


def _check_bound(name: str, value: float | None) -> None:
    # ``not value >= 0`` also catches NaN, which every comparison would otherwise let through.
    if value is not None and not value >= 0:
        msg = f"retry policy {name} must be 0 or more, got {value!r}"
        raise ValueError(msg)


@dataclass(frozen=True)
class RetryPolicy:
    """How long to wait after each failure of a run, and when to give up (pure, no clock).

    Attributes:
        base_s: the wait after the first failure, in seconds.
        cap_s: no wait is longer than this, in seconds.
        max_retries: give up at failure ``max_retries + 1``; ``None``: no bound on the count.
        max_elapsed_s: give up at a failure more than this many seconds after the run's first
            failure; ``None``: no bound on the time.

    Example:
        >>> policy = RetryPolicy(base_s=0.1, cap_s=5.0, max_retries=5)
        >>> [policy.delay(n) for n in range(1, 8)]
        [0.1, 0.2, 0.4, 0.8, 1.6, 3.2, 5.0]
        >>> policy.exhausted(5), policy.exhausted(6)
        (False, True)
    """

    base_s: float
    cap_s: float
    max_retries: int | None = None
    max_elapsed_s: float | None = None

    def __post_init__(self) -> None:
        _check_bound("base_s", self.base_s)
        _check_bound("cap_s", self.cap_s)
        _check_bound("max_retries", self.max_retries)
        _check_bound("max_elapsed_s", self.max_elapsed_s)

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failure ``attempt`` (1, 2, ...) of a run: rule 2.

        Raises:
            ValueError: ``attempt`` is below 1 (there is no failure 0 to wait after).
        """
        if attempt < 1:
            msg = f"a retry attempt counts failures from 1, got attempt {attempt}"
            raise ValueError(msg)
        # A large base times 2.0 ** 1023 is inf, not an error, and min() makes it the cap.
        return float(min(self.base_s * 2.0 ** min(attempt - 1, _MAX_EXPONENT), self.cap_s))

    def exhausted(self, attempts: int, elapsed_s: float = 0.0) -> bool:
        """Whether failure ``attempts``, ``elapsed_s`` after the run's first, spends the budget.

        Rule 3: either bound, when set, is enough to give up.
        """
        if self.max_retries is not None and attempts > self.max_retries:
            return True
        return self.max_elapsed_s is not None and elapsed_s > self.max_elapsed_s


def transaction_retries(max_retries: int) -> RetryPolicy:
    """The driver's policy for failed transactions: 0.1 s doubling to 5 s, ``max_retries`` tries.

    ``max_retries`` is ``topology.max.transaction.retries``.
    """
    return RetryPolicy(base_s=0.1, cap_s=5.0, max_retries=max_retries)


def backend_outage(timeout_s: float) -> RetryPolicy:
    """The driver's policy for a state backend outage: 0.25 s doubling to 5 s, for ``timeout_s``.

    ``timeout_s`` is ``topology.state.backend.timeout.secs``; the count of failures is not
    bounded, only the outage's length.
    """
    return RetryPolicy(base_s=0.25, cap_s=5.0, max_elapsed_s=timeout_s)


class RetryBudget:
    """A run of consecutive failures under a ``RetryPolicy``, timed by an injected clock.

    Rules 1 and 4 of the module docstring: ``failed`` counts a failure and says how long to
    wait, ``succeeded`` ends the run. Exhaustion is returned as ``None`` rather than raised
    because only the caller can word the error a person acts on (the topology, the txid, the
    config key); the budget's ``attempts`` and ``elapsed`` stay readable for that message. One
    owner at a time: it is not locked.

    Example:
        >>> from statefulbolts.clock import ManualClock
        >>> clock = ManualClock()
        >>> budget = RetryBudget(RetryPolicy(base_s=0.25, cap_s=5.0, max_elapsed_s=1.0), clock)
        >>> budget.failed(), budget.failed()
        (0.25, 0.5)
        >>> clock.advance(1500)
        >>> budget.failed() is None, budget.attempts, budget.elapsed
        (True, 3, 1.5)
        >>> budget.succeeded()
        >>> budget.failed(), budget.elapsed
        (0.25, 0.0)
    """

    def __init__(self, policy: RetryPolicy, clock: Clock) -> None:
        self._policy = policy
        self._clock = clock
        self._attempts = 0
        self._first_ms = 0.0

    @property
    def policy(self) -> RetryPolicy:
        """The policy this budget spends."""
        return self._policy

    @property
    def attempts(self) -> int:
        """Failures in the current run; 0 when the last call succeeded."""
        return self._attempts

    @property
    def failing(self) -> bool:
        """Whether a run of failures is under way (nothing succeeded since its first failure)."""
        return self._attempts > 0

    @property
    def elapsed(self) -> float:
        """Seconds since the current run's first failure; 0.0 when no run is under way."""
        if not self._attempts:
            return 0.0
        return (self._clock.now_ms() - self._first_ms) / 1000.0

    def failed(self) -> float | None:
        """Count one failure; return the seconds to wait before retrying, or ``None`` to give up.

        Test the result with ``is None``: a policy with a zero base waits 0.0 s and still retries.
        """
        if not self._attempts:
            self._first_ms = self._clock.now_ms()
        self._attempts += 1
        if self._policy.exhausted(self._attempts, self.elapsed):
            return None
        return self._policy.delay(self._attempts)

    def succeeded(self) -> None:
        """End the run: the next failure is attempt 1 and starts the clock again."""
        self._attempts = 0
        self._first_ms = 0.0
