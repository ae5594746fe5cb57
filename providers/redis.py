"""The Redis provider: Storm's ``RedisKeyValueState`` layout with an atomic, idempotent commit.

Select it with ``topology.state.provider = "providers.redis.RedisKeyValueStateProvider"`` and
configure it with ``topology.state.provider.config`` (see ``providers._config``).

Layout per namespace ``ns`` (Storm's):

==============  =====  ==============================================================
key             type   content
==============  =====  ==============================================================
``ns``          hash   committed data: serialized key -> envelope
``ns$prepare``  hash   the prepared delta, tombstones included
``ns$txid``     hash   ``commit``: last committed txid; ``prepare``: the pending prepare;
                       ``rollbacks``: how many rollbacks the namespace had (ours)
==============  =====  ==============================================================

Txids are decimal strings. ``prepare`` is present exactly while a prepare is pending: commit and
rollback remove it (Storm left it behind after a rollback). ``rollbacks`` appears with the first
rollback and is a fence: a state object may prepare only if no rollback happened since it was
loaded (or since its own last rollback), so a task attempt that outlived a failed job, the
ROLLBACK after it and the retry cannot land its stale delta over the retry's. ``commit`` is
``-1`` after a commit without txid (the checkpoint spout's save) on a namespace that never
committed one. On a cluster the namespace is wrapped in a hash tag, ``{ns}``, ``{ns}$prepare``,
``{ns}$txid``, so the three keys share a slot and one script can touch them.

Value envelope: every value in ``ns`` and ``ns$prepare`` is msgpack ``[1, <payload bytes>]``
(present; the payload is the value serializer's output) or ``[0]`` (tombstone, the two bytes
``91 00``). The envelope lets a deletion travel in the prepared delta and keeps the payload
opaque, so any value serializer works. Tombstones never reach the committed hash.

Round trips: a process's first state on a server loads the scripts (one pipelined round trip);
constructing a state is one (a script loads ``ns$txid`` and the prepared delta);
``prepare_commit``, ``commit`` and ``rollback`` are one script each, whatever the number of keys;
``get`` is at most one ``HGET`` per distinct key per state object (hits and misses are cached, and
the cache follows commits). Writes only touch memory until ``prepare_commit``. A state object
assumes it is the only writer of its namespace while it lives, which the checkpoint protocol
guarantees (one task per namespace). Connection pools are shared per process and per config.

Every script is idempotent, so redis-py may retry one after a dropped connection.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import msgpack

from providers._base import StateProvider
from providers._config import RedisClusterEndpoint, RedisEndpoint, parse_provider_config
from providers._config import resolve_serializers as _resolve_serializers
from providers._layered import LayeredKeyValueState
from providers._serializers import Serializer
from providers.errors import (
    ProviderConfigError,
    StateBackendError,
    StateSerializationError,
    StateTransactionError,
)

try:
    import redis as redis_py
    from redis.backoff import ExponentialWithJitterBackoff
    from redis.cluster import ClusterNode, RedisCluster
    from redis.exceptions import RedisClusterException, RedisError
    from redis.retry import Retry
except ImportError as exc:  # pragma: no cover - depends on the environment
    _msg = "the Redis state provider needs redis-py: pip install 'statefulbolts[redis]'"
    raise ImportError(_msg) from exc

__all__ = [
    "TOMBSTONE",
    "RedisKeyValueState",
    "RedisKeyValueStateProvider",
    "override_client",
    "reset_clients",
]

log = logging.getLogger(__name__)

TOMBSTONE: bytes = msgpack.packb([0])
_PRESENT = 1
# Storm's ITERATOR_CHUNK_SIZE: how many fields one HSCAN page asks for.
_SCAN_COUNT = 100
# A couple of quick retries on a dropped connection; Spark retries the task after that.
_RETRIES = 2

_Envelope = bytes


# The envelope of a present value is msgpack [1, bin payload]: fixarray(2), fixint 1, then the
# bin header. It is built by hand below 64 KiB (bin 8 / bin 16, byte for byte what msgpack gives)
# and read by hand below 256 bytes, because it is done once per key crossing the wire; anything
# else goes through msgpack.
_HEAD8 = b"\x92\x01\xc4"
_HEADS8 = [_HEAD8 + bytes((n,)) for n in range(256)]
_HEAD16 = b"\x92\x01\xc5"
_MISSING: Any = object()
# Encoded str keys kept per state object, as the in-memory state does (bounded).
_KEY_CACHE_SIZE = 100_000


def _wrap(payload: bytes) -> _Envelope:
    n = len(payload)
    if n < 0x100:
        return _HEADS8[n] + payload
    if n < 0x10000:
        return _HEAD16 + n.to_bytes(2, "big") + payload
    return msgpack.packb([_PRESENT, payload], use_bin_type=True)


def _wire(writes: Mapping[bytes, bytes | None]) -> Iterator[bytes]:
    """``field, envelope, field, envelope, ...`` for a script's ARGV; None is a tombstone."""
    for ekey, payload in writes.items():
        yield ekey
        yield TOMBSTONE if payload is None else _wrap(payload)


