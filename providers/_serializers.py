"""Serializers turn keys and values into bytes; msgpack is the default.

A serializer is any object with ``serialize(obj) -> bytes`` and ``deserialize(data) -> obj``.
``keyClass`` / ``valueClass`` restore types msgpack alone would flatten (tuples, dataclasses,
pydantic models): the decoded plain value is handed to the class.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Protocol, runtime_checkable

import msgpack

from providers.errors import StateSerializationError


@runtime_checkable
class Serializer(Protocol):
    """What a key or value serializer must provide."""

    def serialize(self, obj: Any) -> bytes:
        """Encode ``obj``."""

    def deserialize(self, data: bytes) -> Any:
        """Decode what ``serialize`` produced."""


def _to_plain(obj: Any) -> Any:
    """Turn dataclasses, pydantic models and sets into plain values for msgpack."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if isinstance(obj, set | frozenset):
        return sorted(obj, key=repr)
    kind = f"{type(obj).__module__}.{type(obj).__qualname__}"
    msg = f"cannot serialize object of type {kind}"
    raise TypeError(msg)


class MsgpackSerializer:
    """msgpack, with an optional class to rebuild on decode.

    Example:
        >>> s = MsgpackSerializer()
        >>> s.deserialize(s.serialize({"storm": 3}))
        {'storm': 3}
    """

    def __init__(self, cls: type | None = None) -> None:
        self._cls = cls
        self._packer = msgpack.Packer(default=_to_plain, use_bin_type=True)
        if cls is None:
            # No class to rebuild: decode straight through msgpack (no Python frame per value).
            self.deserialize = _UNPACK  # type: ignore[method-assign]

    def serialize(self, obj: Any) -> bytes:
        """Encode ``obj``; ``StateSerializationError`` names its type when msgpack cannot."""
        try:
            return self._packer.pack(obj)
        except (TypeError, ValueError, OverflowError) as exc:
            # A failed pack leaves the packer's buffer dirty; start afresh.
            self._packer = msgpack.Packer(default=_to_plain, use_bin_type=True)
            kind = f"{type(obj).__module__}.{type(obj).__qualname__}"
            msg = f"msgpack cannot encode a value of type {kind}: {exc}"
            raise StateSerializationError(msg) from exc

    def deserialize(self, data: bytes) -> Any:
        """Decode ``data``, rebuilding the configured class if there is one."""
        obj = msgpack.unpackb(data, raw=False, strict_map_key=False, use_list=True)
        return _restore(self._cls, obj)

    def __reduce__(self) -> tuple[Any, ...]:
        return (MsgpackSerializer, (self._cls,))


_UNPACK = functools.partial(msgpack.unpackb, raw=False, strict_map_key=False, use_list=True)


def is_plain_msgpack(serializer: Any) -> bool:
    """Whether ``serializer`` is msgpack with no class, so a scalar decodes to what was encoded.

    Not so for a subclass or another serializer (anything may happen), nor with a class
    (``valueClass=float`` reads a stored ``3`` back as ``3.0``).
    """
    return type(serializer) is MsgpackSerializer and serializer._cls is None


def encode_value(serializer: Serializer, namespace: str, key: Any, value: Any) -> bytes:
    """Serialize a value for ``put``; the error names the namespace, the key and the type.

    ``None`` is not a value (a state uses it for "absent"): callers delete instead.
    """
    if value is None:
        msg = f"state {namespace!r}: None is not a storable value (key {key!r}); use delete"
        raise StateSerializationError(msg)
    try:
        return serializer.serialize(value)
    except StateSerializationError as exc:
        msg = f"state {namespace!r}: value for key {key!r} cannot be stored: {exc}"
        raise StateSerializationError(msg) from exc


def _restore(cls: type | None, obj: Any) -> Any:
    if cls is None or obj is None or isinstance(obj, cls):
        return obj
    if cls is tuple:
        return tuple(obj)
    validate = getattr(cls, "model_validate", None)
    if callable(validate):
        return validate(obj)
    if isinstance(obj, dict):
        return cls(**obj)
    if isinstance(obj, list):
        return cls(*obj)
    return cls(obj)
