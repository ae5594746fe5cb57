"""A transactional topology's driver killed for real, restarted, and counting exactly once.

The topology is ``tests/tx_recovery_topologies.py``'s word count (a partitioned memory spout over
a fixed corpus -> split -> count (committer) -> bucketize -> buckets), on a real redis-server.
The kill tests run it as a child driver process (``statefulbolts run ... --json``), kill it, and
run the same command again with the same transactional id until the topology is idle. They
check, from Redis and from the drivers' output:

- what the kill left: the next txid to commit (``currtx``), the txids a restart replays, the
  partition metas stored for them, and how far the committers' maps got;
- that the restarted driver resumes at ``currtx``: its first commit is ``currtx``, and every
  (txid, partition) with a stored meta is emitted again with ``emit_partition_batch`` and that
  meta, never with ``emit_partition_batch_new`` (the emitters log their calls to a file);
- the exact txid chain: the txids the drivers reported committed are 1, 2, 3, ... each once,
  and each word's stored txid is the last txid whose batch held the word;
- exact word counts and bucket counts against a plain Python count of the corpus.

``STATEFULBOLTS_TX_SEED`` (an int, 11 by default) seeds every choice: the txid of the kill points,
``topology.max.spout.pending`` of each (1: the emitters run as the first stage of the processing
job; 3: emission is a job of its own, pipelined; each seed covers both), the moment of the random
kill, where the workers crash, how far the resubmitted topology got before its kill, the demo's
kill plan, and where the kill tests' commits run (``topology.transactional.commit.location``:
"auto", the driver, where a mid-commit kill is the driver killing itself after a committer
wrote, or "executors", where it is a committer's Python worker).
"""

from __future__ import annotations

import collections
import json
import os
import random
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
import tx_recovery_topologies as tx
from recovery_topologies import child_engine
from ui_topologies import wait_for

from examples.transactional_crash import KINDS, Run, check, expected, run_child, stored_maps
from statefulbolts import cli
from statefulbolts.transactional import transactional_status

pytestmark = [pytest.mark.spark, pytest.mark.redis]

SEED = int(os.environ.get("STATEFULBOLTS_TX_SEED", "11"))


def seeded(test: str) -> random.Random:
    """A random source of its own for each test, from ``SEED``."""
    return random.Random(f"{SEED}/{test}")


KILL_TXID = seeded("kill-points").randint(2, 4)
RUN_TIMEOUT = 180
POINTS = ["during-processing", "after-processed", "mid-commit", "after-commit"]


def pending_at(point: str) -> int:
    """Half the kill points (alternating with the seed) run with pending 1, half pipelined."""
    return [1, tx.MAX_PENDING][(SEED + POINTS.index(point) + 1) % 2]


def location_at(test: str) -> str:
    """Where the commits of a kill test run: the driver ("auto") or the executors, by the seed."""
    return seeded(f"commit-location/{test}").choice(["auto", "executors"])


def redis_conf(
    server: Any, pending: int = tx.MAX_PENDING, location: str = "auto"
) -> dict[str, Any]:
    return {
        "topology.transactional.commit.location": location,
        "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
        "topology.state.provider.config": {
            "jedisPoolConfig": {"host": server.host, "port": server.port}
        },
        "topology.max.spout.pending": pending,
        "topology.state.checkpoint.interval.ms": 100,
    }


def write_conf(path: Path, conf: dict[str, Any]) -> Path:
    path.write_text(json.dumps(conf), encoding="utf-8")
    return path


def run_driver(conf: Path, name: str, err: Path, engine: str = "spark", **kill: Any) -> Run:
    """Run the child driver to its end (``kill``: as ``run_child`` takes it)."""
    command = tx.driver_command(conf, name, engine)
    return run_child(command, tx.child_env(), err, RUN_TIMEOUT, **kill)


