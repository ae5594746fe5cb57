"""``RedisSink``: a topology's records written to Redis exactly once, with the checkpoint.

``ExactlyOnceSinkBolt`` stages each transaction's records in its state and, when the
transaction commits, hands each lane's records (one lane per sink task, ``Lane``) to
``RedisSink.publish``, which sends them to Redis in ONE Lua script (``PUBLISH``, below) together
with the lane's *marker*: a field of the marker hash holding the last txid published, and one
beside it holding the lease epoch of the driver that published it. Redis runs a script alone,
start to end, so the script's read of the marker, its writes and its move of the marker are
one atomic step: a commit re-run after any crash finds the marker at its txid and writes
nothing, and a publish of a driver that was taken over finds a newer epoch and is refused.

Records: a ``mapper`` function of the tuple returns one record, a list of them, or ``None``
(nothing), each a Redis command of one key:

===============================  ====================================================
record                           what the publish runs
===============================  ====================================================
``HSet(key, field, value)``      ``HSET key field value``
``HIncrBy(key, field, amount)``  ``HINCRBY key field amount``
``ZAdd(key, member, score)``     ``ZADD key score member``
``XAdd(key, fields)``            ``XADD key * field value ... statefulbolts.txid <t>``
``SetValue(key, value)``         ``SET key value``
===============================  ====================================================

``HINCRBY`` is not idempotent: run twice, it adds twice. Here that cannot happen, because the
marker, not the command, decides whether a transaction's records are written: they are written
in the script that moves the marker past their txid, and never by a script that finds it there.
So a word count may publish each transaction's deltas as increments and the hash holds the
exact counts. ``XADD`` is the same (each entry appended once), and each entry carries the txid
of the transaction that made it (``txid_field``, ``None`` to leave it out).

Values are serialized in ``stage`` (in the PREPARE, so a bad value fails the tuple that carries
it): ``bytes`` as they are, ``str`` as UTF-8, numbers as their decimal text; anything else
needs ``value_serializer="json"`` (or ``"msgpack"``, or a function returning bytes).

All or nothing: Redis does not undo what a script wrote before an error, so the script checks
everything that could fail first (each key's type against its command, each ``HINCRBY``
field's value is an integer) and writes only when all is well; a refusal writes nothing and
raises ``RedisSinkRefusedError`` naming the key. Redis checks ``maxmemory`` at a script's first
write only, so a full server refuses the script before it writes anything.

One script per lane and COMMIT: its size is that of the lane's records of the transactions it
publishes, and Redis serves no other command while it runs. Keep a transaction's records per
sink task to what Redis can take in one command (``proto-max-bulk-len``, the client query
buffer) and run in well under its busy-script time.

Redis Cluster: every key a script touches must hash to one slot. The sink refuses (before
sending anything) a record whose key's slot is not the marker key's, naming both; give every
key and the marker key one hash tag: a ``key_prefix`` such as ``{counts}:`` does it for all
of them. A single server (the tested case) takes any keys.

Settings: arguments win over keys. ``url`` (or ``host``/``port``/``db``), else
``sink.redis.url``, else ``redis://localhost:6379/0``; ``key_prefix``, else
``sink.redis.key.prefix``, else none: put before every record's key and the default marker
key (a namespace per topology or environment, a cluster's hash tag); ``marker_key``, else
``sink.redis.marker.key``, else ``<prefix>statefulbolts:sink:<topology>:<component>``. The
marker hash's fields are ``<topology>.<component>.<task>of<parallelism>`` (the lane,
qualified) and that with ``:epoch``, so one hash can hold the markers of several sinks.

Faults: Redis away or busy is an outage (``StateBackendError``, waited out as a state store's,
``topology.state.backend.timeout.secs``); a refusal (a wrong password, out of memory) stops
the topology (``StateBackendRefusedError``). redis-py may send a script again after a dropped
connection: the second run finds the marker moved and writes nothing.

Example:
    >>> sink = RedisSink(mapper=lambda t: HSet("counts", t.values[0], t.values[1]))
    >>> from statefulbolts.testing import make_tuple
    >>> sink.stage(make_tuple(["storm", 3], fields=["word", "count"]))
    [['H', b'counts', b'storm', b'3']]
    >>> def counted(tuple_):
    ...     word, delta = tuple_.values
    ...     return [HIncrBy("counts", word, delta), XAdd("updates", {"word": word, "n": delta})]
    >>> RedisSink(mapper=counted).stage(make_tuple(["storm", 2], fields=["word", "delta"]))
    [['I', b'counts', b'storm', 2], ['X', b'updates', [b'word', b'storm', b'n', b'2']]]

Needs redis-py: ``pip install 'statefulbolts[redis]'``.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, NamedTuple

import msgpack
from pydantic import Field, SecretStr

from statefulbolts.connectors.redis._connection import (
    DEFAULT_URL,
    RedisConnectorConfig,
    backend_errors,
    connect,
    raise_backend_errors,
    require_redis,
    text,
)
from statefulbolts.connectors.sinks import (
    Lane,
    PublishResult,
    Sink,
    SinkConfigError,
    SinkFencedError,
    SinkMarkerError,
    SinkPublishError,
    SinkStageError,
    StagedBatch,
)
from statefulbolts.errors import ConfigError

if TYPE_CHECKING:
    from statefulbolts.context import TopologyContext
    from statefulbolts.tuples import Tuple

__all__ = [
    "PUBLISH",
    "SINK_MARKER_KEY",
    "SINK_PREFIX_KEY",
    "SINK_URL_KEY",
    "TXID_FIELD",
    "HIncrBy",
    "HSet",
    "RedisSink",
    "RedisSinkConfig",
    "RedisSinkRefusedError",
    "SetValue",
    "XAdd",
    "ZAdd",
]

log = logging.getLogger(__name__)

SINK_URL_KEY: Final = "sink.redis.url"
SINK_MARKER_KEY: Final = "sink.redis.marker.key"
SINK_PREFIX_KEY: Final = "sink.redis.key.prefix"
TXID_FIELD: Final = "statefulbolts.txid"
_NAME = "RedisSink"
_EPOCH_SUFFIX = ":epoch"


# ------------------------------------------------------------------ the script
# PUBLISH. KEYS[1] = the marker hash; KEYS[2..] = the records' keys, each once.
# ARGV[1] = the lane's marker field (``<topology>.<component>.<lane>``; its epoch is that field
#           with ':epoch'), ARGV[2] = txid (decimal), ARGV[3] = the publisher's lease epoch
#           ('' for none: never refused, and the stored epoch is left as it is),
# ARGV[4] = the field XADD adds with a record's txid ('' for none),
# ARGV[5] = B, the number of batches, then B pairs: a batch's txid, its number of records,
# then the records of every batch in order, each: its command letter, the index of its key in
# KEYS, and its arguments:
#   'H' field value | 'I' field amount | 'Z' score member | 'S' value | 'X' n f1 v1 .. fn vn.
# Returns {'fenced', stored epoch} when ARGV[3] is below the stored epoch (nothing written),
#         {'already', marker} when the marker is at ARGV[2] or above (nothing written),
#         {'refused', key, what} when a write would fail (nothing written),
#         {'published', marker before or '', records written, txid, txid, ...} otherwise:
#         the records of the batches above the marker written in order, the marker set to
#         ARGV[2] and the epoch raised to ARGV[3], all in this one run.
# Checks come first and the writes after them, in two passes over the records: Redis keeps
# what a script wrote before an error, so a run that writes must not fail. The first pass
# follows each key's type (and each HINCRBY field's value) as the writes before it would
# leave them, so a key written twice in one run is judged as it will be.
PUBLISH: Final = """
local field, epoch = ARGV[1], ARGV[3]
local stored = redis.call('HMGET', KEYS[1], field, field .. ':epoch')
local marker, fence = stored[1], stored[2]
if epoch ~= '' and fence and tonumber(fence) > tonumber(epoch) then
  return {'fenced', fence}
