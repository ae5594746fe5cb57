"""The stored shape of a topology: how its committed state is laid out, saved beside it.

State is only meaningful with the layout that wrote it: which task holds which keys depends on
the parallelism and the key groups, and the bytes depend on the serializers. So with its
committed state a topology records, per stateful component (``ComponentShape``):

- ``parallelism``, ``partitioning`` and, for keyed state, ``key_groups`` and ``key_arity`` (how
  many grouped fields make a key);
- ``serializers``: the provider config's ``keyClass``, ``valueClass``, ``keySerializerClass``,
  ``valueSerializerClass``;
- ``state_version``: the bolt's own version of what it stores (``StatefulBolt.state_version``).

The record is a framework record (``<prefix>$shape``, plain msgpack, key ``"shape"``). Beside
the components it may hold an ``operation``: a change of the stored state under way (a rescale,
a rename, a migration; ``statefulbolts.state.Redistribution``), so that a start after a crash
finishes it. A start compares the record with the topology it was given
(``recovery.evolve``).

Example:
    >>> shape = ComponentShape(2, Partitioning.KEYED, key_groups=128, key_arity=1)
    >>> ComponentShape.from_value(shape.to_value(), "count") == shape
    True
    >>> shape.describe()
    'parallelism 2, keyed by 1 field in 128 key groups, state version 1'
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from providers import (
    SERIALIZER_FIELDS,
    STATE_PROVIDER_CONFIG_KEY,
    KeyValueState,
    provider_config_fields,
)
from statefulbolts.errors import StateToolError
from statefulbolts.namespaces import record_namespace

__all__ = [
    "SHAPE_RECORD",
    "ComponentShape",
    "Partitioning",
    "StoredShape",
    "read_shape",
    "serializers_of",
    "shape_namespace",
    "write_shape",
]

SHAPE_RECORD = "shape"  # the record's name under a prefix, and its one key
FORMAT = 1


class Partitioning(enum.Enum):
    """How a stateful component's state is spread over its tasks.

    Decided by the groupings of its data inputs (``partitioning_of``): what a restart with
    another parallelism can do with it follows (README, "Changing a topology").
    """

    KEYED = "keyed"  # every input fields-grouped: a key's state is in the task owning its group
    GLOBAL = "global"  # every input global-grouped: task 0 holds all of it
    REPLICATED = "replicated"  # every input all-grouped: each task saw every tuple
    PER_TASK = "per-task"  # anything else: each task's state is its own
    LEGACY = "legacy"  # keyed by hash % parallelism: committed before key groups existed


@dataclass(frozen=True)
class ComponentShape:
    """How one component's state is stored (see the module docstring)."""

    parallelism: int
    partitioning: Partitioning
    key_groups: int | None = None
    key_arity: int = 0
    serializers: tuple[tuple[str, str | None], ...] = ()
    state_version: int = 1

    def to_value(self) -> dict[str, Any]:
        """The stored form (plain values)."""
        return {
            "parallelism": self.parallelism,
            "partitioning": self.partitioning.value,
            "key_groups": self.key_groups,
            "key_arity": self.key_arity,
            "serializers": {name: value for name, value in self.serializers},
            "state_version": self.state_version,
        }

    @classmethod
    def from_value(cls, value: Any, component: str) -> ComponentShape:
        """Read the stored form back.

        Raises:
            StateToolError: the stored form is damaged (names the component).
        """
        try:
            serializers = value.get("serializers") or {}
            shape = cls(
                parallelism=_int(value["parallelism"]),
                partitioning=Partitioning(value["partitioning"]),
                key_groups=None if value.get("key_groups") is None else _int(value["key_groups"]),
                key_arity=_int(value.get("key_arity", 0)),
                serializers=tuple(sorted((str(k), v) for k, v in serializers.items())),
                state_version=_int(value.get("state_version", 1)),
            )
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            msg = f"the stored shape of component {component!r} is damaged: {value!r} ({exc})"
            raise StateToolError(msg) from exc
        if shape.parallelism < 1:
            msg = f"the stored shape of component {component!r} has parallelism {shape.parallelism}"
            raise StateToolError(msg)
        return shape

    def describe(self) -> str:
        """For people: ``parallelism 2, keyed by 1 field in 128 key groups, state version 1``."""
        p = self.partitioning
        if p is Partitioning.KEYED:
            fields = "field" if self.key_arity == 1 else "fields"
            layout = f"keyed by {self.key_arity} {fields} in {self.key_groups} key groups"
        elif p is Partitioning.LEGACY:
            layout = "keyed by hash % parallelism (before key groups)"
        else:
            layout = p.value
        return f"parallelism {self.parallelism}, {layout}, state version {self.state_version}"

    def with_parallelism(self, parallelism: int) -> ComponentShape:
        """The same shape with another parallelism."""
        return replace(self, parallelism=parallelism)


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        msg = f"expected an int, got {value!r}"
        raise TypeError(msg)
    return value


@dataclass(frozen=True)
class StoredShape:
    """The whole record: every component's shape, and an operation under way (or ``None``)."""

    components: Mapping[str, ComponentShape] = field(default_factory=dict)
    operation: Mapping[str, Any] | None = None

    def to_value(self) -> dict[str, Any]:
        """The stored form."""
        return {
            "format": FORMAT,
            "components": {cid: s.to_value() for cid, s in sorted(self.components.items())},
            "operation": None if self.operation is None else dict(self.operation),
        }

    @classmethod
    def from_value(cls, value: Any) -> StoredShape:
        """Read the stored form back.

        Raises:
            StateToolError: a damaged record, or one written by a newer version.
        """
        if not isinstance(value, Mapping) or not isinstance(value.get("components"), Mapping):
            msg = f"the stored shape record is damaged: {value!r}"
            raise StateToolError(msg)
        if value.get("format") != FORMAT:
            msg = (
                f"the stored shape record has format {value.get('format')!r}; this version of "
                f"statefulbolts reads format {FORMAT}"
            )
            raise StateToolError(msg)
        components = {
            str(cid): ComponentShape.from_value(v, str(cid))
            for cid, v in value["components"].items()
        }
        operation = value.get("operation")
        if operation is not None and not isinstance(operation, Mapping):
            msg = f"the stored shape record's operation is damaged: {operation!r}"
            raise StateToolError(msg)
        return cls(components, operation)


def shape_namespace(prefix: str) -> str:
    """``<prefix>$shape``."""
    return record_namespace(prefix, SHAPE_RECORD)


def read_shape(state: KeyValueState) -> StoredShape | None:
    """The record in ``state`` (a system state of ``shape_namespace``), or ``None``."""
    value = state.get(SHAPE_RECORD)
    return None if value is None else StoredShape.from_value(value)


def write_shape(state: KeyValueState, shape: StoredShape) -> None:
    """Replace the record, atomically (one no-txid commit)."""
    state.put(SHAPE_RECORD, shape.to_value())
    state.commit()


def serializers_of(conf: Mapping[str, Any]) -> tuple[tuple[str, str | None], ...]:
    """The serializer fields of the provider config in ``conf``, as a shape records them.

    Raises:
        ProviderConfigError: the provider config is not JSON or not an object
            (``providers.provider_config_fields``).
    """
    data = provider_config_fields(conf.get(STATE_PROVIDER_CONFIG_KEY))
    return tuple(
        sorted(
            (name, None if data.get(name) is None else str(data[name]))
            for name in SERIALIZER_FIELDS
        )
    )