def stored_partition_metas(status: Any) -> dict[tuple[int, int], Any]:
    """(partition, txid) -> meta, for the txids a restart replays."""
    return {
        (p, t): meta
        for p, metas in status.partitions.items()
        for t, meta in metas.items()
        if t >= status.current_txid
    }


def emitted_beyond_currtx(status: dict[str, Any]) -> bool:
    """Whether an active txid above ``currtx`` is past its emission (its metas are stored)."""
    current = status.get("current_txid")
    return current is not None and any(
        int(t) > current and a["phase"] in ("processing", "processed")
        for t, a in (status.get("active") or {}).items()
    )


def max_stored_txid(conf: dict[str, Any], tid: str) -> int:
    maps = stored_maps(conf, tid)
    return max((v[0] for m in maps.values() for v in m.values()), default=0)


def counts_through(txid: int) -> dict[str, int]:
    """The exact counts of every batch up to ``txid``."""
    rows = {p: r[: txid * tx.TAKE] for p, r in tx.data().items()}
    return expected(rows, tx.TAKE)["counts"]


def assert_resumed_from_stored_metas(status: Any, calls: list[dict[str, Any]]) -> None:
    """The restarted emitters replayed every stored meta and started nothing committed again."""
    stored = stored_partition_metas(status)
    assert [c for c in calls if c["txid"] < status.current_txid] == []
    for (p, t), meta in stored.items():
        got = [(c["call"], c["meta_in"]) for c in calls if (c["partition"], c["txid"]) == (p, t)]
        assert got, f"partition {p} of txid {t} had a stored meta and was not replayed"
        assert all(g == ("replay", meta) for g in got), (p, t, got)
    news = collections.Counter((c["partition"], c["txid"]) for c in calls if c["call"] == "new")
    assert not set(news) & set(stored)
    assert all(n == 1 for n in news.values()), news
    for t in status.replays:
        assert {c["partition"] for c in calls if c["txid"] == t} == set(range(tx.PARTITIONS))
        assert status.metas[t] == tx.PARTITIONS  # the coordinator's meta: the partition count


def assert_exact(conf: dict[str, Any], tid: str, commits: list[int]) -> dict[str, Any]:
    final = check(conf, tid, commits, tx.data(), tx.TAKE)
    assert final["counts_exact"], final.get("wrong_counts")
    assert final["buckets_exact"] and final["txids_as_planned"] and final["all_committed"]
    assert final["committed_twice"] == [] and final["exact"]
    status = transactional_status(conf, tid)
    assert status.replays == [] and status.committed_txid == status.current_txid - 1
    return final


