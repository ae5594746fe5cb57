"""End to end on local Spark: the checkpoint protocol as a stateful bolt and a spout see it."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import pytest
import topologies as topo

pytestmark = pytest.mark.spark

CONF = {"topology.state.checkpoint.interval.ms": 100}
TIMEOUT = 60

N = 18
BURST = 6
TASKS = 2
TXIDS = list(range(N // BURST))


def _jobs(lines: list[str]) -> list[list[str]]:
    """A task's hook log cut into task lives: each starts with ``prepare``."""
    jobs: list[list[str]] = []
    for line in lines:
        if line == "prepare":
            jobs.append([])
        assert jobs, f"hook before the first prepare: {line!r}"
        jobs[-1].append(line)
    return jobs


def test_hooks_in_order_across_transactions(cluster: Any, tmp_path: Path) -> None:
    name = topo.new_key("hooks")
    rec = topo.record(name)
    acks_at: list[tuple[str, int, int]] = []

    def on_transaction(info: Any) -> None:
        acks_at.append((info.action, info.txid, sum(rec.acks.values())))

    handle = cluster.submit_topology(
        name,
        CONF,
        topo.hooks(name, N, BURST, str(tmp_path), TASKS),
        on_transaction=on_transaction,
    )
    try:
        handle.await_idle(TIMEOUT)
        state = handle.read_state("hooks")
        txs = topo.transactions(handle)
    finally:
        handle.kill()

    # One burst per transaction: the spout sends the next burst only once the last was acked.
    assert txs == [("INITSTATE", -1, True)] + [
        (action, t, True) for t in TXIDS for action in ("PREPARE", "COMMIT")
    ]
    # Spout acks are deferred to COMMIT: none after PREPARE(t), the whole burst after COMMIT(t).
    assert acks_at == [("INITSTATE", -1, 0)] + [
        (action, t, BURST * (t + 1 if action == "COMMIT" else t))
        for t in TXIDS
        for action in ("PREPARE", "COMMIT")
    ]
    assert rec.acks == collections.Counter(range(N))
    assert rec.fails == collections.Counter()

    task_of: dict[int, list[int]] = collections.defaultdict(list)
    for task in range(TASKS):
        lines = (tmp_path / f"hooks-{task}.log").read_text(encoding="utf-8").splitlines()
        jobs = _jobs(lines)
        # INITSTATE(-1), then a PREPARE and a COMMIT task life per txid.
        assert len(jobs) == 1 + 2 * len(TXIDS), lines
        assert jobs[0] == ["prepare", "init_state 0", "cleanup"]
        done = 0
        for t in TXIDS:
            prepare_job, commit_job = jobs[1 + 2 * t], jobs[2 + 2 * t]
            # PREPARE(t): state restored to the last commit, the burst, then pre_prepare(t).
            assert prepare_job[:2] == ["prepare", f"init_state {done}"], prepare_job
            assert prepare_job[-2:] == [f"pre_prepare {t}", "cleanup"], prepare_job
            executes = prepare_job[2:-2]
            assert all(line.startswith("execute ") for line in executes), prepare_job
            values = [int(line.split()[1]) for line in executes]
            assert values == sorted(values)  # one source task: its emit order
            assert all(BURST * t <= v < BURST * (t + 1) for v in values), (t, values)
            for v in values:
                task_of[v].append(task)
            done += len(values)
            # COMMIT(t): a fresh task life that only commits.
            assert len(commit_job) == 4, commit_job
            assert commit_job[0] == "prepare"
            assert commit_job[1].startswith("init_state ")
            assert commit_job[2:] == [f"pre_commit {t}", "cleanup"]
        assert all("pre_rollback" not in line for line in lines)
    # Every tuple executed once, by one task, and shuffle used both tasks.
    assert {v: len(ts) for v, ts in task_of.items()} == dict.fromkeys(range(N), 1)
    assert {ts[0] for ts in task_of.values()} == set(range(TASKS))
    assert {k: v for k, v in state.items() if k != "count"} == dict.fromkeys(range(N), 1)


def test_state_images_committed_after_each_commit(cluster: Any) -> None:
    """After COMMIT(t), every task's state is committed at t and holds no prepared data."""
    name = topo.new_key("images")
    images: list[tuple[str, int, list[tuple[int | None, int | None]]]] = []

    def on_transaction(info: Any) -> None:
        images.append((info.action, info.txid, [topo.image(name, "sink", t) for t in range(3)]))

    topology = topo.direct_into(name, 30, topo.Tally(), burst=10, parallelism=3)
    handle = cluster.submit_topology(name, CONF, topology, on_transaction=on_transaction)
    try:
        handle.await_idle(TIMEOUT)
        state = handle.read_state("sink")
    finally:
        handle.kill()

    assert state == dict.fromkeys(range(30), 1)
    expected = [("INITSTATE", -1, [(None, None)] * 3)]
    for t in range(3):
        expected.append(("PREPARE", t, [(t - 1 if t else None, t)] * 3))
        expected.append(("COMMIT", t, [(t, None)] * 3))
    assert images == expected
