"""Resolve ``topology.state.provider`` to a provider and ask it for a state.

Lookup is by dotted name (``package.module.Class``), so adding a provider never means editing a
list here. Modules dropped into an ``extlib/`` folder are importable too (see ``extlib_dirs``).
"""

from __future__ import annotations

import functools
import importlib
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from providers._base import State, StateProvider
from providers.errors import ProviderNotFoundError

STATE_PROVIDER_KEY = "topology.state.provider"
STATE_PROVIDER_CONFIG_KEY = "topology.state.provider.config"
EXTLIB_DIR_KEY = "topology.state.extlib.dir"
EXTLIB_ENV = "STATEFULBOLTS_EXTLIB"
DEFAULT_PROVIDER = "providers.memory.InMemoryKeyValueStateProvider"
# The fields of the provider config that choose how keys and values are encoded (Storm's names);
# every provider honours them (providers.resolve_serializers).
SERIALIZER_FIELDS = ("keyClass", "valueClass", "keySerializerClass", "valueSerializerClass")
_SERIALIZER_FIELD_SET = frozenset(SERIALIZER_FIELDS)


def extlib_dirs(conf: Mapping[str, Any] | None = None) -> list[Path]:
    """The extlib folders, most specific first: the config key, the environment, ``./extlib``.

    ``topology.state.extlib.dir`` and ``STATEFULBOLTS_EXTLIB`` may each hold several folders
    separated by ``os.pathsep``.
    """
    found: list[Path] = []
    for raw in ((conf or {}).get(EXTLIB_DIR_KEY), os.environ.get(EXTLIB_ENV)):
        if raw:
            found.extend(Path(p).resolve() for p in str(raw).split(os.pathsep) if p)
    for candidate in (Path.cwd() / "extlib", Path(__file__).resolve().parent.parent / "extlib"):
        if candidate.is_dir():
            found.append(candidate.resolve())
    unique: list[Path] = []
    for path in found:
        if path not in unique:
            unique.append(path)
    return unique


def add_extlib_to_path(conf: Mapping[str, Any] | None = None) -> list[Path]:
    """Make every extlib folder importable in this process; returns the folders."""
    dirs = extlib_dirs(conf)
    for path in reversed(dirs):
        text = str(path)
        if path.is_dir() and text not in sys.path:
            sys.path.insert(0, text)
    return dirs


def load_object(dotted: str, *, what: str, conf: Mapping[str, Any] | None = None) -> Any:
    """Import ``module.attr`` (``module:attr`` works too) and return the attribute.

    Raises:
        ProviderNotFoundError: naming what was looked up and where.
    """
    if not isinstance(dotted, str) or not dotted.strip():
        msg = f"{what}: expected a dotted name like 'package.module.Class', got {dotted!r}"
        raise ProviderNotFoundError(msg)
    name = dotted.strip().replace(":", ".")
    module_name, _, attr = name.rpartition(".")
    if not module_name:
        msg = f"{what} {dotted!r} is not a dotted name; expected 'package.module.Class'"
        raise ProviderNotFoundError(msg)
    dirs = add_extlib_to_path(conf)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        where = ", ".join(str(d) for d in dirs) or "(no extlib folder)"
        msg = (
            f"{what} {dotted!r}: module {module_name!r} could not be imported ({exc}); "
            f"looked on sys.path and in extlib folders: {where}"
        )
        raise ProviderNotFoundError(msg) from exc
    try:
        return getattr(module, attr)
    except AttributeError as exc:
        msg = f"{what} {dotted!r}: module {module_name!r} has no attribute {attr!r}"
        raise ProviderNotFoundError(msg) from exc


@functools.lru_cache(maxsize=64)
def _provider_class(name: str) -> type[StateProvider]:
    cls = load_object(name, what="state provider")
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
    add_extlib_to_path(conf)
    return _provider_class(provider_name(conf))()


def _system_conf(conf: Mapping[str, Any]) -> Mapping[str, Any]:
    """``conf`` with the serializer fields taken out of the provider config.

    The provider config may be a JSON string (Storm's form) or a mapping; the result keeps that
    form. A config that is not a JSON object is left as it is, so the provider reports it in its
    own words; so is a ``conf`` with nothing to take out (the same object comes back).
    """
    raw = conf.get(STATE_PROVIDER_CONFIG_KEY)
    if isinstance(raw, str | bytes):
        text = raw if isinstance(raw, str) else raw.decode("utf-8", "replace")
        try:
            data = json.loads(text) if text.strip() else {}
        except json.JSONDecodeError:
            return conf
        if not isinstance(data, dict) or _SERIALIZER_FIELD_SET.isdisjoint(data):
            return conf
        stripped: Any = json.dumps({k: v for k, v in data.items() if k not in SERIALIZER_FIELDS})
    elif isinstance(raw, Mapping) and not _SERIALIZER_FIELD_SET.isdisjoint(raw):
        stripped = {k: v for k, v in raw.items() if k not in SERIALIZER_FIELDS}
    else:
        return conf
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
        """Return the state for ``namespace`` from the configured provider."""
        return get_provider(conf).new_state(namespace, conf, context)

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
        return get_provider(conf).new_state(namespace, _system_conf(conf), context)