# --------------------------------------------------------------------------- (a) kill points
@pytest.mark.parametrize("point", POINTS)
def test_a_driver_killed_at_a_kill_point_resumes_and_counts_exactly(point, redis_db, tmp_path):
    pending = pending_at(point)
    conf = redis_conf(redis_db, pending, location_at(point))
    err = tmp_path / "drivers.log"
    fault = {"driver": {"point": point, "txid": KILL_TXID}}
    killed_conf = {**conf, tx.LOG_KEY: str(tmp_path / "calls-1.jsonl"), "topology.faults": fault}

    # 1. The driver dies at the point, in txid K.
    engine = child_engine(point, on_spark="mid-commit")  # a committer task kills the driver
    first = run_driver(write_conf(tmp_path / "killed.json", killed_conf), "killed", err, engine)
    log = err.read_text(encoding="utf-8", errors="replace")
    assert first.exit_code == tx.KILLED, f"driver exited {first.exit_code}:\n{log[-3000:]}"
    if point == "mid-commit":  # a committer task of K SIGKILLed the driver
        assert f"mid-commit of txid {KILL_TXID}" in log
    else:
        assert f"injected driver kill at {point} (txid {KILL_TXID})" in log
    assert first.failed == 0
    assert first.commits == list(range(1, len(first.commits) + 1))
    assert all(t < KILL_TXID for t in first.commits)

    status = transactional_status(conf, tx.TRANSACTIONAL_ID)
    assert status.current_txid == (first.commits[-1] + 1 if first.commits else 1)
    assert KILL_TXID in status.replays
    stored = stored_partition_metas(status)
    if pending == 1 and point == "during-processing":
        # K's emitters run inside its processing job: nothing of K is stored yet, and the
        # restart emits K anew from K-1's metas (the same rows: nothing of K committed).
        assert not [pt for pt in stored if pt[1] == KILL_TXID], stored
    else:
        # K was emitted before the point: its batch is fixed by its stored metas.
        for p in range(tx.PARTITIONS):
            assert stored[(p, KILL_TXID)] == [(KILL_TXID - 1) * tx.TAKE, tx.TAKE]
    written = max_stored_txid(conf, tx.TRANSACTIONAL_ID)
    if point in ("during-processing", "after-processed"):
        assert status.current_txid <= KILL_TXID and written < KILL_TXID
    elif point == "mid-commit":
        assert status.current_txid == KILL_TXID and written == KILL_TXID
    else:  # after-commit: K's commit job succeeded, currtx did not move past it
        assert status.current_txid == KILL_TXID
        counts = {w: v[1][0] for w, v in stored_maps(conf, tx.TRANSACTIONAL_ID)["count"].items()}
        assert counts == counts_through(KILL_TXID)

    # 2. The same command without the fault, same transactional id: resume, then the rest.
    restart_conf = {**conf, tx.LOG_KEY: str(tmp_path / "calls-2.jsonl")}
    second = run_driver(write_conf(tmp_path / "restart.json", restart_conf), "restart", err, engine)
    assert second.exit_code == 0, err.read_text(errors="replace")[-3000:]
    assert second.failed == 0
    assert second.first_commit == status.current_txid
    calls = tx.read_log(tmp_path / "calls-2.jsonl", kind="emit")
    assert_resumed_from_stored_metas(status, calls)

    # 3. Each txid committed once, in order, and the counts exact.
    commits = first.commits + second.commits
    final = assert_exact(conf, tx.TRANSACTIONAL_ID, commits)
    assert commits == list(range(1, final["committed_txid"] + 1))
    assert final["commits_not_reported"] == []


# --------------------------------------------------------------------------- (b) random moment
def test_a_driver_killed_at_a_random_moment_resumes_and_counts_exactly(redis_db, tmp_path):
    pending = [1, tx.MAX_PENDING][SEED % 2]
    conf = redis_conf(redis_db, pending, location_at("random-moment"))
    err = tmp_path / "drivers.log"
    delay = seeded("random-moment").uniform(0.0, 1.5)
    killed_conf = {**conf, tx.LOG_KEY: str(tmp_path / "calls-1.jsonl")}

    first = run_driver(
        write_conf(tmp_path / "killed.json", killed_conf),
        "killed",
        err,
        kill_after_first_commit=delay,
    )
    assert first.exit_code == tx.KILLED, f"seed {SEED}: not killed ({first.exit_code})"
    status = transactional_status(conf, tx.TRANSACTIONAL_ID)
    # A commit's line can be lost with the driver only after its currtx was stored.
    assert first.commits == list(range(1, len(first.commits) + 1))
    # The last data txid D still pipelines: when it commits, txid D + pending starts, and the
    # empty txids after D drain before the topology goes quiet; so at most D + pending commit.
    assert len(first.commits) < status.current_txid <= tx.expected_data_txids() + pending + 1
    assert max_stored_txid(conf, tx.TRANSACTIONAL_ID) <= status.current_txid

    restart_conf = {**conf, tx.LOG_KEY: str(tmp_path / "calls-2.jsonl")}
    second = run_driver(write_conf(tmp_path / "restart.json", restart_conf), "restart", err)
    assert second.exit_code == 0, err.read_text(errors="replace")[-3000:]
    assert second.failed == 0
    assert second.first_commit == status.current_txid
    assert_resumed_from_stored_metas(status, tx.read_log(tmp_path / "calls-2.jsonl", kind="emit"))

    final = assert_exact(conf, tx.TRANSACTIONAL_ID, first.commits + second.commits)
    assert second.commits == list(range(status.current_txid, final["committed_txid"] + 1))
    lost = set(range(len(first.commits) + 1, status.current_txid))
    assert set(final["commits_not_reported"]) == lost and len(lost) <= 1


