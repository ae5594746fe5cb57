"""What a stateful task's namespace must hold before each checkpoint action: the lost-store check.

Every stateful task prepares and commits every transaction, so at each step of the protocol the
checkpoint spout's txid says what each task's store must hold. Before an action ``A(t)`` runs
on a task, its namespace's ``(committed txid, prepared txid)`` must be:

=============  ========================================================================
action         stored (``-`` is "nothing committed", which is also what ``-1`` means)
=============  ========================================================================
INITSTATE(t)   committed ``t``
PREPARE(t)     committed ``t - 1``
ROLLBACK(t)    committed ``t - 1``
COMMIT(t)      committed ``t - 1`` and prepared ``t``, or committed ``t`` (a retried COMMIT)
=============  ========================================================================

Anything else means the store lost committed data (restarted empty, flushed, another
database) or holds a copy from another point in time, and the task stops the topology with a
``StateLostError`` naming the store, the namespace and both txids, instead of counting on from
what it found. A provider whose states do not expose their stored image cannot be checked.

Example:
    >>> expected_committed(Action.PREPARE, 0), expected_committed(Action.INITSTATE, 7)
    (None, 7)
    >>> from providers.memory import InMemoryKeyValueState
    >>> try:
    ...     check_stored_txids(InMemoryKeyValueState("lost/count-0"), Action.INITSTATE, 3)
    ... except StateLostError as exc:
    ...     print(str(exc)[:93])
    state 'lost/count-0' in memory holds nothing committed, but the checkpoint is at INITSTATE(3)
"""

from __future__ import annotations

from checkpoint._state import Action
from providers import KeyValueState, State, StateLostError

__all__ = ["check_stored_txids", "expected_committed"]


def _txid(value: int | None) -> int | None:
    """``None`` and ``-1`` both mean "nothing committed"."""
    return None if value is None or value < 0 else value


def expected_committed(action: Action, txid: int) -> int | None:
    """The committed txid a task's namespace holds before ``action(txid)`` (``None``: none)."""
    if action is Action.INITSTATE:
        return _txid(txid)
    return _txid(txid - 1)


def check_stored_txids(state: State, action: Action, txid: int) -> None:
    """Raise ``StateLostError`` unless ``state``'s store holds what ``action(txid)`` needs.

    A state without a stored image (``KeyValueState.supports_stored_image``) is not checked.
    """
    if not isinstance(state, KeyValueState) or not state.supports_stored_image:
        return
    committed, prepared = state.stored_txids()
    committed = _txid(committed)
    want = expected_committed(action, txid)
    if committed == want:
        if action is not Action.COMMIT or prepared == txid:
            return
    elif action is Action.COMMIT and committed == _txid(txid):
        return
    namespace = getattr(state, "namespace", "?")
    found = "nothing committed" if committed is None else f"committed txid {committed}"
    if prepared is not None:
        found += f" and a prepared delta of txid {prepared}"
    needs = "nothing committed" if want is None else f"committed txid {want}"
    if action is Action.COMMIT:
        needs = f"{needs} with txid {txid} prepared, or committed txid {txid}"
    writer = state.stored_fence()
    if writer is not None:
        found += f" (last written under lease epoch {writer})"
    if committed is not None and want is not None and committed > want:
        # Never advise deleting state here: it may be the live state of another driver.
        msg = (
            f"state {namespace!r} in {state.location} holds {found}, but the checkpoint is at "
            f"{action.value}({txid}), which needs {needs}: the store holds state from after "
            "the checkpoint, restored from a later copy of the store, or written by another "
            "driver of this topology (`statefulbolts checkpoint status` shows which driver "
            "holds its lease). The topology stops rather than go on from it; find out which "
            "copy is the right one before changing anything"
        )
        raise StateLostError(msg)
    msg = (
        f"state {namespace!r} in {state.location} holds {found}, but the checkpoint is at "
        f"{action.value}({txid}), which needs {needs}: the store lost committed state "
        "(restarted empty, flushed, another database?). The topology stops rather than go on "
        "from it; restore the store (a durable Redis keeps it: appendonly yes), or, to start "
        "this topology over on purpose, delete its state (statefulbolts state drop)"
    )
    raise StateLostError(msg)
