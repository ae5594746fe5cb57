"""Where each stored entry of a component goes when its layout changes: the layout rules.

A ``LayoutRule`` knows a component's old and new ``ComponentShape`` and answers, for an entry of
old task ``source`` with key ``key``, which new tasks get it (``rule(source, key)``), and
whether the old layout would ever have put that key in that task (``rule.check``): a keyed
bolt's state must be keyed by its grouped value(s), or no redistribution by key is right.

=============  ==============================================================================
new layout     where an entry goes
=============  ==============================================================================
keyed          the owner of its key group (``statefulbolts.keygroups``), the key read through
               the bolt's ``grouping_key``; from a replicated layout, task 0's copy only
global         task 0 (two tasks holding one key: refused)
replicated     its own task if it still exists; task 0's entries also to every new task
per task       its own task; an entry of a task that no longer exists is refused
=============  ==============================================================================

Example:
    >>> from statefulbolts.state._shape import ComponentShape, Partitioning
    >>> old = ComponentShape(1, Partitioning.KEYED, key_groups=128, key_arity=1)
    >>> rule = LayoutRule(old, old.with_parallelism(2), lambda k: k, False, "count")
    >>> rule(0, "storm"), rule(0, "spark")
    ((0,), (1,))
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import msgpack

from statefulbolts.keygroups import KeyGroups, key_hash
from statefulbolts.state._redistribute import LayoutError
from statefulbolts.state._shape import ComponentShape, Partitioning

__all__ = ["LayoutRule", "legacy_hash", "unwrap_map_key"]


def legacy_hash(values: Sequence[Any]) -> int:
    """The hash fields grouping used before key groups (``hash % parallelism``): for migration.

    CRC-32 of a ``str`` or ``bytes``, the non-negative part of an ``int``, else CRC-32 of the
    msgpack of the values (of their ``repr`` when msgpack refuses them).
    """
    if len(values) == 1:
        v = values[0]
        if isinstance(v, str):
            return zlib.crc32(v.encode("utf-8", "surrogatepass"))
        if isinstance(v, bool):
            return int(v)
        if isinstance(v, int):
            return v & 0x7FFFFFFFFFFFFFFF
        if isinstance(v, bytes):
            return zlib.crc32(v)
    try:
        blob = msgpack.packb(list(values), use_bin_type=True)
    except (TypeError, ValueError):
        blob = repr(list(values)).encode("utf-8", "surrogatepass")
    return zlib.crc32(blob)


def unwrap_map_key(key: Any) -> Any:
    """A transactional map's state key is the one-item array ``[k]``: ``k``."""
    if isinstance(key, list | tuple) and len(key) == 1:
        return key[0]
    return key


@dataclass(frozen=True)
class LayoutRule:
    """Where each entry of one component goes: ``rule(source task, key) -> target tasks``."""

    old: ComponentShape
    new: ComponentShape
    grouping_key: Callable[[Any], Any]
    maps: bool
    label: str

    @property
    def decodes(self) -> bool:
        keyed = (Partitioning.KEYED, Partitioning.LEGACY)
        return (
            self.new.partitioning in (Partitioning.KEYED, Partitioning.GLOBAL)
            or self.old.partitioning in keyed
        )

    @property
    def unique(self) -> bool:
        """Whether two sources may hold one key that lands in one target (then: refuse)."""
        if self.new.partitioning is Partitioning.GLOBAL:
            return self.old.partitioning is not Partitioning.GLOBAL
        if self.new.partitioning is Partitioning.KEYED:
            return self.old.partitioning not in (Partitioning.KEYED, Partitioning.LEGACY)
        return False

    def _group_value(self, key: Any) -> Any:
        return self.grouping_key(unwrap_map_key(key) if self.maps else key)

    def _source_of(self, value: Any) -> int | None:
        """The task the old layout put the key of grouped ``value`` in (None: not keyed)."""
        old = self.old
        if old.partitioning is Partitioning.KEYED and old.key_groups:
            groups = KeyGroups(old.key_groups)
            return groups.owner(
                groups.group_of_hash(key_hash(value, old.key_arity)), old.parallelism
            )
        if old.partitioning is Partitioning.LEGACY:
            values = (value,) if old.key_arity <= 1 else list(value)
            return legacy_hash(values) % old.parallelism
        return None

    def check(self, source: int, key: Any) -> None:
        """Raise ``LayoutError`` if the old layout would not have put ``key`` in ``source``."""
        if self.old.partitioning not in (Partitioning.KEYED, Partitioning.LEGACY):
            return
        value = self._value_of(key)
        expected = self._source_of(value)
        if expected is not None and expected != source:
            raise LayoutError(self._misplaced(key, value, source, expected))

    def _value_of(self, key: Any) -> Any:
        try:
            return self._group_value(key)
        except Exception as exc:  # the user's grouping_key on a key it does not expect
            msg = f"{self.label}: grouping_key({key!r}) raised {type(exc).__name__}: {exc}"
            raise LayoutError(msg) from exc

    def __call__(self, source: int, key: Any) -> Sequence[int]:
        new, old = self.new, self.old
        p = new.parallelism
        if new.partitioning is Partitioning.KEYED:
            if old.partitioning is Partitioning.REPLICATED and source > 0:
                return ()  # a replica: task 0's copy is the one redistributed
            value = self._value_of(key)
            try:
                h = key_hash(value, new.key_arity)
            except ValueError as exc:
                msg = f"{self.label}: {exc}"
                raise LayoutError(msg) from exc
            groups = KeyGroups(new.key_groups or 1)
            return (groups.owner(groups.group_of_hash(h), p),)
        if new.partitioning is Partitioning.GLOBAL:
            return (0,)
        if new.partitioning is Partitioning.REPLICATED:
            targets = [source] if 0 <= source < p else []
            if source == 0:
                targets.extend(range(old.parallelism, p))
            return targets
        if 0 <= source < p:
            return (source,)
        msg = (
            f"{self.label}: task {source} holds state (key {key!r}), and the new parallelism is "
            f"{p}; the component's input is not fields-grouped, so its state belongs to its "
            "task and cannot be handed to another. Keep the parallelism, or group its input "
            "by fields and key the state by the grouped value(s)"
        )
        raise LayoutError(msg)

    def _misplaced(self, key: Any, value: Any, source: int, expected: int) -> str:
        shown = f"key {key!r}" if value == key else f"key {key!r} (grouping key {value!r})"
        return (
            f"{self.label}: task {source} holds {shown}, which its fields grouping sends to task "
            f"{expected}: the bolt keys its state by something else than the grouped field(s), "
            "so the state cannot be redistributed by key. Define grouping_key(state_key) on the "
            "bolt to give the grouped value(s) of a stored key, or keep the parallelism "
            f"{self.old.parallelism}"
        )
