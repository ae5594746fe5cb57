"""Crash recovery of a transactional topology: a real driver killed at each point, then restarted.

Each kill scenario loads words into fresh Redis streams and runs the word count of
``tests/tx_streams_topologies.py`` (Redis Streams spout -> ``split`` -> committer ``count``, every
state in Redis) as a child driver process, ``statefulbolts run ... --conf FILE`` with
``topology.faults`` set to kill it at one point of txid ``K``. It checks that the driver died
(status 137), what ``transactional_status`` says a restart will replay, and what the committers'
maps hold at that moment; then it starts the same topology again without the fault (in this
process, on the shared Spark session: a restart is a new driver over the same Redis) and checks:

- the restart commits first the txid ``currtx`` pointed at, and the counts in Redis equal a plain
  Python count of the streams, exactly (nothing lost, nothing counted twice);
- with the partitioned spout, every replayed txid's batch (the entries ``split`` got, logged by
  seq) is the batch its stored partition metas name, and the batch its first attempt emitted.

Worker crashes need no restart: a Python worker that dies in the processing phase or in the
committer is a Spark task failure; Spark runs the task again and the counts stay exact.

``STATEFULBOLTS_TX_SEED`` (default 0: K = 3, two txids in flight, four entries per stream
and batch) varies K, ``topology.max.spout.pending`` and the batch size, for loops such as
``for s in $(seq 1 20); do STATEFULBOLTS_TX_SEED=$s pytest -k during_processing ...``.
"""

from __future__ import annotations

import collections
import json
import os
import random
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import tx_streams_topologies as tc
from recovery_topologies import child_env, run_driver_process

from providers import StateFactory
from recovery.faults import KILLED_EXIT_CODE
from statefulbolts.connectors.redis import close_connections
from statefulbolts.transactional import transactional_status

pytestmark = [pytest.mark.spark, pytest.mark.redis]

ROOT = Path(__file__).resolve().parents[2]
SEED = int(os.environ.get("STATEFULBOLTS_TX_SEED", "0"))
STREAMS = ("txc:0", "txc:1", "txc:2")
PER_STREAM = 36
RUN_TIMEOUT = 150
TIMEOUT = 120
POINTS = ["during-processing", "after-processed", "mid-commit", "after-commit"]
# Points where t's processing finished before the kill: its first attempt logged its batch.
PROCESSED = {"after-processed", "mid-commit", "after-commit"}
# Points where some committer had written t: currtx is t, nothing later started its commit.
COMMITTING = {"mid-commit", "after-commit"}


@dataclass(frozen=True)
class Plan:
    """What one scenario kills and how big its batches are."""

    txid: int
    pending: int
    take: int


def plan_for(point: str, seed: int = SEED) -> Plan:
    """Seed 0: txid 3, pending 2, take 4; other seeds vary all three (data lasts 9+ txids)."""
    if seed == 0:
        return Plan(3, 2, 4)
    rng = random.Random(f"{seed}/{point}")
    return Plan(rng.randint(1, 5), rng.randint(1, 3), rng.randint(2, 4))


@pytest.fixture
def redis(redis_db: Any) -> Any:
    yield redis_db
    close_connections()


def provider_conf(server: Any, pending: int) -> dict[str, Any]:
    return {
        "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
        "topology.state.provider.config": {"redisConfig": {"url": server.url}},
        "topology.max.spout.pending": pending,
        "topology.state.checkpoint.interval.ms": 100,
    }


def run_child(
    conf: dict[str, Any], params: tc.Params, tmp: Path, engine: str
) -> tuple[int, list[Any], str]:
    """Run the child driver in its own process group; return (status, JSON events, stderr)."""
    path = tmp / "killed.json"
    path.write_text(json.dumps(conf), encoding="utf-8")
    cmd = [sys.executable, "-m", "statefulbolts.cli", "run", tc.TOPOLOGY, "--conf", str(path)]
    cmd += ["--name", "tx-killed", "--json", "--engine", engine]
    return run_driver_process(cmd, ROOT, RUN_TIMEOUT, params.env(child_env()))


def stored(conf: dict[str, Any], tid: str) -> dict[str, tuple[int, int]]:
    """Every word in the committers' maps: (the txid that last wrote it, its count)."""
    found: dict[str, tuple[int, int]] = {}
    for namespace in transactional_status(conf, tid).maps:
        for key, plain in StateFactory.get_system_state(namespace, conf):
            if isinstance(key, list | tuple) and len(key) == 1:
                found[key[0]] = (plain[0], plain[1])
    return found


