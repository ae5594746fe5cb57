"""``TimerService``: a stateful task's per-key timers, kept in a state of their own.

A timer is a ``(key, time)`` pair in one of two time domains. The service keeps them in a
``KeyValueState`` of their own (the task's ``$timers`` namespace, ``timers_namespace``) that
the checkpoint protocol prepares, commits and rolls back with the bolt's state, so a timer
registered, deleted or fired in transaction ``t`` is so exactly when ``t`` commits.

The stored form, plain msgpack (the provider's system serializers):

- ``[domain code, at_ms, key] -> 1``: one timer (``"p"``: processing time, ``"e"``: event time).
  The time and the key are the entry's key, so registering a timer twice stores it once.
- ``"next:p"`` / ``"next:e"`` -> a time no later than the domain's earliest timer (a lower
  bound: deleting a timer leaves it). A transaction reads it and scans the timers only when
  something may be due, so a task with nothing due pays one read, not a scan.
- ``"watermark"`` -> the event-time watermark, absent until the bolt first advances it.

When timers fire (the rules the tests check):

1. Processing time: at the start of each PREPARE, before its tick tuples and data, every
   processing-time timer at or before the transaction's ``started_ms`` (the driver's, the same
   in every replay of the transaction) fires; then every event-time timer at or before the
   watermark the transaction starts with.
2. Event time: ``advance_watermark(ts)`` raises the watermark (never lowers it) and fires every
   event-time timer at or before it, before it returns.
3. A pass fires the timers due when it starts, in time order, ties in key order (Python's order
   of the keys; keys that do not compare, by their msgpack bytes). A timer deleted by an earlier
   callback of the pass does not fire. A timer registered during a pass at or before its limit
   waits for the next pass (the next transaction, or the next watermark), so a callback that
   registers its own time again cannot loop forever.
4. A timer fires once: its entry is deleted in the transaction it fired in, before its callback.
5. A callback that raises fails the transaction, which rolls the firing back: the timer stays
   registered and fires again in the replay. The exception says which timer it came from
   (``statefulbolts.errors.raised_in``), and so does the error that stops the topology.

Example:
    >>> from providers import InMemoryKeyValueState
    >>> fired = []
    >>> service = TimerService(
    ...     InMemoryKeyValueState("demo/sessions-0/$timers"),
    ...     lambda key, at, domain: fired.append((key, at, domain.value)),
    ... )
    >>> service.register_processing_time_timer("bob", 2000)
    >>> service.register_processing_time_timer("ann", 2000)
    >>> service.register_processing_time_timer("ann", 2000)  # the same timer: stored once
    >>> service.register_event_time_timer("ann", 500)
    >>> service.fire_due(1999)  # a transaction that started at 1999 ms: nothing due
    0
    >>> service.fire_due(2500)
    2
    >>> service.advance_watermark(700)
    >>> fired
    [('ann', 2000, 'processing'), ('bob', 2000, 'processing'), ('ann', 500, 'event')]
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from typing import Any

import msgpack

from providers import KeyValueState, StateSerializationError
from statefulbolts.errors import mark_raised_in
from statefulbolts.timers._errors import TimerArgumentError, TimerNotReadyError

__all__ = [
    "StoredTimer",
    "TimeDomain",
    "TimerService",
    "stored_timers",
    "stored_watermark",
    "timer_of_entry",
    "timer_records",
]


class TimeDomain(enum.StrEnum):
    """Which clock a timer is set on."""

    #: The transaction's start time (``current_processing_time``), fixed by the driver.
    PROCESSING_TIME = "processing"
    #: The watermark the bolt advances (``advance_watermark``).
    EVENT_TIME = "event"


_CODE = {TimeDomain.PROCESSING_TIME: "p", TimeDomain.EVENT_TIME: "e"}
_DOMAIN = {code: domain for domain, code in _CODE.items()}
_BOUND = {domain: f"next:{code}" for domain, code in _CODE.items()}
_WATERMARK = "watermark"

Number = int | float
# (domain, at_ms, key): one stored timer, as ``stored_timers`` lists them.
StoredTimer = tuple[TimeDomain, Number, Any]


def _time(at_ms: Any, what: str) -> Number:
    """``at_ms`` as stored: an int when it is whole (so 1000 and 1000.0 are one timer)."""
    if isinstance(at_ms, bool) or not isinstance(at_ms, int | float) or not math.isfinite(at_ms):
        msg = f"{what} must be a finite number of milliseconds, got {at_ms!r}"
        raise TimerArgumentError(msg)
    return int(at_ms) if float(at_ms).is_integer() else float(at_ms)


def _entry(domain: TimeDomain, at_ms: Number, key: Any) -> list[Any]:
    return [_CODE[domain], at_ms, key]


def _as_timer(stored_key: Any) -> StoredTimer | None:
    """The timer a stored key is, or ``None`` for the service's own records."""
    if isinstance(stored_key, list) and len(stored_key) == 3 and stored_key[0] in _DOMAIN:
        return _DOMAIN[stored_key[0]], stored_key[1], stored_key[2]
    return None


