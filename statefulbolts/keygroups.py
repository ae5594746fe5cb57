"""Key groups: how keyed state and fields grouping are partitioned, whatever the parallelism.

A fields-grouped bolt's keys are hashed into a fixed number of *key groups*
(``topology.state.max.parallelism``, 128 by default), by a hash that is the same in every
process (``stable_hash``; Python's own ``hash`` of a ``str`` is salted per process). Task ``i``
of ``p`` owns a contiguous range of groups, and fields grouping sends a tuple to the task that
owns its key's group. The number of groups is the most tasks such a bolt can have.

Why: with ``hash % parallelism`` a key's task depends on the parallelism, so a topology started
again with another parallelism finds its keys' state in the wrong tasks. With key groups a key's
group never changes; a rescale only hands whole groups to other tasks, and the state of each key
can be found from the key alone (``key_hash`` of a state key equals the routing hash of the
grouped values it was written for). This is Apache Flink's scheme; Storm has none.

Example:
    >>> groups = KeyGroups(128)
    >>> groups.owner(groups.group_of("storm"), 2), groups.owner(groups.group_of("spark"), 2)
    (0, 1)
    >>> groups.task_range(1, 3)
    range(43, 86)
    >>> [groups.owner(g, 3) for g in (42, 43, 85, 86)]
    [0, 1, 1, 2]
"""

from __future__ import annotations

import zlib
from collections.abc import Collection, Mapping, Sequence
from typing import Any

import msgpack

from statefulbolts.config import read_setting
from statefulbolts.errors import ConfigError, TopologyError

__all__ = [
    "DEFAULT_KEY_GROUPS",
    "MAX_KEY_GROUPS",
    "MAX_PARALLELISM_KEY",
    "KeyGroups",
    "component_key_groups",
    "key_hash",
    "stable_hash",
]

MAX_PARALLELISM_KEY = "topology.state.max.parallelism"

# Flink's default lower bound: 128 groups spread evenly over up to a few dozen tasks, and a
# table of 128 owners costs nothing to route by.
DEFAULT_KEY_GROUPS = 128
# 2**15, as Flink: a routing table of this many entries is still small.
MAX_KEY_GROUPS = 32768


def stable_hash(values: Sequence[Any]) -> int:
    """A non-negative hash of grouping values that is the same in every process.

    One ``str`` hashes by CRC-32 of its UTF-8, one ``int`` by its low 64 bits, one ``bytes`` by
    CRC-32; anything else by CRC-32 of its msgpack (a tuple and a list with the same items hash
    alike, as msgpack does not tell them apart), or of its ``repr`` when msgpack cannot encode
    it. The result is then mixed (MurmurHash3's 64-bit finalizer): CRC-32 is linear, so keys
    that differ in a few bits ("w0" ... "w6") share most of their bits, and a key group taken
    from the high bits would put them all in one task.
    """
    if len(values) == 1:
        v = values[0]
        if isinstance(v, str):
            return _mix(zlib.crc32(v.encode("utf-8", "surrogatepass")))
        if isinstance(v, bool):
            return _mix(int(v))
        if isinstance(v, int):
            return _mix(v & _MASK64)
        if isinstance(v, bytes):
            return _mix(zlib.crc32(v))
    try:
        blob = msgpack.packb(list(values), use_bin_type=True)
    except (TypeError, ValueError):
        blob = repr(list(values)).encode("utf-8", "surrogatepass")
    return _mix(zlib.crc32(blob))


_MASK64 = 0xFFFF_FFFF_FFFF_FFFF


def _mix(h: int) -> int:
    """MurmurHash3's ``fmix64``: every input bit reaches every output bit; 63 bits out."""
    h ^= h >> 33
    h = (h * 0xFF51AFD7ED558CCD) & _MASK64
    h ^= h >> 33
    h = (h * 0xC4CEB9FE1A85EC53) & _MASK64
    h ^= h >> 33
    return h >> 1


