"""``read_state`` shows committed values only, never what a transaction prepared and did not commit.

A PREPARE writes a transaction's changes into the store as a prepared delta beside the committed
map; until COMMIT, a state object reads through the delta. ``TopologyHandle.read_state`` (the
checkpoint runner and the transactional runner's ``read_state`` / ``read_map``) and the state
tool read the committed map alone (``statefulbolts.state._read.committed_items``). The tests
leave a real prepared delta behind: on Spark, a word count whose COMMIT is refused every time
(its ``pre_commit`` raises) after a PREPARE that succeeded, on the in-memory provider and on a
real redis-server; without Spark, states driven directly on memory, SQLite and Redis.
"""

from __future__ import annotations

import json
import os
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import topologies as topo

from checkpoint.status import checkpoint_status
from examples.wordcount import SentenceSpout, SplitSentence, WordCount, expected_counts
from providers import (
    STATE_PROVIDER_CONFIG_KEY,
    STATE_PROVIDER_KEY,
    InMemoryKeyValueStateProvider,
    KeyValueState,
    StateFactory,
    StateProvider,
)
from statefulbolts import (
    Fields,
    MemoryTransactionalSpout,
    TopologyBuilder,
    TransactionalTopologyBuilder,
)
from statefulbolts.errors import StateToolError, TopologyFailedError
from statefulbolts.state import merged_state, read_state
from statefulbolts.state._read import committed_items
from statefulbolts.transactional._maps import read_backing_state

TIMEOUT = 240
# Varied by STATEFULBOLTS_SEED in loops: how much the refused transaction carries, how soon.
_RNG = random.Random(int(os.environ.get("STATEFULBOLTS_SEED", "0")))
SENTENCES = _RNG.randrange(20, 120)
INTERVAL_MS = _RNG.choice([20, 50, 100, 200])
# Committed before the topology runs, under keys no sentence holds.
SEEDS = ({"seed-a": 100, "seed-b": 200}, {"seed-c": 300})


def _redis(port: int) -> dict[str, Any]:
    pool = {"host": "127.0.0.1", "port": port}
    return {
        STATE_PROVIDER_KEY: "providers.redis.RedisKeyValueStateProvider",
        STATE_PROVIDER_CONFIG_KEY: json.dumps({"jedisPoolConfig": pool}),
    }


def _sqlite(path: Path) -> dict[str, Any]:
    return {
        STATE_PROVIDER_KEY: "sqlite_state.SqliteKeyValueStateProvider",
        STATE_PROVIDER_CONFIG_KEY: json.dumps({"path": str(path)}),
    }


def _kv(conf: dict[str, Any], namespace: str, system: bool = False) -> KeyValueState:
    state = (StateFactory.get_system_state if system else StateFactory.get_state)(namespace, conf)
    assert isinstance(state, KeyValueState)
    return state