def _unwrap(raw: _Envelope, namespace: str) -> bytes | None:
    """The payload of an envelope, ``None`` for a tombstone."""
    if raw.startswith(_HEAD8) and len(raw) > 3 and raw[3] == len(raw) - 4:
        return raw[4:]
    if raw == TOMBSTONE:
        return None
    try:
        tag, payload = msgpack.unpackb(raw, raw=False)
    except (ValueError, TypeError, msgpack.UnpackException) as exc:
        msg = f"state {namespace!r}: a stored value is not a statefulbolts envelope"
        raise StateSerializationError(msg) from exc
    if tag != _PRESENT or not isinstance(payload, bytes):
        msg = f"state {namespace!r}: a stored value has an unknown envelope tag {tag!r}"
        raise StateSerializationError(msg)
    return payload


# --- Lua scripts ---------------------------------------------------------------------------
# Shared by the write scripts: apply field/value pairs to a hash, HDEL for tombstones, HSET for
# the rest, in slices small enough for Lua's unpack() limit.
_APPLY = """
local function apply(hash, tombstone, kv, first)
  local sets, dels = {}, {}
  for i = first, #kv, 2 do
    if kv[i + 1] == tombstone then
      dels[#dels + 1] = kv[i]
    else
      sets[#sets + 1] = kv[i]
      sets[#sets + 1] = kv[i + 1]
    end
  end
  for i = 1, #sets, 1000 do
    redis.call('HSET', hash, unpack(sets, i, math.min(i + 999, #sets)))
  end
  for i = 1, #dels, 1000 do
    redis.call('HDEL', hash, unpack(dels, i, math.min(i + 999, #dels)))
  end
end
"""

# LOAD. KEYS[1] = ns$prepare, KEYS[2] = ns$txid. No ARGV.
# Returns {HGETALL ns$txid, HGETALL ns$prepare} as flat field/value lists.
_LOAD = """
return {redis.call('HGETALL', KEYS[2]), redis.call('HGETALL', KEYS[1])}
"""

# PREPARE. KEYS[1] = ns$prepare, KEYS[2] = ns$txid.
# ARGV[1] = txid (decimal), ARGV[2] = '1' to replace a delta of the same txid, '0' to merge,
# ARGV[3] = the rollbacks count the state saw (decimal),
# ARGV[4..] = field, envelope, field, envelope, ... (tombstones kept).
# Returns {0, previous prepare txid or ''} when prepared,
#         {1, prepared txid, committed txid or ''} when another txid is prepared,
#         {2, '', committed txid} when txid <= the committed txid,
#         {3, rollbacks} when the namespace was rolled back since the state saw ARGV[3].
# A fresh prepare first drops any delta not owned by a prepare txid; the same txid again merges
# (HSET over the old delta: newer wins) or, with ARGV[2] = '1' (a new task attempt superseding a
# lost one), replaces it. Idempotent for the same arguments.
_PREPARE = """
local txid = tonumber(ARGV[1])
local t = redis.call('HMGET', KEYS[2], 'rollbacks', 'prepare', 'commit')
local r, p, c = t[1] or '0', t[2], t[3]
if r ~= ARGV[3] then return {3, r} end
if p and tonumber(p) ~= txid then return {1, p, c or ''} end
if c and txid <= tonumber(c) then return {2, p or '', c} end
if not p or ARGV[2] == '1' then redis.call('DEL', KEYS[1]) end
for i = 4, #ARGV, 1000 do
  redis.call('HSET', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
redis.call('HSET', KEYS[2], 'prepare', ARGV[1])
return {0, p or ''}
"""