end
if marker and tonumber(marker) >= tonumber(ARGV[2]) then return {'already', marker} end
local nb = tonumber(ARGV[5])
local batches, first = {}, 6 + 2 * nb
for b = 1, nb do
  local t = tonumber(ARGV[4 + 2 * b])
  batches[b] = {t, tonumber(ARGV[5 + 2 * b]), (not marker or t > tonumber(marker))}
end
local wants = {H = 'hash', I = 'hash', Z = 'zset', X = 'stream'}
local commands = {H = 'HSET', I = 'HINCRBY', Z = 'ZADD', X = 'XADD'}
-- Walks the records of the due batches, calling visit(command, key, i, txid), i the index
-- of the command letter in ARGV; returns how many it visited.
local function walk(visit)
  local i, count = first, 0
  for b = 1, nb do
    for _ = 1, batches[b][2] do
      local op, key = ARGV[i], KEYS[tonumber(ARGV[i + 1])]
      if batches[b][3] then
        local refused = visit(op, key, i, batches[b][1])
        if refused then return nil, refused end
        count = count + 1
      end
      if op == 'X' then i = i + 3 + 2 * tonumber(ARGV[i + 2]) else i = i + 4 end
    end
  end
  return count
end
local types, ints = {}, {}
-- ints: a hash field's value as the writes before would leave it, a number, or false when it
-- holds no integer (HINCRBY would fail); nil: as stored.
local function integer(value)
  if value == '0' or string.match(value, '^%-?[1-9]%d*$') then return tonumber(value) end
  return false
