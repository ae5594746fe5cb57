"""End to end on local Spark: every grouping, named streams, and bolts with several inputs."""

from __future__ import annotations

import collections
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import topologies as topo

pytestmark = pytest.mark.spark

CONF = {"topology.state.checkpoint.interval.ms": 100}
TIMEOUT = 60

ROWS = 90
BURST = 30
TASKS = 3


@dataclass
class GroupingRun:
    name: str
    states: dict[str, dict[Any, Any]]
    transactions: list[tuple[str | None, int, bool]]
    record: topo.SpoutRecord


@pytest.fixture(scope="module")
def grouping_run(spark: Any) -> Iterator[GroupingRun]:
    """One topology with a stateful tally per grouping, fed three bursts of ``(n, word)`` rows."""
    from statefulbolts import LocalCluster

    name = topo.new_key("groupings")
    cluster = LocalCluster(spark=spark)
    try:
        handle = cluster.submit_topology(name, CONF, topo.every_grouping(name, ROWS, BURST, TASKS))
        handle.await_idle(TIMEOUT)
        states = {g: handle.read_state(f"g_{g}") for g in topo.GROUPINGS}
        run = GroupingRun(name, states, topo.transactions(handle), topo.record(name))
        handle.kill()
        yield run
    finally:
        cluster.shutdown()


def _per_task(state: dict[Any, Any]) -> dict[int, dict[str, int]]:
    """``{"<task>|<value>": count}`` as ``{task: {value: count}}``."""
    out: dict[int, dict[str, int]] = collections.defaultdict(dict)
    for (task, value), count in topo.split_keys(state, 1):
        out[int(task)][value] = count
    return dict(out)


ALL_N = {str(i) for i in range(ROWS)}


def _exactly_once_overall(per_task: dict[int, dict[str, int]]) -> None:
    seen: collections.Counter[str] = collections.Counter()
    for values in per_task.values():
        for value, count in values.items():
            seen[value] += count
    assert seen == collections.Counter(ALL_N)


def test_grouping_run_acked_every_row_once_over_three_transactions(
    grouping_run: GroupingRun,
) -> None:
    rec = grouping_run.record
    assert rec.emits == collections.Counter(range(ROWS))
    assert rec.acks == collections.Counter(range(ROWS))
    assert rec.fails == collections.Counter()
    bursts = ROWS // BURST
    assert grouping_run.transactions == [("INITSTATE", -1, True)] + [
        (action, t, True) for t in range(bursts) for action in ("PREPARE", "COMMIT")
    ]


def test_shuffle_spreads_over_tasks_and_total_is_exact(grouping_run: GroupingRun) -> None:
    per_task = _per_task(grouping_run.states["shuffle"])
    _exactly_once_overall(per_task)
    assert set(per_task) == set(range(TASKS))
    assert all(len(values) >= ROWS // (2 * TASKS) for values in per_task.values()), {
        t: len(v) for t, v in per_task.items()
    }


