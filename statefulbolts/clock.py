"""Time, injected: the runtime and the checkpoint spout read a clock, tests use ``ManualClock``."""

from __future__ import annotations

import threading
import time


class Clock:
    """Wall-clock time in milliseconds, and sleeping."""

    def now_ms(self) -> float:
        """Milliseconds from an arbitrary, monotonic origin."""
        return time.monotonic() * 1000.0

    def wall_ms(self) -> float:
        """Milliseconds since the Unix epoch: for timestamps stored to outlive the process."""
        return time.time() * 1000.0

    def sleep(self, seconds: float) -> None:
        """Block for ``seconds``."""
        time.sleep(seconds)


class ManualClock(Clock):
    """A clock that moves only when told; ``sleep`` advances it instantly.

    Example:
        >>> clock = ManualClock()
        >>> clock.advance(1500)
        >>> clock.now_ms()
        1500.0
    """

    def __init__(self, start_ms: float = 0.0) -> None:
        self._now = float(start_ms)
        self._lock = threading.Lock()

    def now_ms(self) -> float:
        """The current manual time."""
        with self._lock:
            return self._now

    def wall_ms(self) -> float:
        """The current manual time (the stored timestamps follow it too)."""
        return self.now_ms()

    def advance(self, ms: float) -> None:
        """Move time forward by ``ms`` milliseconds."""
        with self._lock:
            self._now += ms

    def sleep(self, seconds: float) -> None:
        """Advance instead of blocking."""
        self.advance(seconds * 1000.0)
