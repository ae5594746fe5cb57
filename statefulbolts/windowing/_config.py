"""``Count``, ``Duration`` and ``WindowConfig``: what a window is, as a frozen value.

A window has a length and a sliding interval, each a number of tuples (``Count``) or of
milliseconds (``Duration``). Tumbling windows are the sliding ones whose interval equals their
length. With a timestamp field the window runs on event time: the tuple's own timestamp, a lag,
a watermark emitted every watermark interval, and optionally a stream for late tuples.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from statefulbolts.errors import FieldNotFoundError
from statefulbolts.tuples import Tuple
from statefulbolts.windowing._errors import WindowConfigError, WindowStateError, WindowTimeError

DEFAULT_WATERMARK_INTERVAL_MS = 1000
"""Storm's default: a watermark every second of processing time."""

DEFAULT_LAG_MS = 0
"""Storm's default: tuples may not arrive out of timestamp order at all."""


def _positive_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"{what} must be an int, got {type(value).__name__} {value!r}"
        raise WindowConfigError(msg)
    if value <= 0:
        msg = f"{what} must be positive, got {value}"
        raise WindowConfigError(msg)
    return value


@dataclass(frozen=True)
class Count:
    """A number of tuples: a window length or sliding interval counted in tuples.

    Example:
        >>> Count(10)
        Count(10)
        >>> Count(0)
        Traceback (most recent call last):
        ...
        statefulbolts.windowing._errors.WindowConfigError: Count must be positive, got 0
    """

    value: int

    def __post_init__(self) -> None:
        _positive_int(self.value, "Count")

    def __repr__(self) -> str:
        return f"Count({self.value})"


@dataclass(frozen=True)
class Duration:
    """A span of time in milliseconds: a window length or sliding interval measured in time.

    Example:
        >>> Duration.seconds(5), Duration.minutes(1).value, Duration.of(timedelta(hours=1)).value
        (Duration(5000), 60000, 3600000)
    """

    value: int

    def __post_init__(self) -> None:
        _positive_int(self.value, "Duration (milliseconds)")

    def __repr__(self) -> str:
        return f"Duration({self.value})"

    @classmethod
    def of(cls, span: Duration | timedelta | int) -> Duration:
        """A ``Duration`` from a ``Duration``, a ``timedelta`` or an int of milliseconds."""
        if isinstance(span, Duration):
            return span
        if isinstance(span, timedelta):
            ms = span / timedelta(milliseconds=1)
            if ms != int(ms):
                msg = f"a Duration is whole milliseconds, got {span!r}"
                raise WindowConfigError(msg)
            return cls(int(ms))
        return cls(span)

    @classmethod
    def seconds(cls, n: int) -> Duration:
        """``n`` seconds."""
        return cls(_positive_int(n, "Duration.seconds") * 1000)

    @classmethod
    def minutes(cls, n: int) -> Duration:
        """``n`` minutes."""
        return cls(_positive_int(n, "Duration.minutes") * 60_000)

    @classmethod
    def hours(cls, n: int) -> Duration:
        """``n`` hours."""
        return cls(_positive_int(n, "Duration.hours") * 3_600_000)

    @classmethod
    def days(cls, n: int) -> Duration:
        """``n`` days."""
        return cls(_positive_int(n, "Duration.days") * 86_400_000)


Span = Count | Duration
"""A window length or sliding interval."""


def _span_to_value(span: Span) -> list[Any]:
    return ["count" if isinstance(span, Count) else "duration", span.value]


def _span_from_value(value: Any, what: str) -> Span:
    if isinstance(value, list | tuple) and len(value) == 2 and value[0] in ("count", "duration"):
        try:
            return Count(value[1]) if value[0] == "count" else Duration(value[1])
        except WindowConfigError as exc:
            msg = f"saved window {what} {value!r}: {exc}"
            raise WindowStateError(msg) from exc
    msg = f"saved window {what} {value!r} is not ['count' | 'duration', n]"
    raise WindowStateError(msg)


