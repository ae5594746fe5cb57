"""``TransactionalTopologyBuilder`` and the ``TransactionalTopology`` it builds.

A transactional topology has one transactional spout (its emitter tasks run as the first stage of
every batch), batch bolts, ``BasicBolt``s and committers, wired with the usual groupings. Its
components split in two sets run differently (docs/protocol/transactional.md):

- **processing** (P): the spout and every bolt that is neither a committer nor downstream of one;
  they run for many transactions at once;
- **commit** (C): committers and everything downstream of them (committers or not); they run
  only in a transaction's commit phase, strictly in txid order.

The transactional id names the topology's progress in the state provider: a topology started
again with the same id resumes where the last one stopped. Building executes nothing; wiring is
validated as ``TopologyBuilder`` validates it, plus the component kinds a transactional topology
allows.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from statefulbolts._overrides import check_overrides
from statefulbolts.components import BasicBolt, Bolt, Spout, StatefulBolt
from statefulbolts.errors import TopologyError
from statefulbolts.topology import BoltDeclarer, StormTopology, TopologyBuilder
from statefulbolts.transactional._bolts import BatchBolt, Committer
from statefulbolts.transactional._spouts import (
    OpaquePartitionedTransactionalSpout,
    PartitionedTransactionalSpout,
    TransactionalSpout,
)

__all__ = ["TransactionalTopology", "TransactionalTopologyBuilder"]

SPOUT_KINDS = (
    TransactionalSpout,
    PartitionedTransactionalSpout,
    OpaquePartitionedTransactionalSpout,
)


def _kind(obj: Any) -> str:
    cls = type(obj)
    return f"{cls.__module__}.{cls.__qualname__}"


@dataclass(frozen=True)
class TransactionalTopology:
    """What ``build_topology`` returns; submit it with ``LocalCluster.submit_topology``.

    ``topology`` describes the components as any topology does (the spout is a spout whose
    tasks are the emitters); ``committers`` are the committer bolts, ``commit_phase`` every
    component that runs in the commit phase (committers and what is downstream of them).
    """

    transactional_id: str
    spout_id: str
    topology: StormTopology
    committers: frozenset[str]
    commit_phase: frozenset[str]

    @property
    def spout(self) -> Any:
        """The user's transactional spout."""
        return self.topology.component(self.spout_id).obj

    @property
    def processing_phase(self) -> frozenset[str]:
        """The components that run in the processing phase (the spout included)."""
        return frozenset(self.topology.components) - self.commit_phase

    @property
    def components(self) -> Mapping[str, Any]:
        """Every component by id (as ``StormTopology.components``)."""
        return self.topology.components


