"""Where the Kafka-to-Kafka demo publishes its change log: one small *target* per sink.

``examples.kafka_to_kafka`` and its crash demo read sentences from Kafka and keep the counts
in Redis; each transaction's changed counts go to a sink, chosen with ``--sink``. A target is
everything the demos know of that sink:

- ``add_arguments`` / ``from_args``: its command-line options (every target's are offered,
  under its own heading), and the target made from them;
- ``prepare``: make what the sink writes to when it is missing (a topic, a table);
- ``conf``: the config keys its sink reads, for the demo's config (a child driver run by
  ``statefulbolts run`` gets them in its config file);
- ``sink``: the sink, built from those keys alone, and ``spec``: a function of no arguments
  that builds the demo's topology with it (for ``statefulbolts run``);
- ``read_log``: the change log read back, every update (``Update``) in the order it was
  published, and what the target shows of publishes that failed (``ChangeLog``).

The verdict (``kafka_to_kafka.judge``) is the same for every target: for every word, each
published count is the previous one plus its delta, strictly increasing, and the last is the
plain count. A new sink joins the demos as a new target here, with its name in ``TARGETS``.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar, NamedTuple, Self

from statefulbolts import StormTopology
from statefulbolts.connectors.kafka import PUBLISH_HEADER, TXID_HEADER, KafkaSink, ProducerRecord
from statefulbolts.connectors.sinks import Sink

__all__ = [
    "TARGETS",
    "ChangeLog",
    "FilesTarget",
    "KafkaTarget",
    "PostgresTarget",
    "RedisTarget",
    "SinkTarget",
    "Update",
    "demo_topology",
    "files_topology",
    "postgres_topology",
    "read_topic",
    "redis_records",
    "redis_topology",
    "target_named",
    "update_record",
    "update_row",
]


class Update(NamedTuple):
    """One published change of a word's count: the transaction's delta and the new count."""

    word: str
    count: int
    delta: int
    txid: int  # the transaction that staged it (-1: the target does not say)


class ChangeLog(NamedTuple):
    """What a target holds: the updates, each word's in the order they were published.

    ``aborted_records`` / ``aborted_attempts``: records a failed publish left visible and the
    target can tell apart (a Kafka broker that shows aborted transactions), not in
    ``updates``; ``problems``: what the target's own reading found wrong.
    """

    updates: list[Update]
    aborted_records: int = 0
    aborted_attempts: int = 0
    problems: list[str] = []  # noqa: RUF012 - a NamedTuple default, never mutated


class SinkTarget(ABC):
    """One sink the demos can publish to (the module docstring)."""

    name: ClassVar[str]
    spec: ClassVar[str]  # MODULE:ATTR of the demo's topology with this sink

    @staticmethod
    @abstractmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """Add the target's options (all of them optional: every target's are offered)."""

    @classmethod
    @abstractmethod
    def from_args(cls, args: argparse.Namespace, run_id: str) -> Self:
        """The target of the parsed ``args``; ``run_id`` names what the run makes."""

    @abstractmethod
    def describe(self) -> str:
        """Where the updates go, for the demos' output (``'counts'``)."""

    @abstractmethod
    def prepare(self) -> list[str]:
        """Make what the sink writes to if it is missing; what was made."""

    @abstractmethod
    def conf(self) -> dict[str, Any]:
        """The config keys the sink reads."""

    @staticmethod
    @abstractmethod
    def sink() -> Sink:
        """The demo's sink, its settings read from the config (``conf``)."""

    @abstractmethod
    def read_log(self) -> ChangeLog:
        """The change log as a reader of the target sees it."""


def demo_topology(target: type[SinkTarget]) -> StormTopology:
    """The demo's topology publishing with ``target``'s sink (for a target's ``spec``)."""
    from .kafka_to_kafka import build

    return build(sink=target.sink())


# ------------------------------------------------------------------ Kafka
def update_record(tuple_: Any) -> ProducerRecord:
    """The record of an update: key the word, value ``{"count": c, "delta": d}``."""
    word, count, delta = tuple_.values
    return ProducerRecord({"count": count, "delta": delta}, key=word)


