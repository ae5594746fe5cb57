"""What a topology's sinks hold and have published, read offline (``statefulbolts sink status``).

For each sink component of a topology (a bolt that is an ``ExactlyOnceSinkBolt``) and each of
its task namespaces in the state store: the lanes whose records the task holds staged, per
lane the txids, records and bytes staged, the lane's marker in the target (the last txid
published) and how many staged records are above it (not published yet: a transaction that
has not committed, or one committed without the sink's hook and published by the next
COMMIT). Also each task's own lane at the topology's parallelism, with its marker, even when
it holds nothing.

``target_lanes`` lists, per sink, every lane its target keeps a marker of (whatever
parallelism published it), for targets that can list them (``Sink.lane_markers``).

Reads only: the state through the provider (committed and prepared records alike), the markers
through the sink. Bytes are the msgpack size of each staged chunk's records, close to what a
store keeps.

Example:
    >>> lane = LaneStatus("0of2", 7, (7, 8), 10, 512, 4)
    >>> lane.as_dict()["unpublished_records"]
    4
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

import msgpack

from providers import DriverOwnedStateProvider, KeyValueState, StateFactory, get_provider
from statefulbolts.connectors.sinks._api import Lane, Sink, SinkError
from statefulbolts.connectors.sinks._bolt import ExactlyOnceSinkBolt, staged_holdings
from statefulbolts.connectors.sinks._columns import staged_count
from statefulbolts.context import TopologyContext
from statefulbolts.namespaces import TaskNamespace, topology_prefix
from statefulbolts.topology import StormTopology

__all__ = ["LaneStatus", "SinkTaskStatus", "sink_bolts", "sink_status", "target_lanes"]


@dataclass(frozen=True)
class LaneStatus:
    """One lane a sink task holds records of (or its own lane, holding none)."""

    lane: str
    marker: int | None  # the last txid the target holds for the lane
    staged_txids: tuple[int, ...]
    staged_records: int
    staged_bytes: int
    unpublished_records: int  # staged above the marker

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return {**asdict(self), "staged_txids": list(self.staged_txids)}


@dataclass(frozen=True)
class SinkTaskStatus:
    """One sink task's namespace: its lanes, and its own lane's marker."""

    component: str
    sink: str
    task: int
    namespace: str
    own_lane: str | None  # at the topology's parallelism (None: a task it no longer has)
    last_published_txid: int | None  # the own lane's marker
    lanes: tuple[LaneStatus, ...]

    @property
    def staged_bytes(self) -> int:
        """Bytes staged in the task, every lane."""
        return sum(lane.staged_bytes for lane in self.lanes)

    @property
    def unpublished_records(self) -> int:
        """Records staged in the task above their lane's marker."""
        return sum(lane.unpublished_records for lane in self.lanes)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return {
            "component": self.component,
            "sink": self.sink,
            "task": self.task,
            "namespace": self.namespace,
            "own_lane": self.own_lane,
            "last_published_txid": self.last_published_txid,
            "staged_bytes": self.staged_bytes,
            "unpublished_records": self.unpublished_records,
            "lanes": [lane.as_dict() for lane in self.lanes],
        }


def sink_bolts(topology: StormTopology) -> dict[str, ExactlyOnceSinkBolt]:
    """The topology's exactly-once sink components, by id."""
    return {
        cid: spec.obj
        for cid, spec in sorted(topology.components.items())
        if isinstance(spec.obj, ExactlyOnceSinkBolt)
    }


def sink_status(
    conf: Mapping[str, Any], name: str, topology: StormTopology, component: str | None = None
) -> list[SinkTaskStatus]:
    """Every sink task of ``topology`` (run as ``name``) as the store and the targets hold it.

    Raises:
        SinkError: no such sink component, or the provider keeps state in a driver's memory.
    """
    if isinstance(get_provider(conf), DriverOwnedStateProvider):
        msg = (
            "the state provider keeps state in the memory of the driver that ran the topology, "
            "and this runs in a new process, which holds none: use a durable provider (Redis, "
            "SQLite) in the config"
        )
        raise SinkError(msg)
    bolts = sink_bolts(topology)
    if component is not None:
        if component not in bolts:
            msg = f"no sink component {component!r} in the topology; its sinks: {sorted(bolts)}"
            raise SinkError(msg)
        bolts = {component: bolts[component]}
    out: list[SinkTaskStatus] = []
    for cid, bolt in bolts.items():
        out.extend(_component_status(conf, name, topology, cid, bolt.sink))
    return out


def target_lanes(
    conf: Mapping[str, Any], name: str, topology: StormTopology, component: str | None = None
) -> dict[str, dict[str, int | None]]:
    """Per sink component, every lane its target keeps a marker of (``Sink.lane_markers``).

    Lanes of every parallelism the component published with; a sink whose target cannot list
    its lanes is left out.
    """
    out = {}
    for cid, bolt in sink_bolts(topology).items():
        if component is None or cid == component:
            markers = bolt.sink.lane_markers(conf, name, cid)
            if markers is not None:
                out[cid] = dict(sorted(markers.items()))
    return out


def _component_status(
    conf: Mapping[str, Any], name: str, topology: StormTopology, cid: str, sink: Sink
) -> list[SinkTaskStatus]:
    prefix = topology_prefix(name)
    parallelism = topology.component(cid).parallelism
    stored = get_provider(conf).namespaces(conf, prefix) or []
    tasks = set(range(parallelism))
    for namespace in stored:
        found = TaskNamespace.parse(prefix, namespace)
        if found is not None and found.component == cid:
            tasks.add(found.task)
    sink.open(conf, TopologyContext(topology, name, cid, 0))
    markers: dict[str, int | None] = {}

    def marker(lane_name: str) -> int | None:
        if lane_name not in markers:
            task, of = Lane.parse_name(lane_name)
            markers[lane_name] = sink.published(Lane(name, cid, task, of))
        return markers[lane_name]

    out = []
    for task in sorted(tasks):
        namespace = str(TaskNamespace(prefix, cid, task))
        state = StateFactory.get_state(namespace, conf)
        if not isinstance(state, KeyValueState):
            msg = f"{namespace}: the state provider returned {type(state).__qualname__}"
            raise SinkError(msg)
        holdings = staged_holdings(iter(state))
        own = Lane(name, cid, task, parallelism).name if task < parallelism else None
        lanes = []
        for lane_name in sorted(set(holdings) | ({own} if own else set())):
            per_txid = holdings.get(lane_name, {})
            m = marker(lane_name)
            records = bytes_ = above = 0
            for txid, chunks in per_txid.items():
                for _, value in chunks:
                    n = staged_count(value)
                    records += n
                    bytes_ += len(msgpack.packb(value, use_bin_type=True))
                    if m is None or txid > m:
                        above += n
            lanes.append(LaneStatus(lane_name, m, tuple(sorted(per_txid)), records, bytes_, above))
        out.append(
            SinkTaskStatus(
                cid,
                sink.name,
                task,
                namespace,
                own,
                marker(own) if own else None,
                tuple(lanes),
            )
        )
    sink.close()
    return out
