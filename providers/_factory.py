"""Resolve ``topology.state.provider`` to a provider and ask it for a state.

Lookup is by dotted name (``package.module.Class``), so adding a provider never means editing a
list here. A module that is not installed is looked up in the extlib folders (``_extlib``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from providers._base import State, StateProvider
from providers._config import (
    DEFAULT_PROVIDER,
    SERIALIZER_FIELDS,
    STATE_PROVIDER_CONFIG_KEY,
    STATE_PROVIDER_KEY,
    provider_config_fields,
)
from providers._extlib import extlib_dirs, import_by_rule
from providers._lease import FENCE_EPOCH_KEY
from providers.errors import ProviderConfigError, ProviderNotFoundError

__all__ = [
    "DEFAULT_PROVIDER",
    "SERIALIZER_FIELDS",
    "STATE_PROVIDER_CONFIG_KEY",
    "STATE_PROVIDER_KEY",
    "StateFactory",
    "fence_epoch",
    "get_provider",
    "load_object",
    "provider_name",
]

_SERIALIZER_FIELD_SET = frozenset(SERIALIZER_FIELDS)


def load_object(dotted: str, *, what: str, conf: Mapping[str, Any] | None = None) -> Any:
    """Import ``module.attr`` (``module:attr`` works too) and return the attribute.

    The module is imported by the extlib rule (``providers.load_module``): installed modules
    win; only a top-level module the normal import system does not find comes from an extlib
    folder of ``conf``.

    Raises:
        ProviderNotFoundError: naming what was looked up and where.
    """
    return _load_object(dotted, what, extlib_dirs(conf))


def _load_object(dotted: str, what: str, dirs: Sequence[Path]) -> Any:
    if not isinstance(dotted, str) or not dotted.strip():
        msg = f"{what}: expected a dotted name like 'package.module.Class', got {dotted!r}"
        raise ProviderNotFoundError(msg)
    name = dotted.strip().replace(":", ".")
    module_name, _, attr = name.rpartition(".")
    if not module_name:
        msg = f"{what} {dotted!r} is not a dotted name; expected 'package.module.Class'"
        raise ProviderNotFoundError(msg)
    try:
        module = import_by_rule(module_name, dirs)
    except ImportError as exc:
        where = ", ".join(str(d) for d in dirs) or "(no extlib folder)"
        msg = (
            f"{what} {dotted!r}: module {module_name!r} could not be imported ({exc}); "
            f"looked with the normal import system, then in the extlib folders: {where}"
        )
        raise ProviderNotFoundError(msg) from exc
    try:
        return getattr(module, attr)
    except AttributeError as exc:
        msg = f"{what} {dotted!r}: module {module_name!r} has no attribute {attr!r}"
        raise ProviderNotFoundError(msg) from exc


@functools.lru_cache(maxsize=64)
def _provider_class(name: str, dirs: tuple[Path, ...]) -> type[StateProvider]:
    cls = _load_object(name, "state provider", dirs)
    if not (isinstance(cls, type) and issubclass(cls, StateProvider)):
        msg = (
            f"Invalid state provider {name!r}: it is {cls!r}, which is not a subclass of "
            "providers.StateProvider"
        )
        raise ProviderNotFoundError(msg)
    return cls


def provider_name(conf: Mapping[str, Any]) -> str:
    """The provider configured in ``conf``, or the in-memory default."""
    name = conf.get(STATE_PROVIDER_KEY)
    return DEFAULT_PROVIDER if name is None else str(name)


def get_provider(conf: Mapping[str, Any]) -> StateProvider:
    """Instantiate the provider named by ``topology.state.provider`` (default: in memory)."""
    return _provider_class(provider_name(conf), tuple(extlib_dirs(conf)))()


def _system_conf(conf: Mapping[str, Any]) -> Mapping[str, Any]:
    """``conf`` with the serializer fields taken out of the provider config.

    The provider config may be a JSON string (Storm's form) or a mapping; the result keeps that
    form. A config that is not a JSON object is left as it is, so the provider reports it in its
    own words; so is a ``conf`` with nothing to take out (the same object comes back).
    """
    raw = conf.get(STATE_PROVIDER_CONFIG_KEY)
    try:
        fields = provider_config_fields(raw)
    except ProviderConfigError:
        return conf
    if _SERIALIZER_FIELD_SET.isdisjoint(fields):
        return conf
    kept = {k: v for k, v in fields.items() if k not in SERIALIZER_FIELDS}
    stripped: Any = json.dumps(kept) if isinstance(raw, str | bytes) else kept
    return {**conf, STATE_PROVIDER_CONFIG_KEY: stripped}


class StateFactory:
    """Storm's ``StateFactory``: provider lookup plus ``new_state``.

    Example:
        >>> state = StateFactory.get_state("demo/counter-0", {})
        >>> type(state).__name__
        'InMemoryKeyValueState'
    """

    @staticmethod
    def get_state(namespace: str, conf: Mapping[str, Any], context: Any | None = None) -> State:
        """Return the state for ``namespace`` from the configured provider.

        When ``conf`` holds the driver's lease epoch (``FENCE_EPOCH_KEY``), the state carries
        it with every write (``State.fence``).
        """
        return _fenced(get_provider(conf).new_state(namespace, conf, context), conf)

    @staticmethod
    def get_system_state(
        namespace: str, conf: Mapping[str, Any], context: Any | None = None
    ) -> State:
        """Return a state for the framework's own records, encoded with plain msgpack.

        The checkpoint spout's ``[txid, phase]`` and manifest, and anything else the framework
        stores, must read back whatever the user configured for keys and values: with
        ``"valueClass": "int"`` a saved ``[3, "COMMITTED"]`` would otherwise be handed to
        ``int``. So the provider's ``new_state`` gets ``conf`` with the serializer fields
        (``SERIALIZER_FIELDS``) taken out of ``topology.state.provider.config``; every other
        setting (where the store is) applies as given. A provider that chooses its serializers
        through those fields, as the built-in ones and ``providers.resolve_serializers`` do, thus
        gives plain msgpack here.

        Example:
            >>> conf = {"topology.state.provider.config": '{"valueClass": "int"}'}
            >>> state = StateFactory.get_system_state("demo/$checkpointspout-0", conf)
            >>> state.put("__state", [3, "COMMITTED"])
            >>> state.get("__state")
            [3, 'COMMITTED']
        """
        return _fenced(get_provider(conf).new_state(namespace, _system_conf(conf), context), conf)


def fence_epoch(conf: Mapping[str, Any]) -> int | None:
    """The lease epoch a driver put in ``conf`` (``FENCE_EPOCH_KEY``), or ``None``."""
    epoch = conf.get(FENCE_EPOCH_KEY)
    return None if epoch is None else int(epoch)


def _fenced(state: State, conf: Mapping[str, Any]) -> State:
    epoch = fence_epoch(conf)
    if epoch is not None:
        state.fence(epoch)
    return state