class KafkaTarget(SinkTarget):
    """An output topic, read back as a ``read_committed`` consumer.

    Each sink task writes partitions of its own (``--partitioning task``, the default):
    ``publish`` is grouped by word, so a word's updates still go through one task, into one
    partition, in order. By key (``--partitioning key``) works as well on Apache Kafka; the
    tests' broker (Tansu) loses, now and then, a commit it acknowledged when two producers'
    transactions are open on one partition at once, so it needs each task on partitions of
    its own.

    Records of a publish that was aborted are not part of the change log. Apache Kafka never
    shows them to a ``read_committed`` reader; a broker that does (Tansu: its Fetch lists no
    aborted transactions) shows them, and ``read_log`` tells them apart by the
    ``statefulbolts.publish`` header the sink gives every record: two publish attempts of one
    lane and transaction mean all but the last one aborted (a producer of the lane fences the
    earlier ones before it writes). They are counted (``aborted_records``), never hidden
    silently.
    """

    name = "kafka"
    spec = "examples.kafka_to_kafka:topology"

    def __init__(self, bootstrap: str, topic: str, partitioning: str = "task") -> None:
        self.bootstrap, self.topic, self.partitioning = bootstrap, topic, partitioning

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """``--out-topic``, ``--partitioning``."""
        group = parser.add_argument_group("--sink kafka")
        group.add_argument("--out-topic", help="the output topic (default: counts-<run id>)")
        group.add_argument(
            "--partitioning",
            choices=["task", "key"],
            default="task",
            help="where an update goes: the partition of its sink task (the default), or by "
            "its key (the word); see examples._sink_targets.KafkaTarget",
        )

    @classmethod
    def from_args(cls, args: argparse.Namespace, run_id: str) -> Self:
        """The output topic of ``--out-topic``, on the brokers of ``--bootstrap``."""
        return cls(args.bootstrap, args.out_topic or f"counts-{run_id}", args.partitioning)

    def describe(self) -> str:
        """The topic's name, quoted."""
        return repr(self.topic)

    def prepare(self) -> list[str]:
        """The output topic, two partitions, if it is missing."""
        from .kafka_to_kafka import ensure_topics

        return ensure_topics(self.bootstrap, [self.topic])

    def conf(self) -> dict[str, Any]:
        """The brokers, the topic, the partitioning."""
        return {
            "kafka.bootstrap.servers": self.bootstrap,
            "sink.kafka.topic": self.topic,
            "sink.kafka.partitioning": self.partitioning,
        }

    @staticmethod
    def sink() -> Sink:
        """``KafkaSink`` of the updates, JSON values keyed by word; the rest from the config."""
        # With the txid headers: the verdict tells a failed attempt's records apart by them.
        return KafkaSink(mapper=update_record, value_serializer="json", txid_headers=True)

    def read_log(self) -> ChangeLog:
        """The topic's records as a ``read_committed`` reader gets them (the class docstring)."""
        messages = read_topic(self.bootstrap, self.topic)
        problems: list[str] = []
        kept, aborted_attempts = _committed_attempts(messages, problems)
        updates, aborted_records = [], 0
        for m in messages:
            if _header(m, PUBLISH_HEADER) not in kept:
                aborted_records += 1
                continue
            value = json.loads(m.value())
            txid = int(_header(m, TXID_HEADER) or -1)
            updates.append(Update(m.key().decode(), value["count"], value["delta"], txid))
        return ChangeLog(updates, aborted_records, aborted_attempts, problems)


def read_topic(bootstrap: str, topic: str, timeout_s: float = 60.0) -> list[Any]:
    """Every record a ``read_committed`` reader gets from ``topic``, each partition to its end.

    The end is where the fetches say the partition ends, never a listed offset (a broker may
    list the end short after a batch: Tansu does).
    """
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "kafka-to-kafka-verify",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    try:
        partitions = sorted(reader.list_topics(topic, timeout=timeout_s).topics[topic].partitions)
        reader.assign([TopicPartition(topic, p, 0) for p in partitions])
        got: dict[int, list[Any]] = {p: [] for p in partitions}
        open_ = set(partitions)
        deadline = time.monotonic() + timeout_s
        while open_ and time.monotonic() < deadline:
            message = reader.poll(0.2)
            if message is None:
                continue
            error = message.error()
            if error is None:
                got[message.partition()].append(message)
            elif error.code() == KafkaError._PARTITION_EOF:
                open_.discard(message.partition())
            else:
                msg = f"reading {topic!r}: {error}"
                raise RuntimeError(msg)
        if open_:
            msg = f"partitions {sorted(open_)} of {topic!r} not read to their end in {timeout_s} s"
            raise RuntimeError(msg)
        return [m for p in partitions for m in got[p]]
    finally:
        reader.close()


