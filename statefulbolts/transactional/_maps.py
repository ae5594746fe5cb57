"""``TransactionalMap`` and ``OpaqueMap``: exactly-once keyed writes for committers.

Two layers. A ``BackingMap`` stores plain values by key and applies a batch of writes as one
atomic step; it knows nothing about txids. The maps apply the rules of
``statefulbolts.transactional._values`` per key and hand the backing map the stored forms
(``[txid, value]`` or ``[txid, curr, prev]``), all the changes of one ``multi_update`` in one
``multi_put``, so a commit that dies half-way has written everything or nothing.

Backing maps here: ``MemoryBackingMap`` (a dict in this process) and ``StateBackingMap`` (over
any provider's ``KeyValueState``; the one a committer gets in Spark tasks). ``RedisBackingMap``
lives in ``statefulbolts.transactional._redis_map``.

**The opaque map hole** (docs/protocol/transactional.md). The opaque rule repairs only the
keys a replay touches. Say attempt 1 of txid t wrote keys A and K, and then the commit failed (a
later committer failed, the driver died). The opaque replay of t may be a different batch, with
no tuple for K: K keeps attempt 1's increment, and when K's tuples come in t+1 they are counted
twice. Storm and Trident leave this open. ``OpaqueMap`` closes it with a *record*:

1. Each ``multi_put`` of an ``OpaqueMap`` also writes, in the same atomic step, the record
   ``[t, [key, ...]]``: the txid and every key this map object has updated for t so far.
2. An ``OpaqueMap`` object is one commit attempt. Its first ``multi_update`` for t reads the
   record. A record of t can only come from an earlier attempt of t (this object has not
   written t yet), whose commit is now being redone: every recorded key this call does not
   update is *stale*, and still holds that attempt's write if its stored txid is t.
3. Each stale key is put back to its value before t, in the same ``multi_put`` as the new
   values: ``[t - 1, prev, prev]`` (a txid below t, so a later update of t or after starts from
   ``prev``; the second ``prev`` is never read, because t-1 has committed), or deleted when
   ``prev`` is ``None`` (the key did not exist before t).
4. Later calls of the same object for t add their keys to the record rather than restoring
   those of earlier calls. A key this object already updated for t is refused (``ValueError``).

So a committer must call ``multi_update`` on every commit, with an empty key list if its batch
is empty: that call is what repairs the keys of a failed attempt. The record is per backing map,
that is per committer task; each key must be written by one task (fields grouping on the key),
the same task on every attempt, which the opaque rule needs anyway. Maps over a shared store
keep one record per owner: ``context.backing_map()`` is the task's own namespace, and a
``RedisBackingMap`` told no owner takes the committer task using it (``_redis_map``, "Owners").

The record lives in a reserved slot of the backing map, ``get_record()`` and the ``record``
argument of ``multi_put``, which no key can reach: each backing map documents where it keeps it.
``TransactionalMap`` needs no record: a transactional replay is the identical batch.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, NamedTuple

from providers import (
    KeyValueState,
    StateSerializationError,
    StateTransactionError,
    pack_plain,
    pack_plain_key,
    plain_packer,
    unpack_plain,
)
from statefulbolts.transactional._values import (
    OpaqueValue,
    TransactionalValue,
    Txid,
    Updater,
    txid_of,
)

__all__ = [
    "BackingMap",
    "read_backing_state",
    "MemoryBackingMap",
    "OpaqueMap",
    "StateBackingMap",
    "TransactionalMap",
]


# --- the backing map contract ------------------------------------------------------------------
class BackingMap(ABC):
    """Plain values by key, and one reserved slot (the record); writes are atomic batches.

    Values are msgpack-able data (what ``to_plain`` gives) in the framework's codec: a tuple,
    set or frozenset in a value reads back as it was. Keys are hashable: ``str``, ``int``,
    ``bytes``, or tuples of them, stored as keys always were: a stored tuple key comes back as a
    list, and a backing map treats ``(1, 2)`` and ``[1, 2]`` as the same key.

    The record is one more plain value, kept where no key can reach it. ``OpaqueMap`` keeps in it
    the keys each txid wrote (see the module docstring); it belongs to whoever writes through
    this backing map, so give each committer task its own.
    """

    @abstractmethod
    def multi_get(self, keys: Sequence[Hashable]) -> list[Any]:
        """The stored value of each key, ``None`` where nothing is stored, in order."""

    @abstractmethod
    def multi_put(
        self, keys: Sequence[Hashable], values: Sequence[Any], record: Any = None
    ) -> None:
        """Write ``values[i]`` at ``keys[i]`` and, unless ``record`` is None, the record.

        A ``None`` value deletes its key. Everything is applied as ONE atomic write: after a
        crash, a reader sees all of it or none of it.
        """

    @abstractmethod
    def get_record(self) -> Any:
        """The record last written with ``multi_put``, or ``None``."""

    def update_forms(
        self, keys: Sequence[Hashable], update: Callable[[list[Any]], Sequence[Any]]
    ) -> None:
        """Write what ``update`` makes of the stored values of ``keys``, as ONE ``multi_put``.

        ``update`` gets ``multi_get(keys)`` and returns one value per key, ``None`` for a key
        to leave as it is; no record is written, and nothing at all when ``update`` raises or
        leaves every key. A backing map may read and write in fewer steps
        (``StateBackingMap``: one pass over the keys for both).
        """
        new = update(self.multi_get(keys))
        if len(new) != len(keys):
            msg = f"update_forms' update returned {len(new)} values for {len(keys)} keys"
            raise ValueError(msg)
        put = [(key, value) for key, value in zip(keys, new, strict=True) if value is not None]
        if put:
            self.multi_put([key for key, _ in put], [value for _, value in put])


def _check_put(keys: Sequence[Hashable], values: Sequence[Any]) -> None:
    if len(keys) != len(values):
        msg = f"multi_put got {len(keys)} keys and {len(values)} values; give one value per key"
        raise ValueError(msg)


def pack_value(obj: Any, what: str) -> bytes:
    """A stored form or record in the framework's codec (``providers.pack_plain``).

    A tuple, a set or a frozenset in it reads back as it was, as in every provider's state.
    """
    try:
        return pack_plain(obj)
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        msg = f"{what} cannot be stored: msgpack cannot encode {type(obj).__qualname__}: {exc}"
        raise StateSerializationError(msg) from exc


def pack_key(obj: Any, what: str) -> bytes:
    """A key, where a backing map stores keys as bytes (``providers.pack_plain_key``).

    Encoded as keys always were (a tuple is an array; a set is refused): keys written before
    are found.
    """
    try:
        return pack_plain_key(obj)
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        msg = f"{what} cannot be stored: msgpack cannot encode {type(obj).__qualname__}: {exc}"
        raise StateSerializationError(msg) from exc


def value_packer() -> Any:
    """A reusable packer of ``pack_value``'s encoding (a failed pack leaves it dirty)."""
    return plain_packer()