def test_fields_same_key_always_same_task(grouping_run: GroupingRun) -> None:
    per_task = _per_task(grouping_run.states["fields"])
    tasks_of: dict[str, set[int]] = collections.defaultdict(set)
    for task, values in per_task.items():
        for word in values:
            tasks_of[word].add(task)
    # Every word in exactly one task, over three transactions (three sets of Spark tasks).
    assert {w: len(ts) for w, ts in tasks_of.items()} == {w: 1 for w in topo.WORDS}
    counts = {word: count for values in per_task.values() for word, count in values.items()}
    assert counts == {w: ROWS // len(topo.WORDS) for w in topo.WORDS}
    assert len(per_task) > 1  # the keys did spread


def test_all_grouping_every_task_gets_every_tuple(grouping_run: GroupingRun) -> None:
    per_task = _per_task(grouping_run.states["all"])
    assert per_task == {t: dict.fromkeys(ALL_N, 1) for t in range(TASKS)}


def test_global_grouping_only_task_zero(grouping_run: GroupingRun) -> None:
    per_task = _per_task(grouping_run.states["global"])
    assert per_task == {0: dict.fromkeys(ALL_N, 1)}


@pytest.mark.parametrize("grouping", ["none", "local_or_shuffle"])
def test_none_and_local_or_shuffle_spread_and_exact(
    grouping_run: GroupingRun, grouping: str
) -> None:
    per_task = _per_task(grouping_run.states[grouping])
    _exactly_once_overall(per_task)
    assert len(per_task) > 1


def test_named_streams(cluster: Any) -> None:
    n = 40
    name = topo.new_key("streams")
    handle = cluster.submit_topology(name, CONF, topo.named_streams(name, n))
    try:
        handle.await_idle(TIMEOUT)
        lefts = handle.read_state("lefts")
        lows = handle.read_state("lows")
        highs = handle.read_state("highs")
        txs = topo.transactions(handle)
    finally:
        handle.kill()

    # Index i goes out on "left" when even, on "right" when odd; "right" splits at n // 2.
    assert lefts == {f"left|{i}": 1 for i in range(0, n, 2)}
    assert lows == {f"low|{i}": 1 for i in range(1, n // 2, 2)}
    assert highs == {f"high|{i}": 1 for i in range(n // 2 + 1, n, 2)}
    rec = topo.record(name)
    assert rec.acks == collections.Counter(range(n))
    assert rec.fails == collections.Counter()
    assert all(ok for _, _, ok in txs)


def _prepares(state: dict[Any, Any]) -> dict[tuple[int, int], int]:
    """``pp|<task>|<txid>`` counters as ``{(task, txid): count}``."""
    out = {}
    for key, value in state.items():
        if isinstance(key, str) and key.startswith("pp|"):
            _, task, txid = key.split("|")
            out[(int(task), int(txid))] = value
    return out


def _committed_txids(txs: list[tuple[str | None, int, bool]]) -> list[int]:
    assert all(ok for _, _, ok in txs), txs
    return [txid for action, txid, _ in txs if action == "COMMIT"]


def test_bolt_fed_by_two_spouts(cluster: Any) -> None:
    left = [topo.WORDS[i % 15] for i in range(45)]
    right = [topo.WORDS[(3 * i) % 15] for i in range(40)]
    name = topo.new_key("two-spouts")
    handle = cluster.submit_topology(name, CONF, topo.two_spouts(name, left, right))
    try:
        handle.await_idle(TIMEOUT)
        state = handle.read_state("merge")
        txs = topo.transactions(handle)
    finally:
        handle.kill()

    words = {k: v for k, v in state.items() if not str(k).startswith("pp|")}
    assert words == dict(collections.Counter(left + right))
    for side, values in (("left", left), ("right", right)):
        rec = topo.record(f"{name}-{side}")
        assert rec.opened == (1 if side == "left" else 2)
        assert rec.acks == collections.Counter(range(len(values)))
        assert rec.fails == collections.Counter()
    # Both spouts share one $checkpointspout input: each task ran each PREPARE exactly once.
    commits = _committed_txids(txs)
    assert _prepares(state) == {(task, t): 1 for task in range(2) for t in commits}


def test_bolt_fed_by_spout_and_bolt_waits_for_every_checkpoint_input(cluster: Any) -> None:
    n = 60
    name = topo.new_key("spout-and-bolt")
    topology = topo.spout_and_bolt(name, n)
    handle = cluster.submit_topology(name, CONF, topology)
    try:
        handle.await_idle(TIMEOUT)
        state = handle.read_state("join")
        txs = topo.transactions(handle)
    finally:
        handle.kill()

    # "join" takes $checkpoint from $checkpointspout (1 task) and from "relay" (3 tasks).
    cp_inputs = {
        i.source.component_id
        for i in topology.inputs("join")
        if i.source.stream_id == "$checkpoint"
    }
    assert cp_inputs == {"$checkpointspout", "relay"}

    data = {k: v for k, v in state.items() if not str(k).startswith("pp|")}
    assert data == {f"{src}|{i}": 1 for src in ("src", "relay") for i in range(n)}
    commits = _committed_txids(txs)
    assert commits == [0, 1, 2]  # three bursts of 20
    # The barrier fired once per transaction per task, after all four input tasks delivered.
    assert _prepares(state) == {(task, t): 1 for task in range(2) for t in commits}
    rec = topo.record(name)
    assert rec.acks == collections.Counter(range(n))
    assert rec.fails == collections.Counter()


def test_stateful_bolt_feeding_stateful_bolt(cluster: Any) -> None:
    n = 40
    name = topo.new_key("chain")
    handle = cluster.submit_topology(name, CONF, topo.stateful_chain(name, n))
    try:
        handle.await_idle(TIMEOUT)
        first = handle.read_state("first")
        second = handle.read_state("second")
        txs = topo.transactions(handle)
    finally:
        handle.kill()

    commits = _committed_txids(txs)
    assert commits == [0, 1]  # two bursts
    for state, tasks in ((first, 2), (second, 3)):
        data = {k: v for k, v in state.items() if not str(k).startswith("pp|")}
        assert data == dict.fromkeys(range(n), 1)
        assert _prepares(state) == {(task, t): 1 for task in range(tasks) for t in commits}
    rec = topo.record(name)
    assert rec.acks == collections.Counter(range(n))
    assert rec.fails == collections.Counter()