def _header(message: Any, name: str) -> str | None:
    for key, value in message.headers() or ():
        if key == name and value is not None:
            return str(value.decode())
    return None


def _committed_attempts(messages: Sequence[Any], problems: list[str]) -> tuple[set[str], int]:
    """The publish attempts whose records count (per lane and commit, the last), and how many not.

    Attempts of one lane and COMMIT(t) run one after the other (each fences the one before,
    and only the last can commit), so in a partition two attempts both wrote to, the earlier
    one's records all come before the later one's.
    """
    spans: dict[tuple[str, str], dict[str, dict[int, list[int]]]] = {}
    for m in messages:
        attempt = _header(m, PUBLISH_HEADER)
        if attempt is None:
            problems.append(f"record at {m.partition()}/{m.offset()} has no publish header")
            continue
        lane, commit, _ = attempt.split("/", 2)
        span = spans.setdefault((lane, commit), {}).setdefault(attempt, {})
        low, high = span.get(m.partition(), [m.offset(), m.offset()])
        span[m.partition()] = [min(low, m.offset()), max(high, m.offset())]
    kept: set[str] = set()
    aborted = 0
    for (lane, commit), attempts in spans.items():
        last = [
            a
            for a in attempts
            if all(
                attempts[a][p][0] > attempts[b][p][1]
                for b in attempts
                if b != a
                for p in set(attempts[a]) & set(attempts[b])
            )
            and all(set(attempts[a]) & set(attempts[b]) for b in attempts if b != a)
        ]
        if len(last) != 1:
            problems.append(
                f"lane {lane} COMMIT({commit}): {len(attempts)} publish attempts, and no one of "
                "them wrote after all the others"
            )
            kept.update(attempts)
            continue
        kept.add(last[0])
        aborted += len(attempts) - 1
    return kept, aborted


# ------------------------------------------------------------------ Redis
def redis_records(tuple_: Any) -> list[Any]:
    """An update as three writes: the stream entry, the last count, and the delta added up."""
    from statefulbolts.connectors.redis import HIncrBy, HSet, XAdd

    word, count, delta = tuple_.values
    return [
        XAdd("updates", {"word": word, "count": count, "delta": delta}),
        HSet("counts", word, count),
        HIncrBy("totals", word, delta),
    ]


