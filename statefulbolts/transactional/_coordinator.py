"""``TransactionalSpoutCoordinator``: which txid to process, which to commit, as a pure machine.

The coordinator decides the life of every txid of a transactional topology. It runs no thread
and calls no Spark: a driver loop feeds it events (a poll, the ack or the fail of an attempt)
and executes the commands it returns, in the order returned.

State:

- ``curr``: the next txid to commit, persisted as ``currtx`` (1 when absent).
- ``active``: txid -> (attempt, status) for at most ``max_pending`` txids, all within
  ``curr .. curr + max_pending - 1``. Status is PROCESSING, PROCESSED or COMMITTING.
- the metas: a strict ``RotatingTransactionalState`` next to ``currtx`` in the same namespace.

Events, by what the coordinator holds for the attempt's txid (the table ``_ON_EVENT``):

===========  ============================  ==============================================
event        the txid's entry              effect
===========  ============================  ==============================================
ack          this attempt, PROCESSING      PROCESSED, then ``sync()``
ack          this attempt, COMMITTING      committed: ``currtx`` advances, old metas go,
                                           then ``sync()``
ack          this attempt, PROCESSED       ignored (a duplicate)
fail         this attempt, any status      the txid and every later active txid are
                                           dropped, then ``sync()``; their metas stay, so
                                           they replay identically
ack / fail   another attempt, or none      ignored (a stale report)
===========  ============================  ==============================================

A fail of an attempt that is not the live one is ignored. Storm removed the live entry instead,
which orphaned the attempt in flight.

``sync()`` runs on every poll and after every event that was not ignored:

1. If ``curr`` is PROCESSED, it becomes COMMITTING: ``StartCommit``. Only ``curr`` commits.
2. For each txid of ``curr .. curr + max_pending - 1`` in order that is not active: it may start
   if it has a stored meta (a replay, no question asked) or the user coordinator
   ``is_ready()``. The first txid that may not start ends the round (Storm went on to the next
   one, whose new meta then broke the strict order). A started txid gets a new attempt id, its
   stored meta or a new one from ``initialize_transaction(txid, meta(txid - 1))`` stored before
   anything is emitted, PROCESSING, and a ``StartBatch``. ``FailedException`` from
   ``initialize_transaction`` also ends the round: the txid is tried again on the next sync.

Attempt ids come from a counter, unique within the run, so a run is reproducible.
"""

from __future__ import annotations

import enum
import itertools
import logging
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple, Protocol

from providers import KeyValueState, StateLostError, StateSerializationError
from statefulbolts.errors import ConfigError, FailedException, StatefulBoltsError, TopologyError
from statefulbolts.transactional._attempt import TransactionAttempt
from statefulbolts.transactional._txstate import (
    RotatingTransactionalState,
    TransactionalStateError,
)

__all__ = [
    "ActiveTransaction",
    "CoordinatorClosedError",
    "CoordinatorCommand",
    "CoordinatorProtocol",
    "StartBatch",
    "StartCommit",
    "TransactionStatus",
    "TransactionalSpoutCoordinator",
    "opaque_coordinator",
    "partitioned_coordinator",
]

log = logging.getLogger(__name__)

CURRTX_KEY = "currtx"
META_PREFIX = "meta/"
FIRST_TXID = 1
MAX_PENDING_KEY = "topology.max.spout.pending"


class CoordinatorClosedError(StatefulBoltsError, RuntimeError):
    """The coordinator was used after ``close()``."""


class CoordinatorProtocol(Protocol):
    """What the coordinator needs of the user's: Storm's ``ITransactionalSpout.Coordinator``."""

    def initialize_transaction(self, txid: int, prev_metadata: Any) -> Any:
        """The meta defining the batch of new ``txid``; ``FailedException`` means "not now"."""

    def is_ready(self) -> bool:
        """Whether a new txid may start; polled, so it must be fast."""

    def close(self) -> None:
        """Release what the coordinator holds."""


class _PartitionCounter(Protocol):
    def num_partitions(self) -> int: ...
    def is_ready(self) -> bool: ...
    def close(self) -> None: ...


class _ReadyCheck(Protocol):
    def is_ready(self) -> bool: ...
    def close(self) -> None: ...


