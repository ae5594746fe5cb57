"""Which namespaces a topology, a transactional id or a component owns, and how to open them.

A checkpointed topology ``T`` keeps its state under ``T/``: ``T/<component>-<task>`` per
stateful task, and the framework's records beside them, each named ``T/$<something>``
(``T/$checkpointspout-0`` for the checkpoint spout's saved txid and phase; no component id
starts with ``$``). A transactional topology keeps everything under ``$transactional/<id>/``:
the coordinator, the partitions' metas, and each committer task's maps at
``$transactional/<id>/<component>-<task>/<map>``.

A stateful bolt's state is opened with the topology's config, so the user's key and value
serializers decode it; the framework's own records (every ``$`` namespace of a topology,
everything transactional) are opened as system states (plain msgpack,
``StateFactory.get_system_state``), as the runtime writes them.

A scope owns a namespace when the namespace is its prefix followed by names with no empty,
``.`` or ``..`` part: the state tool reads, exports and imports nothing else, whatever a state
file says.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from providers import (
    SERIALIZER_FIELDS,
    STATE_PROVIDER_CONFIG_KEY,
    DriverOwnedStateProvider,
    KeyValueState,
    ProviderConfigError,
    StateFactory,
    get_provider,
    provider_config_fields,
    provider_name,
)
from statefulbolts.errors import StateNotFoundError, StateToolError
from statefulbolts.namespaces import (
    RECORD_MARK,
    TRANSACTIONAL_ROOT,
    topology_prefix,
    transactional_prefix,
)
from statefulbolts.namespaces import TaskNamespace as StoredTask

__all__ = [
    "Scope",
    "TaskNamespace",
    "component_tasks",
    "driver_owned",
    "image_state",
    "listed",
    "open_state",
    "serializer_fields",
]

_KINDS = ("topology", "transactional")


@dataclass(frozen=True)
class Scope:
    """A checkpointed topology (``kind`` "topology") or a transactional id ("transactional")."""

    kind: str
    name: str

    @classmethod
    def of(cls, topology: str | None, transactional_id: str | None) -> Scope:
        """The scope named by exactly one of ``topology`` and ``transactional_id``.

        Raises:
            StateToolError: both or neither were given, or the name is not one (see ``named``).
        """
        if (topology is None) == (transactional_id is None):
            msg = "name exactly one of topology and transactional_id"
            raise StateToolError(msg)
        if topology is not None:
            return cls.named("topology", topology)
        return cls.named("transactional", transactional_id)

    @classmethod
    def named(cls, kind: Any, name: Any) -> Scope:
        """The scope of ``kind`` ("topology" or "transactional") called ``name``, checked.

        A name is a non-empty string without "/", and not "." or ".." (a path trick, never a
        topology); a topology may not be called "$transactional", the transactional ids' root.

        Raises:
            StateToolError: a kind or a name that is not one.
        """
        if kind not in _KINDS:
            msg = f"a scope is a topology or a transactional id, got kind {kind!r}"
            raise StateToolError(msg)
        what = "topology" if kind == "topology" else "transactional id"
        if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
            msg = (
                f"{what} name must be a non-empty string without '/', not '.' or '..'; got {name!r}"
            )
            raise StateToolError(msg)
        if kind == "topology" and name == TRANSACTIONAL_ROOT:
            msg = (
                f"a topology cannot be named {TRANSACTIONAL_ROOT!r}: it is where the "
                "transactional ids keep their state (name one with --id)"
            )
            raise StateToolError(msg)
        return cls(kind, name)

    @property
    def prefix(self) -> str:
        """What every namespace of the scope starts with (``T/`` or ``$transactional/ID/``)."""
        if self.kind == "topology":
            return topology_prefix(self.name)
        return transactional_prefix(self.name)

    def describe(self) -> str:
        """``topology 'wc'`` or ``transactional id 'words'``, for messages."""
        return (
            f"topology {self.name!r}"
            if self.kind == "topology"
            else f"transactional id {self.name!r}"
        )

    def owns(self, namespace: str) -> bool:
        """Whether ``namespace`` is the prefix then names with no empty, "." or ".." part."""
        if not namespace.startswith(self.prefix):
            return False
        rest = namespace[len(self.prefix) :]
        return bool(rest) and all(part not in ("", ".", "..") for part in rest.split("/"))

    def is_system(self, namespace: str) -> bool:
        """Whether ``namespace`` holds the framework's records (plain msgpack), not a bolt's.

        Everything of a transactional id; in a topology, every namespace with a name after
        the prefix that starts with "$": the framework's records (``T/$checkpointspout-0``,
        ``T/$window/...``) and a task's own (its timers, ``T/<component>-<task>/$timers``),
        all plain msgpack whatever the bolt's serializers.

        Example:
            >>> wc = Scope.named("topology", "wc")
            >>> [wc.is_system(n) for n in ("wc/count-0", "wc/count-0/$timers", "wc/$shape")]
            [False, True, True]
        """
        if self.kind == "transactional":
            return True
        rest = namespace[len(self.prefix) :]
        return any(part.startswith(RECORD_MARK) for part in rest.split("/"))


@dataclass(frozen=True)
class TaskNamespace:
    """One task's namespace of a component, as listed (``statefulbolts.namespaces`` parses it)."""

    task: int
    namespace: str


