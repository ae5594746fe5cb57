"""The Redis word count with its counter's parallelism from the environment
(``RESCALE_TEST_PARALLELISM``), for child drivers that restart with another one.

Imported by a child driver as ``tests.rescale_topologies`` and by the test as
``rescale_topologies``: it imports the library and the examples only.
"""

from __future__ import annotations

import os

from examples.wordcount import SplitSentence, WordCount
from statefulbolts import Fields, StormTopology, TopologyBuilder
from statefulbolts.connectors import RedisStreamSpout

PARALLELISM_ENV = "RESCALE_TEST_PARALLELISM"


def wordcount() -> StormTopology:
    """sentences (a Redis stream) -> split -> count, count's parallelism from the environment.

    ``WordCount`` has no ``pre_commit``: the driver commits its states itself.
    """
    builder = TopologyBuilder()
    builder.set_spout("sentences", RedisStreamSpout(batch=100), 1)
    builder.set_bolt("split", SplitSentence(), 2).shuffle_grouping("sentences")
    parallelism = int(os.environ.get(PARALLELISM_ENV, "2"))
    builder.set_bolt("count", WordCount(), parallelism).fields_grouping("split", Fields("word"))
    return builder.create_topology()
