"""The transaction manifest: which spout messages a transaction carried, saved with its commit.

Why it exists: in Storm a driver that dies after a transaction committed but before its spout
messages were acked makes the spouts deliver those messages again, and they are counted twice.
Here, before COMMITTING(t) is saved, the driver saves the message ids transaction ``t`` carried
in the checkpoint spout's own state, under ``MANIFEST_KEY``, so the one commit that saves
COMMITTING(t) saves them too. A restarted driver that finishes COMMIT(t), or finds COMMITTED(t)
already saved, acks exactly those messages at their spouts before it calls any spout, and a
durable spout does not deliver them again (README, "Recovery").

The stored form, plain values any provider can serialize::

    {"txid": t, "spouts": [[component, task_index, [msg_id, ...]], ...]}

``"spouts"`` is ``None`` when the ids could not be serialized, or would not read back as they
are (``exact_ids``: a restart acks what it reads, and a spout finds its message by the id it
gave): the manifest still names ``t``, and a crash between that commit and its acks falls back
to at-least-once (``t`` replayed).

Saving and reading follow the checkpoint spout's phases (``TransactionManifest.recover``). The
manifest only puts: the caller commits the checkpoint spout's state, in the same commit as the
phase it saves next.
"""

from __future__ import annotations

import logging
import reprlib
from collections.abc import Iterable
from typing import Any, NamedTuple

from checkpoint._state import CheckPointState, TxPhase
from providers import KeyValueState, StateSerializationError, pack_plain
from statefulbolts.errors import CheckpointError

__all__ = ["MANIFEST_KEY", "SpoutMessages", "TransactionManifest"]

log = logging.getLogger(__name__)

MANIFEST_KEY = "__txn"


# Message ids of these types read back as they were; any other is checked (``exact_ids``).
_PLAIN_IDS = frozenset({int, str, bytes, float, bool, type(None)})


def exact_ids(msg_ids: list[Any]) -> None:
    """Refuse message ids that would not read back from the store exactly as they are.

    The framework's codec (``providers.pack_plain``) keeps tuples, sets and frozensets; a
    subclass (an ``IntEnum``) would read back as its base type, a dataclass not at all.

    Raises:
        StateSerializationError: naming the first id's type that would not.

    Example:
        >>> exact_ids([1, "m-2", ("partition", 7)])
        >>> try:
        ...     exact_ids([("p", object())])
        ... except StateSerializationError as exc:
        ...     print(exc)
        message ids cannot be kept exactly: msgpack cannot encode an object of type builtins.object
    """
    if set(map(type, msg_ids)) <= _PLAIN_IDS:
        return
    try:
        pack_plain(msg_ids, exact=True)
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        msg = f"message ids cannot be kept exactly: {exc}"
        raise StateSerializationError(msg) from exc


class SpoutMessages(NamedTuple):
    """The message ids one spout task emitted into a transaction."""

    component: str
    task: int
    msg_ids: list[Any]

    def to_value(self) -> list[Any]:
        """The stored form: ``[component, task_index, [msg_id, ...]]``."""
        # No copy of the ids: a transaction may carry many, and the providers encode at put.
        return [self.component, self.task, self.msg_ids]

    @classmethod
    def from_value(cls, value: Any) -> SpoutMessages:
        """Read the stored form back; anything else is a ``CheckpointError``."""
        if isinstance(value, list | tuple) and len(value) == 3:
            component, task, msg_ids = value
            if (
                isinstance(component, str)
                and isinstance(task, int)
                and not isinstance(task, bool)
                and isinstance(msg_ids, list | tuple)
            ):
                return cls(component, task, list(msg_ids))
        msg = (
            f"saved transaction manifest entry {reprlib.repr(value)} is not "
            "[component, task_index, [msg_id, ...]]"
        )
        raise CheckpointError(msg)


