"""The dashboard's figures without Spark: rates over windows, capacity, backpressure, hosts.

Time is a ``ManualClock`` or plain numbers: nothing here sleeps. Task figures go in through the
runtime's own ``Stats.add_reports`` with real ``TaskReport`` records, as a job's would.
"""

from __future__ import annotations

import socket

import pytest

from statefulbolts.clock import ManualClock
from statefulbolts.runtime._records import JobResult, TaskMetrics, TaskReport
from statefulbolts.runtime._stats import Stats
from statefulbolts.ui._hosts import (
    allowed_hosts,
    beyond_loopback,
    exposure_warning,
    host_of,
)
from statefulbolts.ui._live import LiveFigures, backpressure
from statefulbolts.ui._rates import STEPS, CounterHistory

# ----------------------------------------------------------------------------- CounterHistory


def test_a_young_run_is_rated_over_its_age_then_over_the_window() -> None:
    history: CounterHistory[str] = CounterHistory({"1m": 60.0, "10m": 600.0})
    history.record(0.0, {"a": {"n": 0}})
    history.record(20.0, {"a": {"n": 100}})
    young = history.rates(20.0, {"a": {"n": 100}}, "1m")
    assert young is not None and young.span == 20.0 and young.values == {"a": {"n": 5.0}}
    for t in range(21, 131):  # one more tuple a second from 20 s on
        history.record(float(t), {"a": {"n": 100 + t - 20}})
    now = {"a": {"n": 210}}
    one = history.rates(130.0, now, "1m")
    ten = history.rates(130.0, now, "10m")
    # The last minute: based on the sample at 70 s (150 then); ten minutes: on the first one.
    assert one is not None and (one.span, one.values) == (60.0, {"a": {"n": 1.0}})
    assert ten is not None and (ten.span, ten.values) == (130.0, {"a": {"n": 210 / 130}})


def test_a_read_later_than_the_last_sample_moves_the_base_on() -> None:
    history: CounterHistory[str] = CounterHistory({"1m": 60.0})
    for t in (0.0, 30.0, 60.0, 90.0):
        history.record(t, {"a": {"n": t}})
    # At 125 s, 60 s back is 65 s: the newest sample at least that old is the one at 60 s.
    found = history.rates(125.0, {"a": {"n": 125.0}}, "1m")
    assert found is not None and (found.span, found.values) == (65.0, {"a": {"n": 1.0}})


def test_new_keys_count_from_zero_and_a_drop_is_no_growth() -> None:
    history: CounterHistory[str] = CounterHistory({"1m": 60.0})
    history.record(0.0, {"old": {"n": 50, "m": 7}})
    found = history.rates(10.0, {"old": {"n": 20, "m": 7}, "new": {"n": 30}}, "1m")
    assert found is not None
    assert found.values == {"old": {"n": 0.0, "m": 0.0}, "new": {"n": 3.0}}


def test_no_rates_without_a_sample_or_without_time() -> None:
    history: CounterHistory[str] = CounterHistory({"1m": 60.0})
    assert history.rates(5.0, {"a": {"n": 1}}, "1m") is None
    history.record(5.0, {"a": {"n": 1}})
    assert history.rates(5.0, {"a": {"n": 9}}, "1m") is None


def test_samples_are_spaced_and_bounded() -> None:
    history: CounterHistory[str] = CounterHistory({"1m": 60.0, "10m": 600.0})
    for tenth in range(0, 20_000):  # ten samples offered a second for 2000 s
        history.record(tenth / 10, {"a": {"n": tenth}})
    kept = {name: history.times(name) for name in ("1m", "10m")}
    # One sample a step (1 s, 10 s), a window's worth and the one before it.
    assert kept["1m"] == [float(t) for t in range(1939, 2000)]
    assert kept["10m"] == [float(t) for t in range(1390, 2000, 10)]
    assert len(kept["1m"]) == len(kept["10m"]) == STEPS + 1


def test_windows_must_be_positive() -> None:
    with pytest.raises(ValueError, match="longer than 0 seconds"):
        CounterHistory({"bad": 0.0})


