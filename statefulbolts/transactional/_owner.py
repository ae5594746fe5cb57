"""Which transactional task runs now: the owner of a backing map's record, by default.

``OpaqueMap`` keeps one record per backing map owner (the keys its last txid wrote; see
``_maps``, "the opaque map hole"). Two committer tasks writing one owner's record overwrite each
other's, and a replay then repairs the wrong keys. So a map that is not told its owner takes the
task that uses it: ``<component>-<task index>``, the name ``TopologyContext.state_namespace``
gives a task's state.

The runtime marks the task while a transactional bolt's task runs its user code (from its
``prepare`` to its ``cleanup``, ``statefulbolts.transactional._task``), in a context variable:
per thread, so two topologies running tasks in one driver process never see each other's. A
thread the user starts does not inherit it; a map used from one takes the task it was made in,
or its owner explicitly (``RedisBackingMap(..., context=context)``).

With the task goes the lease epoch of the driver that runs it (``providers.fence_epoch`` of
the task's config; ``None`` when no driver took a lease), which a ``RedisBackingMap`` carries
with its writes so that the map refuses a driver another one took over (``providers._lease``).

Example:
    >>> running_task() is None
    True
    >>> enter_task("count", 1, epoch=3)
    >>> running_task(), running_epoch()
    ('count-1', 3)
    >>> leave_task()
    >>> running_task() is None, running_epoch() is None
    (True, True)
"""

from __future__ import annotations

from contextvars import ContextVar
from typing import Any

from statefulbolts.namespaces import task_name

__all__ = [
    "context_owner",
    "enter_task",
    "leave_task",
    "running_epoch",
    "running_task",
    "task_owner",
]

_RUNNING: ContextVar[str | None] = ContextVar("statefulbolts_transactional_task", default=None)
_EPOCH: ContextVar[int | None] = ContextVar("statefulbolts_transactional_epoch", default=None)


def task_owner(component: str, task: int) -> str:
    """The owner name of a component's task: ``<component>-<task index>``."""
    return task_name(component, task)


def context_owner(context: Any) -> str:
    """The owner name of the task a ``TopologyContext`` describes.

    Raises:
        TypeError: ``context`` is not a task's context (no component id and task index).
    """
    component = getattr(context, "this_component_id", None)
    task = getattr(context, "this_task_index", None)
    if not isinstance(component, str) or not isinstance(task, int):
        msg = (
            "context must be the TopologyContext a bolt's prepare receives (with "
            f"this_component_id and this_task_index); got {context!r}"
        )
        raise TypeError(msg)
    return task_owner(component, task)


def enter_task(component: str, task: int, epoch: int | None = None) -> None:
    """Mark ``component``'s task ``task`` as running in this thread (the runtime calls it).

    ``epoch`` is the lease epoch of the driver running it (``None``: no lease).
    """
    _RUNNING.set(task_owner(component, task))
    _EPOCH.set(epoch)


def leave_task() -> None:
    """No transactional task runs in this thread any more."""
    _RUNNING.set(None)
    _EPOCH.set(None)


def running_task() -> str | None:
    """The owner name of the transactional task running in this thread, or ``None``."""
    return _RUNNING.get()


def running_epoch() -> int | None:
    """The lease epoch of the driver of the task running in this thread, or ``None``."""
    return _EPOCH.get()
