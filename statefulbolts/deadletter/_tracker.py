"""When a failing tuple is poison: counting failed transactions per suspect, and the rules.

A transaction that fails because a component raised on a tuple names a *suspect*: the tuple's
origin (its record id: the spout tuple, or the emitted batch tuple) and the component that
raised. ``PoisonTracker`` counts, per suspect, the transactions it failed since the last
commit:

1. ``failed(record_id, component)`` counts one failed transaction against the suspect and
   returns it (``Suspect``), with when it was first and last seen (wall-clock seconds, from the
   injected ``now``);
2. the suspect is poison (``is_poison``) once it failed ``after_failures`` transactions, or at
   once when the store already holds a dead letter of that origin (``known``: a driver
   restarted after recording it, or a spout that delivers it again);
3. ``isolated(suspect)`` forgets a suspect that was dead-lettered; ``committed()`` forgets
   every suspect: a commit ends the run of failures, as it ends the retry budget's
   (``topology.max.transaction.retries``).

Counts are per suspect, not "in a row": two poison tuples in different tasks may take turns in
failing transactions, and each still reaches its count.

Which failures are the tuple's at all is ``why_not_poison``'s rule: an exception of the
framework's own tree (``StatefulBoltsError``: a state backend down, a transaction step out of
order, a wiring error) is not the tuple's fault, except ``FailedException``, which user code
raises; an error outside ``execute`` names no tuple; a tuple with no root, or with several,
has no one origin to take out.

Example:
    >>> times = iter([10.0, 12.0])
    >>> tracker = PoisonTracker(2, now=lambda: next(times))
    >>> first = tracker.failed("c3f1ab3e", "count")
    >>> first.failures, tracker.is_poison(first)
    (1, False)
    >>> second = tracker.failed("c3f1ab3e", "count")
    >>> second.failures, second.first_seen, second.last_seen, tracker.is_poison(second)
    (2, 10.0, 12.0, True)
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["PoisonTracker", "Suspect", "why_not_poison"]

_FRAMEWORK = "providers.errors.StatefulBoltsError"
# Errors of the framework's tree that are the tuple's doing: a FailedException its bolt raised,
# a value the tuple's processing emitted that cannot be pickled.
_USERS_OWN = ("statefulbolts.errors.FailedException", "statefulbolts.errors.UnshippableValueError")


@dataclass(frozen=True)
class Suspect:
    """A tuple origin that failed transactions in one component, and how often."""

    record_id: str
    component: str
    failures: int
    first_seen: float
    last_seen: float
    known: bool = False


class PoisonTracker:
    """Counts failed transactions per suspect (see the module docstring).

    Args:
        after_failures: ``topology.deadletter.after.failures``.
        now: wall-clock seconds (injected in tests).
    """

    def __init__(self, after_failures: int, now: Callable[[], float] = time.time) -> None:
        if after_failures < 1:
            msg = f"after_failures must be at least 1, got {after_failures}"
            raise ValueError(msg)
        self.after_failures = after_failures
        self._now = now
        self._suspects: dict[tuple[str, str], Suspect] = {}

    @property
    def suspects(self) -> list[Suspect]:
        """The suspects counted since the last commit."""
        return list(self._suspects.values())

    def failed(self, record_id: str, component: str, *, known: bool = False) -> Suspect:
        """One more transaction failed on ``record_id`` in ``component``: the suspect now.

        ``known``: the store already holds a dead letter of this origin.
        """
        at = self._now()
        key = (record_id, component)
        before = self._suspects.get(key)
        if before is None:
            suspect = Suspect(record_id, component, 1, at, at, known)
        else:
            suspect = Suspect(
                record_id, component, before.failures + 1, before.first_seen, at, known
            )
        self._suspects[key] = suspect
        return suspect

    def is_poison(self, suspect: Suspect) -> bool:
        """Whether ``suspect`` is to be dead-lettered now."""
        return suspect.known or suspect.failures >= self.after_failures

    def isolated(self, suspect: Suspect) -> None:
        """``suspect`` was dead-lettered: stop counting it."""
        self._suspects.pop((suspect.record_id, suspect.component), None)

    def committed(self) -> None:
        """A transaction committed: every count starts again."""
        self._suspects.clear()


def why_not_poison(
    types: Sequence[str], root: int | None, trees: int, unit: str, no_root: str | None = None
) -> str | None:
    """Why a failure cannot be blamed on one ``unit`` (a spout tuple, ...); ``None``: it can.

    Args:
        types: the exception's class names, most derived first.
        root: the failing tuple's root (``None``: the error was raised outside ``execute``).
        trees: how many roots the tuple has.
        unit: what would be taken out, for the messages.
        no_root: the message for a tuple with no root (default: it was emitted unanchored).

    Example:
        >>> why_not_poison(("builtins.ValueError",), 7, 1, "spout tuple") is None
        True
        >>> why_not_poison(("builtins.ValueError",), 7, 2, "spout tuple")
        'the failing tuple is anchored to 2 spout tuples, and no one of them can be blamed'
    """
    if _FRAMEWORK in types and not any(t in types for t in _USERS_OWN):
        name = types[0].rpartition(".")[2] if types else "an error"
        return f"{name} is the framework's error, not the tuple's"
    if root is None:
        return "the error was raised outside execute, on no particular tuple"
    if not root:
        return no_root or f"the failing tuple belongs to no {unit} (it was emitted unanchored)"
    if trees > 1:
        return f"the failing tuple is anchored to {trees} {unit}s, and no one of them can be blamed"
    return None
