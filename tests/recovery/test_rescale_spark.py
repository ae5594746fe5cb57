"""Rescaling, renaming and migrating stateful bolts on real Spark, between submits.

Each step submits the word count again under the same name with another shape (parallelism, a
renamed counter, a new state version) over new sentences, and checks the committed counts of all
steps so far against a plain Python count, and what the store holds: one namespace per task of
the current shape, nothing left for a task or a name the topology no longer has. Stores: the
in-memory provider (killed and submitted again in this process), a real redis-server, SQLite.
"""

from __future__ import annotations

import collections
import json
from pathlib import Path
from typing import Any

import pytest

from examples.wordcount import SentenceSpout, SplitSentence, WordCount, expected_counts
from providers import (
    STATE_PROVIDER_CONFIG_KEY,
    STATE_PROVIDER_KEY,
    InMemoryKeyValueStateProvider,
    get_provider,
)
from statefulbolts import Fields, TopologyBuilder
from statefulbolts.errors import StateEvolutionError
from statefulbolts.keygroups import KeyGroups

pytestmark = pytest.mark.spark

SENTENCES = 150
TIMEOUT = 240
GROUPS = KeyGroups(128)


def wordcount(parallelism: int, start: int, counter: str = "count", bolt: Any = None) -> Any:
    builder = TopologyBuilder()
    builder.set_spout("sentences", SentenceSpout(SENTENCES, start))
    builder.set_bolt("split", SplitSentence(), 2).shuffle_grouping("sentences")
    builder.set_bolt(counter, bolt or WordCount(), parallelism).fields_grouping(
        "split", Fields("word")
    )
    return builder.create_topology()


class CountV2(WordCount):
    """Stores ``{"n": count}`` instead of ``count``: version 2 of the word count's state."""

    state_version = 2

    def execute(self, tuple: Any) -> None:  # noqa: A002
        word = tuple.get_value(0)
        old = self.counts.get(word)
        self.counts.put(word, {"n": (old or {"n": 0})["n"] + 1})
        self.collector.ack(tuple)

    def migrate_state(self, key: Any, value: Any, from_version: int) -> Any:
        return key, {"n": value}


