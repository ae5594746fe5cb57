"""End to end on local Spark: the stateful word count gives exact counts, acks and metrics."""

from __future__ import annotations

import collections
from typing import Any

import pytest
import topologies as topo

from examples.wordcount import build, expected_counts

pytestmark = pytest.mark.spark

SENTENCES = 120
CONF = {"topology.state.checkpoint.interval.ms": 100}
TIMEOUT = 60


def _commit_watcher(name: str, component: str, parallelism: int) -> tuple[list[Any], Any]:
    """An ``on_transaction`` callback noting each task's state image right after each COMMIT."""
    seen: list[tuple[int, list[tuple[int | None, int | None]]]] = []

    def on_transaction(info: Any) -> None:
        if info.action == "COMMIT" and info.ok:
            seen.append((info.txid, [topo.image(name, component, t) for t in range(parallelism)]))

    return seen, on_transaction


def _assert_transaction_chain(transactions: list[dict[str, Any]], tuples: int) -> list[int]:
    """INITSTATE(-1), then PREPARE(t) / COMMIT(t) for t = 0, 1, ...; all ok. Returns the txids."""
    assert all(t["ok"] for t in transactions), transactions
    actions = [(t["action"], t["txid"]) for t in transactions]
    assert actions[0] == ("INITSTATE", -1)
    commits = [txid for action, txid in actions if action == "COMMIT"]
    assert commits == list(range(len(commits)))
    assert len(commits) >= 1
    assert actions[1:] == [pair for t in commits for pair in (("PREPARE", t), ("COMMIT", t))]
    assert sum(t["tuples"] for t in transactions if t["action"] == "PREPARE") == tuples
    return commits


@pytest.mark.parametrize("parallelism", [1, 2, 3])
def test_wordcount_exact_counts_acks_and_metrics(cluster: Any, parallelism: int) -> None:
    name = topo.new_key(f"wc-p{parallelism}")
    seen, on_transaction = _commit_watcher(name, "count", parallelism)
    topology = topo.wordcount(name, SENTENCES, parallelism)
    handle = cluster.submit_topology(name, CONF, topology, on_transaction=on_transaction)
    try:
        handle.await_idle(TIMEOUT)
        counts = handle.read_state("count")
        metrics = handle.metrics()
    finally:
        handle.kill()

    expected = expected_counts(SENTENCES)
    words = sum(expected.values())
    assert counts == dict(expected)

    # The spout: every sentence emitted once, acked exactly once, never failed.
    rec = topo.record(name)
    once = collections.Counter(range(SENTENCES))
    assert rec.emits == once
    assert rec.acks == once
    assert rec.fails == collections.Counter()

    comps = metrics["components"]
    assert comps["sentences"]["emitted"] == SENTENCES
    assert comps["sentences"]["acked"] == SENTENCES
    assert comps["sentences"].get("failed", 0) == 0
    assert {k: comps["split"][k] for k in ("executed", "emitted", "acked", "failed")} == {
        "executed": SENTENCES,
        "emitted": words,
        "acked": SENTENCES,
        "failed": 0,
    }
    # WordCount emits (word, count) per word if it declares a stream, else nothing (a sink).
    count_emits = "default" in topology.component("count").outputs
    assert {k: comps["count"][k] for k in ("executed", "emitted", "acked", "failed")} == {
        "executed": words,
        "emitted": words if count_emits else 0,
        "acked": words,
        "failed": 0,
    }
    assert metrics["errors"] == []

    commits = _assert_transaction_chain(metrics["transactions"], SENTENCES)
    # After every COMMIT(t) every task's image is committed at t with no prepared data left.
    assert [txid for txid, _ in seen] == commits
    for txid, images in seen:
        assert images == [(txid, None)] * parallelism, (txid, images)


def test_example_build_unchanged_is_exact(cluster: Any) -> None:
    """``examples.wordcount.build`` itself (default parallelism 2), as a user would run it."""
    name = topo.new_key("wc-example")
    seen, on_transaction = _commit_watcher(name, "count", 2)
    handle = cluster.submit_topology(name, CONF, build(SENTENCES), on_transaction=on_transaction)
    try:
        handle.await_idle(TIMEOUT)
        counts = handle.read_state("count")
        metrics = handle.metrics()
        spout = handle.runner.spouts.tasks[0].spout
        pending, replay = set(spout.pending), list(spout.replay)
    finally:
        handle.kill()

    assert counts == dict(expected_counts(SENTENCES))
    assert pending == set()
    assert replay == []
    sentences = metrics["components"]["sentences"]
    assert (sentences["emitted"], sentences["acked"], sentences.get("failed", 0)) == (
        SENTENCES,
        SENTENCES,
        0,
    )
    commits = _assert_transaction_chain(metrics["transactions"], SENTENCES)
    assert seen == [(t, [(t, None), (t, None)]) for t in commits]


def test_wordcount_with_several_acker_partitions(cluster: Any) -> None:
    """``topology.acker.executors = 3``: the XOR reduce runs over three partitions."""
    name = topo.new_key("wc-ackers")
    conf = {**CONF, "topology.acker.executors": 3}
    handle = cluster.submit_topology(name, conf, topo.wordcount(name, SENTENCES, 2))
    try:
        handle.await_idle(TIMEOUT)
        counts = handle.read_state("count")
        metrics = handle.metrics()
    finally:
        handle.kill()

    assert counts == dict(expected_counts(SENTENCES))
    rec = topo.record(name)
    assert rec.acks == collections.Counter(range(SENTENCES))
    assert rec.fails == collections.Counter()
    _assert_transaction_chain(metrics["transactions"], SENTENCES)