unpack_value = unpack_plain


class MemoryBackingMap(BackingMap):
    """A ``BackingMap`` in a dict of this process, for tests and local runs.

    It lives in the process that made it: a Spark task runs elsewhere, and a copy of the map
    would be a different map whose writes are lost, so copying or pickling it raises
    ``TypeError``. In Spark tasks use ``StateBackingMap`` or ``RedisBackingMap``.

    Values and the record are kept msgpack-encoded, as every other backing map keeps them: what
    Redis could not store fails here too, and a caller's later change to an object it handed in
    cannot reach what is stored. ``multi_put`` encodes everything before it changes anything,
    and applies the changes under a lock. The record is an attribute, outside the dict of keys.

    Example:
        >>> backing = MemoryBackingMap()
        >>> backing.multi_put(["cat", ("dog", 2)], [[1, 3], [1, 4]], record=[1, ["cat"]])
        >>> backing.multi_get(["cat", ("dog", 2), "emu"]), backing.get_record()
        ([[1, 3], [1, 4], None], [1, ['cat']])
    """

    def __init__(self) -> None:
        self._data: dict[Hashable, bytes] = {}
        self._record: bytes | None = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"MemoryBackingMap({len(self._data)} keys)"

    def __reduce__(self) -> Any:
        msg = (
            "a MemoryBackingMap lives in the process that made it and cannot be copied or "
            "pickled (a copy would be another map, and its writes would be lost); in Spark tasks "
            "use StateBackingMap or RedisBackingMap"
        )
        raise TypeError(msg)

    def multi_get(self, keys: Sequence[Hashable]) -> list[Any]:
        """The stored value of each key, ``None`` where nothing is stored."""
        with self._lock:
            raw = [self._data.get(key) for key in keys]
        return [None if data is None else unpack_value(data) for data in raw]

    def multi_put(
        self, keys: Sequence[Hashable], values: Sequence[Any], record: Any = None
    ) -> None:
        """Write the values (``None`` deletes) and the record, all at once."""
        _check_put(keys, values)
        encoded = [
            None if value is None else pack_value(value, f"the value of key {key!r}")
            for key, value in zip(keys, values, strict=True)
        ]
        for key in keys:
            hash(key)  # an unhashable key fails here, before anything changed
        packed_record = None if record is None else pack_value(record, "the record")
        with self._lock:
            for key, data in zip(keys, encoded, strict=True):
                if data is None:
                    self._data.pop(key, None)
                else:
                    self._data[key] = data
            if packed_record is not None:
                self._record = packed_record

    def get_record(self) -> Any:
        """The record, or ``None``."""
        record = self._record
        return None if record is None else unpack_value(record)