class TransactionalTopologyBuilder(TopologyBuilder):
    """Declare a transactional topology: its spout at construction, then bolts and committers.

    Example:
        >>> from statefulbolts.transactional import MemoryTransactionalSpout
        >>> spout = MemoryTransactionalSpout({0: [["a"], ["b"]]}, ["word"], 2)
        >>> builder = TransactionalTopologyBuilder("counts", "spout", spout)
        >>> from examples.transactional_words import KeyedCountUpdater
        >>> _ = builder.set_committer_bolt("count", KeyedCountUpdater(), 2).fields_grouping(
        ...     "spout", ["word"])
        >>> topology = builder.build_topology()
        >>> sorted(topology.commit_phase), topology.transactional_id
        (['count'], 'counts')
    """

    def __init__(
        self,
        id: str,  # noqa: A002 - Storm's parameter name
        spout_id: str,
        spout: Any,
        spout_parallelism: int | None = None,
    ) -> None:
        super().__init__()
        if not isinstance(id, str) or not id.strip() or "/" in id:
            msg = f"transactional id must be a non-empty string without '/', got {id!r}"
            raise TopologyError(msg)
        if not isinstance(spout, SPOUT_KINDS):
            msg = (
                f"spout {spout_id!r}: expected a TransactionalSpout, PartitionedTransactionalSpout "
                f"or OpaquePartitionedTransactionalSpout, got {_kind(spout)}"
            )
            raise TopologyError(msg)
        self.transactional_id = id
        self.spout_id = spout_id
        self._committers: set[str] = set()
        self._check_new_id(spout_id)
        check_overrides("spout", spout_id, spout)
        parallelism = 1 if spout_parallelism is None else spout_parallelism
        self._register(spout_id, spout, parallelism, is_spout=True)

    def set_spout(self, component_id: str, spout: Spout, parallelism: int = 1) -> BoltDeclarer:
        """Not allowed: a transactional topology has the one spout given to the builder."""
        msg = (
            f"spout {component_id!r}: a transactional topology has exactly one spout, the one "
            f"given to TransactionalTopologyBuilder ({self.spout_id!r})"
        )
        raise TopologyError(msg)

    def set_bolt(  # type: ignore[override]
        self, component_id: str, bolt: BatchBolt[Any] | BasicBolt, parallelism: int = 1
    ) -> BoltDeclarer:
        """Add a ``BatchBolt`` (a committer if it is a ``Committer``) or a ``BasicBolt``."""
        self._check_new_id(component_id)
        if isinstance(bolt, BasicBolt):
            if isinstance(bolt, Committer):
                msg = (
                    f"bolt {component_id!r}: a BasicBolt cannot be a Committer ({_kind(bolt)}); "
                    "a committer is a BatchBolt whose finish_batch runs in the commit phase"
                )
                raise TopologyError(msg)
        elif not isinstance(bolt, BatchBolt):
            what = (
                "a StatefulBolt"
                if isinstance(bolt, StatefulBolt)
                else "a plain Bolt"
                if isinstance(bolt, Bolt)
                else "a Spout"
                if isinstance(bolt, Spout)
                else _kind(bolt)
            )
            msg = (
                f"bolt {component_id!r}: a transactional topology takes BatchBolts, committers "
                f"and BasicBolts, got {what} ({_kind(bolt)})"
            )
            raise TopologyError(msg)
        check_overrides("bolt", component_id, bolt)
        if isinstance(bolt, Committer):
            self._committers.add(component_id)
        return self._register(component_id, bolt, parallelism, is_spout=False)

    def set_committer_bolt(
        self, component_id: str, bolt: BatchBolt[Any], parallelism: int = 1
    ) -> BoltDeclarer:
        """Add a ``BatchBolt`` as a committer: its ``finish_batch`` runs in the commit phase."""
        if not isinstance(bolt, BatchBolt):
            msg = f"committer {component_id!r}: expected a BatchBolt, got {_kind(bolt)}"
            raise TopologyError(msg)
        declarer = self.set_bolt(component_id, bolt, parallelism)
        self._committers.add(component_id)
        return declarer

    def build_topology(self) -> TransactionalTopology:
        """Validate the wiring and return the immutable transactional topology."""
        hidden = f"{self.spout_id}/coordinator"
        for cid, inputs in self._inputs.items():
            for inp in inputs:
                if inp.source.component_id == hidden:
                    msg = (
                        f"bolt {cid!r} subscribes to {hidden!r}, the spout's hidden coordinator; "
                        f"subscribe to the spout {self.spout_id!r} instead"
                    )
                    raise TopologyError(msg)
        outputs = self._validated_outputs()
        for cid, inputs in self._inputs.items():
            for inp in inputs:
                declared = outputs[inp.source.component_id][inp.source.stream_id]
                if declared.to_list()[:1] and declared[0] in inp.grouping.fields:
                    msg = (
                        f"bolt {cid!r}: fields grouping on {declared[0]!r}, the attempt every "
                        f"tuple of a batch carries first: all of a batch would go to one task; "
                        "group by another field"
                    )
                    raise TopologyError(msg)
        specs = {cid: self._spec(cid, outputs[cid], self._inputs[cid]) for cid in self._objects}
        topology = StormTopology(specs)
        return TransactionalTopology(
            self.transactional_id,
            self.spout_id,
            topology,
            frozenset(self._committers),
            _downstream(topology, self._committers),
        )

    def create_topology(self) -> TransactionalTopology:  # type: ignore[override]
        """The same as ``build_topology`` (Storm's name for this builder)."""
        return self.build_topology()


def _downstream(topology: StormTopology, roots: set[str]) -> frozenset[str]:
    """``roots`` and every component that reads from one of them, directly or not."""
    found = set(roots)
    for cid in topology.topological_bolts():
        if any(i.source.component_id in found for i in topology.inputs(cid)):
            found.add(cid)
    return frozenset(found)
