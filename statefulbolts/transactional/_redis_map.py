"""``RedisBackingMap``: a ``BackingMap`` in Redis; each ``multi_put`` is one Lua script call.

Layout, for a map made with ``prefix`` and ``owner`` (Redis keys are bytes; UTF-8 throughout):

=============================================  ==========================================
Redis key                                      holds
=============================================  ==========================================
``prefix`` + the key, for a ``str`` key        the msgpack of the stored form, a string
``prefix`` + ``0xFF`` + msgpack of the key,    the same
for any other key (int, bytes, tuple, ...)
``prefix`` + ``0xFE`` + ``owner``              the record (``BackingMap.get_record``)
=============================================  ==========================================

The stored form is whatever the map layer hands in: ``[txid, value]`` from ``TransactionalMap``,
``[txid, curr, prev]`` from ``OpaqueMap``. So ``prefix + "cat"`` holds msgpack ``[4, 15]``, and a
``redis-cli GET`` shows a str key's value where one expects it.

The bytes ``0xFE`` and ``0xFF`` never occur in UTF-8, so the three kinds cannot meet: no ``str``
key reaches a non-str key or a record, and a non-str key (after ``0xFF``) never reaches a record
(after ``0xFE``). msgpack has one array type, so a tuple key and the list with the same items are
one key; ``1``, ``1.0``, ``True``, ``"1"`` and ``b"1"`` are five keys.

Maps with one prefix and different owners share their keys and keep separate records: give each
committer task its own owner (for example ``f"{component}-{task}"``). End a prefix with a
separator (``"counts:"``) so that no two prefixes overlap. On Redis Cluster every key of one
``multi_put`` must be in one slot: put a hash tag in the prefix (``"{counts}:"``).

Round trips: ``multi_get`` is one ``MGET``; ``get_record`` one ``GET``; ``multi_put`` one
``EVALSHA`` (the first on a server also loads the script), atomic because Redis runs a script
alone. Connection and server errors raise ``StateBackendError`` naming host:port, the step and
the map.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Hashable, Iterator, Sequence
from typing import Any

import msgpack

from providers.errors import ProviderConfigError, StateBackendError, StateSerializationError
from statefulbolts.transactional._maps import BackingMap, pack_value

try:
    import redis as redis_py
    from redis.exceptions import RedisError
except ImportError as exc:  # pragma: no cover - depends on the environment
    _msg = "RedisBackingMap needs redis-py: pip install 'statefulbolts[redis]'"
    raise ImportError(_msg) from exc

__all__ = ["RedisBackingMap"]

log = logging.getLogger(__name__)

_OTHER_KEY = b"\xff"
_RECORD = b"\xfe"

# PUT. KEYS[1..n] = the Redis keys to write (a record is just one more of them).
# ARGV[i] = the msgpack value for KEYS[i], or the empty string to delete KEYS[i] (msgpack never
# encodes anything as zero bytes). Returns n. Idempotent, so a retry after a dropped connection
# writes the same thing.
_PUT = """
for i = 1, #KEYS do
  if ARGV[i] == '' then
    redis.call('DEL', KEYS[i])
  else
    redis.call('SET', KEYS[i], ARGV[i])
  end
