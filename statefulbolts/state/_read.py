"""Reading a component's state offline: streamed, as a dict, one key; committed or as prepared.

The committed view is the committed map alone. The prepared view ("as of the prepared delta")
is what the state will hold once the pending transaction commits: the committed map with the
prepared writes over it and the prepared deletions taken out, which is also what a bolt's
``get`` reads in a restarted task before the transaction is decided. Both stream the committed
map a page at a time; the prepared view holds the delta (one transaction's writes) in memory.

A transactional committer's map stores ``[txid, value]`` (or opaque ``[txid, curr, prev]``)
under the one-item key ``[key]`` beside a ``"$record"`` slot; the map view shows ``key ->
value`` (``curr``), as ``TopologyHandle.read_state`` does, and ``raw=True`` the stored form.

Example:
    >>> from providers.memory import InMemoryKeyValueStateProvider as Memory
    >>> state = Memory().new_state("doc-wc/count-0", {})
    >>> state.put("storm", 3)
    >>> state.prepare_commit(1)
    >>> state.commit(1)
    >>> read_state({}, "count", topology="doc-wc")
    {'storm': 3}
    >>> Memory.drop("doc-wc/")
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from statefulbolts.errors import StateToolError
from statefulbolts.state._scope import Scope, component_tasks, image_state

__all__ = ["Row", "View", "get_value", "hashable", "iter_rows", "iter_state", "read_state"]

# The committer map's record slot (statefulbolts.transactional.StateBackingMap's layout).
_RECORD_KEY = "$record"
_SKIP: Any = object()


class Row(NamedTuple):
    """One key of one task: what ``dump`` prints and a state DataFrame holds."""

    task: int
    namespace: str
    key: Any
    value: Any


def hashable(key: Any) -> Any:
    """A key read back from a store as a dict key: msgpack turns tuples into lists."""
    if isinstance(key, list):
        return tuple(hashable(k) for k in key)
    return key


class View:
    """How a component's stored entries become rows: committed or prepared, map view or raw."""

    def __init__(self, scope: Scope, prepared: bool, raw: bool) -> None:
        self.scope, self.prepared, self.raw = scope, prepared, raw
        self.map_view = scope.kind == "transactional" and not raw

    def entry(self, key: Any, value: Any) -> tuple[Any, Any] | Any:
        """``(key, value)`` as shown, or ``_SKIP`` (a committer map's record)."""
        if not self.map_view:
            return key, value
        if key == _RECORD_KEY or not isinstance(key, list | tuple) or len(key) != 1:
            return _SKIP
        if isinstance(value, list | tuple) and len(value) in (2, 3):
            return key[0], value[1]
        return _SKIP

    def stored_key(self, key: Any) -> Any:
        """The key as the state holds it (a committer map wraps it in a one-item tuple)."""
        return (key,) if self.map_view else key

    def rows(self, conf: Mapping[str, Any], task: int, namespace: str) -> Iterator[Row]:
        """The task's entries in this view, decoded, streamed."""
        state = image_state(conf, namespace, self.scope.is_system(namespace))
        decode_key, decode_value = state.decode_key, state.decode_value
        delta: dict[bytes, bytes | None] = dict(state.scan_prepared()) if self.prepared else {}
        for ekey, payload in state.scan_committed():
            if ekey in delta:
                continue
            shown = self.entry(decode_key(ekey), decode_value(payload))
            if shown is not _SKIP:
                yield Row(task, namespace, *shown)
        for ekey, maybe in delta.items():
            if maybe is not None:
                shown = self.entry(decode_key(ekey), decode_value(maybe))
                if shown is not _SKIP:
                    yield Row(task, namespace, *shown)


def iter_rows(
    conf: Mapping[str, Any],
    component: str,
    *,
    topology: str | None = None,
    transactional_id: str | None = None,
    map_name: str = "default",
    prepared: bool = False,
    raw: bool = False,
) -> Iterator[Row]:
    """Every key of every task of ``component``, task by task, as ``Row`` s (streamed).

    Arguments as for ``iter_state``.
    """
    scope = Scope.of(topology, transactional_id)
    view = View(scope, prepared, raw)
    for task in component_tasks(conf, scope, component, map_name):
        yield from view.rows(conf, task.task, task.namespace)


