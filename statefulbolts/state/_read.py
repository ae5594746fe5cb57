"""Reading a component's state offline: streamed, as a dict, one key; committed or as prepared.

The committed view is the committed map alone. The prepared view ("as of the prepared delta")
is what the state will hold once the pending transaction commits: the committed map with the
prepared writes over it and the prepared deletions taken out, which is also what a bolt's
``get`` reads in a restarted task before the transaction is decided. Both stream the committed
map a page at a time; the prepared view holds the delta (one transaction's writes) in memory.

A transactional committer's map stores ``[txid, value]`` (or opaque ``[txid, curr, prev]``)
under the one-item key ``[key]`` beside a ``"$record"`` slot; the map view shows ``key ->
value`` (``curr``), as ``TopologyHandle.read_state`` does, and ``raw=True`` the stored form.
A bolt's state with ``raw=True`` is read as plain msgpack, without the config's ``keyClass``
and ``valueClass``: what is stored, whatever class it was meant for. A stored key or value the
configured class cannot rebuild is a ``StateToolError`` naming the namespace, the key, the
class and what is stored.

``committed_items`` is the one committed read of a state, also behind
``TopologyHandle.read_state`` (each protocol's runner reads a component's tasks through
``merged_state``): a prepared delta (a transaction that prepared and did not commit) never shows.

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

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import msgpack

from providers import (
    STATE_PROVIDER_CONFIG_KEY,
    KeyValueState,
    StateFactory,
    is_expired,
    provider_name,
)
from statefulbolts.errors import StateToolError, TopologyError
from statefulbolts.state._scope import Scope, component_tasks, image_state, serializer_fields

__all__ = [
    "Row",
    "View",
    "committed_items",
    "get_value",
    "hashable",
    "iter_rows",
    "iter_state",
    "merged_state",
    "read_state",
]

# The committer map's record slot (statefulbolts.transactional.StateBackingMap's layout).
_RECORD_KEY = "$record"
_SKIP: Any = object()
# What rebuilding a stored key or value with a configured class raises when the class does
# not fit it (int("x"), a dataclass given the wrong fields, a pydantic validation error, bytes
# that are not msgpack). I/O errors (StateBackendError is a ConnectionError) are not among them.
_MISFIT = (TypeError, ValueError, LookupError, AttributeError)
_SHORT = 80


def committed_items(
    state: KeyValueState,
    conf: Mapping[str, Any],
    system: bool = False,
    at_ms: int | None = None,
) -> Iterator[tuple[Any, Any]]:
    """Every committed ``(key, value)`` of ``state``, decoded, streamed; expired keys hidden.

    Read from the store's committed map (``scan_committed``), so a prepared delta, written by
    a transaction that prepared and has not committed, never shows. ``conf`` is the config
    the state was opened with and ``system`` whether it is a system state (plain msgpack),
    for the message when a stored key or value does not decode. A key with an expiry at or
    before ``at_ms`` (by default the last committed transaction's timestamp,
    ``committed_time``) is skipped (``committed_rows`` gives the expiries too).

    Raises:
        StateToolError: the state does not expose its stored image, so its committed values
            cannot be told from prepared ones; or a stored key or value does not fit the
            configured class.
    """
    if not state.supports_stored_image:
        kind = f"{type(state).__module__}.{type(state).__qualname__}"
        msg = (
            f"{kind} (provider {provider_name(conf)}) does not expose its stored image "
            "(scan_committed, decode_key, decode_value, ...; see providers.KeyValueState), so "
            "its committed values cannot be told from values a transaction prepared and never "
            "committed, and they are not read through it; implement the stored image in the "
            "provider"
        )
        raise StateToolError(msg)
    for key, value, _ in committed_rows(state, conf, system, at_ms):
        yield key, value


def committed_rows(
    state: KeyValueState,
    conf: Mapping[str, Any],
    system: bool = False,
    at_ms: int | None = None,
) -> Iterator[tuple[Any, Any, int | None]]:
    """``committed_items`` with each key's expiry in ms (``None``: it never expires).

    The expiries of the namespace are read first (``scan_expiries``: only keys that have one).
    """
    decoder = _Decoder(conf, state, system)
    expiries = dict(state.scan_expiries())
    if at_ms is None and expiries:
        at_ms = state.committed_time()
    for ekey, payload in state.scan_committed():
        expiry = expiries.get(ekey)
        if is_expired(expiry, at_ms):
            continue
        key = decoder.key(ekey)
        yield key, decoder.value(payload, key), expiry


def merged_state(
    conf: Mapping[str, Any],
    namespaces: Sequence[str],
    *,
    system: bool = False,
    entries: Callable[[Iterator[tuple[Any, Any]]], Iterable[tuple[Any, Any]]] | None = None,
) -> dict[Any, Any]:
    """The committed states of ``namespaces`` (a component's tasks) as one dict.

    A protocol's ``read_state``, which knows its component's task namespaces: committed values
    only, so what a transaction prepared and did not commit (a PREPARE that succeeded, then a
    COMMIT that failed or never ran) does not show. ``system``: the states are system states
    (plain msgpack: a committer's maps). ``entries`` turns one state's committed items into
    what it shows (a committer map's values without their txids); by default, all of them.
    List keys become tuples (dict keys must be hashable).

    Raises:
        TopologyError: a namespace's state is not a ``KeyValueState``.
        StateToolError: the provider's states do not expose their stored image (so committed
            values cannot be told from prepared ones), or a stored value does not decode.
    """
    merged: dict[Any, Any] = {}
    for namespace in namespaces:
        if system:
            state = StateFactory.get_system_state(namespace, conf)
        else:
            state = StateFactory.get_state(namespace, conf)
        if not isinstance(state, KeyValueState):
            msg = f"state {namespace!r} is a {type(state).__qualname__}, not a KeyValueState"
            raise TopologyError(msg)
        items = committed_items(state, conf, system)
        for key, value in items if entries is None else entries(items):
            merged[hashable(key)] = value
    return merged


class _Decoder:
    """A state's ``decode_key`` / ``decode_value``; a stored item they refuse is a clear error."""

    def __init__(self, conf: Mapping[str, Any], state: KeyValueState, system: bool) -> None:
        self.conf, self.system = conf, system
        self.namespace = str(getattr(state, "namespace", "?"))
        self._key, self._value = state.decode_key, state.decode_value

    def key(self, data: bytes) -> Any:
        try:
            return self._key(data)
        except _MISFIT as exc:
            error = self.misfit("key", None, data, exc)
            raise error from exc

    def value(self, data: bytes, key: Any) -> Any:
        try:
            return self._value(data)
        except _MISFIT as exc:
            error = self.misfit("value", key, data, exc)
            raise error from exc

    def misfit(self, what: str, key: Any, data: bytes, exc: Exception) -> StateToolError:
        """The error for the stored ``what`` ("key" or "value") ``data`` its decoder refused."""
        plain = _plain(data)
        if plain is _NOT_MSGPACK:
            held = f"{len(data)} bytes that are not msgpack ({_short(data)})"
        else:
            held = f"{_short(plain)} ({type(plain).__name__})"
        return self.refused(what, key, held, plain is not _NOT_MSGPACK, exc)

    def refused(
        self, what: str, key: Any, held: str, plain: bool, exc: Exception
    ) -> StateToolError:
        """The error naming the namespace, the key, the configured class, what is stored, the fix.

        ``held`` says what is stored; ``plain`` whether it reads as plain msgpack (so --raw
        shows it).
        """
        where = f"namespace {self.namespace!r}" + ("" if key is None else f", key {key!r}")
        fields = {k: v for k, v in serializer_fields(self.conf).items() if k.startswith(what)}
        if self.system or not fields:
            decoder = "plain msgpack"
        else:
            named = " and ".join(f"{k} {v!r}" for k, v in fields.items())
            decoder = f"{named} of {STATE_PROVIDER_CONFIG_KEY}"
        if plain and not self.system:
            fix = "Read it with the provider config that wrote it, or as stored with --raw"
        else:
            fix = "Read it with the provider config (serializer classes) that wrote it"
        msg = (
            f"{where}: the stored {what} does not fit {decoder} ({type(exc).__name__}: "
            f"{exc}); it holds {held}. {fix}"
        )
        return StateToolError(msg)


_NOT_MSGPACK: Any = object()


def _plain(data: bytes) -> Any:
    """``data`` read as plain msgpack, or ``_NOT_MSGPACK``."""
    try:
        return msgpack.unpackb(data, raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException):
        return _NOT_MSGPACK


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHORT else text[: _SHORT - 3] + "..."


class Row(NamedTuple):
    """One key of one task: what ``dump`` prints and a state DataFrame holds."""

    task: int
    namespace: str
    key: Any
    value: Any
    expires_ms: int | None = None  # when the key expires (state TTL); None: never


def hashable(key: Any) -> Any:
    """A key read back from a store as a dict key: msgpack turns tuples into lists."""
    if isinstance(key, list):
        return tuple(hashable(k) for k in key)
    return key


class View:
    """How a component's stored entries become rows: committed or prepared, map view or raw."""

    def __init__(self, scope: Scope, prepared: bool, raw: bool, at_ms: int | None = None) -> None:
        self.scope, self.prepared, self.raw = scope, prepared, raw
        # Expiry is judged at this timestamp (ms); None: the last committed transaction's.
        self.at_ms = at_ms
        self.map_view = scope.kind == "transactional" and not raw

    def system(self, namespace: str) -> bool:
        """Whether to read ``namespace`` as plain msgpack: a framework record, or ``raw``."""
        return self.raw or self.scope.is_system(namespace)

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
        system = self.system(namespace)
        state = image_state(conf, namespace, system)
        if not self.prepared:
            for key, value, expiry in committed_rows(state, conf, system, self.at_ms):
                shown = self.entry(key, value)
                if shown is not _SKIP:
                    yield Row(task, namespace, shown[0], shown[1], expiry)
            return
        decoder = _Decoder(conf, state, system)
        delta: dict[bytes, bytes | None] = dict(state.scan_prepared())
        expiries = dict(state.scan_expiries())
        at_ms = self.at_ms if self.at_ms is not None else state.committed_time()
        for ekey, payload in state.scan_committed():
            if ekey in delta or is_expired(expiries.get(ekey), at_ms):
                continue
            key = decoder.key(ekey)
            shown = self.entry(key, decoder.value(payload, key))
            if shown is not _SKIP:
                yield Row(task, namespace, shown[0], shown[1], expiries.get(ekey))
        for ekey, maybe in delta.items():
            if maybe is not None:
                key = decoder.key(ekey)
                shown = self.entry(key, decoder.value(maybe, key))
                if shown is not _SKIP:
                    yield Row(task, namespace, *shown)

    def get(self, conf: Mapping[str, Any], namespace: str, key: Any) -> Any:
        """The value stored for ``key`` (already as stored) in this view, or ``None``."""
        system = self.system(namespace)
        state = image_state(conf, namespace, system)
        at_ms = self.at_ms if self.at_ms is not None else state.committed_time()
        state.set_transaction_time(at_ms)  # an expired key reads as absent
        try:
            return state.get(key) if self.prepared else state.get_committed(key)
        except _MISFIT as exc:
            cause = exc
        # Say what is stored: the same key read as plain msgpack.
        plain_state = image_state(conf, namespace, True)
        try:
            plain = plain_state.get(key) if self.prepared else plain_state.get_committed(key)
        except _MISFIT:
            held, readable = "bytes that are not msgpack", False
        else:
            held, readable = f"{_short(plain)} ({type(plain).__name__})", True
        error = _Decoder(conf, state, system).refused("value", key, held, readable, cause)
        raise error from cause


def iter_rows(
    conf: Mapping[str, Any],
    component: str,
    *,
    topology: str | None = None,
    transactional_id: str | None = None,
    map_name: str = "default",
    prepared: bool = False,
    raw: bool = False,
    at_ms: int | None = None,
) -> Iterator[Row]:
    """Every key of every task of ``component``, task by task, as ``Row`` s (streamed).

    Each row has its key's expiry (``expires_ms``); keys expired at ``at_ms`` (by default
    each namespace's last committed transaction's timestamp) are not given. Other arguments
    as for ``iter_state``.
    """
    scope = Scope.of(topology, transactional_id)
    view = View(scope, prepared, raw, at_ms)
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
    at_ms: int | None = None,
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
        raw: read as stored, plain msgpack: a bolt's keys and values without the config's
            ``keyClass`` / ``valueClass``, a committer map's stored form (``[key]`` ->
            ``[txid, value]``, and the record).
        at_ms: judge state TTL at this timestamp (ms): a key expired then is left out. By
            default, each namespace's last committed transaction's timestamp.

    Raises:
        StateNotFoundError: nothing is stored for the component.
        StateToolError: a bad argument, a provider the tool cannot read, or a stored key or
            value the configured class (or serializer) cannot rebuild: the message names the
            namespace, the key, the class and what is stored.
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
        at_ms=at_ms,
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
    at_ms: int | None = None,
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
        at_ms=at_ms,
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
    at_ms: int | None = None,
) -> Any:
    """One key's committed value in a component (``default`` when no task holds it).

    One lookup per task, not a scan. A key expired at ``at_ms`` (by default the last
    committed transaction's timestamp) is not held. Other arguments as for ``iter_state``.

    Raises:
        StateToolError: two tasks hold the key, or as ``iter_state``.
    """
    scope = Scope.of(topology, transactional_id)
    view = View(scope, prepared, raw, at_ms)
    stored_key = view.stored_key(key)
    found: list[tuple[int, Any]] = []
    for task in component_tasks(conf, scope, component, map_name):
        value = view.get(conf, task.namespace, stored_key)
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