end
return #KEYS
"""


def _address_of(client: Any) -> str:
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
    if "path" in kwargs:
        return f"unix:{kwargs['path']}"
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"


class RedisBackingMap(BackingMap):
    r"""A ``BackingMap`` in Redis, at ``prefix + key`` (see the module docstring for the layout).

    ``url_or_client`` is a URL (``redis://host:port/db``; the map makes a client and ``close()``
    closes it) or a redis-py client made without ``decode_responses`` (the caller keeps it).
    A client does not travel to Spark executors: make the map where it is used, in a
    committer's ``prepare``.

    Example:
        >>> import fakeredis
        >>> client = fakeredis.FakeRedis()
        >>> backing = RedisBackingMap(client, "counts:", owner="count-0")
        >>> backing.multi_put(["cat", 7], [[1, 3], [1, 4]], record=[1, ["cat", 7]])
        >>> backing.multi_get(["cat", 7, "dog"]), backing.get_record()
        ([[1, 3], [1, 4], None], [1, ['cat', 7]])
        >>> sorted(client.keys())
        [b'counts:cat', b'counts:\xfecount-0', b'counts:\xff\x07']
    """

    def __init__(self, url_or_client: str | Any, prefix: str, *, owner: str = "") -> None:
        if not isinstance(prefix, str):
            msg = f"RedisBackingMap: prefix must be a str; got {prefix!r}"
            raise TypeError(msg)
        if not isinstance(owner, str):
            msg = f"RedisBackingMap: owner must be a str; got {owner!r}"
            raise TypeError(msg)
        self._owns_client = isinstance(url_or_client, str)
        if isinstance(url_or_client, str):
            try:
                client = redis_py.Redis.from_url(url_or_client)
            except ValueError as exc:
                msg = (
                    f"RedisBackingMap: {url_or_client!r} is not a Redis URL ({exc}); "
                    "expected redis://host:port/db"
                )
                raise ProviderConfigError(msg) from exc
        else:
            client = url_or_client
        encoder = getattr(client, "get_encoder", None)
        if encoder is not None and encoder().decode_responses:
            msg = "RedisBackingMap needs a client made with decode_responses=False (binary values)"
            raise ProviderConfigError(msg)
        self._client = client
        self.prefix = prefix
        self.owner = owner
        self._prefix = prefix.encode("utf-8")
        self._record_key = self._prefix + _RECORD + owner.encode("utf-8")
        self._address = _address_of(client)
        self._put = client.register_script(_PUT)

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
        return self._prefix + _OTHER_KEY + pack_value(key, f"{self!r}: key {key!r}")

    @contextlib.contextmanager
    def _backend(self, step: str) -> Iterator[None]:
        try:
            yield
        except RedisError as exc:
            if isinstance(exc, redis_py.exceptions.TimeoutError):
                what = "timed out"
            elif isinstance(exc, redis_py.exceptions.ConnectionError):
                what = "could not be reached"
            else:
                what = "failed"
            msg = (
                f"Redis at {self._address} {what} during {step} of map {self.prefix!r} "
                f"(owner {self.owner!r}): {type(exc).__name__}: {exc}"
            )
            raise StateBackendError(msg) from exc

    def _decode(self, raw: Any, rkey: bytes) -> Any:
        try:
            return msgpack.unpackb(raw, raw=False, strict_map_key=False)
        except (ValueError, TypeError, msgpack.UnpackException) as exc:
            msg = f"{self!r}: Redis key {rkey!r} does not hold msgpack: {raw[:40]!r}"
            raise StateSerializationError(msg) from exc

    def multi_get(self, keys: Sequence[Hashable]) -> list[Any]:
        """The stored value of each key, ``None`` where nothing is stored: one ``MGET``."""
        rkeys = [self.redis_key(key) for key in keys]
        if not rkeys:
            return []
        with self._backend("multi_get"):
            raws = self._client.mget(rkeys)
        return [
            None if raw is None else self._decode(raw, rkey)
            for rkey, raw in zip(rkeys, raws, strict=True)
        ]

    def multi_put(
        self, keys: Sequence[Hashable], values: Sequence[Any], record: Any = None
    ) -> None:
        """Write the values (``None`` deletes) and the record in one atomic script call."""
        if len(keys) != len(values):
            msg = f"multi_put got {len(keys)} keys and {len(values)} values; give one per key"
            raise ValueError(msg)
        rkeys = [self.redis_key(key) for key in keys]
        args = [
            b"" if value is None else pack_value(value, f"{self!r}: the value of key {key!r}")
            for key, value in zip(keys, values, strict=True)
        ]
        if record is not None:
            rkeys.append(self._record_key)
            args.append(pack_value(record, f"{self!r}: the record"))
        if not rkeys:
            return
        with self._backend("multi_put"):
            self._put(keys=rkeys, args=args)
        log.debug("map %s: wrote %s keys", self.prefix, len(rkeys))

    def get_record(self) -> Any:
        """The record of this map's owner, or ``None``: one ``GET``."""
        with self._backend("get_record"):
            raw = self._client.get(self._record_key)
        return None if raw is None else self._decode(raw, self._record_key)
