"""``BaseWindowedBolt``: Storm's windowed bolt, configured fluently, executed per window."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Self

from statefulbolts.components import Component
from statefulbolts.tuples import Tuple
from statefulbolts.windowing._config import (
    DEFAULT_LAG_MS,
    DEFAULT_WATERMARK_INTERVAL_MS,
    Count,
    Duration,
    Span,
    WindowConfig,
)
from statefulbolts.windowing._errors import WindowConfigError
from statefulbolts.windowing._window import Window

if TYPE_CHECKING:
    from statefulbolts.collectors import OutputCollector
    from statefulbolts.context import TopologyContext

LATE_TUPLE_FIELD = "late_tuple"
"""The one field of the late tuple stream: the late tuple itself (Storm's name)."""


@dataclass(frozen=True)
class _Settings:
    """What the ``with_*`` calls said so far; checked as a whole by ``window_config``."""

    length: Span | None = None
    sliding: Span | None = None
    timestamp_field: str | None = None
    lag_ms: int = DEFAULT_LAG_MS
    watermark_interval_ms: int = DEFAULT_WATERMARK_INTERVAL_MS
    late_tuple_stream: str | None = None


def _span(value: Any, what: str) -> Span:
    if isinstance(value, Count | Duration):
        return value
    if isinstance(value, timedelta):
        return Duration.of(value)
    msg = (
        f"window {what} must be a Count(n) of tuples, a Duration(ms) or a timedelta, got "
        f"{type(value).__name__} {value!r}"
    )
    raise WindowConfigError(msg)


def _millis(value: Any, what: str) -> int:
    if isinstance(value, Duration):
        return value.value
    if isinstance(value, timedelta):
        return Duration.of(value).value
    msg = f"{what} must be a Duration(ms) or a timedelta, got {type(value).__name__} {value!r}"
    raise WindowConfigError(msg)


class BaseWindowedBolt(Component):
    """A bolt that sees its input a window at a time, as Storm's ``BaseWindowedBolt``.

    Configure the window on the instance with the ``with_*`` methods (each returns the bolt),
    then implement ``execute(window)``: it runs each time a window fires, with the tuples in it,
    the new and the expired ones, and its start and end (``Window``). The executor acks every
    tuple once it has left every window; the bolt does not ack.

    - ``with_window(length, sliding=Count(1))``: a sliding window; ``length`` and ``sliding``
      are each a ``Count`` of tuples or a ``Duration`` (or a ``timedelta``).
    - ``with_tumbling_window(length)``: windows that do not overlap.
    - ``with_timestamp_field(name)``: event time, from the tuples' field ``name`` (an int of
      milliseconds); then ``with_lag(d)`` (how far out of order tuples may come, default 0),
      ``with_watermark_interval(d)`` (default 1 s) and ``with_late_tuple_stream(stream_id)``
      (late tuples are emitted there, in the one field ``late_tuple``, instead of dropped).

    Example:
        >>> class Average(BaseWindowedBolt):
        ...     def execute(self, window):
        ...         values = [t.get_value(0) for t in window.get()]
        ...         self.collector.emit([sum(values) / len(values)])
        >>> bolt = Average().with_window(Duration.minutes(10), Duration.minutes(1))
        >>> print(bolt.window_config())
        sliding every 60000 ms window of 600000 ms (processing time)
        >>> bolt = Average().with_tumbling_window(Count(100)).with_timestamp_field("ts")
        >>> print(bolt.with_lag(timedelta(seconds=5)).window_config())
        tumbling window of 100 tuples (event time from 'ts', lag 5000 ms)
    """

    _window_settings: _Settings = _Settings()

    # ------------------------------------------------------------------ configuration

    def with_window(
        self, length: Span | timedelta, sliding: Span | timedelta | None = None
    ) -> Self:
        """A sliding window of ``length``, sliding every ``sliding`` (default: every tuple)."""
        slide = Count(1) if sliding is None else _span(sliding, "sliding interval")
        return self._set(length=_span(length, "length"), sliding=slide)

    def with_tumbling_window(self, length: Span | timedelta) -> Self:
        """Back-to-back windows of ``length``: each tuple is in exactly one."""
        span = _span(length, "length")
        return self._set(length=span, sliding=span)

    def with_timestamp_field(self, name: str) -> Self:
        """Event time: each tuple's timestamp is its field ``name`` (an int of milliseconds)."""
        if not isinstance(name, str) or not name:
            msg = f"with_timestamp_field: the field name must be a non-empty string, got {name!r}"
            raise WindowConfigError(msg)
        return self._set(timestamp_field=name)

    def with_lag(self, lag: Duration | timedelta) -> Self:
        """Event time: the most a tuple's timestamp may be behind the newest seen (default 0)."""
        return self._set(lag_ms=_millis(lag, "with_lag: the lag"))

    def with_watermark_interval(self, interval: Duration | timedelta) -> Self:
        """Event time: how often a watermark is emitted, in processing time (default 1 s)."""
        return self._set(watermark_interval_ms=_millis(interval, "with_watermark_interval"))

    def with_late_tuple_stream(self, stream_id: str) -> Self:
        """Event time: emit late tuples on ``stream_id`` (field ``late_tuple``), not drop them."""
        if not isinstance(stream_id, str) or not stream_id:
            msg = (
                "with_late_tuple_stream: the stream id must be a non-empty string, got "
                f"{stream_id!r}"
            )
            raise WindowConfigError(msg)
        return self._set(late_tuple_stream=stream_id)

    def _set(self, **changes: Any) -> Self:
        self._window_settings = replace(self._window_settings, **changes)
        return self

    def window_config(self) -> WindowConfig:
        """The window the ``with_*`` calls describe, checked as a whole.

        Raises:
            WindowConfigError: no window was set, or the settings do not go together; the
                message names the bolt's class.
        """
        settings = self._window_settings
        owner = f"{type(self).__module__}.{type(self).__qualname__}"
        if settings.length is None or settings.sliding is None:
            msg = f"{owner}: no window: call with_window(...) or with_tumbling_window(...)"
            raise WindowConfigError(msg)
        try:
            return WindowConfig(
                settings.length,
                settings.sliding,
                timestamp_field=settings.timestamp_field,
                lag_ms=settings.lag_ms,
                watermark_interval_ms=settings.watermark_interval_ms,
                late_tuple_stream=settings.late_tuple_stream,
            )
        except WindowConfigError as exc:
            msg = f"{owner}: {exc}"
            raise WindowConfigError(msg) from exc

    # ------------------------------------------------------------------ life

    def prepare(  # noqa: B027
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        """Called once per task life before the first window."""

    @abstractmethod
    def execute(self, window: Window[Tuple]) -> None:
        """Process one window that fired."""

    def cleanup(self) -> None:  # noqa: B027
        """Called when the task ends (not guaranteed after a crash)."""