# COMMIT. KEYS[1] = ns, KEYS[2] = ns$prepare, KEYS[3] = ns$txid.
# ARGV[1] = txid (decimal), ARGV[2] = the tombstone envelope.
# Returns {0} when the delta of txid was applied (HSET values, HDEL tombstones, DEL ns$prepare,
#         commit = txid, prepare removed), all in this one atomic step,
#         {1} when nothing is prepared and txid is already committed (a retried COMMIT: no-op),
#         {2, prepared txid or '', committed txid or ''} otherwise (nothing written).
_COMMIT = (
    _APPLY
    + """
local p = redis.call('HGET', KEYS[3], 'prepare')
local c = redis.call('HGET', KEYS[3], 'commit')
if p and tonumber(p) == tonumber(ARGV[1]) then
  apply(KEYS[1], ARGV[2], redis.call('HGETALL', KEYS[2]), 1)
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[3], 'commit', ARGV[1])
  redis.call('HDEL', KEYS[3], 'prepare')
  return {0}
end
if not p and c and tonumber(c) == tonumber(ARGV[1]) then return {1} end
return {2, p or '', c or ''}
"""
)

# COMMIT WITHOUT TXID (the checkpoint spout's save). KEYS[1] = ns, KEYS[2] = ns$txid.
# ARGV[1] = the tombstone envelope, ARGV[2..] = field, envelope, ... (the pending writes).
# Writes the values, HDELs the tombstones, sets commit = -1 if no commit was recorded yet, leaves
# any pending prepare alone. Returns the committed txid (decimal).
_COMMIT_WRITES = (
    _APPLY
    + """
apply(KEYS[1], ARGV[1], ARGV, 2)
redis.call('HSETNX', KEYS[2], 'commit', '-1')
return redis.call('HGET', KEYS[2], 'commit')
"""
)

# ROLLBACK. KEYS[1] = ns$prepare, KEYS[2] = ns$txid. No ARGV.
# Drops the prepared delta and the prepare txid, and counts the rollback (the fence of PREPARE).
# Returns {committed txid or '', rollbacks}.
_ROLLBACK = """
redis.call('DEL', KEYS[1])
redis.call('HDEL', KEYS[2], 'prepare')
local r = redis.call('HINCRBY', KEYS[2], 'rollbacks', 1)
return {redis.call('HGET', KEYS[2], 'commit') or '', r}
"""


_SCRIPTS = (_LOAD, _PREPARE, _COMMIT, _COMMIT_WRITES, _ROLLBACK)


def _txid(raw: Any) -> int | None:
    if raw is None or raw in (b"", ""):
        return None
    return int(raw)


# --- connections ---------------------------------------------------------------------------
_Endpoint = RedisEndpoint | RedisClusterEndpoint
_clients: dict[tuple[int, _Endpoint], Any] = {}
_clients_lock = threading.Lock()
_override: list[Any] = []


def _retry() -> Retry:
    return Retry(ExponentialWithJitterBackoff(cap=0.5, base=0.05), _RETRIES)


