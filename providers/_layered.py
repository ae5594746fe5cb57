"""The write layers a state object keeps above its store, and the one ``get`` that reads them.

A state keeps the writes made since its last prepare in ``_pending`` (encoded key -> encoded
value, ``None`` for a deletion). Encoding every ``put`` and decoding every ``get`` is most of
the cost of a counting bolt (``state.put(w, state.get(w, 0) + 1)``), so a write of an immutable
scalar under a ``str`` key first lands in ``_fresh`` as the Python object itself, and is encoded
into ``_pending`` only when something reads ``_pending`` as a whole (prepare, commit, iteration):
that is ``_flush``. Layers, newest first::

    _fresh      str key -> value                  immutable scalars, not yet encoded
    _pending    encoded key -> payload or None    the rest, and ``_FRESH`` place holders
    (store)     the prepared delta, then committed: the subclass's ``_stored``

``get``, ``put`` and ``delete`` live here, once, for every layered state: a subclass only says
how to read its store (``_stored``). ``get`` is the hottest call of most stateful bolts, so a
fresh hit costs one type check and one dict lookup before anything else runs. Where it was
built, ``providers/_native/_fresh.c`` is the class's base: its ``get`` and ``put`` do a fresh
``str`` key's case in C, without a Python frame, and hand every other call to ``_get`` and
``_put`` below; without it, ``get`` and ``put`` are those methods themselves.

Why the fast path cannot change what a caller sees:

- It is on only when keys and values both use plain msgpack (``MsgpackKeySerializer``,
  ``MsgpackSerializer``, no class):
  exactly then does decoding give back the object that was put. With ``valueClass=float`` a
  stored ``3`` reads back ``3.0``; a custom serializer may do anything.
- It takes only values msgpack surely encodes, so nothing that ``put`` would reject today is
  accepted: ``int`` within msgpack's 64-bit range, ``float``, ``bool``, and ``bytes`` or ASCII
  ``str`` under 4 GiB (a non-ASCII ``str`` may hold a lone surrogate, which msgpack refuses). The
  key is encoded on its first fresh write, so a bad key still fails at ``put``.
- Those values are immutable, so what ``get`` returns is a snapshot, as a decoded copy is.
- A fresh key holds its place in ``_pending`` (``_FRESH``) from its first write, so iteration
  and what a prepare sends keep the order of first writes. ``_pending[k] is _FRESH`` exactly
  while the ``str`` key encoding to ``k`` is in ``_fresh``.
- Only an exact ``str`` key is looked up in ``_fresh``: two of them encode to the same bytes only
  if they are equal. Any other key (a ``str`` subclass, an enum, a model) may encode to the same
  bytes as a fresh ``str``, so an access by such a key first flushes.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from providers._base import KeyValueState, updated
from providers._serializers import (
    MsgpackKeySerializer,
    MsgpackSerializer,
    Serializer,
    encode_value,
    is_plain_msgpack,
)
from providers._ttl import StateTtl
from providers.errors import StateSerializationError

try:
    from providers._native._fresh import FreshLayer
except ImportError:  # not compiled at install (no C compiler), or imported from a zip
    FreshLayer = None  # type: ignore[assignment,misc]

__all__ = ["LayeredKeyValueState"]

# The _pending entry of a key whose value is still in _fresh.
_FRESH: Any = object()
# "Not in this layer", where None already means "deleted".
_MISSING: Any = object()
# Encoded str keys kept per state object: hot keys are encoded once, not on every get and put.
_KEY_CACHE_SIZE = 100_000
# The same for every state of this process whose keys are plain msgpack (``MsgpackKeySerializer``,
# no class: a str encodes the same in all of them), up to as many keys: a state made for one
# transaction (a transactional committer's map, one per attempt) finds its keys already encoded
# by the states before it.
_SHARED_KEYS: dict[Any, bytes] = {}


# Whether ``get`` and ``put`` of a fresh ``str`` key run in C (``FreshLayer``).
COMPILED = FreshLayer is not None

if TYPE_CHECKING or FreshLayer is None:

    class _Layer:
        """The base without the compiled module: nothing (``get``, ``put``: ``_get``, ``_put``)."""

        __slots__ = ()

else:
    _Layer = FreshLayer


class LayeredKeyValueState(_Layer, KeyValueState):
    """A key-value state whose reads and pending writes live in this object.

    A subclass provides ``_stored(ekey)``, the payload of an encoded key in its store (the
    prepared delta, then committed; ``None`` when absent or deleted there), and
    ``_live_encoded()``, every live key with its payload (iteration, ``iter_keys`` and
    ``len`` come from it). It calls ``_flush()`` before anything that reads ``_pending`` as a
    whole, and resets ``_fresh`` with ``_pending`` on rollback.
    """

    def __init__(
        self,
        namespace: str,
        key_serializer: Serializer | None = None,
        value_serializer: Serializer | None = None,
    ) -> None:
        self.namespace = namespace
        self._keys: Serializer = key_serializer or MsgpackKeySerializer()
        self._values: Serializer = value_serializer or MsgpackSerializer()
        self._pending: dict[bytes, bytes | None] = {}
        self._fresh: dict[str, Any] = {}
        self._key_cache: dict[Any, bytes] = {}
        plain_keys = type(self._keys) is MsgpackKeySerializer and is_plain_msgpack(self._keys)
        self._shared_keys = _SHARED_KEYS if plain_keys else None
        self._fast = is_plain_msgpack(self._keys) and is_plain_msgpack(self._values)
        # Time to live (``providers._ttl``): the transaction's timestamp reads are judged at
        # (``None``: nothing expires), the TTL of what this object writes, and whether a read
        # that finds a key in the store rewrites it (TtlRefresh.READ_WRITE) to move its expiry.
        self._now: int | None = None
        self._ttl: StateTtl | None = None
        self._touch = False

    @property
    def supports_ttl(self) -> bool:
        """Layered states keep expiries."""
        return True

    def set_transaction_time(self, now_ms: int | None, ttl: StateTtl | None = None) -> None:
        """Judge expiry at ``now_ms``; what this object writes expires ``ttl`` later.

        See ``KeyValueState.set_transaction_time``.

        Raises:
            ValueError: a ``ttl`` without a timestamp (its expiries could not be computed).
        """
        if ttl is not None and now_ms is None:
            msg = f"state {self.namespace!r}: a TTL needs the transaction's timestamp"
            raise ValueError(msg)
        self._now = None if now_ms is None else int(now_ms)
        self._ttl = ttl
        self._touch = ttl is not None and ttl.refreshes_on_read

    def _write_expiry(self) -> int | None:
        """The expiry this object's writes get at its next prepare (``None``: none)."""
        ttl, now = self._ttl, self._now
        return None if ttl is None or now is None else ttl.expiry(now)

    @abstractmethod
    def _stored(self, ekey: bytes) -> bytes | None:
        """The payload of ``ekey`` below this object's writes; ``None`` when absent or deleted."""

    @abstractmethod
    def _live_encoded(self) -> Iterator[tuple[bytes, bytes]]:
        """``(encoded key, payload)`` of every live key once: pending, prepared, committed."""

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        """``_live_encoded``, each key and value decoded (the subclass says in what order)."""
        for ekey, payload in self._live_encoded():
            yield self._keys.deserialize(ekey), self._values.deserialize(payload)

    def iter_keys(self) -> Iterator[Any]:
        """The keys of ``iter(self)``, in its order; no value is decoded."""
        for ekey, _ in self._live_encoded():
            yield self._keys.deserialize(ekey)

    def __len__(self) -> int:
        return sum(1 for _ in self.iter_keys())

    def _encode_key(self, key: Any) -> bytes:
        """The key as stored; ``StateSerializationError`` names the state and the key."""
        # A str, or a one-str tuple (how a transactional map keys its entries), is cached.
        plain = type(key) is str or (type(key) is tuple and len(key) == 1 and type(key[0]) is str)
        shared = self._shared_keys
        if plain:
            cached = self._key_cache.get(key)
            if cached is not None:
                return cached
            if shared is not None:
                cached = shared.get(key)
        else:
            cached = None
        if cached is None:
            try:
                cached = self._keys.serialize(key)
            except StateSerializationError as exc:
                msg = f"state {self.namespace!r}: key {key!r} cannot be stored: {exc}"
                raise StateSerializationError(msg) from exc
            if plain and shared is not None and len(shared) < _KEY_CACHE_SIZE:
                shared[key] = cached
        if plain and len(self._key_cache) < _KEY_CACHE_SIZE:
            self._key_cache[key] = cached
        return cached

    def _get(self, key: Any, default: Any = None) -> Any:
        """Return the value of ``key``, or ``default`` when it is absent."""
        # The fresh layer before any other work: a hit returns after one dict lookup.
        if type(key) is str:
            value = self._fresh.get(key)
            if value is not None:
                return value
            # _encode_key's cache, written out: a miss of the fresh layer pays for one call
            # (_stored), not three.
            ekey = self._key_cache.get(key)
            if ekey is None:
                ekey = self._encode_key(key)
        else:
            if self._fresh:
                self._flush()
            ekey = self._encode_key(key)
        payload = self._pending.get(ekey, _MISSING)
        if payload is _MISSING:
            payload = self._stored(ekey)
            if self._touch and payload is not None:
                self._pending[ekey] = payload  # a read refreshes: rewritten at the prepare
        if payload is None:
            return default
        value = self._values.deserialize(payload)
        # A custom serializer may decode to None, which is never a value.
        return default if value is None else value

    def get_many(self, keys: Iterable[Any], default: Any = None) -> list[Any]:
        """``get`` of each key, in order; what the store holds is read in one ``_stored_many``.

        A key given twice is read once, and both places get the value decoded once.
        """
        keys = list(keys)
        if self._fresh and any(type(k) is not str for k in keys):
            self._flush()
        fresh, pending, cache = self._fresh, self._pending, self._key_cache
        shared = self._shared_keys if self._shared_keys is not None else cache
        deserialize = self._values.deserialize
        if not pending and not self._touch:
            # Nothing written since the state was made (``_fresh`` is empty too: a fresh write
            # holds its place in ``_pending``), the way a transactional committer's map reads
            # before it writes: every key comes from the store, in one pass.
            return [
                default if payload is None or (value := deserialize(payload)) is None else value
                for payload in self._stored_many(self._encoded_keys(keys))
            ]
        found: list[Any] = [_MISSING] * len(keys)
        wanted: dict[bytes, int] = {}  # encoded key -> its first place in ``keys``
        again: list[tuple[int, int]] = []  # (place, first place) of a key given again
        # One frame for every key (a committer's ``multi_get`` of thousands): ``get``'s fresh
        # layer and ``_encode_key``'s caches written into the loop.
        for i, key in enumerate(keys):
            kind = type(key)
            if kind is str:
                value = fresh.get(key)
                if value is not None:
                    found[i] = value
                    continue
                ekey = cache.get(key) or shared.get(key)
            elif kind is tuple and len(key) == 1 and type(key[0]) is str:
                ekey = cache.get(key) or shared.get(key)
            else:
                ekey = None
            if ekey is None:
                ekey = self._encode_key(key)
            payload = pending.get(ekey, _MISSING)
            if payload is _MISSING:
                first = wanted.setdefault(ekey, i)
                if first != i:
                    again.append((i, first))
            elif payload is not None:
                found[i] = deserialize(payload)
        if wanted:
            touch = self._touch
            stored = self._stored_many(list(wanted))
            for (ekey, i), payload in zip(wanted.items(), stored, strict=True):
                if payload is not None:
                    if touch:
                        pending[ekey] = payload  # a read refreshes: rewritten at the prepare
                    found[i] = deserialize(payload)
            for i, first in again:
                found[i] = found[first]
        return [default if v is None or v is _MISSING else v for v in found]

    def _encoded_keys(self, keys: list[Any]) -> list[bytes]:
        """``_encode_key`` of each key, its caches looked up in the loop (one frame for all)."""
        shared = self._shared_keys
        if shared is not None:
            # The process's cache first, in one C loop: a committer's map is new every attempt,
            # so its own cache is empty, and its thousands of keys were all seen before. Only
            # str and one-str tuples are in it; a key equal to one of them (a subclass) encodes
            # to the same bytes with msgpack.
            try:
                ekeys: list[bytes | None] = list(map(shared.get, keys))
            except TypeError:
                pass  # an unhashable key: the loop below names it
            else:
                if None not in ekeys:
                    return ekeys  # type: ignore[return-value]
                encode = self._encode_key
                return [
                    encode(key) if ekey is None else ekey
                    for key, ekey in zip(keys, ekeys, strict=True)
                ]
        cache = self._key_cache
        encoded: list[bytes] = []
        for key in keys:
            kind = type(key)
            if kind is str or (kind is tuple and len(key) == 1 and type(key[0]) is str):
                encoded.append(cache.get(key) or self._encode_key(key))
            else:
                encoded.append(self._encode_key(key))
        return encoded

    def update_many(
        self, keys: Iterable[Any], update: Callable[[list[Any]], Sequence[Any]]
    ) -> None:
        """``KeyValueState.update_many``; with nothing written yet, each key encoded once.

        A state that wrote nothing since it was made (a transactional committer's map, one per
        attempt) reads the keys from its store as ``get_many`` does and writes the new values
        encoded, under the same encoded keys: no key is encoded, and no pair goes through
        ``put``, twice. Otherwise ``get_many`` then ``put_many``.
        """
        keys = list(keys)
        if self._pending or self._touch:
            super().update_many(keys, update)
            return
        ekeys = self._encoded_keys(keys)
        deserialize = self._values.deserialize
        stored = self._stored_many(ekeys)
        new = updated(
            keys,
            update(
                [
                    None if payload is None or (value := deserialize(payload)) is None else value
                    for payload in stored
                ]
            ),
        )
        serialize, pending = self._values.serialize, self._pending
        for key, ekey, value in zip(keys, ekeys, new, strict=True):
            if value is None:
                continue
            try:
                pending[ekey] = serialize(value)  # ``put``'s encoded path: no fresh write yet
            except StateSerializationError:
                self.put(key, value)  # raises what ``put`` raises, naming the state and key
                raise

    def decode_key(self, encoded: bytes) -> Any:
        """A stored key decoded by this state's key serializer (see ``KeyValueState``)."""
        return self._keys.deserialize(encoded)

    def decode_value(self, payload: bytes) -> Any:
        """A stored payload decoded by this state's value serializer (see ``KeyValueState``)."""
        return self._values.deserialize(payload)

    def _stored_many(self, ekeys: list[bytes]) -> list[bytes | None]:
        """``_stored`` of each encoded key; a store that can read many at once overrides it."""
        return [self._stored(ekey) for ekey in ekeys]

    def _payload(self, ekey: bytes) -> bytes | None:
        """The payload of ``ekey`` below the fresh layer: pending, then the store."""
        payload = self._pending.get(ekey, _MISSING)
        return self._stored(ekey) if payload is _MISSING else payload

    def _put(self, key: Any, value: Any) -> None:
        """Set ``key``; ``None`` is not a value (use ``delete``)."""
        kind = type(value)
        if (
            type(key) is str
            and self._fast
            and (
                # msgpack's integer range, -2**63 .. 2**64 - 1, and its 4 GiB raw limit.
                (kind is int and -0x8000_0000_0000_0000 <= value <= 0xFFFF_FFFF_FFFF_FFFF)
                or kind is float
                or kind is bool
                or (
                    ((kind is str and value.isascii()) or kind is bytes)
                    and len(value) <= 0xFFFF_FFFF
                )
            )
        ):
            fresh = self._fresh
            if key not in fresh:
                self._pending[self._encode_key(key)] = _FRESH
            fresh[key] = value
            return
        # Encode both before touching a layer: a refused put leaves the old value readable.
        payload = encode_value(self._values, self.namespace, key, value)
        ekey = self._encode_key(key)
        if self._fresh:
            if type(key) is str:
                self._fresh.pop(key, None)
            else:
                self._flush()
        self._pending[ekey] = payload

    if not COMPILED:  # else ``FreshLayer``'s, which call these for all but a fresh str key
        get, put = _get, _put

    def put_many(self, items: Iterable[tuple[Any, Any]]) -> None:
        """``put`` of each pair, in order, with ``put`` written into the loop.

        One frame for all the pairs instead of one each: a batch bolt's writes, a committer's
        ``multi_put``. A pair ``put`` would refuse goes through ``put``, which raises.
        """
        if not self._fast:
            super().put_many(items)
            return
        put, pending, encode_key = self.put, self._pending, self._encode_key
        serialize, cache = self._values.serialize, self._key_cache
        shared = self._shared_keys if self._shared_keys is not None else cache
        for key, value in items:
            kind = type(value)
            # ``put``'s test, in the same order (see the module docstring).
            if type(key) is str and (
                (kind is int and -0x8000_0000_0000_0000 <= value <= 0xFFFF_FFFF_FFFF_FFFF)
                or kind is float
                or kind is bool
                or (
                    ((kind is str and value.isascii()) or kind is bytes)
                    and len(value) <= 0xFFFF_FFFF
                )
            ):
                # ``put`` may have replaced the layer (a flush): read it each time.
                fresh = self._fresh
                if key not in fresh:
                    pending[encode_key(key)] = _FRESH
                fresh[key] = value
                continue
            if value is None:
                put(key, value)  # refused, as ``put`` refuses it
                continue
            # The rest of ``put``: encode both before touching a layer.
            try:
                payload = serialize(value)
            except StateSerializationError:
                put(key, value)  # raises what ``put`` raises, naming the state and the key
                raise
            kind = type(key)
            if kind is str or (kind is tuple and len(key) == 1 and type(key[0]) is str):
                ekey = cache.get(key) or shared.get(key) or encode_key(key)
            else:
                ekey = encode_key(key)
            if self._fresh:
                if kind is str:
                    self._fresh.pop(key, None)
                else:
                    self._flush()
            pending[ekey] = payload

    def delete(self, key: Any) -> Any:
        """Remove ``key``; returns its previous value."""
        fresh = self._fresh
        if fresh:
            if type(key) is str:
                old = fresh.pop(key, None)
                if old is not None:
                    self._pending[self._encode_key(key)] = None
                    return old
            else:
                self._flush()
        ekey = self._encode_key(key)
        payload = self._payload(ekey)
        self._pending[ekey] = None
        return None if payload is None else self._values.deserialize(payload)

    def _flush(self) -> None:
        """Encode the fresh writes into ``_pending``, in the places their keys hold there."""
        fresh = self._fresh
        if fresh:
            pending, serialize = self._pending, self._values.serialize
            for key, value in fresh.items():
                pending[self._encode_key(key)] = serialize(value)
            self._fresh = {}
