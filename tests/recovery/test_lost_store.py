"""A store that loses committed state stops the topology; one that keeps it lets it go on.

A real redis-server carries the word count's state and is SIGKILLed at a moment chosen by a seed
(``STATEFULBOLTS_TEST_SEED``, for loops) after a few commits, then started again on the same
port at once:

- without persistence it comes back empty: the topology must stop with a ``StateLostError``
  naming the store, the namespace and both txids, and never commit into the empty store;
- with an append-only file fsynced at every write it comes back whole: the outage is waited
  out and the counts come out exact.

The transactional protocol gets the same treatment: its coordinator checks the store before
every commit.
"""

from __future__ import annotations

import os
import random
import re
import threading
import time
from typing import Any

import pytest
from outage_topologies import burst_wordcount, counts_in_redis, redis_conf

from examples.wordcount import expected_counts
from providers import InMemoryKeyValueState, StateLostError
from statefulbolts import TopologyFailedError
from statefulbolts.transactional._coordinator import TransactionalSpoutCoordinator

SEED = int(os.environ.get("STATEFULBOLTS_TEST_SEED", "7"))
SENTENCES = 400
BURST = 20
TIMEOUT = 240


class Killer:
    """SIGKILLs the server a random moment after ``after`` commits, and starts it again."""

    def __init__(self, server: Any, after: int, seed: int) -> None:
        self.server = server
        self.after = after
        self.rng = random.Random(seed)
        self.commits = 0
        self.done = threading.Event()
        self.fired = threading.Event()

    def on_transaction(self, info: Any) -> None:
        if info.ok and info.action == "COMMIT":
            self.commits += 1
            if self.commits == self.after and not self.fired.is_set():
                self.fired.set()
                threading.Thread(target=self._kill, daemon=True).start()

    def _kill(self) -> None:
        time.sleep(self.rng.uniform(0.0, 0.4))
        process = self.server.process
        process.kill()  # SIGKILL: nothing flushed beyond what the server already wrote
        process.wait()
        self.server.process = None
        self.server.start(port=self.server.port)
        self.done.set()


@pytest.mark.spark
@pytest.mark.redis
def test_a_store_restarted_empty_stops_the_topology(
    cluster: Any, redis_server_factory: Any
) -> None:
    server = redis_server_factory(appendonly=False)
    name = "lost-empty"
    killer = Killer(server, after=2 + SEED % 3, seed=SEED)
    conf = redis_conf(server.port, **{"topology.state.backend.timeout.secs": 60})
    handle = cluster.submit_topology(
        name, conf, burst_wordcount(SENTENCES, BURST), on_transaction=killer.on_transaction
    )
    try:
        with pytest.raises(TopologyFailedError) as info:
            handle.await_idle(TIMEOUT)
    finally:
        handle.kill()
    # The killer's thread sets ``done`` after the new server answers, and the topology may see
    # that server (and stop, or go idle) first: wait for the thread rather than race it.
    assert killer.done.wait(60), "the store was not killed and started again"
    message = str(info.value)
    assert "StateLostError" in message or isinstance(info.value.__cause__, StateLostError), message
    assert info.value.fatal  # exit status 2: a restart would meet the same store
    # Whichever sees the empty store first says so: a task, by its namespace's txids, or the
    # driver's lease renewal, by its lease record (gone with everything else).
    if f"the state store no longer holds its lease (epoch 1) of '{name}/'" not in message:
        assert f"redis 127.0.0.1:{server.port}" in message
        assert f"'{name}/count-" in message
        # Nothing committed; a PREPARE the restart landed in the middle of may have written its
        # delta into the new store before the COMMIT found it empty (then the message names
        # that delta and the lease epoch it was written under).
        assert re.search(
            r"holds nothing committed( and a prepared delta of txid \d+)?"
            r"( \(last written under lease epoch \d+\))?, but the checkpoint is at ",
            message,
        ), message
        assert "the store lost committed state" in message
    # Nothing was ever committed into the empty store.
    client = server.client()
    for task in range(2):
        assert client.hget(f"{name}/count-{task}$txid", "commit") is None
        assert client.hlen(f"{name}/count-{task}") == 0


@pytest.mark.spark
@pytest.mark.redis
def test_a_store_that_kept_its_data_lets_the_topology_go_on_exactly(
    cluster: Any, redis_server_factory: Any
) -> None:
    server = redis_server_factory(appendonly=True, extra_args=("--appendfsync", "always"))
    name = "kept-aof"
    killer = Killer(server, after=2 + SEED % 3, seed=SEED)
    conf = redis_conf(server.port, **{"topology.state.backend.timeout.secs": 60})
    handle = cluster.submit_topology(
        name, conf, burst_wordcount(SENTENCES, BURST), on_transaction=killer.on_transaction
    )
    try:
        handle.await_idle(TIMEOUT)
        counts = handle.read_state("count")
    finally:
        handle.kill()
    # The killer's thread sets ``done`` after the new server answers, and the topology may see
    # that server (and stop, or go idle) first: wait for the thread rather than race it.
    assert killer.done.wait(60), "the store was not killed and started again"
    expected = dict(expected_counts(SENTENCES))
    assert counts == expected
    assert counts_in_redis(server.client(), name) == expected


def test_the_coordinator_refuses_to_commit_into_a_store_that_lost_its_records() -> None:
    class Fixed:
        def initialize_transaction(self, txid: int, prev: Any) -> int:
            return 10

        def is_ready(self) -> bool:
            return True

        def close(self) -> None:
            return None

    state = InMemoryKeyValueState("lost-coordinator/coordinator")
    coordinator = TransactionalSpoutCoordinator(Fixed(), state, max_pending=2)
    (first, second) = coordinator.sync()
    coordinator.check_store(1)  # the store holds what the coordinator wrote
    coordinator.ack(first.attempt)
    coordinator.ack(first.attempt)  # txid 1 committed: currtx is 2
    coordinator.ack(second.attempt)
    coordinator.check_store(2)
    state.replace_stored(None, (), None, {})  # flushed
    with pytest.raises(StateLostError) as info:
        coordinator.check_store(2)
    message = str(info.value)
    assert "coordinator state 'lost-coordinator/coordinator' in memory holds currtx None" in message
    assert "and no meta for txid 2" in message
    assert "committed up to txid 1" in message
