"""How components connect: stream ids, groupings and a bolt's inputs (plain value types).

They sit below ``topology`` (the builder and the immutable description) and ``context`` (what a
task knows), so both can use them without importing each other.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from statefulbolts.tuples import DEFAULT_STREAM

__all__ = ["GlobalStreamId", "Grouping", "GroupingKind", "InputSpec"]


class GroupingKind(enum.Enum):
    """How an input stream's tuples are spread over the consuming bolt's tasks."""

    SHUFFLE = "shuffle"
    FIELDS = "fields"
    ALL = "all"
    GLOBAL = "global"
    NONE = "none"
    LOCAL_OR_SHUFFLE = "local_or_shuffle"


_CHAINABLE = frozenset({GroupingKind.NONE, GroupingKind.LOCAL_OR_SHUFFLE})


@dataclass(frozen=True)
class GlobalStreamId:
    """A stream of a component."""

    component_id: str
    stream_id: str = DEFAULT_STREAM


@dataclass(frozen=True)
class Grouping:
    """A grouping and, for fields grouping, the fields."""

    kind: GroupingKind
    fields: tuple[str, ...] = ()

    def chains(self, source_tasks: int, tasks: int) -> bool:
        """Whether this grouping sends task i's tuples to the consumer's task i, and only there.

        So do a none and a local-or-shuffle grouping between components of equal parallelism:
        they promise no particular task, Storm lets a none grouping run in its source's thread,
        and a task's own index is the most local there is.

        Example:
            >>> Grouping(GroupingKind.NONE).chains(2, 2), Grouping(GroupingKind.NONE).chains(2, 3)
            (True, False)
        """
        return self.kind in _CHAINABLE and source_tasks == tasks


@dataclass(frozen=True)
class InputSpec:
    """One input of a bolt."""

    source: GlobalStreamId
    grouping: Grouping