class TransactionStatus(enum.Enum):
    """Where an active txid is."""

    PROCESSING = "PROCESSING"
    PROCESSED = "PROCESSED"
    COMMITTING = "COMMITTING"


class ActiveTransaction(NamedTuple):
    """An active txid's live attempt and its status."""

    attempt: TransactionAttempt
    status: TransactionStatus


class StartBatch(NamedTuple):
    """Command: emit the batch of ``attempt``, defined by ``metadata``.

    ``committed_txid`` is the last committed txid (``curr - 1``), ``None`` while nothing has
    been committed: emitters clean up below it.
    """

    attempt: TransactionAttempt
    metadata: Any
    committed_txid: int | None


class StartCommit(NamedTuple):
    """Command: run the commit phase of ``attempt``."""

    attempt: TransactionAttempt


CoordinatorCommand = StartBatch | StartCommit


# --- the event table ------------------------------------------------------------------------
class _Event(enum.Enum):
    ACK = "ack"
    FAIL = "fail"


class _Standing(enum.Enum):
    """What the coordinator holds for the txid of a reported attempt."""

    PROCESSING = "live attempt, PROCESSING"
    PROCESSED = "live attempt, PROCESSED"
    COMMITTING = "live attempt, COMMITTING"
    STALE = "another attempt, or no entry"


class _Effect(enum.Enum):
    IGNORE = "ignore"
    MARK_PROCESSED = "mark processed"
    COMMITTED = "committed"
    DROP_FROM = "drop this txid and every later one"


_STANDING_OF_STATUS = {
    TransactionStatus.PROCESSING: _Standing.PROCESSING,
    TransactionStatus.PROCESSED: _Standing.PROCESSED,
    TransactionStatus.COMMITTING: _Standing.COMMITTING,
}

_ON_EVENT: dict[tuple[_Event, _Standing], _Effect] = {
    (_Event.ACK, _Standing.PROCESSING): _Effect.MARK_PROCESSED,
    (_Event.ACK, _Standing.COMMITTING): _Effect.COMMITTED,
    (_Event.ACK, _Standing.PROCESSED): _Effect.IGNORE,
    (_Event.ACK, _Standing.STALE): _Effect.IGNORE,
    (_Event.FAIL, _Standing.PROCESSING): _Effect.DROP_FROM,
    (_Event.FAIL, _Standing.PROCESSED): _Effect.DROP_FROM,
    (_Event.FAIL, _Standing.COMMITTING): _Effect.DROP_FROM,
    (_Event.FAIL, _Standing.STALE): _Effect.IGNORE,
}


def _describe(obj: object) -> str:
    kind = type(obj)
    return f"{kind.__module__}.{kind.__qualname__}"


def _check_max_pending(max_pending: int | None) -> int:
    if max_pending is None:
        return 1
    if isinstance(max_pending, bool) or not isinstance(max_pending, int) or max_pending < 1:
        msg = (
            f"{MAX_PENDING_KEY} must be an int of at least 1 for a transactional topology "
            f"(or unset, meaning 1), got {max_pending!r}"
        )
        raise ConfigError(msg)
    return max_pending


def _check_user_coordinator(coordinator: object) -> None:
    missing = [
        name
        for name in ("initialize_transaction", "is_ready", "close")
        if not callable(getattr(coordinator, name, None))
    ]
    if missing:
        msg = (
            f"transactional coordinator {_describe(coordinator)} has no method "
            f"{', '.join(missing)}; expected initialize_transaction(txid, prev_metadata), "
            f"is_ready() and close()"
        )
        raise TopologyError(msg)


