"""``KafkaSpout``: Kafka topics read on the executors, a topic-partition a partition.

Each Kafka topic-partition is a partition of the spout, its id ``"<topic>/<n>"`` (``/`` is not
allowed in a topic name), its position the offset of the next record to read: Kafka's own
meaning of a committed offset. The topics are named (``topics=``) or matched by a regular
expression (``pattern=``); the driver lists them again before each transaction (at most once a
second), so new partitions and new matching topics are read from their start (``start``).

The protocol, for each PREPARE (``statefulbolts.partitioned``):

1. **Ends** (driver, ``ends``): three requests over every partition at once fix each
   partition's ``KafkaEnd``: its first offset (``low``), where a reader stops (``end``: the
   last stable offset under ``read_committed``, the log end otherwise) and its log end
   (``high``), with where a partition never read starts (``first``). Every Spark attempt of a
   read task gets the same ends, so it reads the same records, however much was written since.
2. **Read** (task, ``open_reader``): a consumer made for the read is assigned the partition
   at the exact position and returns records until the budget is spent or a record at or past
   ``end`` shows up; the position is then the offset after the last record returned, or
   ``end`` when the reader got there. Offsets a reader is not given (a transaction's markers,
   an aborted transaction's records under ``read_committed``, records compacted away) still
   bring it to ``end``: the broker's end-of-partition notice, or a later record, says nothing
   readable lies before it, so a position never stalls short of an end.
3. **Commit** (driver, ``committed``): once a checkpoint's positions are saved, they are
   committed to the consumer group (``group_id``) as well, without waiting, for lag monitoring
   tools only. Recovery reads the checkpoint, never the group (``start="committed"`` reads the
   group once, for a partition the topology never read).

Gaps: a position before the partition's first offset (retention, ``delete_records``) reads on
from the first offset; a position past the log end (the topic was deleted and made again, or
cut short) reads the partition again from its first offset. Either jump is reported
(``PartitionReader.gap``): a warning in the driver's log naming the partition and the offsets,
and a count on the dashboard and in ``statefulbolts_spout_gaps_total``. Never a stall, never a
silent jump back. Both are decided from the ends the driver fixed, so every attempt of a task
jumps alike.

Faults: a broker away or slow is an outage (``KafkaUnavailableError``, a
``StateBackendError``), in the driver or in a task: waited out with the state backend's
policy (``topology.state.backend.timeout.secs``) and shown as such; a refusal
(authentication) stops the topology; a named topic that does not exist is an error naming it,
before Spark starts under ``statefulbolts run`` (``check_config``).

Lag per partition (``lags``): the last listed end minus the committed position, from what the
driver already knows; the dashboard and ``statefulbolts_spout_partition_lag`` show it.

Example:
    >>> spout = KafkaSpout(["clicks"], bootstrap_servers="127.0.0.1:9092", start="latest")
    >>> spout.output_fields  # nothing connects before the topology runs
    ['topic', 'partition', 'offset', 'key', 'value']
    >>> KafkaPartition.parse("clicks.v2/3")
    KafkaPartition(topic='clicks.v2', partition=3)
    >>> builder.set_spout("clicks", spout, 2)  # doctest: +SKIP

Needs confluent-kafka: ``pip install 'statefulbolts[kafka]'``.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from statefulbolts.components import OutputFieldsDeclarer
from statefulbolts.connectors.kafka._client import (
    Cluster,
    Offsets,
    broker_error,
    consumer,
    error_name,
)
from statefulbolts.connectors.kafka._config import (
    DEFAULT_TIMEOUT_MS,
    PATTERN_KEY,
    TOPIC_NAME,
    TOPICS_KEY,
    KafkaRecordError,
    KafkaSpoutConfig,
    KafkaTopicNotFoundError,
    KafkaUnavailableError,
    check_client_settings,
    client_settings,
    require_kafka,
)
from statefulbolts.connectors.kafka._records import (
    DefaultRecordTranslator,
    KafkaRecord,
    RecordTranslator,
    deserializer,
)
from statefulbolts.context import TopologyContext
from statefulbolts.errors import ConfigError, TopologyError
from statefulbolts.partitioned import Gap, PartitionBatch, PartitionedSpout, PartitionReader
from statefulbolts.tuples import DEFAULT_STREAM, Fields

__all__ = ["KafkaEnd", "KafkaPartition", "KafkaSpout", "RecordReader"]

log = logging.getLogger(__name__)

_NAME = "KafkaSpout"
DEFAULT_BOOTSTRAP = "localhost:9092"
# How long a listing of the topics (and, for has_more, of the offsets) is reused in the driver:
# has_more is asked at every step of an idle driver loop.
_LIST_TTL_S = 1.0
_OFFSETS_TTL_S = 0.5
# Records asked of the consumer per call.
_CONSUME_BATCH = 1000
# One wait of the consumer for records: short, as a partition with markers or aborted records
# before its end brings fewer records than asked, and the end-of-partition notice then ends it.
_WAIT_S = 0.1
_FETCH_WAIT_MS = 10
_STARTS = ("earliest", "latest", "committed")
# What _reset makes: the driver's caches, never pickled with the spout.
_DRIVER_CACHES = frozenset(
    ("_lock", "_cluster", "_resolved", "_listed", "_seen", "_seen_since_commit", "_firsts")
)


class KafkaPartition(NamedTuple):
    """A topic-partition, and its partition id ``"<topic>/<n>"``.

    Example:
        >>> str(KafkaPartition("clicks", 0))
        'clicks/0'
    """

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}/{self.partition}"

    @classmethod
    def parse(cls, text: str) -> KafkaPartition:
        """The topic-partition of a partition id.

        Raises:
            TopologyError: ``text`` is not ``"<topic>/<n>"``.
        """
        topic, slash, number = text.rpartition("/")
        if not (slash and TOPIC_NAME.fullmatch(topic) and number.isdigit()):
            msg = f"{_NAME} partition id {text!r} is not '<topic>/<partition number>'"
            raise TopologyError(msg)
        return cls(topic, int(number))


class KafkaEnd(NamedTuple):
    """One partition's offsets as the driver listed them for one PREPARE (see ``Offsets``).

    ``first``: where the partition starts if it was never read (``start`` resolved).
    """

    low: int
    end: int
    high: int
    first: int


class _Settings(NamedTuple):
    """The spout's settings for one topology config: its arguments over its keys."""

    topics: tuple[str, ...] | None
    pattern: str | None
    group: str
    start: str | int
    isolation: str
    timeout_s: float
    commit: bool
    client: tuple[tuple[str, Any], ...]  # librdkafka's settings, bootstrap.servers included

    @property
    def bootstrap(self) -> str:
        return str(dict(self.client)["bootstrap.servers"])


