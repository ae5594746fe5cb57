"""A transactional driver killed while it dead-letters: the replayed batch is identical, minus it.

The child driver runs ``deadletter_topologies.tx_words`` (a partitioned memory spout of three
partitions of eight sentences, two per batch, one sentence poisoned: txid 3 holds it) on a real
redis-server, and is killed for real at a dead-letter point of ``topology.faults``, in the
attempt of txid 3 that dead-letters the poisoned sentence:

- ``deadletter-decided``: nothing written yet (the restart fails txid 3 twice again);
- ``deadletter-recorded``: its record committed, txid 3's removal not stored (the restart
  fails txid 3 once: a tuple whose record is held is isolated at its first failure);
- ``deadletter-excluded``: the removal stored, txid 3 not emitted again (the restart never
  emits it).

The same command then runs with the same transactional id until the topology is idle. The
split bolt logs every sentence it executes with its txid and attempt, so the test sees what
each attempt of txid 3 held: every attempt after the restart holds exactly the sentences of the
first attempt before it, minus the poisoned one. Counts are exact against a plain Python count
without that sentence; the store holds exactly one record; nothing is left to replay.

``STATEFULBOLTS_DL_SEED`` (3 by default) picks ``topology.max.spout.pending`` (1 or 3) per kill
point and where the commits run.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path
from typing import Any

import deadletter_topologies as dl
import pytest
import tx_recovery_topologies as tx
from recovery_topologies import run_driver_process

from statefulbolts.deadletter import (
    BatchOrigin,
    DeadLetterStore,
    LetterState,
)
from statefulbolts.state import read_state
from statefulbolts.transactional import transactional_status
from statefulbolts.transactional._lineage import lineage

pytestmark = [pytest.mark.spark, pytest.mark.redis]

ROOT = Path(__file__).resolve().parents[2]
SEED = int(os.environ.get("STATEFULBOLTS_DL_SEED", "3"))
RUN_TIMEOUT = 180
KILLED = 137
TID = dl.TRANSACTIONAL_ID
POISON_TXID = dl.TX_POISONED[1] // dl.TX_TAKE + 1


def _conf(redis_db: Any, rng: random.Random, log: Path) -> dict[str, Any]:
    return {
        "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
        "topology.state.provider.config": {
            "jedisPoolConfig": {"host": "127.0.0.1", "port": redis_db.port}
        },
        "topology.max.spout.pending": rng.choice([1, 3]),
        "topology.transactional.commit.location": rng.choice(["auto", "executors"]),
        "topology.state.checkpoint.interval.ms": 100,
        dl.TX_LOG_KEY: str(log),
    }


def _run(conf: dict[str, Any], path: Path, name: str, engine: str) -> tuple[int, str]:
    path.write_text(json.dumps(conf), encoding="utf-8")
    cmd = [sys.executable, "-m", "statefulbolts.cli", "run", "tests.deadletter_topologies:tx_words"]
    cmd += ["--conf", str(path), "--name", name, "--json", "--engine", engine]
    status, _, err = run_driver_process(cmd, ROOT, RUN_TIMEOUT, env=tx.child_env())
    return status, err


def _attempts(log: Path, txid: int) -> dict[int, set[tuple[str, int]]]:
    """Per attempt of ``txid``, the (sentence, lineage) pairs the split bolt executed."""
    held: dict[int, set[tuple[str, int]]] = {}
    for line in log.read_text(encoding="utf-8").splitlines():
        event = json.loads(line)
        if event["txid"] == txid:
            held.setdefault(event["attempt"], set()).add((event["sentence"], event["lineage"]))
    return held


POINTS = ["deadletter-decided", "deadletter-recorded", "deadletter-excluded"]
# The child drivers of one point run on Spark, the others' on the inline engine: what is under
# test is the driver's protocol across a real process death, and a JVM per child costs ~8 s.
ON_SPARK = "deadletter-recorded"


@pytest.mark.parametrize("point", POINTS)
def test_a_killed_driver_replays_the_batch_identically_without_the_poison(
    point: str, redis_db: Any, tmp_path: Path
) -> None:
    rng = random.Random(f"{SEED}/{point}")
    log_1, log_2 = tmp_path / "split-1.jsonl", tmp_path / "split-2.jsonl"
    conf = _conf(redis_db, rng, log_1)
    engine = "spark" if point == ON_SPARK else "inline"

    # 1. The driver dies dead-lettering the poisoned sentence of txid 3.
    killed = {**conf, "topology.faults": {"driver": {"point": point}}}
    status, err = _run(killed, tmp_path / "killed.json", "dltx", engine)
    assert status == KILLED, f"driver exited {status}, not killed:\n{err[-3000:]}"
    assert f"injected driver kill at {point} (txid {POISON_TXID})" in err, err[-3000:]
    before = _attempts(log_1, POISON_TXID)
    first = before[min(before)]
    poisoned = (dl.POISON_SENTENCE, lineage(dl.TX_POISONED[0], 1))
    assert poisoned in first and len(first) == dl.TX_PARTITIONS * dl.TX_TAKE
    stored = DeadLetterStore(conf, transactional_id=TID).records()
    assert len(stored) == (0 if point == "deadletter-decided" else 1)
    assert transactional_status(conf, TID).current_txid == POISON_TXID

    # 2. The same command, the same id: txid 3 again, and every attempt of it without it.
    status, err = _run(
        {**conf, dl.TX_LOG_KEY: str(log_2)}, tmp_path / "restart.json", "dltx", engine
    )
    assert status == 0, err[-3000:]
    after = _attempts(log_2, POISON_TXID)
    without = first - {poisoned}
    # Nothing written: two failed attempts again. Its record known: one, isolated at once.
    # Its removal stored: never again.
    tries = {"deadletter-decided": 2, "deadletter-recorded": 1, "deadletter-excluded": 0}[point]
    held = [after[attempt] for attempt in sorted(after)]
    assert held == [first] * tries + [without], held

    lines = [row[0] for rows in dl.tx_data().values() for row in rows]
    expected = dl.counts([line for line in lines if line != dl.POISON_SENTENCE])
    assert read_state(conf, "count", transactional_id=TID) == dict(expected)
    [record] = DeadLetterStore(conf, transactional_id=TID).records()
    assert record.origin == BatchOrigin(
        POISON_TXID, "partition", dl.TX_POISONED[0], 1, "default", [dl.POISON_SENTENCE]
    )
    assert (record.component, record.failed.values) == ("partial", ["poison"])
    assert record.state is LetterState.DEAD
    status_after = transactional_status(conf, TID)
    assert status_after.replays == [] and status_after.current_txid > POISON_TXID
