"""Where a topology's state lives: its namespaces, formatted and parsed in one place.

Every namespace of a checkpointed topology ``T`` starts with ``T/``, every namespace of a
transactional id ``I`` with ``$transactional/I/`` (the *prefix*). Below it:

- ``<component>-<task index>``: a stateful bolt task's state (a ``TaskNamespace``);
- ``<component>-<task index>/<map>``: a transactional committer task's map ``<map>``;
- ``$<name>...``: the framework's own records (``$checkpointspout-0``, ``$shape``,
  ``$deadletter``, ...). Component ids never start with ``$`` (``TopologyBuilder`` refuses
  them), so a record can never be taken for a task.

Example:
    >>> ns = TaskNamespace(topology_prefix("wc"), "count", 1)
    >>> str(ns)
    'wc/count-1'
    >>> TaskNamespace.parse("wc/", "wc/count-1") == ns
    True
    >>> TaskNamespace.parse("$transactional/words/", "$transactional/words/count-0/default")
    TaskNamespace(prefix='$transactional/words/', component='count', task=0, map='default')
    >>> TaskNamespace.parse("wc/", "wc/$checkpointspout-0") is None
    True
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = [
    "RECORD_MARK",
    "TRANSACTIONAL_ROOT",
    "TaskNamespace",
    "record_namespace",
    "topology_prefix",
    "transactional_prefix",
]

# The first character of a framework record's name below a prefix.
RECORD_MARK = "$"
TRANSACTIONAL_ROOT = "$transactional"


def topology_prefix(name: str) -> str:
    """``T/``: what every namespace of checkpointed topology ``name`` starts with."""
    return f"{name}/"


def transactional_prefix(transactional_id: str) -> str:
    """``$transactional/I/``: what every namespace of a transactional id starts with."""
    return f"{TRANSACTIONAL_ROOT}/{transactional_id}/"


def record_namespace(prefix: str, name: str) -> str:
    """The namespace of the framework's record ``name`` under ``prefix`` (``T/$shape``)."""
    return f"{prefix}{RECORD_MARK}{name}"


@dataclass(frozen=True, order=True)
class TaskNamespace:
    """One task's namespace (or, transactional, one of its maps) under a prefix."""

    prefix: str
    component: str
    task: int
    map: str | None = None

    def __str__(self) -> str:
        base = f"{self.prefix}{self.component}-{self.task}"
        return base if self.map is None else f"{base}/{self.map}"

    def with_task(self, task: int) -> TaskNamespace:
        """The same component (and map) in another task."""
        return replace(self, task=task)

    def with_component(self, component: str) -> TaskNamespace:
        """The same task (and map) of another component (a rename)."""
        return replace(self, component=component)

    @classmethod
    def parse(cls, prefix: str, namespace: str) -> TaskNamespace | None:
        """The task namespace ``namespace`` is under ``prefix``; ``None`` for anything else.

        A framework record (``$...``), a name without ``-<task index>`` or with a task index
        written otherwise than ``str(int)`` ("-01") is not a task namespace.
        """
        if not namespace.startswith(prefix):
            return None
        rest = namespace[len(prefix) :]
        if not rest or rest.startswith(RECORD_MARK):
            return None
        head, slash, map_name = rest.partition("/")
        component, dash, task = head.rpartition("-")
        if not dash or not component or not task.isascii() or not task.isdigit():
            return None
        if str(int(task)) != task or (slash and not map_name) or "/" in map_name:
            return None
        return cls(prefix, component, int(task), map_name if slash else None)
