"""Metrics a component registers in its tasks (``statefulbolts.metrics``): taken at a task's end,
added up per component in the driver, shown on the dashboard and to Prometheus.

Run on the inline engine (every task in this process, the same task code as on Spark): a bolt
counts the words it sees, a spout emits a known number of sentences, so the sum is exact.
"""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from examples.corpus import sentence
from examples.wordcount import SentenceSpout
from statefulbolts import BasicBolt, Fields, LocalCluster, TopologyBuilder
from statefulbolts.metrics import CountMetric, check_metric_name
from statefulbolts.testing import make_context


class CountingSplit(BasicBolt):
    """Splits sentences and counts the words in a registered metric."""

    def prepare(self, conf: Any, context: Any) -> None:
        self.words = context.register_metric("words_split", CountMetric())

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        for word in tuple.get_value(0).split():
            collector.emit([word])
            self.words.incr()

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word"))


def test_a_task_takes_each_metric_once_and_leaves_out_those_at_zero() -> None:
    context = make_context("split")
    a = context.register_metric("a_total", CountMetric())
    context.register_metric("idle", CountMetric())
    a.incr(2.5)
    assert context.take_metric_values() == (("a_total", 2.5),)
    assert context.take_metric_values() == ()


@pytest.mark.parametrize("name", ["", "Words", "9lives", "a-b", "a.b", 3])
def test_a_metric_name_is_lowercase_words(name: Any) -> None:
    with pytest.raises(ValueError, match="a metric name is lowercase"):
        check_metric_name(name)
    with pytest.raises(ValueError, match="a metric name is lowercase"):
        make_context("split").register_metric(name, CountMetric())


def test_a_registered_metric_is_summed_over_tasks_and_reaches_prometheus() -> None:
    builder = TopologyBuilder()
    builder.set_spout("sentences", SentenceSpout(30), 1)
    builder.set_bolt("split", CountingSplit(), 3).shuffle_grouping("sentences")
    words = sum(len(sentence(i).split()) for i in range(30))
    with LocalCluster(engine="inline") as cluster:
        handle = cluster.submit_topology("metrics", {}, builder.create_topology())
        handle.await_idle(60)
        counted = handle.metrics()["components"]["split"]["metric.words_split"]
        from statefulbolts.ui import TopologyCollector  # the dashboard's optional dependency
        from statefulbolts.ui._snapshot import snapshot  # the dashboard's page model

        runner = handle._runner
        registry = CollectorRegistry()
        registry.register(TopologyCollector(runner.observe, ["sentences", "split"]))
        families = {
            f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())
        }
        rows = {row["id"]: row for row in snapshot(runner.observe(), [], None)["components"]}
        handle.kill()
    assert rows["split"]["metrics"] == {"words_split": words}
    assert rows["sentences"]["metrics"] == {}
    assert counted == words
    [sample] = [
        s for s in families["statefulbolts_words_split"].samples if s.name.endswith("_total")
    ]
    assert (sample.labels, sample.value) == ({"topology": "metrics", "component": "split"}, words)
