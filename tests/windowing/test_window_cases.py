"""Every kind of window on hand-computed runs: which windows fire, with what, and when tuples go.

Times are milliseconds. Items stand for tuples (the executor gives the manager tuple ids).
"""

from __future__ import annotations

from statefulbolts.windowing import Count, Duration, WindowConfig, WindowManager, WindowUpdate


def window(update: WindowUpdate, i: int = 0) -> tuple:
    w = update.fired[i]
    return (w.get(), w.get_new(), w.get_expired(), w.get_start_timestamp(), w.get_end_timestamp())


# ---------------------------------------------------------------- processing time, by count


def test_sliding_count_window_fires_every_s_tuples_with_the_last_n():
    m = WindowManager(WindowConfig(Count(3), Count(2)))
    updates = [m.add(x, ts) for ts, x in enumerate("abcdef")]
    assert [len(u.fired) for u in updates] == [0, 1, 0, 1, 0, 1]
    assert window(updates[1]) == (["a", "b"], ["a", "b"], [], None, 1)
    assert window(updates[3]) == (["b", "c", "d"], ["c", "d"], ["a"], None, 3)
    assert window(updates[5]) == (["d", "e", "f"], ["e", "f"], ["b", "c"], None, 5)
    # a leaves every window once b's window fired (the next holds b, c, d); then b and c.
    assert [u.released for u in updates] == [(), ("a",), (), ("b", "c"), (), ("d", "e")]
    assert [u.fired[0].index for u in updates if u.fired] == [0, 1, 2]


def test_tumbling_count_window_holds_each_tuple_once_and_releases_it_after():
    m = WindowManager(WindowConfig(Count(3), Count(3)))
    updates = [m.add(x, 0) for x in "abcdefg"]
    assert window(updates[2]) == (["a", "b", "c"], ["a", "b", "c"], [], None, 0)
    assert window(updates[5]) == (["d", "e", "f"], ["d", "e", "f"], ["a", "b", "c"], None, 0)
    assert updates[2].released == ("a", "b", "c") and updates[5].released == ("d", "e", "f")
    assert m.held() == ["g"]


def test_count_window_with_no_sliding_interval_given_slides_on_every_tuple():
    m = WindowManager(WindowConfig(Count(2), Count(1)))
    assert [window(m.add(x, 0))[:3] for x in "abc"] == [
        (["a"], ["a"], []),
        (["a", "b"], ["b"], []),
        (["b", "c"], ["c"], ["a"]),
    ]


def test_a_count_slide_longer_than_the_window_skips_tuples_and_releases_them_at_once():
    m = WindowManager(WindowConfig(Count(1), Count(3)))
    updates = [m.add(x, 0) for x in "abcdef"]
    assert [u.released for u in updates] == [("a",), ("b",), ("c",), ("d",), ("e",), ("f",)]
    assert [window(u)[0] for u in updates if u.fired] == [["c"], ["f"]]


# ---------------------------------------------------------------- processing time, by time


def _storm_events(m: WindowManager) -> list[WindowUpdate]:
    """Storm's processing-time picture: e1 e2 | e3 e4 e5 e6 | e7 e8 e9, in 5 s slices."""
    out = [m.on_time(0)]
    out += [m.add(f"e{i}", ts) for i, ts in ((1, 1000), (2, 2000))]
    out.append(m.on_time(5000))
    out += [m.add(f"e{i}", ts) for i, ts in ((3, 6000), (4, 7000), (5, 8000), (6, 9000))]
    out.append(m.on_time(10000))
    out += [m.add(f"e{i}", ts) for i, ts in ((7, 11000), (8, 12000), (9, 13000))]
    out.append(m.on_time(15000))
    return out


def test_sliding_duration_window_as_storm_draws_it():
    m = WindowManager(WindowConfig(Duration.seconds(10), Duration.seconds(5)))
    updates = _storm_events(m)
    fired = [u for u in updates if u.fired]
    assert [window(u) for u in fired] == [
        (["e1", "e2"], ["e1", "e2"], [], -5000, 5000),
        (["e1", "e2", "e3", "e4", "e5", "e6"], ["e3", "e4", "e5", "e6"], [], 0, 10000),
        (
            ["e3", "e4", "e5", "e6", "e7", "e8", "e9"],
            ["e7", "e8", "e9"],
            ["e1", "e2"],
            5000,
            15000,
        ),
    ]
    # After the window ending at 10 s, the next ones start at 5 s: e1 and e2 are done.
    assert [u.released for u in fired] == [(), ("e1", "e2"), ("e3", "e4", "e5", "e6")]