end
local _, refused = walk(function(op, key, i)
  local now = types[key] or redis.call('TYPE', key)['ok']
  local want = wants[op]
  if want and now ~= 'none' and now ~= want then
    return {'refused', key, commands[op] .. ' needs a ' .. want .. ', the key holds a ' .. now}
  end
  if op == 'I' then
    local slot = key .. '\\0' .. ARGV[i + 2]
    local value = ints[slot]
    if value == nil then
      local held = redis.call('HGET', key, ARGV[i + 2])
      value = held and integer(held) or (not held and 0)
    end
    if value == false then
      return {'refused', key, 'HINCRBY of field ' .. ARGV[i + 2] .. ', which holds no integer'}
    end
    value = value + tonumber(ARGV[i + 3])
    -- Redis refuses a sum beyond 64 bits; doubles are exact to far less than this margin.
    if math.abs(value) > 9.2e18 then
      return {'refused', key, 'HINCRBY of field ' .. ARGV[i + 2] .. ' would pass 64 bits'}
    end
    ints[slot] = value
  elseif op == 'H' then
    ints[key .. '\\0' .. ARGV[i + 2]] = integer(ARGV[i + 3])
  end
  types[key] = want or 'string'
end)
if refused then return refused end
local written, txid_field = walk(function(op, key, i, t)
  if op == 'H' then
    redis.call('HSET', key, ARGV[i + 2], ARGV[i + 3])
  elseif op == 'I' then
    redis.call('HINCRBY', key, ARGV[i + 2], ARGV[i + 3])
  elseif op == 'Z' then
    redis.call('ZADD', key, ARGV[i + 2], ARGV[i + 3])
  elseif op == 'S' then
    redis.call('SET', key, ARGV[i + 2])
  else
    local n = tonumber(ARGV[i + 2])
    local entry = {key, '*'}
    for j = 1, 2 * n do entry[#entry + 1] = ARGV[i + 2 + j] end
    if ARGV[4] ~= '' then
      entry[#entry + 1] = ARGV[4]
      entry[#entry + 1] = tostring(t)
    end
    redis.call('XADD', unpack(entry))
  end
end)
redis.call('HSET', KEYS[1], field, ARGV[2])
if epoch ~= '' and (not fence or tonumber(fence) < tonumber(epoch)) then
  redis.call('HSET', KEYS[1], field .. ':epoch', epoch)
end
local reply = {'published', marker or '', written}
for b = 1, nb do
  if batches[b][3] then reply[#reply + 1] = tostring(batches[b][1]) end
end
return reply
"""


# ------------------------------------------------------------------ records
class HSet(NamedTuple):
    """``HSET key field value``: set a field of a hash (idempotent)."""

    key: Any
    field: Any
    value: Any


class HIncrBy(NamedTuple):
    """``HINCRBY key field amount``: add to a field of a hash (once per transaction: the marker)."""

    key: Any
    field: Any
    amount: int


class ZAdd(NamedTuple):
    """``ZADD key score member``: set a member's score in a sorted set (idempotent)."""

    key: Any
    member: Any
    score: float


class XAdd(NamedTuple):
    """``XADD key * field value ...``: append an entry to a stream, with its txid field."""

    key: Any
    fields: Mapping[Any, Any]


class SetValue(NamedTuple):
    """``SET key value``: set a string key (idempotent)."""

    key: Any
    value: Any


RedisRecord = HSet | HIncrBy | ZAdd | XAdd | SetValue


class RedisSinkRefusedError(SinkPublishError):
    """A publish the script refused before writing: a key of another type, a field not an int."""


# ------------------------------------------------------------------ settings
class RedisSinkConfig(RedisConnectorConfig):
    """The ``sink.redis.*`` keys ``RedisSink`` reads; its arguments win over them.

    Example:
        >>> RedisSinkConfig.from_conf({SINK_MARKER_KEY: "{c}:markers"}, who="doc").marker_key
        '{c}:markers'
    """

    url: SecretStr | None = Field(
        None,
        alias=SINK_URL_KEY,
        description=(
            "`RedisSink`: the Redis server, `redis://[[user]:password@]host[:port][/db]` "
            "(`rediss://` for TLS), when no URL or host is given as an argument (never printed)."
        ),
        json_schema_extra={"shown_default": f"`{DEFAULT_URL}`"},
    )
    marker_key: str | None = Field(
        None,
        alias=SINK_MARKER_KEY,
        min_length=1,
        description=(
            "`RedisSink`: the hash holding each lane's marker (field "
            "`<topology>.<component>.<task>of<parallelism>`) and its lease epoch (that field "
            "with `:epoch`). On a Redis Cluster give it the hash tag of the records' keys."
        ),
        json_schema_extra={"shown_default": "`<prefix>statefulbolts:sink:<topology>:<component>`"},
    )
    key_prefix: str | None = Field(
        None,
        alias=SINK_PREFIX_KEY,
        description=(
            "`RedisSink`: put before every record's key and the default marker key: a "
            "namespace (`wc:`), and on a Redis Cluster the hash tag that keeps them in one slot "
            "(`{wc}:`)."
        ),
        json_schema_extra={"shown_default": "none"},
    )


class _Settings(NamedTuple):
    target: str | dict[str, Any]  # a URL or redisConfig fields, for the connection layer
    address: str  # host:port, for messages (never a password)
    marker_key: str | None  # None: the default, per lane's topology and component
    prefix: bytes  # before every record's key (and the default marker key)


# ------------------------------------------------------------------ the sink
class RedisSink(Sink):
    """Records of a sink bolt's tuples, written to Redis exactly once (module docstring).

    Args:
        mapper: a function of the tuple returning a record (``HSet``, ``HIncrBy``, ``ZAdd``,
            ``XAdd``, ``SetValue``), a list of records, or ``None`` (nothing). Module-level,
            so it pickles.
        url: ``redis://...`` (else ``host``/``port``/``db``, else ``sink.redis.url``, else
            ``redis://localhost:6379/0``).
        host: the server's host, with ``port`` and ``db``, instead of a URL.
        port: with ``host``.
        db: with ``host``.
        marker_key: the hash of the lanes' markers (else ``sink.redis.marker.key``, else
            ``<key_prefix>statefulbolts:sink:<topology>:<component>``).
        key_prefix: put before every record's key and the default marker key (else
            ``sink.redis.key.prefix``, else none).
        value_serializer: how ``HSet``, ``SetValue`` and ``XAdd`` values become bytes: ``None``
            (bytes, str and numbers as text; anything else refused), ``"json"``, ``"msgpack"``
            or a function returning bytes.
        txid_field: the field each ``XAdd`` entry gets with its txid (``None``: none).

    Example:
        >>> sink = RedisSink(mapper=lambda t: None, url="redis://:pw@127.0.0.1:6379/0")
        >>> sink.name
        'Redis at 127.0.0.1:6379'
    """

    def __init__(
        self,
        mapper: Callable[[Tuple], RedisRecord | Sequence[RedisRecord] | None],
        *,
        url: str | None = None,
        host: str | None = None,
        port: int = 6379,
        db: int = 0,
        marker_key: str | None = None,
        key_prefix: str | None = None,
        value_serializer: str | Callable[[Any], bytes] | None = None,
        txid_field: str | None = TXID_FIELD,
    ) -> None:
        if not callable(mapper):
            msg = f"{_NAME}: mapper must be a function of the tuple, got {mapper!r}"
            raise ValueError(msg)
        if url is not None and host is not None:
            msg = f"{_NAME}: give url or host/port/db, not both"
            raise ValueError(msg)
        if marker_key is not None and not marker_key:
            msg = f"{_NAME}: marker_key must not be empty"
            raise ValueError(msg)
        if isinstance(value_serializer, str) and value_serializer not in _SERIALIZERS:
            msg = (
                f"{_NAME}: value_serializer {value_serializer!r} is not one of "
                f"{sorted(_SERIALIZERS)}, None or a function"
            )
            raise ValueError(msg)
        if value_serializer is not None and not (
            isinstance(value_serializer, str) or callable(value_serializer)
        ):
            msg = f"{_NAME}: value_serializer must be a name, None or a function"
            raise ValueError(msg)
        self.mapper = mapper
        self.url, self.host, self.port, self.db = url, host, port, db
        self.marker_key = marker_key
        self.key_prefix = key_prefix
        self.value_serializer = value_serializer
        self.txid_field = txid_field
        self._reset()

    def _reset(self) -> None:
        """What a task resolves and connects: nothing of it is pickled with the sink."""
        self._settings: _Settings | None = None
        self._for_conf: Mapping[str, Any] | None = None
        self._client: Any = None
        self._script: Any = None
        self._cluster: bool | None = None  # the server runs in cluster mode (keys need a slot)

    def __getstate__(self) -> dict[str, Any]:
        own = ("_settings", "_for_conf", "_client", "_script", "_cluster")
        return {k: v for k, v in vars(self).items() if k not in own}

    def __setstate__(self, state: dict[str, Any]) -> None:
        vars(self).update(state)
        self._reset()

    def __repr__(self) -> str:
        return f"RedisSink(mapper={getattr(self.mapper, '__qualname__', self.mapper)!r})"

    @property
    def name(self) -> str:
        """``Redis at <host>:<port>`` (never a password)."""
        if self._settings is not None:
            return f"Redis at {self._settings.address}"
        if self.host is not None:
            return f"Redis at {self.host}:{self.port}"
        if self.url is not None:
            return f"Redis at {_address(self.url)}"
        return "Redis"

    # ---------------------------------------------------------------- settings
    def settings(self, conf: Mapping[str, Any]) -> _Settings:
        """The arguments over the keys of ``conf`` (kept for that config).

        Raises:
            SinkConfigError: a key has the wrong type (named), or the address is not a Redis
                address.
        """
        if self._settings is not None and self._for_conf is conf:
            return self._settings
        try:
            config = RedisSinkConfig.from_conf(conf, who=_NAME)
        except ConfigError as exc:
            raise SinkConfigError(str(exc)) from None
        target: str | dict[str, Any]
        if self.host is not None:
            target = {"host": self.host, "port": self.port, "database": self.db}
        else:
            target = self.url or (
                config.url.get_secret_value() if config.url is not None else DEFAULT_URL
            )
        try:  # the project's connection layer checks the address (nothing connects yet)
            client = connect(target, who=_NAME, decode_responses=False, shared=True)
        except ValueError as exc:
            raise SinkConfigError(str(exc)) from None
        from providers.redis import address_of

        address = address_of(client)
        prefix = self.key_prefix if self.key_prefix is not None else config.key_prefix
        settings = _Settings(
            target, address, self.marker_key or config.marker_key, (prefix or "").encode()
        )
        self._settings, self._for_conf = settings, conf
        return settings

    def marker_key_of(self, lane: Lane) -> str:
        """The hash holding ``lane``'s marker."""
        settings = self._settings
        given = settings.marker_key if settings is not None else self.marker_key
        prefix = settings.prefix.decode() if settings is not None else (self.key_prefix or "")
        return given or f"{prefix}statefulbolts:sink:{lane.topology}:{lane.component}"

    def open(self, conf: Mapping[str, Any], context: TopologyContext) -> None:
        """Resolve the settings for this task (nothing connects yet)."""
        require_redis(_NAME)
        self.settings(conf)

    def close(self) -> None:
        """Forget the client (the process's shared pool stays for the other tasks)."""
        self._client = self._script = None

    def check_config(self, conf: Mapping[str, Any]) -> None:
        """The keys, then the server: it answers, and it takes the publish script.

        Raises:
            SinkConfigError: a key is wrong, or the server does not answer or refuses the
                script (named, with its address and where it comes from).
        """
        settings = self.settings(conf)
        require_redis(_NAME)
        try:
            client = connect(settings.target, who=_NAME, decode_responses=False, shared=False)
        except ValueError as exc:  # ProviderConfigError: a bad address, named
            raise SinkConfigError(str(exc)) from exc
        try:
            client.ping()
            client.script_load(PUBLISH)
        except backend_errors() as exc:
            msg = (
                f"{_NAME}: Redis at {settings.address} did not take the publish script: "
                f"{type(exc).__name__}: {exc}; start it or fix the sink's url "
                f"(argument, or {SINK_URL_KEY!r})"
            )
            raise SinkConfigError(msg) from exc
        finally:
            client.close()

    def _connected(self) -> Any:
        """This process's client for the server, and the script (made once per task)."""
        if self._client is None:
            settings = self._current()
            client = connect(settings.target, who=_NAME, decode_responses=False, shared=True)
            self._cluster = self._cluster_mode(client)
            # EVALSHA, and on NOSCRIPT (a restarted or flushed server) SCRIPT LOAD and again.
            self._script = client.register_script(PUBLISH)
            self._client = client
        return self._client

    def _current(self) -> _Settings:
        if self._settings is None:
            msg = f"{_NAME}: used before open(conf, context)"
            raise SinkPublishError(msg)
        return self._settings

    def _cluster_mode(self, client: Any) -> bool:
        """Whether the server runs in cluster mode (``INFO cluster``).

        A server that hides INFO, as some managed ones do, is taken for a single server: on a
        cluster its CROSSSLOT refusal then names the keys instead of the sink.
        """
        redis = require_redis(_NAME)
        with self._backend(client, "connecting", "the server"):
            try:
                info = client.info("cluster")
            except redis.exceptions.ResponseError:
                return False
        return bool(int(info.get("cluster_enabled", 0)))

    def _backend(
        self, client: Any, step: str, subject: str, keys: Mapping[Any, str] | None = None
    ) -> contextlib.AbstractContextManager[None]:
        return raise_backend_errors(
            client,
            step=step,
            subject=f"{_NAME} {subject}",
            keys=keys,
            settings=f"the url or host given to {_NAME}, or {SINK_URL_KEY!r}",
        )

    # ---------------------------------------------------------------- stage
    def stage(self, tuple_: Tuple) -> list[list[Any]] | None:
        """The commands of the tuple's records, serialized: ``[[letter, key, args...], ...]``.

        Raises:
            SinkStageError: the mapper returned something that is not a record, or a key,
                field, value or number cannot be written to Redis.
        """
        made = self.mapper(tuple_)
        if made is None:
            return None
        records = [made] if isinstance(made, _RECORDS) else made
        if not isinstance(records, list | tuple) or not all(
            isinstance(r, _RECORDS) for r in records
        ):
            msg = (
                f"{_NAME}: mapper returned {made!r:.100}, not a record (HSet, HIncrBy, ZAdd, "
                "XAdd, SetValue), a list of them, or None"
            )
            raise SinkStageError(msg)
        return [self._command(r) for r in records] or None

    def _command(self, record: RedisRecord) -> list[Any]:
        key = _name_bytes(record.key, "key", record)
        if isinstance(record, HSet):
            return ["H", key, _name_bytes(record.field, "field", record), self._value(record)]
        if isinstance(record, HIncrBy):
            amount = record.amount
            if isinstance(amount, bool) or not isinstance(amount, int):
                msg = f"{_NAME}: {record!r:.100}: amount must be an int"
                raise SinkStageError(msg)
            if not -(2**63) <= amount < 2**63:
                msg = f"{_NAME}: {record!r:.100}: amount is beyond a 64-bit integer"
                raise SinkStageError(msg)
            return ["I", key, _name_bytes(record.field, "field", record), amount]
        if isinstance(record, ZAdd):
            score = record.score
            if isinstance(score, bool) or not isinstance(score, int | float) or math.isnan(score):
                msg = f"{_NAME}: {record!r:.100}: score must be a number (not NaN)"
                raise SinkStageError(msg)
            return ["Z", key, _name_bytes(record.member, "member", record), float(score)]
        if isinstance(record, XAdd):
            if not isinstance(record.fields, Mapping) or not record.fields:
                msg = f"{_NAME}: {record!r:.100}: fields must be a non-empty mapping"
                raise SinkStageError(msg)
            flat: list[bytes] = []
            for name, value in record.fields.items():
                flat += [_name_bytes(name, "field", record), self._serialize(value, record)]
            return ["X", key, flat]
        return ["S", key, self._value(record)]

    def _value(self, record: HSet | SetValue) -> bytes:
        return self._serialize(record.value, record)

    def _serialize(self, value: Any, record: Any) -> bytes:
        given = self.value_serializer
        try:
            if given is None:
                return _plain(value)
            if isinstance(given, str):
                return _SERIALIZERS[given](value)
            out = given(value)
        except (TypeError, ValueError) as exc:
            msg = f"{_NAME}: {record!r:.100}: the value {value!r:.80} cannot be written: {exc}"
            raise SinkStageError(msg) from exc
        if not isinstance(out, bytes):
            msg = (
                f"{_NAME}: value_serializer {given!r} returned {type(out).__name__}, not bytes, "
                f"for {value!r:.80}"
            )
            raise SinkStageError(msg)
        return out

    # ---------------------------------------------------------------- the marker
    def published(self, lane: Lane) -> int | None:
        """The lane's marker: its field of the marker hash (``None``: nothing yet).

        Raises:
            StateBackendError: Redis is away (an outage).
            SinkMarkerError: the field holds something that is not a txid.
        """
        client = self._connected()
        key = self.marker_key_of(lane)
        with self._backend(client, "reading the marker", f"lane {lane.name}", {key: "hash"}):
            value = client.hget(key, lane.qualified())
        return _txid(value, key, lane.qualified())

    def lane_markers(
        self, conf: Mapping[str, Any], topology: str, component: str
    ) -> dict[str, int | None]:
        """Every lane of ``component`` the marker hash holds a marker of: lane -> marker."""
        self.settings(conf)
        client = self._connected()
        probe = Lane(topology, component, 0, 1)
        key = self.marker_key_of(probe)
        start = probe.qualified().removesuffix(probe.name)
        with self._backend(client, "listing the markers", f"sink {component!r}", {key: "hash"}):
            fields = client.hgetall(key)
        out: dict[str, int | None] = {}
        for raw, value in fields.items():
            name = text(raw)
            if not name.startswith(start) or name.endswith(_EPOCH_SUFFIX):
                continue
            try:
                Lane.parse_name(name.removeprefix(start))
            except ValueError:
                continue
            out[name.removeprefix(start)] = _txid(value, key, name)
        return dict(sorted(out.items()))

    # ---------------------------------------------------------------- publish
    def publish(
        self, lane: Lane, txid: int, batches: Sequence[StagedBatch], epoch: int | None
    ) -> PublishResult:
        """Publish the lane's records above its marker, up to ``txid``, in one script.

        1. **Arguments**: the batches up to ``txid``, their commands flattened (``PUBLISH``'s
           ARGV), their keys listed once each after the marker hash (its KEYS); on a cluster,
           every key checked to be in the marker key's slot.
        2. **Run** ``PUBLISH`` (EVALSHA; on NOSCRIPT, SCRIPT LOAD and again). In one atomic
           step Redis compares the epoch, reads the marker, checks every write, writes the
           records of the batches above the marker and moves the marker to ``txid``.
        3. **Read the reply**: ``fenced``, ``already`` (a replayed COMMIT: nothing written),
           ``refused`` (nothing written), or ``published`` with the txids written.

        Raises:
            SinkFencedError: the lane's stored epoch is above ``epoch`` (a newer driver).
            RedisSinkRefusedError: a write would fail (a key of another type, a field that is
                not an integer); nothing was written.
            SinkConfigError: on a cluster, a key outside the marker key's slot.
            StateBackendError: Redis is away (an outage, waited out).
            StateBackendRefusedError: Redis refused (out of memory, a wrong password).
        """
        client = self._connected()
        marker_key = self.marker_key_of(lane)
        due = [b for b in batches if b.txid <= txid]
        keys, args = self._arguments(lane, txid, due, epoch, marker_key)
        with self._backend(
            client, "publishing", f"lane {lane.name} txid {txid}", {marker_key: "hash"}
        ):
            reply = self._run(keys, args)
        return self._result(lane, txid, epoch, reply)

    def _run(self, keys: list[bytes | str], args: list[Any]) -> Any:
        """Step 2: the script (a seam: tests fail here, before or after it ran)."""
        return self._script(keys=keys, args=args, client=self._client)

    def _arguments(
        self,
        lane: Lane,
        txid: int,
        due: Sequence[StagedBatch],
        epoch: int | None,
        marker_key: str,
    ) -> tuple[list[bytes | str], list[Any]]:
        """Step 1: ``PUBLISH``'s KEYS and ARGV (see the script's contract)."""
        keys: list[bytes | str] = [marker_key]
        index: dict[bytes, int] = {}
        prefix = self._current().prefix
        heads: list[Any] = []
        body: list[Any] = []
        for batch in due:
            count = 0
            for record in batch.records:
                for command in record:
                    letter, key = command[0], command[1]
                    at = index.get(key)
                    if at is None:
                        keys.append(prefix + key)
                        at = index[key] = len(keys)
                    body += [letter, at]
                    if letter == "X":
                        body += [len(command[2]) // 2, *command[2]]
                    elif letter == "Z":
                        body += [repr(command[3]), command[2]]
                    else:
                        body += [command[2], command[3]] if letter != "S" else [command[2], ""]
                    count += 1
            heads += [batch.txid, count]
        if self._cluster:
            self._check_slots(keys, lane)
        args = [
            lane.qualified(),
            txid,
            "" if epoch is None else epoch,
            self.txid_field or "",
            len(due),
            *heads,
            *body,
        ]
        return keys, args

    def _check_slots(self, keys: Sequence[bytes | str], lane: Lane) -> None:
        from redis.crc import key_slot

        def slot(key: bytes | str) -> int:
            return int(key_slot(key.encode() if isinstance(key, str) else key))

        home = slot(keys[0])
        for key in keys[1:]:
            if slot(key) != home:
                msg = (
                    f"{_NAME}: lane {lane.name}: key {text(key)!r} is in cluster slot "
                    f"{slot(key)}, the marker hash {text(keys[0])!r} in slot {home}: one script "
                    "writes them together, so they must share a slot; give the keys and the "
                    f"marker key (marker_key, or {SINK_MARKER_KEY!r}) one hash tag, as "
                    "'{counts}:words' and '{counts}:markers'"
                )
                raise SinkConfigError(msg)

    def _result(self, lane: Lane, txid: int, epoch: int | None, reply: Any) -> PublishResult:
        """Step 3: what the script did."""
        kind = text(reply[0])
        subject = f"{_NAME}: lane {lane.name} of sink {lane.component!r}"
        if kind == "fenced":
            msg = (
                f"{subject}: epoch {epoch} is below the stored {text(reply[1])}: a newer driver "
                "published this lane, and this one publishes nothing"
            )
            raise SinkFencedError(msg)
        if kind == "already":
            return PublishResult(txid, (), 0, int(text(reply[1])))
        if kind == "refused":
            msg = (
                f"{subject}: txid {txid} not published, nothing written: key {text(reply[1])!r}: "
                f"{text(reply[2])}; the key is another writer's, or of another kind: rename it"
            )
            raise RedisSinkRefusedError(msg)
        if kind != "published":  # pragma: no cover - the script returns nothing else
            msg = f"{subject}: unexpected reply {reply!r:.200}"
            raise SinkPublishError(msg)
        before = text(reply[1])
        return PublishResult(
            txid,
            tuple(int(text(t)) for t in reply[3:]),
            int(reply[2]),
            int(before) if before else None,
        )

    # ---------------------------------------------------------------- at-least-once
    def write(self, records: Sequence[Any]) -> None:
        """Run the records' commands now, in one MULTI/EXEC (no marker; ``XAdd`` no txid).

        Raises:
            StateBackendError: Redis is away (an outage).
            StateBackendRefusedError: Redis refused a command (a key of another type).
        """
        client = self._connected()
        prefix = self._current().prefix
        pipe = client.pipeline(transaction=True)
        for record in records:
            for command in record:
                letter, key = command[0], prefix + command[1]
                if letter == "H":
                    pipe.hset(key, command[2], command[3])
                elif letter == "I":
                    pipe.hincrby(key, command[2], command[3])
                elif letter == "Z":
                    pipe.zadd(key, {command[2]: command[3]})
                elif letter == "S":
                    pipe.set(key, command[2])
                else:
                    flat = command[2]
                    pipe.xadd(key, dict(zip(flat[::2], flat[1::2], strict=True)))
        with self._backend(client, "writing", f"{len(records)} records"):
            pipe.execute()


_RECORDS = (HSet, HIncrBy, ZAdd, XAdd, SetValue)


def _name_bytes(value: Any, what: str, record: Any) -> bytes:
    """A key, field or member as bytes: ``bytes``, ``str`` (UTF-8) or an int's decimal text."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value).encode()
    msg = f"{_NAME}: {record!r:.100}: the {what} must be a str, bytes or int, got {value!r:.80}"
    raise SinkStageError(msg)


def _plain(value: Any) -> bytes:
    """A value as Redis keeps it: bytes as they are, str as UTF-8, numbers as decimal text."""
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value).encode()
    if isinstance(value, float) and math.isfinite(value):
        return repr(value).encode()
    msg = (
        f"a {type(value).__name__} is not bytes, str or a finite number; give the sink "
        "value_serializer='json' (or 'msgpack', or a function returning bytes)"
    )
    raise TypeError(msg)


def _json(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()


def _msgpack(value: Any) -> bytes:
    packed = msgpack.packb(value, use_bin_type=True)
    if not isinstance(packed, bytes):  # pragma: no cover - packb returns bytes without a stream
        msg = "msgpack returned no bytes"
        raise TypeError(msg)
    return packed


_SERIALIZERS: dict[str, Callable[[Any], bytes]] = {"json": _json, "msgpack": _msgpack}


def _txid(value: Any, key: str, field: str) -> int | None:
    """A marker field's value as a txid (``None``: no field)."""
    if value is None:
        return None
    try:
        return int(text(value))
    except ValueError:
        msg = (
            f"{_NAME}: field {field!r} of hash {key!r} holds {text(value)!r:.40}, not a txid: "
            "another writer uses the sink's marker hash; give the sink its own (marker_key, or "
            f"{SINK_MARKER_KEY!r})"
        )
        raise SinkMarkerError(msg) from None


def _address(url: str) -> str:
    """``host:port`` of a URL, for the sink's name before it resolved its settings."""
    try:
        parts = urllib.parse.urlsplit(url)
        return f"{parts.hostname or 'localhost'}:{parts.port or 6379}"
    except ValueError:
        return "a URL that is not a Redis URL"
