"""``TopologyBuilder`` and the immutable ``StormTopology`` it produces.

Building executes nothing. Wiring is validated when it is declared (duplicate ids, parallelism,
component types, overridden methods the framework could not call: ``_overrides``) and when the
topology is created (unknown sources and streams, grouping on an undeclared field, cycles, a
stateful bolt with no input). When at least one stateful bolt exists,
``create_topology`` adds ``$checkpointspout`` (parallelism 1) and wires the ``$checkpoint`` stream
with all grouping from every distinct source of every bolt, as Storm does; stateful bolts are marked
to run under ``StatefulBoltExecutor`` and every other bolt under ``CheckpointTupleForwarder``.
A windowed bolt is wrapped when it is declared in a ``WindowedBoltExecutor``, a stateful bolt
(its windows live in the state provider between transactions), so it checkpoints the topology.

The description keeps each component's object as the user gave it (a ``BasicBolt`` stays a
``BasicBolt``; a windowed bolt is the one exception, above): the runtime builds the adapters a
task runs (``BasicBoltExecutor``, the checkpoint executors) when it makes the task.
"""

from __future__ import annotations

import enum
import types
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from statefulbolts._overrides import check_overrides
from statefulbolts.components import (
    BasicBolt,
    Bolt,
    OutputFieldsDeclarer,
    Spout,
    StatefulBolt,
)
from statefulbolts.errors import TopologyError
from statefulbolts.streams import GlobalStreamId, Grouping, GroupingKind, InputSpec
from statefulbolts.tuples import DEFAULT_STREAM, Fields
from statefulbolts.windowing import BaseWindowedBolt, WindowConfigError, WindowedBoltExecutor

CHECKPOINT_STREAM_ID = "$checkpoint"
CHECKPOINT_COMPONENT_ID = "$checkpointspout"
CHECKPOINT_FIELDS = Fields("txid", "action")


class ExecutorKind(enum.Enum):
    """How the checkpoint protocol runs a bolt (the runtime builds the executor per task)."""

    PLAIN = "plain"  # no stateful bolt in the topology
    FORWARDER = "forwarder"  # CheckpointTupleForwarder
    STATEFUL = "stateful"  # StatefulBoltExecutor


@dataclass(frozen=True)
class ComponentSpec:
    """A spout or bolt as declared, with its streams and inputs resolved."""

    id: str
    obj: Any
    parallelism: int
    is_spout: bool
    outputs: Mapping[str, Fields]
    inputs: tuple[InputSpec, ...] = ()
    executor: ExecutorKind = ExecutorKind.PLAIN
    conf: Mapping[str, Any] = field(default_factory=dict)

    @property
    def is_stateful(self) -> bool:
        """Whether the component is a stateful bolt."""
        return self.executor is ExecutorKind.STATEFUL

    @property
    def user_class(self) -> str | None:
        """``module.qualname`` of the user's class (for error messages).

        ``None`` for a component the framework adds (``$checkpointspout``): it has no user object,
        the protocol that runs it makes its own.
        """
        if self.obj is None:
            return None
        obj = self.obj.user_bolt if isinstance(self.obj, WindowedBoltExecutor) else self.obj
        cls = type(obj)
        return f"{cls.__module__}.{cls.__qualname__}"


