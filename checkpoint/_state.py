"""``CheckPointState`` and ``Action``: the checkpoint spout's state machine as tables.

``next_state`` and ``next_action`` are lookups in ``_NEXT_STATE`` / ``_NEXT_ACTION``, keyed by
(phase, recovering). The tables: docs/protocol/checkpoint.md. ``_EFFECTS`` says what each
action means for the runtime that carries it, so the runtime asks an action rather than
comparing its name:

=========  ============  =========================================================
action     carries data  when it succeeds
=========  ============  =========================================================
PREPARE    yes           the commit decision: tasks supersede a lost attempt's prepare
                         first and release their held acks at the end (the driver holds
                         the spout acks until COMMIT); the transaction's message ids are
                         saved before COMMITTING is
COMMIT     no            the transaction is durable: its spout tuples are acked
ROLLBACK   no            every tuple not yet committed is failed (replayed)
INITSTATE  no            nothing more
=========  ============  =========================================================
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from statefulbolts.errors import CheckpointError


class Action(enum.StrEnum):
    """What a ``$checkpoint`` tuple asks stateful tasks to do.

    A ``str``: a member equals, formats and serialises as its name, so a job's action
    (``JobSpec.action``, ``TransactionInfo.action``) can be one and ``info.action == "COMMIT"``
    holds. Any other name is an error.

    Example:
        >>> Action("COMMIT") is Action.COMMIT, Action.COMMIT == "COMMIT", f"{Action.PREPARE}"
        (True, True, 'PREPARE')
        >>> Action("X")
        Traceback (most recent call last):
        ...
        ValueError: unknown checkpoint action 'X': not one of PREPARE, COMMIT, ROLLBACK, INITSTATE
    """

    PREPARE = "PREPARE"
    COMMIT = "COMMIT"
    ROLLBACK = "ROLLBACK"
    INITSTATE = "INITSTATE"

    @classmethod
    def _missing_(cls, value: object) -> Action:
        allowed = ", ".join(a.value for a in cls)
        msg = f"unknown checkpoint action {value!r}: not one of {allowed}"
        raise ValueError(msg)

    @property
    def carries_data(self) -> bool:
        """Whether the transaction's tuples travel with this action (PREPARE)."""
        return _EFFECTS[self][0]

    @property
    def decides_commit(self) -> bool:
        """Whether its success decides the commit (PREPARE): tasks prepared, COMMITTING next."""
        return _EFFECTS[self][1]

    @property
    def makes_durable(self) -> bool:
        """Whether its success makes the transaction durable (COMMIT): ack its spout tuples."""
        return _EFFECTS[self][2]

    @property
    def discards(self) -> bool:
        """Whether its success drops every uncommitted transaction (ROLLBACK): fail them."""
        return _EFFECTS[self][3]


# action -> (carries data, decides the commit, makes durable, discards)
_EFFECTS: dict[Action, tuple[bool, bool, bool, bool]] = {
    Action.PREPARE: (True, True, False, False),
    Action.COMMIT: (False, False, True, False),
    Action.ROLLBACK: (False, False, False, True),
    Action.INITSTATE: (False, False, False, False),
}


class TxPhase(enum.Enum):
    """Where the last checkpoint transaction is."""

    COMMITTED = "COMMITTED"
    COMMITTING = "COMMITTING"
    PREPARING = "PREPARING"


# (phase, recovering) -> (txid delta, next phase); None means "stay as you are".
_NEXT_STATE: dict[tuple[TxPhase, bool], tuple[int, TxPhase] | None] = {
    (TxPhase.PREPARING, True): (-1, TxPhase.COMMITTED),  # roll back
    (TxPhase.PREPARING, False): (0, TxPhase.COMMITTING),
    (TxPhase.COMMITTING, True): (0, TxPhase.COMMITTED),  # roll forward
    (TxPhase.COMMITTING, False): (0, TxPhase.COMMITTED),
    (TxPhase.COMMITTED, True): None,
    (TxPhase.COMMITTED, False): (1, TxPhase.PREPARING),
}

# phase -> the txid delta to the last txid every stateful task committed: COMMITTED(t) is t;
# in PREPARING(t) and COMMITTING(t), t is not committed everywhere yet.
_COMMITTED_DELTA: dict[TxPhase, int] = {
    TxPhase.COMMITTED: 0,
    TxPhase.COMMITTING: -1,
    TxPhase.PREPARING: -1,
}

_NEXT_ACTION: dict[tuple[TxPhase, bool], Action] = {
    (TxPhase.PREPARING, True): Action.ROLLBACK,
    (TxPhase.PREPARING, False): Action.PREPARE,
    (TxPhase.COMMITTING, True): Action.COMMIT,
    (TxPhase.COMMITTING, False): Action.COMMIT,
    (TxPhase.COMMITTED, True): Action.INITSTATE,
    (TxPhase.COMMITTED, False): Action.PREPARE,
}


@dataclass(frozen=True)
class CheckPointState:
    """The checkpoint spout's saved state: a txid and a phase.

    Example:
        >>> s = CheckPointState(-1, TxPhase.COMMITTED)
        >>> s.next_action(recovering=True)
        <Action.INITSTATE: 'INITSTATE'>
        >>> print(s.next_state(recovering=False))
        PREPARING(0)
    """

    txid: int
    phase: TxPhase

    def next_state(self, recovering: bool) -> CheckPointState:
        """The state after the current action is acked."""
        step = _NEXT_STATE[(self.phase, recovering)]
        if step is None:
            return self
        delta, phase = step
        return CheckPointState(self.txid + delta, phase)

    def next_action(self, recovering: bool) -> Action:
        """The action to emit from this state."""
        return _NEXT_ACTION[(self.phase, recovering)]

    @property
    def committed_txid(self) -> int | None:
        """The last txid every stateful task committed (``None``: none committed yet).

        Example:
            >>> CheckPointState(4, TxPhase.COMMITTING).committed_txid
            3
            >>> CheckPointState(4, TxPhase.COMMITTED).committed_txid
            4
            >>> print(CheckPointState(0, TxPhase.PREPARING).committed_txid)
            None
        """
        txid = self.txid + _COMMITTED_DELTA[self.phase]
        return txid if txid >= 0 else None

    def to_value(self) -> list[Any]:
        """The form saved in state: ``[txid, phase]``."""
        return [self.txid, self.phase.value]

    @classmethod
    def from_value(cls, value: Any) -> CheckPointState:
        """Read the saved form back; anything else is a ``CheckpointError``.

        The txid must be an ``int`` (not a ``bool``, a float or a numeric string): ``to_value``
        only ever writes ints, so anything else means the saved state is not ours or is corrupt.
        """
        msg = f"saved checkpoint state {value!r} is not [txid, phase]"
        if not isinstance(value, list | tuple) or len(value) != 2:
            raise CheckpointError(msg)
        txid, phase = value
        if isinstance(txid, bool) or not isinstance(txid, int):
            raise CheckpointError(msg)
        try:
            return cls(txid, TxPhase(phase))
        except ValueError as exc:
            raise CheckpointError(msg) from exc

    def __str__(self) -> str:
        return f"{self.phase.value}({self.txid})"
