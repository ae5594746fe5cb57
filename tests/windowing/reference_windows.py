"""A brute-force reference for the window manager, written from the definitions alone.

It replays a whole run's events at once: decides which tuples are admitted (and with which
timestamp), then enumerates every window the definitions say fires by the end, and which tuples
some window still to come may hold. No incremental state, no eviction, no jumps: quadratic, and
obviously right for the small runs the property tests make.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from statefulbolts.windowing import Count, Duration, WindowConfig

# An event of a run: ("add", item, ts, stream) | ("time", now) | ("wm", watermark)
Op = tuple[Any, ...]


@dataclass(frozen=True)
class Event:
    ts: int
    seq: int
    item: int


@dataclass
class Expected:
    windows: list[dict[str, Any]] = field(default_factory=list)
    late: list[int] = field(default_factory=list)
    held: list[int] = field(default_factory=list)


def _admit(config: WindowConfig, ops: list[Op], streams: set[str]):
    """(admitted events, late items, the final frontier, the processing-time origin)."""
    admitted: list[Event] = []
    late: list[int] = []
    newest: dict[str, int] = {}
    watermark: int | None = None
    next_emit: int | None = None
    now: int | None = None
    origin: int | None = None
    for op in ops:
        if op[0] == "add":
            _, item, ts, stream = op
            if config.event_time:
                newest[stream] = max(newest.get(stream, ts), ts)
                if watermark is not None and ts < watermark:
                    late.append(item)
                    continue
                admitted.append(Event(ts, len(admitted), item))
            else:
                origin = ts if origin is None else origin
                now = ts if now is None else max(now, ts)
                admitted.append(Event(now, len(admitted), item))
        elif op[0] == "time":
            t = op[1]
            if config.event_time:
                if next_emit is None:
                    next_emit = t + config.watermark_interval_ms
                elif t >= next_emit:
                    while next_emit <= t:
                        next_emit += config.watermark_interval_ms
                    if streams <= newest.keys():
                        w = min(newest[s] for s in streams) - config.lag_ms
                        watermark = w if watermark is None else max(watermark, w)
            else:
                origin = t if origin is None else origin
                now = t if now is None else max(now, t)
        else:
            watermark = op[1] if watermark is None else max(watermark, op[1])
    frontier = watermark if config.event_time else now
    return admitted, late, frontier, origin


def expected_run(config: WindowConfig, ops: list[Op], streams: set[str]) -> Expected:
    admitted, late, frontier, origin = _admit(config, ops, streams)
    order = sorted(admitted, key=lambda e: (e.ts, e.seq))
    slide, length = config.sliding.value, config.length.value
    by_count = isinstance(config.length, Count)
    fired: list[tuple[list[Event], int]] = []  # (events, end)
    if frontier is None:
        return Expected(late=late, held=[e.item for e in order])

    if isinstance(config.sliding, Duration):
        phase = 0 if config.event_time else origin % slide

        def after(ts: int) -> int:  # the first boundary > ts
            end = ts + 1
            while (end - phase) % slide:
                end += 1
            return end

        if order:
            end = after(order[0].ts)
            while end <= frontier:
                if by_count:
                    events = [e for e in order if e.ts < end][-length:]
                else:
                    events = [e for e in order if end - length <= e.ts < end]
                if events:
                    fired.append((events, end))
                end += slide
        next_end = after(frontier)
        if by_count:
            before = [e for e in order if e.ts < next_end]
            keep = set(before[-length:]) | {e for e in order if e.ts >= next_end}
        else:
            keep = {e for e in order if e.ts >= next_end - length}
        held = [e for e in order if e in keep]
    else:
        final = [e for e in order if e.ts < frontier] if config.event_time else order
        pending = [e for e in order if e not in set(final)]
        last = -1
        for i in range(slide - 1, len(final), slide):
            k = final[i]
            if by_count:
                events = final[max(0, i - length + 1) : i + 1]
            else:
                events = [e for e in final[: i + 1] if e.ts > k.ts - length]
            fired.append((events, k.ts))
            last = i
        if by_count:
            kept_before = final[max(0, last + 1 - max(0, length - slide)) : last + 1]
            after_last = [
                final[j] for j in range(last + 1, len(final)) if j - last > slide - length
            ]
            held = kept_before + after_last + pending
        elif last >= 0:
            held = [e for e in order if e.ts > final[last].ts - length]
        else:
            held = list(order)

    windows: list[dict[str, Any]] = []
    previous: list[Event] = []
    for index, (events, end) in enumerate(fired):
        windows.append(
            {
                "items": [e.item for e in events],
                "new": [e.item for e in events if e not in previous],
                "expired": [e.item for e in previous if e not in events],
                "start": None if by_count else end - length,
                "end": end,
                "index": index,
            }
        )
        previous = events
    return Expected(windows=windows, late=late, held=[e.item for e in held])
