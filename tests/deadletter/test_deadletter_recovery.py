"""A driver killed for real while it dead-letters a poison tuple: exact counts, one record.

Each scenario loads sentences into a fresh Redis stream, one of them poisoned (the count bolt
raises on its word ``poison`` every time, ``deadletter_topologies.redis_wordcount``), and runs
the Redis word count as a child driver process (``statefulbolts run ... --json``) that dies in
the transaction that dead-letters the poison tuple:

- at each dead-letter kill point of ``topology.faults``: ``deadletter-decided`` (nothing
  written), ``deadletter-recorded`` (its record committed, its stream entry not acked),
  ``deadletter-excluded`` (acked at the spout, which batches its ``XACK``: it may not have
  reached Redis; the transaction's other tuples not yet failed);
- by a SIGKILL at a random moment after the first failed PREPARE.

Then the same command runs again without the fault until the topology is idle, and the test
checks Redis: every word of every sentence but the poisoned one counted exactly once, exactly
one dead letter (for the poisoned entry), no entry left pending, no ``$prepare`` key.

``STATEFULBOLTS_DL_SEED`` (an int, 3 by default) seeds where the poisoned sentence is and the
moment of the random kill.
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import deadletter_topologies as dl
import pytest
from recovery_topologies import child_env, run_driver_process

from providers import StateFactory
from recovery import exit_status
from statefulbolts.connectors import load_stream, pending_count
from statefulbolts.deadletter import (
    DeadLetterStore,
    LetterState,
    SpoutOrigin,
)

pytestmark = [pytest.mark.spark, pytest.mark.redis]

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGY = "tests.deadletter_topologies:redis_wordcount"
SEED = int(os.environ.get("STATEFULBOLTS_DL_SEED", "3"))
SENTENCES = 120
MAX_PENDING = 40
RUN_TIMEOUT = 180
KILLED = 137
POINTS = ["deadletter-decided", "deadletter-recorded", "deadletter-excluded", "random"]


def _conf(redis_db: Any, stream: str, **more: Any) -> dict[str, Any]:
    return {
        "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
        "topology.state.provider.config": {
            "jedisPoolConfig": {"host": "127.0.0.1", "port": redis_db.port}
        },
        "topology.state.checkpoint.interval.ms": 200,
        "topology.max.spout.pending": MAX_PENDING,
        "redis.stream.url": redis_db.url,
        "redis.stream.key": stream,
        **more,
    }


def _command(conf: dict[str, Any], path: Path, name: str, engine: str) -> list[str]:
    path.write_text(json.dumps(conf), encoding="utf-8")
    cmd = [sys.executable, "-m", "statefulbolts.cli", "run", TOPOLOGY, "--conf", str(path)]
    return [*cmd, "--name", name, "--json", "--engine", engine]


def _kill_at_random(cmd: list[str], rng: random.Random) -> tuple[int, str]:
    """Run ``cmd``; SIGKILL it a random 0-2 s after its first failed PREPARE is logged."""
    proc = subprocess.Popen(
        cmd,
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=child_env(),
    )
    delay = rng.uniform(0.0, 2.0)
    lines: list[str] = []
    killer: list[threading.Timer] = []

    def kill() -> None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    try:
        assert proc.stderr is not None
        for line in proc.stderr:
            lines.append(line)
            if not killer and "failed (count)" in line:
                killer.append(threading.Timer(delay, kill))
                killer[0].start()
        proc.wait(timeout=RUN_TIMEOUT)
    finally:
        for timer in killer:
            timer.cancel()
        kill()
        if proc.poll() is None:
            proc.wait()
    return exit_status(proc.returncode), "".join(lines)


def _committed(conf: dict[str, Any], name: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for task in range(2):
        for word, n in StateFactory.get_state(f"{name}/count-{task}", conf):
            counts[word] = counts.get(word, 0) + n
    return counts


@pytest.mark.parametrize("point", POINTS)
def test_a_driver_killed_while_dead_lettering_recovers_exactly(
    point: str, redis_db: Any, tmp_path: Path
) -> None:
    rng = random.Random(f"{SEED}/{point}")
    poisoned = rng.randrange(SENTENCES)
    lines = dl.sentences(SENTENCES, [poisoned])
    name, stream = f"dl-{point}", f"sentences-{point}"
    load_stream(redis_db.url, stream, lines)
    client = redis_db.client(decode_responses=True)
    entry = client.xrange(stream, count=SENTENCES)[poisoned][0]
    conf = _conf(redis_db, stream)
    # The random kill's child drivers run on Spark, the named points' on the inline engine:
    # what is under test is the driver's protocol across a real process death, and a JVM per
    # child costs ~8 s.
    engine = "spark" if point == "random" else "inline"

    # 1. The driver dies in the dead-lettering transaction.
    if point == "random":
        status, err = _kill_at_random(_command(conf, tmp_path / "killed.json", name, engine), rng)
    else:
        faults = {"driver": {"point": point}}
        cmd = _command({**conf, "topology.faults": faults}, tmp_path / "killed.json", name, engine)
        status, _, err = run_driver_process(cmd, ROOT, RUN_TIMEOUT)
        assert f"injected driver kill at {point}" in err, err[-3000:]
    assert status == KILLED, f"driver exited {status}, not killed:\n{err[-3000:]}"
    records = DeadLetterStore(conf, topology=name).records()
    if point == "deadletter-decided":
        assert records == []
    elif point != "random":
        assert [r.origin.message_id for r in records] == [entry]

    # 2. The same command without the fault: the rest of the stream, exactly once.
    status, _, err = run_driver_process(
        _command(conf, tmp_path / "restart.json", name, engine), ROOT, RUN_TIMEOUT
    )
    assert status == 0, err[-3000:]
    expected = dl.counts([line for i, line in enumerate(lines) if i != poisoned])
    assert _committed(conf, name) == dict(expected)
    [record] = DeadLetterStore(conf, topology=name).records()
    assert record.origin == SpoutOrigin(
        "sentences", 0, entry, "default", [dl.POISON_SENTENCE], repr([dl.POISON_SENTENCE])
    )
    assert (record.component, record.failed.values) == ("count", ["poison"])
    assert record.state is LetterState.DEAD
    assert record.attempts >= 1
    assert pending_count(redis_db.url, stream, name) == 0
    assert client.keys(f"{name}/*$prepare") == []