def listed(conf: Mapping[str, Any], prefix: str) -> list[str]:
    """The namespaces under ``prefix`` that the configured provider holds.

    Raises:
        StateToolError: the provider cannot list its namespaces.
        ProviderConfigError, ProviderNotFoundError, StateBackendError: from the provider.
    """
    provider = get_provider(conf)
    found = provider.namespaces(conf, prefix)
    if found is None:
        msg = (
            f"{provider_name(conf)} cannot list the namespaces it holds "
            "(StateProvider.namespaces), so the state tool cannot find what is under "
            f"{prefix!r}; implement namespaces() in the provider"
        )
        raise StateToolError(msg)
    return found


def component_tasks(
    conf: Mapping[str, Any], scope: Scope, component: str, map_name: str = "default"
) -> list[TaskNamespace]:
    """Every task namespace of ``component`` in ``scope``, by task index.

    For a transactional id, the committer's map ``map_name``. The framework's records are
    not components: a name starting with "$" finds nothing, and they are never listed.

    Raises:
        StateNotFoundError: the provider holds no state of that component (the message lists
            the components' namespaces it does hold).
        StateToolError: the provider cannot list its namespaces.
    """
    wanted_map = None if scope.kind == "topology" else map_name
    names = [n for n in listed(conf, scope.prefix) if scope.owns(n)]
    found = []
    for namespace in names:
        parsed = StoredTask.parse(scope.prefix, namespace)
        if parsed is not None and (parsed.component, parsed.map) == (component, wanted_map):
            found.append(TaskNamespace(parsed.task, namespace))
    if not found:
        what = f"component {component!r}" + (
            f" (map {map_name!r})" if scope.kind == "transactional" else ""
        )
        held = sorted(
            {
                n[len(scope.prefix) :]
                for n in names
                if scope.kind == "transactional" or not scope.is_system(n)
            }
        )
        shown = ", ".join(held[:10]) + (", ..." if len(held) > 10 else "") if held else "nothing"
        hint = (
            f" ({component!r} names one of the framework's records, not a component: no "
            "component id starts with '$'; `statefulbolts checkpoint status` shows the "
            "checkpoint)"
            if component.startswith(RECORD_MARK)
            else ""
        )
        msg = (
            f"no state of {what} in {scope.describe()} in {provider_name(conf)}; "
            f"under {scope.prefix!r} it holds: {shown}{hint}"
        )
        raise StateNotFoundError(msg)
    return sorted(found, key=lambda t: t.task)


def open_state(conf: Mapping[str, Any], namespace: str, system: bool) -> KeyValueState:
    """The state of ``namespace``: a system state (plain msgpack) or one with the user's codec.

    Raises:
        StateToolError: the provider's state is not a ``KeyValueState``.
    """
    if system:
        state = StateFactory.get_system_state(namespace, conf)
    else:
        state = StateFactory.get_state(namespace, conf)
    if not isinstance(state, KeyValueState):
        kind = f"{type(state).__module__}.{type(state).__qualname__}"
        msg = f"state {namespace!r} is a {kind}, not a providers.KeyValueState"
        raise StateToolError(msg)
    return state


def image_state(conf: Mapping[str, Any], namespace: str, system: bool = True) -> KeyValueState:
    """``open_state``, checked to expose its stored image (see ``providers.KeyValueState``).

    Raises:
        StateToolError: the provider's states do not implement the stored image.
    """
    state = open_state(conf, namespace, system)
    if not state.supports_stored_image:
        kind = f"{type(state).__module__}.{type(state).__qualname__}"
        msg = (
            f"{kind} (provider {provider_name(conf)}) does not expose its stored image "
            "(stored_txids, scan_committed, scan_prepared, decode_key, decode_value, "
            "get_committed, replace_stored), which the state tool reads and writes; see "
            "providers.KeyValueState"
        )
        raise StateToolError(msg)
    return state


def driver_owned(conf: Mapping[str, Any]) -> DriverOwnedStateProvider | None:
    """The configured provider if its data lives in the driver process (in memory), else None."""
    provider = get_provider(conf)
    return provider if isinstance(provider, DriverOwnedStateProvider) else None


def serializer_fields(conf: Mapping[str, Any]) -> dict[str, Any]:
    """The key / value serializer fields set in the provider config (Storm's names)."""
    try:
        fields = provider_config_fields(conf.get(STATE_PROVIDER_CONFIG_KEY))
    except ProviderConfigError:
        return {}  # the provider reports a broken config when a state is opened
    return {k: fields[k] for k in SERIALIZER_FIELDS if fields.get(k) is not None}
