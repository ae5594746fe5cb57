"""``WindowManager``: which tuples each window holds, when it fires, and when a tuple is done.

The manager is pure: no thread, no clock, no Spark. The executor feeds it three events and
carries out the ``WindowUpdate`` each returns (run the fired windows in order, emit the late
tuples to the late stream, ack the released tuples):

=====================  ==================================================================
event                  effect
=====================  ==================================================================
``add(item, ts)``      processing time: first ``on_time(ts)``, then the tuple is held;
                       a count slide may fire. Event time: a tuple older than the last
                       watermark is late (returned, never held); any other is held.
``on_time(now)``       processing time: fire every window that ends at or before ``now``.
                       Event time: every ``watermark_interval_ms`` emit a watermark, the
                       oldest of the input streams' newest timestamps minus the lag.
``on_watermark(ts)``   event time: fire every window the watermark has reached.
=====================  ==================================================================

Which tuples a window holds ("the order" is by timestamp, then arrival; in processing time a
tuple's timestamp is when it arrived, never earlier than a time the manager has already seen):

==========  ==========  ==============================================================
slides by   length      a window...
==========  ==========  ==============================================================
Duration S  Duration L  ends at each boundary E (multiples of S in event time; every S
                        from the first time seen in processing time) and holds the tuples
                        with ``E - L <= ts < E``; it fires once time or the watermark
                        reaches E, if it holds any tuple
Duration S  Count N     ends at each boundary E and holds the last N tuples with ts < E
Count S     Duration L  fires on every S-th tuple in the order (event time: once the
                        watermark has passed it) and holds it and the tuples before it with
                        ``ts > its ts - L``
Count S     Count N     fires on every S-th tuple and holds the last N up to it
==========  ==========  ==============================================================

Watermark W means no tuple older than W can come any more: a tuple with ``ts < W`` is late,
and a window that ends at or before W is final, so it fires. A window's tuples are therefore
fixed by their timestamps, whatever order they arrived in. (Storm's executor fires a window
ending at W but holds the tuples of timestamp W in it, so a tuple stamped W arriving after
the watermark was neither late nor in its window; half-open windows close that gap.)

A tuple is released as soon as no window still to fire can hold it; the executor acks it then,
which is when it has left every window, as in Storm. A window's ``get_expired()`` is the part
of the previous window it no longer holds, and ``get_new()`` the part that is new.

``snapshot()`` is the whole state as plain lists, dicts and ints (and the items, which should
then be plain ids); ``restore`` takes it back. Firing depends only on that state and on the
events that follow, so restoring and replaying the same events fires the same windows with the
same ``index``, and re-delivering a time or a watermark already seen fires nothing.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

from statefulbolts.tuples import DEFAULT_STREAM
from statefulbolts.windowing._config import Count, Duration, WindowConfig
from statefulbolts.windowing._errors import WindowConfigError, WindowStateError, WindowTimeError
from statefulbolts.windowing._window import Window

T = TypeVar("T")

SNAPSHOT_FORMAT = 1


class _Held(NamedTuple):
    """A tuple the manager holds: its timestamp, its arrival number, the caller's item."""

    ts: int
    seq: int
    item: Any


def _ts(held: _Held) -> int:
    return held.ts


def _order(held: _Held) -> tuple[int, int]:
    return (held.ts, held.seq)


@dataclass(frozen=True)
class WindowUpdate(Generic[T]):
    """What one event did: windows fired (in order), items released, items found late.

    Carry it out in this order: execute ``fired`` one by one, emit ``late`` to the late tuple
    stream (and ack them), ack ``released``. A released item may be in a window fired by this
    same update, never in a later one.
    """

    fired: tuple[Window[T], ...] = ()
    released: tuple[T, ...] = ()
    late: tuple[T, ...] = ()

    def __add__(self, other: WindowUpdate[T]) -> WindowUpdate[T]:
        return WindowUpdate(
            self.fired + other.fired, self.released + other.released, self.late + other.late
        )