# ----------------------------------------------------------------------------- LiveFigures

KINDS = {"sentences": "spout", "split": "bolt", "count": "stateful bolt"}
NAMES = ["sentences", "split", "count"]
TASK_IDS = [[1], [2, 3], [4, 5]]


def _job(*tasks: tuple[int, int, int, int, float]) -> JobResult:
    """A job's result: per (component index, task index, executed, emitted, busy seconds)."""
    reports = [
        TaskReport(comp, task, TaskMetrics(executed, emitted, executed, 0, seconds))
        for comp, task, executed, emitted, seconds in tasks
    ]
    return JobResult(reports=reports)


class _Spout:
    """The spout tasks' figures, as ``SpoutTasks.task_counters`` gives them."""

    def __init__(self) -> None:
        self.row = {"task": 1, "emitted": 0, "acked": 0, "failed": 0, "pending": 0}

    def __call__(self) -> dict[tuple[str, int], dict[str, float]]:
        return {("sentences", 0): dict(self.row)}


def test_task_rows_rates_and_capacity_over_the_windows() -> None:
    clock = ManualClock()
    stats = Stats()
    spout = _Spout()
    stats.task_sources.append(spout)
    live = LiveFigures(stats, KINDS, clock)
    live.sample()  # t = 0: nothing yet
    clock.advance(40_000)
    spout.row.update(emitted=400, acked=380, failed=4, pending=16)
    stats.add_reports(_job((1, 0, 200, 1900, 10.0), (1, 1, 200, 2100, 20.0)), NAMES, TASK_IDS)
    stats.add_reports(_job((2, 0, 1500, 0, 4.0), (2, 1, 2500, 0, 6.0)), NAMES, TASK_IDS)
    live.sample()  # t = 40 s
    clock.advance(40_000)
    spout.row.update(emitted=800, acked=780, failed=4, pending=16)
    stats.add_reports(_job((1, 0, 200, 2000, 12.0), (1, 1, 200, 2000, 36.0)), NAMES, TASK_IDS)
    view = live.view()  # t = 80 s: the minute is based on t = 0, the only sample old enough

    assert view["windows"] == {"1m": 60.0, "10m": 600.0}
    assert view["spans"] == {"1m": 80.0, "10m": 80.0}
    split = view["components"]["split"]
    assert [(t["task"], t["index"], t["executed"], t["emitted"]) for t in split["tasks"]] == [
        (2, 0, 400, 3900),
        (3, 1, 400, 4100),
    ]
    first, second = split["tasks"]
    assert first["seconds"] == 22.0 and first["latency_ms"] == 55.0
    assert first["rates"]["1m"] == {"emitted": 48.75, "acked": 5.0, "failed": 0.0, "executed": 5.0}
    assert (first["capacity"]["1m"], second["capacity"]["1m"]) == (0.275, 0.7)
    # A component is as short of capacity as its busiest task; its rates are its tasks' sum.
    assert split["capacity"] == {"1m": 0.7, "10m": 0.7}
    assert split["rates"]["1m"] == {
        "emitted": 100.0,
        "acked": 10.0,
        "failed": 0.0,
        "executed": 10.0,
    }
    count = view["components"]["count"]
    assert [t["capacity"]["1m"] for t in count["tasks"]] == [0.05, 0.075]
    # The spout task on the driver: its own figures and pending trees, no busy time.
    [task] = view["components"]["sentences"]["tasks"]
    assert (task["task"], task["pending"], task["capacity"], task["seconds"]) == (
        1,
        16,
        {"1m": None, "10m": None},
        None,
    )
    assert task["rates"]["1m"] == {"emitted": 10.0, "acked": 9.75, "failed": 0.05, "executed": 0.0}
    # The topology: every component's emits and executes, the spouts' acks and fails.
    assert view["total"]["1m"] == {
        "emitted": 110.0,
        "acked": 9.75,
        "failed": 0.05,
        "executed": 60.0,
    }

    # Forty seconds on, nothing new: the minute is now based on the sample at 40 s.
    clock.advance(40_000)
    later = live.view()
    assert later["spans"] == {"1m": 80.0, "10m": 120.0}
    split_tasks = later["components"]["split"]["tasks"]
    assert [t["capacity"]["1m"] for t in split_tasks] == [12 / 80, 36 / 80]
    assert later["components"]["split"]["capacity"]["1m"] == 36 / 80
    assert later["components"]["count"]["capacity"]["1m"] == 0.0
    assert later["components"]["count"]["capacity"]["10m"] == pytest.approx(6 / 120)


