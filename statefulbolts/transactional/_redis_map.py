"""``RedisBackingMap``: a ``BackingMap`` in Redis; each ``multi_put`` is one fenced script call.

Layout, for a map made with ``prefix`` and ``owner`` (Redis keys are bytes; UTF-8 throughout):

=============================================  ==========================================
Redis key                                      holds
=============================================  ==========================================
``prefix`` + the key, for a ``str`` key        the msgpack of the stored form, a string
``prefix`` + ``0xFF`` + msgpack of the key,    the same
for any other key (int, bytes, tuple, ...)
``prefix`` + ``0xFE`` + ``owner``              the record (``BackingMap.get_record``)
``prefix`` + ``0xFD`` + ``owner``              the task that wrote the record
                                               (``<component>-<task index>``), when known
``prefix`` + ``0xFC``                          the fence: the highest lease epoch that
                                               wrote through the prefix (a decimal string)
=============================================  ==========================================

The stored form is whatever the map layer hands in: ``[txid, value]`` from ``TransactionalMap``,
``[txid, curr, prev]`` from ``OpaqueMap``. So ``prefix + "cat"`` holds msgpack ``[4, 15]``, and a
``redis-cli GET`` shows a str key's value where one expects it.

The bytes ``0xFC`` to ``0xFF`` never occur in UTF-8, so the kinds cannot meet: no ``str`` key
reaches a non-str key, a record or the fence, a non-str key (after ``0xFF``) never reaches a
record (after ``0xFE``) or a writer (after ``0xFD``), and the fence is the marker alone.
msgpack has one array type, so a tuple key and the list with the same items are one key; ``1``,
``1.0``, ``True``, ``"1"`` and ``b"1"`` are five keys.

Owners. Maps with one prefix and different owners share their keys and keep separate records,
and ``OpaqueMap`` needs one record per committer task (see ``_maps``, "the opaque map hole"):
two tasks writing one owner's record overwrite each other's, and an opaque replay then puts the
wrong keys back, losing or doubling counts. So by default each task is its own owner:

1. ``owner="..."`` or ``context=`` (the ``TopologyContext`` of the committer's ``prepare``; the
   owner is ``<component>-<task index>``) fix the owner.
2. Otherwise the owner is the transactional task using the map (``<component>-<task index>``,
   marked by the runtime while the task runs, ``_owner``), or, used where no task is marked
   (a thread of the user's), the task the map was made in.
3. Outside any task (a script, a test), the owner is ``""``.

The record's writer is kept beside it, and a task that reads a record another task of the
same owner wrote (one fixed ``owner`` in a committer of parallelism 2, say) gets a
``StateTransactionError`` naming both tasks, before it writes anything.

The fence (``providers._lease``). A committer's ``multi_put`` is a write the user sees, so a
driver that another driver of the topology took over must not land one. The task running the
map carries its driver's lease epoch (``_owner.running_epoch``, from the task's config; a map
used from a thread of the user's takes the epoch of the task it was made in), and each
``multi_put`` compares it with the prefix's fence in the same atomic step as the write: an
older epoch is refused with ``StateFencedError`` and nothing is written, a newer one raises
the fence. A map used outside a driver's task (a script, a test) writes unfenced and leaves the
fence alone. The prefix is not a namespace, so a lease's grant does not fence it (step 2): the
new driver's first ``multi_put`` does.

End a prefix with a separator (``"counts:"``) so that no two prefixes overlap. On Redis Cluster
every key of one ``multi_put`` must be in one slot, the fence included: put a hash tag in the
prefix (``"{counts}:"``).

Round trips: ``multi_get`` is one ``MGET``; ``get_record`` one ``MGET`` (the record and its
writer); ``multi_put`` one script call (``MULTI_PUT``), atomic because Redis runs a script alone
(and, on a full server, refuses it at its first write, before anything is written). The script
calls ``MSET`` and ``DEL`` on slices of 1,000 keys, not ``SET`` per key: a native ``MSET`` of
10,000 keys beats a loop of ``SET``. Errors name host:port, the step and the map:
``StateBackendError`` for an
outage (the connection, a timeout, a server loading or busy), ``StateBackendRefusedError`` for
a refusal (out of memory, a read-only replica, a wrong password, ...;
``providers.redis.classify_error``). With ``hiredis`` installed (the ``redis`` extra brings it)
redis-py parses replies in C, which makes an ``MGET`` of thousands of values several times
cheaper.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Hashable, Iterator, Sequence
from typing import Any

import msgpack

from providers.errors import StateSerializationError, StateTransactionError
from statefulbolts.transactional._maps import (
    BackingMap,
    pack_key,
    pack_value,
    unpack_value,
    value_packer,
)
from statefulbolts.transactional._owner import context_owner, running_epoch, running_task

try:
    from providers.redis import BACKEND_ERRORS, address_of, backend_error, connect, fenced_error
except ImportError as exc:  # pragma: no cover - depends on the environment
    _msg = "RedisBackingMap needs redis-py: pip install 'statefulbolts[redis]'"
    raise ImportError(_msg) from exc

__all__ = ["RedisBackingMap"]

log = logging.getLogger(__name__)

_OTHER_KEY = b"\xff"
_RECORD = b"\xfe"
_WRITER = b"\xfd"
_FENCE = b"\xfc"

# MULTI_PUT. KEYS[1] = the fence (prefix 0xFC), KEYS[2 .. n+1] = the keys to set,
# KEYS[n+2 ..] = the keys to delete.
# ARGV[1] = the writer's lease epoch ('' for none: unfenced), ARGV[2] = n (decimal),
# ARGV[3 .. n+2] = the values of KEYS[2 .. n+1], in order.
# Returns {-1, fence} when ARGV[1] is below the fence (nothing written); else MSETs and DELs the
# keys, raises the fence to ARGV[1], and returns {0}. The first write is the MSET (or the DEL),
# the one Redis judges against maxmemory, and the fence rises last. Idempotent for the same
# arguments.
MULTI_PUT = """
local epoch, raise = ARGV[1], false
if epoch ~= '' then
  local f = redis.call('GET', KEYS[1])
  if f and tonumber(f) > tonumber(epoch) then return {-1, f} end
  raise = not f or tonumber(f) < tonumber(epoch)