def _check_time(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        msg = (
            f"{what} must be an int of milliseconds, got {type(value).__name__} {value!r} "
            "(from a Clock, pass int(clock.now_ms()))"
        )
        raise WindowTimeError(msg)
    return value


class WindowManager(Generic[T]):
    """Windows over items (tuples or their ids): fires them and says when each item is done.

    ``input_streams`` names every stream the bolt reads; in event time the watermark waits for
    a timestamp from each of them, as Storm's does.

    Example:
        >>> manager = WindowManager(WindowConfig(Count(3), Count(2)))
        >>> [manager.add(x, ts).fired for x, ts in (("a", 0), ("b", 1))][-1]
        (Window(index=0, start=None, end=1, items=['a', 'b'], new=['a', 'b'], expired=[]),)
        >>> manager.add("c", 2), manager.add("d", 3).fired[0].get(), manager.held()
        (WindowUpdate(fired=(), released=(), late=()), ['b', 'c', 'd'], ['d'])

        Event time, tumbling windows of 10 ms:

        >>> events = WindowManager(WindowConfig(Duration(10), Duration(10), "ts"))
        >>> for item, ts in (("x", 3), ("y", 12), ("z", 7)):
        ...     _ = events.add(item, ts)
        >>> update = events.on_watermark(12)
        >>> [w.get() for w in update.fired], update.released
        ([['x', 'z']], ('x', 'z'))
        >>> events.add("old", 11).late
        ('old',)
    """

    def __init__(
        self, config: WindowConfig, *, input_streams: Iterable[str] = (DEFAULT_STREAM,)
    ) -> None:
        if not isinstance(config, WindowConfig):
            msg = f"WindowManager takes a WindowConfig, got {type(config).__name__}"
            raise WindowConfigError(msg)
        streams = frozenset(input_streams)
        if not streams or not all(isinstance(s, str) and s for s in streams):
            msg = f"input_streams must be non-empty strings, at least one; got {input_streams!r}"
            raise WindowConfigError(msg)
        self._config = config
        self._streams = streams
        self._slide = config.sliding.value
        self._length = config.length.value
        self._by_time = isinstance(config.sliding, Duration)
        self._count_length = isinstance(config.length, Count)
        self._reset()

    def _reset(self) -> None:
        # Everything below is the state ``snapshot`` saves.
        self._held: list[_Held] = []  # in the order: (ts, seq)
        self._next_seq = 0
        self._prev: list[_Held] = []  # the last window that fired, for new / expired
        self._fired = 0  # how many windows fired
        self._next_end: int | None = None  # slide by time: the next window end to look at
        self._phase: int | None = 0 if self._config.event_time else None  # ends = phase mod S
        self._counter = 0  # slide by count: tuples counted since the last window
        self._counted: tuple[int, int] | None = None  # ... and the last one counted
        self._watermark: int | None = None
        self._stream_max: dict[str, int] = {}
        self._next_watermark_at: int | None = None
        self._now: int | None = None  # processing time: the latest time seen

    # ------------------------------------------------------------------ reading

    @property
    def config(self) -> WindowConfig:
        """The window this manager runs."""
        return self._config

    @property
    def watermark(self) -> int | None:
        """The last watermark (event time), or ``None`` before the first one."""
        return self._watermark

    @property
    def fired_count(self) -> int:
        """How many windows have fired; the next window's ``index``."""
        return self._fired

    def held(self) -> list[T]:
        """The items held (not yet released), in the order."""
        return [h.item for h in self._held]

    # ------------------------------------------------------------------ events

    def add(self, item: T, ts: int, stream: str = DEFAULT_STREAM) -> WindowUpdate[T]:
        """Take a tuple (or its id) with its timestamp in milliseconds, from ``stream``.

        In processing time ``ts`` is the time now; in event time, the tuple's timestamp.
        """
        ts = _check_time(ts, "add: the timestamp")
        if stream not in self._streams:
            msg = (
                f"add: stream {stream!r} is not one of this manager's input streams "
                f"{sorted(self._streams)}: list every input stream in input_streams"
            )
            raise WindowConfigError(msg)
        if self._config.event_time:
            return self._add_event_time(item, ts, stream)
        update = self.on_time(ts)
        # Processing time does not run backwards: a tuple stamped before a time already seen
        # arrived now, at the latest time seen.
        self._hold(item, ts if self._now is None else max(ts, self._now))
        if self._by_time:
            return update + self._released_by_newer()
        return update + self._fire_count_windows(len(self._held))

    def on_time(self, now: int) -> WindowUpdate[T]:
        """Time has reached ``now`` (ms): fire due windows, or emit a due watermark.

        A time not after the latest one seen does nothing, so a replayed tick is harmless.
        """
        now = _check_time(now, "on_time: now")
        if self._config.event_time:
            return self._watermark_tick(now)
        if self._now is not None and now <= self._now:
            return WindowUpdate()
        if self._now is None and self._by_time:
            # Storm's processing-time windows end every S from when the bolt started.
            self._phase = now % self._slide
        self._now = now
        return self._advance(now) if self._by_time else WindowUpdate()

    def on_watermark(self, ts: int) -> WindowUpdate[T]:
        """A watermark: no tuple older than ``ts`` will come. Fires the windows it completes.

        A watermark not after the last one does nothing.
        """
        ts = _check_time(ts, "on_watermark: the watermark")
        if not self._config.event_time:
            msg = (
                "on_watermark: this window runs on processing time; watermarks need a "
                "timestamp field (with_timestamp_field), or call on_time"
            )
            raise WindowConfigError(msg)
        if self._watermark is not None and ts <= self._watermark:
            return WindowUpdate()
        self._watermark = ts
        return self._advance(ts)

    # ------------------------------------------------------------------ event time

    def _add_event_time(self, item: T, ts: int, stream: str) -> WindowUpdate[T]:
        if ts > self._stream_max.get(stream, ts - 1):
            self._stream_max[stream] = ts
        if self._watermark is not None and ts < self._watermark:
            return WindowUpdate(late=(item,))
        self._hold(item, ts)
        return self._released_by_newer() if self._by_time else WindowUpdate()

    def _released_by_newer(self) -> WindowUpdate[T]:
        """Release what a new tuple ends, when windows slide by time.

        It may push an older tuple out of the last N of every window to come, or itself fall
        between windows shorter than their slide.
        """
        released: list[T] = []
        if self._next_end is not None:
            self._release_before_end(self._next_end, released)
        return WindowUpdate(released=tuple(released))

    def _watermark_tick(self, now: int) -> WindowUpdate[T]:
        interval = self._config.watermark_interval_ms
        if self._next_watermark_at is None:
            # Storm's generator starts with the bolt and first emits one interval later.
            self._next_watermark_at = now + interval
            return WindowUpdate()
        if now < self._next_watermark_at:
            return WindowUpdate()
        missed = (now - self._next_watermark_at) // interval
        self._next_watermark_at += (missed + 1) * interval
        if not self._streams <= self._stream_max.keys():
            return WindowUpdate()  # some input stream has sent nothing yet
        newest = min(self._stream_max[s] for s in self._streams)
        return self.on_watermark(newest - self._config.lag_ms)

    # ------------------------------------------------------------------ firing

    def _hold(self, item: T, ts: int) -> None:
        held = _Held(ts, self._next_seq, item)
        self._next_seq += 1
        if not self._held or _order(self._held[-1]) < _order(held):
            self._held.append(held)
        else:
            bisect.insort(self._held, held, key=_order)

    def _advance(self, frontier: int) -> WindowUpdate[T]:
        """Everything with a timestamp before ``frontier`` is final: fire what that allows."""
        if self._by_time:
            return self._fire_time_windows(frontier)
        final = bisect.bisect_left(self._held, frontier, key=_ts)
        return self._fire_count_windows(final)

    def _align_after(self, ts: int) -> int:
        """The first window end after ``ts``: the next boundary strictly greater."""
        phase = self._phase or 0  # set by the config or the first time before any window
        return ts + self._slide - (ts - phase) % self._slide

    def _fire_time_windows(self, frontier: int) -> WindowUpdate[T]:
        fired: list[Window[T]] = []
        released: list[T] = []
        while True:
            end = self._next_end
            if end is None:
                start_from = min(self._held[0].ts, frontier) if self._held else frontier
                end = self._next_end = self._align_after(start_from)
            if end > frontier:
                break
            self._release_before_end(end, released)
            size = bisect.bisect_left(self._held, end, key=_ts)
            if size:
                fired.append(self._fire(self._held[:size], end))
                self._next_end = end + self._slide
            else:
                # Nothing in this window: jump to the first window that can hold something,
                # the one of the oldest held tuple or of a tuple still to come.
                start_from = min(self._held[0].ts, frontier) if self._held else frontier
                self._next_end = self._align_after(start_from)
        # Eagerly: what no window from the next one on can hold has left every window.
        self._release_before_end(end, released)
        return WindowUpdate(tuple(fired), tuple(released))

    def _release_before_end(self, end: int, released: list[T]) -> None:
        """Release what no window ending at ``end`` or later can hold (slide by time)."""
        if self._count_length:
            before = bisect.bisect_left(self._held, end, key=_ts)
            self._release(max(0, before - self._length), released)
        else:
            self._release(bisect.bisect_left(self._held, end - self._length, key=_ts), released)

    def _fire_count_windows(self, final: int) -> WindowUpdate[T]:
        """Count the final held tuples (``self._held[:final]``) not counted yet; fire on S."""
        fired: list[Window[T]] = []
        released: list[T] = []
        pos = (
            0
            if self._counted is None
            else (bisect.bisect_right(self._held, self._counted, key=_order))
        )
        while pos < final:
            trigger = self._held[pos]
            self._counted = _order(trigger)
            self._counter += 1
            if self._counter < self._slide:
                if self._count_length and self._counter <= self._slide - self._length:
                    # Before the last N of this stretch: no window will hold it.
                    self._release(pos + 1, released, start=pos)
                    final -= 1
                    continue
                pos += 1
                continue
            self._counter = 0
            if not self._count_length:
                gone = bisect.bisect_right(self._held, trigger.ts - self._length, key=_ts)
                self._release(gone, released)
                pos -= gone
                final -= gone
            fired.append(self._fire(self._held[: pos + 1], trigger.ts))
            if self._count_length:
                # The next window holds the last N up to S tuples further on.
                keep = max(0, self._length - self._slide)
                gone = max(0, pos + 1 - keep)
                self._release(gone, released)
                pos -= gone
                final -= gone
            pos += 1
        return WindowUpdate(tuple(fired), tuple(released))

    def _release(self, stop: int, released: list[T], start: int = 0) -> None:
        if stop > start:
            released.extend(h.item for h in self._held[start:stop])
            del self._held[start:stop]

    def _fire(self, events: list[_Held], end: int) -> Window[T]:
        now = {h.seq for h in events}
        before = {h.seq for h in self._prev}
        window: Window[T] = Window(
            [h.item for h in events],
            new=[h.item for h in events if h.seq not in before],
            expired=[h.item for h in self._prev if h.seq not in now],
            start=None if self._count_length else end - self._length,
            end=end,
            index=self._fired,
        )
        self._fired += 1
        self._prev = events
        return window

    # ------------------------------------------------------------------ persistence

    def snapshot(self) -> dict[str, Any]:
        """The whole state as a plain value (lists, dicts, ints, ``None`` and the items).

        Example:
            >>> manager = WindowManager(WindowConfig(Count(2), Count(1)))
            >>> _ = manager.add("a", 5)
            >>> copy = WindowManager(WindowConfig(Count(2), Count(1)))
            >>> copy.restore(manager.snapshot())
            >>> copy.add("b", 6).fired[0].get()
            ['a', 'b']
        """
        return {
            "format": SNAPSHOT_FORMAT,
            "config": self._config.to_value(),
            "held": [list(h) for h in self._held],
            "next_seq": self._next_seq,
            "prev": [list(h) for h in self._prev],
            "fired": self._fired,
            "next_end": self._next_end,
            "phase": self._phase,
            "counter": self._counter,
            "counted": None if self._counted is None else list(self._counted),
            "watermark": self._watermark,
            "stream_max": dict(self._stream_max),
            "next_watermark_at": self._next_watermark_at,
            "now": self._now,
        }

    def restore(self, value: Any) -> None:
        """Take back a ``snapshot()`` (of a manager of the same window); replaces all state.

        Raises:
            WindowStateError: the value is not a snapshot this manager can take; nothing changed.
        """
        state = _SnapshotReader(value, self._config, self._streams)
        self._held = state.events("held")
        self._prev = state.events("prev")
        self._next_seq = state.integer("next_seq")
        self._fired = state.integer("fired")
        self._next_end = state.optional_integer("next_end")
        self._phase = state.optional_integer("phase")
        self._counter = state.integer("counter")
        counted = state.optional_pair("counted")
        self._counted = counted
        self._watermark = state.optional_integer("watermark")
        self._stream_max = state.stream_max()
        self._next_watermark_at = state.optional_integer("next_watermark_at")
        self._now = state.optional_integer("now")


class _SnapshotReader:
    """Reads a snapshot's fields, checking each; all checks run before ``restore`` changes."""

    FIELDS = frozenset(
        {
            "format",
            "config",
            "held",
            "next_seq",
            "prev",
            "fired",
            "next_end",
            "phase",
            "counter",
            "counted",
            "watermark",
            "stream_max",
            "next_watermark_at",
            "now",
        }
    )

    def __init__(self, value: Any, config: WindowConfig, streams: frozenset[str]) -> None:
        if not isinstance(value, dict) or set(value) != self.FIELDS:
            got = sorted(value) if isinstance(value, dict) else type(value).__name__
            msg = f"a window snapshot is a dict with keys {sorted(self.FIELDS)}, got {got}"
            raise WindowStateError(msg)
        if value["format"] != SNAPSHOT_FORMAT:
            got = value["format"]
            msg = f"window snapshot format {got!r}; this version reads {SNAPSHOT_FORMAT}"
            raise WindowStateError(msg)
        saved = WindowConfig.from_value(value["config"])
        if saved != config:
            msg = (
                f"the snapshot was taken with a {saved}, this manager runs a {config}: "
                "restore it under the same window, or start the window from empty"
            )
            raise WindowStateError(msg)
        self._value = value
        self._streams = streams
        # Check everything now so a bad snapshot changes nothing.
        for name in ("next_seq", "fired", "counter"):
            self.integer(name)
        for name in ("next_end", "phase", "watermark", "next_watermark_at", "now"):
            self.optional_integer(name)
        self.optional_pair("counted")
        self.events("held")
        self.events("prev")
        self.stream_max()

    def _bad(self, name: str, expected: str) -> WindowStateError:
        msg = f"window snapshot field {name!r} = {self._value[name]!r} is not {expected}"
        return WindowStateError(msg)

    def integer(self, name: str) -> int:
        value = self._value[name]
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._bad(name, "an int")
        return value

    def optional_integer(self, name: str) -> int | None:
        return None if self._value[name] is None else self.integer(name)

    def optional_pair(self, name: str) -> tuple[int, int] | None:
        value = self._value[name]
        if value is None:
            return None
        if not _is_int_pair(value):
            raise self._bad(name, "null or [ts, seq]")
        return (value[0], value[1])

    def events(self, name: str) -> list[_Held]:
        value = self._value[name]
        expected = "a list of [ts, seq, item] in (ts, seq) order"
        if not isinstance(value, list | tuple):
            raise self._bad(name, expected)
        events: list[_Held] = []
        for entry in value:
            if not isinstance(entry, list | tuple) or len(entry) != 3:
                raise self._bad(name, expected)
            if not _is_int_pair(entry[:2]):
                raise self._bad(name, expected)
            events.append(_Held(entry[0], entry[1], entry[2]))
        if any(_order(a) >= _order(b) for a, b in zip(events, events[1:], strict=False)):
            raise self._bad(name, expected)
        return events

    def stream_max(self) -> dict[str, int]:
        value = self._value["stream_max"]
        if not isinstance(value, dict) or not all(
            s in self._streams and not isinstance(ts, bool) and isinstance(ts, int)
            for s, ts in value.items()
        ):
            field = "stream_max"
            expected = f"a dict of input stream ({sorted(self._streams)}) to ts"
            raise self._bad(field, expected)
        return dict(value)


def _is_int_pair(value: Any) -> bool:
    return (
        isinstance(value, list | tuple)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    )
