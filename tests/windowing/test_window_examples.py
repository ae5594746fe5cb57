"""The trending-words example and its crash demo: the input, the verdict, and real runs.

The input's promises are checked without Spark (on-time records never late, stragglers before
the gate, the plain windows right on a case counted by hand); the example runs on the shared
Spark session; the crash demo runs as its own process, one seed, with a driver kill point and a
worker crash (the demo was looped over 20 seeds by hand; see its docstring).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from examples import trending_words as tw
from examples.trending_words import LAG, START_MS, Input, Record, make_input

ROOT = str(tw.__file__).rsplit("/examples/", 1)[0]
MINUTE = 60_000


def test_the_input_is_the_same_in_every_call_and_keeps_its_promises():
    data = make_input(records=3000, minutes=20, late=30, disorder=200, vocab=500, seed=3)
    assert data == make_input(records=3000, minutes=20, late=30, disorder=200, vocab=500, seed=3)
    stamps = [r.ts for r in data.on_time]
    newest = max(stamps[0], START_MS)
    behind = []
    for ts in stamps:
        behind.append(newest - ts)
        newest = max(newest, ts)
    # Out of order, but never by the lag: no batching can make an on-time record late.
    assert sum(1 for b in behind if b > 0) > 100 and max(behind) < LAG.value
    assert min(stamps) >= START_MS
    assert data.gate_end == START_MS + 10 * MINUTE
    assert len(data.late) == 30 and all(START_MS <= r.ts < data.gate_end for r in data.late)
    # The gate window fires from on-time records alone (their watermark passes it).
    assert data.gate_end <= max(stamps) - LAG.value
    ids = [r.id for r in (*data.on_time, *data.late, data.end)]
    assert ids == list(range(3031))
    assert data.end.ts - LAG.value == tw.last_window_end(max(stamps))


def test_expected_windows_on_a_case_counted_by_hand():
    records = (
        Record(0, "a", START_MS + 10_000),
        Record(1, "b", START_MS + 70_000),
        Record(2, "a", START_MS + 65_000),
        Record(3, "c", START_MS + 11 * MINUTE),  # leaves the first window after 10 minutes
    )
    end = Record(4, "(end)", tw.last_window_end(records[3].ts) + LAG.value)
    data = Input(records, (Record(5, "z", START_MS),), end, START_MS + MINUTE)
    windows = tw.expected_windows(data, top=2)
    assert windows[START_MS + MINUTE] == {"start": START_MS - 9 * MINUTE, "size": 1,
                                          "top": [["a", 1]]}  # fmt: skip
    assert windows[START_MS + 2 * MINUTE]["top"] == [["a", 2], ["b", 1]]
    assert windows[START_MS + 10 * MINUTE]["size"] == 3
    assert windows[START_MS + 11 * MINUTE]["top"] == [["a", 1], ["b", 1]]  # a at 0:10 left
    assert windows[START_MS + 12 * MINUTE]["top"] == [["c", 1]]
    assert windows[START_MS + 21 * MINUTE]["top"] == [["c", 1]]
    assert max(windows) == START_MS + 21 * MINUTE and len(windows) == 21


def test_the_verdict_finds_a_window_twice_a_wrong_top_a_missing_one_and_a_wrong_late_count():
    data = make_input(records=400, minutes=6, late=3, disorder=20, vocab=100)
    want = tw.expected_windows(data, 3)
    good = {end: {**w, "emitted": 1} for end, w in want.items()}
    late = {r.id: 1 for r in data.late}
    assert tw.verdict(data, 3, good, late)["exact"]
    first, second, *_ = sorted(want)
    assert tw.verdict(data, 3, {**good, first: {**good[first], "emitted": 2}}, late)[
        "windows_emitted_twice"
    ] == [first]
    wrong = {**good, second: {**good[second], "top": [["nope", 1]]}}
    assert not tw.verdict(data, 3, wrong, late)["exact"]
    assert not tw.verdict(data, 3, {e: w for e, w in good.items() if e != first}, late)["exact"]
    assert not tw.verdict(data, 3, good, {**late, 0: 1})["late_exact"]
    assert not tw.verdict(data, 3, good, {data.late[0].id: 2})["late_exact"]


@pytest.mark.spark
def test_the_example_fires_every_window_once_equal_to_the_plain_computation(spark, capsys):
    argv = ["--records", "1200", "--minutes", "12", "--late", "8", "--disorder", "60"]
    argv += ["--vocab", "300", "--name", "trending-test", "--json"]
    assert tw.main(argv, spark=spark) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["exact"] is True and doc["topology"] == "trending-test"
    data = make_input(1200, 12, 8, 60, 300)
    want = tw.expected_windows(data, 5)
    assert doc["windows_expected"] == doc["windows_equal"] == len(want) == 21
    assert [row["end"] for row in doc["windows"]] == sorted(want)
    assert all(row["emitted"] == 1 and row["equal"] for row in doc["windows"])
    assert [row["top"] for row in doc["windows"]] == [want[e]["top"] for e in sorted(want)]
    assert doc["late_counted"] == doc["late_expected"] == 8 and doc["late_exact"]


@pytest.mark.spark
@pytest.mark.redis
def test_the_crash_demo_kills_a_driver_and_a_worker_and_every_window_is_emitted_once():
    cmd = [sys.executable, "-m", "examples.window_crash", "--kills", "2", "--seed", "1"]
    cmd += ["--records", "900", "--minutes", "12", "--late", "6", "--json"]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["exact"] is True and doc["seed"] == 1
    # Seed 1 plans a driver kill point, then a worker crash: both hit with windows open.
    assert [k["kind"] for k in doc["kills"]] == ["after-committing-saved", "worker"]
    for kill in doc["kills"]:
        assert kill["exit_code"] == 137
        assert kill["windows_committed"] < doc["final"]["windows_expected"]
    assert doc["kills"][1]["worker_crashes"] >= 1
    want = tw.expected_windows(make_input(900, 12, 6, 80), 5)
    assert [(r["end"], r["emitted"], r["equal"]) for r in doc["windows"]] == [
        (end, 1, True) for end in sorted(want)
    ]
    assert doc["final"]["late_counted"] == 6 and doc["final"]["late_exact"]