class KafkaSpout(PartitionedSpout):
    r"""Records of Kafka topics, a topic-partition a partition, its offset the position.

    See the module docstring for the protocol, the gaps and the faults.

    Args:
        topics: the topics (else config ``kafka.topics``); not with ``pattern``.
        pattern: a regular expression; every topic whose whole name matches is read, new ones
            as they appear (else config ``kafka.topic.pattern``).
        bootstrap_servers: ``host:port,...`` (else ``kafka.bootstrap.servers``, else
            ``localhost:9092``).
        group_id: the consumer group the offsets are committed to after each checkpoint, for
            monitoring (else ``kafka.group.id``, else the topology name).
        start: where a partition never read starts: ``"earliest"`` (the default),
            ``"latest"``, ``"committed"`` (the group's offset, else earliest) or a timestamp in
            epoch milliseconds (else ``kafka.start``).
        isolation_level: ``"read_committed"`` (the default) or ``"read_uncommitted"`` (else
            ``kafka.isolation.level``).
        translator: a record to a tuple (default ``DefaultRecordTranslator()``:
            ``topic, partition, offset, key, value``).
        key_deserializer: ``"bytes"``, ``"str"`` (the default), ``"json"``, ``"msgpack"`` or a
            ``Deserializer``.
        value_deserializer: the same, for the value.
        commit_offsets: commit positions to the group (else ``kafka.commit.offsets``, else
            ``True``).

    Example:
        >>> KafkaSpout(pattern=r"sensor-\d+").output_fields
        ['topic', 'partition', 'offset', 'key', 'value']
    """

    def __init__(
        self,
        topics: Sequence[str] | str | None = None,
        *,
        pattern: str | None = None,
        bootstrap_servers: str | None = None,
        group_id: str | None = None,
        start: str | int | None = None,
        isolation_level: str | None = None,
        translator: RecordTranslator | None = None,
        key_deserializer: Any = "str",
        value_deserializer: Any = "str",
        commit_offsets: bool | None = None,
    ) -> None:
        if isinstance(topics, str):
            topics = [topics]
        if topics is not None and pattern is not None:
            msg = f"{_NAME}: give topics or pattern, not both"
            raise ValueError(msg)
        given = {
            TOPICS_KEY: list(topics) if topics is not None else None,
            PATTERN_KEY: pattern,
            "kafka.start": start,
            "kafka.isolation.level": isolation_level,
        }
        try:
            KafkaSpoutConfig.from_conf(given, who=_NAME)
        except ConfigError as exc:  # the arguments' names, not the keys'
            raise ValueError(str(exc).replace("config 'kafka.", "argument for 'kafka.")) from None
        if topics is not None and not topics:
            msg = f"{_NAME}: topics must name at least one topic"
            raise ValueError(msg)
        self.topics = list(topics) if topics is not None else None
        self.pattern = pattern
        self.bootstrap_servers = bootstrap_servers
        self.group_id = group_id
        self.start = start
        self.isolation_level = isolation_level
        self.translator = translator or DefaultRecordTranslator()
        self.key_deserializer = deserializer(key_deserializer)
        self.value_deserializer = deserializer(value_deserializer)
        self.commit_offsets = commit_offsets
        self._reset()

    def _reset(self) -> None:
        """The driver's caches: none is pickled with the spout (see ``__getstate__``)."""
        self._lock = threading.Lock()
        self._cluster: Cluster | None = None
        self._resolved: tuple[Mapping[str, Any], _Settings] | None = None
        # The last listings, each with the topology config it was made for: a driver started
        # again in the same process (another config object) lists afresh.
        self._listed: tuple[Mapping[str, Any], float, list[str]] | None = None
        # The last offsets listing, and whether it was taken since the last commit: only such a
        # listing may tell has_more that a partition holds nothing after its committed position.
        self._seen: tuple[Mapping[str, Any] | None, float, dict[str, KafkaEnd]] = (None, 0.0, {})
        self._seen_since_commit = False
        self._firsts: dict[KafkaPartition, int] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if k not in _DRIVER_CACHES}

    def __setstate__(self, state: dict[str, Any]) -> None:
        vars(self).update(state)
        self._reset()

    @property
    def output_fields(self) -> list[str]:
        """The fields of the default stream (of the first stream, if none is the default)."""
        streams = self.translator.streams()
        return list(streams.get(DEFAULT_STREAM, next(iter(streams.values()))))

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """The translator's streams and fields."""
        for stream, fields in self.translator.streams().items():
            if stream == DEFAULT_STREAM:
                declarer.declare(Fields(list(fields)))
            else:
                declarer.declare_stream(stream, Fields(list(fields)))

    def __repr__(self) -> str:
        named = f"pattern={self.pattern!r}" if self.pattern is not None else repr(self.topics)
        return f"{_NAME}({named})"

    # ----------------------------------------------------------------- settings
    def settings(self, conf: Mapping[str, Any]) -> _Settings:
        """The arguments over the ``kafka.*`` keys of ``conf``, validated (once per config).

        Raises:
            ConfigError: a key is wrong (named), or neither topics nor a pattern is given.
        """
        resolved = self._resolved
        if resolved is not None and resolved[0] is conf:
            return resolved[1]
        config = KafkaSpoutConfig.from_conf(conf, who=_NAME)
        topics, pattern = self.topics, self.pattern
        if topics is None and pattern is None:
            if config.topics and config.pattern:
                msg = f"{_NAME}: config sets both {TOPICS_KEY!r} and {PATTERN_KEY!r}; keep one"
                raise ConfigError(msg)
            topics = list(config.topics) if config.topics else None
            pattern = config.pattern
        if topics is None and pattern is None:
            msg = (
                f"{_NAME}: no topics; pass topics= or pattern=, or set config {TOPICS_KEY!r} "
                f"or {PATTERN_KEY!r}"
            )
            raise ConfigError(msg)
        client = client_settings(conf, who=_NAME)
        client["bootstrap.servers"] = (
            self.bootstrap_servers or config.bootstrap_servers or DEFAULT_BOOTSTRAP
        )
        group = self.group_id or config.group_id or str(conf.get("topology.name") or _NAME)
        start = self.start if self.start is not None else config.start
        timeout_ms = config.timeout_ms or DEFAULT_TIMEOUT_MS
        commit = self.commit_offsets
        if commit is None:
            commit = config.commit_offsets if config.commit_offsets is not None else True
        settings = _Settings(
            tuple(topics) if topics is not None else None,
            pattern,
            group,
            start if start is not None else "earliest",
            self.isolation_level or config.isolation_level or "read_committed",
            timeout_ms / 1000.0,
            commit,
            tuple(sorted(client.items())),
        )
        self._resolved = (conf, settings)
        return settings

    def _cluster_for(self, settings: _Settings) -> Cluster:
        """The driver's admin client for these settings (made once)."""
        cluster = self._cluster
        if cluster is None or cluster.settings != dict(settings.client):
            with self._lock:
                cluster = Cluster(dict(settings.client), settings.timeout_s, repr(self))
                self._cluster = cluster
        return cluster

    def check_config(self, conf: Mapping[str, Any]) -> None:
        """The keys, the client settings, and (if the cluster answers in 5 s) the topics.

        A cluster that does not answer now is only warned about: the topology waits it out.

        Raises:
            ConfigError: a key or a client setting is wrong; confluent-kafka is missing.
            KafkaTopicNotFoundError: a named topic does not exist.
            KafkaRefusedError: the cluster refused the credentials.
        """
        settings = self.settings(conf)
        try:
            require_kafka(_NAME)
        except ImportError as exc:
            raise ConfigError(str(exc)) from exc
        check_client_settings(dict(settings.client), who=_NAME)
        probe = Cluster(dict(settings.client), min(settings.timeout_s, 5.0), repr(self))
        try:
            self._match(settings, probe.topics())
        except KafkaUnavailableError as exc:
            log.warning("%s: the topics are not checked now: %s", _NAME, exc)

    # ----------------------------------------------------------------- the driver's half
    def partitions(self, conf: Mapping[str, Any]) -> list[str]:
        """``"<topic>/<n>"`` of every partition of the named or matching topics, sorted.

        Raises:
            KafkaTopicNotFoundError: a named topic does not exist.
            KafkaUnavailableError: the cluster did not answer.
        """
        listed = self._listed
        if listed is not None and listed[0] is conf and time.monotonic() - listed[1] < _LIST_TTL_S:
            return list(listed[2])
        settings = self.settings(conf)
        found = self._match(settings, self._cluster_for(settings).topics())
        self._listed = (conf, time.monotonic(), found)
        return list(found)

    def _match(self, settings: _Settings, topics: Mapping[str, int]) -> list[str]:
        if settings.topics is not None:
            missing = [t for t in settings.topics if t not in topics]
            if missing:
                msg = (
                    f"{_NAME}: topic{'s' if len(missing) > 1 else ''} "
                    f"{', '.join(repr(t) for t in missing)} not found on the Kafka cluster at "
                    f"{settings.bootstrap}; create {'them' if len(missing) > 1 else 'it'}, or "
                    f"fix the topic names or {'kafka.bootstrap.servers'!r}"
                )
                raise KafkaTopicNotFoundError(msg)
            chosen = list(settings.topics)
        else:
            assert settings.pattern is not None  # noqa: S101 - settings() requires one
            regex = re.compile(settings.pattern)
            chosen = [t for t in topics if not t.startswith("__") and regex.fullmatch(t)]
        return sorted(str(KafkaPartition(t, n)) for t in chosen for n in range(topics[t]))

    def ends(self, conf: Mapping[str, Any], partitions: Sequence[str]) -> dict[str, KafkaEnd]:
        """Each partition's ``KafkaEnd`` now (once per PREPARE; see the module docstring).

        The listing ``has_more`` took since the last commit (a moment ago, as a PREPARE follows
        its "yes") serves, if it is fresh and lists every partition: one broker round trip per
        transaction, not two.
        """
        made_for, at, seen = self._seen
        if not (
            self._seen_since_commit
            and made_for is conf
            and time.monotonic() - at < _OFFSETS_TTL_S
            and all(p in seen for p in partitions)
        ):
            seen = self._offsets(conf, partitions)
            self._seen = (conf, time.monotonic(), seen)
        # Taken before this transaction's reads: records written during them are not in it.
        self._seen_since_commit = False
        return {p: seen[p] for p in partitions}

    def _offsets(self, conf: Mapping[str, Any], partitions: Sequence[str]) -> dict[str, KafkaEnd]:
        settings = self.settings(conf)
        cluster = self._cluster_for(settings)
        parts = {p: KafkaPartition.parse(p) for p in partitions}
        # A KafkaPartition is a (topic, partition) tuple: the client's keys find it.
        offsets = cluster.offsets(list(parts.values()), settings.isolation)
        firsts = self._first_offsets(settings, cluster, offsets)
        return {
            p: KafkaEnd(*offsets[tp], first=firsts[tp]) for p, tp in parts.items() if tp in offsets
        }

    def _first_offsets(
        self, settings: _Settings, cluster: Cluster, offsets: Mapping[Any, Offsets]
    ) -> dict[KafkaPartition, int]:
        """Where each partition starts if never read: ``start``, looked up once per partition."""
        start = settings.start
        parts = [KafkaPartition(*tp) for tp in offsets]
        if start == "earliest":
            return {tp: offsets[tp].low for tp in parts}
        if start == "latest":
            return {tp: offsets[tp].end for tp in parts}
        missing = [tp for tp in parts if tp not in self._firsts]
        if missing:
            if start == "committed":
                found = cluster.group_offsets(settings.group, missing)
                fallback = {tp: offsets[tp].low for tp in missing}
            else:
                assert isinstance(start, int)  # noqa: S101 - validated
                found = cluster.at_time(missing, start)
                fallback = {tp: offsets[tp].end for tp in missing}
            for tp in missing:
                offset = found.get(tp)
                self._firsts[tp] = fallback[tp] if offset is None else offset
        return {tp: self._firsts[tp] for tp in parts}

    def has_more(self, conf: Mapping[str, Any], partition: str, position: Any) -> bool:
        """Whether ``partition`` holds records after ``position``, or a jump to report.

        Answered from the offsets listed at most half a second ago (for every partition at
        once): an idle topology asks at every step of its driver loop. The listing must have
        been taken since the last commit: one taken before a transaction's reads (its PREPARE's
        ``ends``) misses what was written while they ran, and a "no" from it would let the
        topology go idle with records unread.
        """
        made_for, at, seen = self._seen
        stale = made_for is not conf or time.monotonic() - at >= _OFFSETS_TTL_S
        if stale or not self._seen_since_commit:
            seen = self._offsets(conf, self.partitions(conf))
            self._seen, self._seen_since_commit = (conf, time.monotonic(), seen), True
        end = seen.get(partition)
        if end is None:
            return True  # new since the listing: a transaction will list it
        if position is None:
            return end.end > end.first or self.settings(conf).start != "earliest"
        return not end.low <= position <= end.high or position < end.end

    def lags(self, positions: Mapping[str, Any]) -> dict[str, int]:
        """Per partition, its last listed end minus its committed position (0 at least)."""
        _, _, seen = self._seen
        out = {}
        for partition, end in seen.items():
            position = positions.get(partition)
            start = end.first if position is None else position
            out[partition] = max(0, end.end - start) if isinstance(start, int) else 0
        return out

    def committed(self, conf: Mapping[str, Any], positions: Mapping[str, Any]) -> None:
        """Commit ``positions`` to the consumer group (for monitoring only), without waiting.

        The offsets listed so far predate this commit's reads: ``has_more`` lists afresh.
        """
        self._seen_since_commit = False
        settings = self.settings(conf)
        if not settings.commit:
            return
        offsets = {
            KafkaPartition.parse(p): position
            for p, position in positions.items()
            if isinstance(position, int)
        }
        self._cluster_for(settings).commit(settings.group, offsets)

    # ----------------------------------------------------------------- the task's half
    def open_reader(
        self,
        conf: Mapping[str, Any],
        context: TopologyContext,
        partition: str,
        position: Any,
        end: KafkaEnd | None = None,
    ) -> PartitionReader:
        """A reader of ``partition`` from offset ``position`` (``None``: ``end.first``).

        Raises:
            TopologyError: no ``end`` (a reader reads up to the end its PREPARE fixed), or a
                position that is not an offset.
        """
        if not isinstance(end, KafkaEnd):
            msg = (
                f"{_NAME}: the reader of {partition!r} got end {end!r}; it reads up to the "
                "KafkaEnd the driver listed for its PREPARE (KafkaSpout.ends)"
            )
            raise TopologyError(msg)
        if position is not None and (
            not isinstance(position, int) or isinstance(position, bool) or position < 0
        ):
            msg = f"{_NAME} position of {partition!r} is {position!r}, expected an offset >= 0"
            raise TopologyError(msg)
        settings = self.settings(conf)
        return RecordReader(self, settings, KafkaPartition.parse(partition), position, end)

    def record(self, message: Any) -> Sequence[Any] | None:
        """The tuple's values of one consumed message (deserialized, then translated).

        Raises:
            KafkaRecordError: the deserializer or the translator raised; names the record.
        """
        topic, number, offset = message.topic(), message.partition(), message.offset()
        step = "key"
        try:
            key = self.key_deserializer(message.key())
            step = "value"
            value = self.value_deserializer(message.value())
            kind, ms = message.timestamp()
            headers = tuple(message.headers() or ())
            step = "record"
            record = KafkaRecord(topic, number, offset, key, value, ms if kind else None, headers)
            return self.translator.translate(record)
        except Exception as exc:
            who = self.key_deserializer if step == "key" else self.value_deserializer
            if step == "record":
                who = self.translator
            msg = (
                f"{_NAME}: record {topic}/{number} offset {offset}: the {step}'s "
                f"{type(who).__module__}.{type(who).__qualname__} raised "
                f"{type(exc).__name__}: {exc}"
            )
            raise KafkaRecordError(msg) from exc


