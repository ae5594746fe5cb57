"""How a driver waits after a failure: failed transactions and state backend outages.

Both protocols' drivers keep two runs of failures, with the one policy of ``recovery.retry``:

- a failed transaction (a job that failed, a checkpoint tuple failed, a batch attempt failed)
  is retried after a backoff; after ``topology.max.transaction.retries`` failures in a row the
  topology stops with an error naming component, task, txid and cause;
- a state backend outage (the store failed, in a task or in a driver-side state call) does not
  spend that budget: it is waited out, with its own backoff, until it has lasted
  ``topology.state.backend.timeout.secs``; its time counts from its first failure, whichever
  side saw it.

A success (a commit) ends both runs. ``ready`` says whether the backoff has passed.

What a failed transaction is (``Failure``) is decided by its error's type, once, in ``classify``,
and has one effect each (``failed``):

======================  ===================================================================
``TRANSIENT``           backed off and retried; counts against the retry budget
``OUTAGE``              the state backend: waited out, against the outage budget
``DETERMINISTIC``       no retry can change it: the topology stops at once (a ``TopologyError``
                        or ``ConfigError`` in a task; under ``topology.deadletter.policy``
                        "stop", a value that does not pickle, or a tuple that failed as many
                        transactions as ``topology.deadletter.after.failures``)
``FATAL``               as ``DETERMINISTIC``, and a restart cannot fix it either
                        (``providers.FATAL_STATE_ERRORS``: the store refused, or committed state
                        is lost); the error says so (``fatal``: ``statefulbolts run`` exits 2)
======================  ===================================================================

A driver-side state call stops at once on a fatal state error too (``with_backend``).

For dashboards and metrics the gate also counts what it saw of the state backend
(``backend_errors``, ``outage_seconds``, ``backend_down``): an outage lasts from its first
failure until the call or commit that ended it, as the driver lived it. Other threads read them
without the driver's lock, so the outage's run is changed and read under a lock of its own.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable
from typing import Protocol, TypeVar

from providers import FATAL_STATE_ERRORS, StateBackendError
from recovery.retry import RetryBudget, backend_outage, transaction_retries
from statefulbolts.clock import Clock
from statefulbolts.errors import (
    ConfigError,
    TopologyError,
    TopologyFailedError,
    UnshippableValueError,
)

__all__ = ["Failure", "FailureGate", "RetryLimits", "classify"]

log = logging.getLogger(__name__)

T = TypeVar("T")


class Failure(enum.Enum):
    """What a failed transaction is, by its error (the table in the module docstring)."""

    TRANSIENT = "transient"
    OUTAGE = "outage"
    DETERMINISTIC = "deterministic"
    FATAL = "fatal"

    @property
    def stops(self) -> bool:
        """Whether the topology stops at once."""
        return self in (Failure.DETERMINISTIC, Failure.FATAL)


class ErrorFacts(Protocol):
    """A task's error as the driver got it (``statefulbolts.runtime.TaskError``)."""

    def is_a(self, *classes: type[BaseException]) -> bool:
        """Whether the task's exception was an instance of any of ``classes``."""


# Errors no retry changes: the topology's wiring or config is wrong.
_WIRING = (TopologyError, ConfigError)


def classify(error: ErrorFacts | None, *, stop_policy: bool, repeated: bool = False) -> Failure:
    """What the failure of a transaction is, by its task's error (``None``: no task's own).

    Args:
        error: the failing task's error; ``None`` when the job failed otherwise (a worker died,
            Spark gave up), which a retry may well change.
        stop_policy: ``topology.deadletter.policy`` is "stop": a tuple's failure is not
            dead-lettered, so one known to repeat stops the topology.
        repeated: the failing tuple failed as many transactions as
            ``topology.deadletter.after.failures`` (its protocol's dead letters counted them).

    Example:
        >>> from providers import StateLostError
        >>> class Facts:
        ...     def __init__(self, *types): self.types = types
        ...     def is_a(self, *classes): return any(issubclass(t, classes) for t in self.types)
        >>> [classify(Facts(t), stop_policy=True).value
        ...  for t in (ValueError, StateBackendError, TopologyError, StateLostError)]
        ['transient', 'outage', 'deterministic', 'fatal']
        >>> classify(Facts(ValueError), stop_policy=True, repeated=True).value
        'deterministic'
        >>> classify(Facts(UnshippableValueError), stop_policy=False).value  # dead-lettered
        'transient'
    """
    if error is None:
        return Failure.TRANSIENT
    if error.is_a(*FATAL_STATE_ERRORS):
        return Failure.FATAL
    if error.is_a(StateBackendError):
        return Failure.OUTAGE
    if error.is_a(*_WIRING):
        return Failure.DETERMINISTIC
    if stop_policy and (repeated or error.is_a(UnshippableValueError)):
        return Failure.DETERMINISTIC
    return Failure.TRANSIENT


class RetryLimits(Protocol):
    """The two limits the gate follows: a topology's ``TopologyConfig`` has them."""

    @property
    def max_transaction_retries(self) -> int:
        """``topology.max.transaction.retries``: failed transactions in a row allowed."""

    @property
    def state_backend_timeout_secs(self) -> float:
        """``topology.state.backend.timeout.secs``: how long an outage is waited out."""