def timer_of_entry(stored_key: Any) -> StoredTimer | None:
    """The timer a stored key of a timers state is; ``None`` for the service's own records.

    For tools that move a task's timers (``recovery.evolve``): the stored form stays here.

    Example:
        >>> timer_of_entry(["e", 500, "ann"]), timer_of_entry("watermark")
        ((<TimeDomain.EVENT_TIME: 'event'>, 500, 'ann'), None)
    """
    return _as_timer(stored_key)


def stored_watermark(state: KeyValueState) -> Number | None:
    """The committed event-time watermark of a timers state (``None``: never advanced)."""
    return state.get_committed(_WATERMARK)


def timer_records(
    bounds: dict[TimeDomain, Number], watermark: Number | None
) -> list[tuple[Any, Any]]:
    """The service's own records for a state whose timers start at ``bounds`` per domain.

    ``bounds`` maps a domain to a time no later than its earliest timer (a domain without
    timers is left out); ``watermark`` is the event-time watermark (``None``: none yet).

    Example:
        >>> timer_records({TimeDomain.PROCESSING_TIME: 2000}, 700)
        [('next:p', 2000), ('watermark', 700)]
    """
    records: list[tuple[Any, Any]] = [
        (_BOUND[d], at) for d in TimeDomain if (at := bounds.get(d)) is not None
    ]
    if watermark is not None:
        records.append((_WATERMARK, watermark))
    return records


def _in_order(timers: list[StoredTimer]) -> list[StoredTimer]:
    """By time, ties by key (by the keys' msgpack bytes when they do not compare)."""
    try:
        return sorted(timers, key=lambda t: (t[1], t[2]))
    except TypeError:
        return sorted(timers, key=lambda t: (t[1], msgpack.packb(t[2], use_bin_type=True)))


def stored_timers(state: KeyValueState, domain: TimeDomain | None = None) -> list[StoredTimer]:
    """Every timer ``state`` holds (of ``domain``, or of both), in firing order.

    Processing-time timers come before event-time ones; within a domain, rule 3's order.
    """
    found: dict[TimeDomain, list[StoredTimer]] = {d: [] for d in TimeDomain}
    for stored_key in state.iter_keys():
        timer = _as_timer(stored_key)
        if timer is not None and (domain is None or timer[0] is domain):
            found[timer[0]].append(timer)
    return [t for d in TimeDomain for t in _in_order(found[d])]


