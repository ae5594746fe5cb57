"""Replaying dead letters with the command line into the next run, on Redis: counted once.

A first child driver runs the poisoned word count to its end (the poisoned tuple
dead-lettered); the bolt is fixed (a flag file); ``statefulbolts deadletter replay --all`` marks
the record; the next run takes it at its start, puts the tuple back in, and deletes the record
once that transaction commits. In some runs the driver carrying the replay is killed for real
at a protocol point, and the run after it finishes the job:

- checkpoint protocol (``RedisStreamSpout``): ``after-prepare`` (the replay's transaction rolls
  back: the record stays asked for, and the restart replays it) and ``after-committed`` (the
  transaction committed, the replay's ack not delivered: the restart learns from the
  transaction's manifest that ``$deadletter``'s message committed, and deletes the record
  instead of replaying it twice);
- transactional protocol: ``after-commit`` (the txid that took the replay in committed its
  maps, ``currtx`` not moved: the restart replays that txid with the same dead letter, which
  the committers skip, then deletes the record).

Every word is then counted exactly once, the poisoned sentence included, and the store is empty.
The child drivers run with ``--engine inline`` (the jobs in the driver's process): what is under
test is the protocol across real process deaths and the command line, and a JVM per child would
cost about 8 s each; ``test_deadletter_spark.py`` replays on Spark.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import deadletter_topologies as dl
import pytest
import tx_recovery_topologies as tx
from recovery_topologies import run_driver_process

from providers import StateFactory
from statefulbolts.cli import main
from statefulbolts.connectors import load_stream, pending_count
from statefulbolts.deadletter import DeadLetterStore
from statefulbolts.state import read_state

pytestmark = pytest.mark.redis

ROOT = Path(__file__).resolve().parents[2]
RUN_TIMEOUT = 180
KILLED = 137


def _provider(redis_db: Any) -> dict[str, Any]:
    return {
        "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
        "topology.state.provider.config": {
            "jedisPoolConfig": {"host": "127.0.0.1", "port": redis_db.port}
        },
        "topology.state.checkpoint.interval.ms": 200,
    }


def _run(topology: str, conf: dict[str, Any], path: Path, name: str) -> tuple[int, str]:
    path.write_text(json.dumps(conf), encoding="utf-8")
    cmd = [sys.executable, "-m", "statefulbolts.cli", "run", topology, "--conf", str(path)]
    cmd += ["--engine", "inline"]
    status, _, err = run_driver_process(
        [*cmd, "--name", name, "--json"], ROOT, RUN_TIMEOUT, env=tx.child_env()
    )
    return status, err


def _deadletter(capsys: Any, conf_path: Path, *args: str) -> str:
    code = main(["deadletter", args[0], "--conf", str(conf_path), *args[1:]])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


@pytest.mark.parametrize("kill", [None, "after-prepare", "after-committed"])
def test_a_checkpoint_replay_from_the_command_line_counts_once(
    kill: str | None, redis_db: Any, tmp_path: Path, capsys: Any
) -> None:
    name, stream = f"dlr-{kill}", f"sentences-{kill}"
    lines = dl.sentences(60, [17])
    load_stream(redis_db.url, stream, lines)
    fixed = tmp_path / "fixed"
    conf = {
        **_provider(redis_db),
        "redis.stream.url": redis_db.url,
        "redis.stream.key": stream,
        dl.FIXED_KEY: str(fixed),
    }
    topology = "tests.deadletter_topologies:redis_wordcount"
    status, err = _run(topology, conf, tmp_path / "first.json", name)
    assert status == 0, err[-3000:]
    store = DeadLetterStore(conf, topology=name)
    [record] = store.records()

    listed = _deadletter(capsys, tmp_path / "first.json", "list", "--topology", name)
    assert f"dead letters of topology '{name}': 1" in listed and record.id in listed
    fixed.touch()
    replayed = _deadletter(capsys, tmp_path / "first.json", "replay", "--topology", name, "--all")
    assert replayed.startswith(f"asked for replay: 1 dead letter(s) of topology '{name}'")

    if kill is not None:
        faults = {"driver": {"point": kill}}
        status, err = _run(topology, {**conf, "topology.faults": faults}, tmp_path / "k.json", name)
        assert status == KILLED, err[-3000:]
        # The first run consumed the stream: the one transaction this run starts is the replay's.
        assert f"injected driver kill at {kill}" in err
    status, err = _run(topology, conf, tmp_path / "second.json", name)
    assert status == 0, err[-3000:]

    counts: dict[str, int] = {}
    for task in range(2):
        for word, n in StateFactory.get_state(f"{name}/count-{task}", conf):
            counts[word] = counts.get(word, 0) + n
    assert counts == dict(dl.counts(lines))
    assert store.records() == []
    assert pending_count(redis_db.url, stream, name) == 0


@pytest.mark.parametrize("kill", [None, "after-commit"])
def test_a_transactional_replay_from_the_command_line_counts_once(
    kill: str | None, redis_db: Any, tmp_path: Path, capsys: Any
) -> None:
    fixed = tmp_path / "fixed"
    conf = {**_provider(redis_db), "topology.max.spout.pending": 2, dl.FIXED_KEY: str(fixed)}
    topology = "tests.deadletter_topologies:tx_words"
    status, err = _run(topology, conf, tmp_path / "first.json", "dltxr")
    assert status == 0, err[-3000:]
    store = DeadLetterStore(conf, transactional_id=dl.TRANSACTIONAL_ID)
    [record] = store.records()
    assert record.origin.values == [dl.POISON_SENTENCE]

    fixed.touch()
    args = ("replay", "--id", dl.TRANSACTIONAL_ID, record.id)
    assert _deadletter(capsys, tmp_path / "first.json", *args).startswith("asked for replay: 1")
    if kill is not None:
        faults = {"driver": {"point": kill}}
        status, err = _run(topology, {**conf, "topology.faults": faults}, tmp_path / "k.json", "x")
        assert status == KILLED, err[-3000:]
        assert f"injected driver kill at {kill}" in err  # the first txid: the replay's
    status, err = _run(topology, conf, tmp_path / "second.json", "dltxr")
    assert status == 0, err[-3000:]

    lines = [row[0] for rows in dl.tx_data().values() for row in rows]
    assert read_state(conf, "count", transactional_id=dl.TRANSACTIONAL_ID) == dict(
        dl.counts(lines)
    )
    assert store.records() == []
