"""Windowed bolts on real Spark: exact windows, each fired once, through worker failures.

The windowed topologies of the runner tests (``windowed_topologies``) on the shared
``local[2]`` session. Time is a ``ManualClock`` moved one second per job that ends, so the
watermark ticks are known whatever the machine's speed. The verdict is the committed state
of ``Verdicts``: every window under its index, once, equal to ``expected_windows`` (a plain
Python computation); a window fired in two committed transactions would show twice.

- In memory, the driver owns the store: each job ships the window namespace's image to the
  workers (``checkpoint._jobs``) and takes the prepared delta back. Exact windows prove the
  round trip; the held events prove the namespace is the driver's.
- On Redis the workers read and write the windows themselves.
- A Python worker crash (``os._exit``) mid-window on the first attempt: Spark runs the task
  again, which starts from the committed windows. An executor that dies right after the
  window state prepared (``"at": "prepared"``): the retry supersedes the orphan delta.

``STATEFULBOLTS_WIN_SEEDS`` (``"0-19"``, or ``"4"``; default ``"3"``) gives the seeds the crash
tests loop over: a seed picks the crashing tuple and transaction.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import topologies as topo
from seed_lists import env_seeds
from windowed_topologies import STEP_MS, CountingWindows, event_time_topology, expected_windows

from providers import StateFactory
from statefulbolts import ManualClock
from statefulbolts.namespaces import TaskNamespace, window_namespace

pytestmark = pytest.mark.spark

N = 40
# Two PREPAREs carry the data (20 tuples each); after them one watermark tick fires the rest.
CONF = {"topology.state.checkpoint.interval.ms": 1, "topology.max.spout.pending": 20}
END_MS = 6_000


def seeds() -> list[int]:
    """The seeds of ``STATEFULBOLTS_WIN_SEEDS``: ``"a-b"`` (inclusive) or one int."""
    return env_seeds("STATEFULBOLTS_WIN_SEEDS", "3")


class _Advance:
    """``on_transaction``: one second on the clock per job that ends, up to ``end_ms``."""

    def __init__(self, clock: ManualClock, end_ms: float) -> None:
        self.clock, self.end_ms = clock, end_ms
        self.failed = 0

    def __call__(self, info: Any) -> None:
        self.failed += not info.ok
        if self.clock.now_ms() < self.end_ms:
            self.clock.advance(1000)


def _redis(port: int) -> dict[str, Any]:
    pool = {"jedisPoolConfig": {"host": "127.0.0.1", "port": port}}
    return {
        "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
        "topology.state.provider.config": json.dumps(pool),
    }


def _run(cluster: Any, name: str, conf: dict[str, Any], topology: Any = None) -> Any:
    clock = ManualClock()
    advance = _Advance(clock, END_MS)
    handle = cluster.submit_topology(
        name, conf, topology or event_time_topology(N), clock=clock, on_transaction=advance
    )
    handle.await_idle(240)
    return handle, advance


def _held_events(name: str, conf: dict[str, Any]) -> list[int]:
    ns = window_namespace(TaskNamespace.of_topology(name, "windows", 0))
    stored = dict(StateFactory.get_system_state(ns, conf).items())  # type: ignore[attr-defined]
    assert stored["manager"]["next_id"] == N
    return sorted(int(k.split("/")[1]) for k in stored if k.startswith("event/"))


# The tuples the watermark (ts of the last tuple, 9750) has not closed: ts >= 8000 of the
# first window not fired, [8000, 10000), and the last fired window's own, for its successor.
HELD = [i for i in range(N) if i * STEP_MS >= 8000 - 1000]


def test_in_memory_windows_are_shipped_to_the_workers_and_exact(cluster: Any) -> None:
    name = topo.new_key("win-spark-mem")
    handle, advance = _run(cluster, name, CONF)
    assert handle.read_state("verdicts") == expected_windows(N)
    assert advance.failed == 0
    # The driver's store holds the window namespace the workers' deltas were merged into.
    assert _held_events(name, CONF) == HELD


def test_a_stateful_windowed_bolt_on_redis_commits_its_windows_and_state(
    cluster: Any, redis_db: Any
) -> None:
    name = topo.new_key("win-spark-redis")
    conf = {**CONF, **_redis(redis_db.port)}
    handle, _ = _run(cluster, name, conf, event_time_topology(N, CountingWindows()))
    expected = expected_windows(N)
    assert handle.read_state("verdicts") == expected
    assert handle.read_state("windows") == {"seen": sum(len(w[0][2]) for w in expected.values())}
    assert _held_events(name, conf) == HELD
    client = redis_db.client(decode_responses=True)
    assert client.keys(f"{name}/*$prepare") == []


def _crash(seed: int, at: str) -> dict[str, Any]:
    # txid 0 carries tuples 0-19, txid 1 tuples 20-39 (20 pending at most).
    fault: dict[str, Any] = {"component": "windows", "task": 0, "kind": "crash", "txid": seed % 2}
    if at == "prepared":
        fault["at"] = "prepared"
    else:
        fault.update(at_tuple=1 + seed % 19, attempts="first")
    return {"topology.faults": {"tasks": [fault]}}


@pytest.mark.parametrize("at", ["tuple", "prepared"])
@pytest.mark.parametrize("seed", seeds())
def test_a_worker_crash_mid_window_is_retried_and_no_window_fires_twice(
    spark: Any, cluster: Any, seed: int, at: str
) -> None:
    # "tuple": the Python worker dies before the task's n-th tuple, its windows half-updated
    # in memory; "prepared": it dies after the window state's delta reached the store.
    name = topo.new_key(f"win-spark-crash-{at}")
    handle, advance = _run(cluster, name, {**CONF, **_crash(seed, at)})
    assert handle.read_state("verdicts") == expected_windows(N)
    assert _held_events(name, CONF) == HELD
    # The crash happened, inside the PREPARE job of its transaction, which Spark's retry of
    # the task then completed: no transaction failed.
    tracker = spark.sparkContext.statusTracker()
    [job] = tracker.getJobIdsForGroup(f"{name}/PREPARE/txid={seed % 2}")
    info = tracker.getJobInfo(job)
    assert info.status == "SUCCEEDED"
    assert sum(tracker.getStageInfo(s).numFailedTasks for s in info.stageIds) == 1
    assert advance.failed == 0
