"""Where dead letters are kept: a system namespace of the topology's state provider.

A checkpointed topology ``T`` keeps them under ``T/$deadletter``, a transactional one under
``$transactional/<id>/$deadletter``: one key per record (its id), plus ``$changes``, a counter
the command line moves on every replay request and purge, so a running driver learns of them
with one read (``changes``).

Every write is committed at once (``KeyValueState.commit()`` without a txid: the pending writes
only, key by key), so the driver and the command line may write the same namespace at the same
time: they write different keys, except when both change one record at once, and then the
later write wins. Every read opens a new state object, so nothing is read from a cache that
another process has since changed.

Example:
    >>> from statefulbolts.deadletter._record import DeadLetter, FailedTuple, Scope, SpoutOrigin
    >>> store = DeadLetterStore({}, topology="doc-dl")
    >>> store.namespace
    'doc-dl/$deadletter'
    >>> failed = FailedTuple("split", 3, "default", ["poison"], "['poison']")
    >>> origin = SpoutOrigin("sentences", 0, 17, "default", ["poison"], "['poison']")
    >>> letter = DeadLetter.first("doc-dl", Scope.TOPOLOGY, "count", 5, 1, failed, origin,
    ...                           ("builtins.ValueError",), "bad", None, txid=4, attempts=2, at=0.0)
    >>> store.put(letter)
    >>> [r.component for r in store.records()], store.count()
    (['count'], 1)
    >>> [r.state.value for r in store.request_replay([letter.id])], store.changes()
    (['replay'], 1)
    >>> store.delete([letter.id])
    [...]
    >>> store.count()
    0
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from providers import KeyValueState, StateBackendError, StateFactory
from statefulbolts.clock import Clock
from statefulbolts.deadletter._record import DeadLetter, LetterState, Scope
from statefulbolts.errors import DeadLetterError
from statefulbolts.namespaces import record_namespace, topology_prefix, transactional_prefix

__all__ = ["CHANGES_KEY", "DeadLetterStore", "ReplayPoller", "deadletter_namespace"]

log = logging.getLogger(__name__)

CHANGES_KEY = "$changes"
# The record's name below a topology's or transactional id's prefix: ``$deadletter``.
RECORD = "deadletter"


def deadletter_namespace(topology: str | None = None, transactional_id: str | None = None) -> str:
    """``<topology>/$deadletter`` or ``$transactional/<id>/$deadletter``: exactly one is named.

    Example:
        >>> deadletter_namespace(transactional_id="words")
        '$transactional/words/$deadletter'
    """
    if (topology is None) == (transactional_id is None):
        msg = "name exactly one of topology and transactional_id"
        raise DeadLetterError(msg)
    name = topology if topology is not None else transactional_id
    if not isinstance(name, str) or not name or "/" in name:
        msg = (
            "a topology name or transactional id must be a non-empty string without '/', "
            f"got {name!r}"
        )
        raise DeadLetterError(msg)
    prefix = topology_prefix(name) if topology is not None else transactional_prefix(name)
    return record_namespace(prefix, RECORD)


class DeadLetterStore:
    """The dead letters of one topology (``topology=``) or transactional id.

    Args:
        conf: the topology's config (its ``topology.state.provider`` and config).
        topology: a checkpointed topology's name.
        transactional_id: a transactional topology's id.
        state_for: opens a namespace's state (default: the provider's system state).
    """

    def __init__(
        self,
        conf: Mapping[str, Any],
        *,
        topology: str | None = None,
        transactional_id: str | None = None,
        state_for: Callable[[str], KeyValueState] | None = None,
    ) -> None:
        self.namespace = deadletter_namespace(topology, transactional_id)
        self.scope = Scope.TOPOLOGY if topology is not None else Scope.TRANSACTIONAL
        self.name = str(topology if topology is not None else transactional_id)
        self._conf = dict(conf)
        self._state_for = state_for

    def describe(self) -> str:
        """``topology 'wc'`` or ``transactional id 'words'``, for messages."""
        if self.scope is Scope.TOPOLOGY:
            return f"topology {self.name!r}"
        return f"transactional id {self.name!r}"

    def _state(self) -> KeyValueState:
        if self._state_for is not None:
            return self._state_for(self.namespace)
        state = StateFactory.get_system_state(self.namespace, self._conf)
        if not isinstance(state, KeyValueState):
            msg = (
                f"the state provider made a {type(state).__name__} for {self.namespace!r}; dead "
                "letters are kept in a KeyValueState"
            )
            raise DeadLetterError(msg)
        return state

    # ---------------------------------------------------------------- reading
    def records(self) -> list[DeadLetter]:
        """Every record, oldest first (by first sighting, then id)."""
        found = [
            DeadLetter.from_value(value, f"{self.namespace!r} key {key!r}")
            for key, value in self._state()
            if key != CHANGES_KEY
        ]
        return sorted(found, key=lambda r: (r.first_seen, r.id))

    def get(self, record_id: str) -> DeadLetter | None:
        """The record ``record_id``, or ``None``."""
        value = self._state().get(record_id)
        if value is None:
            return None
        return DeadLetter.from_value(value, f"{self.namespace!r} key {record_id!r}")

    def count(self) -> int:
        """How many records are held."""
        return sum(1 for key in self._state().iter_keys() if key != CHANGES_KEY)

    def changes(self) -> int:
        """The change counter the command line moves (one read): compare it with the last."""
        value = self._state().get(CHANGES_KEY, 0)
        return value if isinstance(value, int) and not isinstance(value, bool) else 0

    # ---------------------------------------------------------------- writing (committed at once)
    def put(self, *records: DeadLetter) -> None:
        """Write ``records`` (each under its id, replacing one there), committed."""
        state = self._state()
        for record in records:
            state.put(record.id, record.to_value())
        state.commit()

    def delete(self, record_ids: Iterable[str], *, changed: bool = False) -> list[str]:
        """Delete the records ``record_ids`` that exist; the ids deleted.

        ``changed``: also move the change counter (a running driver then reads the store again).
        """
        state = self._state()
        deleted = [rid for rid in dict.fromkeys(record_ids) if state.get(rid) is not None]
        for rid in deleted:
            state.delete(rid)
        if changed:
            self._bump(state)
        state.commit()
        return deleted

    def request_replay(self, record_ids: Iterable[str]) -> list[DeadLetter]:
        """Mark the records ``record_ids`` for replay, move the change counter; those marked."""
        state = self._state()
        marked = []
        for rid in dict.fromkeys(record_ids):
            value = state.get(rid)
            if value is None:
                continue
            record = replace(DeadLetter.from_value(value, f"{self.namespace!r} key {rid!r}"))
            record = replace(record, state=LetterState.REPLAY)
            state.put(rid, record.to_value())
            marked.append(record)
        self._bump(state)
        state.commit()
        return marked

    @staticmethod
    def _bump(state: KeyValueState) -> None:
        value = state.get(CHANGES_KEY, 0)
        count = value if isinstance(value, int) and not isinstance(value, bool) else 0
        state.put(CHANGES_KEY, count + 1)


class ReplayPoller:
    """How a running topology watches its dead-letter store for replays, for both protocols.

    At most one read per ``interval_secs`` (the store's change counter); the records are read
    again only when the counter moved. A store that cannot be read now is tried at the next
    poll: replays wait, nothing fails.
    """

    def __init__(self, store: DeadLetterStore, clock: Clock, interval_secs: float) -> None:
        self.store, self._clock, self._interval_ms = store, clock, interval_secs * 1000.0
        self._changes: int | None = None
        self._next_poll = 0.0

    def load(self) -> list[DeadLetter]:
        """Every record now (at start: a store that cannot be read fails the caller)."""
        records = self.store.records()
        self._changes = self.store.changes()
        self._next_poll = self._clock.now_ms() + self._interval_ms
        return records

    def poll(self) -> list[DeadLetter] | None:
        """Every record if the store changed since the last read and a poll is due, else None."""
        now = self._clock.now_ms()
        if now < self._next_poll:
            return None
        self._next_poll = now + self._interval_ms
        try:
            changes = self.store.changes()
            if changes == self._changes:
                return None
            records = self.store.records()
        except StateBackendError as exc:
            log.debug("dead letters not polled (%s); next time", exc)
            return None
        self._changes = changes
        return records