def key_hash(key: Any, arity: int = 1) -> int:
    """The routing hash of a state key written for a tuple grouped on ``arity`` fields.

    A bolt grouped on one field keys its state by that field's value: the key hashes as the
    one grouped value. A bolt grouped on several fields keys it by their values in order (a
    tuple or a list): the key hashes as those values.

    Raises:
        ValueError: ``arity`` is above 1 and the key is not a sequence of that many values.
    """
    if arity == 1:
        return stable_hash((key,))
    if not isinstance(key, list | tuple) or len(key) != arity:
        msg = (
            f"state key {key!r} is not a sequence of {arity} values, as a bolt fields-grouped "
            f"on {arity} fields must key its state"
        )
        raise ValueError(msg)
    return stable_hash(list(key))


class KeyGroups:
    """``count`` key groups: a key's group, a group's owner among ``p`` tasks, a task's groups.

    Task ``i`` of ``p`` owns groups ``ceil(i * count / p)`` up to, not including,
    ``ceil((i + 1) * count / p)``: contiguous, and as even as ``count / p`` allows.
    """

    __slots__ = ("count",)

    def __init__(self, count: int = DEFAULT_KEY_GROUPS) -> None:
        if not _valid_count(count):
            msg = f"key groups must be an int from 1 to {MAX_KEY_GROUPS}, got {count!r}"
            raise ValueError(msg)
        self.count = count

    def __repr__(self) -> str:
        return f"KeyGroups({self.count})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, KeyGroups) and other.count == self.count

    def __hash__(self) -> int:
        return hash(("KeyGroups", self.count))

    def group_of_hash(self, h: int) -> int:
        """The group of a ``stable_hash``."""
        return h % self.count

    def group_of(self, key: Any, arity: int = 1) -> int:
        """The group of a state key (see ``key_hash``)."""
        return key_hash(key, arity) % self.count

    def owner(self, group: int, parallelism: int) -> int:
        """The task, of ``parallelism``, that owns ``group``."""
        return group * parallelism // self.count

    def owners(self, parallelism: int) -> list[int]:
        """``owner(g, parallelism)`` for every group ``g``: the routing table."""
        self.check(parallelism)
        return [g * parallelism // self.count for g in range(self.count)]

    def task_range(self, task: int, parallelism: int) -> range:
        """The groups task ``task`` of ``parallelism`` owns."""
        self.check(parallelism)
        c = self.count
        return range(-(-task * c // parallelism), -(-(task + 1) * c // parallelism))

    def check(self, parallelism: int) -> None:
        """Raise ``ValueError`` unless ``parallelism`` tasks can each own a group."""
        if not 1 <= parallelism <= self.count:
            msg = (
                f"parallelism {parallelism} is above the {self.count} key groups "
                "(topology.state.max.parallelism): each task must own at least one group"
            )
            raise ValueError(msg)


def _valid_count(count: Any) -> bool:
    return isinstance(count, int) and not isinstance(count, bool) and 1 <= count <= MAX_KEY_GROUPS


def component_key_groups(
    components: Mapping[str, Any], default: int, stateful: Collection[str]
) -> dict[str, int]:
    """The key groups of every component: how its fields-grouped input is partitioned.

    A component's own ``topology.state.max.parallelism`` (set with ``add_configuration``) wins
    over the topology's ``default``. A component that keeps no state and has more tasks than
    that gets one group per task (its partitioning is nobody's business across restarts).

    Raises:
        TopologyError: a component in ``stateful`` has more tasks than key groups, or a
            component's own setting is not a valid count.
    """
    groups: dict[str, int] = {}
    for cid, spec in components.items():
        own = (getattr(spec, "conf", None) or {}).get(MAX_PARALLELISM_KEY)
        setting = {MAX_PARALLELISM_KEY: default if own is None else own}
        try:
            count = read_setting(setting, MAX_PARALLELISM_KEY)  # the config model's rule
        except ConfigError as exc:
            msg = f"component {cid!r}: {exc}"
            raise TopologyError(msg) from exc
        n = spec.parallelism
        if n > count:
            if cid in stateful:
                msg = (
                    f"component {cid!r} has parallelism {n}, above its {count} key groups "
                    f"({MAX_PARALLELISM_KEY}): a stateful bolt's state is partitioned into key "
                    f"groups and each task owns at least one; raise {MAX_PARALLELISM_KEY} to "
                    f"{n} or more (a restart then redistributes the state), or lower the "
                    "parallelism"
                )
                raise TopologyError(msg)
            count = n
        groups[cid] = count
    return groups