class RedisTarget(SinkTarget):
    """Keys of a Redis (``--sink-redis-url``, else ``--redis-url``), under a prefix per run.

    ``RedisSink`` writes each update three ways in one script per lane and commit: an entry
    of the stream ``<prefix>updates`` (with its txid), the word's field of the hash
    ``<prefix>counts`` (``HSET`` of the count) and of ``<prefix>totals`` (``HINCRBY`` of the
    delta). The stream is the change log; the two hashes must both hold each word's last
    count, the second only if no delta was added twice or lost (``read_log`` says where not).
    """

    name = "redis"
    spec = "examples._sink_targets:redis_topology"

    def __init__(self, url: str, prefix: str) -> None:
        self.url, self.prefix = url, prefix

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """``--sink-redis-url``."""
        group = parser.add_argument_group("--sink redis")
        group.add_argument(
            "--sink-redis-url", help="the Redis the updates go to (default: --redis-url)"
        )

    @classmethod
    def from_args(cls, args: argparse.Namespace, run_id: str) -> Self:
        """The Redis of ``--sink-redis-url`` or ``--redis-url``; keys prefixed ``k2k-<run>:``.

        Raises:
            ValueError: neither URL is given.
        """
        url = args.sink_redis_url or args.redis_url
        if not url:
            msg = "--sink redis needs a Redis to publish to: give --redis-url or --sink-redis-url"
            raise ValueError(msg)
        return cls(url, f"k2k-{run_id}:")

    def describe(self) -> str:
        """The stream's key."""
        return f"Redis stream {self.prefix + 'updates'!r}"

    def prepare(self) -> list[str]:
        """Nothing: Redis makes keys as they are written."""
        return []

    def conf(self) -> dict[str, Any]:
        """The server and the key prefix."""
        return {"sink.redis.url": self.url, "sink.redis.key.prefix": self.prefix}

    @staticmethod
    def sink() -> Sink:
        """``RedisSink`` of the updates (``redis_records``); the rest from the config."""
        from statefulbolts.connectors.redis import RedisSink

        return RedisSink(redis_records)

    def read_log(self) -> ChangeLog:
        """The stream's entries in order; the two hashes checked against its last counts."""
        import redis

        client = redis.Redis.from_url(self.url, decode_responses=True)
        try:
            entries = client.xrange(self.prefix + "updates")
            counts = client.hgetall(self.prefix + "counts")
            totals = client.hgetall(self.prefix + "totals")
        finally:
            client.close()
        updates = [
            Update(e["word"], int(e["count"]), int(e["delta"]), int(e["statefulbolts.txid"]))
            for _, e in entries
        ]
        last = {u.word: str(u.count) for u in updates}
        problems = [
            f"{word!r}: hash {name!r} holds {held.get(word)}, the stream's last count {want}"
            for name, held in (("counts", counts), ("totals", totals))
            for word, want in sorted(last.items())
            if held.get(word) != want
        ]
        problems += [f"{w!r} is in the totals, not in the stream" for w in set(totals) - set(last)]
        return ChangeLog(updates, problems=problems)


def redis_topology() -> StormTopology:
    """For ``statefulbolts run``: publishing to Redis, the server and prefix from the config."""
    return demo_topology(RedisTarget)


# ------------------------------------------------------------------ files
def update_row(tuple_: Any) -> dict[str, Any]:
    """The row of an update: the word, its count and the delta."""
    word, count, delta = tuple_.values
    return {"word": word, "count": count, "delta": delta}


class FilesTarget(SinkTarget):
    """Part files of a directory (``--out-dir``, else a new one), read through its manifest.

    ``FileSink`` writes one part file per lane and committed transaction, in ``--file-format``
    (``jsonl``, ``csv``, ``parquet``), and commits it with a manifest entry; the change log is
    the committed parts' rows, each lane's parts in txid order (a word's updates all go
    through one lane).
    """

    name = "files"
    spec = "examples._sink_targets:files_topology"

    def __init__(self, path: str, file_format: str = "jsonl") -> None:
        self.path, self.file_format = path, file_format

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """``--out-dir``, ``--file-format``."""
        group = parser.add_argument_group("--sink files")
        group.add_argument("--out-dir", help="the directory (default: a new temporary one)")
        group.add_argument(
            "--file-format",
            choices=["jsonl", "csv", "parquet"],
            default="jsonl",
            help="the part files' format (default jsonl)",
        )

    @classmethod
    def from_args(cls, args: argparse.Namespace, run_id: str) -> Self:
        """The directory of ``--out-dir``, else ``k2k-files-<run>-*`` in the temp folder."""
        path = args.out_dir or tempfile.mkdtemp(prefix=f"k2k-files-{run_id}-")
        return cls(os.path.abspath(path), args.file_format)

    def describe(self) -> str:
        """The directory."""
        return f"files in {self.path!r}"

    def prepare(self) -> list[str]:
        """The directory, if it is missing."""
        if os.path.isdir(self.path):
            return []
        os.makedirs(self.path)
        return [self.path]

    def conf(self) -> dict[str, Any]:
        """The directory and the format."""
        return {"sink.files.path": self.path, "sink.files.format": self.file_format}

    @staticmethod
    def sink() -> Sink:
        """``FileSink`` of the updates (``update_row``); directory and format from the config."""
        from statefulbolts.connectors.files import FileSink

        return FileSink(mapper=update_row, columns=["word", "count", "delta"])

    def read_log(self) -> ChangeLog:
        """The rows of the committed parts, each with its part's txid (CSV's as text)."""
        from statefulbolts.connectors.files import read_committed_parts, read_part

        updates = []
        for part in read_committed_parts(self.path):
            for row in read_part(part.path):
                count, delta = int(row["count"]), int(row["delta"])
                updates.append(Update(str(row["word"]), count, delta, part.txid))
        return ChangeLog(updates)