def make_client(endpoint: _Endpoint) -> Any:
    """A new redis-py client (``Redis`` or ``RedisCluster``) for an endpoint; the caller closes it.

    States share pooled clients per process; tools that read a provider's keys (``checkpoint
    status``) use this to connect exactly as the provider does.
    """
    password = endpoint.password.get_secret_value() if endpoint.password else None
    if isinstance(endpoint, RedisClusterEndpoint):
        cluster = RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in endpoint.nodes],
            password=password,
            socket_timeout=endpoint.timeout_s,
            socket_connect_timeout=endpoint.timeout_s,
            retry=_retry(),
        )
        # Jedis' maxRedirections: how many MOVED / ASK hops one command may take.
        cluster.RedisClusterRequestTTL = endpoint.max_redirections
        return cluster
    return redis_py.Redis(
        host=endpoint.host,
        port=endpoint.port,
        db=endpoint.database,
        username=endpoint.username,
        password=password,
        ssl=endpoint.ssl,
        socket_timeout=endpoint.timeout_s,
        socket_connect_timeout=endpoint.timeout_s,
        retry=_retry(),
    )


def _backend_error(address: str, step: str, namespace: str, exc: Exception) -> StateBackendError:
    """The error a person can act on: where Redis is, what we were doing, for which state."""
    if isinstance(exc, redis_py.exceptions.TimeoutError):
        what = "timed out"
    elif isinstance(exc, redis_py.exceptions.ConnectionError):
        what = "could not be reached"
    else:
        what = "failed"
    msg = (
        f"Redis at {address} {what} during {step} of state {namespace!r}: "
        f"{type(exc).__name__}: {exc}"
    )
    return StateBackendError(msg)


def _preload(client: Any) -> None:
    """Load every script once per new client, so a first prepare is not sent twice (NOSCRIPT)."""
    if isinstance(client, RedisCluster):
        for source in _SCRIPTS:
            client.script_load(source)
        return
    pipe = client.pipeline(transaction=False)
    for source in _SCRIPTS:
        pipe.script_load(source)
    pipe.execute()


def _client_for(endpoint: _Endpoint, namespace: str) -> Any:
    """This process's client (and so connection pool) for ``endpoint``, made once."""
    key = (os.getpid(), endpoint)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            log.info(
                "opening a Redis connection pool to %s for process %s", endpoint.address, key[0]
            )
            made = None
            try:
                made = make_client(endpoint)
                _preload(made)
            except (RedisError, RedisClusterException) as exc:
                if made is not None:
                    made.close()
                raise _backend_error(endpoint.address, "connect", namespace, exc) from exc
            client = _clients[key] = made
        return client


@contextlib.contextmanager
def override_client(client: Any) -> Iterator[Any]:
    """Make every Redis state made in this process use ``client`` while the block runs.

    For tests: hand in a ``fakeredis.FakeRedis()`` (needs ``lupa`` for the scripts) or a client
    built on an instrumented connection. Overrides nest; the config's connection settings are
    ignored inside, its serializer settings are not.
    """
    _override.append(client)
    try:
        yield client
    finally:
        _override.remove(client)


def reset_clients() -> None:
    """Close and forget this process's cached clients (tests, or after a config change)."""
    with _clients_lock:
        clients = list(_clients.values())
        _clients.clear()
    for client in clients:
        client.close()


def _address_of(client: Any) -> str:
    if isinstance(client, RedisCluster):
        return ",".join(node.name for node in client.get_nodes()) or "a Redis cluster"
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"


