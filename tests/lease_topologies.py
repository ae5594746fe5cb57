"""The word count the one-driver tests run as child drivers, over files, with any provider.

``statefulbolts run tests.lease_topologies:wordcount --conf FILE``: the lines of the files in
the directory named by config key ``lease.input.dir`` (``DirectorySpout``: its positions are
saved with the checkpoint, so any durable provider gives exact counts) -> ``split`` ->
``count`` (a stateful bolt, parallelism 2). ``lease.prepare.delay.ms`` makes each PREPARE of a
count task last that long, so that a run lasts long enough for a second driver to meet it.

``corpus`` writes the input, ``expected`` counts it plainly, ``committed`` reads what the store
committed (committed values only: a prepared delta never counts).
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from examples.corpus import sentence, words
from providers import KeyValueState, StateFactory, get_provider
from statefulbolts import (
    BasicBolt,
    DirectorySpout,
    Fields,
    StatefulBolt,
    StormTopology,
    TopologyBuilder,
)
from statefulbolts.namespaces import TaskNamespace, topology_prefix
from statefulbolts.state import committed_items

INPUT_DIR_ENV = "STATEFULBOLTS_LEASE_INPUT"
DELAY_KEY = "lease.prepare.delay.ms"
PARALLELISM = 2


class Split(BasicBolt):
    """A sentence's words, one tuple each."""

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002 - Storm's name
        """Emit each word."""
        for word in words(tuple.get_value(0)):
            collector.emit([word])

    def declare_output_fields(self, declarer: Any) -> None:
        """``word``."""
        declarer.declare(Fields("word"))


class Count(StatefulBolt):
    """Counts words in its state; a PREPARE lasts at least ``lease.prepare.delay.ms``."""

    def prepare(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        """Keep the collector and the delay."""
        self.collector = collector
        self.delay = float(conf.get(DELAY_KEY, 0)) / 1000

    def init_state(self, state: Any) -> None:
        """The counts."""
        self.counts = state

    def execute(self, tuple: Any) -> None:  # noqa: A002 - Storm's name
        """Count the word."""
        word = tuple.get_value(0)
        self.counts.put(word, self.counts.get(word, 0) + 1)
        self.collector.ack(tuple)

    def pre_prepare(self, txid: int) -> None:
        """Hold the PREPARE a little: a slow transaction, for overlapping drivers."""
        if self.delay:
            time.sleep(self.delay)

    def declare_output_fields(self, declarer: Any) -> None:
        """Nothing."""


def wordcount() -> StormTopology:
    """Files (``$STATEFULBOLTS_LEASE_INPUT``) -> split -> count."""
    builder = TopologyBuilder()
    builder.set_spout("lines", DirectorySpout(os.environ[INPUT_DIR_ENV]), 1)
    builder.set_bolt("split", Split(), PARALLELISM).shuffle_grouping("lines")
    builder.set_bolt("count", Count(), PARALLELISM).fields_grouping("split", Fields("word"))
    return builder.create_topology()


def corpus(folder: Path, sentences: int, files: int = 2) -> Path:
    """Write ``sentences`` sentences over ``files`` files in ``folder``; returns ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    for f in range(files):
        lines = [sentence(i) for i in range(f, sentences, files)]
        (folder / f"part-{f}.txt").write_text("".join(f"{line}\n" for line in lines))
    return folder


def expected(sentences: int) -> Counter[str]:
    """A plain count of the words of the first ``sentences`` sentences."""
    counts: Counter[str] = Counter()
    for i in range(sentences):
        counts.update(words(sentence(i)))
    return counts


def committed(conf: Mapping[str, Any], name: str) -> Counter[str]:
    """The counts the store committed for topology ``name``, over every count task it holds."""
    prefix = topology_prefix(name)
    counts: Counter[str] = Counter()
    for namespace in get_provider(conf).namespaces(conf, prefix) or []:
        task = TaskNamespace.parse(prefix, namespace)
        if task is None or task.component != "count" or task.map is not None:
            continue
        state = StateFactory.get_state(namespace, conf)
        assert isinstance(state, KeyValueState)
        counts.update(dict(committed_items(state, conf)))
    return counts