# State key of the record. Every key of the map is stored wrapped in a one-item tuple, an array
# to the state's serializer, so no key of the map can equal this str.
_RECORD_KEY = "$record"


class StateBackingMap(BackingMap):
    """A ``BackingMap`` over a provider's ``KeyValueState``: atomic on every provider.

    Each ``multi_put`` stages its writes with ``put`` / ``delete`` and applies them with one
    ``state.commit()`` (no txid), which every provider applies at once: one Lua script on
    Redis, one SQL transaction in SQLite, one step in memory. ``multi_get`` reads with
    ``state.get_many``. The txids here are the map's, not the checkpoint protocol's: this map
    never calls ``prepare_commit``, and nothing else may write its state.

    Layout in the state: key ``k`` of the map is the state key ``(k,)``, a one-item array; the
    record is the state key ``"$record"``, a str, which no wrapped key can equal. Values are the
    plain lists the maps hand in, so the state must use msgpack without a ``valueClass``
    (``StateFactory.get_system_state`` gives such a state whatever the provider config says).
    ``multi_get`` is one ``state.get_many``: one round trip on Redis.

    If a ``multi_put`` fails (the store is down, a value cannot be encoded), its writes may stay
    staged in the state object, where the next read or commit would pick them up; so the map
    refuses any further call, and the next attempt makes a new state and map.

    Example:
        >>> from providers import StateFactory
        >>> backing = StateBackingMap(StateFactory.get_state("demo/count-0", {}))
        >>> backing.multi_put(["cat"], [[1, 3]], record=[1, ["cat"]])
        >>> backing.multi_get(["cat", "dog"]), backing.get_record()
        ([[1, 3], None], [1, ['cat']])
    """

    def __init__(self, state: KeyValueState) -> None:
        if not isinstance(state, KeyValueState):
            kind = f"{type(state).__module__}.{type(state).__qualname__}"
            msg = f"StateBackingMap needs a providers.KeyValueState; got {kind}"
            raise TypeError(msg)
        self._state = state
        self._failed: BaseException | None = None

    def __repr__(self) -> str:
        return f"StateBackingMap(state={getattr(self._state, 'namespace', self._state)!r})"

    @property
    def state(self) -> KeyValueState:
        """The state this map writes to."""
        return self._state

    def _check_usable(self) -> None:
        if self._failed is not None:
            msg = (
                f"{self!r}: an earlier multi_put failed ({type(self._failed).__name__}: "
                f"{self._failed}), and its writes may still be staged in the state object; "
                "make a new state and StateBackingMap for the next attempt"
            )
            raise StateTransactionError(msg) from self._failed

    def multi_get(self, keys: Sequence[Hashable]) -> list[Any]:
        """The stored value of each key, ``None`` where nothing is stored."""
        self._check_usable()
        return self._state.get_many([(key,) for key in keys])

    def multi_put(
        self, keys: Sequence[Hashable], values: Sequence[Any], record: Any = None
    ) -> None:
        """Stage the writes (``None`` deletes) and the record, then one ``state.commit()``."""
        self._check_usable()
        _check_put(keys, values)
        state = self._state
        try:
            if any(value is None for value in values):
                put, delete = state.put, state.delete
                for key, value in zip(keys, values, strict=True):
                    if value is None:
                        delete((key,))
                    else:
                        put((key,), value)
            else:  # no deletion: one call (a transactional map's every write)
                state.put_many(zip([(key,) for key in keys], values, strict=True))
            if record is not None:
                state.put(_RECORD_KEY, record)
            state.commit()
        except Exception as exc:
            self._failed = exc
            raise

    def get_record(self) -> Any:
        """The record, or ``None``."""
        self._check_usable()
        return self._state.get(_RECORD_KEY)

    def update_forms(
        self, keys: Sequence[Hashable], update: Callable[[list[Any]], Sequence[Any]]
    ) -> None:
        """``BackingMap.update_forms`` through ``state.update_many``, then one ``state.commit()``.

        A layered state that wrote nothing yet (this map's, made for the attempt) encodes
        each key once for the read and the write: a committer's thousands of keys.
        """
        self._check_usable()
        state = self._state
        wrote: list[bool] = []
        failed_update: list[BaseException] = []

        def staged(stored: list[Any]) -> Sequence[Any]:
            try:
                new = update(stored)
            except BaseException as exc:
                failed_update.append(exc)  # its own error: nothing was written
                raise
            wrote.append(any(value is not None for value in new))
            return new

        try:
            state.update_many([(key,) for key in keys], staged)
            if wrote and wrote[0]:
                state.commit()
        except Exception as exc:
            if not failed_update:
                self._failed = exc
            raise


