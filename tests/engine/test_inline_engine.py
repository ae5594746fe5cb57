"""Both protocols end to end on the inline engine: no SparkSession, every job in this process.

The protocols' runners take ``engine="inline"`` (``LocalCluster(engine="inline")``): the same
jobs, task code and state as on Spark, run one after another in the test's process.
"""

from __future__ import annotations

import sys
import time
from typing import Any

import pytest

from examples.transactional_global_count import DATA, GLOBAL_KEY
from examples.transactional_global_count import build as build_global_count
from examples.wordcount import SentenceSpout, WordCount, expected_counts
from examples.wordcount import build as build_wordcount
from statefulbolts import BasicBolt, Fields, LocalCluster, TopologyBuilder, TopologyHandle
from statefulbolts.errors import ConfigError, TopologyError
from statefulbolts.runtime import InlineEngine, open_engine

FAST = {"topology.state.checkpoint.interval.ms": 1}


def _finished(handle: TopologyHandle) -> TopologyHandle:
    handle.await_idle(60)
    return handle


def test_a_checkpointed_word_count_counts_every_word_exactly_once() -> None:
    infos: list[Any] = []
    with LocalCluster(engine="inline") as cluster:
        handle = cluster.submit_topology(
            "wc-inline", FAST, build_wordcount(200), on_transaction=infos.append
        )
        counts = _finished(handle).read_state("count")
        metrics = handle.metrics()["components"]
    assert counts == dict(expected_counts(200))
    assert metrics["sentences"]["emitted"] == 200
    assert metrics["split"]["executed"] == 200
    assert metrics["count"]["executed"] == sum(expected_counts(200).values())
    assert {info.action for info in infos} >= {"PREPARE", "COMMIT"}
    assert all(info.ok for info in infos)


def test_a_transactional_global_count_commits_each_batch_once() -> None:
    committed: list[int] = []

    def on_transaction(info: Any) -> None:
        if info.ok and info.action == "COMMIT" and info.tuples:
            committed.append(info.tuples)

    conf = {**FAST, "topology.max.spout.pending": 3}
    with LocalCluster(engine="inline") as cluster:
        handle = cluster.submit_topology(
            "count-inline",
            conf,
            # An id of its own: the in-memory store outlives the test, and the example's
            # own test (on Spark, same process) expects "global-count" to start from nothing.
            build_global_count(transactional_id="global-count-inline"),
            on_transaction=on_transaction,
        )
        state = _finished(handle).read_state("sum")
    expected = sum(len(rows) for rows in DATA.values())
    assert state == {GLOBAL_KEY: expected}
    assert sum(committed) == expected


def test_the_inline_engine_needs_no_spark_session() -> None:
    # In the whole suite the shared Spark session may already be up: the inline run must
    # neither start one nor touch the one there is.
    before = _active_context()
    with LocalCluster(engine="inline") as cluster:
        assert cluster.spark is None
        handle = cluster.submit_topology("no-spark", FAST, build_wordcount(5))
        assert _finished(handle).read_state("count") == dict(expected_counts(5))
    assert _active_context() is before


def _active_context() -> object | None:
    """The process's SparkContext, if pyspark was imported and started one."""
    if "pyspark" not in sys.modules:
        return None
    from pyspark import SparkContext

    return SparkContext._active_spark_context


def test_a_transactional_word_and_bucket_count_matches_a_plain_count() -> None:
    from examples.transactional_words import DATA as WORDS
    from examples.transactional_words import build as build_words
    from examples.transactional_words import expected

    with LocalCluster(engine="inline") as cluster:
        handle = cluster.submit_topology("words-inline", FAST, build_words())
        _finished(handle)
        stored, buckets = handle.read_state("count"), handle.read_state("buckets")
    counts = {word: value[0] for word, value in stored.items()}  # (count, count before)
    assert (counts, buckets) == expected(WORDS)


def test_open_engine_names_the_engines_it_knows() -> None:
    assert isinstance(open_engine("inline", None, build_wordcount(1), "wc", {}), InlineEngine)
    with pytest.raises(ConfigError, match=r"unknown engine 'flink' for topology 'wc'.*'inline'"):
        open_engine("flink", None, build_wordcount(1), "wc", {})
    with pytest.raises(TopologyError, match="needs a SparkSession.*engine='inline'"):
        open_engine("spark", None, build_wordcount(1), "wc", {})


def test_a_cluster_refuses_an_unknown_engine_before_anything_starts() -> None:
    with pytest.raises(ConfigError, match=r"LocalCluster: unknown engine 'lcoal'.*'spark'"):
        LocalCluster(engine="lcoal")


class _Sleepy(BasicBolt):
    """Sleeps ``SLEEP_S`` on its first tuple of each task: a job of at least that long."""

    def prepare(self, conf: Any, context: Any) -> None:
        self.slept = False

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002 - Storm's name
        if not self.slept:
            time.sleep(SLEEP_S)
            self.slept = True
        collector.emit([tuple.get_value(0)])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("sentence"))


SLEEP_S = 0.3


def test_a_transaction_reports_the_wall_time_of_its_job() -> None:
    """The PREPARE that carried every sentence took at least the sleep (it was shown 0.00 s)."""
    builder = TopologyBuilder()
    builder.set_spout("sentences", SentenceSpout(20), 1)
    builder.set_bolt("sleepy", _Sleepy(), 1).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(), 1).shuffle_grouping("sleepy")
    infos: list[Any] = []
    with LocalCluster(engine="inline") as cluster:
        handle = cluster.submit_topology(
            "wc-timed", FAST, builder.create_topology(), on_transaction=infos.append
        )
        _finished(handle)
    [prepare] = [info for info in infos if info.action == "PREPARE" and info.tuples]
    assert prepare.seconds >= SLEEP_S