class FailureGate:
    """The retry budget of transactions and the outage budget of the state backend."""

    def __init__(
        self,
        name: str,
        tc: RetryLimits,
        clock: Clock,
        stopping: threading.Event,
        logger: logging.Logger | None = None,
    ) -> None:
        self._name, self._tc, self._clock, self._stopping = name, tc, clock, stopping
        # The driver's logger by default: a wait is the driver's, and is logged as such.
        self._log = logger or log
        self._retries = RetryBudget(transaction_retries(tc.max_transaction_retries), clock)
        self._outage = RetryBudget(backend_outage(tc.state_backend_timeout_secs), clock)
        self._not_before = 0.0
        self._backend_errors = 0
        self._outages_done_s = 0.0
        self._figures = threading.Lock()

    @property
    def backend_errors(self) -> int:
        """State backend errors seen so far (in a job, or in a driver-side state call)."""
        return self._backend_errors

    @property
    def backend_down(self) -> bool:
        """Whether an outage is under way (it failed, and nothing succeeded since)."""
        with self._figures:
            return self._outage.failing

    @property
    def outage_seconds(self) -> float:
        """Seconds of state backend outage so far, the one under way included."""
        with self._figures:
            return self._outages_done_s + self._outage.elapsed

    def _outage_failed(self) -> float | None:
        """Count a state backend failure; the outage budget's delay (``None``: give up)."""
        with self._figures:
            self._backend_errors += 1
            return self._outage.failed()

    def _outage_over(self) -> None:
        with self._figures:
            if self._outage.failing:
                self._outages_done_s += self._outage.elapsed
            self._outage.succeeded()

    def ready(self) -> bool:
        """Whether the backoff after the last failure has passed."""
        return self._clock.now_ms() >= self._not_before

    def succeeded(self) -> None:
        """A transaction committed: both runs of failures are over."""
        self._retries.succeeded()
        self._outage_over()

    def failed(
        self,
        what: str,
        txid: int,
        cause: str,
        *,
        component: str | None = None,
        task: int | None = None,
        failure: Failure = Failure.TRANSIENT,
    ) -> None:
        """Transaction ``what`` (e.g. ``PREPARE(4)``) failed; back off, or stop the topology.

        ``task`` is the failing task's index in ``component``; ``failure`` what the failure is
        (``classify``): one that ``stops`` raises at once, no retry.
        """
        if failure.stops:
            where = f" in component {component!r} task {task}" if component else ""
            msg = f"topology {self._name!r} stopped: {what} failed{where}: {cause}"
            raise TopologyFailedError(
                msg,
                component=component,
                task=task,
                txid=txid,
                cause=cause,
                fatal=failure is Failure.FATAL,
            )
        if failure is Failure.OUTAGE:
            self._wait_for_backend(what, txid, cause)
            return
        delay = self._retries.failed()
        n = self._retries.attempts
        if delay is None:
            where = f"component {component!r} task {task}" if component else "the Spark job"
            limit = self._tc.max_transaction_retries
            msg = (
                f"topology {self._name!r} stopped: {what} failed {n} times in a row "
                f"(topology.max.transaction.retries = {limit}); last failure in {where}: {cause}"
            )
            raise TopologyFailedError(msg, component=component, task=task, txid=txid, cause=cause)
        self._log.info("retrying txid %s in %.1f s (attempt %d)", txid, delay, n + 1)
        self._not_before = self._clock.now_ms() + delay * 1000.0

    def isolated(self, what: str, txid: int) -> None:
        """Transaction ``what`` failed on a poison tuple, now dead-lettered: go on at once.

        The failures the tuple caused do not count against the next transactions: without it,
        they commit (``topology.deadletter.max`` bounds how often this may happen).
        """
        self._retries.succeeded()
        self._not_before = self._clock.now_ms()
        self._log.info("%s failed on a dead-lettered tuple; retrying txid %s now", what, txid)

    def _wait_for_backend(self, what: str, txid: int, cause: str) -> None:
        delay = self._outage_failed()
        waited = self._outage.elapsed
        if delay is None:
            limit = self._tc.state_backend_timeout_secs
            msg = (
                f"topology {self._name!r} stopped: the state backend failed for {waited:.0f} s "
                f"(topology.state.backend.timeout.secs = {limit}); last error: {cause}"
            )
            raise TopologyFailedError(msg, txid=txid, cause=cause)
        self._log.warning(
            "waiting %.1f s for the state backend before retrying %s (down for %.1f s): %s",
            delay,
            what,
            waited,
            cause,
        )
        self._not_before = self._clock.now_ms() + delay * 1000.0

    def with_backend(self, what: str, call: Callable[[], T]) -> T:
        """Run a driver-side state call, waiting out a state backend outage.

        The outage is the same run as one a job saw: one ``topology.state.backend.timeout.secs``
        for both. A call that fails and then answers ends the outage; a call that never failed
        proves nothing (``CheckpointSpout.fail`` does not even touch the store).
        """
        failed_here = False
        while True:
            try:
                result = call()
            except FATAL_STATE_ERRORS as exc:
                cause = f"{type(exc).__name__}: {exc}"
                msg = f"topology {self._name!r} stopped while {what}: {cause}"
                raise TopologyFailedError(msg, cause=cause, fatal=True) from exc
            except StateBackendError as exc:
                failed_here = True
                delay = self._outage_failed()
                if self._stopping.is_set():
                    raise
                if delay is None:
                    cause = f"{type(exc).__name__}: {exc}"
                    limit = self._tc.state_backend_timeout_secs
                    msg = (
                        f"topology {self._name!r} stopped: the state backend failed for "
                        f"{self._outage.elapsed:.0f} s (topology.state.backend.timeout.secs = "
                        f"{limit}) while {what}; last error: {cause}"
                    )
                    raise TopologyFailedError(msg, cause=cause) from exc
                self._log.warning(
                    "%s: state backend unavailable for %.1f s, retrying in %.1f s: %s",
                    what,
                    self._outage.elapsed,
                    delay,
                    exc,
                )
                self._clock.sleep(delay)
            else:
                if failed_here:
                    self._outage_over()
                return result