class StormTopology:
    """An immutable topology description. Execution happens in the runtime only."""

    def __init__(self, components: Mapping[str, ComponentSpec]) -> None:
        self._components = types.MappingProxyType(dict(components))
        self._task_ids: dict[str, tuple[int, ...]] = {}
        next_id = 1
        for cid in sorted(self._components):
            n = self._components[cid].parallelism
            self._task_ids[cid] = tuple(range(next_id, next_id + n))
            next_id += n
        self._task_component = {t: c for c, ts in self._task_ids.items() for t in ts}
        self._consumers: dict[GlobalStreamId, list[tuple[str, Grouping]]] = {}
        for spec in self._components.values():
            for inp in spec.inputs:
                self._consumers.setdefault(inp.source, []).append((spec.id, inp.grouping))

    @property
    def components(self) -> Mapping[str, ComponentSpec]:
        """Every component by id."""
        return self._components

    @property
    def spouts(self) -> dict[str, ComponentSpec]:
        """Spouts by id (``$checkpointspout`` included when present)."""
        return {c: s for c, s in self._components.items() if s.is_spout}

    @property
    def bolts(self) -> dict[str, ComponentSpec]:
        """Bolts by id."""
        return {c: s for c, s in self._components.items() if not s.is_spout}

    @property
    def has_stateful_bolt(self) -> bool:
        """Whether checkpointing is wired in."""
        return CHECKPOINT_COMPONENT_ID in self._components

    def without_spout_objects(self) -> StormTopology:
        """This topology with its spouts' user objects left out, for processes that run bolts only.

        Where spouts run in the driver (the checkpoint runtime), a Spark task loads the topology
        for its bolt: a spout that carries its input (a list of sentences) made every task
        unpickle that input again.
        """
        return StormTopology(
            {
                cid: replace(spec, obj=None) if spec.is_spout else spec
                for cid, spec in self._components.items()
            }
        )

    def component(self, component_id: str) -> ComponentSpec:
        """The spec of ``component_id``."""
        try:
            return self._components[component_id]
        except KeyError:
            msg = f"no component {component_id!r}; components are {sorted(self._components)}"
            raise TopologyError(msg) from None

    def inputs(self, component_id: str) -> tuple[InputSpec, ...]:
        """The inputs of a bolt, ``$checkpoint`` inputs included."""
        return self.component(component_id).inputs

    def consumers(self, source: GlobalStreamId) -> list[tuple[str, Grouping]]:
        """Who subscribes to a stream, with which grouping."""
        return self._consumers.get(source, [])

    def task_ids(self, component_id: str) -> tuple[int, ...]:
        """Global task ids of a component (Storm numbers tasks over sorted component ids)."""
        self.component(component_id)
        return self._task_ids[component_id]

    def component_of_task(self, task_id: int) -> str:
        """The component running global task ``task_id``."""
        return self._task_component[task_id]

    def topological_bolts(self) -> list[str]:
        """Bolt ids, each after all of its sources (ties by id)."""
        order: list[str] = []
        done: set[str] = set(self.spouts)
        pending = sorted(self.bolts)
        while pending:
            ready = [
                b for b in pending if all(i.source.component_id in done for i in self.inputs(b))
            ]
            for b in ready:
                order.append(b)
                done.add(b)
            pending = [b for b in pending if b not in done]
        return order


