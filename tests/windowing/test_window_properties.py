"""Randomized runs of every kind of window against the brute-force reference (seeded).

Each seed draws a window (length and slide each a Count or a Duration; processing or event time;
one or two input streams, a lag, a watermark interval) and a run of adds, times and watermarks,
with tuples out of order and late ones in event time. The manager must fire exactly the windows
the reference enumerates, find the same late tuples, release each admitted tuple once and only
when no later window holds it, and hold at the end exactly what a window to come may still hold.
A snapshot taken anywhere, restored and replayed, must give the same outputs from there on.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from reference_windows import Op, expected_run

from statefulbolts.windowing import Count, Duration, WindowConfig, WindowManager, WindowUpdate

SEEDS = range(240)
KINDS = [(lc, sc, et) for lc in (Count, Duration) for sc in (Count, Duration) for et in (0, 1)]


def random_run(rng: random.Random, kind: int) -> tuple[WindowConfig, list[str], list[Op]]:
    length_kind, slide_kind, event_time = KINDS[kind % len(KINDS)]
    length = length_kind(rng.randint(1, 5) if length_kind is Count else rng.randint(1, 14))
    slide = slide_kind(rng.randint(1, 5) if slide_kind is Count else rng.randint(1, 14))
    streams = ["default"] if rng.random() < 0.6 or not event_time else ["a", "b"]
    if event_time:
        config = WindowConfig(
            length,
            slide,
            "ts",
            lag_ms=rng.choice([0, 0, 2, 6]),
            watermark_interval_ms=rng.choice([1, 3, 10]),
        )
    else:
        config = WindowConfig(length, slide)
    ops: list[Op] = []
    clock = rng.randint(-20, 1000)  # processing time; event time's base
    newest = clock
    for item in range(rng.randint(0, 70)):
        roll = rng.random()
        if roll < 0.2:
            clock += rng.randint(0, 9)
            ops.append(("time", clock))
        elif roll < 0.3 and event_time:
            ops.append(("wm", newest - rng.randint(-2, 8)))
        if event_time:
            newest = max(newest, clock)
            ts = clock + rng.randint(-10, 6)  # out of order; some late
            clock += rng.randint(0, 3)
        else:
            ts = clock + rng.randint(-3, 4)  # may lag behind a time already seen
            clock = max(clock, ts)
        ops.append(("add", item, ts, rng.choice(streams)))
    if rng.random() < 0.7:  # close the run: time and watermarks far ahead
        ops.append(("time", clock + 40))
        if event_time:
            ops.append(("wm", clock + rng.randint(0, 40)))
    return config, streams, ops


def apply(manager: WindowManager[int], op: Op) -> WindowUpdate[int]:
    if op[0] == "add":
        return manager.add(op[1], op[2], op[3])
    if op[0] == "time":
        return manager.on_time(op[1])
    return manager.on_watermark(op[1])


def as_dict(window: Any) -> dict[str, Any]:
    return {
        "items": window.get(),
        "new": window.get_new(),
        "expired": window.get_expired(),
        "start": window.get_start_timestamp(),
        "end": window.get_end_timestamp(),
        "index": window.index,
    }


@pytest.mark.parametrize("seed", SEEDS)
def test_the_manager_matches_the_reference(seed):
    rng = random.Random(seed)
    config, streams, ops = random_run(rng, seed)
    manager: WindowManager[int] = WindowManager(config, input_streams=streams)
    updates = [apply(manager, op) for op in ops]
    expected = expected_run(config, ops, set(streams))

    fired = [as_dict(w) for u in updates for w in u.fired]
    assert fired == expected.windows, config
    assert [x for u in updates for x in u.late] == expected.late
    assert manager.held() == expected.held
    assert manager.fired_count == len(expected.windows)

    # Release: once each, never late ones, and never before a window that holds the item.
    released_at: dict[int, int] = {}
    for step, update in enumerate(updates):
        for item in update.released:
            assert item not in released_at, f"{item} released twice"
            released_at[item] = step
    admitted = {op[1] for op in ops if op[0] == "add"} - set(expected.late)
    assert set(released_at) == admitted - set(expected.held)
    for step, update in enumerate(updates):
        for window in update.fired:
            assert all(released_at.get(item, step) >= step for item in window.get())

    # A window is the previous one, minus the expired, plus the new.
    previous: list[int] = []
    for window in fired:
        rebuilt = [x for x in previous if x not in window["expired"]] + window["new"]
        assert sorted(rebuilt) == sorted(window["items"])
        previous = window["items"]


@pytest.mark.parametrize("seed", range(0, 240, 3))
def test_restoring_a_snapshot_and_replaying_fires_the_same_and_nothing_twice(seed):
    rng = random.Random(seed)
    config, streams, ops = random_run(rng, seed)
    cut = rng.randint(0, len(ops))
    original: WindowManager[int] = WindowManager(config, input_streams=streams)
    for op in ops[:cut]:
        apply(original, op)
    saved = json.loads(json.dumps(original.snapshot()))  # plain data, through JSON
    after_cut = [apply(original, op) for op in ops[cut:]]

    restored: WindowManager[int] = WindowManager(config, input_streams=streams)
    restored.restore(saved)
    # A time or watermark delivered again before the replay fires nothing.
    for op in reversed(ops[:cut]):
        if op[0] != "add":
            assert apply(restored, op) == WindowUpdate()
            break
    replayed = [apply(restored, op) for op in ops[cut:]]

    assert replayed == after_cut
    assert restored.snapshot() == original.snapshot()
    indexes = [w.index for u in replayed for w in u.fired]
    assert indexes == list(range(saved["fired"], saved["fired"] + len(indexes)))
