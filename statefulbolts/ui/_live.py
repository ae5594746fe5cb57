"""The figures a dashboard adds to a runner's counters: rates, per-task rows, capacity, pressure.

``LiveFigures`` samples the runner's per-task counters (``Stats.task_counters``: the jobs'
tasks, and the spout tasks on the driver) into a ``CounterHistory`` (``sample``, every second
from the server's sampler thread, and on each read), and shapes them (``view``):

- per task: its counters since the start, its process latency (task seconds per executed
  tuple) and, per window, its rates and its capacity (busy seconds per second of the window,
  Storm's capacity; a spout task on the driver has no busy time);
- per component: the sum of its tasks' rates, and its capacity, the busiest task's (a
  component is as short of capacity as its busiest task);
- the topology's totals per window: tuples emitted and executed per second by every component,
  and tuple trees acked and failed per second (the spouts' acks and fails);
- backpressure: the checkpoint protocol's pending tuple trees against their limit
  (``topology.max.spout.pending`` per spout task, times the spout tasks), or the
  transactional protocol's active txids against ``topology.max.spout.pending`` (1 unset).

Time is the runner's clock (``Clock.now_ms``), so a test moves it by hand.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from statefulbolts.clock import Clock
from statefulbolts.ui._rates import WINDOWS, CounterHistory, Rates

if TYPE_CHECKING:
    from statefulbolts.runtime import Stats

__all__ = ["RATED", "LiveFigures", "backpressure"]

# The counters shown as rates.
RATED = ("emitted", "acked", "failed", "executed")
_TaskKey = tuple[str, int]


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


class LiveFigures:
    """Rates and capacity per task and component, from timed samples of one runner's stats.

    Args:
        stats: the runner's ``Stats``.
        kinds: each component's kind (``topology_graph``'s nodes): spouts' acks are trees.
        clock: the clock of the samples (the runner's).
        windows: the windows' names and seconds.
    """

    def __init__(
        self,
        stats: Stats,
        kinds: Mapping[str, str],
        clock: Clock,
        windows: Mapping[str, float] = WINDOWS,
    ) -> None:
        self._stats = stats
        self._kinds = dict(kinds)
        self._clock = clock
        self._history: CounterHistory[_TaskKey] = CounterHistory(windows)

    @property
    def windows(self) -> dict[str, float]:
        """Each window's name and length in seconds."""
        return self._history.windows

    @property
    def history(self) -> CounterHistory[_TaskKey]:
        """The samples taken so far."""
        return self._history

    def _now(self) -> float:
        return self._clock.now_ms() / 1000.0

    def sample(self) -> None:
        """Record the counters now, where a window is due a sample."""
        self._history.record(self._now(), _rated(self._stats.task_counters()))

    def view(self) -> dict[str, Any]:
        """Per component its tasks, rates and capacity; the totals (samples first)."""
        now = self._now()
        counters = self._stats.task_counters()
        rated = _rated(counters)
        self._history.record(now, rated)
        rates = {name: self._history.rates(now, rated, name) for name in self._history.windows}
        components: dict[str, dict[str, Any]] = {}
        for (cid, index), row in sorted(counters.items()):
            comp = components.setdefault(
                cid, {"tasks": [], "rates": {}, "capacity": dict.fromkeys(rates)}
            )
            task = _task_row(index, row)
            busy = "seconds" in row
            for name, found in rates.items():
                per_s = found.values.get((cid, index)) if found is not None else None
                task["rates"][name] = _per_second(per_s)
                capacity = per_s.get("seconds") if per_s is not None and busy else None
                task["capacity"][name] = _round(capacity, 6)
                if capacity is not None:
                    shown = comp["capacity"][name]
                    comp["capacity"][name] = _round(max(capacity, shown or 0.0), 6)
            comp["tasks"].append(task)
        for comp in components.values():
            comp["rates"] = {
                name: _sum([t["rates"][name] for t in comp["tasks"]]) for name in rates
            }
        return {
            "windows": self._history.windows,
            "spans": {name: _round(r.span, 3) if r else None for name, r in rates.items()},
            "components": components,
            "total": {name: self._total(components, name, rates[name]) for name in rates},
        }

    def _total(
        self, components: Mapping[str, Any], name: str, found: Rates[_TaskKey] | None
    ) -> dict[str, float | None]:
        if found is None:
            return dict.fromkeys(RATED)
        total = dict.fromkeys(RATED, 0.0)
        for cid, comp in components.items():
            spout = "spout" in self._kinds.get(cid, "")
            row = comp["rates"][name]
            for counter in RATED:
                if counter in ("acked", "failed") and not spout:
                    continue  # the topology's acks are its trees': the spouts'
                total[counter] = (total[counter] or 0.0) + (row.get(counter) or 0.0)
        return {k: _round(v) for k, v in total.items()}


def _rated(counters: Mapping[_TaskKey, Mapping[str, float]]) -> dict[_TaskKey, dict[str, float]]:
    """The counters that grow: the rated ones and busy seconds (not the task id, nor pending)."""
    keep = (*RATED, "seconds")
    return {key: {k: v for k, v in row.items() if k in keep} for key, row in counters.items()}


def _task_row(index: int, row: Mapping[str, float]) -> dict[str, Any]:
    executed = int(row.get("executed", 0))
    seconds = row.get("seconds")
    latency = 1000.0 * seconds / executed if seconds is not None and executed else None
    pending = row.get("pending")
    return {
        "task": int(row.get("task", -1)),
        "index": index,
        **{k: int(row.get(k, 0)) for k in RATED},
        "seconds": _round(seconds, 6),
        "latency_ms": _round(latency),
        "pending": None if pending is None else int(pending),
        "rates": {},
        "capacity": {},
    }


def _per_second(values: Mapping[str, float] | None) -> dict[str, float | None]:
    if values is None:
        return dict.fromkeys(RATED)
    return {k: _round(values.get(k, 0.0)) for k in RATED}


def _sum(rows: Sequence[Mapping[str, float | None]]) -> dict[str, float | None]:
    out: dict[str, float | None] = {}
    for counter in RATED:
        known = [r[counter] for r in rows if r.get(counter) is not None]
        out[counter] = _round(sum(v for v in known if v is not None)) if known else None
    return out


def backpressure(
    kind: str,
    pending_trees: int | None,
    active_txids: int,
    max_spout_pending: int | None,
    spout_tasks: int,
) -> dict[str, Any]:
    """How full the protocol's limit on work in flight is (the module's last point).

    Example:
        >>> backpressure("checkpoint", 300, 0, 500, 2)
        {'what': 'tuple trees', 'pending': 300, 'limit': 1000, 'fill': 0.3}
        >>> backpressure("transactional", None, 1, None, 1)
        {'what': 'txids', 'pending': 1, 'limit': 1, 'fill': 1.0}
    """
    if kind == "transactional":
        pending: int | None = active_txids
        limit: int | None = max_spout_pending or 1
        what = "txids"
    else:
        pending = pending_trees
        limit = max_spout_pending * spout_tasks if max_spout_pending and spout_tasks else None
        what = "tuple trees"
    fill = pending / limit if pending is not None and limit else None
    return {"what": what, "pending": pending, "limit": limit, "fill": _round(fill)}