def test_a_view_before_any_sample_has_no_rates_yet() -> None:
    stats = Stats()
    stats.add_reports(_job((1, 0, 5, 5, 1.0)), NAMES, TASK_IDS)
    view = LiveFigures(stats, KINDS, ManualClock()).view()
    [task] = view["components"]["split"]["tasks"]
    assert task["executed"] == 5 and task["rates"]["1m"] == dict.fromkeys(task["rates"]["1m"])
    assert view["total"]["1m"] == {"emitted": None, "acked": None, "failed": None, "executed": None}
    assert view["spans"] == {"1m": None, "10m": None}


def test_checkpoint_sizes_add_up_per_txid() -> None:
    stats = Stats()
    stats.state_written(3, {"count": 1000})
    stats.state_written(3, {"count": 24, "other": 5})
    stats.state_written(4, {"count": 900})
    sizes = stats.checkpoint_sizes()
    assert [(w.txid, w.size) for w in sizes["count"]] == [(3, 1024), (4, 900)]
    assert [(w.txid, w.size) for w in sizes["other"]] == [(3, 5)]


# ----------------------------------------------------------------------------- backpressure


def test_backpressure_against_max_spout_pending() -> None:
    assert backpressure("checkpoint", 30, 0, 20, 2) == {
        "what": "tuple trees",
        "pending": 30,
        "limit": 40,
        "fill": 0.75,
    }
    unlimited = backpressure("checkpoint", 30, 0, None, 2)
    assert (unlimited["limit"], unlimited["fill"]) == (None, None)
    assert backpressure("transactional", None, 2, 4, 1) == {
        "what": "txids",
        "pending": 2,
        "limit": 4,
        "fill": 0.5,
    }


# ----------------------------------------------------------------------------- Host names


def test_host_header_parsing() -> None:
    assert host_of("127.0.0.1:8080") == "127.0.0.1"
    assert host_of("[::1]:8080") == "::1"
    assert host_of("[::1]") == "::1"
    assert host_of("LOCALHOST") == "localhost"
    assert host_of("evil.example:80") == "evil.example"
    assert host_of("") == ""


def test_allowed_hosts_loopback_the_configured_name_and_on_every_interface_this_machine() -> None:
    assert allowed_hosts("127.0.0.1", "127.0.0.1") == {"127.0.0.1", "localhost", "::1"}
    named = allowed_hosts("dash.internal", "10.1.2.3")
    assert named == {"127.0.0.1", "localhost", "::1", "dash.internal", "10.1.2.3"}
    everywhere = allowed_hosts("0.0.0.0", "0.0.0.0")
    assert socket.gethostname().lower() in everywhere
    assert "0.0.0.0" not in everywhere and "" not in everywhere
    assert "evil.example" not in everywhere


def test_binding_beyond_loopback_is_named_in_one_line() -> None:
    assert not beyond_loopback("127.0.0.1") and not beyond_loopback("::1")
    assert beyond_loopback("0.0.0.0") and beyond_loopback("::") and beyond_loopback("10.0.0.5")
    assert exposure_warning("wc", "127.0.0.1", "127.0.0.1", 80) is None
    text = exposure_warning("wc", "0.0.0.0", "0.0.0.0", 8080)
    assert text is not None and "\n" not in text
    assert text.startswith("the dashboard of topology 'wc' listens on 0.0.0.0:8080, beyond")
    assert "topology.ui.host to 127.0.0.1" in text