def seqs_of_metas(client: Any, metas: list[dict[str, Any]]) -> list[str]:
    """The seqs of the stream entries that partition metas name."""
    seqs: list[str] = []
    for meta in metas:
        if meta["count"]:
            entries = client.xrange(meta["stream"], meta["first"], meta["last"])
            assert len(entries) == meta["count"]
            seqs += [data["seq"] for _, data in entries]
    return sorted(seqs)


def commits(metrics: dict[str, Any]) -> list[int]:
    return [t["txid"] for t in metrics["transactions"] if t["ok"] and t["action"] == "COMMIT"]


# --------------------------------------------------------------------------- driver kills
CASES = [pytest.param(p, False, id=p) for p in POINTS]
CASES.append(pytest.param("mid-commit", True, id="mid-commit-opaque"))
# The killed child drivers of these cases run on Spark, the others' on the inline engine: what
# is under test is the protocol across a real process death, and a JVM per child costs ~8 s.
ON_SPARK = {("during-processing", False), ("mid-commit", True)}


@pytest.mark.parametrize(("point", "opaque"), CASES)
def test_a_driver_killed_at_a_point_is_restarted_and_counts_exactly(
    point: str, opaque: bool, cluster: Any, redis: Any, tmp_path: Path
) -> None:
    plan = plan_for(point)
    k = plan.txid
    client = redis.client(decode_responses=True)
    data = tc.stream_words(STREAMS, PER_STREAM)
    tc.load(redis.url, data)
    tid = f"txc-{point}-{uuid.uuid4().hex[:6]}"
    params = tc.Params(tid, redis.url, STREAMS, str(tmp_path / "run-1.jsonl"), opaque, plan.take)
    conf = provider_conf(redis, plan.pending)
    fault = {"driver": {"point": point, "txid": k}}

    # 1. The driver dies at the point, in txid K.
    engine = "spark" if (point, opaque) in ON_SPARK else "inline"
    status, events, err = run_child({**conf, "topology.faults": fault}, params, tmp_path, engine)
    assert status == KILLED_EXIT_CODE, f"{plan}: driver exited {status}, not killed:\n{err[-3000:]}"
    assert point == "mid-commit" or f"injected driver kill at {point} (txid {k})" in err
    first_commits = [e["txid"] for e in events if e.get("action") == "COMMIT" and e["ok"]]
    assert first_commits == list(range(1, len(first_commits) + 1))

    # 2. What a restart will do, read from Redis: commit from currtx on, replaying K.
    before = transactional_status(conf, tid)
    current = before.current_txid
    assert current == (first_commits[-1] + 1 if first_commits else 1)
    assert k in before.replays, (plan, before)
    assert before.replays == list(range(current, current + len(before.replays)))
    assert len(before.replays) <= plan.pending
    for t in before.replays:
        assert t in before.metas  # the coordinator's meta of t: t is replayed, never re-created
    maps = stored(conf, tid)
    written = max((txid for txid, _ in maps.values()), default=0)
    committed_by = {e["task"] for e in tc.read_log(params.log, kind="commit", txid=k)}
    if point in COMMITTING:
        assert current == k
        assert written == k and committed_by  # K is in some committer's map already
        if point == "after-commit":
            assert committed_by == {0, 1}  # in every committer's map
    else:
        assert current <= k
        assert written < k and not committed_by  # processing writes no committed state
    first_batches = tc.complete_batches(params.log)
    if point in PROCESSED:
        assert k in first_batches, "the killed txid's first attempt logged no complete batch"
    if point == "after-commit":
        # K was applied once, before the kill: every word of its batch carries txid K.
        seq_words = {f"{p}:{j}": w for p, s in enumerate(STREAMS) for j, w in enumerate(data[s])}
        batch_words = {seq_words[q] for q in first_batches[k]}
        assert batch_words and {w: maps[w][0] for w in batch_words} == dict.fromkeys(batch_words, k)

    # 3. The restart: the same topology, no fault, until idle.
    restart_log = tmp_path / "run-2.jsonl"
    handle = cluster.submit_topology("tx-restarted", conf, tc.build(params.with_log(restart_log)))
    handle.await_idle(TIMEOUT)
    counts = handle.read_state("count")
    metrics = handle.metrics()
    handle.kill()
    again = commits(metrics)
    assert again[0] == current and again == list(range(current, current + len(again)))
    assert all(t["ok"] for t in metrics["transactions"]), metrics["transactions"]
    exact = tc.expected(data)
    assert not collections.Counter(exact) - collections.Counter(counts), "words lost"
    assert not collections.Counter(counts) - collections.Counter(exact), "words counted twice"
    assert counts == exact
    after = transactional_status(conf, tid)
    # Idle, the topology still polls its streams: an interval after an empty batch it starts
    # one txid (Pacing). Between await_idle and kill such probes may have committed (empty: the
    # streams hold nothing new) and one may have started, its meta stored for a restart to
    # replay; never two at once.
    assert after.current_txid >= again[-1] + 1
    assert after.replays in ([], [after.current_txid])

    if opaque:
        return
    # 4. A partitioned spout replays each txid's identical batch: the entries its stored
    # metas name, and the entries its first attempt emitted.
    # A txid whose emission had not ended has no partition metas: the restart emits it anew.
    replayed = tc.complete_batches(restart_log)
    emitted = [t for t in before.replays if any(t in m for m in before.partitions.values())]
    if plan.pending == 1 and point == "during-processing":
        # At pending 1 the emitters run inside K's processing job: a kill during it leaves
        # nothing of K stored, and the restart emits K anew (identically: nothing committed).
        assert k not in emitted
        if k in first_batches:
            assert replayed[k] == first_batches[k]
    else:
        assert k in emitted
    for t in emitted:
        metas = [m[t] for m in before.partitions.values() if t in m]
        assert len(metas) == len(STREAMS)
        assert replayed[t] == seqs_of_metas(client, metas), f"txid {t}"
        if t in first_batches:
            assert replayed[t] == first_batches[t], f"txid {t}"
    if point in PROCESSED:
        assert replayed[k] == first_batches[k] and replayed[k]


