"""A durable, replayable spout over a Redis stream, read through a consumer group.

``RedisStreamSpout`` reads entries of a Redis stream (``XADD``) as tuples. Each spout task is one
consumer of one consumer group; the message id of a tuple is the stream entry id.

Guarantee: at-least-once, across driver crashes. An entry is acknowledged (``XACK``) only after
the checkpoint transaction that carried it committed (the runtime calls ``ack`` after COMMIT, and
the spout sends the ``XACK`` commands on its next ``next_tuple``). Until then it stays in the
group's pending entries list (PEL) under this task's consumer name, so:

1. a failed or rolled-back tuple is re-emitted by this spout (``fail`` queues it);
2. a driver that crashes loses nothing: the restarted driver's spout task has the same consumer
   name (derived from topology name, component id and task index), and on ``open`` it first
   re-reads that consumer's pending entries (``XREADGROUP ... 0``), then new ones (``>``);
3. a crash after the commit decision (COMMITTING or COMMITTED saved) but before the ``XACK``
   costs nothing either: the runtime saved the entry ids of that transaction with its
   COMMITTING state, and the restarted driver, once the commit is complete, acks exactly those
   (``ack`` XACKs an id even if this run never read it) before this spout reads its pending
   entries; a crash before the commit decision rolls the state back and the entries are counted
   once when re-delivered. Counts stay exact at every kill point
   (``tests/recovery/test_recovery_driver``).

Reads never block: ``XREADGROUP`` without ``BLOCK``, ``COUNT batch``; after an empty read the spout
waits ``poll_interval_ms`` before asking Redis again, so an idle topology does not hammer Redis.

A Redis error in ``open`` or ``next_tuple`` stops the topology, as any spout error does; it is
raised as ``StateBackendError`` (the server away or busy) or ``StateBackendRefusedError`` (it
refused: a wrong password, a key that is not a stream, out of memory), whose message says the
cause and the fix (``providers.redis.classify_error``).

``lag()`` says how far behind the topology is: the entries of the stream its consumer group has
not acknowledged yet (never delivered, or delivered and pending). The dashboard and the
``statefulbolts_spout_lag`` metric show it; it drops to 0 once everything is committed.

Settings come from the constructor, else from config keys (so a no-argument topology function
works with ``statefulbolts run ... --conf FILE``): ``redis.stream.url``, ``redis.stream.key``,
``redis.stream.group``, validated by ``RedisStreamConfig`` when the spout opens. The default
group is the topology name; a new group starts at the beginning of the stream (``start_id="0"``;
``"$"`` for only new entries). The connection is made by the connectors' shared connection code
(``_connection``: ``providers.redis.connect``, the project's one way to make a client).

Example:
    >>> from statefulbolts import TopologyBuilder  # doctest: +SKIP
    >>> url = "redis://127.0.0.1:6379/0"
    >>> load_stream(url, "sentences", ["the cow jumped"])  # doctest: +SKIP
    1
    >>> builder = TopologyBuilder()  # doctest: +SKIP
    >>> spout = RedisStreamSpout("sentences", redis_url=url, batch=500)
    >>> builder.set_spout("sentences", spout)  # doctest: +SKIP

From a shell: ``python -m statefulbolts.connectors.redis load --url URL --stream NAME FILE``
adds the lines of ``FILE`` (``-``: stdin) as entries; ``... info --url URL --stream NAME`` prints
the stream's length and, per group, its pending count, as JSON.

Needs redis-py: ``pip install 'statefulbolts[redis]'``.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import logging
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from pydantic import Field

from statefulbolts.collectors import SpoutOutputCollector
from statefulbolts.components import OutputFieldsDeclarer, Spout
from statefulbolts.config import Config, read_setting
from statefulbolts.connectors.redis._connection import (
    DEFAULT_URL,
    URL_KEY,
    RedisConnectorConfig,
    connect,
    raise_backend_errors,
    require_redis,
    server,
    text,
)
from statefulbolts.context import TopologyContext
from statefulbolts.errors import ConfigError
from statefulbolts.tuples import Fields

__all__ = [
    "GROUP_KEY",
    "STREAM_KEY",
    "RedisStreamConfig",
    "RedisStreamSpout",
    "entry_values",
    "load_stream",
    "main",
    "pending_count",
]

log = logging.getLogger(__name__)

STREAM_KEY: Final = "redis.stream.key"
GROUP_KEY: Final = "redis.stream.group"
_NAME = "RedisStreamSpout"
# XACK ids per command when flushing acknowledgements.
_ACK_CHUNK = 1000


class RedisStreamConfig(RedisConnectorConfig):
    """The topology config keys ``RedisStreamSpout`` reads; an argument given to it wins.

    Example:
        >>> config = RedisStreamConfig.from_conf({STREAM_KEY: "clicks"}, who="doc")
        >>> config.key, config.group, config.url
        ('clicks', None, None)
        >>> try:
        ...     RedisStreamConfig.from_conf({GROUP_KEY: 7}, who="spout 'clicks'")
        ... except ConfigError as exc:
        ...     print(exc)
        spout 'clicks': config 'redis.stream.group': Input should be a valid string (got 7)
    """

    key: str | None = Field(
        None,
        alias=STREAM_KEY,
        description="`RedisStreamSpout`: the stream, when not given as an argument.",
    )
    group: str | None = Field(
        None,
        alias=GROUP_KEY,
        description="`RedisStreamSpout`: the consumer group, when not given as an argument.",
        json_schema_extra={"shown_default": "the topology name"},
    )


def _client(client_or_url: Any) -> tuple[Any, bool]:
    """A client for a URL (``owned``: we close it), or the given client.

    Without a socket timeout, and returning bytes (a client handed in may decode either way:
    the tools decode what they read).
    """
    client = connect(
        client_or_url,
        who="the Redis stream tools",
        decode_responses=None,
        timeout_ms=0,
        shared=False,
    )
    return client, isinstance(client_or_url, str)


def entry_values(
    stream: str | None,
    entry_id: str,
    data: Mapping[Any, Any],
    fields: Sequence[str],
    encoding: str | None,
) -> list[Any]:
    """The values of ``fields`` in a stream entry, decoded with ``encoding`` (``None``: bytes).

    Raises:
        ValueError: the entry lacks one of ``fields``; the message names the entry, the
            stream, the missing fields and those it has.

    Example:
        >>> entry_values("s", "1-0", {b"sentence": b"the cow"}, ["sentence"], "utf-8")
        ['the cow']
    """
    present = {text(k): v for k, v in data.items()}
    missing = [f for f in fields if f not in present]
    if missing:
        msg = (
            f"entry {entry_id} of stream {stream!r} has no field(s) {missing}; it has "
            f"{sorted(present)}; skipped"
        )
        raise ValueError(msg)
    raw = [present[f] for f in fields]
    if encoding is None:
        return raw
    return [v.decode(encoding) if isinstance(v, bytes) else v for v in raw]


class RedisStreamSpout(Spout):
    """Emits the entries of a Redis stream; acks with ``XACK`` after COMMIT; replays the rest.

    Args:
        stream: the stream key (else config ``redis.stream.key``).
        redis_url: ``redis://host:port/db`` (else ``host``/``port``/``db``, else config
            ``redis.stream.url``, else ``redis://localhost:6379/0``).
        host: Redis host, when no URL is given.
        port: Redis port, when no URL is given (default 6379).
        db: database number, when no URL is given (default 0).
        group: consumer group (else config ``redis.stream.group``, else the topology name);
            created with ``MKSTREAM`` if missing.
        consumer: consumer name (default ``<topology>/<component>-<task index>``: the same for a
            restarted driver, which therefore gets back the entries its crashed run held).
        batch: most entries per ``XREADGROUP`` and per ``next_tuple`` call.
        fields: entry fields emitted, in order (default ``("sentence",)``).
        output_fields: the tuple's field names (default: ``fields``).
        encoding: how field values are decoded (``None``: emit bytes).
        start_id: where a group this spout creates starts (``"0"``: the whole stream).
        poll_interval_ms: after an empty read, how long to wait before reading again.
        claim_min_idle_ms: when set, also take over (``XAUTOCLAIM``) entries another consumer
            of the group has held for at least this long (a consumer that no longer exists,
            e.g. after lowering the spout's parallelism). Leave unset while several drivers
            share a group, or a slow transaction's entries may be taken and counted twice.

    Entries without one of ``fields`` are acknowledged, skipped and reported as errors.

    Example:
        >>> spout = RedisStreamSpout("clicks", redis_url="redis://127.0.0.1:6379/0",
        ...                          fields=("user", "url"), batch=500)
        >>> spout.output_fields
        ['user', 'url']
        >>> builder.set_spout("clicks", spout, 2)  # doctest: +SKIP
    """

    # A restarted driver's consumers get back their pending entries, and acked ones are gone.
    durable_source = True

    def __init__(
        self,
        stream: str | None = None,
        *,
        redis_url: str | None = None,
        host: str | None = None,
        port: int = 6379,
        db: int = 0,
        group: str | None = None,
        consumer: str | None = None,
        batch: int = 100,
        fields: Sequence[str] = ("sentence",),
        output_fields: Sequence[str] | None = None,
        encoding: str | None = "utf-8",
        start_id: str = "0",
        poll_interval_ms: float = 50,
        claim_min_idle_ms: int | None = None,
    ) -> None:
        if batch < 1:
            msg = f"RedisStreamSpout: batch must be at least 1, got {batch}"
            raise ValueError(msg)
        if not fields:
            msg = "RedisStreamSpout: fields must name at least one entry field"
            raise ValueError(msg)
        names = list(output_fields) if output_fields is not None else list(fields)
        if len(names) != len(fields):
            msg = (
                f"RedisStreamSpout: output_fields {names} must have one name per entry field "
                f"{list(fields)}"
            )
            raise ValueError(msg)
        if redis_url is not None and host is not None:
            msg = "RedisStreamSpout: give redis_url or host/port/db, not both"
            raise ValueError(msg)
        self.stream = stream
        self.redis_url = redis_url
        self.host, self.port, self.db = host, port, db
        self.group = group
        self.consumer = consumer
        self.batch = batch
        self.fields = list(fields)
        self.output_fields = names
        self.encoding = encoding
        self.start_id = start_id
        self.poll_interval_ms = poll_interval_ms
        self.claim_min_idle_ms = claim_min_idle_ms
        self._reset()

    def _reset(self) -> None:
        self._client: Any = None
        self._collector: SpoutOutputCollector | None = None
        self._history = True  # still re-reading this consumer's pending entries
        self._cursor = "0"
        self._claim_cursor = "0-0"
        self._buffer: collections.deque[tuple[str, list[Any]]] = collections.deque()
        self._replay: collections.OrderedDict[str, None] = collections.OrderedDict()
        self._in_flight: dict[str, list[Any]] = {}
        self._acks: list[str] = []
        self._next_read = 0.0
        self._max_pending = 0
        self.redelivered = 0
        self.replayed = 0
        self.acked = 0

    def __getstate__(self) -> dict[str, Any]:
        # The spout is shipped to the driver before ``open``: never a live connection.
        state = dict(self.__dict__)
        state["_client"] = None
        return state

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """The default stream, with ``output_fields``."""
        declarer.declare(Fields(self.output_fields))

    # ----------------------------------------------------------------- lifecycle
    def open(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: SpoutOutputCollector
    ) -> None:
        """Connect, create the group if missing, and start with this consumer's pending entries.

        Raises:
            ConfigError: no stream is named, or a ``redis.stream.*`` key has a wrong type.
            ProviderConfigError: the URL or host is not a valid Redis address.
        """
        redis = require_redis(_NAME)
        from providers.redis import reply_code

        self._reset()
        self._collector = collector
        self._max_pending = read_setting(conf, Config.TOPOLOGY_MAX_SPOUT_PENDING) or 0
        who = f"{_NAME} {context.this_component_id!r}"
        config = RedisStreamConfig.from_conf(conf, who=who)
        self.stream = self.stream or config.key
        if not self.stream:
            msg = (
                f"spout {context.this_component_id!r}: no stream key; pass stream= to "
                f"{_NAME} or set {STREAM_KEY!r}"
            )
            raise ConfigError(msg)
        self.group = self.group or config.group or context.topology_name
        if self.consumer is None:
            # The task's namespace: the same for a restarted driver.
            self.consumer = context.state_namespace()
        target = server(config, url=self.redis_url, host=self.host, port=self.port, db=self.db)
        # Its own client, with no socket timeout (reads never block), returning bytes: the spout
        # decodes entries itself (``encoding``).
        self._client = connect(target, who=who, decode_responses=None, timeout_ms=0, shared=False)
        with self._backend("consumer group creation"):
            try:
                self._client.xgroup_create(self.stream, self.group, id=self.start_id, mkstream=True)
                log.info("created consumer group %r on stream %r", self.group, self.stream)
            except redis.exceptions.ResponseError as exc:
                if reply_code(exc) != "BUSYGROUP":  # BUSYGROUP: the group exists already
                    raise
        log.info(
            "spout %s reads stream %r as consumer %r of group %r",
            context.this_component_id,
            self.stream,
            self.consumer,
            self.group,
        )

    def deactivate(self) -> None:
        """Send the acknowledgements still queued."""
        self._flush_acks()

    def close(self) -> None:
        """Send queued acknowledgements and disconnect."""
        if self._client is not None:
            self._flush_acks()
            self._client.close()
            self._client = None

    # ----------------------------------------------------------------- reading
    def next_tuple(self) -> None:
        """Emit up to ``batch`` entries: replays first, then this consumer's pending, then new.

        At most one read from Redis per call, and never more entries in flight than
        ``topology.max.spout.pending`` (when set), so a transaction that starts right after a
        commit still gets a full batch.
        """
        self._flush_acks()
        room = self.batch
        if self._max_pending:
            live = len(self._in_flight) - len(self._replay)
            room = min(room, self._max_pending - live)
        read = False
        while room > 0:
            if self._replay:
                entry_id, _ = self._replay.popitem(last=False)
                values = self._in_flight.get(entry_id)
                if values is None:
                    continue
                self.replayed += 1
            elif self._buffer:
                entry_id, values = self._buffer.popleft()
                self._in_flight[entry_id] = values
            elif not read:
                read = True
                self._fill(room)
                continue
            else:
                break
            self._emit(entry_id, values)
            room -= 1

    def _emit(self, entry_id: str, values: list[Any]) -> None:
        assert self._collector is not None  # noqa: S101 - open() ran
        self._collector.emit(values, message_id=entry_id)

    def _fill(self, count: int) -> None:
        """Read up to ``count`` entries into the buffer (no further ahead than may be emitted)."""
        if self._history:
            got = self._read(self._cursor, count)
            if got:
                self._cursor = got[-1][0]
                self.redelivered += self._take(got)
                return
            self._history = False
            if self.redelivered:
                log.info(
                    "consumer %r got back %d pending entries of stream %r",
                    self.consumer,
                    self.redelivered,
                    self.stream,
                )
        now = time.monotonic()
        if now < self._next_read:
            return
        if self.claim_min_idle_ms is not None and self._claim(count):
            return
        got = self._read(">", count)
        if got:
            self._take(got)
        else:
            self._next_read = now + self.poll_interval_ms / 1000.0

    def _backend(self, step: str) -> contextlib.AbstractContextManager[None]:
        """Turn a Redis error into an outage (``StateBackendError``) or a refusal.

        ``providers.redis.classify_error`` decides; a refusal (a wrong password, a key that is
        not a stream, ...) names its cause and fix. Either stops the topology (``next_tuple``
        and ``open`` errors do): the spout holds no state to wait for.
        """
        return raise_backend_errors(
            self._client,
            step=step,
            subject=f"stream {self.stream!r} (group {self.group!r})",
            keys={self.stream: "stream"},
            settings=f"the URL or host given to {_NAME}, or {URL_KEY!r}",
        )

    def _read(self, from_id: str, count: int) -> list[tuple[str, Any]]:
        with self._backend("read"):
            reply = self._client.xreadgroup(
                self.group, self.consumer, {self.stream: from_id}, count=count
            )
        if not reply:
            return []
        return [(text(entry_id), data) for entry_id, data in reply[0][1]]

    def _claim(self, count: int) -> bool:
        with self._backend("claim"):
            reply = self._client.xautoclaim(
                self.stream,
                self.group,
                self.consumer,
                self.claim_min_idle_ms,
                start_id=self._claim_cursor,
                count=count,
            )
        self._claim_cursor = text(reply[0])
        entries = [(text(entry_id), data) for entry_id, data in reply[1]]
        if entries:
            log.info("consumer %r claimed %d idle entries", self.consumer, len(entries))
        return self._take(entries) > 0

    def _take(self, entries: Iterable[tuple[str, Any]]) -> int:
        """Buffer readable entries; acknowledge (and report) the unusable ones."""
        taken = 0
        for entry_id, data in entries:
            if entry_id in self._in_flight:
                continue  # already emitted by this run (a claim can return our own entries)
            values = self._values(entry_id, data)
            if values is None:
                self._acks.append(entry_id)
                continue
            self._buffer.append((entry_id, values))
            taken += 1
        return taken

    def _values(self, entry_id: str, data: Any) -> list[Any] | None:
        if not data:
            log.warning("entry %s of stream %r was deleted; skipping it", entry_id, self.stream)
            return None
        try:
            return entry_values(self.stream, entry_id, data, self.fields, self.encoding)
        except ValueError as error:
            log.warning("%s", error)
            if self._collector is not None:
                self._collector.report_error(error)
            return None

    def lag(self) -> int | None:
        """Entries of the stream the group has not acknowledged: never delivered, or pending.

        One ``XINFO GROUPS`` call; ``None`` when the spout is not open, when Redis cannot say
        (the group's ``lag`` is unknown after entries were deleted, or Redis is older than 7)
        or cannot be reached. It may be called from another thread than the driver loop's
        (redis-py's client is thread-safe).
        """
        client = self._client
        if client is None or not self.stream:
            return None
        redis = require_redis(_NAME)
        try:
            groups = client.xinfo_groups(self.stream)
        except redis.exceptions.RedisError as exc:
            log.debug("lag of stream %r unknown: %s", self.stream, exc)
            return None
        for group in groups:
            if text(group["name"]) == self.group:
                undelivered = group.get("lag")
                if undelivered is None:
                    return None
                return int(undelivered) + int(group["pending"])
        return None

    # ----------------------------------------------------------------- ack / fail
    def ack(self, msg_id: Any) -> None:
        """The transaction that carried ``msg_id`` committed: ``XACK`` it (batched).

        The id need not be in flight in this run: after a driver crash the runtime acks the
        entries of a transaction that had committed (its saved manifest) before this spout reads
        its pending entries, and those are XACKed so they are not delivered again.
        """
        self._in_flight.pop(msg_id, None)
        self._replay.pop(msg_id, None)
        self._acks.append(msg_id)
        self.acked += 1
        if len(self._acks) >= _ACK_CHUNK:
            self._flush_acks()

    def fail(self, msg_id: Any) -> None:
        """Queue ``msg_id`` for re-emission (it is still pending in the group)."""
        if msg_id in self._in_flight:
            self._replay[msg_id] = None

    def _flush_acks(self) -> None:
        if not self._acks or self._client is None:
            return
        acks, self._acks = self._acks, []
        with self._backend("acknowledgement (XACK)"):
            for i in range(0, len(acks), _ACK_CHUNK):
                self._client.xack(self.stream, self.group, *acks[i : i + _ACK_CHUNK])

    def __repr__(self) -> str:
        return (
            f"RedisStreamSpout(stream={self.stream!r}, group={self.group!r}, "
            f"consumer={self.consumer!r})"
        )


# --------------------------------------------------------------------- helpers
def load_stream(
    redis_client_or_url: Any,
    stream: str,
    lines: Iterable[str],
    *,
    field: str = "sentence",
    batch: int = 1000,
) -> int:
    """``XADD`` each line as an entry ``{field: line}``, in pipelined batches; returns the count.

    Example:
        >>> load_stream("redis://127.0.0.1:6379/0", "sentences", ["a b", "c"])  # doctest: +SKIP
        2
    """
    client, owned = _client(redis_client_or_url)
    added = 0
    try:
        pipe = client.pipeline(transaction=False)
        queued = 0
        for line in lines:
            pipe.xadd(stream, {field: line})
            queued += 1
            if queued >= batch:
                pipe.execute()
                added += queued
                queued = 0
        if queued:
            pipe.execute()
            added += queued
    finally:
        if owned:
            client.close()
    return added


def pending_count(redis_client_or_url: Any, stream: str, group: str) -> int:
    """How many entries of ``stream`` the consumer ``group`` has delivered and not acknowledged."""
    client, owned = _client(redis_client_or_url)
    try:
        return int(client.xpending(stream, group)["pending"])
    finally:
        if owned:
            client.close()


def _info(url: str, stream: str) -> dict[str, Any]:
    client, _ = _client(url)
    try:
        if not client.exists(stream):
            return {"stream": stream, "exists": False}
        groups = [
            {
                "group": text(g["name"]),
                "consumers": int(g["consumers"]),
                "pending": int(g["pending"]),
                "last_delivered_id": text(g["last-delivered-id"]),
            }
            for g in client.xinfo_groups(stream)
        ]
        return {"stream": stream, "exists": True, "length": client.xlen(stream), "groups": groups}
    finally:
        client.close()


def main(argv: list[str] | None = None) -> int:
    """``python -m statefulbolts.connectors.redis load|info``: fill a stream, or inspect it."""
    parser = argparse.ArgumentParser(
        prog="python -m statefulbolts.connectors.redis",
        description="Fill or inspect a Redis stream.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    load = sub.add_parser("load", help="XADD the lines of files (or stdin) as entries")
    info = sub.add_parser("info", help="length and per-group pending count, as JSON")
    for p in (load, info):
        p.add_argument("--url", default=DEFAULT_URL, help=f"Redis URL (default {DEFAULT_URL})")
        p.add_argument("--stream", required=True, help="the stream key")
    load.add_argument("--field", default="sentence", help="entry field (default sentence)")
    load.add_argument("files", nargs="*", default=["-"], help="files of lines ('-': stdin)")
    args = parser.parse_args(argv)
    if args.command == "info":
        print(json.dumps(_info(args.url, args.stream)))
        return 0
    total = 0
    for name in args.files:
        if name == "-":
            lines = (line.rstrip("\n") for line in sys.stdin)
            total += load_stream(args.url, args.stream, lines, field=args.field)
            continue
        with open(name, encoding="utf-8") as fh:
            lines = (line.rstrip("\n") for line in fh)
            total += load_stream(args.url, args.stream, lines, field=args.field)
    print(json.dumps({"stream": args.stream, "added": total}))
    return 0

