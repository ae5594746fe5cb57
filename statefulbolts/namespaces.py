"""Where a topology's state lives: its namespaces, formatted and parsed in one place.

Every namespace of a checkpointed topology ``T`` starts with ``T/``, every namespace of a
transactional id ``I`` with ``$transactional/I/`` (the *prefix*). Below it:

- ``<component>-<task index>``: a stateful bolt task's state (a ``TaskNamespace``);
- ``<component>-<task index>/<map>``: a transactional committer task's map ``<map>``;
- ``<component>-<task index>/$timers``: a stateful bolt task's timers
  (``statefulbolts.timers``), beside its state and under the same task root, so that whatever
  ships or drops a task's state takes them along;
- ``$<name>...``: the framework's own records (``$checkpointspout-0``, ``$shape``,
  ``$deadletter``, ``$window/<component>-<task index>``: a windowed bolt task's windows, ...).
  Component ids never start with ``$`` (``TopologyBuilder`` refuses them), so a record can
  never be taken for a task;
- below a transactional prefix only: ``coordinator`` (the coordinator's state),
  ``partitions`` (the opaque partitions counted) and ``partition-<p>`` (partition ``p``'s
  metas), older than the ``$`` convention and kept as they are stored.

Nothing else in the project spells these layouts out: a namespace is made with the functions
and the type below, and read back with ``TaskNamespace.parse`` (or ``partition_of``).

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
    >>> checkpoint_namespace(topology_prefix("wc"))
    'wc/$checkpointspout-0'
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = [
    "COORDINATOR",
    "PARTITION_INDEX",
    "RECORD_MARK",
    "TRANSACTIONAL_ROOT",
    "TaskNamespace",
    "checkpoint_namespace",
    "coordinator_namespace",
    "partition_index_namespace",
    "partition_namespace",
    "partition_of",
    "record_namespace",
    "task_name",
    "timers_namespace",
    "topology_prefix",
    "transactional_id_of",
    "window_namespace",
    "window_prefix",
    "transactional_prefix",
]

# The first character of a framework record's name below a prefix.
RECORD_MARK = "$"
TRANSACTIONAL_ROOT = "$transactional"
# The checkpoint spout's record: the component ``$checkpointspout`` (``statefulbolts.topology``)
# and its one task, 0.
_CHECKPOINT_SPOUT_RECORD = "checkpointspout-0"
# Below a transactional prefix: the coordinator's namespace, the partition count's, and the
# start of each partition's.
COORDINATOR = "coordinator"
# Below a topology prefix: ``$window/<task name>``, a windowed bolt task's windows.
_WINDOW_RECORD = "window"
PARTITION_INDEX = "partitions"
_PARTITION = "partition-"
# Below a stateful task's namespace: the record of its timers.
_TIMERS_RECORD = "timers"


def topology_prefix(name: str) -> str:
    """``T/``: what every namespace of checkpointed topology ``name`` starts with."""
    return f"{name}/"


def transactional_prefix(transactional_id: str) -> str:
    """``$transactional/I/``: what every namespace of a transactional id starts with."""
    return f"{TRANSACTIONAL_ROOT}/{transactional_id}/"


def transactional_id_of(prefix: str) -> str | None:
    """The transactional id a prefix belongs to; ``None`` for a checkpointed topology's prefix.

    Example:
        >>> transactional_id_of(transactional_prefix("words")), transactional_id_of("wc/")
        ('words', None)
    """
    root = f"{TRANSACTIONAL_ROOT}/"
    if not prefix.startswith(root) or not prefix.endswith("/") or len(prefix) <= len(root) + 1:
        return None
    return prefix[len(root) : -1]


def record_namespace(prefix: str, name: str) -> str:
    """The namespace of the framework's record ``name`` under ``prefix`` (``T/$shape``)."""
    return f"{prefix}{RECORD_MARK}{name}"


def checkpoint_namespace(prefix: str) -> str:
    """``T/$checkpointspout-0``: where the checkpoint spout saves its txid and phase."""
    return record_namespace(prefix, _CHECKPOINT_SPOUT_RECORD)


