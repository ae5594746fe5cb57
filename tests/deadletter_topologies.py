"""Word counts with a poison word, for the dead-letter tests (in process and as child drivers).

``PoisonCount`` counts words like the examples' ``WordCount`` and raises ``ValueError`` on the
word ``poison``, every time, unless the file named by the config key ``FIXED_KEY`` exists: the
bolt "fixed" by a flag a test can set while the topology runs (bolts live in Spark's workers,
which see the same files). ``redis_wordcount`` is the Redis word count of the driver-kill tests
(``RedisStreamSpout`` -> split -> count) with that bolt, for
``statefulbolts run tests.deadletter_topologies:redis_wordcount``.

This module imports no other test module: a child driver imports it as
``tests.deadletter_topologies`` from the repository's root.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Mapping, Sequence
from typing import Any

from examples.corpus import sentence, words
from examples.wordcount import SplitSentence, WordCount
from statefulbolts import Fields, StormTopology, TopologyBuilder
from statefulbolts.redis_stream import RedisStreamSpout

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
