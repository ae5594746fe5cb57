"""The Redis word count of ``recovery_topologies`` with its counter's parallelism from the
environment (``RESCALE_TEST_PARALLELISM``), for child drivers that restart with another one."""

from __future__ import annotations

import os

from statefulbolts import Fields, StormTopology, TopologyBuilder
from statefulbolts.redis_stream import RedisStreamSpout
from tests.recovery_topologies import CountWordsNoCommitHook, SplitWords

PARALLELISM_ENV = "RESCALE_TEST_PARALLELISM"


def wordcount() -> StormTopology:
    """sentences (a Redis stream) -> split -> count, count's parallelism from the environment."""
    builder = TopologyBuilder()
    builder.set_spout("sentences", RedisStreamSpout(batch=100), 1)
    builder.set_bolt("split", SplitWords(), 2).shuffle_grouping("sentences")
    parallelism = int(os.environ.get(PARALLELISM_ENV, "2"))
    builder.set_bolt("count", CountWordsNoCommitHook(), parallelism).fields_grouping(
        "split", Fields("word")
    )
    return builder.create_topology()
