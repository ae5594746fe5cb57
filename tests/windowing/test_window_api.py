"""The windowed bolt's configuration, the window values, and the errors a user can act on."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from statefulbolts import Fields, Tuple
from statefulbolts.errors import ConfigError, StatefulBoltsError
from statefulbolts.windowing import (
    BaseWindowedBolt,
    Count,
    Duration,
    Window,
    WindowConfig,
    WindowConfigError,
    WindowManager,
    WindowStateError,
    WindowTimeError,
)


class Collecting(BaseWindowedBolt):
    def __init__(self) -> None:
        self.windows: list[list[int]] = []

    def execute(self, window):
        self.windows.append([t.get_value(0) for t in window.get()])


# ---------------------------------------------------------------- the bolt's configuration


def test_with_window_builds_each_storm_combination():
    assert Collecting().with_window(Count(5), Count(2)).window_config() == WindowConfig(
        Count(5), Count(2)
    )
    config = Collecting().with_window(timedelta(seconds=10), Duration(500)).window_config()
    assert (config.length, config.sliding) == (Duration(10000), Duration(500))
    assert Collecting().with_window(Count(5), Duration.seconds(1)).window_config().sliding == (
        Duration(1000)
    )
    # No sliding interval: the window slides with every tuple, as Storm's withWindow(length).
    assert Collecting().with_window(Duration.minutes(1)).window_config().sliding == Count(1)
    tumbling = Collecting().with_tumbling_window(Duration.seconds(5)).window_config()
    assert tumbling.tumbling and tumbling.length == tumbling.sliding == Duration(5000)


def test_event_time_settings_and_their_defaults():
    bolt = (
        Collecting()
        .with_lag(Duration.seconds(5))  # any order: checked as a whole
        .with_tumbling_window(Count(10))
        .with_timestamp_field("ts")
        .with_watermark_interval(timedelta(milliseconds=200))
        .with_late_tuple_stream("late")
    )
    assert bolt.window_config() == WindowConfig(
        Count(10), Count(10), "ts", lag_ms=5000, watermark_interval_ms=200, late_tuple_stream="late"
    )
    plain = Collecting().with_window(Count(2)).with_timestamp_field("ts").window_config()
    assert (plain.lag_ms, plain.watermark_interval_ms, plain.late_tuple_stream) == (0, 1000, None)
    assert plain.event_time


def test_each_bolt_instance_keeps_its_own_window():
    a = Collecting().with_window(Count(2))
    b = Collecting().with_tumbling_window(Count(7))
    assert a.window_config().length == Count(2) and b.window_config().length == Count(7)
    with pytest.raises(WindowConfigError, match="no window"):
        Collecting().window_config()


def test_a_bolt_without_a_window_names_its_class_and_the_fix():
    with pytest.raises(WindowConfigError) as info:
        Collecting().with_timestamp_field("ts").window_config()
    assert str(info.value) == (
        "test_window_api.Collecting: no window: call with_window(...) or "
        "with_tumbling_window(...)"
    )


def test_event_time_settings_without_a_timestamp_field_are_refused_naming_the_class():
    for bolt, what in (
        (Collecting().with_window(Count(2)).with_lag(Duration(5)), "lag 5 ms"),
        (Collecting().with_window(Count(2)).with_late_tuple_stream("late"), "late_tuple_stream"),
        (
            Collecting().with_window(Count(2)).with_watermark_interval(Duration(10)),
            "watermark interval 10 ms",
        ),
    ):
        with pytest.raises(WindowConfigError, match=f"Collecting: {what}.*with_timestamp_field"):
            bolt.window_config()


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda b: b.with_window(5), "window length must be a Count.*got int 5"),
        (lambda b: b.with_window(Count(2), 1.5), "sliding interval must be a Count.*float"),
        (lambda b: b.with_tumbling_window("10s"), "window length must be a Count"),
        (lambda b: b.with_timestamp_field(""), "field name must be a non-empty string"),
        (lambda b: b.with_lag(5000), "with_lag: the lag must be a Duration.*got int"),
        (lambda b: b.with_watermark_interval(None), "with_watermark_interval must be"),
        (lambda b: b.with_late_tuple_stream(3), "stream id must be a non-empty string"),
        (lambda b: b.with_window(timedelta(microseconds=1500)), "whole milliseconds"),
    ],
)
def test_bad_with_arguments_fail_at_once(call, message):
    with pytest.raises(WindowConfigError, match=message):
        call(Collecting())


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Count(0), "Count must be positive, got 0"),
        (lambda: Count(True), "Count must be an int, got bool True"),
        (lambda: Duration(-5), r"Duration \(milliseconds\) must be positive, got -5"),
        (lambda: Duration.seconds(0), "Duration.seconds must be positive"),
        (lambda: WindowConfig(Count(1), 3), "sliding interval must be a Count or a Duration"),
        (lambda: WindowConfig(Count(1), Count(1), "ts", lag_ms=-1), "lag must be an int"),
        (
            lambda: WindowConfig(Count(1), Count(1), "ts", watermark_interval_ms=0),
            "watermark interval",
        ),
    ],
)
def test_bad_window_values_are_config_errors(make, message):
    with pytest.raises(WindowConfigError, match=message) as info:
        make()
    assert isinstance(info.value, ConfigError) and isinstance(info.value, StatefulBoltsError)


def test_the_bolt_must_implement_execute_and_gets_its_windows():
    class NoExecute(BaseWindowedBolt):
        pass

    with pytest.raises(TypeError, match="execute"):
        NoExecute()  # type: ignore[abstract]
    bolt = Collecting().with_tumbling_window(Count(2))
    manager: WindowManager[Tuple] = WindowManager(bolt.window_config())
    fields = Fields("n")
    for n in range(4):
        for w in manager.add(Tuple([n], fields, "numbers", 1), n).fired:
            bolt.execute(w)
    assert bolt.windows == [[0, 1], [2, 3]]


# ---------------------------------------------------------------- timestamps


def test_timestamp_of_reads_the_field_and_says_what_is_wrong():
    config = WindowConfig(Count(1), Count(1), "ts")
    fields = Fields("word", "ts")
    assert config.timestamp_of(Tuple(["a", 1700000000000], fields, "reader", 2)) == 1700000000000
    with pytest.raises(WindowTimeError, match="'reader' stream 'default' has no timestamp field"):
        config.timestamp_of(Tuple(["a"], Fields("word"), "reader", 2))
    with pytest.raises(WindowTimeError, match="must hold an int of milliseconds, got str '12'"):
        config.timestamp_of(Tuple(["a", "12"], fields, "reader", 2))
    with pytest.raises(WindowTimeError, match="runs on processing time"):
        WindowConfig(Count(1), Count(1)).timestamp_of(Tuple(["a", 1], fields, "reader", 2))


@pytest.mark.parametrize("bad", [1.5, True, "10", None])
def test_a_time_that_is_not_an_int_of_milliseconds_is_refused(bad):
    m = WindowManager(WindowConfig(Duration(10), Duration(10)))
    with pytest.raises(WindowTimeError, match="must be an int of milliseconds"):
        m.add("a", bad)
    with pytest.raises(WindowTimeError, match="int\\(clock.now_ms\\(\\)\\)"):
        m.on_time(bad)


def test_an_unknown_stream_and_a_watermark_on_processing_time_are_refused():
    m = WindowManager(WindowConfig(Duration(10), Duration(10), "ts"), input_streams=["a", "b"])
    with pytest.raises(WindowConfigError, match=r"stream 'c' is not one of .*\['a', 'b'\]"):
        m.add("x", 1, "c")
    processing = WindowManager(WindowConfig(Duration(10), Duration(10)))
    with pytest.raises(WindowConfigError, match="runs on processing time.*call on_time"):
        processing.on_watermark(5)
    with pytest.raises(WindowConfigError, match="input_streams must be non-empty strings"):
        WindowManager(WindowConfig(Count(1), Count(1)), input_streams=[])


# ---------------------------------------------------------------- snapshots


def _busy_manager() -> WindowManager[str]:
    m: WindowManager[str] = WindowManager(WindowConfig(Duration(10), Duration(5), "ts"))
    for x, ts in (("a", 1), ("b", 7), ("c", 12)):
        m.add(x, ts)
    m.on_watermark(11)
    return m


def test_a_snapshot_is_plain_data_and_restores_to_the_same_state():
    m = _busy_manager()
    value = m.snapshot()
    assert json.loads(json.dumps(value)) == value
    copy: WindowManager[str] = WindowManager(m.config)
    copy.restore(value)
    assert copy.snapshot() == value
    assert copy.held() == m.held() == ["b", "c"]
    assert (copy.watermark, copy.fired_count) == (11, 2)
    assert copy.on_watermark(11).fired == () and copy.on_watermark(10).fired == ()
    assert copy.on_watermark(15) == m.on_watermark(15)


def test_a_snapshot_of_another_window_is_refused_and_changes_nothing():
    value = _busy_manager().snapshot()
    other: WindowManager[str] = WindowManager(WindowConfig(Duration(10), Duration(10), "ts"))
    other.add("z", 3)
    before = other.snapshot()
    with pytest.raises(WindowStateError) as info:
        other.restore(value)
    assert str(info.value) == (
        "the snapshot was taken with a sliding every 5 ms window of 10 ms (event time from "
        "'ts', lag 0 ms), this manager runs a tumbling window of 10 ms (event time from 'ts', "
        "lag 0 ms): restore it under the same window, or start the window from empty"
    )
    assert other.snapshot() == before


@pytest.mark.parametrize(
    ("corrupt", "message"),
    [
        (lambda v: [v], "is a dict with keys"),
        (lambda v: {k: x for k, x in v.items() if k != "held"}, "is a dict with keys"),
        (lambda v: {**v, "format": 99}, "format 99; this version reads 1"),
        (lambda v: {**v, "fired": "2"}, "'fired' = '2' is not an int"),
        (lambda v: {**v, "held": [[12, 2, "c"], [7, 1, "b"]]}, "'held'.*in \\(ts, seq\\) order"),
        (lambda v: {**v, "prev": [[1, 0]]}, "'prev'.*is not a list of \\[ts, seq, item\\]"),
        (lambda v: {**v, "counted": [1]}, "'counted'.*null or \\[ts, seq\\]"),
        (lambda v: {**v, "stream_max": {"other": 3}}, "'stream_max'.*input stream"),
        (lambda v: {**v, "config": {"length": 3}}, "saved window config"),
        (
            lambda v: {**v, "config": {**v["config"], "length": ["count", 0]}},
            "saved window length.*Count must be positive",
        ),
    ],
)
def test_a_corrupt_snapshot_names_the_field(corrupt, message):
    m = _busy_manager()
    value = m.snapshot()
    fresh: WindowManager[str] = WindowManager(m.config)
    with pytest.raises(WindowStateError, match=message):
        fresh.restore(corrupt(value))
    assert fresh.held() == [] and fresh.watermark is None


def test_window_equality_map_and_repr():
    w = Window([1, 2], new=[2], expired=[0], start=None, end=9, index=4)
    assert w == Window([1, 2], new=[2], expired=[0], start=None, end=9, index=4)
    assert w != Window([1, 2], new=[2], expired=[0], start=None, end=9, index=5)
    assert w.map(str) == Window(["1", "2"], new=["2"], expired=["0"], start=None, end=9, index=4)
    assert repr(w) == "Window(index=4, start=None, end=9, items=[1, 2], new=[2], expired=[0])"