class TransactionalSpoutCoordinator:
    """The coordinator of a transactional topology as a pure state machine (Storm's name).

    Args:
        coordinator: the user's coordinator (``initialize_transaction``, ``is_ready``,
            ``close``); see ``partitioned_coordinator`` and ``opaque_coordinator``.
        state: the coordinator's own namespace (``$transactional/<id>/coordinator``); it holds
            ``currtx`` and the metas, and a restart over it resumes.
        max_pending: ``topology.max.spout.pending``; ``None`` means 1.
        attempt_ids: where attempt ids come from; a counter from 1 by default.

    Raises:
        ConfigError: ``max_pending`` is not an int of at least 1.
        TopologyError: ``coordinator`` lacks one of the three methods.
        TransactionalStateError: the namespace holds a ``currtx`` or a meta that is not ours.

    Example:
        >>> from providers.memory import InMemoryKeyValueState
        >>> class Fixed:
        ...     def initialize_transaction(self, txid, prev_metadata): return 10
        ...     def is_ready(self): return True
        ...     def close(self): pass
        >>> coord = TransactionalSpoutCoordinator(Fixed(), InMemoryKeyValueState("doc/coord"))
        >>> [str(c.attempt) for c in coord.sync()]
        ['1:1']
        >>> coord.ack(TransactionAttempt(1, 1))
        [StartCommit(attempt=TransactionAttempt(transaction_id=1, attempt_id=1))]
        >>> coord.ack(TransactionAttempt(1, 1))
        [StartBatch(attempt=TransactionAttempt(transaction_id=2, attempt_id=2), metadata=10, committed_txid=1)]
    """  # noqa: E501 - a doctest's expected output is one line

    def __init__(
        self,
        coordinator: CoordinatorProtocol,
        state: KeyValueState,
        *,
        max_pending: int | None = None,
        attempt_ids: Iterator[int] | None = None,
    ) -> None:
        _check_user_coordinator(coordinator)
        self._user = coordinator
        self._state = state
        self._max = _check_max_pending(max_pending)
        self._attempt_ids = attempt_ids if attempt_ids is not None else itertools.count(1)
        self._metas = RotatingTransactionalState(
            state, strict=True, prefix=META_PREFIX, first_txid=FIRST_TXID
        )
        self._curr = self._load_currtx()
        self._active: dict[int, ActiveTransaction] = {}
        self._closed = False
        self._apply: dict[_Effect, Callable[[TransactionAttempt], None]] = {
            _Effect.MARK_PROCESSED: self._mark_processed,
            _Effect.COMMITTED: self._committed,
            _Effect.DROP_FROM: self._drop_from,
        }
        log.info(
            "transactional coordinator on %s: resuming at txid %s, stored metas for txids %s",
            self._metas.namespace,
            self._curr,
            self._metas.txids(),
        )

    def __repr__(self) -> str:
        active = ", ".join(f"{a.attempt}={a.status.value}" for a in self._active.values())
        return (
            f"TransactionalSpoutCoordinator(curr={self._curr}, max_pending={self._max}, "
            f"active=[{active}])"
        )

    # -- what a driver may look at
    @property
    def curr(self) -> int:
        """The next txid to commit."""
        return self._curr

    @property
    def max_pending(self) -> int:
        """The most txids active at once."""
        return self._max

    @property
    def active(self) -> dict[int, ActiveTransaction]:
        """A copy of the active txids, ascending: txid -> (attempt, status)."""
        return dict(sorted(self._active.items()))

    @property
    def metas(self) -> RotatingTransactionalState:
        """The stored metas (read them; writing is the coordinator's business)."""
        return self._metas

    # -- events
    def sync(self) -> list[CoordinatorCommand]:
        """Poll: commit ``curr`` if it is processed, then start what may start.

        Steps (the module docstring tells why each is so):
            1. ``curr`` PROCESSED -> COMMITTING, ``StartCommit``.
            2. For each txid of the window not active, in order: stop at the first with no
               stored meta while ``is_ready()`` is false; take its meta (stored, or
               ``initialize_transaction`` stored at once; ``FailedException`` stops the round);
               a new attempt, PROCESSING, ``StartBatch``.

        Returns:
            The commands to execute, in this order.
        """
        self._check_open("sync")
        commands: list[CoordinatorCommand] = []
        commands.extend(self._commit_curr())
        commands.extend(self._start_batches())
        return commands

    def ack(self, attempt: TransactionAttempt) -> list[CoordinatorCommand]:
        """The batch or the commit of ``attempt`` completed; returns the commands that follow."""
        return self._on(_Event.ACK, attempt)

    def fail(self, attempt: TransactionAttempt) -> list[CoordinatorCommand]:
        """The batch or the commit of ``attempt`` failed; returns the commands that follow."""
        return self._on(_Event.FAIL, attempt)

    def close(self) -> None:
        """Close the user's coordinator (once); the coordinator takes no events after."""
        if not self._closed:
            self._closed = True
            self._user.close()

    # -- inside
    def _on(self, event: _Event, attempt: TransactionAttempt) -> list[CoordinatorCommand]:
        self._check_open(event.value)
        effect = _ON_EVENT[(event, self._standing(attempt))]
        if effect is _Effect.IGNORE:
            log.debug("coordinator: %s of %s ignored (%r)", event.value, attempt, self)
            return []
        self._apply[effect](attempt)
        return self.sync()

    def _standing(self, attempt: TransactionAttempt) -> _Standing:
        entry = self._active.get(attempt.transaction_id)
        # Compare attempt ids as well: TransactionAttempt's equality does, its hash does not.
        if entry is None or entry.attempt != attempt:
            return _Standing.STALE
        return _STANDING_OF_STATUS[entry.status]

    def _mark_processed(self, attempt: TransactionAttempt) -> None:
        self._active[attempt.transaction_id] = ActiveTransaction(
            attempt, TransactionStatus.PROCESSED
        )

    def _committed(self, attempt: TransactionAttempt) -> None:
        """Commit ack of t: ``currtx = t + 1`` and metas below t deleted, in one atomic write.

        meta(t) stays: it is ``prev_metadata`` of the next new txid. The store is written
        before the in-memory state changes, so a failed write leaves the coordinator as it was.
        """
        txid = attempt.transaction_id
        self._metas.cleanup_before(txid, also_put={CURRTX_KEY: txid + 1})
        del self._active[txid]
        self._curr = txid + 1
        log.debug("coordinator: txid %s committed, currtx is now %s", txid, self._curr)

    def _drop_from(self, attempt: TransactionAttempt) -> None:
        txid = attempt.transaction_id
        dropped = [t for t in self._active if t >= txid]
        for t in dropped:
            del self._active[t]
        log.debug("coordinator: %s failed, txids %s will replay", attempt, sorted(dropped))

    def _commit_curr(self) -> list[CoordinatorCommand]:
        entry = self._active.get(self._curr)
        if entry is None or entry.status is not TransactionStatus.PROCESSED:
            return []
        self._active[self._curr] = ActiveTransaction(entry.attempt, TransactionStatus.COMMITTING)
        return [StartCommit(entry.attempt)]

    def _start_batches(self) -> list[CoordinatorCommand]:
        commands: list[CoordinatorCommand] = []
        if len(self._active) >= self._max:
            return commands
        committed = self._curr - 1 if self._curr > FIRST_TXID else None
        for txid in range(self._curr, self._curr + self._max):
            if txid in self._active:
                continue
            if txid not in self._metas and not self._user.is_ready():
                break
            try:
                meta = self._meta_of(txid)
            except FailedException as exc:
                log.info("coordinator: txid %s not started this round: %s", txid, exc)
                break
            attempt = TransactionAttempt(txid, next(self._attempt_ids))
            self._active[txid] = ActiveTransaction(attempt, TransactionStatus.PROCESSING)
            commands.append(StartBatch(attempt, meta, committed))
        return commands

    def _meta_of(self, txid: int) -> Any:
        """The stored meta of ``txid``, or a new one from the user, stored before returning."""
        try:
            return self._metas.get_or_init(txid, self._user.initialize_transaction)
        except StateSerializationError as exc:
            msg = (
                f"{_describe(self._user)}.initialize_transaction({txid}, ...) returned a meta "
                f"that cannot be stored: {exc}"
            )
            raise StateSerializationError(msg) from exc

    def check_store(self, txid: int) -> None:
        """Before ``txid`` commits: raise ``StateLostError`` if the store lost this coordinator's.

        The store must still hold ``currtx`` as this coordinator last wrote it (nothing before
        the first commit) and the meta stored when ``txid`` started. A store restarted empty,
        flushed or swapped for another holds neither, and committing on would count the batch
        into maps that lost their history. Two fresh reads (``KeyValueState.get_committed``);
        a provider without the stored image is not checked.
        """
        state = self._state
        if not state.supports_stored_image:
            return
        curr = state.get_committed(CURRTX_KEY)
        expected = None if self._curr == FIRST_TXID else self._curr
        meta = state.get_committed(self._metas.key(txid))
        if curr == expected and meta is not None:
            return
        found = f"currtx {curr!r}" + ("" if meta is not None else f" and no meta for txid {txid}")
        writer = state.stored_fence()
        if writer is not None:
            found += f" (last written under lease epoch {writer})"
        if isinstance(curr, int) and curr > (expected or FIRST_TXID):
            # Ahead, not lost: never advise deleting what may be another driver's live state.
            msg = (
                f"coordinator state {self._metas.namespace!r} in {state.location} holds {found}, "
                f"but this coordinator committed up to txid {self._curr - 1}: the store holds "
                "progress from after this driver's, restored from a later copy or written by "
                "another driver of this transactional id (`statefulbolts transactional status` "
                "shows which driver holds its lease). The topology stops rather than commit "
                "into it; find out which copy is the right one before changing anything"
            )
            raise StateLostError(msg)
        msg = (
            f"coordinator state {self._metas.namespace!r} in {state.location} holds {found}, "
            f"but this coordinator committed up to txid {self._curr - 1} and stored txid "
            f"{txid}'s meta: the store lost committed state (restarted empty, flushed, another "
            "database?). The topology stops rather than commit into it; restore the store (a "
            "durable Redis keeps it: appendonly yes), or delete the transactional id's state "
            "to start over on purpose (statefulbolts state drop --id ...)"
        )
        raise StateLostError(msg)

    def _load_currtx(self) -> int:
        value = self._state.get(CURRTX_KEY)
        if value is None:
            return FIRST_TXID
        if isinstance(value, bool) or not isinstance(value, int) or value < FIRST_TXID:
            msg = (
                f"coordinator state {self._metas.namespace!r}: {CURRTX_KEY!r} holds {value!r}, "
                f"expected an int of at least {FIRST_TXID}"
            )
            raise TransactionalStateError(msg)
        return value

    def _check_open(self, what: str) -> None:
        if self._closed:
            msg = f"transactional coordinator on {self._metas.namespace!r}: {what} after close()"
            raise CoordinatorClosedError(msg)


