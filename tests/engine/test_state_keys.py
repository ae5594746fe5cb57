"""State size history: each stateful component's committed keys, counted after commits.

``StateKeyCounter`` on its own (a manual clock, real providers), then both runners on the
inline engine: the history they keep (``Stats.key_counts``) holds exact key counts.
"""

from __future__ import annotations

import json
import socket
import time
import uuid
from typing import Any

import pytest

from examples.transactional_words import DATA as WORDS
from examples.transactional_words import build as build_words
from examples.wordcount import build as build_wordcount
from examples.wordcount import expected_counts
from providers import (
    STATE_PROVIDER_CONFIG_KEY,
    STATE_PROVIDER_KEY,
    InMemoryKeyValueStateProvider,
    StateFactory,
    StateProvider,
    get_provider,
)
from statefulbolts import LocalCluster, TopologyHandle
from statefulbolts.clock import ManualClock
from statefulbolts.runtime import StateKeyCounter, Stats

INTERVAL = "topology.state.size.interval.ms"


def _commit(namespace: str, keys: list[str], conf: dict[str, Any] | None = None) -> None:
    state = StateFactory.get_state(namespace, conf or {})
    for key in keys:
        state.put(key, 1)
    state.commit()


def _history(stats: Stats, component: str) -> list[tuple[int, int | None]]:
    return [(k.txid, k.keys) for k in stats.key_counts().get(component, [])]


@pytest.fixture
def topology() -> Any:
    name = f"keys-{uuid.uuid4().hex[:8]}"
    yield name
    InMemoryKeyValueStateProvider.drop(f"{name}/")


def test_counts_are_sums_over_a_components_namespaces(topology: str) -> None:
    _commit(f"{topology}/count-0", ["a", "b"])
    _commit(f"{topology}/count-1", ["c"])
    _commit(f"{topology}/other-0", ["x", "y", "z"])
    groups = {"count": [f"{topology}/count-0", f"{topology}/count-1"], "empty": []}
    counter = StateKeyCounter(
        Stats(), ManualClock(), 1000, InMemoryKeyValueStateProvider(), {}, lambda: groups
    )
    assert counter.count() == {"count": 3, "empty": 0}


def test_a_commit_within_the_interval_is_counted_when_it_has_passed(topology: str) -> None:
    clock, stats = ManualClock(), Stats()
    namespace = f"{topology}/count-0"
    counter = StateKeyCounter(
        stats, clock, 1000, InMemoryKeyValueStateProvider(), {}, lambda: {"count": [namespace]}
    )
    counter.tick()  # nothing committed yet: nothing to count
    assert _history(stats, "count") == []
    _commit(namespace, ["a"])
    counter.committed(1)  # the first count runs at once
    _commit(namespace, ["b"])
    counter.committed(2)
    _commit(namespace, ["c"])
    counter.committed(3)  # 2 and 3 within the interval: only the latest waits
    clock.advance(999)
    counter.tick()
    assert _history(stats, "count") == [(1, 1)]
    clock.advance(1)
    counter.tick()
    counter.tick()  # counted: nothing waits any more
    assert _history(stats, "count") == [(1, 1), (3, 3)]
    clock.advance(5000)
    counter.tick()
    assert _history(stats, "count") == [(1, 1), (3, 3)]
    _commit(namespace, ["d"])
    counter.committed(4)  # the last count is old: at once
    assert _history(stats, "count") == [(1, 1), (3, 3), (4, 4)]


def test_an_interval_of_zero_counts_after_every_commit(topology: str) -> None:
    stats, namespace = Stats(), f"{topology}/count-0"
    counter = StateKeyCounter(
        stats, ManualClock(), 0, InMemoryKeyValueStateProvider(), {}, lambda: {"c": [namespace]}
    )
    for txid, key in enumerate("abc", start=1):
        _commit(namespace, [key])
        counter.committed(txid)
    assert _history(stats, "c") == [(1, 1), (2, 2), (3, 3)]


class _Countless(StateProvider):
    """A provider that keeps no states and cannot count them."""

    def new_state(self, namespace: str, conf: Any, context: Any = None) -> Any:
        raise NotImplementedError


