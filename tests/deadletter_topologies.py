"""Word counts with a poison word, for the dead-letter tests (in process and as child drivers).

``PoisonCount`` counts words like the examples' ``WordCount`` and raises ``ValueError`` on the
word ``poison``, every time, unless the file named by the config key ``FIXED_KEY`` exists: the
bolt "fixed" by a flag a test can set while the topology runs (bolts live in Spark's workers,
which see the same files). ``redis_wordcount`` is the Redis word count of the driver-kill tests
(``RedisStreamSpout`` -> split -> count) with that bolt, for
``statefulbolts run tests.deadletter_topologies:redis_wordcount``.

The transactional word count (``tx_wordcount``: a partitioned memory spout -> split -> partial,
which raises on ``poison`` -> count, a committer) runs in process, and as a child driver
(``tx_words``) for the restart tests.

This module imports no other test module: a child driver imports it as
``tests.deadletter_topologies`` from the repository's root.
"""

from __future__ import annotations

import collections
import json
import os
from collections.abc import Mapping, Sequence
from typing import Any

from examples.corpus import sentence, words
from examples.wordcount import SplitSentence, WordCount
from statefulbolts import (
    BaseTransactionalBolt,
    BasicBolt,
    Committer,
    Fields,
    MemoryTransactionalSpout,
    StormTopology,
    TopologyBuilder,
    TransactionalMap,
    TransactionalTopology,
    TransactionalTopologyBuilder,
)
from statefulbolts.connectors import RedisStreamSpout

POISON = "poison"
POISON_SENTENCE = "the poison pill stops the count"
FIXED_KEY = "deadletter.fixed.file"


class PoisonCount(WordCount):
    """Counts words; raises ``ValueError`` on ``poison`` unless the "fixed" file exists."""

    def prepare(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        super().prepare(conf, context, collector)
        self.fixed = conf.get(FIXED_KEY)

    def execute(self, tuple: Any) -> None:  # noqa: A002
        word = tuple.get_value(0)
        if word == POISON and not (self.fixed and os.path.exists(self.fixed)):
            msg = f"cannot count {word!r}"
            raise ValueError(msg)
        super().execute(tuple)


def sentences(n: int, poisoned: Sequence[int]) -> list[str]:
    """``n`` corpus sentences, those at ``poisoned`` replaced by ``POISON_SENTENCE``."""
    return [POISON_SENTENCE if i in poisoned else sentence(i) for i in range(n)]


def counts(lines: Sequence[str]) -> collections.Counter[str]:
    """A plain Python count of the words of ``lines``."""
    total: collections.Counter[str] = collections.Counter()
    for line in lines:
        total.update(words(line))
    return total


def wordcount(spout: Any, parallelism: int = 2) -> StormTopology:
    """``sentences`` (``spout``) -> ``split`` -> ``count`` (``PoisonCount``)."""
    builder = TopologyBuilder()
    builder.set_spout("sentences", spout, 1)
    builder.set_bolt("split", SplitSentence(), parallelism).shuffle_grouping("sentences")
    builder.set_bolt("count", PoisonCount(), parallelism).fields_grouping("split", Fields("word"))
    return builder.create_topology()


def redis_wordcount() -> StormTopology:
    """The Redis word count with the poison bolt: stream and server from the config."""
    return wordcount(RedisStreamSpout(batch=100))


# ------------------------------------------------------------------ transactional word count
TX_LOG_KEY = "deadletter.log.file"
TRANSACTIONAL_ID = "dl-words"


def _append(path: str | None, **line: Any) -> None:
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


class SplitWords(BaseTransactionalBolt):
    """Emits each word of a sentence while executing it (its emits inherit the lineage).

    With the config key ``TX_LOG_KEY`` naming a file, logs each sentence it executes with its
    txid, attempt and lineage (its place in the emission): what each attempt of a batch held.
    """

    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.collector, self.attempt, self.log = collector, id, conf.get(TX_LOG_KEY)

    def execute(self, tuple: Any) -> None:  # noqa: A002
        line = tuple.get_value(1)
        _append(
            self.log,
            txid=self.attempt.transaction_id,
            attempt=self.attempt.attempt_id,
            sentence=line,
            lineage=tuple._root,
        )
        for word in words(line):
            self.collector.emit([self.attempt, word])

    def finish_batch(self) -> None:
        """Nothing: every word went out in ``execute``."""

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "word"))