# --- the state -----------------------------------------------------------------------------
class RedisKeyValueState(LayeredKeyValueState):
    """A ``KeyValueState`` in Redis, with the same contract as ``InMemoryKeyValueState``.

    Example:
        >>> import fakeredis
        >>> state = RedisKeyValueState("demo/counter-0", fakeredis.FakeRedis())
        >>> state.put("storm", 1)
        >>> state.prepare_commit(0)
        >>> state.commit(0)
        >>> state.get("storm")
        1
    """

    def __init__(
        self,
        namespace: str,
        client: Any,
        key_serializer: Serializer | None = None,
        value_serializer: Serializer | None = None,
        *,
        address: str | None = None,
    ) -> None:
        encoder = getattr(client, "get_encoder", None)
        if encoder is not None and encoder().decode_responses:
            msg = "the Redis state needs a client made with decode_responses=False (binary values)"
            raise ProviderConfigError(msg)
        super().__init__(namespace, key_serializer, value_serializer)
        self._client = client
        self._address = address or _address_of(client)
        base = f"{{{namespace}}}" if isinstance(client, RedisCluster) else namespace
        self.committed_key = base
        self.prepare_key = f"{base}$prepare"
        self.txid_key = f"{base}$txid"
        self._load_script = client.register_script(_LOAD)
        self._prepare_script = client.register_script(_PREPARE)
        self._commit_script = client.register_script(_COMMIT)
        self._commit_writes_script = client.register_script(_COMMIT_WRITES)
        self._rollback_script = client.register_script(_ROLLBACK)
        # Below _pending (writes since the last prepare, see LayeredKeyValueState): the prepared
        # delta as Redis holds it; committed reads. All three hold payloads (the value
        # serializer's bytes), None for a deletion (pending, prepared) or a missing key (cache):
        # envelopes exist only on the wire, so a get or a put never packs or unpacks one.
        self._prepared: dict[bytes, bytes | None] = {}
        self._cache: dict[bytes, bytes | None] = {}
        self._committed_txid: int | None = None
        self._prepared_txid: int | None = None
        # Set by supersede_prepared until the next prepare: that prepare replaces the stored delta.
        self._superseding = False
        # The namespace's rollback count when this object last looked (the fence of prepare).
        self._rollbacks = b"0"
        self._load()

    def __repr__(self) -> str:
        return (
            f"RedisKeyValueState(namespace={self.namespace!r}, redis={self._address}, "
            f"committed_txid={self._committed_txid}, prepared_txid={self._prepared_txid})"
        )

    @property
    def committed_txid(self) -> int | None:
        """The txid of the last commit, or ``None`` when nothing was committed."""
        return self._committed_txid

    @property
    def prepared_txid(self) -> int | None:
        """The txid of the pending prepare, or ``None``."""
        return self._prepared_txid

    # -- talking to Redis
    @contextlib.contextmanager
    def _backend(self, step: str) -> Iterator[None]:
        try:
            yield
        except (RedisError, RedisClusterException) as exc:
            raise _backend_error(self._address, step, self.namespace, exc) from exc

    def _load(self) -> None:
        with self._backend("load"):
            txids, delta = self._load_script(keys=[self.prepare_key, self.txid_key])
        fields = dict(zip(txids[::2], txids[1::2], strict=True))
        self._committed_txid = _txid(fields.get(b"commit"))
        self._prepared_txid = _txid(fields.get(b"prepare"))
        self._rollbacks = fields.get(b"rollbacks", b"0")
        if self._prepared_txid is not None:
            ns = self.namespace
            self._prepared = {
                k: _unwrap(v, ns) for k, v in zip(delta[::2], delta[1::2], strict=True)
            }

    # -- encoding
    def _encode_key(self, key: Any) -> bytes:
        plain = type(key) is str
        if plain:
            cached = self._key_cache.get(key)
            if cached is not None:
                return cached
        try:
            ekey = self._keys.serialize(key)
        except StateSerializationError as exc:
            msg = f"state {self.namespace!r}: key {key!r} cannot be stored: {exc}"
            raise StateSerializationError(msg) from exc
        if plain and len(self._key_cache) < _KEY_CACHE_SIZE:
            self._key_cache[key] = ekey
        return ekey

    def _decode(self, payload: bytes | None) -> Any:
        return None if payload is None else self._values.deserialize(payload)

    def _lookup(self, ekey: bytes) -> bytes | None:
        """The payload: pending, then prepared, then committed (cached, one HGET per key)."""
        payload = self._pending.get(ekey, _MISSING)
        if payload is _MISSING:
            payload = self._prepared.get(ekey, _MISSING)
            if payload is _MISSING:
                payload = self._cache.get(ekey, _MISSING)
                if payload is _MISSING:
                    with self._backend("get"):
                        raw = self._client.hget(self.committed_key, ekey)
                    payload = None if raw is None else _unwrap(raw, self.namespace)
                    self._cache[ekey] = payload
        return payload

    # -- the map (put and delete: LayeredKeyValueState)
    def get(self, key: Any, default: Any = None) -> Any:
        """Return the value of ``key`` or ``default``."""
        # The fresh layer, written out as LayeredKeyValueState asks.
        if type(key) is str:
            value = self._fresh.get(key)
            if value is not None:
                return value
        elif self._fresh:
            self._flush()
        payload = self._lookup(self._encode_key(key))
        if payload is None:
            return default
        value = self._values.deserialize(payload)
        return default if value is None else value

    def _delete_stored(self, key: Any) -> Any:
        ekey = self._encode_key(key)
        old = self._decode(self._lookup(ekey))
        self._pending[ekey] = None
        return old

    def __iter__(self) -> Iterator[tuple[Any, Any]]:
        """Pending writes, then the prepared delta, then ``HSCAN`` of committed; each key once."""
        self._flush()
        seen: set[bytes] = set()
        for layer in (dict(self._pending), dict(self._prepared)):
            for ekey, payload in layer.items():
                if ekey not in seen:
                    seen.add(ekey)
                    if payload is not None:
                        yield self._keys.deserialize(ekey), self._decode(payload)
        cursor = 0
        while True:
            with self._backend("iteration"):
                cursor, page = self._client.hscan(self.committed_key, cursor, count=_SCAN_COUNT)
            for ekey, raw in page.items():
                if ekey not in seen:
                    seen.add(ekey)
                    payload = _unwrap(raw, self.namespace)
                    self._cache.setdefault(ekey, payload)
                    yield self._keys.deserialize(ekey), self._decode(payload)
            if not cursor:
                return

    def __len__(self) -> int:
        return sum(1 for _ in self)

    # -- the transaction
    def prepare_commit(self, txid: int) -> None:
        """Move pending writes into the prepared delta of ``txid`` (one script call).

        Re-preparing the same txid adds the newer writes (newer wins). Preparing another txid
        while one is prepared, a txid at or below the committed one, or anything after another
        state object rolled the namespace back since this one was loaded, raises
        ``StateTransactionError`` and keeps the pending writes.
        """
        self._flush()
        mode = "1" if self._superseding else "0"
        args: list[Any] = [str(int(txid)), mode, self._rollbacks, *_wire(self._pending)]
        with self._backend(f"prepare of txid {txid}"):
            reply = self._prepare_script(keys=[self.prepare_key, self.txid_key], args=args)
        code = int(reply[0])
        if code == 3:
            msg = (
                f"state {self.namespace!r}: cannot prepare txid {txid}: the namespace was rolled "
                f"back since this state was loaded (rollback count {int(self._rollbacks)} -> "
                f"{int(reply[1])}); a task attempt that outlived its transaction must not write"
            )
            raise StateTransactionError(msg)
        if code == 1:
            self._prepared_txid, self._committed_txid = _txid(reply[1]), _txid(reply[2])
            msg = (
                f"state {self.namespace!r}: cannot prepare txid {txid} while txid "
                f"{self._prepared_txid} is prepared and not committed"
            )
            raise StateTransactionError(msg)
        if code == 2:
            self._committed_txid = _txid(reply[2])
            msg = (
                f"state {self.namespace!r}: cannot prepare txid {txid}; txid "
                f"{self._committed_txid} is already committed"
            )
            raise StateTransactionError(msg)
        if _txid(reply[1]) is None or self._superseding:
            self._prepared = {}
            self._superseding = False
        self._prepared.update(self._pending)
        log.debug(
            "state %s: prepared txid %s (%s writes)", self.namespace, txid, len(self._pending)
        )
        self._pending = {}
        self._prepared_txid = int(txid)

    def commit(self, txid: int | None = None) -> None:
        """Commit the prepared delta of ``txid`` atomically; the committed txid again is a no-op.

        Without ``txid``, commit the pending writes at once (the checkpoint spout's save).

        Steps (one Lua script, so Redis applies all or nothing):
            1. Check ``ns$txid``: ``prepare`` must equal ``txid``; or nothing is prepared and
               ``commit`` equals ``txid`` (a retried COMMIT: stop, nothing to do).
            2. Apply ``ns$prepare`` to ``ns``: HSET values, HDEL tombstones.
            3. DEL ``ns$prepare``; set ``commit`` to ``txid``; remove ``prepare``.
        """
        if txid is None:
            self._commit_writes()
            return
        with self._backend(f"commit of txid {txid}"):
            reply = self._commit_script(
                keys=[self.committed_key, self.prepare_key, self.txid_key],
                args=[str(int(txid)), TOMBSTONE],
            )
        code = int(reply[0])
        if code == 2:
            self._prepared_txid, self._committed_txid = _txid(reply[1]), _txid(reply[2])
            msg = (
                f"state {self.namespace!r}: cannot commit txid {txid}; prepared txid is "
                f"{self._prepared_txid}, committed txid is {self._committed_txid}"
            )
            raise StateTransactionError(msg)
        if code == 0:
            if self._superseding:
                # The delta applied is one this object never read: what it cached may be stale.
                self._cache = {}
                self._superseding = False
            self._remember(self._prepared)
            log.debug("state %s: committed txid %s", self.namespace, txid)
        self._prepared = {}
        self._prepared_txid = None
        self._committed_txid = int(txid)

    def _commit_writes(self) -> None:
        self._flush()
        args: list[Any] = [TOMBSTONE, *_wire(self._pending)]
        with self._backend("commit"):
            committed = self._commit_writes_script(
                keys=[self.committed_key, self.txid_key], args=args
            )
        self._remember(self._pending)
        self._pending = {}
        self._committed_txid = _txid(committed)

    def _remember(self, applied: Mapping[bytes, bytes | None]) -> None:
        """Keep the read cache equal to Redis after ``applied`` reached the committed hash."""
        self._cache.update(applied)

    def supersede_prepared(self, txid: int) -> None:
        """Read past a stored delta of ``txid``; the next prepare replaces it (see ``State``).

        Nothing is sent now: the old delta goes in the same script call as the new one, so an
        attempt killed in between leaves the other attempt's delta in place.
        """
        # Also with nothing prepared at load: a concurrent attempt may prepare meanwhile.
        if self._prepared_txid in (None, int(txid)):
            self._prepared = {}
            self._superseding = True

    def rollback(self) -> None:
        """Drop pending writes, the prepared delta and the prepare txid; count the rollback.

        One script call. States of this namespace loaded before it can no longer prepare.
        """
        with self._backend("rollback"):
            committed, rollbacks = self._rollback_script(keys=[self.prepare_key, self.txid_key])
        self._rollbacks = str(int(rollbacks)).encode()
        self._pending, self._fresh = {}, {}
        self._superseding = False
        self._prepared = {}
        self._prepared_txid = None
        self._committed_txid = _txid(committed)


class RedisKeyValueStateProvider(StateProvider):
    """Makes ``RedisKeyValueState`` objects from ``topology.state.provider.config``."""

    def new_state(
        self, namespace: str, conf: Mapping[str, Any], context: Any | None = None
    ) -> RedisKeyValueState:
        """Return the state of ``namespace``: its committed data and any pending prepare.

        Raises:
            ProviderConfigError: the provider config is invalid.
            StateBackendError: Redis could not be reached (names host, port and namespace).
        """
        config = parse_provider_config(conf)
        keys, values = _resolve_serializers(config, conf)
        if _override:
            client = _override[-1]
            return RedisKeyValueState(namespace, client, keys, values)
        endpoint = config.redis_endpoint()
        client = _client_for(endpoint, namespace)
        return RedisKeyValueState(namespace, client, keys, values, address=endpoint.address)