# --------------------------------------------------------------------------- (c) a worker dies
def test_a_python_worker_killed_mid_batch_is_retried_by_spark_and_fails_nothing(
    cluster, redis_db, tmp_path
):
    log = tmp_path / "calls.jsonl"
    rng = seeded("worker")
    # A split task gets 4 sentences of each txid with data, a count task dozens of words.
    crashes = [
        {"component": component, "task": rng.randrange(2), "at_tuple": rng.randint(1, 3),
         "kind": "crash", "txid": rng.randint(1, 6)}
        for component in ("split", "count")
    ]  # fmt: skip
    conf = {
        **redis_conf(redis_db),
        tx.LOG_KEY: str(log),
        "topology.faults": {"tasks": [{**c, "attempts": "first"} for c in crashes]},
        # A worker must die under the committer: the commit phase runs on the executors.
        "topology.transactional.commit.location": "executors",
    }
    tid = "tx-worker-crash"
    handle = cluster.submit_topology("tx-worker-crash", conf, tx.build(tid))
    handle.await_idle(RUN_TIMEOUT)
    transactions = handle.metrics()["transactions"]
    handle.kill()

    # No batch attempt failed: Spark ran the two crashed tasks again, inside their jobs.
    assert [t for t in transactions if not t["ok"]] == []
    commits = [t["txid"] for t in transactions if t["action"] == "COMMIT"]
    assert_exact(conf, tid, commits)
    assert commits == list(range(1, commits[-1] + 1))
    prepares = collections.defaultdict(list)
    for line in tx.read_log(log, kind="prepare"):
        key = (line["component"], line["task"], line["txid"])
        prepares[key].append((line["attempt"], line["spark_attempt"]))
    for crash in crashes:
        key = (crash["component"], crash["task"], crash["txid"])
        ((attempt, _),) = {(a, 0) for a, _ in prepares[key]}  # one batch attempt of the txid
        assert sorted(prepares.pop(key)) == [(attempt, 0), (attempt, 1)], key
    # Every other task ran once, on its first Spark attempt.
    assert {s for runs in prepares.values() for _, s in runs} == {0}
    assert all(len(runs) == 1 for runs in prepares.values())