@dataclass(frozen=True)
class WindowConfig:
    """A window, validated: length, sliding interval, and event time if a timestamp field is set.

    ``lag_ms``, ``watermark_interval_ms`` and ``late_tuple_stream`` belong to event time and are
    refused without a ``timestamp_field`` (Storm ignored them, which hid the mistake).

    Example:
        >>> config = WindowConfig(Duration.minutes(10), Duration.minutes(1), "ts", lag_ms=5000)
        >>> config.event_time, config.tumbling
        (True, False)
        >>> WindowConfig(Count(3), Count(3), late_tuple_stream="late")
        Traceback (most recent call last):
        ...
        statefulbolts.windowing._errors.WindowConfigError: late_tuple_stream 'late' needs a \
timestamp field: late tuples exist only in event time (call with_timestamp_field first)
    """

    length: Span
    sliding: Span
    timestamp_field: str | None = None
    lag_ms: int = DEFAULT_LAG_MS
    watermark_interval_ms: int = DEFAULT_WATERMARK_INTERVAL_MS
    late_tuple_stream: str | None = None

    def __post_init__(self) -> None:
        for what, span in (("length", self.length), ("sliding interval", self.sliding)):
            if not isinstance(span, Count | Duration):
                msg = (
                    f"window {what} must be a Count or a Duration, got "
                    f"{type(span).__name__} {span!r}"
                )
                raise WindowConfigError(msg)
        field = self.timestamp_field
        if field is not None and (not isinstance(field, str) or not field):
            msg = f"timestamp field must be a non-empty string, got {field!r}"
            raise WindowConfigError(msg)
        if isinstance(self.lag_ms, bool) or not isinstance(self.lag_ms, int) or self.lag_ms < 0:
            msg = f"lag must be an int of milliseconds >= 0, got {self.lag_ms!r}"
            raise WindowConfigError(msg)
        _positive_int(self.watermark_interval_ms, "watermark interval (milliseconds)")
        stream = self.late_tuple_stream
        if stream is not None and (not isinstance(stream, str) or not stream):
            msg = f"late tuple stream must be a non-empty string, got {stream!r}"
            raise WindowConfigError(msg)
        if field is None:
            self._refuse_without_event_time()

    def _refuse_without_event_time(self) -> None:
        fix = "only in event time (call with_timestamp_field first)"
        if self.late_tuple_stream is not None:
            msg = f"late_tuple_stream {self.late_tuple_stream!r} needs a timestamp field: "
            raise WindowConfigError(msg + f"late tuples exist {fix}")
        if self.lag_ms != DEFAULT_LAG_MS:
            msg = f"lag {self.lag_ms} ms needs a timestamp field: a lag means something {fix}"
            raise WindowConfigError(msg)
        if self.watermark_interval_ms != DEFAULT_WATERMARK_INTERVAL_MS:
            msg = (
                f"watermark interval {self.watermark_interval_ms} ms needs a timestamp field: "
                f"watermarks exist {fix}"
            )
            raise WindowConfigError(msg)

    @property
    def event_time(self) -> bool:
        """Whether windows follow the tuples' own timestamps (a timestamp field is set)."""
        return self.timestamp_field is not None

    @property
    def tumbling(self) -> bool:
        """Whether windows do not overlap: the sliding interval equals the length."""
        return self.sliding == self.length

    def timestamp_of(self, tuple: Tuple) -> int:  # noqa: A002 - Storm's parameter name
        """The event timestamp of ``tuple``: its ``timestamp_field``, an int of milliseconds.

        Raises:
            WindowTimeError: the tuple has no such field, or its value is not an int.
        """
        if self.timestamp_field is None:
            msg = "timestamp_of needs a timestamp field: this window runs on processing time"
            raise WindowTimeError(msg)
        where = f"tuple from {tuple.source_component!r} stream {tuple.source_stream_id!r}"
        try:
            value = tuple.get_value_by_field(self.timestamp_field)
        except FieldNotFoundError as exc:
            msg = (
                f"{where} has no timestamp field {self.timestamp_field!r} (fields "
                f"{tuple.fields.to_list()}): declare it upstream or fix with_timestamp_field"
            )
            raise WindowTimeError(msg) from exc
        if isinstance(value, bool) or not isinstance(value, int):
            msg = (
                f"{where}: timestamp field {self.timestamp_field!r} must hold an int of "
                f"milliseconds, got {type(value).__name__} {value!r}"
            )
            raise WindowTimeError(msg)
        return value

    def to_value(self) -> dict[str, Any]:
        """The plain form kept in a manager's snapshot."""
        return {
            "length": _span_to_value(self.length),
            "sliding": _span_to_value(self.sliding),
            "timestamp_field": self.timestamp_field,
            "lag_ms": self.lag_ms,
            "watermark_interval_ms": self.watermark_interval_ms,
            "late_tuple_stream": self.late_tuple_stream,
        }

    @classmethod
    def from_value(cls, value: Any) -> WindowConfig:
        """Read ``to_value``'s form back; anything else is a ``WindowStateError``."""
        keys = set(cls.__dataclass_fields__)
        if not isinstance(value, dict) or set(value) != keys:
            msg = f"saved window config {value!r} does not have exactly the keys {sorted(keys)}"
            raise WindowStateError(msg)
        fields = dict(value)
        fields["length"] = _span_from_value(value["length"], "length")
        fields["sliding"] = _span_from_value(value["sliding"], "sliding interval")
        try:
            return cls(**fields)
        except WindowConfigError as exc:
            msg = f"saved window config {value!r}: {exc}"
            raise WindowStateError(msg) from exc

    def __str__(self) -> str:
        def span(s: Span) -> str:
            return f"{s.value} tuples" if isinstance(s, Count) else f"{s.value} ms"

        kind = "tumbling" if self.tumbling else f"sliding every {span(self.sliding)}"
        clock = (
            f"event time from {self.timestamp_field!r}, lag {self.lag_ms} ms"
            if self.event_time
            else "processing time"
        )
        return f"{kind} window of {span(self.length)} ({clock})"
