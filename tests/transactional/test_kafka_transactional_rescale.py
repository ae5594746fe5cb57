"""The transactional Kafka spouts restarted with another spout parallelism, up and down.

A transactional spout's progress is kept per partition under the transactional id, never per
emitter task (docs/kafka.md, "Partitions"; docs/protocol/transactional.md, §4): emitter task
``i`` of ``k`` reads the partitions ``p`` with ``p % k == i`` of whatever ``k`` this run has.
So a topology stopped and started again with its spout's parallelism changed (2 -> 3 -> 1 at
seed 0, other seeds another up-and-down sequence of 1-4 tasks, on a topic of 3-4 partitions)
must read on exactly: every record of the topic counted once (each sentence carries a word of
its own, ``ktx_topologies.Written``), each txid committed once and in order, and the stored
metas ending at each partition's end. More records are written to the topic while no driver
runs.

Two ways to stop a run, both leaving txids started and not committed, which the next run,
with its other parallelism, replays first (from their stored offset ranges, for the
partitioned spout; from the last committed offsets, for the opaque one):

- **stopped** (in this process, on the shared Spark session): task 0 of ``split`` is held in
  txid ``H`` (a ``topology.faults`` "hold") while the txids after it emit, then the topology is
  killed; ``H`` and every txid started after it are left to replay;
- **killed** (a child driver, ``statefulbolts run tests.ktx_topologies:topology --engine
  inline``): ``topology.faults`` kills it at a seeded kill point of the transactional protocol
  (the crash example's points) in a seeded txid, the first run and the restarted one alike.

The last run (parallelism ``k3``) goes until idle and is checked. Each run's emitter task
``i`` of ``k`` must have read exactly the partitions ``p % k == i`` (the emitters log it).
``STATEFULBOLTS_KAFKA_TX_SEEDS=25`` runs seeds 0-24 (``a-b``: a to b), as for the Spark crash
tests; by default, seed 0 alone, with both spouts.
"""

from __future__ import annotations

import collections
import json
import random
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kafka_fixtures import KafkaBroker
from ktx_topologies import LOG_KEY, Params, Written, build, child_command, positions, read_by, seeds
from recovery_topologies import run_driver_process
from ui_topologies import wait_for

from examples import kafka_transactional_crash as demo
from recovery.faults import KILLED_EXIT_CODE
from statefulbolts import LocalCluster
from statefulbolts.transactional import transactional_status

# The killed runs' child drivers run a topology (inline): marked spark as such a process is.
pytestmark = [pytest.mark.spark, pytest.mark.redis, pytest.mark.kafka]

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 240
POINTS = ["during-processing", "after-processed", "mid-commit", "after-commit"]
# Up and down (or down and up) through 1-4 emitter tasks.
SEQUENCES = [(k1, k2, k3) for k1 in range(1, 5) for k2 in range(1, 5) for k3 in range(1, 5)
             if (k2 - k1) * (k3 - k2) < 0]  # fmt: skip


@dataclass(frozen=True)
class RescalePlan:
    """One seed's topic, batches and spout parallelisms, and where its runs stop."""

    partitions: int
    take: int
    records: int  # per partition at first: at least 6 full batches
    pending: int
    parallelism: tuple[int, int, int]
    stops: tuple[int, int]  # stopped: txids held, the second after the restart's currtx
    points: tuple[str, str]  # killed: the kill points of the first and the restarted run
    seed: int

    @classmethod
    def of(cls, seed: int, opaque: bool, how: str) -> RescalePlan:
        """Seed 0: 4 partitions, 2 -> 3 -> 1 emitter tasks, pending 3; others seeded."""
        rng = random.Random(f"ktx-rescale/{seed}/{opaque}/{how}")
        take = rng.randint(2, 3)
        if seed == 0:
            partitions, pending, parallelism = 4, 3, (2, 3, 1)
        else:
            partitions, pending = rng.randint(3, 4), rng.randint(1, 3)
            parallelism = rng.choice(SEQUENCES)
        points = (rng.choice(POINTS), rng.choice(POINTS))
        records = take * rng.randint(6, 7)
        return cls(partitions, take, records, pending, parallelism,
                   (rng.randint(2, 3), rng.randint(1, 2)), points, seed)  # fmt: skip

    def more(self, written: Written, run: int) -> None:
        """Records written while no driver runs: 0-5 to each partition, 4+ to partition 0."""
        rng = random.Random(f"ktx-rescale/more/{self.seed}/{run}")
        for p in range(self.partitions):
            n = rng.randint(4, 8) if p == 0 else rng.randint(0, 5)
            if n:
                written.write(p, f"{self.seed}/{run}/{p}", n)