class RecordReader(PartitionReader):
    """Records of one partition from one offset up to a fixed end (the module's step 2).

    The transactional spouts (``_transactional``) read with it too, and ask two things more
    of a read: ``consumed``, how many records it passed (those the translator left out
    included), and with ``digest`` (a ``hashlib`` object) each record's offset, key and value
    bytes are fed to it, so that a replay can tell it read the very same records.
    """

    def __init__(
        self,
        spout: KafkaSpout,
        settings: _Settings,
        tp: KafkaPartition,
        position: int | None,
        end: KafkaEnd,
        digest: Any = None,
    ) -> None:
        self.spout, self.settings, self.tp, self.end = spout, settings, tp, end
        self.start = end.first if position is None else position
        self.digest = digest
        self.consumed = 0
        self._gap: Gap | None = None

    def gap(self) -> Gap | None:
        """The jump ``read`` made, if its start was no longer in the partition."""
        return self._gap

    def _from(self) -> int:
        """Where the read begins: the start, or past a gap (decided from the listed ends)."""
        start, end = self.start, self.end
        if start < end.low:
            self._gap = Gap(
                start,
                end.low,
                end.low - start,
                f"offsets {start} to {end.low - 1} are no longer in the topic (retention, "
                f"deleted records or compaction): {end.low - start} offsets skipped",
            )
            return end.low
        if start > end.high:
            self._gap = Gap(
                start,
                end.low,
                None,
                f"the partition now ends at offset {end.high}, before the saved position "
                f"{start}: the topic was deleted and made again, or cut short; reading it "
                f"again from its first offset {end.low} (a jump back)",
            )
            return end.low
        return start

    def read(self, max_records: int) -> PartitionBatch:
        """Up to ``max_records`` records from the position, none at or past the end."""
        position = self._from()
        stream = self.spout.translator.stream_of(self.tp.topic)
        if position >= self.end.end or max_records <= 0:
            return PartitionBatch([], position, stream)
        return self._consume(position, max_records, stream)

    def _client(self) -> dict[str, Any]:
        return {
            # A fetch that finds nothing new waits this long at the broker (its long poll):
            # short, as a read ends at a fixed end and never waits for more records.
            "fetch.wait.max.ms": _FETCH_WAIT_MS,
            **dict(self.settings.client),
            "group.id": self.settings.group,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",  # a missing offset is ours to judge, never a jump
            "isolation.level": self.settings.isolation,
        }

    def _consume(self, position: int, max_records: int, stream: str) -> PartitionBatch:
        kafka = require_kafka(_NAME)
        topic, number, end = self.tp.topic, self.tp.partition, self.end.end
        records: list[Sequence[Any]] = []
        deadline = time.monotonic() + self.settings.timeout_s
        with consumer(self._client(), _NAME) as reader:
            try:
                reader.assign([kafka.TopicPartition(topic, number, position)])
            except kafka.KafkaException as exc:
                raise self._failed(exc, position) from exc
            while len(records) < max_records:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise self._failed(TimeoutError("no records nor end of partition"), position)
                # No more than end - position records can come: asking for more would wait
                # out the timeout for records that are not there.
                want = min(max_records - len(records), end - position, _CONSUME_BATCH)
                try:
                    messages = reader.consume(num_messages=want, timeout=min(left, _WAIT_S))
                except kafka.KafkaException as exc:
                    raise self._failed(exc, position) from exc
                for message in messages:
                    if message.topic() != topic or message.partition() != number:
                        continue  # another assignment's, before this one
                    failed = message.error()
                    offset = message.offset()
                    if failed is None:
                        if offset < position:
                            continue
                        if offset >= end:
                            return PartitionBatch(records, end, stream)
                        self.consumed += 1
                        if self.digest is not None:
                            _digest(self.digest, message)
                        values = self.spout.record(message)
                        if values is not None:
                            records.append(values)
                        position = offset + 1
                        if position >= end or len(records) >= max_records:
                            return PartitionBatch(records, position, stream)
                    elif failed.code() == kafka.KafkaError._PARTITION_EOF:
                        if offset >= end:
                            return PartitionBatch(records, end, stream)
                        if offset >= position:  # the log ends before the listed end
                            log.warning(
                                "%s: %s ends at offset %s, before the end %s listed for this "
                                "transaction (the partition was cut short); read up to it",
                                _NAME,
                                self.tp,
                                offset,
                                end,
                            )
                            return PartitionBatch(records, position, stream)
                    else:
                        raise self._failed(kafka.KafkaException(failed), position)
                if messages:
                    # The timeout is a wait without progress, not a bound on the whole read: a
                    # large backlog from a slow broker is read to its fixed end (what a re-run
                    # of the task must read again), however long that takes while records come.
                    deadline = time.monotonic() + self.settings.timeout_s
        return PartitionBatch(records, position, stream)

    def _failed(self, exc: BaseException, position: int) -> Exception:
        """A read's failure: an offset gone since the listing, an outage, or a refusal."""
        if error_name(exc) in ("_AUTO_OFFSET_RESET", "OFFSET_OUT_OF_RANGE"):
            msg = (
                f"{_NAME}: offset {position} of {self.tp} is gone since the driver listed the "
                f"partition from {self.end.low}; the transaction fails and its retry lists it "
                f"again ({exc})"
            )
            return TopologyError(msg)
        return broker_error(
            exc,
            step=f"reading from offset {position}",
            subject=f"partition {str(self.tp)!r} ({_NAME})",
            bootstrap=self.settings.bootstrap,
        )


def _digest(digest: Any, message: Any) -> None:
    """Feed one record to ``digest``: its offset, then its key and value, each with its length.

    A missing key or value (``None``) is told apart from an empty one by its length, -1.
    """
    digest.update(message.offset().to_bytes(8, "big", signed=True))
    for part in (message.key(), message.value()):
        size = -1 if part is None else len(part)
        digest.update(size.to_bytes(8, "big", signed=True))
        if part:
            digest.update(part)