class TransactionManifest:
    """The manifest of the checkpoint spout's state: save before COMMITTING, read on recovery.

    Pure: it touches nothing but ``state`` and knows nothing of the runtime; message ids are
    whatever values the spouts gave. One object per driver run.

    Example:
        >>> from providers import InMemoryKeyValueState
        >>> state = InMemoryKeyValueState("demo/$checkpointspout-0")
        >>> TransactionManifest(state).save(4, [SpoutMessages("words", 0, ["m1", "m2"])])
        True
        >>> state.commit()  # the checkpoint spout commits it with COMMITTING(4)
        >>> restarted = TransactionManifest(state)
        >>> restarted.recover(CheckPointState(4, TxPhase.COMMITTING))  # COMMIT(4) still to run
        []
        >>> restarted.committed(4)  # COMMIT(4) succeeded: ack these now
        [SpoutMessages(component='words', task=0, msg_ids=['m1', 'm2'])]
        >>> restarted.committed(4)
        []
    """

    def __init__(self, state: KeyValueState) -> None:
        self._state = state
        self._warned = False
        self._pending: tuple[int, list[SpoutMessages]] | None = None

    @property
    def pending(self) -> bool:
        """Whether recovered messages wait for their transaction's COMMIT to be acked.

        While this holds, the driver calls no spout: one might deliver those messages again
        before the COMMIT acks them.
        """
        return self._pending is not None

    def save(self, txid: int, groups: Iterable[SpoutMessages]) -> bool:
        """Put transaction ``txid``'s message ids under ``MANIFEST_KEY``; the caller commits.

        Call it before COMMITTING(``txid``) is saved, so that one commit holds both. When the
        ids cannot be serialized, or would not read back as they are (``exact_ids``), save
        ``{"txid": txid, "spouts": None}`` instead and warn
        (once per manifest object: every later transaction would warn the same).

        Returns:
            Whether the message ids were saved (``False``: the at-least-once fallback).
        """
        spouts = [group.to_value() for group in groups]
        try:
            for group in spouts:
                exact_ids(group[2])
            self._state.put(MANIFEST_KEY, {"txid": txid, "spouts": spouts})
        except StateSerializationError as exc:
            if not self._warned:
                self._warned = True
                log.warning(
                    "the state cannot hold these spout message ids (%s): if the driver dies "
                    "after a transaction commits and before its spouts are acked, the restart "
                    "delivers that transaction's messages again (at-least-once)",
                    exc,
                )
            self._state.put(MANIFEST_KEY, {"txid": txid, "spouts": None})
            return False
        return True

    def recover(self, current: CheckPointState) -> list[SpoutMessages]:
        """Read what a crashed run saved; return the messages to ack at once.

        ``current`` is the checkpoint spout's state as it opened. In order:

        1. nothing saved, a manifest of another txid, or one without ids: nothing to ack;
        2. PREPARING(t): ``t`` never committed and rolls back, so its messages are replayed
           by their spouts, not acked: nothing;
        3. COMMITTING(t): ``t`` commits when the recovery's COMMIT(t) succeeds: its messages
           wait (``pending``) for ``committed(t)``; nothing to ack yet;
        4. COMMITTED(t): ``t`` committed before the crash: its messages, to ack now.

        Raises:
            CheckpointError: the saved manifest is not in the form ``save`` writes.
        """
        self._pending = None
        saved = self._state.get(MANIFEST_KEY)
        if saved is None:
            return []
        txid, groups = self._read(saved)
        if txid != current.txid or groups is None or current.phase is TxPhase.PREPARING:
            return []
        if current.phase is TxPhase.COMMITTED:
            return groups
        self._pending = (txid, groups)
        return []

    def committed(self, txid: int) -> list[SpoutMessages]:
        """Transaction ``txid`` is known committed: the recovered messages to ack now, once.

        Returns the messages ``recover`` kept for ``txid`` and forgets them; anything else
        (no recovery pending, or another txid) gets an empty list.
        """
        if self._pending is None or self._pending[0] != txid:
            return []
        groups = self._pending[1]
        self._pending = None
        return groups

    def _read(self, saved: Any) -> tuple[int, list[SpoutMessages] | None]:
        """The saved ``{"txid", "spouts"}`` as a txid and its groups (``None``: ids not saved)."""
        txid = saved.get("txid") if isinstance(saved, dict) else None
        spouts = saved.get("spouts") if isinstance(saved, dict) else None
        if isinstance(txid, int) and not isinstance(txid, bool):
            if spouts is None:
                return txid, None
            if isinstance(spouts, list | tuple):
                return txid, [SpoutMessages.from_value(group) for group in spouts]
        msg = (
            f"saved transaction manifest {MANIFEST_KEY!r} is {reprlib.repr(saved)}, not "
            '{"txid": <int>, "spouts": [[component, task_index, [msg_id, ...]], ...] or None}'
        )
        raise CheckpointError(msg)
