"""The session-timeout example: its plain computations, its verdict, and real runs.

The plain sessionization and TTL counts are checked on cases worked by hand, the verdict on
results spoiled one way at a time; the example then runs end to end: on the inline engine over
several seeds and parallelisms (every task in this process: the exactness argument of the
example's docstring, which does not depend on the engine), and on the shared Spark session with
the in-memory provider and with a real redis-server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import topologies as topo

from examples import sessions as ex
from examples.sessions import START_MS, Event, Session, Settings

S = 1000


def _report(capsys: pytest.CaptureFixture[str], argv: list[str], **kw: Any) -> dict[str, Any]:
    assert ex.main([*argv, "--json"], **kw) == 0, capsys.readouterr()
    report: dict[str, Any] = json.loads(capsys.readouterr().out)
    return report


def test_sessionize_splits_at_the_gap_and_an_event_at_exactly_the_gap_starts_a_new_session():
    events = [Event("a", 0), Event("b", 10 * S), Event("a", 29 * S), Event("a", 59 * S),
              Event("a", 89 * S), Event("b", 11 * S)]  # fmt: skip
    assert ex.sessionize(events, 30 * S) == [
        Session("a", 0, 29 * S, 2),  # 29 s apart: one session
        Session("a", 59 * S, 59 * S, 1),  # 30 s apart: the gap, so a new session
        Session("a", 89 * S, 89 * S, 1),
        Session("b", 10 * S, 11 * S, 2),  # b's events come out of order in the input
    ]


def test_expected_counts_reset_after_a_ttl_pause_and_forget_users_idle_for_the_ttl():
    settings = Settings.of(step=5, gap=10, ttl=60, minutes=10)
    sessions = [
        Session("a", 0, 0, 1),  # closes at 10 s
        Session("a", 30 * S, 40 * S, 2),  # closes at 50 s: 40 s after the last, counts 2
        Session("a", 110 * S, 110 * S, 1),  # closes at 120 s: 70 s after, expired: 1 again
        Session("b", 0, 5 * S, 2),  # closes at 15 s: gone by the end
        Session("c", 100 * S, 115 * S, 3),  # closes at 125 s
    ]
    assert ex.expected_counts(sessions, settings, end_ms=179 * S) == {"a": 1, "c": 1}
    # A count written at T expires at T + ttl: gone at exactly that time.
    assert ex.expected_counts(sessions, settings, end_ms=180 * S) == {"c": 1}
    assert ex.expected_counts(sessions, settings, end_ms=185 * S) == {}


def test_settings_and_events_refuse_what_the_exactness_argument_cannot_cover():
    for step, gap, ttl in [(5, 5, 60), (5, 12, 60), (5, 30, 62), (0, 30, 60)]:
        with pytest.raises(ValueError, match="whole steps"):
            Settings.of(step, gap, ttl, 10)
    with pytest.raises(ValueError, match="--users"):
        ex.make_events(0, Settings.of(5, 30, 60, 10))
    events = ex.make_events(30, Settings.of(5, 30, 60, 10), seed=4)
    assert events == sorted(events, key=lambda e: (e.ts, e.user))
    assert all((e.ts - START_MS) % (5 * S) == 0 for e in events)


def test_the_verdict_finds_a_session_twice_a_wrong_session_a_wrong_count_and_a_leftover_user():
    settings = Settings.of(5, 30, 60, 10)
    events = ex.make_events(20, settings, seed=2)
    end = ex.end_time(events, settings)
    want = ex.sessionize(events, settings.gap_ms)
    closed = {f"{s.user}/{s.start}": {"end": s.end, "events": s.events, "emitted": 1}
              for s in want}  # fmt: skip
    counts = ex.expected_counts(want, settings, end)
    assert 0 < len(counts) < 20  # some users expired, some not: the case is worth checking
    assert ex.verdict(events, settings, end, closed, counts, len(counts))["exact"]
    key = next(iter(closed))
    twice = {**closed, key: {**closed[key], "emitted": 2}}
    found = ex.verdict(events, settings, end, twice, counts, len(counts))
    assert found["sessions_emitted_twice"] == 1 and not found["exact"]
    shorter = {**closed, key: {**closed[key], "events": closed[key]["events"] + 1}}
    assert ex.verdict(events, settings, end, shorter, counts, len(counts))["sessions_wrong"] == [
        key
    ]
    user = next(iter(counts))
    wrong = {**counts, user: counts[user] + 1}
    assert ex.verdict(events, settings, end, closed, wrong, len(counts))["counts_wrong"] == [user]
    gone = next(e.user for e in events if e.user not in counts)
    leftover = {**counts, gone: 1}
    assert not ex.verdict(events, settings, end, closed, leftover, len(counts) + 1)["exact"]
    assert not ex.verdict(events, settings, end, closed, counts, len(counts) + 1)["exact"]


@pytest.mark.parametrize("seed", range(4))
def test_the_example_is_exact_on_the_inline_engine(
    capsys: pytest.CaptureFixture[str], seed: int
) -> None:
    report = _report(
        capsys,
        ["--engine", "inline", "--seed", str(seed), "--parallelism", str(1 + seed % 3),
         "--name", topo.new_key("sessions-inline")],
    )  # fmt: skip
    assert report["exact"] is True
    assert report["sessions_equal_once"] == report["sessions_expected"] > 100
    # Users both kept and forgotten by the TTL: the end state shows both rules at work.
    assert 0 < report["users_alive"] == report["state_keys_counted"] < report["users"]
    # One PREPARE per clock step, from the first event to the end.
    first = ex.make_events(40, Settings.of(5, 30, 120, 10), seed)[0].ts
    assert report["prepares"] == (report["end_ms"] - first) // (5 * S) + 1


SMALL = ["--users", "10", "--minutes", "2", "--step", "10", "--gap", "20", "--ttl", "40"]


@pytest.mark.spark
def test_the_example_is_exact_on_spark_with_memory_state(
    capsys: pytest.CaptureFixture[str], spark: Any
) -> None:
    report = _report(capsys, [*SMALL, "--name", topo.new_key("sessions-spark")], spark=spark)
    assert report["exact"] is True and report["sessions_expected"] > 10
    assert 0 < report["users_alive"] < report["users"]


@pytest.mark.spark
def test_the_example_is_exact_on_spark_with_redis_state_and_refuses_a_used_name(
    capsys: pytest.CaptureFixture[str], spark: Any, redis_db: Any, tmp_path: Path
) -> None:
    pool = {"jedisPoolConfig": {"host": "127.0.0.1", "port": redis_db.port, "timeout": 2000}}
    conf = tmp_path / "redis.json"
    conf.write_text(
        json.dumps(
            {
                "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
                "topology.state.provider.config": json.dumps(pool),
            }
        )
    )
    name = topo.new_key("sessions-redis")
    report = _report(capsys, [*SMALL, "--conf", str(conf), "--name", name], spark=spark)
    assert report["exact"] is True and "Redis" in report["provider"]
    assert 0 < report["users_alive"] == report["state_keys_counted"] < report["users"]
    # The TTL's index in Redis holds exactly the alive users' counts.
    client = redis_db.client()
    try:
        indexed = sum(client.zcard(k) for k in client.scan_iter(f"*{name}*per_user*$ttl"))
    finally:
        client.close()
    assert indexed == report["users_alive"]
    # A second run under the same name would mix runs: refused before Spark starts.
    assert ex.main([*SMALL, "--conf", str(conf), "--name", name], spark=spark) == 2
    assert "already holds state" in capsys.readouterr().err
