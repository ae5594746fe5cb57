"""``PartitionedRedisStreamSpout``: Redis streams read on the executors, a stream a partition.

Each Redis stream is a partition: the streams named (``streams=``), or every stream whose key
matches a pattern (``pattern=``, ``SCAN MATCH``, listed again before each PREPARE, so a new
stream is picked up at the next transaction). A record is one entry, its ``fields`` as the
tuple's values, like ``RedisStreamSpout``'s. The position is the id of the last entry read
(``"1700000000000-3"``), saved with the checkpoint; a task reads on from it with
``XRANGE key (<position> <end> COUNT n``: exclusive of the position (Redis 6.2 or later) and
inclusive of the end, the stream's last entry id when the driver assigned the partitions
(``ends``: one ``XREVRANGE key + - COUNT 1`` per stream, pipelined). So the same position, end
and count read the same entries, as a partitioned reader must, even in a Spark task run again
after more entries were added (a retry, or a rerun after its executor was lost); entries added
after the listing are the next transaction's.

There is no consumer group and no ``XACK``: what was read is the checkpoint's business, not the
stream's. Several topologies may read the same streams, and nothing is left pending in Redis.

Where a partition starts (its position ``None``, never read in a committed transaction):

- ``start="0"`` (the default): at the stream's first entry.
- ``start="$"``: only entries added later. The first transaction that reads the stream reads
  nothing from it and ends at its last entry when the driver listed it; entries added after
  that are read.
- any other entry id: after that id.

Streams are trimmed by their writers (``XTRIM``, ``MAXLEN``, ``XDEL``). Reading from an id whose
entry is gone works: ``XRANGE`` from an exclusive id returns the entries after it, whether it
still exists or not. Entries trimmed before the topology read them are not read.

``has_more`` (in the driver, before a transaction is due) asks each stream for its last entry
(``XREVRANGE key + - COUNT 1``) and compares its id with the position: an idle topology runs no
transactions. A Redis error is raised as ``StateBackendError`` (the server away or busy) or
``StateBackendRefusedError`` (it refused: a key that is not a stream, a wrong password), its
message naming the stream, the cause and the fix (``providers.redis.classify_error``).

Settings come from the constructor, else from config keys: ``redis.stream.url``,
``redis.stream.keys`` (a list of keys, or one string of comma-separated keys) and
``redis.stream.pattern``, validated by ``PartitionedRedisStreamConfig`` where they are read.
Each process has one client per server for the spout (``shared``), made by the connectors'
shared connection code (``_connection``: ``providers.redis.connect``).

Example:
    >>> spout = PartitionedRedisStreamSpout(["clicks-a", "clicks-b"],
    ...     redis_url="redis://127.0.0.1:6379/0", fields=("user", "url"))
    >>> spout.partitions({})
    ['clicks-a', 'clicks-b']
    >>> builder.set_spout("clicks", spout, 2)  # doctest: +SKIP

Needs redis-py: ``pip install 'statefulbolts[redis]'``.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Mapping, Sequence
from typing import Any, Final

from pydantic import Field, field_validator

from statefulbolts.components import OutputFieldsDeclarer
from statefulbolts.connectors.redis._connection import (
    URL_KEY,
    RedisConnectorConfig,
    connect,
    raise_backend_errors,
    server,
    text,
)
from statefulbolts.connectors.redis._streams import entry_values
from statefulbolts.context import TopologyContext
from statefulbolts.errors import ConfigError, TopologyError
from statefulbolts.partitioned import PartitionBatch, PartitionedSpout, PartitionReader
from statefulbolts.tuples import Fields

__all__ = ["KEYS_KEY", "PATTERN_KEY", "PartitionedRedisStreamConfig", "PartitionedRedisStreamSpout"]

log = logging.getLogger(__name__)

KEYS_KEY: Final = "redis.stream.keys"
PATTERN_KEY: Final = "redis.stream.pattern"
_NAME = "PartitionedRedisStreamSpout"
# What to do about a partition that is not a stream: the spout's own fix, after the server's.
_FIXES = {
    "WRONGTYPE": (
        f"list only stream keys in streams= or {KEYS_KEY!r} (a pattern skips keys of other types)"
    )
}
_SCAN_COUNT = 1000


class PartitionedRedisStreamConfig(RedisConnectorConfig):
    """The topology config keys ``PartitionedRedisStreamSpout`` reads; its arguments win.

    Example:
        >>> PartitionedRedisStreamConfig.from_conf({KEYS_KEY: "a, b"}, who="doc").keys
        ('a', 'b')
        >>> PartitionedRedisStreamConfig.from_conf({PATTERN_KEY: "sensor:*"}, who="doc").pattern
        'sensor:*'
    """

    keys: tuple[str, ...] | None = Field(
        None,
        alias=KEYS_KEY,
        description=(
            "`PartitionedRedisStreamSpout`: the streams, a list of keys or one string of "
            "comma-separated keys, when neither streams nor a pattern is given as an argument."
        ),
    )
    pattern: str | None = Field(
        None,
        alias=PATTERN_KEY,
        description=(
            "`PartitionedRedisStreamSpout`: a `SCAN MATCH` glob; every stream whose key matches "
            "is a partition. Not with `redis.stream.keys`."
        ),
    )

    @field_validator("keys", mode="before")
    @classmethod
    def _listed(cls, value: Any) -> Any:
        """A comma-separated string, or a list, as a tuple of keys (strict types take tuples)."""
        if isinstance(value, str):
            value = [key.strip() for key in value.split(",") if key.strip()]
        if isinstance(value, list):
            return tuple(value) or None
        return value


def _entry_id(value: str) -> tuple[int, int] | None:
    """``"ms-seq"`` as a pair of ints (ids order as the pairs do), or ``None`` if not an id.

    Example:
        >>> _entry_id("1700000000000-3"), _entry_id("$")
        ((1700000000000, 3), None)
    """
    ms, dash, seq = value.partition("-")
    if not (dash and ms.isdigit() and seq.isdigit()):
        return None
    return int(ms), int(seq)


class PartitionedRedisStreamSpout(PartitionedSpout):
    """Entries of Redis streams, a stream a partition, the last id read its position.

    See the module docstring for the protocol, where a partition starts, and trimming.

    Args:
        streams: the stream keys (else config ``redis.stream.keys``); not with ``pattern``.
        pattern: a ``SCAN MATCH`` glob; every stream whose key matches is a partition (keys of
            other types are left out). Else config ``redis.stream.pattern``.
        redis_url: ``redis://host:port/db`` (else ``host``/``port``/``db``, else config
            ``redis.stream.url``, else ``redis://localhost:6379/0``).
        host: Redis host, when no URL is given.
        port: Redis port, when no URL is given (default 6379).
        db: database number, when no URL is given (default 0).
        fields: entry fields emitted, in order (default ``("sentence",)``).
        output_fields: the tuple's field names (default: ``fields``).
        encoding: how field values are decoded (``None``: emit bytes).
        start: where a stream never read starts: ``"0"`` (its first entry), ``"$"`` (only
            entries added after the first transaction that reads it), or an entry id (after it).

    Entries without one of ``fields`` are skipped with a warning in the log of the task that
    read them; the position moves past them.

    Example:
        >>> PartitionedRedisStreamSpout(pattern="sensor:*").output_fields
        ['sentence']
    """

    def __init__(
        self,
        streams: Sequence[str] | None = None,
        *,
        pattern: str | None = None,
        redis_url: str | None = None,
        host: str | None = None,
        port: int = 6379,
        db: int = 0,
        fields: Sequence[str] = ("sentence",),
        output_fields: Sequence[str] | None = None,
        encoding: str | None = "utf-8",
        start: str = "0",
    ) -> None:
        if isinstance(streams, str):
            streams = [streams]
        if streams is not None and pattern is not None:
            msg = f"{_NAME}: give streams or pattern, not both"
            raise ValueError(msg)
        if streams is not None and (not streams or not all(isinstance(s, str) for s in streams)):
            msg = f"{_NAME}: streams must be a non-empty list of stream keys, got {streams!r}"
            raise ValueError(msg)
        if not fields:
            msg = f"{_NAME}: fields must name at least one entry field"
            raise ValueError(msg)
        names = list(output_fields) if output_fields is not None else list(fields)
        if len(names) != len(fields):
            msg = (
                f"{_NAME}: output_fields {names} must have one name per entry field {list(fields)}"
            )
            raise ValueError(msg)
        if redis_url is not None and host is not None:
            msg = f"{_NAME}: give redis_url or host/port/db, not both"
            raise ValueError(msg)
        if start not in ("0", "$") and _entry_id(start) is None:
            msg = (
                f'{_NAME}: start is {start!r}; expected "0", "$" or an entry id like '
                '"1700000000000-0"'
            )
            raise ValueError(msg)
        self.streams = list(streams) if streams is not None else None
        self.pattern = pattern
        self.redis_url = redis_url
        self.host, self.port, self.db = host, port, db
        self.fields = list(fields)
        self.output_fields = names
        self.encoding = encoding
        self.start = start

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """The default stream, with ``output_fields``."""
        declarer.declare(Fields(self.output_fields))

    # ----------------------------------------------------------------- settings
    def _client(self, conf: Mapping[str, Any]) -> Any:
        """This process's shared client for the spout's Redis (one pool per process and server).

        Raises:
            ConfigError: a ``redis.stream.*`` key has a wrong type.
            ProviderConfigError: the URL or host is not a valid Redis address.
        """
        config = PartitionedRedisStreamConfig.from_conf(conf, who=_NAME)
        target = server(config, url=self.redis_url, host=self.host, port=self.port, db=self.db)
        return connect(target, who=_NAME, decode_responses=False, shared=True)

    def _named(self, conf: Mapping[str, Any]) -> tuple[list[str] | None, str | None]:
        """The stream keys or the pattern, from the constructor, else from the config."""
        if self.streams is not None or self.pattern is not None:
            return self.streams, self.pattern
        config = PartitionedRedisStreamConfig.from_conf(conf, who=_NAME)
        if config.keys and config.pattern:
            msg = f"{_NAME}: config sets both {KEYS_KEY!r} and {PATTERN_KEY!r}; keep one"
            raise ConfigError(msg)
        if config.keys:
            return list(config.keys), None
        if config.pattern:
            return None, config.pattern
        msg = (
            f"{_NAME}: no streams; pass streams= or pattern=, or set config {KEYS_KEY!r} "
            f"(a list of stream keys) or {PATTERN_KEY!r} (a SCAN MATCH glob)"
        )
        raise ConfigError(msg)

    # ----------------------------------------------------------------- the driver's half
    def partitions(self, conf: Mapping[str, Any]) -> list[str]:
        """The stream keys named, or the streams matching the pattern now, sorted."""
        keys, pattern = self._named(conf)
        if keys is not None:
            return sorted(set(keys))
        client = self._client(conf)
        with _backend(client, "SCAN", f"the streams matching {pattern!r}", None):
            found = {
                text(key)
                for key in client.scan_iter(match=pattern, count=_SCAN_COUNT, _type="STREAM")
            }
        return sorted(found)

    def ends(self, conf: Mapping[str, Any], partitions: Sequence[str]) -> dict[str, str]:
        """Each stream's last entry id now (``"0-0"``: empty or not there), one round trip."""
        client = self._client(conf)
        pipe = client.pipeline(transaction=False)
        for stream in partitions:
            pipe.xrevrange(stream, "+", "-", count=1)
        with _backend(client, "XREVRANGE", f"the last entries of {len(partitions)} streams", None):
            replies = pipe.execute(raise_on_error=False)
        ends: dict[str, str] = {}
        for stream, reply in zip(partitions, replies, strict=True):
            if isinstance(reply, Exception):  # this stream's own error (WRONGTYPE), named
                with _backend(client, "XREVRANGE", f"stream {stream!r}", stream):
                    raise reply
            ends[stream] = text(reply[0][0]) if reply else "0-0"
        return ends

    def has_more(self, conf: Mapping[str, Any], partition: str, position: Any) -> bool:
        """Whether the stream's last entry is after ``position`` (``XREVRANGE ... COUNT 1``)."""
        after = self._after(partition, position)
        if after is None:
            return True  # start="$": the first read pins where the stream ends
        client = self._client(conf)
        with _backend(client, "XREVRANGE", f"stream {partition!r}", partition):
            last = client.xrevrange(partition, "+", "-", count=1)
        if not last:
            return False  # empty, or not there (yet)
        if after == "-":
            return True
        last_id, read_id = _entry_id(text(last[0][0])), _entry_id(after)
        return last_id is not None and read_id is not None and last_id > read_id

    def open_reader(
        self,
        conf: Mapping[str, Any],
        context: TopologyContext,
        partition: str,
        position: Any,
        end: str | None = None,
    ) -> PartitionReader:
        """A reader of stream ``partition`` after entry id ``position`` (``None``: ``start``).

        ``end``: the last entry id it may read (``ends``); ``None``: the stream's end now.
        """
        after = self._after(partition, position)
        if end is not None and (not isinstance(end, str) or _entry_id(end) is None):
            msg = (
                f"{_NAME} end of stream {partition!r} is {end!r}, expected an entry id "
                '("<ms>-<seq>")'
            )
            raise TopologyError(msg)
        return _EntryReader(self, self._client(conf), partition, after, end)

    def _after(self, partition: str, position: Any) -> str | None:
        """The id to read after; ``"-"``: from the first entry; ``None``: pin the end ("$")."""
        if position is None:
            if self.start == "0":
                return "-"
            return None if self.start == "$" else self.start
        if not isinstance(position, str) or _entry_id(position) is None:
            msg = (
                f"{_NAME} position of stream {partition!r} is {position!r}, expected an entry "
                'id ("<ms>-<seq>")'
            )
            raise TopologyError(msg)
        return position

    def _values(self, stream: str, entry_id: str, data: Mapping[Any, Any]) -> list[Any] | None:
        try:
            return entry_values(stream, entry_id, data, self.fields, self.encoding)
        except ValueError as error:
            log.warning("%s", error)
            return None

    def __repr__(self) -> str:
        named = f"pattern={self.pattern!r}" if self.pattern is not None else repr(self.streams)
        return f"{_NAME}({named}, fields={self.fields!r})"