class BoltDeclarer:
    """Returned by ``set_bolt``: declares the bolt's inputs. Every method returns ``self``."""

    def __init__(self, builder: TopologyBuilder, component_id: str) -> None:
        self._builder = builder
        self._id = component_id

    def _add(self, source: str, stream: str, grouping: Grouping) -> BoltDeclarer:
        if not isinstance(source, str) or not source:
            msg = f"bolt {self._id!r}: source component must be a non-empty string, got {source!r}"
            raise TopologyError(msg)
        inputs = self._builder._inputs[self._id]
        gsid = GlobalStreamId(source, stream)
        if any(i.source == gsid for i in inputs):
            msg = f"bolt {self._id!r} subscribes to {source!r} stream {stream!r} twice"
            raise TopologyError(msg)
        inputs.append(InputSpec(gsid, grouping))
        return self

    def shuffle_grouping(self, component_id: str, stream_id: str = DEFAULT_STREAM) -> BoltDeclarer:
        """Spread tuples evenly over the tasks."""
        return self._add(component_id, stream_id, Grouping(GroupingKind.SHUFFLE))

    def fields_grouping(
        self,
        component_id: str,
        fields: Fields | Iterable[str] | str,
        stream_id: str = DEFAULT_STREAM,
    ) -> BoltDeclarer:
        """Tuples with equal values of ``fields`` go to the same task."""
        names = [fields] if isinstance(fields, str) else list(fields)
        if not names:
            msg = f"bolt {self._id!r}: fields_grouping on {component_id!r} needs at least one field"
            raise TopologyError(msg)
        return self._add(component_id, stream_id, Grouping(GroupingKind.FIELDS, tuple(names)))

    def all_grouping(self, component_id: str, stream_id: str = DEFAULT_STREAM) -> BoltDeclarer:
        """Every task gets every tuple."""
        return self._add(component_id, stream_id, Grouping(GroupingKind.ALL))

    def global_grouping(self, component_id: str, stream_id: str = DEFAULT_STREAM) -> BoltDeclarer:
        """Every tuple goes to the task with the lowest id."""
        return self._add(component_id, stream_id, Grouping(GroupingKind.GLOBAL))

    def none_grouping(self, component_id: str, stream_id: str = DEFAULT_STREAM) -> BoltDeclarer:
        """No preference; behaves as shuffle grouping (as in Storm)."""
        return self._add(component_id, stream_id, Grouping(GroupingKind.NONE))

    def local_or_shuffle_grouping(
        self, component_id: str, stream_id: str = DEFAULT_STREAM
    ) -> BoltDeclarer:
        """Prefer a task in the same worker; on Spark every task is remote, so shuffle."""
        return self._add(component_id, stream_id, Grouping(GroupingKind.LOCAL_OR_SHUFFLE))

    def add_configuration(self, key: str, value: Any) -> BoltDeclarer:
        """Set a component-specific config key."""
        self._builder._conf[self._id][key] = value
        return self


def _check_id(component_id: Any, taken: Mapping[str, Any]) -> None:
    if not isinstance(component_id, str) or not component_id.strip():
        msg = f"component id must be a non-empty string, got {component_id!r}"
        raise TopologyError(msg)
    if component_id.startswith(("$", "__")):
        msg = (
            f"component id {component_id!r} is reserved: ids starting with '$' or '__' are "
            "system ids"
        )
        raise TopologyError(msg)
    if "/" in component_id:
        msg = f"component id {component_id!r} may not contain '/' (it is part of state namespaces)"
        raise TopologyError(msg)
    if component_id in taken:
        msg = f"duplicate component id {component_id!r}"
        raise TopologyError(msg)


def _check_parallelism(component_id: str, parallelism: Any) -> int:
    if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
        msg = f"component {component_id!r}: parallelism must be an int >= 1, got {parallelism!r}"
        raise TopologyError(msg)
    return parallelism