def test_tumbling_duration_window_as_storm_draws_it():
    m = WindowManager(WindowConfig(Duration.seconds(5), Duration.seconds(5)))
    fired = [u for u in _storm_events(m) if u.fired]
    assert [window(u) for u in fired] == [
        (["e1", "e2"], ["e1", "e2"], [], 0, 5000),
        (["e3", "e4", "e5", "e6"], ["e3", "e4", "e5", "e6"], ["e1", "e2"], 5000, 10000),
        (["e7", "e8", "e9"], ["e7", "e8", "e9"], ["e3", "e4", "e5", "e6"], 10000, 15000),
    ]
    assert [u.released for u in fired] == [
        ("e1", "e2"),
        ("e3", "e4", "e5", "e6"),
        ("e7", "e8", "e9"),
    ]


def test_processing_time_windows_end_every_slide_from_the_first_time_seen():
    m = WindowManager(WindowConfig(Duration(10), Duration(10)))
    assert m.on_time(3) == WindowUpdate()
    m.add("a", 5)
    assert m.on_time(12) == WindowUpdate()  # the first window ends at 13, not 10
    assert window(m.on_time(13)) == (["a"], ["a"], [], 3, 13)


def test_a_time_already_seen_fires_nothing_and_an_earlier_stamp_counts_as_now():
    m = WindowManager(WindowConfig(Duration(10), Duration(10)))
    m.on_time(0)
    m.add("a", 4)
    assert window(m.on_time(10))[0] == ["a"]
    assert m.on_time(10) == WindowUpdate() and m.on_time(7) == WindowUpdate()
    m.add("b", 8)  # stamped before 10, which was seen: it arrived at 10
    assert window(m.on_time(20))[:2] == (["b"], ["b"])


def test_an_add_fires_the_windows_that_ended_before_it_first():
    m = WindowManager(WindowConfig(Duration(10), Duration(10)))
    m.on_time(0)
    m.add("a", 4)
    update = m.add("b", 25)
    assert window(update) == (["a"], ["a"], [], 0, 10)
    assert update.released == ("a",)
    assert m.held() == ["b"]


def test_duration_window_sliding_by_count_holds_the_span_before_the_triggering_tuple():
    m = WindowManager(WindowConfig(Duration.seconds(10), Count(2)))
    updates = [m.add(f"e{i}", ts) for i, ts in enumerate((0, 4000, 8000, 12000, 16000), 1)]
    assert window(updates[1]) == (["e1", "e2"], ["e1", "e2"], [], -6000, 4000)
    # (2000, 12000]: e1 at 0 is out.
    assert window(updates[3]) == (["e2", "e3", "e4"], ["e3", "e4"], ["e1"], 2000, 12000)
    assert updates[3].released == ("e1",)
    assert not updates[4].fired


def test_count_window_sliding_by_time_fires_the_last_n_at_every_boundary():
    m = WindowManager(WindowConfig(Count(2), Duration.seconds(5)))
    m.on_time(0)
    assert [m.add(x, ts).released for x, ts in (("e1", 1000), ("e2", 2000), ("e3", 3000))] == [
        (),
        (),
        ("e1",),  # two newer tuples will be in every window to come
    ]
    assert window(m.on_time(5000)) == (["e2", "e3"], ["e2", "e3"], [], None, 5000)
    # As in Storm, a count window keeps firing its last N at each boundary.
    assert window(m.on_time(10000)) == (["e2", "e3"], [], [], None, 10000)
    assert m.on_time(9999) == WindowUpdate()


def test_an_empty_window_does_not_fire():
    m = WindowManager(WindowConfig(Duration(10), Duration(10)))
    m.on_time(0)
    m.add("a", 1)
    assert [w.get_end_timestamp() for w in m.on_time(100).fired] == [10]
    m.add("b", 105)
    update = m.on_time(200)
    assert [(w.get(), w.get_end_timestamp(), w.index) for w in update.fired] == [(["b"], 110, 1)]


# ---------------------------------------------------------------- event time


def _event_time(length, slide, **kwargs) -> WindowManager:
    return WindowManager(WindowConfig(length, slide, "ts", **kwargs))


def test_storm_event_time_example_windows_align_on_the_slide_and_fire_as_the_watermark_passes():
    m = _event_time(Duration.seconds(20), Duration.seconds(10), lag_ms=5000)
    m.on_time(0)  # the watermark generator starts; first watermark at 1000
    for i, ts in enumerate((3000, 5000, 7000, 18000, 26000, 36000), 1):
        assert m.add(f"e{i}", ts) == WindowUpdate()
    update = m.on_time(1000)
    assert m.watermark == 31000  # the newest timestamp, 36 s, minus the lag
    assert [window(update, i) for i in range(3)] == [
        (["e1", "e2", "e3"], ["e1", "e2", "e3"], [], -10000, 10000),
        (["e1", "e2", "e3", "e4"], ["e4"], [], 0, 20000),
        (["e4", "e5"], ["e5"], ["e1", "e2", "e3"], 10000, 30000),
    ]
    assert update.released == ("e1", "e2", "e3", "e4")  # windows from [20 s, 40 s) on
    # e6 at 36 s waits for a watermark past 40 s; a tuple older than 31 s is late.
    assert m.add("old", 30999).late == ("old",)
    for i, ts in ((7, 39000), (8, 44000), (9, 49000)):
        m.add(f"e{i}", ts)
    update = m.on_time(2000)
    assert m.watermark == 44000
    assert window(update) == (["e5", "e6", "e7"], ["e6", "e7"], ["e4"], 20000, 40000)


