"""The one msgpack codec of the values statefulbolts stores and records.

msgpack has one array type and no set: on its own it turns a ``tuple`` into a list and refuses
a ``set``. Every value the framework writes as msgpack (a state's values through
``MsgpackSerializer``, a backing map's entries, a dead letter's tuple values, the checkpoint
manifest's message ids) goes through this module instead, so they all read back the same way:

- a ``tuple``, a ``set`` and a ``frozenset`` are msgpack extension types, their items packed by
  this codec again (nested anywhere: a tuple in a dict in a list, a set of tuples):

  ====================  ====  ==========================================
  Python                code  payload
  ====================  ====  ==========================================
  ``tuple``             1     the items, as an array
  ``set``               2     the items, as an array, sorted (by ``repr``
                              when they do not sort), so equal sets pack
                              to equal bytes
  ``frozenset``         3     the same as ``set``
  ====================  ====  ==========================================

  A subclass of one of them (a ``namedtuple``) packs as the plain type, and reads back as it.
- everything msgpack has a type for packs as msgpack packs it, and reads back as before: what
  was stored before these extension types (an array where a tuple was written) still reads as a
  list. A subclass of ``int``, ``float``, ``str``, ``bytes``, ``dict`` or ``list`` (an
  ``IntEnum``, a ``str`` enum, an ``OrderedDict``) packs exactly as msgpack packed it before:
  as its base type's value (it reads back as the base type).
- anything else is refused (``TypeError``): the caller names what could not be written.

Two stricter forms: ``pack_plain(obj, exact=True)`` refuses a subclass too (every value it takes
reads back equal and of the same type: what a dead letter's values need to be replayed as they
were), and ``pack_plain_key`` keeps the encoding keys have always had (a tuple key is an array, so a
key stored before this codec is still found; the readers turn arrays back into tuples), and
refuses a set: two equal sets are one key only if their order is fixed, and a key stored by an
earlier version as a sorted array would not be found under a set's new encoding.

Example:
    >>> data = pack_plain({"pair": (1, "a"), "seen": {3, 1}, "nested": [({2},)]})
    >>> unpack_plain(data)
    {'pair': (1, 'a'), 'seen': {1, 3}, 'nested': [({2},)]}
    >>> unpack_plain(pack_plain_key((1, "a"))) == [1, "a"]  # keys: arrays, as they always were
    True
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import Any

import msgpack

__all__ = [
    "FROZENSET_CODE",
    "SET_CODE",
    "TUPLE_CODE",
    "pack_plain",
    "pack_plain_key",
    "plain_key_packer",
    "plain_packer",
    "unpack_plain",
]

TUPLE_CODE = 1
SET_CODE = 2
FROZENSET_CODE = 3

# What a subclass of a type msgpack packs is turned into, as msgpack packed it before
# ``strict_types`` (the base type's value; a dict subclass by its ``items()``, as msgpack did).
_AS_BASE: tuple[tuple[type, Callable[[Any], Any]], ...] = (
    (int, int.__int__),
    (float, float.__float__),
    (str, str.__str__),
    (bytes, lambda b: bytes(memoryview(b))),
    (dict, lambda d: dict(d.items())),
    (list, list.copy),
)
_SUBCLASSED = (tuple, set, frozenset, *(base for base, _ in _AS_BASE))


def _kind(obj: Any) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"


def _ordered(items: Iterable[Any]) -> list[Any]:
    """A set's items in a fixed order: sorted, or by ``repr`` when they do not sort."""
    try:
        return sorted(items)
    except TypeError:
        return sorted(items, key=repr)