def _setup(
    broker: KafkaBroker, plan: RescalePlan, opaque: bool, name: str
) -> tuple[Written, Params]:
    topic = broker.create_topic(broker.new_topic_name(name), plan.partitions)
    written = Written(broker.bootstrap, topic)
    written.fill(plan.partitions, plan.records, plan.seed)
    tid = f"{name}-{uuid.uuid4().hex[:8]}"
    return written, Params(tid, broker.bootstrap, topic, opaque, plan.take, plan.parallelism[0])


def _commits(transactions: list[dict[str, Any]]) -> list[int]:
    return [t["txid"] for t in transactions if t["action"] == "COMMIT" and t["ok"]]


def _read_by_its_tasks(log: Path, params: Params, partitions: int, committed: bool) -> None:
    """The run's emitter task i of k read the partitions p with p % k == i: every partition,
    in a run that committed a txid (each txid emits all of them); some, in one killed first.
    """
    k = params.spout_parallelism
    counts, pairs = read_by(log)
    want = {(p, p % k) for p in range(partitions)}
    if committed:
        assert (counts, pairs) == ({k}, want), (log, k)
    else:
        assert counts <= {k} and pairs <= want, (log, k)


def _last_run(
    cluster: Any, params: Params, conf: dict[str, Any], written: Written, tmp: Path
) -> tuple[list[int], dict[str, Any]]:
    """The last run, until idle: its commits; checks counts and positions."""
    log = tmp / "last.jsonl"
    handle = cluster.submit_topology("ktx-rescaled", {**conf, LOG_KEY: str(log)}, build(params))
    try:
        handle.await_idle(TIMEOUT)
        counts = handle.read_state("count")
        metrics = handle.metrics()
    finally:
        handle.kill()
    assert all(t["ok"] for t in metrics["transactions"]), metrics["transactions"]
    assert metrics["errors"] == []  # no gap: nothing was skipped
    assert {w: n for w, n in counts.items() if n} == written.counts()
    assert positions(conf, params.transactional_id) == written.ends()
    commits = _commits(metrics["transactions"])
    _read_by_its_tasks(log, params, len(written.sentences), bool(commits))
    return commits, metrics


def _left_to_replay(conf: dict[str, Any], tid: str, pending: int) -> list[int]:
    """The txids a restart replays, contiguous from ``currtx``; at most ``pending``."""
    status = transactional_status(conf, tid)
    replays = status.replays
    assert replays == list(range(status.current_txid, status.current_txid + len(replays)))
    assert len(replays) <= pending
    return replays


# --------------------------------------------------------------------------- stopped
def _emitted_past(handle: Any, held: int) -> bool:
    """Whether a txid after the held one is past its emission (its metas are stored)."""
    active = handle.status().get("active") or {}
    return any(int(t) > held and a["phase"] in ("processing", "processed")
               for t, a in active.items())  # fmt: skip


def _stopped_run(
    cluster: Any, params: Params, conf: dict[str, Any], plan: RescalePlan, held: int, tmp: Path
) -> list[int]:
    """Run until txid ``held`` is held in ``split`` (and, with pending > 1, a later txid has
    emitted), then kill the topology: its commits (every txid before ``held``)."""
    marker, log = tmp / f"held-{held}", tmp / f"stopped-{held}.jsonl"
    hold = {"component": "split", "task": 0, "at_tuple": 0, "kind": "hold",
            "attempts": "every", "txid": held, "marker": str(marker)}  # fmt: skip
    conf = {**conf, "topology.faults": {"tasks": [hold]}, LOG_KEY: str(log)}
    handle = cluster.submit_topology(f"ktx-stopped-{held}", conf, build(params))
    try:
        wait_for(marker.exists, TIMEOUT, f"split to hold txid {held}")
        if plan.pending > 1:
            wait_for(lambda: _emitted_past(handle, held), TIMEOUT, f"a txid after {held}")
        wait_for(lambda: handle.status()["current_txid"] == held, TIMEOUT, f"commit {held - 1}")
        # The loop ends after its step and cancels the held job: the held txid never ends.
        handle.runner.kill(timeout=0)
        wait_for(lambda: handle.runner.done, TIMEOUT, "the driver loop to end")
    finally:
        Path(f"{marker}.release").touch()
        handle.kill()
    commits = _commits(handle.metrics()["transactions"])
    _read_by_its_tasks(log, params, plan.partitions, bool(commits))
    return commits


