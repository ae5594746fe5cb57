"""Restarting a crashed driver: the restart policy and the supervisor loop.

The supervisor runs the driver as a child process whose stdout is JSON lines (``statefulbolts
run ... --json``) and, when the child dies, starts it again, after an exponential backoff, up to a
maximum number of restarts. A restarted driver recovers by itself (a checkpointed topology's
checkpoint spout reads the saved state and drives ROLLBACK or COMMIT, then INITSTATE); the
supervisor reads the child's first transactions and reports them as the recovery that restart
took. Which actions those are is the protocol's to say: the caller passes them in
(``RecoveryActions``; the command line passes ``checkpoint.status.RECOVERY_ACTIONS``).

Policy, in order:

1. exit status 0: done, no restart;
2. exit status 2 (``BAD_INPUT_EXIT_CODE``: bad config, bad wiring, bad arguments, a store
   that refuses or lost committed state): a restart would fail the same way, so the supervisor
   stops and returns 2; likewise 3 (``TIMEOUT_EXIT_CODE``: the run's ``--timeout`` ran out,
   which asks to give up);
3. anything else (a crash, a kill, a topology that gave up after its transaction retries): restart
   after ``backoff_s * 2 ** (n - 1)`` seconds, capped at ``max_backoff_s``, where ``n`` counts
   restarts since the child last made progress (committed a transaction after its recovery);
4. after ``max_restarts`` restarts, return the last exit status (a signal ``s`` as ``128 + s``).

Rules 3 and 4 are ``recovery.retry``'s policy, the one the driver's own retries follow, with two
counts: the budget spends every restart of the session, while the delay's ``n`` starts again at
1 after progress, so a driver that recovers and later crashes again is not kept waiting long.
"""

from __future__ import annotations

import json
import logging
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from recovery.retry import RetryPolicy

__all__ = [
    "BAD_INPUT_EXIT_CODE",
    "TIMEOUT_EXIT_CODE",
    "RecoveryActions",
    "RecoveryTracker",
    "RestartPolicy",
    "exit_status",
    "supervise",
]

log = logging.getLogger(__name__)

BAD_INPUT_EXIT_CODE = 2
TIMEOUT_EXIT_CODE = 3


def exit_status(returncode: int) -> int:
    """A ``Popen`` return code as a shell would show it: killed by signal ``s`` is ``128 + s``."""
    return 128 - returncode if returncode < 0 else returncode


@dataclass(frozen=True)
class RestartPolicy:
    """When and how soon to restart a crashed driver: rules 2 to 4 of the module docstring.

    Example:
        >>> policy = RestartPolicy(max_restarts=2, backoff_s=1.0, max_backoff_s=1.5)
        >>> policy.should_restart(137, restarts=1), policy.should_restart(137, restarts=2)
        (True, False)
        >>> [policy.delay(n) for n in (1, 2, 3)]
        [1.0, 1.5, 1.5]
    """

    max_restarts: int = 5
    backoff_s: float = 1.0
    max_backoff_s: float = 30.0

    def __post_init__(self) -> None:
        if self.max_restarts < 0 or self.backoff_s < 0 or self.max_backoff_s < 0:
            msg = f"restart policy values must not be negative, got {self}"
            raise ValueError(msg)

    @property
    def retry(self) -> RetryPolicy:
        """The same policy in ``recovery.retry``'s terms: a restart is a retry."""
        return RetryPolicy(
            base_s=self.backoff_s, cap_s=self.max_backoff_s, max_retries=self.max_restarts
        )

    def should_restart(self, status: int, restarts: int) -> bool:
        """Whether a child that ended with ``status`` after ``restarts`` restarts is restarted."""
        if status in (0, BAD_INPUT_EXIT_CODE, TIMEOUT_EXIT_CODE):
            return False
        # The child that just ended is failure number restarts + 1 of the session.
        return not self.retry.exhausted(restarts + 1)

    def delay(self, attempt: int) -> float:
        """Seconds to wait before the ``attempt``-th restart in a row (1, 2, ...).

        An ``attempt`` of 0 waits as 1 does, as it always has here.
        """
        return self.retry.delay(max(attempt, 1))


@dataclass(frozen=True)
class RecoveryActions:
    """How a protocol's driver shows, in its transaction events, that it recovers, then progresses.

    Action names as the events carry them (``"action"``, a plain string): ``recovering``, what
    a restarted driver runs to recover; ``ends``, the actions whose success ends the recovery;
    ``progress``, those whose success after it is progress. ``a | b`` knows both protocols'.

    Example:
        >>> steps = RecoveryActions({"UNDO", "READY"}, {"READY"}, {"SAVE"})
        >>> (steps | RecoveryActions(progress={"FLUSH"})).progress == {"SAVE", "FLUSH"}
        True
    """

    recovering: frozenset[str] = frozenset()
    ends: frozenset[str] = frozenset()
    progress: frozenset[str] = frozenset()

    def __init__(
        self,
        recovering: Iterable[str] = (),
        ends: Iterable[str] = (),
        progress: Iterable[str] = (),
    ) -> None:
        # Plain strings: a protocol's StrEnum member hashes by its name, not its value.
        object.__setattr__(self, "recovering", frozenset(map(str, recovering)))
        object.__setattr__(self, "ends", frozenset(map(str, ends)))
        object.__setattr__(self, "progress", frozenset(map(str, progress)))

    def __or__(self, other: RecoveryActions) -> RecoveryActions:
        recovering, ends = self.recovering | other.recovering, self.ends | other.ends
        return RecoveryActions(recovering, ends, self.progress | other.progress)