def read_backing_state(stored: Iterable[tuple[Any, Any]]) -> dict[Any, Any]:
    """The current value of every key in a ``StateBackingMap``'s stored ``(key, form)`` pairs.

    For reading results (``TopologyHandle.read_state``, which passes the state's committed
    items): a ``[txid, value]`` form gives its value, an opaque ``[txid, curr, prev]`` form its
    ``curr``; the record is left out.
    """
    values: dict[Any, Any] = {}
    for key, plain in stored:
        if key == _RECORD_KEY or not isinstance(key, list | tuple) or len(key) != 1:
            continue
        if isinstance(plain, list | tuple) and len(plain) in (2, 3):
            values[key[0]] = plain[1]
    return values


# --- the maps ------------------------------------------------------------------------------
def _checked(
    keys: Iterable[Hashable], updaters: Iterable[Updater]
) -> tuple[list[Hashable], list[Updater]]:
    """The arguments of ``multi_update`` as lists: one callable per key, no key twice."""
    keys, updaters = list(keys), list(updaters)
    if len(keys) != len(updaters):
        msg = (
            f"multi_update got {len(keys)} keys and {len(updaters)} updaters; "
            "give one updater per key"
        )
        raise ValueError(msg)
    try:
        if len(set(keys)) == len(keys) and all(map(callable, updaters)):
            return keys, updaters  # the usual case, checked in C (a commit's thousands of keys)
    except TypeError:
        pass  # an unhashable key: the loop names it
    seen: set[Hashable] = set()
    repeated: list[Hashable] = []
    for key, updater in zip(keys, updaters, strict=True):
        try:
            new = key not in seen
        except TypeError as exc:
            msg = (
                f"map keys must be hashable (str, int, bytes, tuples of them); got {key!r} "
                f"({type(key).__qualname__})"
            )
            raise TypeError(msg) from exc
        if new:
            seen.add(key)
        else:
            repeated.append(key)
        if not callable(updater):
            msg = f"the updater of key {key!r} is not callable: {updater!r}"
            raise TypeError(msg)
    if repeated:
        msg = (
            f"multi_update got key(s) {repeated!r} more than once; a key is updated at most "
            "once per txid (merge its updates into one updater)"
        )
        raise ValueError(msg)
    return keys, updaters


def _ahead(where: str, key: Hashable, stored_txid: int, t: int) -> StateTransactionError:
    msg = (
        f"{where}: key {key!r} was written by txid {stored_txid}, after txid {t}: "
        "the state is ahead of the stream (another topology with the same transactional id, "
        "or a store restored from a later copy?)"
    )
    return StateTransactionError(msg)