def files_topology() -> StormTopology:
    """For ``statefulbolts run``: publishing to files, the directory from the config."""
    return demo_topology(FilesTarget)


# ------------------------------------------------------------------ PostgreSQL
class PostgresTarget(SinkTarget):
    """A change-log table: one row per update, in the order the updates were published.

    ``PostgresSink`` inserts each update as a new row (no upsert key: an update published
    twice would be two rows, and the verdict would see the count repeated), with the txid of
    the transaction that made it (``txid_column``); ``seq``, a ``bigserial``, numbers the rows
    as they were written, so a word's updates read in ``seq`` order are in the order its lane
    published them. Nothing a failed publish wrote is ever seen: it was rolled back.
    """

    name = "postgres"
    spec = "examples._sink_targets:postgres_topology"
    COLUMNS = ("word", "count", "delta")

    def __init__(self, dsn: str, table: str) -> None:
        self.dsn, self.table = dsn, table

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        """``--dsn``, ``--table``."""
        group = parser.add_argument_group("--sink postgres")
        group.add_argument("--dsn", help="the database, a libpq connection string (required)")
        group.add_argument(
            "--table", help="the change-log table, made if missing (default: k2k_changes_<run id>)"
        )

    @classmethod
    def from_args(cls, args: argparse.Namespace, run_id: str) -> Self:
        """The table of ``--table`` in the database of ``--dsn``.

        Raises:
            ValueError: no ``--dsn``.
        """
        if not args.dsn:
            msg = "--sink postgres needs --dsn (e.g. postgresql://postgres@127.0.0.1:5432/postgres)"
            raise ValueError(msg)
        return cls(args.dsn, args.table or f"k2k_changes_{run_id}")

    def describe(self) -> str:
        """``PostgreSQL table '<table>'``."""
        return f"PostgreSQL table {self.table!r}"

    def prepare(self) -> list[str]:
        """The change-log table, if it is missing."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            name = sql.Identifier(self.table).as_string(conn)
            if conn.execute("SELECT to_regclass(%s)", [name]).fetchone() != (None,):
                return []
            conn.execute(
                sql.SQL(
                    "CREATE TABLE IF NOT EXISTS {} (seq bigserial PRIMARY KEY, word text NOT NULL,"
                    " count bigint NOT NULL, delta bigint NOT NULL, txid bigint NOT NULL)"
                ).format(sql.Identifier(self.table))
            )
        return [self.table]

    def conf(self) -> dict[str, Any]:
        """The database and the table."""
        return {"sink.postgres.dsn": self.dsn, "sink.postgres.table": self.table}

    @staticmethod
    def sink() -> Sink:
        """``PostgresSink`` inserting each update with its txid; the rest from the config."""
        from statefulbolts.connectors.postgres import PostgresSink  # the postgres extra

        return PostgresSink(columns=PostgresTarget.COLUMNS, txid_column="txid")

    def read_log(self) -> ChangeLog:
        """The table's rows in the order they were written (``seq``)."""
        import psycopg
        from psycopg import sql

        with psycopg.connect(self.dsn) as conn:
            rows = conn.execute(
                sql.SQL("SELECT word, count, delta, txid FROM {} ORDER BY seq").format(
                    sql.Identifier(self.table)
                )
            ).fetchall()
        return ChangeLog([Update(*row) for row in rows])


def postgres_topology() -> StormTopology:
    """For ``statefulbolts run``: the demo publishing to PostgreSQL, settings from the config."""
    return demo_topology(PostgresTarget)


# ------------------------------------------------------------------ the choice
TARGETS: dict[str, type[SinkTarget]] = {
    "files": FilesTarget,
    "kafka": KafkaTarget,
    "postgres": PostgresTarget,
    "redis": RedisTarget,
}


def target_named(name: str) -> type[SinkTarget]:
    """The target called ``name`` (``--sink``).

    Raises:
        ValueError: no target of that name.
    """
    try:
        return TARGETS[name]
    except KeyError:
        msg = f"no sink target {name!r}; the demos publish to one of {sorted(TARGETS)}"
        raise ValueError(msg) from None