@pytest.fixture(params=["memory", "redis", "sqlite"])
def conf(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    InMemoryKeyValueStateProvider.drop()
    made: dict[str, Any] = {"topology.state.checkpoint.interval.ms": 100}
    if request.param == "redis":
        server = request.getfixturevalue("redis_db")
        pool = {"host": "127.0.0.1", "port": server.port}
        made[STATE_PROVIDER_KEY] = "providers.redis.RedisKeyValueStateProvider"
        made[STATE_PROVIDER_CONFIG_KEY] = json.dumps({"jedisPoolConfig": pool})
    elif request.param == "sqlite":
        made[STATE_PROVIDER_KEY] = "sqlite_state.SqliteKeyValueStateProvider"
        made[STATE_PROVIDER_CONFIG_KEY] = json.dumps({"path": str(tmp_path / "state.db")})
    yield made
    InMemoryKeyValueStateProvider.drop()


def run(cluster: Any, conf: dict[str, Any], name: str, topology: Any) -> Any:
    handle = cluster.submit_topology(name, conf, topology)
    try:
        handle.await_idle(TIMEOUT)
        return handle.read_state(_stateful(topology)), handle.status()
    finally:
        handle.kill()


def _stateful(topology: Any) -> str:
    return next(cid for cid, spec in topology.components.items() if spec.is_stateful)


def held(conf: dict[str, Any], name: str) -> list[str]:
    return sorted(
        ns[len(name) + 1 :] for ns in get_provider(conf).namespaces(conf, f"{name}/") or []
    )


def test_parallelism_two_three_one_four_with_a_rename_stays_exact(
    cluster: Any, conf: dict[str, Any]
) -> None:
    name = "rescale-steps"
    total: collections.Counter[str] = collections.Counter()
    steps = [(2, "count"), (3, "count"), (1, "counter"), (4, "counter")]
    for i, (parallelism, counter) in enumerate(steps):
        step_conf = {**conf, "topology.state.renames": {"count": "counter"}}
        counts, status = run(
            cluster, step_conf, name, wordcount(parallelism, i * SENTENCES, counter)
        )
        total += expected_counts(SENTENCES, i * SENTENCES)
        assert counts == dict(total), f"step {i}: parallelism {parallelism}"
        tasks = [f"{counter}-{t}" for t in range(parallelism)]
        assert held(conf, name) == sorted(["$checkpointspout-0", "$shape", *tasks])
        if i:
            assert status["state_shape"][0].startswith(f"{counter}: "), status
    assert status["state_shape"] == ["counter: parallelism 1 -> 4"]


def test_a_new_state_version_is_migrated_before_the_bolt_reads_it(
    cluster: Any, conf: dict[str, Any]
) -> None:
    name = "migrate"
    run(cluster, conf, name, wordcount(2, 0))
    counts, status = run(cluster, conf, name, wordcount(3, SENTENCES, bolt=CountV2()))
    expected = expected_counts(SENTENCES) + expected_counts(SENTENCES, SENTENCES)
    assert counts == {w: {"n": n} for w, n in expected.items()}
    assert status["state_shape"] == ["count: parallelism 2 -> 3; state version 1 -> 2"]


def test_a_refused_change_stops_the_start_and_keeps_the_state(
    cluster: Any, conf: dict[str, Any]
) -> None:
    name = "refused"
    first, _ = run(cluster, conf, name, wordcount(2, 0))
    with pytest.raises(StateEvolutionError, match="declares 2 without a migration"):
        bolt = type("NoHook", (WordCount,), {"state_version": 2, "__module__": __name__})()
        cluster.submit_topology(name, conf, wordcount(2, SENTENCES, bolt=bolt))
    with pytest.raises(StateEvolutionError, match="state of component 'count' is stored"):
        cluster.submit_topology(name, conf, wordcount(2, SENTENCES, counter="other"))
    again, _ = run(cluster, conf, name, wordcount(2, SENTENCES))
    assert again == dict(expected_counts(SENTENCES) + expected_counts(SENTENCES, SENTENCES))
    assert first == dict(expected_counts(SENTENCES))


@pytest.mark.redis
def test_the_word_count_example_at_parallelism_2_3_1_stays_exact(
    spark: Any, redis_db: Any, tmp_path: Path, capsys: Any
) -> None:
    from examples import wordcount as example

    pool = {"host": "127.0.0.1", "port": redis_db.port}
    conf = {
        STATE_PROVIDER_KEY: "providers.redis.RedisKeyValueStateProvider",
        STATE_PROVIDER_CONFIG_KEY: json.dumps({"jedisPoolConfig": pool}),
    }
    path = tmp_path / "redis.json"
    path.write_text(json.dumps(conf), encoding="utf-8")
    for runs, parallelism in enumerate((2, 3, 1), start=1):
        argv = ["--conf", str(path), "--parallelism", str(parallelism), "--sentences", "100"]
        assert example.main([*argv, "--json"], spark=spark) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["exact"], doc["mismatched"]
        assert doc["continued_from_words"] == (runs - 1) * sum(expected_counts(100).values())
        assert held(conf, "wordcount") == sorted(
            ["$checkpointspout-0", "$shape", *(f"count-{t}" for t in range(parallelism))]
        )


def _tx_words(data: dict[int, list[list[str]]], parallelism: int) -> Any:
    from examples.transactional_words import BucketCountUpdater, Bucketize, KeyedCountUpdater
    from statefulbolts import MemoryTransactionalSpout, TransactionalTopologyBuilder

    spout = MemoryTransactionalSpout(data, ["word"], 20)
    builder = TransactionalTopologyBuilder("tx-rescale", "spout", spout, 2)
    builder.set_bolt("count", KeyedCountUpdater(), parallelism).fields_grouping(
        "spout", Fields("word")
    )
    builder.set_bolt("bucketize", Bucketize(10)).none_grouping("count")
    builder.set_bolt("buckets", BucketCountUpdater(), 2).fields_grouping(
        "bucketize", Fields("bucket")
    )
    return builder.build_topology()


def test_a_committer_rescaled_keeps_exactly_once_counts(cluster: Any, conf: dict[str, Any]) -> None:
    from examples.corpus import sentence, words
    from examples.transactional_words import expected

    rows = [[w] for i in range(4 * 60) for w in words(sentence(i))]
    for step, parallelism in enumerate((5, 3, 1, 4), start=1):
        upto = rows[: len(rows) * step // 4]  # the partitions grow between the runs
        data = {p: upto[p::4] for p in range(4)}
        handle = cluster.submit_topology(
            "tx-rescale", {**conf, "topology.max.spout.pending": 3}, _tx_words(data, parallelism)
        )
        try:
            handle.await_idle(TIMEOUT)
            counts = {w: v[0] for w, v in handle.read_state("count").items()}
            buckets = {b: n for b, n in handle.read_state("buckets").items() if n}
            status = handle.status()
        finally:
            handle.kill()
        want_counts, want_buckets = expected(data, 10)
        assert counts == want_counts, f"step {step}: parallelism {parallelism}"
        assert buckets == want_buckets
        if step > 1:
            assert "count: parallelism" in " ".join(status["state_shape"])
        maps = get_provider(conf).namespaces(conf, "$transactional/tx-rescale/count-") or []
        tasks = {int(ns.rsplit("/", 1)[0].rsplit("-", 1)[1]) for ns in maps}
        assert tasks <= set(range(parallelism)), maps