def test_a_provider_that_cannot_count_gives_unknown_not_zero() -> None:
    stats = Stats()
    counter = StateKeyCounter(stats, ManualClock(), 0, _Countless(), {}, lambda: {"c": ["x/c-0"]})
    counter.committed(1)
    assert _history(stats, "c") == [(1, None)]
    # Namespaces that cannot be listed are unknown too, whatever the provider counts.
    counter = StateKeyCounter(
        stats, ManualClock(), 0, InMemoryKeyValueStateProvider(), {}, lambda: {"d": None}
    )
    counter.committed(2)
    assert _history(stats, "d") == [(2, None)]


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_a_count_the_store_fails_is_left_out_and_tried_again_after_the_interval(
    caplog: pytest.LogCaptureFixture,
) -> None:
    pool = {"host": "127.0.0.1", "port": _closed_port(), "timeout": 500}
    conf = {
        STATE_PROVIDER_KEY: "providers.redis.RedisKeyValueStateProvider",
        STATE_PROVIDER_CONFIG_KEY: json.dumps({"jedisPoolConfig": pool}),
    }
    clock, stats = ManualClock(), Stats()
    counter = StateKeyCounter(
        stats, clock, 1000, get_provider(conf), conf, lambda: {"count": ["down/count-0"]}
    )
    counter.committed(7)
    assert _history(stats, "count") == []
    assert "state size after txid 7 not counted (tried again later)" in caplog.text
    assert f"127.0.0.1:{pool['port']}" in caplog.text
    caplog.clear()
    counter.tick()  # within the interval: not tried again
    assert caplog.text == ""
    clock.advance(1000)
    counter.tick()
    assert "state size after txid 7 not counted" in caplog.text


# ----------------------------------------------------------------------------- the runners
FAST = {"topology.state.checkpoint.interval.ms": 1}


def _finished(handle: TopologyHandle) -> TopologyHandle:
    handle.await_idle(60)
    return handle


def test_the_checkpoint_runner_counts_after_every_commit() -> None:
    name = f"keys-wc-{uuid.uuid4().hex[:8]}"
    commits: list[int] = []

    def on_transaction(info: Any) -> None:
        if info.ok and info.action == "COMMIT":
            commits.append(info.txid)

    with LocalCluster(engine="inline") as cluster:
        handle = cluster.submit_topology(
            name, {**FAST, INTERVAL: 0}, build_wordcount(200), on_transaction=on_transaction
        )
        counts = _finished(handle).read_state("count")
        history = handle.runner.stats.key_counts()
    InMemoryKeyValueStateProvider.drop(f"{name}/")
    assert counts == dict(expected_counts(200))
    # One count per COMMIT, in order; only the stateful bolt has a size.
    assert list(history) == ["count"]
    assert [k.txid for k in history["count"]] == commits
    assert history["count"][-1].keys == len(counts)
    sizes = [k.keys for k in history["count"]]
    assert sizes == sorted(sizes) and all(isinstance(n, int) for n in sizes)


def test_the_transactional_runner_counts_each_committers_maps() -> None:
    tid = f"keys-words-{uuid.uuid4().hex[:8]}"
    with LocalCluster(engine="inline") as cluster:
        handle = cluster.submit_topology(
            tid,
            {**FAST, INTERVAL: 0, "topology.max.spout.pending": 3},
            build_words(transactional_id=tid),
        )
        words = _finished(handle).read_map("count")
        buckets = handle.read_map("buckets")
        history = handle.runner.stats.key_counts()
    InMemoryKeyValueStateProvider.drop(f"$transactional/{tid}/")
    assert set(words) == {row[0] for rows in WORDS.values() for row in rows}
    # "count" is the committer; "buckets", downstream of it, keeps a map too.
    assert sorted(history) == ["buckets", "count"]
    assert history["count"][-1].keys == len(words) == 5
    assert history["buckets"][-1].keys == len(buckets) == 1
    committed = [k.txid for k in history["count"]]
    assert committed == sorted(set(committed)) and len(committed) >= len(WORDS)


def test_by_default_the_last_commit_is_counted_within_an_interval() -> None:
    name = f"keys-default-{uuid.uuid4().hex[:8]}"
    with LocalCluster(engine="inline") as cluster:
        handle = cluster.submit_topology(name, FAST, build_wordcount(50))
        counts = _finished(handle).read_state("count")
        runner = handle.runner
        final = runner.status()["checkpoint"]
        committed = int(final.removeprefix("COMMITTED(").removesuffix(")"))
        # Idle now; the loop counts the last commit once the interval (1 s) has passed.
        last = _wait_for_count(runner.stats, "count", committed, timeout=30)
    InMemoryKeyValueStateProvider.drop(f"{name}/")
    assert last.keys == len(counts)


def _wait_for_count(stats: Stats, component: str, txid: int, timeout: float) -> Any:
    """The count after ``txid``, once the runner's loop has taken it."""
    deadline = time.monotonic() + timeout
    while True:
        kept = stats.key_counts().get(component) or []
        found = kept[-1] if kept else None
        if found is not None and found.txid == txid:
            return found
        if time.monotonic() > deadline:
            msg = f"the count after txid {txid} never came (last: {found})"
            raise AssertionError(msg)
        time.sleep(0.02)