class TopologyBuilder:
    """Declare spouts and bolts, then ``create_topology()``.

    Example:
        >>> from examples.wordcount import SentenceSpout, SplitSentence, WordCount
        >>> builder = TopologyBuilder()
        >>> _ = builder.set_spout("sentences", SentenceSpout(10))
        >>> _ = builder.set_bolt("split", SplitSentence(), 2).shuffle_grouping("sentences")
        >>> _ = builder.set_bolt("count", WordCount(), 2).fields_grouping("split", ["word"])
        >>> topology = builder.create_topology()
        >>> sorted(topology.components)
        ['$checkpointspout', 'count', 'sentences', 'split']
    """

    def __init__(self) -> None:
        self._objects: dict[str, Any] = {}
        self._parallelism: dict[str, int] = {}
        self._spouts: set[str] = set()
        self._inputs: dict[str, list[InputSpec]] = {}
        self._conf: dict[str, dict[str, Any]] = {}

    def set_spout(self, component_id: str, spout: Spout, parallelism: int = 1) -> BoltDeclarer:
        """Add a spout with ``parallelism`` tasks."""
        _check_id(component_id, self._objects)
        if not isinstance(spout, Spout):
            kind = f"{type(spout).__module__}.{type(spout).__qualname__}"
            msg = f"spout {component_id!r}: expected a statefulbolts.Spout, got {kind}"
            raise TopologyError(msg)
        check_overrides("spout", component_id, spout)
        return self._register(component_id, spout, parallelism, is_spout=True)

    def set_bolt(
        self,
        component_id: str,
        bolt: Bolt | BasicBolt | BaseWindowedBolt,
        parallelism: int = 1,
    ) -> BoltDeclarer:
        """Add a bolt with ``parallelism`` tasks.

        A ``Bolt``, ``BasicBolt``, ``StatefulBolt`` or windowed bolt (``BaseWindowedBolt``,
        ``BaseStatefulWindowedBolt``). A windowed bolt's window is checked now and the bolt is
        wrapped in a ``WindowedBoltExecutor``, a stateful bolt whose windows are checkpointed:
        a topology with a windowed bolt is a checkpointed topology.
        """
        _check_id(component_id, self._objects)
        if isinstance(bolt, BaseWindowedBolt):
            check_overrides("bolt", component_id, bolt)
            try:
                wrapped = WindowedBoltExecutor(bolt)
            except WindowConfigError as exc:
                msg = f"bolt {component_id!r}: {exc}"
                raise WindowConfigError(msg) from exc
            return self._register(component_id, wrapped, parallelism, is_spout=False)
        if not isinstance(bolt, BasicBolt | Bolt):
            kind = f"{type(bolt).__module__}.{type(bolt).__qualname__}"
            msg = (
                f"bolt {component_id!r}: expected a statefulbolts.Bolt, BasicBolt, "
                f"StatefulBolt or BaseWindowedBolt, got {kind}"
            )
            raise TopologyError(msg)
        check_overrides("bolt", component_id, bolt)
        return self._register(component_id, bolt, parallelism, is_spout=False)

    def _check_new_id(self, component_id: str) -> None:
        """A valid id no component has yet, or ``TopologyError``."""
        _check_id(component_id, self._objects)

    def _register(
        self, component_id: str, obj: Any, parallelism: int, *, is_spout: bool
    ) -> BoltDeclarer:
        """Add a component whose id and type were checked."""
        self._parallelism[component_id] = _check_parallelism(component_id, parallelism)
        self._objects[component_id] = obj
        if is_spout:
            self._spouts.add(component_id)
        self._inputs[component_id] = []
        self._conf[component_id] = {}
        return BoltDeclarer(self, component_id)

    def _declared_streams(self, component_id: str, obj: Any) -> dict[str, Fields]:
        declarer = OutputFieldsDeclarer()
        try:
            obj.declare_output_fields(declarer)
        except (TypeError, ValueError) as exc:
            msg = f"component {component_id!r}: declare_output_fields failed: {exc}"
            raise TopologyError(msg) from exc
        return declarer.streams

    def _validated_outputs(self) -> dict[str, dict[str, Fields]]:
        """Check every input and the absence of cycles; return each component's streams."""
        outputs = {cid: self._declared_streams(cid, obj) for cid, obj in self._objects.items()}
        for cid in self._objects:
            if cid in self._spouts and self._inputs[cid]:
                msg = f"spout {cid!r} cannot subscribe to streams"
                raise TopologyError(msg)
            for inp in self._inputs[cid]:
                self._check_input(cid, inp, outputs)
        self._check_acyclic()
        return outputs

    def _spec(
        self,
        cid: str,
        streams: Mapping[str, Fields],
        inputs: Iterable[InputSpec],
        executor: ExecutorKind = ExecutorKind.PLAIN,
    ) -> ComponentSpec:
        return ComponentSpec(
            id=cid,
            obj=self._objects[cid],
            parallelism=self._parallelism[cid],
            is_spout=cid in self._spouts,
            outputs=types.MappingProxyType(dict(streams)),
            inputs=tuple(inputs),
            executor=executor,
            conf=types.MappingProxyType(dict(self._conf[cid])),
        )

    def create_topology(self) -> StormTopology:
        """Validate the wiring and return the immutable topology."""
        outputs = self._validated_outputs()
        stateful = {c for c, o in self._objects.items() if isinstance(o, StatefulBolt)}
        for cid in sorted(stateful):
            if not self._inputs[cid]:
                msg = f"stateful bolt {cid!r} has no input: subscribe it to a spout or a bolt"
                raise TopologyError(msg)

        specs: dict[str, ComponentSpec] = {}
        for cid in self._objects:
            inputs = list(self._inputs[cid])
            streams = dict(outputs[cid])
            executor = ExecutorKind.PLAIN
            if stateful and cid not in self._spouts:
                executor = ExecutorKind.STATEFUL if cid in stateful else ExecutorKind.FORWARDER
                streams[CHECKPOINT_STREAM_ID] = CHECKPOINT_FIELDS
                sources = sorted({i.source.component_id for i in inputs})
                for src in sources:
                    from_id = CHECKPOINT_COMPONENT_ID if src in self._spouts else src
                    gsid = GlobalStreamId(from_id, CHECKPOINT_STREAM_ID)
                    if all(i.source != gsid for i in inputs):
                        inputs.append(InputSpec(gsid, self._barrier_grouping(src, cid)))
            specs[cid] = self._spec(cid, streams, inputs, executor)
        if stateful:
            specs[CHECKPOINT_COMPONENT_ID] = ComponentSpec(
                id=CHECKPOINT_COMPONENT_ID,
                obj=None,
                parallelism=1,
                is_spout=True,
                outputs=types.MappingProxyType({CHECKPOINT_STREAM_ID: CHECKPOINT_FIELDS}),
            )
        return StormTopology(specs)

    def _barrier_grouping(self, src: str, cid: str) -> Grouping:
        """How ``cid`` gets ``src``'s checkpoints: from every task, or along a chain.

        Storm sends a bolt's checkpoint to every downstream task. Where each data input from
        ``src`` chains (``Grouping.chains``: task i feeds task i only), task i's checkpoint
        alone follows all the data task i can get, so the barrier chains too: the runtime
        can then run both bolts in one Spark task, with no shuffle between them.
        """
        p = self._parallelism
        data = [i for i in self._inputs[cid] if i.source.component_id == src]
        if src not in self._spouts and all(i.grouping.chains(p[src], p[cid]) for i in data):
            return Grouping(GroupingKind.LOCAL_OR_SHUFFLE)
        return Grouping(GroupingKind.ALL)

    def _check_input(
        self, cid: str, inp: InputSpec, outputs: Mapping[str, Mapping[str, Fields]]
    ) -> None:
        src, stream = inp.source.component_id, inp.source.stream_id
        if src not in self._objects:
            msg = (
                f"bolt {cid!r} subscribes to unknown component {src!r}; "
                f"components are {sorted(self._objects)}"
            )
            raise TopologyError(msg)
        if src == cid:
            msg = f"bolt {cid!r} subscribes to itself (a cycle)"
            raise TopologyError(msg)
        if stream not in outputs[src]:
            msg = (
                f"bolt {cid!r} subscribes to stream {stream!r} of {src!r}, which declares "
                f"streams {sorted(outputs[src])}"
            )
            raise TopologyError(msg)
        if inp.grouping.kind is GroupingKind.FIELDS:
            declared = outputs[src][stream]
            missing = [f for f in inp.grouping.fields if f not in declared]
            if missing:
                msg = (
                    f"bolt {cid!r}: fields grouping on {missing} but {src!r} stream {stream!r} "
                    f"declares fields {declared.to_list()}"
                )
                raise TopologyError(msg)

    def _check_acyclic(self) -> None:
        state: dict[str, int] = {}  # 1 = on the current path, 2 = done

        def visit(node: str, path: list[str]) -> None:
            state[node] = 1
            for inp in self._inputs[node]:
                src = inp.source.component_id
                if state.get(src) == 1:
                    cycle = [*path[path.index(src) :], src] if src in path else [src, node]
                    msg = f"topology has a cycle: {' -> '.join(reversed(cycle))}"
                    raise TopologyError(msg)
                if state.get(src) is None:
                    visit(src, [*path, src])
            state[node] = 2

        for cid in sorted(self._objects):
            if state.get(cid) is None:
                visit(cid, [cid])
