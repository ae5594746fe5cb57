"""On local Spark with Redis state: a word count reads its counts without a round trip per word.

Each counting task prefetches the words of its input (the field it is grouped on) in one
``HMGET`` before its first tuple, so the reads Redis serves per transaction are a handful
whatever the number of distinct words; the counts stay exact.
"""

from __future__ import annotations

import collections
import json
from typing import Any

import pytest

from examples.corpus import words
from examples.wordcount import SplitSentence, WordCount
from statefulbolts import Fields, Spout, StormTopology, TopologyBuilder

pytestmark = [pytest.mark.spark, pytest.mark.redis]

PROVIDER = "providers.redis.RedisKeyValueStateProvider"
VOCAB = 3000
SENTENCES = 900
PARALLELISM = 2


def sentence(i: int) -> str:
    """Ten words, drawn so that every word of the vocabulary occurs."""
    return " ".join(f"w{(i * 10 + j) * 7 % VOCAB}" for j in range(10))


class Sentences(Spout):
    """Emits ``SENTENCES`` sentences, each with its index as message id; replays on fail."""

    def open(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector
        self.next_index = 0
        self.replay: list[int] = []

    def next_tuple(self) -> None:
        if self.replay:
            i = self.replay.pop()
        elif self.next_index < SENTENCES:
            i, self.next_index = self.next_index, self.next_index + 1
        else:
            return
        self.collector.emit([sentence(i)], message_id=i)

    def fail(self, msg_id: Any) -> None:
        self.replay.append(msg_id)

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("sentence"))


def build() -> StormTopology:
    builder = TopologyBuilder()
    builder.set_spout("sentences", Sentences(), 1)
    builder.set_bolt("split", SplitSentence(), PARALLELISM).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(), PARALLELISM).fields_grouping("split", Fields("word"))
    return builder.create_topology()


def run(cluster: Any, conf: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run the word count to idle: its committed counts and its transactions."""
    handle = cluster.submit_topology("prefetch-wc", conf, build())
    try:
        handle.await_idle(120)
        transactions = handle.metrics()["transactions"]
        counts = handle.read_state("count")
    finally:
        handle.kill()
    assert all(t["ok"] for t in transactions)
    assert any(t["action"] == "PREPARE" for t in transactions)
    return counts, transactions


def test_a_redis_word_count_reads_far_fewer_times_than_it_has_words(
    cluster: Any, redis_db: Any
) -> None:
    pool = {"host": redis_db.host, "port": redis_db.port}
    conf = {
        "topology.state.provider": PROVIDER,
        "topology.state.provider.config": json.dumps({"jedisPoolConfig": pool}),
        "topology.state.checkpoint.interval.ms": 200,
    }
    expected = collections.Counter(w for i in range(SENTENCES) for w in words(sentence(i)))
    assert len(expected) == VOCAB
    admin = redis_db.client()

    # The first run finds no counts (every word prefetched is absent), the second continues
    # from the first's (every word is present); the reads are counted in the second alone.
    first, _ = run(cluster, conf)
    admin.config_resetstat()
    second, transactions = run(cluster, conf)
    stats = admin.info("commandstats")
    admin.close()

    assert first == dict(expected)
    assert second == {word: 2 * n for word, n in expected.items()}
    reads = sum(stats.get(f"cmdstat_{c}", {"calls": 0})["calls"] for c in ("hget", "hmget"))
    # Per task and transaction: the prefetch's HMGET and the scripts' reads of ns$txid (one
    # HMGET per prepare, two HGETs per commit); a few more for the checkpoint spout's state and
    # for reading the counts at the end. Without the prefetch: one HGET per distinct word per
    # task and transaction, 3,000 at least.
    assert reads <= 8 * PARALLELISM * len(transactions)
    assert reads < VOCAB / 10
