"""Rates over sliding windows, from counters that only grow, sampled with an injected clock.

The runtime counts totals (tuples emitted, acked, failed, executed; a task's busy seconds).
``CounterHistory`` keeps timed samples of them and tells how fast each grew over the last
W seconds of each window:

1. ``record(now, counters)`` keeps a sample in a window at most every ``W / STEPS`` seconds
   (``STEPS`` samples span it), and forgets the samples the window no longer needs: all but
   the newest one at least W seconds old.
2. ``rates(now, counters, name)`` compares ``counters`` (the totals at ``now``) with a base
   sample: the newest one at least W seconds old, or, while the run is younger than W, the
   oldest one kept. A counter's rate is its growth divided by the seconds between the two
   (``Rates.span``, W once the run is old enough). No base, or no time between: no rates.
3. A counter the base lacks grew from 0 (a task whose first job ended inside the window); a
   counter that went down (a restarted source) grew by 0.

A task's busy seconds per second is Storm's capacity: the share of the window it was busy.

Example:
    >>> history = CounterHistory({"1m": 60.0})
    >>> history.record(0.0, {"split": {"executed": 0}})
    >>> history.record(30.0, {"split": {"executed": 900}})
    >>> history.rates(45.0, {"split": {"executed": 1800}}, "1m")
    Rates(span=45.0, values={'split': {'executed': 40.0}})
    >>> history.record(90.0, {"split": {"executed": 2700}})
    >>> history.rates(90.0, {"split": {"executed": 2700}}, "1m")  # based on the sample at 30 s
    Rates(span=60.0, values={'split': {'executed': 30.0}})
"""

from __future__ import annotations

import collections
import threading
from collections.abc import Hashable, Mapping
from typing import Generic, NamedTuple, TypeVar

__all__ = ["STEPS", "WINDOWS", "CounterHistory", "Rates"]

# The windows the dashboard shows, by the name it shows them under: seconds.
WINDOWS: Mapping[str, float] = {"1m": 60.0, "10m": 600.0}
# Samples per window: a window of W seconds keeps one every W / STEPS seconds.
STEPS = 60

K = TypeVar("K", bound=Hashable)
Counters = Mapping[K, Mapping[str, float]]


class Rates(NamedTuple, Generic[K]):
    """Per key, per counter: growth per second over the last ``span`` seconds."""

    span: float
    values: dict[K, dict[str, float]]


class CounterHistory(Generic[K]):
    """Timed samples of counters per window (thread-safe); the rules are the module's.

    Args:
        windows: each window's name and length in seconds.
        steps: samples per window.
    """

    def __init__(self, windows: Mapping[str, float] = WINDOWS, steps: int = STEPS) -> None:
        bad = {name: w for name, w in windows.items() if not w > 0}
        if bad or steps < 1:
            msg = f"windows must be longer than 0 seconds and steps at least 1, got {bad} {steps}"
            raise ValueError(msg)
        self._windows = dict(windows)
        self._steps = steps
        self._samples: dict[str, collections.deque[tuple[float, dict[K, dict[str, float]]]]] = {
            name: collections.deque() for name in windows
        }
        self._lock = threading.Lock()

    @property
    def windows(self) -> dict[str, float]:
        """Each window's name and length in seconds."""
        return dict(self._windows)

    def times(self, name: str) -> list[float]:
        """When the samples window ``name`` keeps were taken, oldest first."""
        with self._lock:
            return [at for at, _ in self._samples[name]]

    def record(self, now: float, counters: Counters[K]) -> None:
        """Keep ``counters`` (the totals at ``now``, seconds) where a window is due a sample."""
        copy: dict[K, dict[str, float]] | None = None
        with self._lock:
            for name, width in self._windows.items():
                samples = self._samples[name]
                if samples and now - samples[-1][0] < width / self._steps:
                    continue
                if copy is None:
                    copy = {key: dict(row) for key, row in counters.items()}
                samples.append((now, copy))
                while len(samples) > 1 and now - samples[1][0] >= width:
                    samples.popleft()

    def rates(self, now: float, counters: Counters[K], name: str) -> Rates[K] | None:
        """The rates of ``counters`` (the totals at ``now``) over window ``name``; rule 2."""
        width = self._windows[name]
        with self._lock:
            samples = self._samples[name]
            if not samples:
                return None
            base_at, base = samples[0]
            for at, sample in samples:
                if now - at < width:
                    break
                base_at, base = at, sample
        span = now - base_at
        if span <= 0:
            return None
        values: dict[K, dict[str, float]] = {}
        for key, row in counters.items():
            before = base.get(key, {})
            values[key] = {
                counter: max(0.0, total - before.get(counter, 0)) / span
                for counter, total in row.items()
            }
        return Rates(span, values)