class _EntryReader(PartitionReader):
    """Entries of one stream after one id, up to an end id (``None``: the stream's end)."""

    def __init__(
        self,
        spout: PartitionedRedisStreamSpout,
        client: Any,
        stream: str,
        after: str | None,
        end: str | None,
    ) -> None:
        self.spout, self.client, self.stream = spout, client, stream
        self.after, self.end = after, end

    def read(self, max_records: int) -> PartitionBatch:
        """Up to ``max_records`` entries after the position; the position: the last id read."""
        client, stream, after, end = self.client, self.stream, self.after, self.end
        subject = f"stream {stream!r}"
        if after is None and end is not None:  # start="$": begin where the listing ended it
            return PartitionBatch([], end)
        if after is None:  # start="$" on a stream never read: begin where it ends now
            with _backend(client, "XREVRANGE", subject, stream):
                last = client.xrevrange(stream, "+", "-", count=1)
            return PartitionBatch([], text(last[0][0]) if last else "0-0")
        if max_records <= 0:
            return PartitionBatch([], None if after == "-" else after)
        low = "-" if after == "-" else f"({after}"
        with _backend(client, "XRANGE", subject, stream):
            entries = client.xrange(stream, low, "+" if end is None else end, count=max_records)
        if not entries:
            return PartitionBatch([], None if after == "-" else after)
        records = []
        for raw_id, data in entries:
            values = self.spout._values(stream, text(raw_id), data)
            if values is not None:
                records.append(values)
        return PartitionBatch(records, text(entries[-1][0]))


def _backend(
    client: Any, step: str, subject: str, stream: str | None
) -> contextlib.AbstractContextManager[None]:
    """Raise a Redis error as an outage or a refusal naming ``subject`` (``classify_error``)."""
    return raise_backend_errors(
        client,
        step=step,
        subject=f"{subject} ({_NAME})",
        keys={stream: "stream"} if stream is not None else None,
        settings=f"the URL or host given to {_NAME}, or {URL_KEY!r}",
        fixes=_FIXES,
    )