class TransactionalMap:
    """Keyed values for a transactional spout: a replayed txid's updates are skipped.

    Each value is stored as ``[txid, value]`` (``TransactionalValue``). A stored txid above the
    one being applied raises ``StateTransactionError`` (Trident would apply silently).

    Example:
        >>> counts = TransactionalMap(MemoryBackingMap())
        >>> def add(n):
        ...     return lambda old: (old or 0) + n
        >>> counts.multi_update(1, ["cat", "dog"], [add(2), add(1)])
        [2, 1]
        >>> counts.multi_update(1, ["cat"], [add(2)])  # txid 1 again: skipped
        [2]
        >>> counts.multi_update(2, ["cat"], [add(5)]), counts.multi_get(["cat", "emu"])
        ([7], [7, None])
    """

    def __init__(self, backing: BackingMap) -> None:
        self._backing = backing

    def __repr__(self) -> str:
        return f"TransactionalMap({self._backing!r})"

    @property
    def backing(self) -> BackingMap:
        """Where the values are stored."""
        return self._backing

    def multi_get(self, keys: Iterable[Hashable]) -> list[Any]:
        """The value of each key, ``None`` where nothing is stored."""
        stored = self._backing.multi_get(list(keys))
        return [None if s is None else TransactionalValue.from_plain(s).value for s in stored]

    def multi_update(
        self, txid: Txid, keys: Iterable[Hashable], updaters: Iterable[Updater]
    ) -> list[Any]:
        """Apply ``updaters[i]`` to the value of ``keys[i]`` for batch ``txid``.

        ``txid`` is an int or a ``TransactionAttempt`` (its ``transaction_id`` is used). Keys
        that ``txid`` already wrote are skipped; the others are written in ONE atomic write
        (``backing.update_forms``: one ``multi_put``). Returns the new value of each key.

        Raises:
            ValueError: a key appears twice, or keys and updaters differ in number.
            StateTransactionError: a stored txid is above ``txid`` (nothing is written).
        """
        t = txid_of(txid)
        keys, updaters = _checked(keys, updaters)
        results: list[Any] = []

        def apply(stored: list[Any]) -> list[Any]:
            """``TransactionalValue.apply`` on the stored forms, without making the objects."""
            forms: list[Any] = []
            form, result = forms.append, results.append  # thousands of keys: bound once
            for key, plain, updater in zip(keys, stored, updaters, strict=True):
                if plain is None:
                    value = updater(None)
                else:
                    if type(plain) is list and len(plain) == 2 and type(plain[0]) is int:
                        written, value = plain
                    else:  # anything else is read the careful way (and refused if malformed)
                        old = TransactionalValue.from_plain(plain)
                        written, value = old.txid, old.value
                    if written >= t:
                        if written > t:
                            raise _ahead(repr(self), key, written, t)
                        result(value)  # a replay of t: skipped
                        form(None)
                        continue
                    value = updater(value)
                form([t, value])
                result(value)
            return forms

        # Read, apply and write in one call: a backing map over a state reads and writes each
        # key with one encoding of it (``StateBackingMap.update_forms``).
        self._backing.update_forms(keys, apply)
        return results


class _Record(NamedTuple):
    """The record ``OpaqueMap`` keeps in its backing map: a txid and the keys it updated."""

    txid: int
    keys: tuple[Hashable, ...]

    def to_plain(self) -> list[Any]:
        # The keys as keys are stored (a tuple an array), not as values: the layout stays.
        return [self.txid, [_key_form(key) for key in self.keys]]

    @classmethod
    def from_plain(cls, plain: Any, where: str) -> _Record:
        if (
            not isinstance(plain, list | tuple)
            or len(plain) != 2
            or isinstance(plain[0], bool)
            or not isinstance(plain[0], int)
            or not isinstance(plain[1], list | tuple)
        ):
            msg = f"{where}: the stored record must be [txid, [key, ...]]; found {plain!r}"
            raise StateSerializationError(msg)
        return cls(plain[0], tuple(_as_key(key) for key in plain[1]))


def _key_form(key: Any) -> Any:
    """``key`` as a key is stored: a tuple is an array, as ``_as_key`` reads it back."""
    if isinstance(key, tuple):
        return [_key_form(item) for item in key]
    return key


def _as_key(stored: Any) -> Hashable:
    """A key read back from msgpack: arrays come back as lists, and the key was a tuple."""
    if isinstance(stored, list | tuple):
        return tuple(_as_key(item) for item in stored)
    return stored


