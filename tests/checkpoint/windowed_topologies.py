"""Windowed topologies for the runner tests, and the windows a plain Python computation expects.

``Readings`` emits ``n`` records ``(id, ts)`` with ``ts = id * STEP_MS``, replaying any that
fail. ``Windows`` (event time, from ``ts``) emits one ``(index, start, end, ids)`` per window
that fires; ``Verdicts``, a stateful bolt, appends each to the list under ``w<index>`` in its
state. A window that fired in two committed transactions would show as a list of two.
"""

from __future__ import annotations

from typing import Any

from statefulbolts import (
    BaseStatefulWindowedBolt,
    BaseWindowedBolt,
    Fields,
    Spout,
    StatefulBolt,
    TopologyBuilder,
)
from statefulbolts.topology import StormTopology
from statefulbolts.windowing import Duration

STEP_MS = 250
LENGTH_MS = 2000
SLIDE_MS = 1000


# What each source has had acked, by source key: a durable source's committed offsets, so
# a restarted driver's spout emits only what was never acked (in this process).
ACKED: dict[str, set[int]] = {}


class Readings(Spout):
    """``n`` records ``(id, ts)``, each tracked; a failed one is emitted again.

    With a ``source`` key the acked ids outlive the spout (``ACKED``), as a durable source's.
    """

    def __init__(self, n: int, source: str | None = None) -> None:
        self.n, self.source = n, source

    def open(self, conf: Any, context: Any, collector: Any) -> None:
        done = ACKED.setdefault(self.source, set()) if self.source is not None else set()
        self.collector, self.todo = collector, [i for i in range(self.n) if i not in done]

    def ack(self, msg_id: Any) -> None:
        if self.source is not None:
            ACKED.setdefault(self.source, set()).add(msg_id)

    def next_tuple(self) -> None:
        done = ACKED.get(self.source, set()) if self.source is not None else set()
        while self.todo and self.todo[0] in done:
            self.todo.pop(0)  # acked by a restarted driver's recovery (its manifest)
        if self.todo:
            i = self.todo.pop(0)
            self.collector.emit([i, i * STEP_MS], message_id=i)

    def fail(self, msg_id: Any) -> None:
        self.todo.insert(0, msg_id)

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "ts"))


class Windows(BaseWindowedBolt):
    """Emits ``(index, start, end, ids)`` per window, and ``late`` tuples on stream "late"."""

    def execute(self, window: Any) -> None:
        ids = sorted(t.get_value_by_field("id") for t in window.get())
        start, end = window.get_start_timestamp(), window.get_end_timestamp()
        self.collector.emit([window.index, start, end, ids])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("index", "start", "end", "ids"))


class CountingWindows(BaseStatefulWindowedBolt):
    """``Windows`` with a state: counts the tuples of every window it saw, under "seen"."""

    def init_state(self, state: Any) -> None:
        self.state = state

    def execute(self, window: Any) -> None:
        ids = sorted(t.get_value_by_field("id") for t in window.get())
        self.state.put("seen", self.state.get("seen", 0) + len(ids))
        start, end = window.get_start_timestamp(), window.get_end_timestamp()
        self.collector.emit([window.index, start, end, ids])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("index", "start", "end", "ids"))


class Verdicts(StatefulBolt):
    """Appends each window it gets to its state, under ``w<index>``."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def init_state(self, state: Any) -> None:
        self.state = state

    def execute(self, tuple: Any) -> None:  # noqa: A002
        index, start, end, ids = tuple.values
        key = f"w{index}"
        self.state.put(key, [*self.state.get(key, []), [start, end, list(ids)]])
        self.collector.ack(tuple)


def event_time_topology(
    n: int, bolt: BaseWindowedBolt | None = None, source: str | None = None
) -> StormTopology:
    """``Readings(n, source)`` into a sliding event-time window into ``Verdicts``."""
    windows = (bolt or Windows()).with_window(Duration(LENGTH_MS), Duration(SLIDE_MS))
    builder = TopologyBuilder()
    builder.set_spout("readings", Readings(n, source))
    builder.set_bolt("windows", windows.with_timestamp_field("ts")).shuffle_grouping("readings")
    builder.set_bolt("verdicts", Verdicts()).global_grouping("windows")
    return builder.create_topology()


def expected_windows(n: int) -> dict[str, list[list[Any]]]:
    """What the committed ``Verdicts`` state must be once the watermark reached the last ts.

    Computed from the definition alone: windows end at multiples of the slide, hold the ids
    with ``end - length <= ts < end``, fire once the watermark (the newest ts, lag 0) reaches
    their end, if they hold anything; indexes count the windows that fired.
    """
    stamps = {i: i * STEP_MS for i in range(n)}
    watermark = max(stamps.values())
    expected: dict[str, list[list[Any]]] = {}
    end = SLIDE_MS
    while end <= watermark:
        ids = sorted(i for i, ts in stamps.items() if end - LENGTH_MS <= ts < end)
        if ids:
            expected[f"w{len(expected)}"] = [[end - LENGTH_MS, end, ids]]
        end += SLIDE_MS
    return expected