# --- adapters for Storm's two partitioned spout kinds ---------------------------------------
class _PartitionedCoordinator:
    """A partitioned spout's coordinator seen as a plain one: the meta is the partition count."""

    def __init__(self, inner: _PartitionCounter) -> None:
        self._inner = inner

    def __repr__(self) -> str:
        return f"partitioned_coordinator({self._inner!r})"

    def initialize_transaction(self, txid: int, prev_metadata: Any) -> Any:
        return self._inner.num_partitions()

    def is_ready(self) -> bool:
        return self._inner.is_ready()

    def close(self) -> None:
        self._inner.close()


class _OpaqueCoordinator:
    """An opaque spout's coordinator seen as a plain one: the meta is ``None``."""

    def __init__(self, inner: _ReadyCheck) -> None:
        self._inner = inner

    def __repr__(self) -> str:
        return f"opaque_coordinator({self._inner!r})"

    def initialize_transaction(self, txid: int, prev_metadata: Any) -> Any:
        return None

    def is_ready(self) -> bool:
        return self._inner.is_ready()

    def close(self) -> None:
        self._inner.close()


def partitioned_coordinator(coordinator: Any) -> CoordinatorProtocol:
    """Adapt a partitioned spout's coordinator (``num_partitions``, ``is_ready``, ``close``).

    The meta of a new txid is ``num_partitions()`` at the moment it first starts, so replays of
    that txid never see a partition added later; the next new txid does.

    Example:
        >>> class Two:
        ...     def num_partitions(self): return 2
        ...     def is_ready(self): return True
        ...     def close(self): pass
        >>> partitioned_coordinator(Two()).initialize_transaction(1, None)
        2
    """
    return _PartitionedCoordinator(coordinator)


def opaque_coordinator(coordinator: Any) -> CoordinatorProtocol:
    """Adapt an opaque partitioned spout's coordinator (``is_ready``, ``close``).

    The meta is ``None``. It is still stored, so a replay of the txid skips ``is_ready``.

    Example:
        >>> class Always:
        ...     def is_ready(self): return True
        ...     def close(self): pass
        >>> print(opaque_coordinator(Always()).initialize_transaction(1, None))
        None
    """
    return _OpaqueCoordinator(coordinator)