def iter_state(
    conf: Mapping[str, Any],
    component: str,
    *,
    topology: str | None = None,
    transactional_id: str | None = None,
    map_name: str = "default",
    prepared: bool = False,
    raw: bool = False,
) -> Iterator[tuple[Any, Any]]:
    """Stream ``(key, value)`` of a component's committed state, over all its tasks.

    Reads the provider ``conf`` names, offline: nothing is written, and memory stays bounded
    whatever the number of keys (the store is read a page at a time). A key held by two tasks
    (a stateful bolt fed by a shuffle grouping) comes once per task.

    Args:
        conf: the topology's config (``topology.state.provider`` and its config).
        component: the stateful bolt's id (for a transactional id, the committer's).
        topology: the checkpointed topology's name; or
        transactional_id: the transactional topology's id.
        map_name: a committer's map (``context.backing_map(name)``), "default" by default.
        prepared: show the state as of the prepared delta, committed values overlaid by a
            pending transaction's writes and deletions.
        raw: a committer map's stored form (``[key]`` -> ``[txid, value]``, and the record).

    Raises:
        StateNotFoundError: nothing is stored for the component.
        StateToolError: a bad argument, or a provider the tool cannot read.
        StateBackendError: the store failed.
    """
    for row in iter_rows(
        conf,
        component,
        topology=topology,
        transactional_id=transactional_id,
        map_name=map_name,
        prepared=prepared,
        raw=raw,
    ):
        yield row.key, row.value


def read_state(
    conf: Mapping[str, Any],
    component: str,
    *,
    topology: str | None = None,
    transactional_id: str | None = None,
    map_name: str = "default",
    prepared: bool = False,
    raw: bool = False,
) -> dict[Any, Any]:
    """A component's committed state as one dict, merged over its tasks.

    Arguments as for ``iter_state``. List keys become tuples (dict keys must be hashable).
    The whole state is in memory: for a large one use ``iter_state`` or ``state_dataframe``.

    Raises:
        StateToolError: a key is held by two tasks (a dict cannot show both; ``iter_state``
            does), or as ``iter_state``.
    """
    merged: dict[Any, Any] = {}
    owner: dict[Any, int] = {}
    for row in iter_rows(
        conf,
        component,
        topology=topology,
        transactional_id=transactional_id,
        map_name=map_name,
        prepared=prepared,
        raw=raw,
    ):
        key = hashable(row.key)
        if key in owner:
            msg = (
                f"key {key!r} of component {component!r} is held by tasks {owner[key]} and "
                f"{row.task}, so one dict cannot show both; iter_state gives each task's"
            )
            raise StateToolError(msg)
        owner[key] = row.task
        merged[key] = row.value
    return merged


def get_value(
    conf: Mapping[str, Any],
    component: str,
    key: Any,
    default: Any = None,
    *,
    topology: str | None = None,
    transactional_id: str | None = None,
    map_name: str = "default",
    prepared: bool = False,
    raw: bool = False,
) -> Any:
    """One key's committed value in a component (``default`` when no task holds it).

    One lookup per task, not a scan. Other arguments as for ``iter_state``.

    Raises:
        StateToolError: two tasks hold the key, or as ``iter_state``.
    """
    scope = Scope.of(topology, transactional_id)
    view = View(scope, prepared, raw)
    stored_key = view.stored_key(key)
    found: list[tuple[int, Any]] = []
    for task in component_tasks(conf, scope, component, map_name):
        state = image_state(conf, task.namespace, scope.is_system(task.namespace))
        value = state.get(stored_key) if prepared else state.get_committed(stored_key)
        if value is None:
            continue
        shown = view.entry(stored_key, value)
        if shown is not _SKIP:
            found.append((task.task, shown[1]))
    if len(found) > 1:
        tasks = " and ".join(str(t) for t, _ in found)
        msg = f"key {key!r} of component {component!r} is held by tasks {tasks}"
        raise StateToolError(msg)
    return found[0][1] if found else default
