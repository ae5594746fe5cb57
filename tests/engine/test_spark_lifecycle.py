"""A topology's resources: what opens is closed, what Spark holds for it is released."""

from __future__ import annotations

import os
from typing import Any

import pytest
import topologies as topo
from redis_fixtures import free_port

from checkpoint import MANIFEST_KEY
from examples.wordcount import build, expected_counts
from providers import InMemoryKeyValueStateProvider, StateBackendError
from statefulbolts import TopologyBuilder
from statefulbolts.errors import StatefulBoltsError
from statefulbolts.runtime._images import INLINE_BYTES

pytestmark = pytest.mark.spark


class CheckpointStateDown(InMemoryKeyValueStateProvider):
    """In-memory state whose checkpoint spout's record cannot be read: a store gone mid-open."""

    def new_state(self, namespace: str, conf: Any, context: Any = None) -> Any:
        if "$checkpointspout" in namespace:
            msg = f"the store of {namespace!r} could not be reached"
            raise StateBackendError(msg)
        return super().new_state(namespace, conf, context)


def test_a_submit_that_fails_closes_the_spouts_it_opened(cluster: Any) -> None:
    conf = {"topology.state.provider": f"{__name__}.CheckpointStateDown"}
    key = topo.new_key("open-fails")
    builder = TopologyBuilder()
    builder.set_spout("src", topo.ValueSpout(key, [1, 2, 3]), 2)
    builder.set_bolt("tally", topo.Tally(), 1).shuffle_grouping("src")
    # The user spouts open first; the checkpoint spout then reads its state and cannot.
    with pytest.raises(StatefulBoltsError, match=r"\$checkpointspout-0' could not be reached"):
        cluster.submit_topology(key, conf, builder.create_topology())
    rec = topo.record(key)
    assert (rec.opened, rec.closed) == (2, 2)


def test_a_submit_refused_for_its_store_opens_no_spout(cluster: Any) -> None:
    port = free_port()  # nothing listens there
    conf = {
        "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
        "topology.state.provider.config": {
            "jedisPoolConfig": {"host": "127.0.0.1", "port": port, "timeout": 300}
        },
    }
    key = topo.new_key("store-down")
    builder = TopologyBuilder()
    builder.set_spout("src", topo.ValueSpout(key, [1, 2, 3]), 2)
    builder.set_bolt("tally", topo.Tally(), 1).shuffle_grouping("src")
    # The topology's lease comes first: an unreachable store is met before any spout opens.
    with pytest.raises(StatefulBoltsError, match=f"taking its lease: .*127.0.0.1:{port}"):
        cluster.submit_topology(key, conf, builder.create_topology())
    rec = topo.record(key)
    assert (rec.opened, rec.closed) == (0, 0)


def test_a_killed_topology_releases_its_broadcast(cluster: Any) -> None:
    name = topo.new_key("release")
    topology = build(20, 1)
    # Past the inline budget (``_images.INLINE_BYTES``): the topology is a broadcast.
    topology.component("count").obj.padding = os.urandom(INLINE_BYTES)
    handle = cluster.submit_topology(name, {}, topology)
    blob = handle._runner.engine._blob
    path = blob._path
    handle.await_idle(60)
    assert os.path.exists(path)  # the tasks of every job read the topology from it
    handle.kill()
    assert not os.path.exists(path)
    assert handle.read_state("count") == dict(expected_counts(20))


def test_a_small_topology_travels_with_its_jobs_and_makes_no_broadcast(cluster: Any) -> None:
    name = topo.new_key("inline-topology")
    handle = cluster.submit_topology(name, {}, build(20, 1))
    try:
        handle.await_idle(60)
        blob = handle._runner.engine._blob
        assert type(blob) is bytes and len(blob) <= INLINE_BYTES
        assert handle.read_state("count") == dict(expected_counts(20))
    finally:
        handle.kill()


def test_in_memory_state_saves_no_transaction_manifest(cluster: Any) -> None:
    # The manifest is for a restarted driver, and in-memory state does not outlive the driver.
    name = topo.new_key("no-manifest")
    handle = cluster.submit_topology(name, {}, build(20, 1))
    try:
        handle.await_idle(120)
        cp = handle._runner.cp
        assert cp is not None and cp.state is not None
        assert cp.state.get(MANIFEST_KEY) is None
        assert cp.cur.txid >= 0  # it did commit a transaction
    finally:
        handle.kill()
