"""Changing a windowed topology on stored state: its windows follow, or the start refuses.

A windowed bolt's open windows live beside its state (``T/$window/<component>-<task>``).
Each test runs the event-time windowed topology of the runner tests on the inline engine
(time a ``ManualClock``, as there) over half its records, so windows are open and committed,
then starts a changed topology on the same store (in memory, and a real redis-server) and
reads it back:

- a rename (``topology.state.renames``) moves the windows with the component: the renamed
  bolt goes on from them, and the committed verdicts of both runs are exactly the windows of
  a plain Python computation over every record (a window lost or restarted would fire again
  under its index, or miss tuples);
- a new parallelism is refused while windows are open, naming the component and the fixes,
  at start and offline (``statefulbolts state rescale``), and changes nothing: the same
  topology then resumes its windows exactly; with no window open it is allowed, and the new
  task gets windows committed with the rest;
- ``statefulbolts state drop --component`` takes the component's windows with its state.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import topologies as topo

# The windowed topologies of the runner tests (tests/checkpoint), whichever tests run first.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "checkpoint"))
from windowed_topologies import (  # noqa: E402
    LENGTH_MS,
    SLIDE_MS,
    Readings,
    Verdicts,
    Windows,
    expected_windows,
)

from providers import (  # noqa: E402
    STATE_PROVIDER_CONFIG_KEY,
    STATE_PROVIDER_KEY,
    InMemoryKeyValueStateProvider,
    StateFactory,
    get_provider,
)
from statefulbolts import LocalCluster, ManualClock, TopologyBuilder
from statefulbolts.errors import StateEvolutionError
from statefulbolts.namespaces import TaskNamespace, window_namespace, window_prefix
from statefulbolts.offline import drop, rescale
from statefulbolts.topology import StormTopology
from statefulbolts.windowing import Duration

N = 40
FAST = {"topology.state.checkpoint.interval.ms": 1, "topology.max.spout.pending": 5}


@pytest.fixture(params=["memory", pytest.param("redis", marks=pytest.mark.redis)])
def conf(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    if request.param == "memory":
        made: dict[str, Any] = dict(FAST)
    else:
        server = request.getfixturevalue("redis_db")
        pool = {"host": "127.0.0.1", "port": server.port}
        made = {
            **FAST,
            STATE_PROVIDER_KEY: "providers.redis.RedisKeyValueStateProvider",
            STATE_PROVIDER_CONFIG_KEY: json.dumps({"jedisPoolConfig": pool}),
        }
    yield made
    InMemoryKeyValueStateProvider.drop()


def _topology(n: int, source: str, windows: str = "windows", parallelism: int = 1) -> StormTopology:
    bolt = Windows().with_window(Duration(LENGTH_MS), Duration(SLIDE_MS))
    builder = TopologyBuilder()
    builder.set_spout("readings", Readings(n, source))
    builder.set_bolt(windows, bolt.with_timestamp_field("ts"), parallelism).shuffle_grouping(
        "readings"
    )
    builder.set_bolt("verdicts", Verdicts()).global_grouping(windows)
    return builder.create_topology()


class _Advance:
    """``on_transaction``: one second on the clock per job that ends, up to ``end_ms``."""

    def __init__(self, clock: ManualClock, end_ms: float) -> None:
        self.clock, self.end_ms = clock, end_ms

    def __call__(self, info: Any) -> None:
        if self.clock.now_ms() < self.end_ms:
            self.clock.advance(1000)


def _run(name: str, conf: dict[str, Any], topology: StormTopology, start_ms: int = 0) -> Any:
    """Run ``topology`` until idle; its committed verdicts."""
    clock = ManualClock(start_ms)
    with LocalCluster(engine="inline") as cluster:
        handle = cluster.submit_topology(
            name, conf, topology, clock=clock, on_transaction=_Advance(clock, start_ms + 20_000)
        )
        handle.await_idle(60)
        return handle.read_state("verdicts")


def _windows(conf: dict[str, Any], name: str) -> list[str]:
    return get_provider(conf).namespaces(conf, window_prefix(f"{name}/")) or []


def _held(conf: dict[str, Any], name: str, component: str, task: int = 0) -> dict[str, Any]:
    ns = window_namespace(TaskNamespace.of_topology(name, component, task))
    return dict(StateFactory.get_system_state(ns, conf).items())  # type: ignore[attr-defined]


def _half_run(name: str, conf: dict[str, Any]) -> dict[str, Any]:
    """The first half of the records, windows open; the committed verdicts."""
    first = _run(name, conf, _topology(N // 2, source=name))
    assert first and len(first) < len(expected_windows(N))
    assert _held(conf, name, "windows")["manager"]["next_id"] == N // 2
    return first


def test_a_renamed_windowed_bolt_takes_its_open_windows_along(conf: dict[str, Any]) -> None:
    name = topo.new_key("win-rename")
    _half_run(name, conf)
    held = _held(conf, name, "windows")
    renamed = {**conf, "topology.state.renames": {"windows": "trends"}}
    committed = _run(name, renamed, _topology(N, source=name, windows="trends"), 100_000)
    assert committed == expected_windows(N)
    assert _windows(conf, name) == [f"{name}/$window/trends-0"]
    assert _held(conf, name, "windows") == {}
    # What the renamed bolt started from was the stored windows, as they were.
    assert _held(conf, name, "trends")["manager"]["next_id"] == N
    assert held["manager"]["next_id"] == N // 2


def test_a_new_parallelism_with_open_windows_is_refused_and_changes_nothing(
    conf: dict[str, Any],
) -> None:
    name = topo.new_key("win-rescale")
    _half_run(name, conf)
    held = _held(conf, name, "windows")

    def fixes(parallelism: int) -> str:
        return (
            rf"component 'windows' of topology '{name}': its windows are open \(stored in "
            rf"{name}/\$window/windows-0\), and parallelism 1 -> {parallelism} was asked\..*"
            r"Keep parallelism 1 for 'windows'; or.*statefulbolts state drop --component windows"
        )

    with pytest.raises(StateEvolutionError, match=fixes(2)):
        _run(name, conf, _topology(N, source=name, parallelism=2), 100_000)
    with pytest.raises(StateEvolutionError, match=fixes(3)):
        rescale(conf, f"{name}/", "windows", 3)
    assert _held(conf, name, "windows") == held
    assert _windows(conf, name) == [f"{name}/$window/windows-0"]
    # The same topology goes on from its windows.
    assert _run(name, conf, _topology(N, source=name), 100_000) == expected_windows(N)


def test_a_new_parallelism_with_no_window_open_gives_the_new_task_windows(
    conf: dict[str, Any],
) -> None:
    # No record yet: the windows hold nothing, and nothing needs to split.
    name = topo.new_key("win-rescale-empty")
    assert _run(name, conf, _topology(0, source=name)) == {}
    assert _windows(conf, name) == [f"{name}/$window/windows-0"]
    _run(name, conf, _topology(N, source=name, parallelism=2), 100_000)
    assert _windows(conf, name) == [f"{name}/$window/windows-{t}" for t in range(2)]
    # Both tasks held tuples in windows committed with the rest (a task without committed
    # windows would have stopped the topology: the lost-store check).
    counts = [_held(conf, name, "windows", t)["manager"]["next_id"] for t in range(2)]
    assert sum(counts) == N
    assert all(counts)


def test_dropping_a_windowed_component_drops_its_windows(conf: dict[str, Any]) -> None:
    name = topo.new_key("win-drop")
    _half_run(name, conf)
    prefix = f"{name}/"
    without = TopologyBuilder()
    without.set_spout("readings", Readings(0, name))
    without.set_bolt("verdicts", Verdicts()).shuffle_grouping("readings")
    with pytest.raises(StateEvolutionError, match="state of component 'windows' is stored"):
        _run(name, conf, without.create_topology(), 100_000)
    assert sorted(drop(conf, prefix, "windows")) == [
        f"{name}/$window/windows-0",
        f"{name}/windows-0",
    ]
    assert _windows(conf, name) == []
    assert get_provider(conf).namespaces(conf, f"{prefix}windows-") == []
    # The topology without it starts on what is left.
    _run(name, conf, without.create_topology(), 100_000)