def window_prefix(prefix: str) -> str:
    """``T/$window/``: what the windows' namespace of every windowed bolt task starts with.

    Below it a windowed task's windows are named as its task (``TaskNamespace.parse`` with
    this prefix reads them back).

    Example:
        >>> ns = window_namespace(TaskNamespace.of_topology("trends", "top", 1))
        >>> TaskNamespace.parse(window_prefix("trends/"), ns)
        TaskNamespace(prefix='trends/$window/', component='top', task=1, map=None)
    """
    return f"{record_namespace(prefix, _WINDOW_RECORD)}/"


def window_namespace(task: TaskNamespace) -> str:
    """``T/$window/<component>-<task index>``: the windows of a windowed bolt's task.

    Next to the task's own namespace, a framework record: a windowed bolt's user state (if it
    has one) stays in the task's namespace, where rescales and the state tool find only it.

    Example:
        >>> window_namespace(TaskNamespace.of_topology("trends", "top", 1))
        'trends/$window/top-1'
        >>> TaskNamespace.parse("trends/", "trends/$window/top-1") is None
        True
    """
    return f"{window_prefix(task.prefix)}{task_name(task.component, task.task)}"


def coordinator_namespace(prefix: str) -> str:
    """``$transactional/I/coordinator``: the transactional coordinator's state."""
    return f"{prefix}{COORDINATOR}"


def partition_namespace(prefix: str, partition: int) -> str:
    """``$transactional/I/partition-<p>``: partition ``p``'s metas, by txid."""
    return f"{prefix}{_PARTITION}{partition}"


def partition_index_namespace(prefix: str) -> str:
    """``$transactional/I/partitions``: how many partitions an opaque spout has stored metas of."""
    return f"{prefix}{PARTITION_INDEX}"


def partition_of(prefix: str, namespace: str) -> int | None:
    """The partition whose metas ``namespace`` holds; ``None`` for any other namespace.

    Example:
        >>> prefix = transactional_prefix("words")
        >>> partition_of(prefix, partition_namespace(prefix, 3))
        3
        >>> partition_of(prefix, "$transactional/words/count-3/default") is None
        True
    """
    if not namespace.startswith(prefix + _PARTITION):
        return None
    index = namespace[len(prefix) + len(_PARTITION) :]
    return int(index) if index.isascii() and index.isdigit() else None


def timers_namespace(task_namespace: str) -> str:
    """``T/<component>-<task>/$timers``: the timers of the stateful task whose state is there.

    Example:
        >>> timers_namespace(str(TaskNamespace.of_topology("wc", "count", 1)))
        'wc/count-1/$timers'
    """
    return f"{task_namespace}/{RECORD_MARK}{_TIMERS_RECORD}"


def task_name(component: str, task: int) -> str:
    """``<component>-<task index>``: a task's name below a prefix (and a map's owner).

    Example:
        >>> task_name("count", 2)
        'count-2'
    """
    return f"{component}-{task}"


@dataclass(frozen=True, order=True)
class TaskNamespace:
    """One task's namespace (or, transactional, one of its maps) under a prefix."""

    prefix: str
    component: str
    task: int
    map: str | None = None

    def __str__(self) -> str:
        base = f"{self.prefix}{task_name(self.component, self.task)}"
        return base if self.map is None else f"{base}/{self.map}"

    @classmethod
    def of_topology(cls, topology: str, component: str, task: int) -> TaskNamespace:
        """Task ``task`` of ``component`` in checkpointed topology ``topology``.

        Example:
            >>> str(TaskNamespace.of_topology("wc", "count", 0))
            'wc/count-0'
        """
        return cls(topology_prefix(topology), component, task)

    @classmethod
    def of_transactional(
        cls, transactional_id: str, component: str, task: int, map_name: str | None = None
    ) -> TaskNamespace:
        """Task ``task`` of ``component`` (its map ``map_name``) under a transactional id.

        Example:
            >>> str(TaskNamespace.of_transactional("words", "count", 1, "default"))
            '$transactional/words/count-1/default'
        """
        return cls(transactional_prefix(transactional_id), component, task, map_name)

    def with_prefix(self, prefix: str) -> TaskNamespace:
        """The same task (and map) under another prefix (a staging area, say)."""
        return replace(self, prefix=prefix)

    def with_map(self, map_name: str | None) -> TaskNamespace:
        """The same task's map ``map_name`` (``None``: the task's own namespace)."""
        return replace(self, map=map_name)

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
