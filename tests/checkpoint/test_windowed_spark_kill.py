"""A driver killed for real at each checkpoint kill point while windows are open, on Redis.

The windowed topology of the runner tests, fed from a Redis stream (a durable source: a
restarted driver's spout gets back what its killed run had not acked), runs on Spark in a
child driver process (``drive``) that dies at a kill point of ``topology.faults`` in a
transaction carrying data, while windows hold tuples. The same driver then runs again without
the fault until it is idle, and the test reads the committed ``Verdicts`` state from Redis:
every window once, equal to ``expected_windows`` (a plain Python computation).

The child's time is a ``ManualClock`` moved one second per job that ends (up to its end), so
the watermark ticks are known whatever the machine's speed; the restart's clock starts later.

``STATEFULBOLTS_WIN_SEEDS`` (``"0-19"``, or ``"4"``) gives the seeds each kill point is
looped over; a seed picks the transaction the driver dies in. Unset, the suite runs seed 3 at
``mid-commit`` only: each run starts two Spark drivers.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest
from recovery_topologies import child_env, run_driver_process
from test_windowed_spark import seeds
from windowed_topologies import (
    LENGTH_MS,
    SLIDE_MS,
    STEP_MS,
    Verdicts,
    Windows,
    expected_windows,
)

from providers import StateFactory
from statefulbolts import BasicBolt, Fields, ManualClock, TopologyBuilder
from statefulbolts.connectors import RedisStreamSpout
from statefulbolts.topology import StormTopology
from statefulbolts.windowing import Duration

pytestmark = [pytest.mark.spark, pytest.mark.redis]

ROOT = Path(__file__).resolve().parents[2]
N = 40
MAX_PENDING = 10
POINTS = ["after-prepare", "after-committing-saved", "mid-commit", "after-committed"]
# Two child drivers per run: the suite runs one point (the inline runner tests cover the
# others on Redis); a seed loop (STATEFULBOLTS_WIN_SEEDS set) runs every point.
RUN_POINTS = POINTS if os.environ.get("STATEFULBOLTS_WIN_SEEDS") else ["mid-commit"]
KILLED = 137
RUN_TIMEOUT = 300
STREAM_KEY = "win.stream"  # the config key of the stream the child's spout reads
START_KEY = "win.clock.start.ms"


class Stamp(BasicBolt):
    """``(id, ts)`` of a stream entry's id: ``ts = id * STEP_MS``, as ``Readings`` emits."""

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        i = int(tuple.get_value(0))
        collector.emit([i, i * STEP_MS])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "ts"))


def stream_topology(conf: dict[str, Any]) -> StormTopology:
    """Stream entries ``{"id": i}`` -> ``Stamp`` -> sliding event-time ``Windows`` -> verdicts."""
    url = conf["redis.stream.url"]
    spout = RedisStreamSpout(conf[STREAM_KEY], redis_url=url, fields=["id"], batch=5)
    windows = Windows().with_window(Duration(LENGTH_MS), Duration(SLIDE_MS))
    builder = TopologyBuilder()
    builder.set_spout("entries", spout)
    builder.set_bolt("stamp", Stamp()).shuffle_grouping("entries")
    builder.set_bolt("windows", windows.with_timestamp_field("ts")).shuffle_grouping("stamp")
    builder.set_bolt("verdicts", Verdicts()).global_grouping("windows")
    return builder.create_topology()


class _Advance:
    """``on_transaction``: one second on the clock per job that ends, up to ``end_ms``."""

    def __init__(self, clock: ManualClock, end_ms: float) -> None:
        self.clock, self.end_ms = clock, end_ms

    def __call__(self, info: Any) -> None:
        if self.clock.now_ms() < self.end_ms:
            self.clock.advance(1000)


def drive(conf_path: str, name: str) -> None:
    """The child driver: run ``stream_topology`` on Spark until idle (or killed)."""
    from statefulbolts import LocalCluster

    conf = json.loads(Path(conf_path).read_text(encoding="utf-8"))
    clock = ManualClock(conf[START_KEY])
    advance = _Advance(clock, conf[START_KEY] + 20_000)
    with LocalCluster("local[2]", app_name=name) as cluster:
        handle = cluster.submit_topology(
            name, conf, stream_topology(conf), clock=clock, on_transaction=advance
        )
        handle.await_idle(RUN_TIMEOUT - 60)


def _command(conf: dict[str, Any], path: Path, name: str) -> list[str]:
    path.write_text(json.dumps(conf), encoding="utf-8")
    here = Path(__file__).resolve().parent
    code = (
        f"import sys; sys.path[:0] = [{str(here)!r}, {str(here.parent)!r}]; "
        "from test_windowed_spark_kill import drive; drive(sys.argv[1], sys.argv[2])"
    )
    return [sys.executable, "-c", code, str(path), name]


def _run(conf: dict[str, Any], path: Path, name: str) -> tuple[int, str]:
    # The Spark workers unpickle this module's bolts and the windowed topologies' by name.
    here = Path(__file__).resolve().parent
    env = child_env()
    env["PYTHONPATH"] = os.pathsep.join([str(here), str(here.parent), env.get("PYTHONPATH", "")])
    status, _, err = run_driver_process(_command(conf, path, name), ROOT, RUN_TIMEOUT, env)
    return status, err


def _committed(conf: dict[str, Any], name: str) -> dict[str, Any]:
    return dict(StateFactory.get_state(f"{name}/verdicts-0", conf))  # type: ignore[call-overload]


@pytest.mark.parametrize("point", RUN_POINTS)
@pytest.mark.parametrize("seed", seeds())
def test_a_driver_killed_with_windows_open_resumes_them_exactly(
    seed: int, point: str, redis_db: Any, tmp_path: Path
) -> None:
    name, stream = f"win-kill-{point}-{seed}", f"win-entries-{point}-{seed}"
    client = redis_db.client(decode_responses=True)
    for i in range(N):
        client.xadd(stream, {"id": i})
    pool = {"jedisPoolConfig": {"host": "127.0.0.1", "port": redis_db.port}}
    conf: dict[str, Any] = {
        "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
        "topology.state.provider.config": pool,
        "topology.state.checkpoint.interval.ms": 1,
        "topology.max.spout.pending": MAX_PENDING,
        "redis.stream.url": redis_db.url,
        STREAM_KEY: stream,
        START_KEY: 0,
    }
    txid = seed % 3  # PREPARE(0) to PREPARE(3) carry the data, 10 tuples each
    faults = {"driver": {"point": point, "txid": txid}}
    killed = {**conf, "topology.faults": faults}

    # 1. The driver dies at the point, in a transaction that carries data into open windows.
    status, err = _run(killed, tmp_path / "killed.json", name)
    assert status == KILLED, f"driver exited {status}, not killed:\n{err[-3000:]}"
    assert len(_committed(conf, name)) < len(expected_windows(N))  # windows still to fire

    # 2. The same driver without the fault, its clock on: each window once, none lost.
    restart = {**conf, START_KEY: 100_000}
    status, err = _run(restart, tmp_path / "restart.json", name)
    assert status == 0, err[-3000:]
    assert _committed(conf, name) == expected_windows(N)
    assert client.keys(f"{name}/*$prepare") == []
    assert client.xpending(stream, name)["pending"] == 0