end
local n = tonumber(ARGV[2])
for i = 1, n, 1000 do
  local pairs = {}
  for j = i, math.min(i + 999, n) do
    pairs[#pairs + 1] = KEYS[j + 1]
    pairs[#pairs + 1] = ARGV[j + 2]
  end
  redis.call('MSET', unpack(pairs))
end
for i = n + 2, #KEYS, 1000 do
  redis.call('DEL', unpack(KEYS, i, math.min(i + 999, #KEYS)))
end
if raise then redis.call('SET', KEYS[1], epoch) end
return {0}
"""
_FENCED = -1  # MULTI_PUT's reply code for a refused epoch (the provider's scripts use it too)


class RedisBackingMap(BackingMap):
    r"""A ``BackingMap`` in Redis, at ``prefix + key`` (see the module docstring for the layout).

    ``url_or_client`` is a URL (``redis://[[user]:password@]host[:port][/db]``, ``rediss://``
    for TLS; the map makes a client and ``close()`` closes it) or a redis-py client made
    without ``decode_responses`` (the caller keeps it); ``providers.redis.connect`` checks both.
    A client does not travel to Spark executors: make the map where it is used, in a
    committer's ``prepare``.

    The record's owner (see the module docstring): leave it out in a committer, and each task
    is its own (``<component>-<task index>``); or give ``context`` (the ``TopologyContext``
    of ``prepare``) for the same owner wherever the map is used; ``owner`` names one outright.

    Example:
        >>> import fakeredis
        >>> from statefulbolts.testing import make_context
        >>> client = fakeredis.FakeRedis()
        >>> context = make_context("count", task_index=1, parallelism=2)
        >>> backing = RedisBackingMap(client, "counts:", context=context)
        >>> backing.owner
        'count-1'
        >>> backing.multi_put(["cat", 7], [[1, 3], [1, 4]], record=[1, ["cat", 7]])
        >>> backing.multi_get(["cat", 7, "dog"]), backing.get_record()
        ([[1, 3], [1, 4], None], [1, ['cat', 7]])
        >>> sorted(client.keys())
        [b'counts:cat', b'counts:\xfdcount-1', b'counts:\xfecount-1', b'counts:\xff\x07']
    """

    def __init__(
        self,
        url_or_client: str | Any,
        prefix: str,
        *,
        owner: str | None = None,
        context: Any = None,
    ) -> None:
        if not isinstance(prefix, str):
            msg = f"RedisBackingMap: prefix must be a str; got {prefix!r}"
            raise TypeError(msg)
        if owner is not None and not isinstance(owner, str):
            msg = f"RedisBackingMap: owner must be a str; got {owner!r}"
            raise TypeError(msg)
        if owner is not None and context is not None:
            msg = (
                "RedisBackingMap: give owner or context, not both (context makes the owner "
                "'<component>-<task index>')"
            )
            raise ValueError(msg)
        # The task this map is bound to, if any: the context's, else the one running now; and
        # the lease epoch of the task running now (a task's prepare makes the map).
        self._task = context_owner(context) if context is not None else running_task()
        self._epoch = running_epoch()
        self._owner = self._task if context is not None else owner
        self._owns_client = isinstance(url_or_client, str)
        # A URL gets a client of its own (closed by ``close``), without a socket timeout as
        # before; a client handed in must return bytes.
        client = connect(url_or_client, purpose="RedisBackingMap", timeout_ms=0)
        self._client = client
        self.prefix = prefix
        self._prefix = prefix.encode("utf-8")
        self._fence_key = self._prefix + _FENCE
        self._multi_put = client.register_script(MULTI_PUT)
        self._address = address_of(client)

    @property
    def owner(self) -> str:
        """Whose record this map reads and writes now (see the module docstring, "Owners")."""
        if self._owner is not None:
            return self._owner
        return self._writer() or ""

    def _writer(self) -> str | None:
        """The task writing through this map now, if known: the running one, else the bound."""
        return running_task() or self._task

    def _writer_epoch(self) -> int | None:
        """The lease epoch the write carries: the running task's, else the bound one's."""
        return running_epoch() if running_task() is not None else self._epoch

    def _record_keys(self) -> tuple[bytes, bytes]:
        """The Redis keys of the owner's record and of the task that wrote it."""
        owner = self.owner.encode("utf-8")
        return self._prefix + _RECORD + owner, self._prefix + _WRITER + owner

    def __repr__(self) -> str:
        return (
            f"RedisBackingMap(redis={self._address}, prefix={self.prefix!r}, owner={self.owner!r})"
        )

    def close(self) -> None:
        """Close the client if this map made it from a URL."""
        if self._owns_client:
            self._client.close()

    def __enter__(self) -> RedisBackingMap:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def redis_key(self, key: Hashable) -> bytes:
        """The Redis key that holds ``key``'s value (see the module docstring).

        Raises:
            StateSerializationError: ``key`` is a str that is not valid Unicode (a lone
                surrogate), or a value msgpack cannot encode.
        """
        if isinstance(key, str):
            try:
                return self._prefix + key.encode("utf-8")
            except UnicodeEncodeError as exc:
                msg = f"{self!r}: key {key!r} cannot be a Redis key: {exc}"
                raise StateSerializationError(msg) from exc
        return self._prefix + _OTHER_KEY + pack_key(key, f"{self!r}: key {key!r}")

    @contextlib.contextmanager
    def _backend(self, step: str) -> Iterator[None]:
        """Turn a Redis error into an outage or a refusal (``providers.redis.classify_error``)."""
        try:
            yield
        except BACKEND_ERRORS as exc:
            raise backend_error(
                exc,
                address=self._address,
                step=step,
                subject=f"map {self.prefix!r} (owner {self.owner!r})",
                client=self._client,
                settings="the client or URL given to RedisBackingMap",
            ) from exc

    def _decode(self, raw: Any, rkey: bytes) -> Any:
        try:
            return unpack_value(raw)
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            msg = f"{self!r}: Redis key {rkey!r} does not hold msgpack: {raw[:40]!r}"
            raise StateSerializationError(msg) from exc

    def _redis_keys(self, keys: Sequence[Hashable]) -> list[bytes]:
        prefix = self._prefix
        try:  # the common case, every key a str: one comprehension
            return [prefix + key.encode("utf-8") for key in keys]  # type: ignore[attr-defined]
        except (AttributeError, UnicodeEncodeError):
            return [self.redis_key(key) for key in keys]

    def multi_get(self, keys: Sequence[Hashable]) -> list[Any]:
        """The stored value of each key, ``None`` where nothing is stored: one ``MGET``."""
        rkeys = self._redis_keys(keys)
        if not rkeys:
            return []
        with self._backend("multi_get"):
            raws = self._client.mget(rkeys)
        unpack = unpack_value
        try:
            return [None if raw is None else unpack(raw) for raw in raws]
        except (ValueError, TypeError, msgpack.UnpackException):
            # Name the first key that does not hold msgpack.
            return [
                None if raw is None else self._decode(raw, rkey)
                for rkey, raw in zip(rkeys, raws, strict=True)
            ]

    def _packed(self, keys: Sequence[Hashable], values: Sequence[Any]) -> list[bytes | None]:
        pack = value_packer().pack
        try:
            return [None if value is None else pack(value) for value in values]
        except (TypeError, ValueError, OverflowError, RecursionError):
            # Name the first value msgpack refuses (the message is made only now).
            for key, value in zip(keys, values, strict=True):
                if value is not None:
                    pack_value(value, f"{self!r}: the value of key {key!r}")
            raise

    def multi_put(
        self, keys: Sequence[Hashable], values: Sequence[Any], record: Any = None
    ) -> None:
        """Write the values (``None`` deletes) and the record in one atomic script call.

        With the record goes the task writing it, when known (else its last writer is cleared).

        Raises:
            StateFencedError: the write carries a lease epoch below the prefix's fence: another
                driver of the topology took over, and nothing was written.
        """
        if len(keys) != len(values):
            msg = f"multi_put got {len(keys)} keys and {len(values)} values; give one per key"
            raise ValueError(msg)
        rkeys = self._redis_keys(keys)
        packed = self._packed(keys, values)
        last = dict(zip(rkeys, packed, strict=True))  # a key given twice: its last value
        writes = {rkey: data for rkey, data in last.items() if data is not None}
        deletes = [rkey for rkey, data in last.items() if data is None]
        if record is not None:
            record_key, writer_key = self._record_keys()
            writes[record_key] = pack_value(record, f"{self!r}: the record")
            writer = self._writer()
            if writer is None:
                deletes.append(writer_key)
            else:
                writes[writer_key] = writer.encode("utf-8")
        if not writes and not deletes:
            return
        epoch = self._writer_epoch()
        args: list[Any] = ["" if epoch is None else epoch, len(writes), *writes.values()]
        with self._backend("multi_put"):
            reply = self._multi_put(keys=[self._fence_key, *writes, *deletes], args=args)
        if int(reply[0]) == _FENCED and epoch is not None:
            subject = f"map {self.prefix!r} (owner {self.owner!r})"
            raise fenced_error(subject, "multi_put", epoch, int(reply[1]))
        log.debug("map %s: wrote %s keys", self.prefix, len(writes) + len(deletes))

    def get_record(self) -> Any:
        """The record of this map's owner, or ``None``: one ``MGET`` (the record, its writer).

        Raises:
            StateTransactionError: another task of the same owner wrote the record: two tasks
                share one owner, and their records would overwrite each other's.
        """
        record_key, writer_key = self._record_keys()
        with self._backend("get_record"):
            raw, wrote = self._client.mget([record_key, writer_key])
        writer = self._writer()
        if raw is not None and wrote is not None and writer is not None:
            other = wrote.decode("utf-8", "replace") if isinstance(wrote, bytes) else str(wrote)
            if other != writer:
                msg = (
                    f"{self!r}: the record of owner {self.owner!r} was written by task "
                    f"{other} and task {writer} uses it too; two tasks under one owner "
                    "overwrite each other's record, and an opaque replay then restores the "
                    "wrong keys (counts lost or doubled). Give each task its own owner: leave "
                    "owner out (each committer task is then '<component>-<task index>') or "
                    "pass context=context"
                )
                raise StateTransactionError(msg)
        return None if raw is None else self._decode(raw, record_key)