class TimerService:
    """Register, delete and fire one stateful task's timers (see the module docstring).

    ``state`` is the task's timers state; ``fire(key, at_ms, domain)`` runs the bolt's
    callback. The framework makes one per task of a ``TimerBolt`` and calls ``fire_due`` at
    the start of each PREPARE; the bolt gets it as ``self.timers``.
    """

    def __init__(
        self, state: KeyValueState, fire: Callable[[Any, Number, TimeDomain], None]
    ) -> None:
        self._state = state
        self._fire = fire
        self._now_ms: float | None = None
        self._firing = False

    # -- what the bolt calls
    def register_processing_time_timer(self, key: Any, at_ms: float) -> None:
        """Fire ``on_timer(key, at_ms, PROCESSING_TIME, ...)`` when a transaction starts then.

        It fires in the first transaction that starts at or after ``at_ms`` (one that started
        already is past: the next one). Registering the same key and time again changes nothing.

        Raises:
            TimerArgumentError: ``at_ms`` is not a finite number, or ``key`` cannot be stored.
        """
        self._register(TimeDomain.PROCESSING_TIME, key, at_ms)

    def delete_processing_time_timer(self, key: Any, at_ms: float) -> None:
        """Forget the processing-time timer of ``key`` at ``at_ms`` (none: nothing happens)."""
        self._delete(TimeDomain.PROCESSING_TIME, key, at_ms)

    def register_event_time_timer(self, key: Any, at_ms: float) -> None:
        """Fire ``on_timer(key, at_ms, EVENT_TIME, ...)`` once the watermark reaches ``at_ms``.

        A timer at or before the current watermark fires at the next transaction's start (or
        the next ``advance_watermark``, whichever comes first).

        Raises:
            TimerArgumentError: ``at_ms`` is not a finite number, or ``key`` cannot be stored.
        """
        self._register(TimeDomain.EVENT_TIME, key, at_ms)

    def delete_event_time_timer(self, key: Any, at_ms: float) -> None:
        """Forget the event-time timer of ``key`` at ``at_ms`` (none: nothing happens)."""
        self._delete(TimeDomain.EVENT_TIME, key, at_ms)

    def current_processing_time(self) -> float:
        """The running transaction's start time, in ms: the same in every replay of it.

        Raises:
            TimerNotReadyError: no transaction is running (the bolt is not in a PREPARE).
        """
        if self._now_ms is None:
            msg = (
                "current_processing_time() has no transaction time: processing time is the "
                "start time of the transaction whose tuples the bolt executes, and none is "
                "running; call it from execute() or on_timer()"
            )
            raise TimerNotReadyError(msg)
        return self._now_ms

    def current_watermark(self) -> float:
        """The event-time watermark; ``-inf`` until the bolt first advances it."""
        watermark = self._state.get(_WATERMARK)
        return -math.inf if watermark is None else watermark

    def advance_watermark(self, ts_ms: float) -> None:
        """Raise the watermark to ``ts_ms`` and fire the event-time timers it passes.

        A ``ts_ms`` at or below the current watermark changes nothing (a watermark never goes
        back). Called from ``on_timer``, the new watermark's timers fire once that pass ends.

        Raises:
            TimerArgumentError: ``ts_ms`` is not a finite number.
        """
        ts = _time(ts_ms, "the watermark")
        if ts <= self.current_watermark():
            return
        self._state.put(_WATERMARK, ts)
        if not self._firing:
            self._fire_event_time()

    def registered(self, domain: TimeDomain | None = None) -> list[StoredTimer]:
        """The timers registered now (this transaction's changes included), in firing order."""
        return stored_timers(self._state, domain)

    # -- what the framework calls
    def fire_due(self, now_ms: float) -> int:
        """Start of a transaction that started at ``now_ms``: fire what is due; how many fired."""
        self._now_ms = now_ms
        self._firing = True
        try:
            fired = self._pass(TimeDomain.PROCESSING_TIME, now_ms)
        finally:
            self._firing = False
        return fired + self._fire_event_time()

    # -- inside
    def _register(self, domain: TimeDomain, key: Any, at_ms: Any) -> None:
        at = _time(at_ms, f"the {domain.value}-time timer of key {key!r}")
        entry = _entry(domain, at, key)
        state = self._state
        try:
            if state.get(entry) is not None:
                return
            state.put(entry, 1)
        except StateSerializationError as exc:
            kind = f"{type(key).__module__}.{type(key).__qualname__}"
            msg = (
                f"a timer's key is stored with msgpack, which cannot encode key {key!r} of type "
                f"{kind}: use a str, a number, or a list or tuple of them"
            )
            raise TimerArgumentError(msg) from exc
        bound = state.get(_BOUND[domain])
        if bound is None or at < bound:
            state.put(_BOUND[domain], at)

    def _delete(self, domain: TimeDomain, key: Any, at_ms: Any) -> None:
        at = _time(at_ms, f"the {domain.value}-time timer of key {key!r}")
        # The domain's bound stays: still no later than its earliest timer.
        self._state.delete(_entry(domain, at, key))

    def _fire_event_time(self) -> int:
        """Fire event-time timers up to the watermark, again while callbacks raise it."""
        fired, done = 0, None
        self._firing = True
        try:
            while (watermark := self.current_watermark()) != done:
                done = watermark
                fired += self._pass(TimeDomain.EVENT_TIME, watermark)
        finally:
            self._firing = False
        return fired

    def _pass(self, domain: TimeDomain, limit: float) -> int:
        """Fire ``domain``'s timers at or before ``limit`` (rules 3 and 4)."""
        state, bound_key = self._state, _BOUND[domain]
        bound = state.get(bound_key)
        if bound is None or bound > limit:
            return 0
        due: list[StoredTimer] = []
        later: Number | None = None
        for stored_key in state.iter_keys():
            timer = _as_timer(stored_key)
            if timer is None or timer[0] is not domain:
                continue
            if timer[1] <= limit:
                due.append(timer)
            elif later is None or timer[1] < later:
                later = timer[1]
        # The bound of what stays; a callback's registration lowers it as usual.
        if later is None:
            state.delete(bound_key)
        else:
            state.put(bound_key, later)
        fired = 0
        for _, at, key in _in_order(due):
            if state.delete(_entry(domain, at, key)) is None:
                continue  # deleted by an earlier callback of this pass
            fired += 1
            try:
                self._fire(key, at, domain)
            except Exception as exc:
                mark_raised_in(exc, f"on_timer of key {key!r} at {at} ms ({domain.value} time)")
                raise
        return fired
