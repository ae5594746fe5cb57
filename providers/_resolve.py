"""Which serializers a provider config asks for: Storm's four fields turned into objects.

Every provider follows one convention for keys and values, so a topology can move between
providers without changing them. Per side (key, value), in ``topology.state.provider.config``:

``keySerializerClass`` / ``valueSerializerClass``
    A dotted class name; the class is made with no arguments and must have
    ``serialize(obj) -> bytes`` and ``deserialize(data) -> obj``. It wins over the class field.
``keyClass`` / ``valueClass``
    A dotted class name, or a builtin such as ``tuple``: msgpack, rebuilding that class on
    decode.
neither
    Plain msgpack: ``MsgpackKeySerializer`` for keys, ``MsgpackSerializer`` for values (the
    framework's one codec, ``providers._codec``).

Names resolve as ``topology.state.provider`` does, extlib folders included. The framework's own
records never go through these (``StateFactory.get_system_state``).
"""

from __future__ import annotations

import builtins
from collections.abc import Mapping
from typing import Any

from providers._config import SERIALIZER_FIELDS, STATE_PROVIDER_CONFIG_KEY, StateProviderConfig
from providers._factory import load_object
from providers._serializers import MsgpackKeySerializer, MsgpackSerializer, Serializer
from providers.errors import ProviderConfigError

__all__ = ["resolve_class", "resolve_serializers"]


def resolve_class(dotted: str, *, what: str, conf: Mapping[str, Any] | None = None) -> type:
    """Resolve ``keyClass`` / ``valueClass``: a dotted name, or a builtin such as ``tuple``."""
    name = dotted.strip()
    if "." not in name and ":" not in name and isinstance(getattr(builtins, name, None), type):
        return getattr(builtins, name)
    obj = load_object(name, what=what, conf=conf)
    if not isinstance(obj, type):
        msg = f"{STATE_PROVIDER_CONFIG_KEY}: {what} {dotted!r} is {obj!r}, not a class"
        raise ProviderConfigError(msg)
    return obj


def _instance(name: str, *, what: str, conf: Mapping[str, Any] | None) -> Serializer:
    cls = load_object(name, what=what, conf=conf)
    if not isinstance(cls, type):
        msg = f"{STATE_PROVIDER_CONFIG_KEY}: {what} {name!r} is not a class"
        raise ProviderConfigError(msg)
    try:
        instance = cls()
    except TypeError as exc:
        msg = (
            f"{STATE_PROVIDER_CONFIG_KEY}: {what} {name!r} must be constructible "
            f"with no arguments: {exc}"
        )
        raise ProviderConfigError(msg) from exc
    if not isinstance(instance, Serializer):
        msg = (
            f"{STATE_PROVIDER_CONFIG_KEY}: {what} {name!r} must have "
            "serialize(obj) -> bytes and deserialize(data) -> obj"
        )
        raise ProviderConfigError(msg)
    return instance


def _side(fields: Mapping[str, Any], side: str, conf: Mapping[str, Any] | None) -> Serializer:
    serializer_field, class_field = f"{side}SerializerClass", f"{side}Class"
    serializer_name, class_name = fields.get(serializer_field), fields.get(class_field)
    if serializer_name:
        return _instance(serializer_name, what=serializer_field, conf=conf)
    cls = resolve_class(class_name, what=class_field, conf=conf) if class_name else None
    return MsgpackKeySerializer(cls) if side == "key" else MsgpackSerializer(cls)


def resolve_serializers(
    config: Mapping[str, Any] | StateProviderConfig, conf: Mapping[str, Any] | None = None
) -> tuple[Serializer, Serializer]:
    """The key and value serializers a provider config asks for (see the module docstring).

    Args:
        config: the provider config as a mapping holding Storm's fields (``keyClass``,
            ``valueClass``, ``keySerializerClass``, ``valueSerializerClass``; absent, ``None``
            or empty means not set; other fields are ignored), or the built-in providers'
            validated ``StateProviderConfig``.
        conf: the topology conf, whose extlib folders the names are also looked up in.

    Returns:
        ``(key_serializer, value_serializer)``.

    Raises:
        ProviderConfigError: a field is not a string, names something that is not a class, or
            a serializer class that cannot be made with no arguments or lacks the two methods.
        ProviderNotFoundError: a name does not resolve.

    Example:
        >>> keys, values = resolve_serializers({"valueClass": "tuple"})
        >>> values.deserialize(values.serialize((1, 2)))
        (1, 2)
    """
    fields: Mapping[str, Any]
    if isinstance(config, StateProviderConfig):
        fields = config.serializer_fields()
    elif isinstance(config, Mapping):
        fields = config
    else:
        msg = (
            f"{STATE_PROVIDER_CONFIG_KEY}: expected a mapping of the provider config's fields, "
            f"got {type(config).__name__}"
        )
        raise ProviderConfigError(msg)
    for name in SERIALIZER_FIELDS:
        value = fields.get(name)
        if value is not None and not isinstance(value, str):
            msg = (
                f"{STATE_PROVIDER_CONFIG_KEY}: field {name!r} must be a dotted class name "
                f"(a string), got {type(value).__name__}"
            )
            raise ProviderConfigError(msg)
    return _side(fields, "key", conf), _side(fields, "value", conf)
