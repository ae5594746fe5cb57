"""Moving a topology's state between providers with the state tool, and going on, on Spark.

Each test runs a real topology on the shared local session, stops it, moves its state with
``statefulbolts state export`` / ``import`` (or their Python functions, for the in-memory
provider, whose state lives in this process: the driver), runs the topology again on the
target with more input, and checks the counts against a plain Python count: exact.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

import pytest
import topologies as topo

from examples import transactional_words
from examples.wordcount import build, expected_counts
from providers import (
    STATE_PROVIDER_CONFIG_KEY,
    STATE_PROVIDER_KEY,
    InMemoryKeyValueStateProvider,
    KeyValueState,
    StateFactory,
)
from statefulbolts.cli import main
from statefulbolts.state import export_state, import_state, read_state, state_dataframe

pytestmark = pytest.mark.spark

TIMEOUT = 120
INTERVAL = {"topology.state.checkpoint.interval.ms": 100}
FIRST, MORE = 60, 40  # sentences before and after the move


def sqlite_conf(path: Path) -> dict[str, Any]:
    return {
        STATE_PROVIDER_KEY: "sqlite_state.SqliteKeyValueStateProvider",
        STATE_PROVIDER_CONFIG_KEY: json.dumps({"path": str(path)}),
        **INTERVAL,
    }


def redis_conf(port: int) -> dict[str, Any]:
    return {
        STATE_PROVIDER_KEY: "providers.redis.RedisKeyValueStateProvider",
        STATE_PROVIDER_CONFIG_KEY: json.dumps({"jedisPoolConfig": {"port": port}}),
        **INTERVAL,
    }


def run(cluster: Any, name: str, conf: dict[str, Any], topology: Any) -> dict[str, Any]:
    """Run until idle, stop; the component states and the transactions it ran."""
    handle = cluster.submit_topology(name, conf, topology)
    try:
        handle.await_idle(TIMEOUT)
        done = handle.metrics()["transactions"]
        return {
            "transactions": [(t["action"], t["txid"]) for t in done if t["ok"]],
            "failed": [t for t in done if not t["ok"]],
        }
    finally:
        handle.kill()


def write(path: Path, conf: dict[str, Any]) -> Path:
    path.write_text(json.dumps(conf))
    return path


def test_a_word_count_moves_from_sqlite_to_redis_and_goes_on_exactly(
    cluster: Any, redis_db: Any, tmp_path: Path, capsys: Any
) -> None:
    name = topo.new_key("wc-move")
    source, target = sqlite_conf(tmp_path / "state.db"), redis_conf(redis_db.port)
    first = run(cluster, name, source, build(FIRST))
    last = max(txid for action, txid in first["transactions"] if action == "COMMIT")
    assert first["failed"] == []

    path = tmp_path / "wc.sbstate"
    cli_export = ["state", "export", "--conf", str(write(tmp_path / "a.json", source))]
    assert main([*cli_export, "--topology", name, "--output", str(path)]) == 0
    cli_import = ["state", "import", "--conf", str(write(tmp_path / "b.json", target))]
    assert main([*cli_import, "--topology", name, str(path)]) == 0
    out = capsys.readouterr().out
    assert f"  checkpoint: COMMITTED({last}); on restart: INITSTATE({last})" in out.splitlines()

    second = run(cluster, name, target, build(MORE, start=FIRST))

    want = expected_counts(FIRST) + expected_counts(MORE, start=FIRST)
    assert read_state(target, "count", topology=name) == dict(want)
    assert second["transactions"][0] == ("INITSTATE", last)  # from the moved checkpoint
    assert second["transactions"][1] == ("PREPARE", last + 1)
    assert second["failed"] == []
    # The source is as the first run left it: the export read it and wrote nothing there.
    assert read_state(source, "count", topology=name) == dict(expected_counts(FIRST))


def test_a_topology_stopped_in_committing_moves_from_the_driver_to_sqlite_and_commits(
    cluster: Any, tmp_path: Path
) -> None:
    name = topo.new_key("wc-mem")
    memory = dict(INTERVAL)
    first = run(cluster, name, memory, build(FIRST))
    last = max(txid for action, txid in first["transactions"] if action == "COMMIT")

    # Leave the state as a driver killed after saving COMMITTING(last + 1) leaves it: every
    # count task prepared txid last + 1 (here: 5 more of one word, another word deleted).
    want = collections.Counter(expected_counts(FIRST))
    for task in (0, 1):
        state = StateFactory.get_state(f"{name}/count-{task}", memory)
        assert isinstance(state, KeyValueState)
        grown, gone = sorted(word for word, _ in state)[:2]
        state.put(grown, state.get(grown) + 5)
        state.delete(gone)
        state.prepare_commit(last + 1)
        want[grown] += 5
        del want[gone]
    spout = StateFactory.get_system_state(f"{name}/$checkpointspout-0", memory)
    spout.put("__state", [last + 1, "COMMITTING"])
    spout.put("__txn", {"txid": last + 1, "spouts": None})
    spout.commit()

    path = tmp_path / "wc.sbstate"
    info = export_state(memory, path, topology=name)  # in the driver: its state is here
    tasks = [n for n in info.namespaces if "/count-" in n.name]  # the records ($...) aside
    assert [(n.name, n.prepared_txid, n.prepared) for n in tasks] == [
        (f"{name}/count-0", last + 1, 2),
        (f"{name}/count-1", last + 1, 2),
    ]
    InMemoryKeyValueStateProvider.drop(f"{name}/")
    target = sqlite_conf(tmp_path / "moved.db")
    import_state(target, path, topology=name)

    second = run(cluster, name, target, build(MORE, start=FIRST))

    # The restart rolls the prepared transaction forward, then goes on from it.
    assert second["transactions"][:3] == [
        ("COMMIT", last + 1),
        ("INITSTATE", last + 1),
        ("PREPARE", last + 2),
    ]
    want += expected_counts(MORE, start=FIRST)
    assert read_state(target, "count", topology=name) == dict(want)


def test_a_transactional_topology_moves_from_the_driver_to_redis_and_goes_on(
    cluster: Any, redis_db: Any, tmp_path: Path
) -> None:
    tid = topo.new_key("tx-move")
    data = transactional_words.DATA
    early = {p: rows[:3] for p, rows in data.items()}  # one batch per partition
    conf = {"topology.max.spout.pending": 1, **INTERVAL}
    first = run(cluster, topo.new_key("txw"), conf, transactional_words.build(early, 10, tid))
    assert first["failed"] == []

    path = tmp_path / "tx.sbstate"
    export_state(conf, path, transactional_id=tid)
    InMemoryKeyValueStateProvider.drop(f"$transactional/{tid}/")
    target = {**redis_conf(redis_db.port), **conf}
    import_state(target, path, transactional_id=tid)
    moved = read_state(target, "count", transactional_id=tid)  # [count, count before]
    assert {word: value[0] for word, value in moved.items()} == transactional_words.expected(early)[
        0
    ]

    second = run(cluster, topo.new_key("txw"), target, transactional_words.build(data, 10, tid))

    counts, buckets = transactional_words.expected(data)
    stored = read_state(target, "count", transactional_id=tid)
    assert {word: value[0] for word, value in stored.items()} == counts
    assert {b: n for b, n in read_state(target, "buckets", transactional_id=tid).items() if n} == (
        buckets
    )
    first_txids = [txid for _, txid in first["transactions"]]
    assert min(txid for _, txid in second["transactions"]) > max(first_txids)


def test_a_state_dataframe_has_one_partition_per_task(spark: Any, redis_db: Any) -> None:
    name = topo.new_key("df")
    values = {0: {"storm": 3, "spark": 5}, 1: {"flink": 2}, 2: {"beam": 7, "kafka": 1}}
    for conf in (redis_conf(redis_db.port), dict(INTERVAL)):  # a shared store, the driver's
        for task, counts in values.items():
            state = StateFactory.get_state(f"{name}/count-{task}", conf)
            for word, n in counts.items():
                state.put(word, n)
            state.prepare_commit(1)
            state.commit(1)
        last = StateFactory.get_state(f"{name}/count-2", conf)
        last.put("kafka", 100)
        last.put("pulsar", [1, 2])
        last.prepare_commit(2)

        frame = state_dataframe(spark, conf, "count", topology=name, value_type="bigint")
        assert frame.rdd.getNumPartitions() == 3
        assert frame.schema.simpleString() == "struct<task:int,key:string,value:bigint>"
        rows = sorted(tuple(r) for r in frame.collect())
        assert rows == sorted((t, w, n) for t, counts in values.items() for w, n in counts.items())
        as_text = state_dataframe(spark, conf, "count", topology=name, prepared=True)
        assert sorted(tuple(r) for r in as_text.where("task = 2").collect()) == [
            (2, "beam", "7"),
            (2, "kafka", "100"),
            (2, "pulsar", "[1, 2]"),
        ]
    InMemoryKeyValueStateProvider.drop(f"{name}/")