class BasicSplitWords(BasicBolt):
    """The same split as a ``BasicBolt`` (its emits are anchored to the sentence)."""

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        for word in words(tuple.get_value(1)):
            collector.emit([tuple.get_value(0), word])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "word"))


class PartialCount(BaseTransactionalBolt):
    """Counts a batch's words (raising on ``poison``, unless fixed); emits them at its end."""

    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.collector, self.attempt = collector, id
        self.fixed = conf.get(FIXED_KEY)
        self.counts: collections.Counter[str] = collections.Counter()

    def execute(self, tuple: Any) -> None:  # noqa: A002
        word = tuple.get_value(1)
        if word == POISON and not (self.fixed and os.path.exists(self.fixed)):
            msg = f"cannot count {word!r}"
            raise ValueError(msg)
        self.counts[word] += 1

    def finish_batch(self) -> None:
        for word, n in sorted(self.counts.items()):
            self.collector.emit([self.attempt, word, n])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "word", "count"))


class SumCommitter(BaseTransactionalBolt, Committer):
    """Adds the partial counts to a ``TransactionalMap`` of word -> count (exactly once)."""

    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.attempt = id
        self.counts: collections.Counter[str] = collections.Counter()
        self.words = TransactionalMap(context.backing_map())

    def execute(self, tuple: Any) -> None:  # noqa: A002
        self.counts[tuple.get_value(1)] += tuple.get_value(2)

    def finish_batch(self) -> None:
        keys = sorted(self.counts)
        adds = [_adding(self.counts[k]) for k in keys]
        self.words.multi_update(self.attempt, keys, adds)

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id"))


def _adding(n: int) -> Any:
    return lambda old: (old or 0) + n


def partitions(count: int, per_partition: int, poisoned: tuple[int, int]) -> dict[int, list[Any]]:
    """``count`` partitions of corpus sentences, the one at ``(partition, row)`` poisoned."""
    return {
        p: [
            [POISON_SENTENCE if (p, r) == poisoned else sentence(p * per_partition + r)]
            for r in range(per_partition)
        ]
        for p in range(count)
    }


def tx_wordcount(
    data: dict[int, list[Any]],
    take: int,
    *,
    split: str = "batch",
    transactional_id: str = TRANSACTIONAL_ID,
) -> TransactionalTopology:
    """spout -> split (batch or basic bolt) -> partial (raises on poison) -> count (committer)."""
    spout = MemoryTransactionalSpout(data, ["sentence"], take)
    builder = TransactionalTopologyBuilder(transactional_id, "spout", spout, 2)
    splitter = SplitWords() if split == "batch" else BasicSplitWords()
    builder.set_bolt("split", splitter, 2).shuffle_grouping("spout")
    builder.set_bolt("partial", PartialCount(), 2).fields_grouping("split", Fields("word"))
    builder.set_committer_bolt("count", SumCommitter(), 2).fields_grouping(
        "partial", Fields("word")
    )
    return builder.build_topology()


TX_PARTITIONS, TX_PER_PARTITION, TX_TAKE, TX_POISONED = 3, 8, 2, (1, 5)


def tx_data() -> dict[int, list[Any]]:
    """The corpus of the child driver: 3 partitions of 8 sentences, one poisoned."""
    return partitions(TX_PARTITIONS, TX_PER_PARTITION, TX_POISONED)


def tx_words() -> TransactionalTopology:
    """What the transactional child driver runs."""
    return tx_wordcount(tx_data(), TX_TAKE)