class OpaqueMap:
    """Keyed values for an opaque spout: a replayed txid starts again from the value before it.

    Each value is stored as ``[txid, curr, prev]`` (``OpaqueValue``); reads give ``curr``. One
    object is one commit attempt of one committer task: make a new one for each attempt. It
    closes the opaque map hole (docs/protocol/transactional.md; the module docstring), so call
    ``multi_update`` on every commit, even with no keys.

    Example:
        >>> backing = MemoryBackingMap()
        >>> def add(n):
        ...     return lambda old: (old or 0) + n
        >>> OpaqueMap(backing).multi_update(1, ["cat", "dog"], [add(2), add(1)])
        [2, 1]
        >>> replay = OpaqueMap(backing)  # txid 1 failed after its write; its replay has no dog
        >>> replay.multi_update(1, ["cat"], [add(3)])
        [3]
        >>> replay.multi_get(["cat", "dog"])
        [3, None]
    """

    def __init__(self, backing: BackingMap) -> None:
        self._backing = backing
        # The txid this object has written for, and the keys it updated for it (in order).
        self._txid: int | None = None
        self._updated: dict[Hashable, None] = {}

    def __repr__(self) -> str:
        return f"OpaqueMap({self._backing!r})"

    @property
    def backing(self) -> BackingMap:
        """Where the values and the record are stored."""
        return self._backing

    def multi_get(self, keys: Iterable[Hashable]) -> list[Any]:
        """The current value (``curr``) of each key, ``None`` where nothing is stored."""
        stored = self._backing.multi_get(list(keys))
        return [None if s is None else OpaqueValue.from_plain(s).curr for s in stored]

    def multi_update(
        self, txid: Txid, keys: Iterable[Hashable], updaters: Iterable[Updater]
    ) -> list[Any]:
        """Apply ``updaters[i]`` to the value of ``keys[i]`` for batch ``txid``.

        ``txid`` is an int or a ``TransactionAttempt`` (its ``transaction_id`` is used).

        Steps (one read of the record per attempt, one ``multi_get``, one ``multi_put``):
            1. On this object's first call for ``txid``, read the record; a record of ``txid``
               was left by an earlier attempt, and the keys it lists that this call does not
               update are stale. On a later call, refuse a key already updated.
            2. Read the keys and the stale keys in one ``multi_get``.
            3. Apply the opaque rule to each key; put each stale key still holding a write of
               ``txid`` back to its value before ``txid`` (deleted if it had none).
            4. Write the new values, the restored keys and the record ``[txid, keys this
               object updated for txid]`` in ONE ``multi_put``.

        Returns the new value (``curr``) of each key.

        Raises:
            ValueError: a key appears twice, or was already updated by this object for
                ``txid``, or keys and updaters differ in number.
            StateTransactionError: a stored txid (of a value or of the record) is above
                ``txid`` (nothing is written).
        """
        t = txid_of(txid)
        keys, updaters = _checked(keys, updaters)
        if t == self._txid:
            again = [key for key in keys if key in self._updated]
            if again:
                msg = (
                    f"{self!r}: key(s) {again!r} were already updated for txid {t} by this "
                    "map; a key is updated at most once per txid"
                )
                raise ValueError(msg)
            stale: list[Hashable] = []
            updated = dict(self._updated)
        else:
            stale = self._stale_keys(t, keys)
            updated = {}
        stored = self._backing.multi_get([*keys, *stale])

        results: list[Any] = []
        put_keys: list[Hashable] = []
        put_values: list[Any] = []
        for key, plain, updater in zip(keys, stored[: len(keys)], updaters, strict=True):
            old = None if plain is None else OpaqueValue.from_plain(plain)
            if old is not None and old.txid > t:
                raise _ahead(repr(self), key, old.txid, t)
            new = OpaqueValue.apply(old, t, updater)
            put_keys.append(key)
            put_values.append(new.to_plain())
            results.append(new.curr)
            updated[key] = None
        for key, plain in zip(stale, stored[len(keys) :], strict=True):
            old = None if plain is None else OpaqueValue.from_plain(plain)
            if old is None or old.txid < t:
                continue  # nothing of txid t left in it
            if old.txid > t:
                raise _ahead(repr(self), key, old.txid, t)
            put_keys.append(key)
            if old.prev is None:
                put_values.append(None)  # the key did not exist before t
            else:
                put_values.append(OpaqueValue(t - 1, old.prev, old.prev).to_plain())

        if put_keys:
            record = _Record(t, tuple(updated)).to_plain()
            self._backing.multi_put(put_keys, put_values, record=record)
        self._txid, self._updated = t, updated
        return results

    def _stale_keys(self, t: int, keys: list[Hashable]) -> list[Hashable]:
        """The keys an earlier attempt of ``t`` updated that this call does not."""
        plain = self._backing.get_record()
        if plain is None:
            return []
        record = _Record.from_plain(plain, repr(self))
        if record.txid > t:
            msg = (
                f"{self!r}: the record says txid {record.txid} was written, after txid {t}: "
                "the state is ahead of the stream"
            )
            raise StateTransactionError(msg)
        if record.txid < t:
            return []
        this_call = set(keys)
        return [key for key in record.keys if key not in this_call]
