"""State TTL through the checkpoint protocol, on the inline engine with a manual clock.

Each transaction's timestamp is the clock's time when the checkpoint spout started it, so a
word count whose words expire 10 s after their last count expires them exactly; and a
transaction that failed and is replayed later keeps its first timestamp, so it expires exactly
the keys the first attempt would have.
"""

from __future__ import annotations

import collections
import threading
import time
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from providers import InMemoryKeyValueStateProvider
from statefulbolts import Fields, LocalCluster, Spout, StatefulBolt, TopologyBuilder
from statefulbolts.clock import ManualClock
from statefulbolts.errors import TopologyError
from statefulbolts.keygroups import KeyGroups
from statefulbolts.runtime import TransactionInfo

START_MS = 1_000_000
# Words the test hands to the running spout, per topology name (the spout runs in this process).
FEEDS: dict[str, collections.deque[str]] = {}
LOCK = threading.Lock()


class FeedSpout(Spout):
    """Emits the words the test feeds it, each with a message id; replays on ``fail`` unless
    told not to (then a failed transaction's replay carries only what is fed after it).
    """

    def __init__(self, feed: str, replays: bool = True) -> None:
        self.feed, self.replays = feed, replays

    def open(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        self.collector, self.n, self.replay = collector, 0, collections.deque[Any]()
        self.sent: dict[int, str] = {}

    def next_tuple(self) -> None:
        if self.replay:
            msg_id = self.replay.popleft()
        else:
            with LOCK:
                if not FEEDS[self.feed]:
                    return
                word = FEEDS[self.feed].popleft()
            self.n += 1
            msg_id, self.sent[self.n] = self.n, word
        self.collector.emit([self.sent[msg_id]], message_id=msg_id)

    def ack(self, msg_id: Any) -> None:
        self.sent.pop(msg_id, None)

    def fail(self, msg_id: Any) -> None:
        if self.replays:
            self.replay.append(msg_id)

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word"))


class Count(StatefulBolt):
    """Counts words in its state."""

    def __init__(self, own_conf: Mapping[str, Any] | None = None) -> None:
        self.own_conf = own_conf

    def get_component_configuration(self) -> Mapping[str, Any] | None:
        return self.own_conf

    def prepare(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector

    def init_state(self, state: Any) -> None:
        self.counts = state

    def execute(self, tuple: Any) -> None:  # noqa: A002
        word = tuple.get_value(0)
        self.counts.put(word, self.counts.get(word, 0) + 1)
        self.collector.ack(tuple)


def build(
    feed: str, bolt_conf: Mapping[str, Any] | None = None, replays: bool = True, **declared: Any
) -> Any:
    builder = TopologyBuilder()
    builder.set_spout("words", FeedSpout(feed, replays), 1)
    declarer = builder.set_bolt("count", Count(bolt_conf), 2).fields_grouping(
        "words", Fields("word")
    )
    for key, value in declared.items():
        declarer.add_configuration(key, value)
    return builder.create_topology()


@pytest.fixture
def name() -> Iterator[str]:
    name = f"ttl-{uuid.uuid4().hex[:8]}"
    FEEDS[name] = collections.deque()
    yield name
    FEEDS.pop(name, None)
    InMemoryKeyValueStateProvider.drop(f"{name}/")


def feed(name: str, *words: str) -> None:
    """Hand ``words`` to the spout and wait until it took them all.

    The runner step that takes them clears the idle flag before it lets go of the runner, so
    ``await_idle`` after this waits for their transaction.
    """
    with LOCK:
        FEEDS[name].extend(words)
    deadline = time.monotonic() + 60
    while True:
        with LOCK:
            if not FEEDS[name]:
                return
        assert time.monotonic() < deadline, f"the spout did not take {words}"
        threading.Event().wait(0.002)


def test_word_counts_expire_exactly_ttl_after_their_last_count(name: str) -> None:
    clock = ManualClock(START_MS)
    conf = {"topology.state.ttl.secs": 10}
    with LocalCluster(engine="inline") as cluster:
        handle = cluster.submit_topology(name, conf, build(name), clock=clock)

        def step(advance_ms: int, *words: str) -> dict[Any, Any]:
            clock.advance(advance_ms)
            feed(name, *words)
            return handle.await_idle(60).read_state("count")

        assert step(0, "a", "b", "a") == {"a": 2, "b": 1}  # at 1_000_000: expire at 1_010_000
        assert step(5_000, "a", "e") == {"a": 3, "b": 1, "e": 1}  # a, e expire at 1_015_000
        assert step(4_999, "c") == {"a": 3, "b": 1, "c": 1, "e": 1}  # 1_009_999: b alive
        assert step(5_001, "d") == {"c": 1, "d": 1}  # 1_015_000: b, a, e expired, cleaned up
        assert step(10_000, "c") == {"c": 1}  # 1_025_000: c (1_019_999), d expired; c anew


def test_a_components_own_setting_wins_and_read_write_refreshes(name: str) -> None:
    clock = ManualClock(START_MS)
    # The topology's TTL is an hour; the bolt asks for 10 s in code, the declarer for 5 s,
    # refreshed by reads too (a count reads its word before writing it, so this is the same
    # as by writes; the contract suite checks a read alone).
    conf = {"topology.state.ttl.secs": 3600}
    topology = build(
        name,
        {"topology.state.ttl.secs": 10, "topology.state.ttl.refresh": "read_write"},
        **{"topology.state.ttl.secs": 5},
    )
    with LocalCluster(engine="inline") as cluster:
        handle = cluster.submit_topology(name, conf, topology, clock=clock)
        feed(name, "a", "b")
        assert handle.await_idle(60).read_state("count") == {"a": 1, "b": 1}
        clock.advance(4_999)  # 1_004_999: both alive under 5 s
        feed(name, "a")
        assert handle.await_idle(60).read_state("count") == {"a": 2, "b": 1}
        clock.advance(5_000)  # 1_009_999: b expired at 1_005_000, a exactly now
        feed(name, "c")
        assert handle.await_idle(60).read_state("count") == {"c": 1}


def test_a_bad_component_ttl_fails_the_submit_naming_the_component(name: str) -> None:
    with (
        LocalCluster(engine="inline") as cluster,
        pytest.raises(TopologyError, match=r"component 'count'.*topology\.state\.ttl\.secs"),
    ):
        cluster.submit_topology(
            name, {}, build(name, **{"topology.state.ttl.secs": -1}), clock=ManualClock()
        )


def test_a_replayed_transaction_expires_the_same_keys(name: str) -> None:
    clock = ManualClock(START_MS)
    infos: list[TransactionInfo] = []
    failed = threading.Event()

    def seen(info: TransactionInfo) -> None:
        infos.append(info)
        if not info.ok and info.action == "PREPARE":
            failed.set()

    # "raise" before the third data tuple of transaction 1 in the count task that owns "a".
    # The inline engine has no task retries: every attempt of transaction 1 that feeds that
    # task three tuples fails. The spout does not replay, so the replay carries one "a".
    groups = KeyGroups(128)
    task = groups.owner(groups.group_of("a"), 2)
    faults = [{"component": "count", "task": task, "at_tuple": 2, "kind": "raise", "txid": 1}]
    conf = {"topology.state.ttl.secs": 10, "topology.faults": {"tasks": faults}}
    topology = build(name, replays=False)
    with LocalCluster(engine="inline") as cluster:
        handle = cluster.submit_topology(name, conf, topology, clock=clock, on_transaction=seen)
        feed(name, "a", "b")
        assert handle.await_idle(60).read_state("count") == {"a": 1, "b": 1}  # expire 1_010_000
        clock.advance(9_000)
        feed(name, "a", "a", "a")  # PREPARE(1) starts at 1_009_000 and fails
        assert failed.wait(60)
        # The replay runs after the backoff, at 1_014_000 by the clock: "a" and "b" would be
        # expired then.
        clock.advance(5_000)
        feed(name, "a")
        state = handle.await_idle(60).read_state("count")
    prepares = [(i.txid, i.ok) for i in infos if i.action == "PREPARE"]
    assert prepares == [(0, True), (1, False), (1, True)]
    # Judged at the first attempt's timestamp, 1_009_000: "a" was alive and counts on, "b" was
    # alive, so not cleaned up. At the replay's clock time "a" would count 1 and "b" go.
    assert state == {"a": 2, "b": 1}
