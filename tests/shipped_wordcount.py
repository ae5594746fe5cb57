"""A user's own word count module, as a user writes it next to their job: for the cluster tests.

``tests/cli/test_cluster_submit.py`` copies this file into a temporary folder under another name
(``my_wordcount.py``) and runs ``statefulbolts run my_wordcount:topology`` there under
``spark-submit``: the executors cannot import it, so it must be shipped; it imports
``examples.corpus``, which must be shipped too. Its classes are its own (not the example's).
"""

from __future__ import annotations

from typing import Any

from examples.corpus import sentence, words
from statefulbolts import BasicBolt, Fields, Spout, StatefulBolt, TopologyBuilder

SENTENCES = 600


class Lines(Spout):
    """Sentences ``0 .. SENTENCES-1`` once each; replays what fails."""

    def open(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector, self.next, self.replay = collector, 0, []

    def next_tuple(self) -> None:
        if self.replay:
            i = self.replay.pop()
        elif self.next < SENTENCES:
            i, self.next = self.next, self.next + 1
        else:
            return
        self.collector.emit([sentence(i)], message_id=i)

    def fail(self, msg_id: Any) -> None:
        self.replay.append(msg_id)

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("sentence"))


class Split(BasicBolt):
    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        for word in words(tuple.get_value(0)):
            collector.emit([word])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word"))


class Count(StatefulBolt):
    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def init_state(self, state: Any) -> None:
        self.counts = state

    def execute(self, tuple: Any) -> None:  # noqa: A002
        word = tuple.get_value(0)
        self.counts.put(word, self.counts.get(word, 0) + 1)
        self.collector.ack(tuple)


def topology() -> Any:
    builder = TopologyBuilder()
    builder.set_spout("sentences", Lines())
    builder.set_bolt("split", Split(), 2).shuffle_grouping("sentences")
    builder.set_bolt("count", Count(), 2).fields_grouping("split", Fields("word"))
    return builder.create_topology()