def test_out_of_order_tuples_within_the_lag_go_to_the_windows_of_their_timestamps():
    m = _event_time(Duration(10), Duration(10))
    for x, ts in (("c", 25), ("a", 3), ("b", 14), ("a2", 7)):
        m.add(x, ts)
    update = m.on_watermark(30)
    assert [w.get() for w in update.fired] == [["a", "a2"], ["b"], ["c"]]
    assert [w.get_end_timestamp() for w in update.fired] == [10, 20, 30]


def test_late_tuples_are_returned_never_held_and_a_tuple_at_the_watermark_is_on_time():
    m = _event_time(Duration(10), Duration(10))
    m.add("a", 5)
    m.on_watermark(10)
    late = m.add("late", 9)
    assert late == WindowUpdate(late=("late",))
    assert m.add("at", 10) == WindowUpdate()
    assert m.held() == ["at"]
    assert window(m.on_watermark(20)) == (["at"], ["at"], ["a"], 10, 20)


def test_a_window_fires_only_when_the_watermark_reaches_its_end():
    m = _event_time(Duration(10), Duration(10))
    m.add("a", 9)
    assert m.on_watermark(9) == WindowUpdate()
    m.add("b", 9)  # still on time: the watermark promised nothing about 9
    assert window(m.on_watermark(10))[0] == ["a", "b"]


def test_event_time_count_window_counts_in_timestamp_order_once_final():
    m = _event_time(Count(2), Count(2))
    for x, ts in (("t5", 5), ("t1", 1), ("t3", 3), ("t9", 9)):
        m.add(x, ts)
    update = m.on_watermark(6)  # 1, 3, 5 are final
    assert [window(update, 0)] == [(["t1", "t3"], ["t1", "t3"], [], None, 3)]
    assert update.released == ("t1", "t3")
    update = m.on_watermark(10)
    assert window(update) == (["t5", "t9"], ["t5", "t9"], ["t1", "t3"], None, 9)


def test_event_time_duration_window_sliding_by_count():
    m = _event_time(Duration(10), Count(2))
    for x, ts in (("a", 0), ("b", 8), ("c", 15), ("d", 12)):
        m.add(x, ts)
    update = m.on_watermark(20)  # order: a0 b8 d12 c15
    assert [window(update, i) for i in range(2)] == [
        (["a", "b"], ["a", "b"], [], -2, 8),
        (["b", "d", "c"], ["d", "c"], ["a"], 5, 15),
    ]


def test_event_time_count_window_sliding_by_time():
    m = _event_time(Count(2), Duration(10))
    for x, ts in (("a", 1), ("b", 2), ("c", 3), ("d", 15)):
        m.add(x, ts)
    update = m.on_watermark(20)
    assert [window(update, i) for i in range(2)] == [
        (["b", "c"], ["b", "c"], [], None, 10),
        (["c", "d"], ["d"], ["b"], None, 20),
    ]


def test_the_watermark_waits_for_every_input_stream_and_takes_the_oldest():
    m = WindowManager(
        WindowConfig(Duration(10), Duration(10), "ts", watermark_interval_ms=100),
        input_streams=["clicks", "views"],
    )
    m.on_time(0)
    m.add("c1", 50, "clicks")
    m.add("c2", 90, "clicks")
    assert m.on_time(100) == WindowUpdate() and m.watermark is None
    m.add("v1", 30, "views")
    update = m.on_time(200)
    assert m.watermark == 30
    assert [w.get() for w in update.fired] == [] and m.add("v0", 29, "views").late == ("v0",)


def test_watermarks_are_emitted_every_interval_and_missed_ones_are_one():
    m = _event_time(Duration(10), Duration(10), watermark_interval_ms=1000, lag_ms=2)
    m.add("a", 100)
    assert m.on_time(500) == WindowUpdate() and m.watermark is None  # starts the schedule
    assert m.on_time(1499) == WindowUpdate() and m.watermark is None
    assert m.on_time(1500) == WindowUpdate()  # 100 - 2: a's window, to 110, is not final
    assert m.watermark == 98 and m.snapshot()["next_watermark_at"] == 2500
    m.add("b", 200)
    update = m.on_time(4700)  # one watermark for the three missed
    assert [w.get() for w in update.fired] == [["a"]]
    assert m.watermark == 198 and m.snapshot()["next_watermark_at"] == 5500