def test_an_opaque_topology_resumes_where_it_stopped(
    cluster: Any, redis: Any, tmp_path: Path
) -> None:
    # No kill at all: run to idle, stop, start again with the same transactional id.
    data = tc.stream_words(STREAMS[:2], 6)
    tc.load(redis.url, data)
    tid = f"txo-{uuid.uuid4().hex[:6]}"
    params = tc.Params(tid, redis.url, STREAMS[:2], str(tmp_path / "log.jsonl"), True, 4)
    conf = provider_conf(redis, 1)
    for run in (1, 2):
        handle = cluster.submit_topology(f"opaque-{run}", conf, tc.build(params))
        handle.await_idle(TIMEOUT)
        counts = handle.read_state("count")
        handle.kill()
        assert counts == tc.expected(data), f"after run {run}"


# --------------------------------------------------------------------------- worker crashes
@pytest.mark.parametrize(
    ("component", "at_tuple"), [("split", 3), ("count", 1)], ids=["processing", "committer"]
)
def test_a_worker_crash_is_retried_by_spark_and_counts_stay_exact(
    component: str, at_tuple: int, cluster: Any, redis: Any, tmp_path: Path
) -> None:
    data = tc.stream_words(STREAMS, 16)
    tc.load(redis.url, data)
    tid = f"txw-{component}-{uuid.uuid4().hex[:6]}"
    params = tc.Params(tid, redis.url, STREAMS, str(tmp_path / "log.jsonl"), take_per_batch=4)
    fault = {"component": component, "task": 0, "at_tuple": at_tuple, "kind": "crash"}
    conf = {
        **provider_conf(redis, 2),
        "topology.faults": {"tasks": [{**fault, "attempts": "first", "txid": 2}]},
        # A worker must die under the committer: its commit phase runs on the executors.
        **({"topology.transactional.commit.location": "executors"} if component == "count" else {}),
    }
    handle = cluster.submit_topology(tid, conf, tc.build(params))
    handle.await_idle(TIMEOUT)
    counts = handle.read_state("count")
    metrics = handle.metrics()
    handle.kill()

    # The worker died: task 0 of txid 2 was prepared in two processes and finished in one.
    prepared = tc.read_log(params.log, kind="prepare", component=component, task=0, txid=2)
    finished = "batch" if component == "split" else "commit"
    done = tc.read_log(params.log, kind=finished, component=component, task=0, txid=2)
    assert len({e["pid"] for e in prepared}) == 2, prepared
    assert len(done) == 1 and done[0]["pid"] != prepared[0]["pid"]
    assert len({e["attempt"] for e in prepared}) == 1  # one batch attempt, retried by Spark
    # ... and nothing else noticed: no batch attempt failed, each txid committed once.
    assert all(t["ok"] for t in metrics["transactions"]), metrics["transactions"]
    done_txids = commits(metrics)
    assert done_txids == list(range(1, len(done_txids) + 1))
    assert counts == tc.expected(data)
