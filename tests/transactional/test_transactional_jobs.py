"""The jobs of a transactional batch (``TransactionalJobs``): what a commit job carries.

A driver-owned provider's maps travel with the commit job when it runs on the executors: the
maps of the commit-phase components' tasks, found by parsing each stored namespace
(``TaskNamespace``), so a component whose id starts with another's and a dash is never taken
for one of its tasks.
"""

from __future__ import annotations

import uuid

from examples.transactional_global_count import BatchCount, UpdateGlobalCount
from providers import InMemoryKeyValueStateProvider, StateFactory
from statefulbolts import MemoryTransactionalSpout, TransactionalTopologyBuilder
from statefulbolts.namespaces import TaskNamespace, coordinator_namespace, transactional_prefix
from statefulbolts.runtime import ImageShipper, open_engine
from statefulbolts.transactional._attempt import TransactionAttempt
from statefulbolts.transactional._jobs import TransactionalJobs


class WholeImages(InMemoryKeyValueStateProvider):
    """The in-memory provider without image versions: each job ships its images whole.

    (So the shipper needs no SparkContext to broadcast descriptors with.)
    """

    def image_version(self, namespace: str) -> None:
        """Cannot tell: ship the image whole."""
        return None


def _saved(namespace: str) -> None:
    state = StateFactory.get_system_state(namespace, {})
    state.put("k", 1)
    state.commit()


def test_a_commit_job_ships_the_maps_of_count_and_not_those_of_count_2() -> None:
    tid = f"jobs-{uuid.uuid4().hex[:8]}"
    spout = MemoryTransactionalSpout({0: [["a"]]}, ["word"], 1)
    builder = TransactionalTopologyBuilder(tid, "spout", spout)
    # "count-2" runs in the processing phase; "count", the committer, in the commit phase.
    builder.set_bolt("count-2", BatchCount(), 2).none_grouping("spout")
    builder.set_bolt("count", UpdateGlobalCount()).global_grouping("count-2")
    topology = builder.build_topology()
    assert topology.commit_phase == {"count"}
    # Maps of both names in the store (count-2's left by an earlier version of the topology).
    mine = str(TaskNamespace.of_transactional(tid, "count", 0, "default"))
    others = [
        str(TaskNamespace.of_transactional(tid, "count-2", 0, "default")),
        str(TaskNamespace.of_transactional(tid, "count-2", 1, "default")),
    ]
    for namespace in [mine, *others, coordinator_namespace(transactional_prefix(tid))]:
        _saved(namespace)
    conf: dict[str, str] = {}
    engine = open_engine("inline", None, topology.topology, tid, conf)
    provider = WholeImages()
    shipper = ImageShipper(None, provider)
    jobs = TransactionalJobs(
        tid, topology, engine.plan, conf, provider, images=shipper, commit_location="executors"
    )
    try:
        assert not jobs.commit_here
        spec = jobs.commit(TransactionAttempt(1, 1), [])
    finally:
        engine.close()
        InMemoryKeyValueStateProvider.drop(transactional_prefix(tid))
    assert spec.images is not None
    assert sorted(spec.images) == [mine]
