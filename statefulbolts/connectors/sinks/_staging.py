"""Where a sink bolt keeps staged records in its state, and how they survive a rescale.

A staged record waits in the sink task's managed state (``KeyValueState``): written there when
its transaction is prepared, committed or rolled back with the transaction, and deleted once the
target's marker covers it. Its key, ``StagedKey``, says everything the bolt needs without
reading the value:

``$sink/<anchor>x<arity>/<lane>/<txid>/<chunk>``

- ``lane``: the staging task, ``<task>of<parallelism>`` (``Lane``), whose marker covers it;
- ``txid``: the transaction that staged it (12 digits, so keys sort by txid);
- ``chunk``: records of one lane and txid go in chunks of a bounded size, in order;
- ``anchor``: a grouping value that the component's key groups put in the staging task
  (``anchor_for``), and ``arity`` the number of fields it stands for.

Why an anchor. A rescale moves a keyed (fields-grouped) component's stored keys to the task
that owns the key group of each key's grouped value (``StatefulBolt.grouping_key``), and first
checks that every key sits in the task its group says. A staged record has no grouped value of
its own, so the sink bolt answers with the lane's anchor: every key of a lane has the same one,
so a lane's records move together, whole, to one task, which publishes them under the lane's
own marker. The anchor is found once per lane: the smallest integer whose group that task owns.
A component whose input is not fields-grouped keeps each task's keys in the task (a rescale up
adds empty tasks); the anchor is then never asked for.

Example:
    >>> key = StagedKey(anchor=5, arity=1, lane="1of2", txid=42, chunk=0)
    >>> str(key)
    '$sink/5x1/1of2/000000000042/00000'
    >>> StagedKey.parse(str(key)) == key
    True
    >>> key.grouping_value
    5
    >>> from statefulbolts.keygroups import KeyGroups, key_hash
    >>> groups = KeyGroups(128)
    >>> groups.owner(groups.group_of_hash(key_hash(anchor_for(1, 2, 128, 1), 1)), 2)
    1
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any, NamedTuple

from statefulbolts.keygroups import (
    DEFAULT_KEY_GROUPS,
    MAX_PARALLELISM_KEY,
    KeyGroups,
    component_key_groups,
    key_hash,
)
from statefulbolts.streams import GroupingKind
from statefulbolts.topology import CHECKPOINT_STREAM_ID

__all__ = ["PREFIX", "StagedKey", "anchor_for", "lane_anchor"]

PREFIX = "$sink/"
_KEY = re.compile(r"\$sink/(\d+)x(\d+)/(\d+of\d+)/(\d{12})/(\d{5})")


class StagedKey(NamedTuple):
    """The state key of one chunk of staged records (see the module docstring)."""

    anchor: int
    arity: int
    lane: str
    txid: int
    chunk: int

    def __str__(self) -> str:
        return f"{PREFIX}{self.anchor}x{self.arity}/{self.lane}/{self.txid:012d}/{self.chunk:05d}"

    @property
    def grouping_value(self) -> Any:
        """The value a fields grouping on ``arity`` fields would route to the lane's task."""
        return self.anchor if self.arity <= 1 else (self.anchor, *([0] * (self.arity - 1)))

    @classmethod
    def parse(cls, text: Any) -> StagedKey | None:
        """The key ``text`` names, or ``None`` when it is not a staged key."""
        if not isinstance(text, str):
            return None
        match = _KEY.fullmatch(text)
        if match is None:
            return None
        return cls(int(match[1]), int(match[2]), match[3], int(match[4]), int(match[5]))


@functools.lru_cache(maxsize=256)
def anchor_for(task: int, parallelism: int, key_groups: int, arity: int) -> int:
    """The smallest ``i >= 0`` whose grouping value the key groups give to ``task``.

    Key groups spread values evenly, so about ``parallelism`` values are tried.

    Raises:
        ValueError: ``task`` is not below ``parallelism``, or more tasks than key groups.
    """
    groups = KeyGroups(key_groups)
    groups.check(parallelism)
    if not 0 <= task < parallelism:
        msg = f"task index {task} is not below the parallelism {parallelism}"
        raise ValueError(msg)
    i = 0
    while True:
        value: Any = i if arity <= 1 else [i, *([0] * (arity - 1))]
        if groups.owner(groups.group_of_hash(key_hash(value, max(arity, 1))), parallelism) == task:
            return i
        i += 1


def lane_anchor(spec: Any, task: int, conf: Mapping[str, Any]) -> tuple[int, int]:
    """``(anchor, arity)`` of ``spec``'s task ``task``: its component's key groups and arity.

    The arity is the number of fields every data input is grouped on (1 when the input is not
    fields-grouped on one number of fields: the anchor is then unused); the key groups are the
    component's own ``topology.state.max.parallelism``, else the topology's.
    """
    groupings = [i.grouping for i in spec.inputs if i.source.stream_id != CHECKPOINT_STREAM_ID]
    arities = {len(g.fields) for g in groupings if g.kind is GroupingKind.FIELDS}
    keyed = bool(groupings) and all(g.kind is GroupingKind.FIELDS for g in groupings)
    arity = arities.pop() if keyed and len(arities) == 1 else 1
    default = conf.get(MAX_PARALLELISM_KEY, DEFAULT_KEY_GROUPS)
    groups = component_key_groups({spec.id: spec}, default, {spec.id})[spec.id]
    return anchor_for(task, spec.parallelism, groups, arity), arity
