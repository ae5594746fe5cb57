"""``Spout.durable_source``, and the warning at submit when a spout may count twice after a restart.

The README tour's spout keeps what it sent in memory: with state in a durable provider, a
restarted driver's copy of it starts over and its sentences are counted again on top of the
committed counts. ``LocalCluster.submit_topology`` says so (``SpoutReplayWarning``) for every
spout that does not declare ``durable_source = True``; with the driver's own in-memory state, or
with spouts that keep their place, it says nothing.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from examples.wordcount import SentenceSpout, SplitSentence, WordCount, build
from providers import load_module
from statefulbolts import (
    DirectorySpout,
    Fields,
    LocalCluster,
    PartitionedRedisStreamSpout,
    PartitionedSpout,
    Spout,
    SpoutReplayWarning,
    StormTopology,
    TopologyBuilder,
)
from statefulbolts.connectors import RedisStreamSpout
from statefulbolts.connectors.kafka import KafkaSpout

SQLITE = "sqlite_state.SqliteKeyValueStateProvider"


@pytest.fixture
def sqlite(tmp_path: Path) -> Any:
    """A durable store (it keeps leases) of the test's own, closed after it."""
    yield {
        "topology.state.provider": SQLITE,
        "topology.state.provider.config": {"path": str(tmp_path / "state.sqlite3")},
    }
    load_module("sqlite_state").close_connections()


class ResumingSentences(SentenceSpout):
    """Says it resumes where the committed counts left off (what it declares is all we read)."""

    durable_source = True


class ForgetfulSentences(SentenceSpout):
    durable_source = False


def _submit(conf: dict[str, Any], topology: Any) -> list[str]:
    """The ``SpoutReplayWarning`` texts of submitting ``topology`` under ``conf`` (inline)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with LocalCluster(engine="inline") as cluster:
            cluster.submit_topology("wc", conf, topology).kill()
    return [str(w.message) for w in caught if issubclass(w.category, SpoutReplayWarning)]


def _with_spout(spout: Spout) -> StormTopology:
    """The word count of ``examples.wordcount`` over ``spout``."""
    builder = TopologyBuilder()
    builder.set_spout("sentences", spout)
    builder.set_bolt("split", SplitSentence()).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount()).fields_grouping("split", Fields("word"))
    return builder.create_topology()


def test_the_tours_spout_on_a_durable_store_is_warned_of_at_submit(sqlite: Any) -> None:
    assert _submit(sqlite, build(5)) == [
        "topology 'wc': spout 'sentences' (examples.wordcount.SentenceSpout) does not declare "
        f"durable_source = True, and the state provider {SQLITE} keeps the counts across a "
        "driver restart: after one, what the spout emits again is counted again. Read a source "
        "that keeps its place (RedisStreamSpout, DirectorySpout, KafkaSpout), or make the spout "
        "resume after what its acks saw committed and set durable_source = True "
        "(docs/getting-started.md, 'A durable spout')"
    ]


def test_a_spout_that_says_it_cannot_replay_is_named_as_such(sqlite: Any) -> None:
    [warning] = _submit(sqlite, _with_spout(ForgetfulSentences(5)))
    assert f"({__name__}.ForgetfulSentences) declares durable_source = False, and" in warning


def test_a_durable_spout_or_in_memory_state_is_not_warned_of(sqlite: Any) -> None:
    assert _submit(sqlite, _with_spout(ResumingSentences(5))) == []
    assert _submit({}, build(5)) == []  # the driver's own state dies with it: no restart


def test_the_spouts_that_keep_their_place_declare_it() -> None:
    assert Spout.durable_source is None
    assert SentenceSpout.durable_source is None
    for spout in (PartitionedSpout, DirectorySpout, PartitionedRedisStreamSpout, KafkaSpout):
        assert spout.durable_source is True, spout
    assert RedisStreamSpout.durable_source is True