@pytest.fixture
def provider_conf(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The config of a provider by name: ``memory``, ``sqlite`` or ``redis`` (a real server)."""
    InMemoryKeyValueStateProvider.drop()
    kind = request.param
    if kind == "redis":
        yield _redis(request.getfixturevalue("redis_db").port)
    elif kind == "sqlite":
        yield _sqlite(tmp_path / "state.db")
    else:
        yield {}
    InMemoryKeyValueStateProvider.drop()
    from providers import load_module

    sqlite_state = load_module("sqlite_state")

    from providers.redis import reset_clients

    reset_clients()
    sqlite_state.close_connections()


PROVIDERS = ["memory", "sqlite", pytest.param("redis", marks=pytest.mark.redis)]


# ---------------------------------------------------------------- states driven directly
@pytest.mark.parametrize("provider_conf", PROVIDERS, indirect=True)
def test_merged_state_reads_the_committed_map_not_the_prepared_delta(
    provider_conf: dict[str, Any],
) -> None:
    conf = provider_conf
    for task, committed in enumerate(({"storm": 3, "spark": 5}, {"flink": 2})):
        state = _kv(conf, f"rd/count-{task}")
        for key, value in committed.items():
            state.put(key, value)
        state.prepare_commit(1)
        state.commit(1)
    # txid 2 prepared (an update, a deletion, a new key) and never committed.
    first = _kv(conf, "rd/count-0")
    first.put("storm", 4)
    first.delete("spark")
    first.put("new", 1)
    first.prepare_commit(2)
    second = _kv(conf, "rd/count-1")
    second.put("flink", 9)
    second.prepare_commit(2)

    committed = {"storm": 3, "spark": 5, "flink": 2}
    assert merged_state(conf, ["rd/count-0", "rd/count-1"]) == committed
    assert read_state(conf, "count", topology="rd") == committed
    # A state object still reads through the delta: what the runtime read before.
    fresh = _kv(conf, "rd/count-0")
    assert dict(fresh) == {"storm": 4, "new": 1}


@pytest.mark.parametrize("provider_conf", PROVIDERS, indirect=True)
def test_a_committer_maps_staged_write_does_not_show(provider_conf: dict[str, Any]) -> None:
    conf = provider_conf
    namespace = "$transactional/rd/sum-0/default"
    state = _kv(conf, namespace, system=True)
    state.put(("total",), [3, 12])
    state.put("$record", [3, ["total"]])
    state.commit()
    staged = _kv(conf, namespace, system=True)
    staged.put(("total",), [4, 99])
    staged.put(("late",), [4, 1])
    staged.prepare_commit(4)

    stored = committed_items(_kv(conf, namespace, system=True), conf, system=True)
    assert read_backing_state(stored) == {"total": 12}
    assert read_state(conf, "sum", transactional_id="rd") == {"total": 12}


def _prepared_not_committed(
    conf: dict[str, Any], namespace: str, committed: dict[Any, Any]
) -> None:
    """``committed`` committed as txid 1, then txid 2 prepared and never committed: an update,
    a deletion and a new key (what a run stopped between PREPARE and COMMIT leaves)."""
    state = _kv(conf, namespace)
    for key, value in committed.items():
        state.put(key, value)
    state.prepare_commit(1)
    state.commit(1)
    staged = _kv(conf, namespace)
    first, *rest = committed
    staged.put(first, 1000)
    for key in rest[:1]:
        staged.delete(key)
    staged.put("prepared-only", 7)
    staged.prepare_commit(2)
    assert "prepared-only" in dict(_kv(conf, namespace))  # iterating reads through the delta


@pytest.mark.parametrize("provider_conf", PROVIDERS, indirect=True)
def test_the_examples_committed_readers_leave_a_prepared_delta_out(
    provider_conf: dict[str, Any],
) -> None:
    """``examples.wordcount.committed_counts`` (the 6,134 keys where 6,000 were committed),
    ``examples.crash_recovery.committed_counts`` and ``examples.window_crash.committed``."""
    from examples import crash_recovery, window_crash, wordcount
    from statefulbolts.namespaces import TaskNamespace

    conf = provider_conf
    counts = ({"storm": 3, "spark": 5}, {"flink": 2, "beam": 4})
    for task, committed in enumerate(counts):
        _prepared_not_committed(
            conf, str(TaskNamespace.of_topology("wc", "count", task)), committed
        )
        _prepared_not_committed(conf, f"cr/count-{task}", committed)
    results, late = {1000: {"size": 3}, 2000: {"size": 1}}, {7: 1, 9: 1}
    _prepared_not_committed(conf, str(TaskNamespace.of_topology("win", "results", 0)), results)
    _prepared_not_committed(conf, str(TaskNamespace.of_topology("win", "late_count", 0)), late)

    every = {**counts[0], **counts[1]}
    assert wordcount.committed_counts(conf, "wc") == every
    assert crash_recovery.committed_counts(conf, "cr") == every
    assert window_crash.committed(conf, "win") == (results, late)


class _PlainState(KeyValueState):
    """A provider's state with the bolts' contract only: no stored image."""

    data: dict[str, dict[Any, Any]] = {}

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.items_ = self.data.setdefault(namespace, {})

    def put(self, key: Any, value: Any) -> None:
        self.items_[key] = value

    def get(self, key: Any, default: Any = None) -> Any:
        return self.items_.get(key, default)

    def delete(self, key: Any) -> Any:
        return self.items_.pop(key, None)

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        return iter(list(self.items_.items()))

    def prepare_commit(self, txid: int) -> None:
        """Nothing to prepare."""

    def commit(self, txid: int | None = None) -> None:
        """Nothing to commit."""

    def rollback(self) -> None:
        """Nothing to roll back."""


class PlainProvider(StateProvider):
    def new_state(self, namespace: str, conf: Any, context: Any = None) -> _PlainState:
        return _PlainState(namespace)


def test_a_provider_without_the_stored_image_is_refused_not_read_through() -> None:
    conf = {STATE_PROVIDER_KEY: f"{__name__}.PlainProvider"}
    _PlainState("rd/count-0").put("storm", 1)
    with pytest.raises(StateToolError) as refused:
        merged_state(conf, ["rd/count-0"])
    assert str(refused.value) == (
        f"{__name__}._PlainState (provider {__name__}.PlainProvider) does not expose its stored "
        "image (scan_committed, decode_key, decode_value, ...; see providers.KeyValueState), so "
        "its committed values cannot be told from values a transaction prepared and never "
        "committed, and they are not read through it; implement the stored image in the "
        "provider"
    )


# ---------------------------------------------------------------- a real topology on Spark
class CommitRefusingCount(WordCount):
    """The word count's bolt whose COMMIT never goes through: ``pre_commit`` raises."""

    def pre_commit(self, txid: int) -> None:
        msg = f"commit of txid {txid} refused"
        raise RuntimeError(msg)


def _refused_wordcount() -> Any:
    builder = TopologyBuilder()
    builder.set_spout("sentences", SentenceSpout(SENTENCES), 1)
    builder.set_bolt("split", SplitSentence(), 2).shuffle_grouping("sentences")
    builder.set_bolt("count", CommitRefusingCount(), 2).fields_grouping("split", Fields("word"))
    return builder.create_topology()


@pytest.mark.spark
@pytest.mark.parametrize(
    "provider_conf", ["memory", pytest.param("redis", marks=pytest.mark.redis)], indirect=True
)
def test_after_a_prepare_whose_commit_failed_read_state_shows_the_committed_values(
    cluster: Any, provider_conf: dict[str, Any]
) -> None:
    name = topo.new_key("uncommitted")
    conf = {
        **provider_conf,
        "topology.state.checkpoint.interval.ms": INTERVAL_MS,
        "topology.max.transaction.retries": 1,
    }
    # Committed, no checkpoint txid yet, each key in the task its key group says.
    topo.seed_keyed_state(conf, name, 2, {**SEEDS[0], **SEEDS[1]})

    handle = cluster.submit_topology(name, conf, _refused_wordcount())
    with pytest.raises(TopologyFailedError, match=r"commit of txid 0 refused"):
        handle.await_idle(TIMEOUT)

    # PREPARE(0) succeeded everywhere and COMMIT(0) never did: each task holds txid 0 prepared.
    status = checkpoint_status(conf, name)
    assert str(status.checkpoint) == "COMMITTING(0)"
    assert {(t.committed_txid, t.prepared_txid) for t in status.tasks} == {(-1, 0)}
    committed = {**SEEDS[0], **SEEDS[1]}
    prepared = read_state(conf, "count", topology=name, prepared=True)
    assert prepared == {**committed, **expected_counts(SENTENCES)}  # what a commit would make
    assert handle.read_state("count") == committed
    assert read_state(conf, "count", topology=name) == committed


@pytest.mark.spark
@pytest.mark.parametrize("provider_conf", ["memory"], indirect=True)
def test_read_map_shows_the_committed_map_not_a_staged_write(
    cluster: Any, provider_conf: dict[str, Any]
) -> None:
    from examples.transactional_global_count import GLOBAL_KEY, BatchCount, UpdateGlobalCount

    tid = topo.new_key("committed-map")
    spout = MemoryTransactionalSpout({0: [["cat"], ["dog"]], 1: [["emu"]]}, ["word"], 3)
    builder = TransactionalTopologyBuilder(tid, "spout", spout, 2)
    builder.set_bolt("partial", BatchCount(), 2).none_grouping("spout")
    builder.set_bolt("sum", UpdateGlobalCount()).global_grouping("partial")
    conf = {**provider_conf, "topology.max.spout.pending": 2}
    handle = cluster.submit_topology(topo.new_key("txw"), conf, builder.build_topology())
    handle.await_idle(TIMEOUT)
    handle.kill()
    assert handle.read_map("sum") == {GLOBAL_KEY: 3}
    # A write staged into the committer's map and prepared, never committed.
    staged = _kv(conf, f"$transactional/{tid}/sum-0/default", system=True)
    staged.put((GLOBAL_KEY,), [99, 12345])
    staged.prepare_commit(99)
    assert handle.read_map("sum") == {GLOBAL_KEY: 3}
    assert handle.read_state("sum") == {GLOBAL_KEY: 3}
