"""The record of a change under way, kept in the stored shape, and the swap that ends it.

Moving state is two steps (``statefulbolts.state``: ``stage``, then ``swap``), and a crash may
come between them. The stored shape (``StoredShape.operation``) records which step is under way,
so the next start knows what to do with what it finds (``OperationPhase.finishes``):

==========  =====================================================  ============================
phase       when                                                   a start that finds it
==========  =====================================================  ============================
staging     staging copies are being written; the sources are      discards the staging and
            intact                                                 plans again
swapping    every staging copy is written; the record holds the    finishes the swap from the
            pairs to swap, what to drop and the final shape        record
==========  =====================================================  ============================

Staging copies live under ``<prefix>$evolve/`` (``staging_prefix``), a task's at its final
name below it.
"""

from __future__ import annotations

import enum
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from providers import KeyValueState, StateFactory
from recovery.evolve._plan import stored_names
from statefulbolts.errors import StateEvolutionError
from statefulbolts.listeners import FaultListener, KillPoint
from statefulbolts.namespaces import TaskNamespace, record_namespace
from statefulbolts.state import StoredShape, empty, shape_namespace, swap, write_shape

__all__ = [
    "Operation",
    "OperationPhase",
    "discard_staging",
    "finish_swap",
    "shape_state",
    "staging_namespace",
    "staging_prefix",
]

STAGING = "evolve"  # staging namespaces: <prefix>$evolve/<component>-<task>[/<map>]


class OperationPhase(enum.Enum):
    """Which step of a change of the stored state is under way (module docstring)."""

    STAGING = "staging"
    SWAPPING = "swapping"

    @property
    def finishes(self) -> bool:
        """Whether a start that finds it finishes the change (else: discards its staging)."""
        return _FINISHES[self]


_FINISHES = {OperationPhase.STAGING: False, OperationPhase.SWAPPING: True}


@dataclass(frozen=True)
class Operation:
    """A change under way, as the stored shape records it.

    Staging, only its phase; swapping, everything the swap needs: the ``(staging, target)``
    namespace ``pairs``, the namespaces to ``drop``, the ``final`` shape, and the committed
    ``txid`` the state was moved at.
    """

    phase: OperationPhase
    txid: int | None = None
    pairs: tuple[tuple[str, str], ...] = ()
    drop: tuple[str, ...] = ()
    final: StoredShape | None = None
    started: float = 0.0

    @classmethod
    def swapping(
        cls,
        txid: int | None,
        pairs: Sequence[tuple[str, str]],
        drop: Sequence[str],
        final: StoredShape,
    ) -> Operation:
        """The record of a change whose every staging copy is written."""
        return cls(OperationPhase.SWAPPING, txid, tuple(pairs), tuple(drop), final, time.time())

    def to_value(self) -> dict[str, Any]:
        """The stored form: ``{"phase": ...}`` and, swapping, what the swap needs."""
        if self.phase is OperationPhase.STAGING:
            return {"phase": self.phase.value}
        assert self.final is not None  # noqa: S101 - swapping() sets it
        return {
            "phase": self.phase.value,
            "txid": self.txid,
            "pairs": [list(p) for p in self.pairs],
            "drop": list(self.drop),
            "final": self.final.to_value(),
            "started": self.started,
        }

    @classmethod
    def from_value(cls, value: Mapping[str, Any], label: str) -> Operation:
        """Read the stored form back; anything ``to_value`` never wrote is refused.

        Raises:
            StateEvolutionError: an unknown phase, or a swapping record without its swap.
        """
        try:
            phase = OperationPhase(value.get("phase"))
            if phase is OperationPhase.STAGING:
                return cls(phase)
            return cls(
                phase,
                value.get("txid"),
                tuple((str(a), str(b)) for a, b in value["pairs"]),
                tuple(str(ns) for ns in value["drop"]),
                StoredShape.from_value(value["final"]),
                float(value.get("started", 0.0)),
            )
        except (KeyError, TypeError, ValueError) as exc:
            phases = ", ".join(p.value for p in OperationPhase)
            msg = (
                f"{label}: the stored shape records a change under way as {dict(value)!r}, which "
                f"is not a record of one (phase one of {phases}, swapping with its pairs, drop "
                "and final shape); the stored shape was written by something else"
            )
            raise StateEvolutionError(msg) from exc


def staging_prefix(prefix: str) -> str:
    """``<prefix>$evolve/``: where the staged copies of task namespaces are."""
    return f"{record_namespace(prefix, STAGING)}/"


def staging_namespace(prefix: str, target: TaskNamespace) -> str:
    """Where ``target``'s staged copy is written."""
    return str(target.with_prefix(staging_prefix(prefix)))


def shape_state(conf: Mapping[str, Any], prefix: str) -> KeyValueState:
    """The state the stored shape (and its operation record) is kept in."""
    state = StateFactory.get_system_state(shape_namespace(prefix), conf)
    assert isinstance(state, KeyValueState)  # noqa: S101
    return state


def finish_swap(
    conf: Mapping[str, Any],
    prefix: str,
    operation: Operation,
    system: bool,
    faults: FaultListener,
) -> StoredShape:
    """Swap from the recorded operation's staging copies; write its final shape."""
    assert operation.final is not None  # noqa: S101 - a swapping record has it
    for i, (staging_ns, target_ns) in enumerate(operation.pairs):
        swap(conf, system=system, staging=staging_ns, target=target_ns)
        faults.on_driver(KillPoint.EVOLVE_MID_SWAP, i)
    empty(conf, system=system, namespaces=list(operation.drop))
    empty(conf, system=system, namespaces=[staging_ns for staging_ns, _ in operation.pairs])
    write_shape(shape_state(conf, prefix), operation.final)
    return operation.final


def discard_staging(conf: Mapping[str, Any], prefix: str, system: bool) -> None:
    """Empty every staging copy under ``prefix`` (their sources are intact)."""
    empty(conf, system=system, namespaces=stored_names(conf, staging_prefix(prefix)) or [])