@dataclass
class RecoveryTracker:
    """Follows a child's transactions: its recovery actions, then whether it made progress.

    Recovery is every transaction up to and including the first successful one of
    ``recovery.ends`` (e.g. a checkpointed driver's: ROLLBACK or COMMIT of the saved txid,
    then INITSTATE); a child whose first transaction is none of ``recovery.recovering`` had
    nothing to recover.
    """

    recovery: RecoveryActions
    actions: list[str] = field(default_factory=list)
    recovered: bool = False
    progressed: bool = False
    seconds: float = 0.0

    def add(self, event: Mapping[str, Any]) -> bool:
        """Take one transaction event; return ``True`` when it ends the recovery."""
        action = event.get("action") or "BATCH"
        ok = bool(event.get("ok"))
        if self.recovered:
            if ok and action in self.recovery.progress:
                self.progressed = True
            return False
        if action not in self.recovery.recovering:
            self.recovered = True  # a topology without stateful bolts: nothing to recover
            return False
        self.actions.append(f"{action}({event.get('txid')})" + ("" if ok else " failed"))
        self.seconds += float(event.get("seconds") or 0.0)
        if ok and action in self.recovery.ends:
            self.recovered = True
            return True
        return False


def supervise(
    command: Sequence[str],
    policy: RestartPolicy,
    *,
    on_line: Callable[[str], None],
    on_event: Callable[[dict[str, Any]], None],
    recovery: RecoveryActions,
    env: Mapping[str, str] | None = None,
    sleep: Callable[[float], None] = time.sleep,
    restart_command: Sequence[str] | None = None,
) -> int:
    """Run ``command`` until it succeeds, restarting it per ``policy``; return its exit status.

    A restart runs ``restart_command`` when given (``statefulbolts run --take-over`` is for the
    first child only), else ``command`` again. ``recovery`` names the actions of the child's
    protocol (``RecoveryTracker``).

    Every stdout line of the child goes to ``on_line``; the supervisor's own events go to
    ``on_event``: ``{"event": "restart", "restart", "exit_code", "backoff_seconds"}`` before a
    restart, ``{"event": "recovered", "restart", "actions", "seconds", "recovery_seconds"}``
    when a restarted child finished its recovery (``seconds`` since it was started,
    ``recovery_seconds`` in its recovery transactions), and ``{"event": "supervisor",
    "restarts", "exit_code", "reason"}`` at the end. Ctrl-C (or SIGTERM, if the caller turns it
    into ``KeyboardInterrupt``) is passed on to the child as SIGINT, and nothing is restarted.
    """
    restarts = 0
    attempt = 0  # restarts since a child last made progress: what the delay grows with
    while True:
        started = time.monotonic()
        tracker = RecoveryTracker(recovery)
        child = _start(restart_command if restarts and restart_command else command, env)
        try:
            assert child.stdout is not None  # noqa: S101 - _start asks for stdout=PIPE
            for line in child.stdout:
                on_line(line)
                event = _transaction(line)
                if event is not None and tracker.add(event) and restarts:
                    on_event(_recovered_event(restarts, tracker, started))
            status = exit_status(child.wait())
        except KeyboardInterrupt:
            _stop(child)
            return _stopped(restarts, on_event)
        if not policy.should_restart(status, restarts):
            on_event(_final_event(status, restarts))
            return status
        attempt = 1 if tracker.progressed else attempt + 1
        restarts += 1
        delay = policy.delay(attempt)
        on_event(
            {"event": "restart", "restart": restarts, "exit_code": status, "backoff_seconds": delay}
        )
        try:
            sleep(delay)
        except KeyboardInterrupt:
            return _stopped(restarts, on_event)


def _start(command: Sequence[str], env: Mapping[str, str] | None) -> subprocess.Popen[str]:
    """Start the child with its stdout as a pipe of text lines."""
    return subprocess.Popen(  # noqa: S603 - our own command line
        list(command),
        stdout=subprocess.PIPE,
        text=True,
        bufsize=1,
        env=None if env is None else dict(env),
    )


def _recovered_event(restarts: int, tracker: RecoveryTracker, started: float) -> dict[str, Any]:
    return {
        "event": "recovered",
        "restart": restarts,
        "actions": list(tracker.actions),
        "seconds": round(time.monotonic() - started, 3),
        "recovery_seconds": round(tracker.seconds, 3),
    }


def _final_event(status: int, restarts: int) -> dict[str, Any]:
    """The last event of a session that ended because the policy said not to restart."""
    reason = {
        0: "done",
        BAD_INPUT_EXIT_CODE: "bad input: not restarted",
        TIMEOUT_EXIT_CODE: "timed out: not restarted",
    }.get(status, f"gave up after {restarts} restarts")
    return {"event": "supervisor", "restarts": restarts, "exit_code": status, "reason": reason}


def _stopped(restarts: int, on_event: Callable[[dict[str, Any]], None]) -> int:
    """Report a session stopped by Ctrl-C; return the shell's status for it (130)."""
    on_event({"event": "supervisor", "restarts": restarts, "exit_code": 130, "reason": "stop"})
    return 130


def _transaction(line: str) -> dict[str, Any] | None:
    if not line.startswith("{"):
        return None
    try:
        event = json.loads(line)
    except json.JSONDecodeError:
        return None
    if isinstance(event, dict) and event.get("event") == "transaction":
        return event
    return None


def _stop(child: subprocess.Popen[str]) -> None:
    """Ask the child to stop after its running transaction; kill it if it does not."""
    if child.poll() is None:
        child.send_signal(signal.SIGINT)
        try:
            child.wait(timeout=60)
        except subprocess.TimeoutExpired:
            log.warning("driver pid %s did not stop within 60 s; killing it", child.pid)
            child.kill()
            child.wait()
