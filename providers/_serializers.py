"""Serializers turn keys and values into bytes; msgpack is the default.

A serializer is any object with ``serialize(obj) -> bytes`` and ``deserialize(data) -> obj``.
The defaults are the framework's one msgpack codec (``providers._codec``): ``MsgpackSerializer``
for values (a ``tuple``, ``set`` or ``frozenset``, nested anywhere, reads back as it was
written) and ``MsgpackKeySerializer`` for keys (encoded as keys always were: a tuple key is an
array, so keys stored by an earlier version are still found; a set key is refused).
``keyClass`` / ``valueClass`` restore types msgpack alone would flatten (dataclasses, pydantic
models): the decoded plain value is handed to the class.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, runtime_checkable

from providers._codec import plain_key_packer, plain_packer, unpack_plain
from providers.errors import StateSerializationError


@runtime_checkable
class Serializer(Protocol):
    """What a key or value serializer must provide."""

    def serialize(self, obj: Any) -> bytes:
        """Encode ``obj``."""

    def deserialize(self, data: bytes) -> Any:
        """Decode what ``serialize`` produced."""


def _to_plain(obj: Any) -> Any:
    """Turn dataclasses and pydantic models into plain values for msgpack."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return dataclasses.asdict(obj)
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    kind = f"{type(obj).__module__}.{type(obj).__qualname__}"
    msg = f"msgpack cannot encode an object of type {kind}"
    raise TypeError(msg)


# What msgpack raises for a value it cannot encode (RecursionError: nesting too deep).
_REFUSALS = (TypeError, ValueError, OverflowError, RecursionError)


class MsgpackSerializer:
    """msgpack for values (``providers._codec``), with an optional class to rebuild on decode.

    Example:
        >>> s = MsgpackSerializer()
        >>> value = {"storm": 3, "seen": {"a", "b"}, "at": (1, 2)}
        >>> back = s.deserialize(s.serialize(value))
        >>> back == value, type(back["seen"]).__name__, type(back["at"]).__name__
        (True, 'set', 'tuple')
    """

    _role = "value"

    def __init__(self, cls: type | None = None) -> None:
        self._cls = cls
        self._packer = self._new_packer()
        if cls is None:
            # No class to rebuild: decode straight through msgpack (no Python frame per value).
            self.deserialize = unpack_plain  # type: ignore[method-assign,assignment]

    def _new_packer(self) -> Any:
        return plain_packer(_to_plain)

    def serialize(self, obj: Any) -> bytes:
        """Encode ``obj``; ``StateSerializationError`` names its type when msgpack cannot."""
        try:
            return self._packer.pack(obj)
        except _REFUSALS as exc:
            # A failed pack leaves the packer's buffer dirty; start afresh.
            self._packer = self._new_packer()
            kind = f"{type(obj).__module__}.{type(obj).__qualname__}"
            msg = f"msgpack cannot encode a {self._role} of type {kind}: {exc}"
            raise StateSerializationError(msg) from exc

    def deserialize(self, data: bytes) -> Any:
        """Decode ``data``, rebuilding the configured class if there is one."""
        return _restore(self._cls, unpack_plain(data))

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self._cls,))


class MsgpackKeySerializer(MsgpackSerializer):
    """msgpack for keys: encoded as keys always were (``providers.pack_plain_key``).

    A tuple key is an array, as every key stored before: a lookup by ``(1, "a")`` finds what
    an earlier version stored under it, and the readers give it back as a tuple
    (``statefulbolts.state``). A ``set`` or ``frozenset`` key is refused, naming the tuple to
    use instead.

    Example:
        >>> keys = MsgpackKeySerializer()
        >>> keys.serialize(("storm", 1)) == MsgpackSerializer().serialize(["storm", 1])
        True
    """

    _role = "key"

    def _new_packer(self) -> Any:
        return plain_key_packer(_to_plain)


def is_plain_msgpack(serializer: Any) -> bool:
    """Whether ``serializer`` is msgpack with no class, so a scalar decodes to what was encoded.

    Not so for a subclass or another serializer (anything may happen), nor with a class
    (``valueClass=float`` reads a stored ``3`` back as ``3.0``).
    """
    kind = type(serializer)
    return (kind is MsgpackSerializer or kind is MsgpackKeySerializer) and serializer._cls is None


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
    if isinstance(obj, list | tuple):  # a tuple: what a namedtuple value is stored as now
        return cls(*obj)
    return cls(obj)
