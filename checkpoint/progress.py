"""A checkpointed topology's stored progress, for changing its stored state (``recovery.evolve``).

``CheckpointProgress`` is the checkpoint protocol's ``recovery.StoredProgress``: a stateful
task's state is its namespace ``<topology>/<component>-<task>``, read with the bolt's key and
value classes, and its timers and windows are kept beside it. Before stored state moves, every
task is checked against the checkpoint spout's saved state as a restart would check it
(``check_stored_txids``), and a transaction left half-way is settled as the spout's recovery
would settle it: the action and the state after it are ``CheckPointState``'s transition
tables' (``next_action(True)``, ``next_state(True)``), run without the user's hooks, so that
every task holds one committed txid ``T``:

==============  ==================  ===============  =====================
saved           recovery runs       each task        saved after
==============  ==================  ===============  =====================
PREPARING(t)    ROLLBACK(t)         ``rollback()``   COMMITTED(t - 1)
COMMITTING(t)   COMMIT(t)           ``commit(t)``    COMMITTED(t)
COMMITTED(t)    INITSTATE(t)        nothing          COMMITTED(t)
==============  ==================  ===============  =====================

Moved state is staged at ``T``; new tasks are given empty state committed at ``T``, also when
nothing moves and the recovery is left to the checkpoint spout: it then finds them as it finds
every task it settles.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from checkpoint._expected import check_stored_txids
from checkpoint._state import Action, CheckPointState
from checkpoint.spout import TX_STATE_KEY
from providers import KeyValueState, State, StateFactory, StateLostError
from recovery.evolve import StagedRecords
from statefulbolts.namespaces import checkpoint_namespace
from statefulbolts.state import LayoutRule

__all__ = ["CheckpointProgress"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CheckpointProgress:
    """The checkpoint protocol's stored progress (see the module docstring).

    Example:
        >>> progress = CheckpointProgress()
        >>> progress.per_map, progress.task_records, progress.migration_refused
        (False, True, None)
    """

    system: bool = False  # a bolt's state is read with its key and value classes
    per_map: bool = False  # a task's state is its own namespace
    task_records: bool = True  # timers and windows beside a task's state
    migration_refused: str | None = None  # a bolt's migrate_state hooks run

    def check_and_settle(
        self,
        conf: Mapping[str, Any],
        prefix: str,
        label: str,
        namespaces: Sequence[str],
        *,
        settle: bool,
    ) -> int | None:
        """Check every task against the checkpoint; settle its transaction if ``settle``.

        Returns the committed txid ``T`` of the settled state (``None``: nothing committed):
        what every task holds once settled, here or by the recovery that follows.

        Raises:
            StateLostError: a task's store does not hold what the checkpoint says it must, or
                the checkpoint's own record is gone while tasks hold committed state.
        """
        record = checkpoint_namespace(prefix)
        cp_state = StateFactory.get_system_state(record, conf)
        assert isinstance(cp_state, KeyValueState)  # noqa: S101 - every provider's state is one
        saved = cp_state.get(TX_STATE_KEY)
        states = {ns: StateFactory.get_system_state(ns, conf) for ns in namespaces}
        if saved is None:
            _refuse_committed_without_record(states, label, record)
            return None
        cur = CheckPointState.from_value(saved)
        action = cur.next_action(True)
        for state in states.values():
            check_stored_txids(state, action, cur.txid)
        # Settled or not, a new task given empty state at the settled txid passes the check of
        # the recovery's first action (ROLLBACK(t) needs t - 1; COMMIT(t) takes t).
        settled = cur.next_state(True)
        if settle and settled != cur:
            for state in states.values():
                _run(action, state, cur.txid)
            cp_state.put(TX_STATE_KEY, settled.to_value())
            cp_state.commit()
            log.info("%s: settled %s as %s before moving its state", label, cur, settled)
        return settled.committed_txid

    def staged_txid(
        self, conf: Mapping[str, Any], sources: Sequence[str], settled: int | None
    ) -> int | None:
        """Every task holds the settled ``T``: moved state is staged at it."""
        return settled

    def records(
        self,
        conf: Mapping[str, Any],
        sources: Sequence[tuple[int, str]],
        rule: LayoutRule,
        parallelism: int,
    ) -> StagedRecords:
        """None: every entry of a task's state is the bolt's, and moves."""
        return StagedRecords()


def _run(action: Action, state: State, txid: int) -> None:
    """What recovery's ``action`` does to one task's stored state, without the user's hooks."""
    if action.discards:
        state.rollback()
    elif action.makes_durable:
        state.commit(txid)


def _refuse_committed_without_record(states: Mapping[str, State], label: str, record: str) -> None:
    """No checkpoint saved: a task that holds committed state means the store lost the record.

    Raises:
        StateLostError: a task holds a committed txid.
    """
    for ns, state in states.items():
        if isinstance(state, KeyValueState) and state.supports_stored_image:
            committed, _ = state.stored_txids()
            if committed is not None and committed >= 0:
                msg = (
                    f"{label}: state {ns!r} in {state.location} holds committed txid "
                    f"{committed}, but the checkpoint's record ({record}) is gone: the store "
                    "lost part of the topology's state. The topology stops rather than start "
                    "over; restore the store, or delete the topology's state on purpose "
                    "(statefulbolts state drop)"
                )
                raise StateLostError(msg)
