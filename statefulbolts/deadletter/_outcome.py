"""What a driver did with a poison tuple, as both protocols report it.

``Verdict`` is what a protocol's ``isolate`` answers, ``summary`` a record as dashboards show it,
and ``poison_limit_error`` the message of a topology stopped by ``topology.deadletter.max``.

Example:
    >>> Verdict(False, "the store is full")
    Verdict(isolated=False, why_not='the store is full')
"""

from __future__ import annotations

from typing import Any, NamedTuple

from statefulbolts.deadletter._record import DeadLetter

__all__ = ["Verdict", "poison_limit_error", "summary"]


class Verdict(NamedTuple):
    """What ``isolate`` did: the tuple was dead-lettered, or why it could not be (if it tried)."""

    isolated: bool
    why_not: str | None = None


def summary(record: DeadLetter) -> dict[str, Any]:
    """A record as dashboards show it: id, where, what, when."""
    return {
        "id": record.id,
        "component": record.component,
        "task": record.task,
        "values": record.failed.text,
        "origin": record.origin.describe(),
        "error": f"{record.type_name}: {record.message}",
        "attempts": record.attempts,
        "state": record.state,
        "last_seen": record.last_seen,
    }


def poison_limit_error(name: str, held: int, limit: int, where: str, cause: str) -> str:
    """The message of a topology stopped by ``topology.deadletter.max``."""
    return (
        f"topology {name!r} stopped: {where} failed on one more tuple ({cause}), and the "
        f"dead-letter store already holds {held} records (topology.deadletter.max = {limit}). "
        "A component that fails on this many tuples has a bug, not poison input: fix it, "
        "restart, then replay the records (statefulbolts deadletter replay --all)"
    )
