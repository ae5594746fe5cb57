"""What a topology asks for: each stateful component's shape, and its bolt's hooks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from statefulbolts.components import StatefulBolt
from statefulbolts.errors import StateEvolutionError
from statefulbolts.state import ComponentShape, Partitioning, serializers_of
from statefulbolts.streams import GroupingKind
from statefulbolts.topology import CHECKPOINT_STREAM_ID

__all__ = ["Wanted", "bolt_name", "overrides", "partitioning_of", "wanted_shapes"]

_GLOBALISH = frozenset({GroupingKind.GLOBAL})


def partitioning_of(spec: Any) -> tuple[Partitioning, int]:
    """How a component's state is spread over its tasks, from its data inputs' groupings.

    Returns ``(partitioning, key arity)``; the arity (grouped fields per key) is 0 unless keyed.
    """
    groupings = [i.grouping for i in spec.inputs if i.source.stream_id != CHECKPOINT_STREAM_ID]
    kinds = {g.kind for g in groupings}
    if groupings and kinds == {GroupingKind.FIELDS}:
        arities = {len(g.fields) for g in groupings}
        if len(arities) == 1:
            return Partitioning.KEYED, arities.pop()
        return Partitioning.PER_TASK, 0
    if groupings and kinds <= _GLOBALISH:
        return Partitioning.GLOBAL, 0
    if groupings and kinds == {GroupingKind.ALL}:
        return Partitioning.REPLICATED, 0
    return Partitioning.PER_TASK, 0


@dataclass(frozen=True)
class Wanted:
    """The shape a topology asks for, per stateful component, and the bolts (their hooks)."""

    shapes: Mapping[str, ComponentShape]
    bolts: Mapping[str, Any] = field(default_factory=dict)


def wanted_shapes(
    components: Mapping[str, Any],
    stateful: Iterable[str],
    key_groups: Mapping[str, int],
    conf: Mapping[str, Any],
) -> Wanted:
    """The ``Wanted`` of a topology: its ``stateful`` components as they are declared."""
    serializers = serializers_of(conf)
    shapes: dict[str, ComponentShape] = {}
    bolts: dict[str, Any] = {}
    for cid in sorted(stateful):
        spec = components[cid]
        partitioning, arity = partitioning_of(spec)
        version = getattr(spec.obj, "state_version", 1)
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            msg = f"component {cid!r}: state_version must be an int of 1 or more, got {version!r}"
            raise StateEvolutionError(msg)
        shapes[cid] = ComponentShape(
            parallelism=spec.parallelism,
            partitioning=partitioning,
            key_groups=key_groups[cid] if partitioning is Partitioning.KEYED else None,
            key_arity=arity,
            serializers=serializers,
            state_version=version,
        )
        if spec.obj is not None:
            bolts[cid] = spec.obj
    return Wanted(shapes, bolts)


def overrides(bolt: Any, name: str) -> bool:
    """Whether ``bolt``'s class defines ``name`` itself (not the base class's default)."""
    method = getattr(type(bolt), name, None)
    return method is not None and method is not getattr(StatefulBolt, name, None)


def bolt_name(bolt: Any) -> str:
    """The bolt's class as ``module.qualname``, for messages."""
    if bolt is None:
        return "the bolt"
    return f"{type(bolt).__module__}.{type(bolt).__qualname__}"