# --------------------------------------------------------------------------- (d) kill, resubmit
def test_a_killed_topology_started_again_resumes_at_currtx_replaying_stored_metas(
    cluster, redis_db, tmp_path, capsys
):
    conf = redis_conf(redis_db)
    tid = "tx-resume"
    logs = [tmp_path / f"calls-{i}.jsonl" for i in (1, 2, 3)]
    enough = seeded("resume").randint(2, 6)  # commits before the kill, at least
    committed = threading.Event()

    def on_transaction(info: Any) -> None:
        if info.ok and info.txid >= enough:
            committed.set()

    # txid enough + 1 cannot commit before the kill: its processing is held until the kill is
    # under way, while the txids after it emit (their partition metas are stored) and process.
    # The restart must replay them, and enough + 1, from those metas.
    release = tmp_path / "release"
    hold = {"txid": enough + 1, "until": str(release)}
    first = cluster.submit_topology(
        "tx-resume-1", {**conf, tx.LOG_KEY: str(logs[0]), tx.HOLD_KEY: hold}, tx.build(tid),
        on_transaction=on_transaction,
    )  # fmt: skip
    assert committed.wait(RUN_TIMEOUT), f"{enough} commits did not come"
    wait_for(lambda: emitted_beyond_currtx(first.status()), RUN_TIMEOUT, "a txid past currtx")
    first.runner.kill(timeout=0)  # the loop stops after its step; it never takes the held txid
    release.touch()  # the held job ends; the loop's shutdown waits for it
    first.kill()
    commits_1 = [t["txid"] for t in first.metrics()["transactions"] if t["ok"]]

    status = transactional_status(conf, tid)
    assert commits_1 == list(range(1, status.current_txid))
    assert status.current_txid == enough + 1 and status.replays, status.as_dict()
    assert status.current_txid + len(status.replays) <= tx.expected_data_txids()
    stored = stored_partition_metas(status)
    assert stored, "the kill left no partition meta to replay"
    # The CLI shows the same.
    conf_file = write_conf(tmp_path / "conf.json", conf)
    assert cli.main(["transactional", "status", "--conf", str(conf_file), "--id", tid]) == 0
    assert f"on restart, replays: {status.replays[0]} (meta 4)" in capsys.readouterr().out

    # Started again in this process with the same transactional id.
    second = cluster.submit_topology(
        "tx-resume-2", {**conf, tx.LOG_KEY: str(logs[1])}, tx.build(tid)
    )
    second.await_idle(RUN_TIMEOUT)
    commits_2 = [t["txid"] for t in second.metrics()["transactions"] if t["ok"]]
    second.kill()
    assert commits_2[0] == status.current_txid
    assert_resumed_from_stored_metas(status, tx.read_log(logs[1], kind="emit"))
    final = assert_exact(conf, tid, commits_1 + commits_2)
    assert commits_1 + commits_2 == list(range(1, final["committed_txid"] + 1))

    # A new transactional id starts at txid 1, from the partitions' beginnings.
    one_commit = threading.Event()
    new = cluster.submit_topology(
        "tx-resume-new", {**conf, tx.LOG_KEY: str(logs[2])}, tx.build(f"{tid}-new"),
        on_transaction=lambda info: one_commit.set() if info.ok else None,
    )  # fmt: skip
    assert one_commit.wait(RUN_TIMEOUT)
    new.kill()
    assert [t["txid"] for t in new.metrics()["transactions"]][0] == 1
    firsts = [c for c in tx.read_log(logs[2], kind="emit") if c["txid"] == 1]
    assert sorted((c["call"], c["partition"], c["meta_in"]) for c in firsts) == [
        ("new", p, None) for p in range(tx.PARTITIONS)
    ]
    assert transactional_status(conf, f"{tid}-new").committed_txid >= 1
    assert transactional_status(conf, tid).current_txid == final["committed_txid"] + 1


# --------------------------------------------------------------------------- (e) the demo
def test_the_crash_demo_reports_exact_counts(tmp_path):
    cmd = [sys.executable, "-m", "examples.transactional_crash", "--kills", "2"]
    cmd += ["--seed", str(SEED), "--json"]
    proc = subprocess.run(
        cmd, cwd=tx.ROOT, env=tx.child_env(), capture_output=True, text=True, timeout=600,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:] + proc.stdout[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["exact"] is True and doc["seed"] == SEED
    final = doc["final"]
    assert final["counts_exact"] and final["buckets_exact"] and final["txids_as_planned"]
    assert final["committed_twice"] == [] and final["counted"] == final["words"]
    kinds = [k["kind"] for k in doc["kills"]]
    assert len(kinds) == 2 and len(set(kinds)) == 2 and set(kinds) <= set(KINDS)
    for kill in doc["kills"]:
        assert kill["exit_code"] == tx.KILLED
        assert kill["status"]["current_txid"] >= 1 and "restart" in kill
        if kill["kind"].startswith("worker"):
            assert kill["worker_crashes"] >= 1 and kill["failed_attempts"] == 0
