"""Recovery after a real driver crash, at each kill point of the checkpoint protocol.

Each scenario loads sentences into a fresh Redis stream, runs the Redis word count
(``tests/recovery_topologies.py``) as a child driver process with ``topology.faults`` set to
kill it at one point of transaction ``K``, checks that it died (status 137) and what it left in
Redis, then runs the same command again without the fault until the topology is idle, and checks:

- the restarted driver's first transactions are the recovery the checkpoint protocol prescribes for
  the saved checkpoint state, seen both in its JSON transaction lines and in the hooks the count
  bolt's tasks ran;
- the committed counts in Redis equal a plain Python count of the same sentences, exactly, at
  every point: before the commit decision the transaction is rolled back and its entries
  re-delivered; after it (COMMITTING or COMMITTED saved) the restarted driver acks the entries
  recorded in the transaction's saved manifest, so they are not delivered again;
- no ``$prepare`` key is left and the stream's consumer group has no pending entry.
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from recovery_topologies import child_engine, read_hooks, run_driver_process

from checkpoint import CheckPointState, TxPhase
from checkpoint.status import checkpoint_status
from examples.corpus import sentence, words
from providers import KeyValueState, StateFactory
from statefulbolts.connectors import load_stream, pending_count
from statefulbolts.state import committed_items

pytestmark = [pytest.mark.spark, pytest.mark.redis]

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGY = "tests.recovery_topologies:wordcount"
SENTENCES = 240
MAX_PENDING = 40  # sentences per transaction, at most
INTERVAL_MS = 200
KILL_TXID = 2
RUN_TIMEOUT = 150
KILLED = 137


def base_conf(redis_url: str, port: int, stream: str, hooks: Path) -> dict[str, Any]:
    return {
        "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
        "topology.state.provider.config": {"jedisPoolConfig": {"host": "127.0.0.1", "port": port}},
        "topology.state.checkpoint.interval.ms": INTERVAL_MS,
        "topology.max.spout.pending": MAX_PENDING,
        "redis.stream.url": redis_url,
        "redis.stream.key": stream,
        "recovery.hooks.file": str(hooks),
    }


def write_conf(path: Path, conf: dict[str, Any]) -> Path:
    path.write_text(json.dumps(conf), encoding="utf-8")
    return path


def run_driver(
    conf: Path,
    name: str,
    *extra: str,
    timeout: float = RUN_TIMEOUT,
    topology: str = TOPOLOGY,
    engine: str = "spark",
) -> tuple[int, list[dict[str, Any]], str]:
    """Run the CLI driver in its own process group; return (status, JSON events, stderr)."""
    cmd = [sys.executable, "-m", "statefulbolts.cli", "run", topology, "--conf", str(conf)]
    cmd += ["--name", name, "--json", "--engine", engine, *extra]
    return run_driver_process(cmd, ROOT, timeout)


def transactions(events: list[dict[str, Any]]) -> list[tuple[str, int, bool]]:
    return [(e["action"], e["txid"], e["ok"]) for e in events if e["event"] == "transaction"]


def hooks_by_task(path: Path) -> dict[int, list[tuple[Any, ...]]]:
    calls: dict[int, list[tuple[Any, ...]]] = collections.defaultdict(list)
    for line in read_hooks(path):
        calls[line["task"]].append(tuple(line["call"]))
    return dict(calls)


def committed_counts(conf: dict[str, Any], name: str) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()
    for task in range(2):
        state = StateFactory.get_state(f"{name}/count-{task}", conf)
        assert isinstance(state, KeyValueState)
        counts.update(dict(committed_items(state, conf)))  # not a killed run's prepared delta
    return counts


def expected_counts(n: int) -> collections.Counter[str]:
    counts: collections.Counter[str] = collections.Counter()
    for i in range(n):
        counts.update(words(sentence(i)))
    return counts


# What the restarted driver runs first, per kill point (K = KILL_TXID), all successful.
RECOVERY = {
    "after-prepare": [("ROLLBACK", 2), ("INITSTATE", 1), ("PREPARE", 2), ("COMMIT", 2)],
    "after-committing-saved": [("COMMIT", 2), ("INITSTATE", 2), ("PREPARE", 3)],
    "mid-commit": [("COMMIT", 2), ("INITSTATE", 2), ("PREPARE", 3)],
    "after-committed": [("INITSTATE", 2), ("PREPARE", 3)],
}
# The checkpoint state the kill leaves in Redis.
SAVED = {
    "after-prepare": CheckPointState(2, TxPhase.PREPARING),
    "after-committing-saved": CheckPointState(2, TxPhase.COMMITTING),
    "mid-commit": CheckPointState(2, TxPhase.COMMITTING),
    "after-committed": CheckPointState(2, TxPhase.COMMITTED),
}


@pytest.mark.parametrize("point", list(RECOVERY))
def test_driver_killed_then_restarted_recovers(point, redis_db, tmp_path):
    url = redis_db.url
    client = redis_db.client(decode_responses=True)
    name = f"wc-{point}"
    stream = f"sentences-{point}"
    load_stream(url, stream, (sentence(i) for i in range(SENTENCES)))
    conf = base_conf(url, redis_db.port, stream, tmp_path / "hooks-1.jsonl")
    fault = {"driver": {"point": point, "txid": KILL_TXID}}
    conf_1 = write_conf(tmp_path / "killed.json", {**conf, "topology.faults": fault})
    engine = child_engine(point, on_spark="mid-commit")  # a kill in an executor's commit

    # 1. The driver dies at the kill point.
    status, events, err = run_driver(conf_1, name, engine=engine)
    assert status == KILLED, f"driver exited {status}, not killed:\n{err[-3000:]}"
    assert f"injected driver kill at {point}" in err or point == "mid-commit"
    before = transactions(events)
    assert ("COMMIT", KILL_TXID - 1, True) in before
    assert all(txid <= KILL_TXID for _, txid, _ in before)
    saved = checkpoint_status(conf, name)
    assert saved.checkpoint == SAVED[point]
    prepared = {t.task: t.prepared_txid for t in saved.tasks}
    committed = {t.task: t.committed_txid for t in saved.tasks}
    if point == "after-prepare" or point == "after-committing-saved":
        assert prepared == {0: KILL_TXID, 1: KILL_TXID} and committed == {0: 1, 1: 1}
    elif point == "mid-commit":
        # The task that killed the driver committed K; the other one may or may not have.
        assert KILL_TXID in committed.values()
        assert all(committed[t] == KILL_TXID or prepared[t] == KILL_TXID for t in (0, 1))
    else:
        assert prepared == {0: None, 1: None} and committed == {0: KILL_TXID, 1: KILL_TXID}
    # Entries delivered to the dead driver and never acknowledged, in id order.
    held = [p["message_id"] for p in client.xpending_range(stream, name, "-", "+", SENTENCES)]
    assert held, "the killed driver held no entries; nothing was at stake"
    assert len(held) <= MAX_PENDING  # the spout reads no further ahead than it may emit

    # 2. The same command without the fault: recovery, then the rest of the stream.
    conf_2 = write_conf(
        tmp_path / "restart.json", {**conf, "recovery.hooks.file": str(tmp_path / "hooks-2.jsonl")}
    )
    status, events, err = run_driver(conf_2, name, engine=engine)
    assert status == 0, err[-3000:]
    after = transactions(events)
    expected = RECOVERY[point]
    assert after[: len(expected)] == [(a, t, True) for a, t in expected], after[:6]
    assert all(ok for _, _, ok in after)

    # The same recovery, seen by the count bolt's two tasks.
    hooks = hooks_by_task(tmp_path / "hooks-2.jsonl")
    assert set(hooks) == {0, 1}
    k = KILL_TXID
    for task, calls in hooks.items():
        if point == "after-prepare":
            assert calls[:3] == [("init_state", k - 1), ("pre_rollback",), ("init_state", k - 1)]
            assert calls[3:5] == [("init_state", k - 1), ("pre_prepare", k)]
        elif point == "after-committing-saved":
            assert calls[:3] == [("init_state", k - 1), ("pre_commit", k), ("init_state", k)]
        elif point == "mid-commit":
            # Committed before the kill or not, the task commits K (idempotently) on restart.
            assert calls[0] in (("init_state", k - 1), ("init_state", k)), calls[:3]
            assert calls[1:3] == [("pre_commit", k), ("init_state", k)]
        else:
            assert calls[0] == ("init_state", k)
            assert ("pre_rollback",) not in calls and ("pre_commit", k) not in calls
            assert [c for c in calls if c[0] == "pre_prepare"][0] == ("pre_prepare", k + 1)
        assert ("pre_rollback",) not in calls[3:], task

    # 3. The outcome in Redis.
    counts = committed_counts(conf, name)
    exact = expected_counts(SENTENCES)
    excess = counts - exact
    assert not exact - counts, "a committed count is below the exact count: data lost"
    assert not excess, f"{sum(excess.values())} words counted twice after a {point} kill"
    assert counts == exact
    assert client.keys(f"{name}/*$prepare") == []
    assert pending_count(url, stream, name) == 0


@pytest.mark.parametrize("point", ["after-committing-saved", "mid-commit"])
def test_a_driver_killed_in_its_own_commit_recovers(point, redis_db, tmp_path):
    """The count bolt has no ``pre_commit``: the driver commits the states itself, and dies
    before (``after-committing-saved``) or after the first of them (``mid-commit``: the kill
    point fires in the driver, which kills itself)."""
    topology = "tests.recovery_topologies:wordcount_driver_commit"
    url, client = redis_db.url, redis_db.client(decode_responses=True)
    name, stream = f"wcd-{point}", f"sentences-d-{point}"
    load_stream(url, stream, (sentence(i) for i in range(SENTENCES)))
    conf = base_conf(url, redis_db.port, stream, tmp_path / "hooks-1.jsonl")
    fault = {"driver": {"point": point, "txid": KILL_TXID}}
    conf_1 = write_conf(tmp_path / "killed.json", {**conf, "topology.faults": fault})

    engine = child_engine(point, on_spark="")  # the driver commits: the same on both engines
    status, events, err = run_driver(conf_1, name, topology=topology, engine=engine)
    assert status == KILLED, f"driver exited {status}, not killed:\n{err[-3000:]}"
    if point == "mid-commit":
        assert f"mid-commit of txid {KILL_TXID}" in err
    saved = checkpoint_status(conf, name)
    assert saved.checkpoint == CheckPointState(KILL_TXID, TxPhase.COMMITTING)
    committed = {t.task: t.committed_txid for t in saved.tasks}
    if point == "mid-commit":  # the first task's state committed K, in the driver
        assert committed[0] == KILL_TXID
    else:
        assert committed == {0: KILL_TXID - 1, 1: KILL_TXID - 1}
    # No COMMIT ran as tasks: no task logged a commit hook (the bolt has none).
    assert all(line["call"][0] != "pre_commit" for line in read_hooks(tmp_path / "hooks-1.jsonl"))

    conf_2 = write_conf(
        tmp_path / "restart.json", {**conf, "recovery.hooks.file": str(tmp_path / "hooks-2.jsonl")}
    )
    status, events, err = run_driver(conf_2, name, topology=topology, engine=engine)
    assert status == 0, err[-3000:]
    after = transactions(events)
    assert after[:3] == [
        ("COMMIT", KILL_TXID, True),
        ("INITSTATE", KILL_TXID, True),
        ("PREPARE", KILL_TXID + 1, True),
    ]
    assert all(ok for _, _, ok in after)
    counts = committed_counts(conf, name)
    assert counts == expected_counts(SENTENCES)
    assert client.keys(f"{name}/*$prepare") == []
    assert pending_count(url, stream, name) == 0