class _Extend:
    """A msgpack ``default``: the extension types, subclasses, then ``convert`` (see above).

    ``exact`` refuses subclasses. Items of a tuple or set are packed by this same hook, so a
    tuple inside a set inside a tuple keeps its type too.
    """

    __slots__ = ("_convert", "_exact")

    def __init__(self, convert: Callable[[Any], Any] | None = None, exact: bool = False) -> None:
        self._convert, self._exact = convert, exact

    def _items(self, code: int, items: Iterable[Any]) -> msgpack.ExtType:
        data = msgpack.packb(list(items), default=self, strict_types=True, use_bin_type=True)
        return msgpack.ExtType(code, data)

    def __call__(self, obj: Any) -> Any:
        kind = type(obj)
        if kind is tuple:
            return self._items(TUPLE_CODE, obj)
        if kind is set:
            return self._items(SET_CODE, _ordered(obj))
        if kind is frozenset:
            return self._items(FROZENSET_CODE, _ordered(obj))
        if not self._exact:
            if isinstance(obj, tuple):
                return self._items(TUPLE_CODE, obj)
            if isinstance(obj, set):
                return self._items(SET_CODE, _ordered(obj))
            if isinstance(obj, frozenset):
                return self._items(FROZENSET_CODE, _ordered(obj))
            for base, plain in _AS_BASE:
                if isinstance(obj, base):
                    return plain(obj)
            if self._convert is not None:
                return self._convert(obj)
        msg = f"msgpack cannot encode an object of type {_kind(obj)}"
        if self._exact and isinstance(obj, _SUBCLASSED):
            msg += " exactly: it would read back as its base type"
        raise TypeError(msg)


_VALUES = _Extend()
_EXACT = _Extend(exact=True)


def plain_packer(convert: Callable[[Any], Any] | None = None) -> msgpack.Packer:
    """A reusable ``msgpack.Packer`` of values in this codec.

    ``convert`` turns what the codec refuses into something it takes (a state serializer's
    dataclasses and models into dicts); it may raise ``TypeError``. A pack that raised leaves
    the packer's buffer dirty: make a new one.
    """
    default = _VALUES if convert is None else _Extend(convert)
    return msgpack.Packer(default=default, strict_types=True, use_bin_type=True)


def pack_plain(obj: Any, *, exact: bool = False) -> bytes:
    """``obj`` in this codec (``exact``: refuse subclasses, so it reads back as it was).

    Raises:
        TypeError: an object msgpack cannot encode (its message names the type).
        ValueError: nesting deeper than msgpack takes.
        OverflowError: an int outside msgpack's 64-bit range.
        RecursionError: tuples or sets nested too deep for Python.
    """
    default = _EXACT if exact else _VALUES
    return msgpack.packb(obj, default=default, strict_types=True, use_bin_type=True)


def _no_set(obj: Any) -> Any:
    if isinstance(obj, set | frozenset):
        msg = (
            f"a {type(obj).__name__} cannot be a key (a set is a value only): use a tuple, "
            "tuple(sorted(key, key=repr)) being the key an earlier version stored it under"
        )
        raise TypeError(msg)
    msg = f"msgpack cannot encode an object of type {_kind(obj)}"
    raise TypeError(msg)


def plain_key_packer(convert: Callable[[Any], Any] | None = None) -> msgpack.Packer:
    """A reusable ``msgpack.Packer`` of keys: their encoding as ever (see the module docstring).

    ``convert`` turns what msgpack refuses into something it takes; a set is refused first.
    """
    if convert is None:
        return msgpack.Packer(default=_no_set, use_bin_type=True)

    def default(obj: Any) -> Any:
        if isinstance(obj, set | frozenset):
            return _no_set(obj)
        return convert(obj)

    return msgpack.Packer(default=default, use_bin_type=True)


def pack_plain_key(obj: Any) -> bytes:
    """A key in the encoding keys have always had (a tuple is an array); a set is refused."""
    return msgpack.packb(obj, default=_no_set, use_bin_type=True)


def _ext(code: int, data: bytes) -> Any:
    if code == TUPLE_CODE:
        return tuple(unpack_plain(data))
    if code == SET_CODE:
        return set(unpack_plain(data))
    if code == FROZENSET_CODE:
        return frozenset(unpack_plain(data))
    return msgpack.ExtType(code, data)


# Arrays read as lists (as they always did), maps with any key, the extension types back.
unpack_plain: Callable[[bytes], Any] = functools.partial(
    msgpack.unpackb, raw=False, strict_map_key=False, use_list=True, ext_hook=_ext
)
