"""Durable partitioned transactional spouts over Redis Streams, one stream per partition.

``RedisStreamsTransactionalSpout`` replays a batch exactly from its stored meta;
``OpaqueRedisStreamsTransactionalSpout`` continues from the meta it is given and keeps going
when entries were trimmed or the server is away. Both read with ``XRANGE``; nothing is written
to the streams (no consumer group, no ``XACK``): the runtime's stored metas are the position.

**Partitions.** Either a list of stream keys (partition i is the i-th key), or one key pattern
(``"events:*"``) matched against the server's streams with ``SCAN ... TYPE stream`` at each
``num_partitions()``, so that new streams become new partitions. A partition index must name the
same stream for the life of the transactional id, but a sorted SCAN result would renumber the
partitions whenever a new key sorts before an old one. So a pattern's streams are numbered in
the order they were first seen, in a Redis list on the same server (``registry_key``, default
``statefulbolts:txstreams:<pattern>``) that is only ever appended to; streams first seen in one
scan are appended in sorted order.

**Meta** of a partition's batch: the msgpack-friendly dict

=========  ====================================================================================
key        value
=========  ====================================================================================
stream     the stream key
first      the id of the batch's first entry, ``None`` for an empty batch
last       the id of the batch's last entry; for an empty batch the previous position
           (``None`` when nothing was ever read)
count      how many entries the batch read (an entry without a wanted field is read, skipped
           and reported, the same way on every replay)
=========  ====================================================================================

A new batch is the next ``take_per_batch`` entries after ``last`` (``XRANGE key (last + COUNT
n``). An exact replay reads ``XRANGE key first last`` and fails the batch
(``FailedException``) unless it finds exactly ``count`` entries, from ``first`` to ``last``.

Errors: an outage (the server unreachable, loading, busy: ``providers.redis.classify_error``)
fails the batch, which is retried (the opaque spout emits nothing from that partition and goes
on); a refusal (a wrong password, a key that is not a stream, out of memory) raises
``StateBackendRefusedError``, which stops the topology at once with its cause and fix.

Connections are made once per process and server (and timeout), and shared, by the
connectors' shared connection code (``_connection``: ``providers.redis.connect``, which also
checks the URL). Needs redis-py: ``pip install 'statefulbolts[redis]'``.

Example:
    >>> url = "redis://127.0.0.1:6379/0"
    >>> load_streams(url, {"words:0": ["cat", "dog"], "words:1": ["emu"]})  # doctest: +SKIP
    {'words:0': ['1700000000000-0', '1700000000000-1'], 'words:1': ['1700000000000-2']}
    >>> spout = RedisStreamsTransactionalSpout(url, "words:*", ["value"], take_per_batch=100)
    >>> spout.get_coordinator({}, None).num_partitions()  # doctest: +SKIP
    2
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from providers import StateBackendRefusedError, redacted_url
from statefulbolts.components import Component, OutputFieldsDeclarer
from statefulbolts.connectors.redis._connection import (
    backend_error,
    backend_errors,
    connect,
    require_redis,
)
from statefulbolts.errors import FailedException
from statefulbolts.transactional import (
    BatchOutputCollector,
    OpaquePartitionedTransactionalSpout,
    PartitionedTransactionalSpout,
    TransactionAttempt,
)
from statefulbolts.tuples import Fields

if TYPE_CHECKING:
    from statefulbolts.context import TopologyContext

__all__ = [
    "OpaqueRedisStreamsTransactionalSpout",
    "RedisStreamsTransactionalSpout",
    "close_connections",
    "load_streams",
]

log = logging.getLogger(__name__)

_META_KEYS = ("stream", "first", "last", "count")
# Where the spouts are imported from (``statefulbolts.connectors.redis``).
_HOME = __name__.rpartition(".")[0]

# Append the streams a scan found that the registry does not hold yet; return the registry.
# KEYS[1]: the registry, a list of stream keys in the order they were first seen
# ARGV:    the stream keys the scan found, sorted
# Returns: the whole registry after the append
_REGISTER = """
local known = redis.call('LRANGE', KEYS[1], 0, -1)
local seen = {}
for _, key in ipairs(known) do seen[key] = true end
for _, key in ipairs(ARGV) do
  if not seen[key] then
    redis.call('RPUSH', KEYS[1], key)
    seen[key] = true
    known[#known + 1] = key
  end
end
return known
"""


# ------------------------------------------------------------------ connections
# A pattern's registry as this process last read it: the fallback while the server is away.
_registries: dict[tuple[str, str], list[str]] = {}


def _client(url: str, timeout: float, purpose: str) -> Any:
    """This process's client for ``url`` (replies as ``str``): made once, shared by every spout.

    Raises:
        ProviderConfigError: ``url`` is not a Redis URL (names ``purpose``).
    """
    return connect(
        url,
        who=purpose,
        decode_responses=True,
        shared=True,
        timeout_ms=max(1, round(timeout * 1000)),
    )


def close_connections() -> None:
    """Close and forget this process's shared connections (tests, or after a server moved).

    Every shared Redis client of the process goes (``providers.redis.reset_clients``), the
    state provider's included: they reconnect when next used.
    """
    require_redis("close_connections")
    from providers.redis import reset_clients

    _registries.clear()
    reset_clients()


# ------------------------------------------------------------------ the spouts' shared part
class _RedisStreamsSpout(Component):
    """Settings, partition lookup, reading and emitting, shared by both spouts."""

    TX_FIELD: ClassVar[str]
    """The attempt's field name: ``<module>.<qualname>/id`` of the spout class."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__module__ == __name__:
            # Ours are named by their public home, in the field name as in repr and pickle.
            cls.__module__ = _HOME
        cls.TX_FIELD = f"{cls.__module__}.{cls.__qualname__}/id"

    def __init__(
        self,
        url: str,
        partitions: Sequence[str] | str,
        fields: Fields | Iterable[str],
        take_per_batch: int,
        *,
        registry_key: str | None = None,
        timeout: float = 5.0,
    ) -> None:
        name = type(self).__qualname__
        require_redis(name)  # fail now, with the install command, rather than in a Spark task
        if not isinstance(url, str) or not url:
            msg = f"{name}: url must be a Redis URL such as 'redis://host:6379/0', got {url!r}"
            raise ValueError(msg)
        if isinstance(take_per_batch, bool) or not isinstance(take_per_batch, int):
            msg = f"{name}: take_per_batch must be an int, got {take_per_batch!r}"
            raise TypeError(msg)
        if take_per_batch < 1:
            msg = f"{name}: take_per_batch must be at least 1, got {take_per_batch}"
            raise ValueError(msg)
        if not timeout > 0:
            msg = f"{name}: timeout must be a positive number of seconds, got {timeout!r}"
            raise ValueError(msg)
        self.url = url
        self.pattern: str | None = None
        self.streams: tuple[str, ...] = ()
        self.registry_key: str | None = None
        if isinstance(partitions, str):
            if not partitions:
                msg = f"{name}: the key pattern must not be empty"
                raise ValueError(msg)
            self.pattern = partitions
            self.registry_key = registry_key or f"statefulbolts:txstreams:{partitions}"
        else:
            streams = tuple(partitions)
            bad = [s for s in streams if not isinstance(s, str) or not s]
            if not streams or bad:
                msg = (
                    f"{name}: partitions must be a key pattern or a non-empty list of stream "
                    f"keys, got {list(streams)!r}"
                )
                raise ValueError(msg)
            if len(set(streams)) != len(streams):
                msg = f"{name}: a stream is listed twice in partitions {list(streams)!r}"
                raise ValueError(msg)
            if registry_key is not None:
                msg = f"{name}: registry_key applies to a key pattern, not a list of streams"
                raise ValueError(msg)
            self.streams = streams
        self.fields = fields if isinstance(fields, Fields) else Fields(list(fields))
        if self.TX_FIELD in self.fields:
            msg = f"{name}: fields {self.fields.to_list()} must not contain {self.TX_FIELD!r}"
            raise ValueError(msg)
        self.take_per_batch = take_per_batch
        self.timeout = float(timeout)

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """The default stream: ``[TX_FIELD] + fields``."""
        declarer.declare(Fields([self.TX_FIELD, *self.fields]))

    def __repr__(self) -> str:
        partitions = self.pattern if self.pattern is not None else list(self.streams)
        return (
            f"{type(self).__qualname__}(url={redacted_url(self.url)!r}, partitions={partitions!r}, "
            f"fields={self.fields.to_list()}, take_per_batch={self.take_per_batch})"
        )

    # -------------------------------------------------------------- partitions
    def _client(self) -> Any:
        return _client(self.url, self.timeout, type(self).__qualname__)

    def _refused(self, exc: BaseException, step: str) -> None:
        """Raise ``StateBackendRefusedError`` if Redis refused; an outage returns to the caller.

        ``providers.redis.classify_error`` decides. An outage (the server away, loading, busy)
        is the caller's to handle: the batch fails and is retried later, or the opaque spout
        emits nothing. A refusal (a wrong password, a key that is not a stream, out of memory)
        does not go away by waiting: it stops the topology, with its cause and fix.
        """
        partitions = self.pattern if self.pattern is not None else list(self.streams)
        error = backend_error(
            exc,
            self._client(),
            step=step,
            subject=f"{type(self).__qualname__} over {partitions!r}",
            settings=f"the URL given to {type(self).__qualname__}",
        )
        if isinstance(error, StateBackendRefusedError):
            raise error from exc

    def _discover(self) -> list[str]:
        """Every partition's stream, in partition order; a pattern is scanned again."""
        if self.pattern is None:
            return list(self.streams)
        assert self.registry_key is not None  # noqa: S101 - set with the pattern
        client = self._client()
        found = sorted(set(client.scan_iter(match=self.pattern, _type="STREAM")))
        registry = list(client.register_script(_REGISTER)(keys=[self.registry_key], args=found))
        _registries[(self.url, self.registry_key)] = registry
        return registry

    def _stream_of(self, partition: int) -> str:
        """The stream of ``partition``; a pattern's registry is asked (``LINDEX``), not scanned."""
        if isinstance(partition, bool) or not isinstance(partition, int) or partition < 0:
            stream = None
        elif self.pattern is None:
            stream = self.streams[partition] if partition < len(self.streams) else None
        else:
            assert self.registry_key is not None  # noqa: S101 - set with the pattern
            stream = self._client().lindex(self.registry_key, partition)
        if stream is None:
            if self.pattern is None:
                what = f"the {len(self.streams)} streams {list(self.streams)!r}"
            else:
                what = (
                    f"the streams matching {self.pattern!r} seen so far "
                    f"(list {self.registry_key!r})"
                )
            msg = f"{type(self).__qualname__}: no partition {partition!r} among {what}"
            raise ValueError(msg)
        return str(stream)

    # -------------------------------------------------------------- metas
    def _parse(self, partition: int, meta: Any) -> dict[str, Any]:
        """Check a stored meta's shape; ``meta`` is ``None`` or a dict of ``_META_KEYS``."""
        if (
            isinstance(meta, Mapping)
            and set(meta) == set(_META_KEYS)
            and isinstance(meta["stream"], str)
            and isinstance(meta["count"], int)
            and meta["count"] >= 0
            and all(meta[k] is None or isinstance(meta[k], str) for k in ("first", "last"))
            and (meta["count"] == 0) == (meta["first"] is None)
        ):
            return dict(meta)
        msg = (
            f"{type(self).__qualname__}: the meta of partition {partition} must be a dict "
            f"{{'stream': str, 'first': id or None, 'last': id or None, 'count': int}}, "
            f"got {meta!r}"
        )
        raise ValueError(msg)

    def _position(self, partition: int, stream: str, last: Any) -> str | None:
        """The id after which the next batch of ``partition`` (``stream``) starts."""
        if last is None:
            return None
        meta = self._parse(partition, last)
        if meta["stream"] != stream:
            msg = (
                f"{type(self).__qualname__}: partition {partition} is stream {stream!r} now, but "
                f"its last meta is for stream {meta['stream']!r}: the partitions changed order "
                f"under a running transactional id; keep the order or use a new transactional id"
            )
            raise ValueError(msg)
        return meta["last"]

    # -------------------------------------------------------------- reading and emitting
    def _read_next(self, partition: int, last: Any) -> tuple[str, str | None, list[Any]]:
        """The stream of ``partition``, where its next batch starts after ``last``, its entries."""
        stream = self._stream_of(partition)
        position = self._position(partition, stream, last)
        return stream, position, self._read_after(stream, position)

    def _read_after(self, stream: str, position: str | None) -> list[tuple[str, Any]]:
        start = "-" if position is None else f"({position}"
        entries = self._client().xrange(stream, min=start, max="+", count=self.take_per_batch)
        return [(entry_id, data) for entry_id, data in entries]

    def _emit(
        self,
        tx: TransactionAttempt,
        collector: BatchOutputCollector,
        stream: str,
        entries: Sequence[tuple[str, Any]],
    ) -> None:
        names = self.fields.to_list()
        for entry_id, data in entries:
            missing = [f for f in names if f not in data]
            if missing:
                error = ValueError(
                    f"{type(self).__qualname__}: entry {entry_id} of stream {stream!r} has no "
                    f"field(s) {missing}; it has {sorted(data)}; skipped"
                )
                log.warning("%s", error)
                collector.report_error(error)
                continue
            collector.emit([tx, *(data[f] for f in names)])

    @staticmethod
    def _meta(stream: str, entries: Sequence[tuple[str, Any]], position: str | None) -> Any:
        if not entries:
            return {"stream": stream, "first": None, "last": position, "count": 0}
        return {
            "stream": stream,
            "first": entries[0][0],
            "last": entries[-1][0],
            "count": len(entries),
        }


# ------------------------------------------------------------------ transactional
class RedisStreamsTransactionalSpout(_RedisStreamsSpout, PartitionedTransactionalSpout):
    """A partitioned transactional spout over Redis Streams: each batch replays exactly.

    Args:
        url: the server, ``redis://host:port/db`` (``rediss://`` for TLS).
        partitions: a list of stream keys (partition i is the i-th), or a key pattern such as
            ``"events:*"`` (see the module docstring for how its streams are numbered).
        fields: the entry fields emitted, in this order, as strings, after the attempt; an
            entry that lacks one is skipped and reported.
        take_per_batch: the most entries a batch reads from one stream.
        registry_key: with a pattern, the Redis list that numbers its streams (default
            ``statefulbolts:txstreams:<pattern>``).
        timeout: seconds to wait for the server to connect or answer.

    A replay whose entries were trimmed (``XTRIM``, ``MAXLEN``) or deleted raises
    ``FailedException`` naming the stream and the ids: an exact replay is impossible, so trim
    only entries of committed txids. An unreachable server fails the batch the same way, and
    it is retried.

    Example:
        >>> spout = RedisStreamsTransactionalSpout(
        ...     "redis://127.0.0.1:6379/0", ["clicks:0", "clicks:1"], ["user", "url"], 500)
        >>> spout.get_coordinator({}, None).num_partitions()
        2
        >>> spout.TX_FIELD
        'statefulbolts.connectors.redis.RedisStreamsTransactionalSpout/id'
    """

    def get_coordinator(
        self, conf: Mapping[str, Any], context: TopologyContext
    ) -> PartitionedTransactionalSpout.Coordinator:
        """A coordinator counting the streams (scanning a pattern again at each count)."""
        return _Coordinator(self)

    def get_emitter(
        self, conf: Mapping[str, Any], context: TopologyContext
    ) -> PartitionedTransactionalSpout.Emitter:
        """An emitter reading with the process's shared connection."""
        return _Emitter(self)


class _Coordinator(PartitionedTransactionalSpout.Coordinator):
    def __init__(self, spout: RedisStreamsTransactionalSpout) -> None:
        self._spout = spout

    def num_partitions(self) -> int:
        try:
            return len(self._spout._discover())
        except backend_errors() as exc:
            self._spout._refused(exc, "scan for streams")
            msg = (
                f"{type(self._spout).__qualname__}: cannot scan "
                f"{redacted_url(self._spout.url)} for streams matching {self._spout.pattern!r}: "
                f"{exc}; the transaction starts later"
            )
            raise FailedException(msg) from exc


class _Emitter(PartitionedTransactionalSpout.Emitter):
    def __init__(self, spout: RedisStreamsTransactionalSpout) -> None:
        self._spout = spout

    def emit_partition_batch_new(
        self,
        tx: TransactionAttempt,
        collector: BatchOutputCollector,
        partition: int,
        last_partition_meta: Any,
    ) -> Any:
        spout = self._spout
        try:
            stream, position, entries = spout._read_next(partition, last_partition_meta)
        except backend_errors() as exc:
            spout._refused(exc, f"read of partition {partition}")
            msg = (
                f"{type(spout).__qualname__}: cannot read partition {partition} from "
                f"{redacted_url(spout.url)}: {exc}; txid {tx.transaction_id} is retried"
            )
            raise FailedException(msg) from exc
        spout._emit(tx, collector, stream, entries)
        return spout._meta(stream, entries, position)

    def emit_partition_batch(
        self,
        tx: TransactionAttempt,
        collector: BatchOutputCollector,
        partition: int,
        partition_meta: Any,
    ) -> None:
        spout = self._spout
        meta = spout._parse(partition, partition_meta)
        stream, first, last, count = (meta[k] for k in _META_KEYS)
        if count == 0:
            return
        try:
            # One more than expected, so that a range holding more than the batch is noticed.
            entries = spout._client().xrange(stream, min=first, max=last, count=count + 1)
        except backend_errors() as exc:
            spout._refused(exc, f"replay of partition {partition}")
            msg = (
                f"{type(spout).__qualname__}: cannot replay entries {first}..{last} of stream "
                f"{stream!r} from {redacted_url(spout.url)}: {exc}; txid {tx.transaction_id} is "
                "retried"
            )
            raise FailedException(msg) from exc
        if len(entries) != count or entries[0][0] != first or entries[-1][0] != last:
            found = f"{entries[0][0]}..{entries[-1][0]}" if entries else "none"
            msg = (
                f"{type(spout).__qualname__}: cannot replay txid {tx.transaction_id} of "
                f"partition {partition}: stream {stream!r} no longer holds the {count} entries "
                f"{first}..{last} (found {len(entries)}: {found}); they were trimmed or deleted, "
                f"so an exact replay is impossible"
            )
            raise FailedException(msg)
        spout._emit(tx, collector, stream, entries)


# ------------------------------------------------------------------ opaque
class OpaqueRedisStreamsTransactionalSpout(_RedisStreamsSpout, OpaquePartitionedTransactionalSpout):
    """An opaque partitioned spout over Redis Streams: it keeps going when data is lost.

    Arguments as ``RedisStreamsTransactionalSpout``. Each emission reads the next
    ``take_per_batch`` entries after the meta it is given. When entries were trimmed it
    continues with what the stream still holds; when the server is unreachable it emits nothing,
    logs a warning and returns ``None``, so the runtime carries the partition's previous meta
    forward and the partition catches up once the server is back. ``num_partitions()`` with a
    pattern falls back to the streams this process saw last (none at first) while the server is
    unreachable.

    Example:
        >>> spout = OpaqueRedisStreamsTransactionalSpout(
        ...     "redis://127.0.0.1:6379/0", ["clicks"], ["user", "url"], 500)
        >>> spout.get_emitter({}, None).num_partitions()
        1
    """

    def get_coordinator(
        self, conf: Mapping[str, Any], context: TopologyContext
    ) -> OpaquePartitionedTransactionalSpout.Coordinator:
        """A coordinator that is always ready."""
        return _OpaqueCoordinator()

    def get_emitter(
        self, conf: Mapping[str, Any], context: TopologyContext
    ) -> OpaquePartitionedTransactionalSpout.Emitter:
        """An emitter reading with the process's shared connection."""
        return _OpaqueEmitter(self)


class _OpaqueCoordinator(OpaquePartitionedTransactionalSpout.Coordinator):
    pass


class _OpaqueEmitter(OpaquePartitionedTransactionalSpout.Emitter):
    def __init__(self, spout: OpaqueRedisStreamsTransactionalSpout) -> None:
        self._spout = spout

    def emit_partition_batch(
        self,
        tx: TransactionAttempt,
        collector: BatchOutputCollector,
        partition: int,
        last_partition_meta: Any,
    ) -> Any:
        spout = self._spout
        try:
            stream, position, entries = spout._read_next(partition, last_partition_meta)
        except backend_errors() as exc:
            spout._refused(exc, f"read of partition {partition}")
            log.warning(
                "%s: partition %s unreachable at %s (%s); txid %s emits nothing from it",
                type(spout).__qualname__,
                partition,
                redacted_url(spout.url),
                exc,
                tx.transaction_id,
            )
            return None
        spout._emit(tx, collector, stream, entries)
        return spout._meta(stream, entries, position)

    def num_partitions(self) -> int:
        spout = self._spout
        try:
            return len(spout._discover())
        except backend_errors() as exc:
            spout._refused(exc, "scan for streams")
            assert spout.registry_key is not None  # noqa: S101 - only a pattern talks to Redis
            known = _registries.get((spout.url, spout.registry_key), [])
            log.warning(
                "%s: cannot scan %s for streams matching %r (%s); using the %d known",
                type(spout).__qualname__,
                redacted_url(spout.url),
                spout.pattern,
                exc,
                len(known),
            )
            return len(known)


# ------------------------------------------------------------------ helpers
def load_streams(
    url: str,
    streams: Mapping[str, Iterable[str | Mapping[str, Any]]],
    *,
    field: str = "value",
) -> dict[str, list[str]]:
    """``XADD`` entries to streams, in order, pipelined; returns the new entry ids per stream.

    Args:
        url: the server, ``redis://host:port/db``.
        streams: each stream key with its entries: a mapping of entry fields, or a string that
            becomes ``{field: string}``.
        field: the field of entries given as strings.

    Example:
        >>> load_streams("redis://127.0.0.1:6379/0",
        ...              {"p0": ["cat", {"value": "dog", "n": 2}]})  # doctest: +SKIP
        {'p0': ['1700000000000-0', '1700000000000-1']}
    """
    client = _client(url, 5.0, "load_streams")
    pipe = client.pipeline(transaction=False)
    order: list[str] = []
    for stream, entries in streams.items():
        for entry in entries:
            pipe.xadd(stream, {field: entry} if isinstance(entry, str) else dict(entry))
            order.append(stream)
    ids: dict[str, list[str]] = {stream: [] for stream in streams}
    for stream, entry_id in zip(order, pipe.execute(), strict=True):
        ids[stream].append(entry_id)
    return ids