@pytest.mark.parametrize("opaque", [False, True], ids=["partitioned", "opaque"])
@pytest.mark.parametrize("seed", seeds(1))
def test_a_stopped_kafka_topology_restarted_with_another_spout_parallelism_reads_on_exactly(
    seed: int,
    opaque: bool,
    cluster: Any,
    kafka_broker: KafkaBroker,
    redis_db: Any,
    tmp_path: Path,
) -> None:
    plan = RescalePlan.of(seed, opaque, "stopped")
    written, params = _setup(kafka_broker, plan, opaque, "ktx-stop")
    tid = params.transactional_id
    conf = demo.provider_conf(redis_db.url, plan.pending)
    _, k2, k3 = plan.parallelism

    held = plan.stops[0]
    commits = _stopped_run(cluster, params, conf, plan, held, tmp_path)
    assert commits == list(range(1, held)), plan
    replays = _left_to_replay(conf, tid, plan.pending)
    assert replays[0] == held and (plan.pending == 1 or len(replays) > 1), (plan, replays)
    plan.more(written, 1)

    held = held + plan.stops[1]  # the restart replays, and commits, the txids before this one
    again = _stopped_run(cluster, _with(params, k2), conf, plan, held, tmp_path)
    assert again == list(range(commits[-1] + 1, held)), plan
    commits += again
    _left_to_replay(conf, tid, plan.pending)
    plan.more(written, 2)

    last, _ = _last_run(cluster, _with(params, k3), conf, written, tmp_path)
    assert last[0] == held and last == list(range(held, held + len(last))), (plan, last)


def _with(params: Params, parallelism: int) -> Params:
    return Params(**{**params.__dict__, "spout_parallelism": parallelism})


# --------------------------------------------------------------------------- killed
def _killed_run(
    params: Params, conf: dict[str, Any], plan: RescalePlan, txid: int, tmp: Path, run: int
) -> list[int]:
    """A child driver killed at ``point`` of ``txid``: the commits it reported."""
    path, log = tmp / f"killed-{run}.json", tmp / f"killed-{run}.jsonl"
    point, partitions = plan.points[run - 1], plan.partitions
    fault = {"driver": {"point": point, "txid": txid}}
    conf = {**conf, "topology.faults": fault, LOG_KEY: str(log)}
    path.write_text(json.dumps(conf), encoding="utf-8")
    cmd = child_command(path, f"ktx-killed-{run}")
    status, events, err = run_driver_process(cmd, ROOT, TIMEOUT, params.env())
    assert status == KILLED_EXIT_CODE, f"run {run}: exited {status}, not killed:\n{err[-3000:]}"
    assert point == "mid-commit" or f"injected driver kill at {point} (txid {txid})" in err
    commits = [e["txid"] for e in events if e.get("action") == "COMMIT" and e["ok"]]
    _read_by_its_tasks(log, params, partitions, bool(commits))
    return commits


@pytest.mark.parametrize("opaque", [False, True], ids=["partitioned", "opaque"])
@pytest.mark.parametrize("seed", seeds(1))
def test_a_killed_kafka_driver_restarted_with_another_spout_parallelism_reads_on_exactly(
    seed: int,
    opaque: bool,
    kafka_broker: KafkaBroker,
    redis_db: Any,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    plan = RescalePlan.of(seed, opaque, "killed")
    written, params = _setup(kafka_broker, plan, opaque, "ktx-kill")
    tid = params.transactional_id
    conf = demo.provider_conf(redis_db.url, plan.pending)
    _, k2, k3 = plan.parallelism
    rng = random.Random(f"ktx-rescale/kill/{seed}/{opaque}")

    # 1. The first driver (k1 emitter tasks) dies at a point of txid 2-4 (data lasts 6+).
    first = rng.randint(2, 4)
    commits = _killed_run(params, conf, plan, first, tmp_path, 1)
    current = transactional_status(conf, tid).current_txid
    assert commits == list(range(1, current)) and current <= first, (plan, commits)
    assert first in _left_to_replay(conf, tid, plan.pending), plan
    plan.more(written, 1)

    # 2. Restarted with k2 tasks, it dies at a point of a txid at or after its currtx.
    second = current + rng.randint(0, 2)
    commits += _killed_run(_with(params, k2), conf, plan, second, tmp_path, 2)
    current = transactional_status(conf, tid).current_txid
    assert commits == list(range(1, current)) and current <= second, (plan, commits)
    _left_to_replay(conf, tid, plan.pending)
    plan.more(written, 2)

    # 3. With k3 tasks, until idle (in this process, on the inline engine).
    cluster = LocalCluster(engine="inline")
    request.addfinalizer(cluster.shutdown)
    last, _ = _last_run(cluster, _with(params, k3), conf, written, tmp_path)
    assert last[0] == current, (plan, last)
    every = commits + last
    assert every == list(range(1, len(every) + 1)), (plan, every)
    assert not [t for t, n in collections.Counter(every).items() if n > 1]
