"""``KafkaSink``: a topology's records written to Kafka topics exactly once, with the checkpoint.

``ExactlyOnceSinkBolt`` stages each transaction's records in its state and, when the
transaction commits, hands each lane's records (one lane per sink task, ``Lane``) to
``KafkaSink.publish``, which writes them in ONE Kafka transaction together with the lane's
*marker*: the lane's consumer group (named as its ``transactional.id``) gets the committed
offset ``txid + 1`` on partition 0 of the marker topic, through ``send_offsets_to_transaction``.
Records and marker become visible together or not at all, so the marker says exactly which
transactions' records the topic holds, and a commit re-run after any crash publishes nothing
twice (the publish steps, below, are ``publish``'s docstring).

No Kafka transaction lives longer than one publish step: it is opened, filled and committed
inside one call, in one task of one Spark job. Nothing stays open across a job, a checkpoint
interval or a driver restart, so nothing can block ``read_committed`` readers for long, expire
under a paused topology, or need cleaning up after it: a publish step that dies leaves an
open transaction only until the next step of the same lane starts (the COMMIT's retry, or the
recovery's), whose first act aborts it. What a lane has not yet published waits in the sink
task's state, not in an open transaction, for as long as the topology is down.

``transactional.id``: ``<prefix>.<component>.<task>of<parallelism>``, stable for a sink task
(``sink.kafka.transactional.id.prefix``, default ``statefulbolts.<topology>``): a later
attempt of the task, on any executor and under any driver, fences an earlier one still
running (Kafka's producer epoch), and the earlier one's commit is refused.

Records: ``stage`` turns a tuple into ``[topic, partition, key bytes, value bytes, headers]``
(``stage_batch`` a column batch's tuples, from its columns): the value (and optionally the
key, topic, partition, headers) from named fields, or from a ``mapper`` function returning a
``ProducerRecord``; keys and values serialized by ``key_serializer`` / ``value_serializer``
(``"str"``, ``"bytes"``, ``"json"``, ``"msgpack"``, or a callable); the topic ``None`` when it is
the sink's own, named when the record is written. With ``txid_headers=True`` each published
record also carries headers ``statefulbolts.txid`` (the transaction that staged it) and
``statefulbolts.publish`` (``<lane>/<txid>/<attempt>``, the publish step that wrote it).

Settings: the ``kafka.*`` client settings shared with ``KafkaSpout`` (brokers, security;
the spout's own keys are left out), then ``sink.kafka.producer.<setting>`` for the sink's
producers only, then the sink's own keys (``KafkaSinkConfig``); arguments win over keys. The
settings the sink decides (``transactional.id``, ``enable.idempotence``, ``acks``,
``transaction.timeout.ms`` and the delivery timeouts) are refused in the pass-through, naming
the key to use.

``transaction.timeout.ms`` (``sink.kafka.transaction.timeout.ms``, default 60 s) must exceed
the publish step's own deadline (``sink.kafka.publish.timeout.ms``, default 30 s): a slow
step is given up, and its transaction aborted, by the sink before the broker would abort it
under it. ``check_config`` (``statefulbolts run``, before Spark starts) refuses it otherwise,
and one above the brokers' ``transaction.max.timeout.ms`` when the cluster says its limit.

Faults: a broker away or slow is an outage (``KafkaUnavailableError``, waited out as a state
store's); a refusal (authentication, authorization) stops the topology (``KafkaRefusedError``);
a fenced producer is ``SinkFencedError``; a record the broker refuses fails its step
(``KafkaSinkProduceError``), and the COMMIT is tried again, up to
``topology.max.transaction.retries``.

On the test broker (Tansu): a transaction's commit and abort, ``send_offsets_to_transaction``
and a zombie's refused commit behave as Kafka's (the refusal comes as a timeout, not as
Kafka's fenced code); but records of an aborted transaction that reached the broker are
returned to ``read_committed`` readers, so there the one window of this design, a publish
step killed between its first record and its commit, shows the killed step's records next to
the retry's. ``statefulbolts.publish`` headers tell them apart.

Example:
    >>> sink = KafkaSink("counts", key="word", value="count", value_serializer="json")
    >>> sink.name
    "Kafka topic 'counts'"
    >>> from statefulbolts.testing import make_tuple
    >>> sink.stage(make_tuple(["storm", 3], fields=["word", "count"]))
    [None, -1, b'storm', b'3', None]
    >>> sink.transactional_id(Lane("wc", "publish", 1, 2))
    'statefulbolts.wc.publish.1of2'

Needs confluent-kafka: ``pip install 'statefulbolts[kafka]'``.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from itertools import repeat
from json.encoder import encode_basestring
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple, Self

import msgpack
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from statefulbolts.connectors.kafka._client import broker_error, error_name
from statefulbolts.connectors.kafka._config import (
    PASSWORD_KEY,
    PREFIX,
    TOPIC_NAME,
    KafkaRefusedError,
    KafkaSpoutConfig,
    KafkaUnavailableError,
    require_kafka,
)
from statefulbolts.connectors.kafka._producers import (
    KEPT_IDLE_S,
    LaneProducer,
    ProducerKey,
    keep_producer,
    on_idle_check,
    produce_all,
    take_producer,
    warm_producer,
)
from statefulbolts.connectors.kafka._producers import close as _close
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
    StagedColumns,
)

if TYPE_CHECKING:
    from statefulbolts.context import TopologyContext
    from statefulbolts.tuples import ColumnBatch, Tuple

__all__ = [
    "MARKER_TOPIC_KEY",
    "PARTITIONING_KEY",
    "PRODUCER_PREFIX",
    "PUBLISH_HEADER",
    "PUBLISH_TIMEOUT_KEY",
    "SINK_TOPIC_KEY",
    "TRANSACTIONAL_ID_PREFIX_KEY",
    "TRANSACTION_TIMEOUT_KEY",
    "TXID_HEADER",
    "BytesSerializer",
    "JsonSerializer",
    "KafkaSink",
    "KafkaSinkCommitError",
    "KafkaSinkConfig",
    "KafkaSinkFenceError",
    "KafkaSinkProduceError",
    "MsgpackSerializer",
    "ProducerRecord",
    "Serializer",
    "StringSerializer",
    "serializer",
]

log = logging.getLogger(__name__)

SINK_TOPIC_KEY: Final = "sink.kafka.topic"
MARKER_TOPIC_KEY: Final = "sink.kafka.marker.topic"
TRANSACTIONAL_ID_PREFIX_KEY: Final = "sink.kafka.transactional.id.prefix"
PUBLISH_TIMEOUT_KEY: Final = "sink.kafka.publish.timeout.ms"
TRANSACTION_TIMEOUT_KEY: Final = "sink.kafka.transaction.timeout.ms"
PARTITIONING_KEY: Final = "sink.kafka.partitioning"
PRODUCER_PREFIX: Final = "sink.kafka.producer."
TXID_HEADER: Final = "statefulbolts.txid"
PUBLISH_HEADER: Final = "statefulbolts.publish"
DEFAULT_PUBLISH_TIMEOUT_MS: Final = 30_000
DEFAULT_TRANSACTION_TIMEOUT_MS: Final = 60_000
_DEFAULT_BOOTSTRAP = "localhost:9092"
_NAME = "KafkaSink"
# Settings the sink decides for its producers, and what to set instead.
_OWN = {
    "transactional.id": f"one per sink task, from {TRANSACTIONAL_ID_PREFIX_KEY!r}",
    "enable.idempotence": "a transactional producer is idempotent",
    "acks": "a transactional producer waits for all in-sync replicas",
    "transaction.timeout.ms": f"use {TRANSACTION_TIMEOUT_KEY!r}",
    "delivery.timeout.ms": f"a publish step's deadline is {PUBLISH_TIMEOUT_KEY!r}",
    "message.timeout.ms": f"a publish step's deadline is {PUBLISH_TIMEOUT_KEY!r}",
}
# librdkafka's names for a producer that another one of its transactional.id replaced.
_FENCED = frozenset({"_FENCED", "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"})
# librdkafka's names for a broker that is away, slow or busy: an outage, waited out.
_AWAY = frozenset(
    {
        "_TRANSPORT",
        "_TIMED_OUT",
        "_MSG_TIMED_OUT",
        "_ALL_BROKERS_DOWN",
        "_RESOLVE",
        "_WAIT_COORD",
        "REQUEST_TIMED_OUT",
        "NETWORK_EXCEPTION",
        "NOT_COORDINATOR",
        "COORDINATOR_NOT_AVAILABLE",
        "COORDINATOR_LOAD_IN_PROGRESS",
        "CONCURRENT_TRANSACTIONS",
        "LEADER_NOT_AVAILABLE",
        "NOT_LEADER_FOR_PARTITION",
        "NOT_ENOUGH_REPLICAS",
        "NOT_ENOUGH_REPLICAS_AFTER_APPEND",
    }
)
# How long an abort after a failed step may take: the next fence aborts what it leaves.
_ABORT_WAIT_S = 5.0
# The producers' local queue, unless the config says otherwise: room for a sink task's share of
# a large transaction, so the produce loop seldom waits for the cluster's acks to free some.
_QUEUE: Final = {"queue.buffering.max.messages": 1_000_000}
# Connect to every broker as soon as the metadata names it, unless the config says otherwise.
# With librdkafka's sparse connections, a new producer's first ask for its transaction
# coordinator (``init_transactions``, and an idempotent producer's first id) can find no broker
# connected yet: it then waits for a 500 ms retry timer. Measured on the test broker (one
# broker, four fences in a row, four runs): 57-540 ms a fence when sparse, 3-5 ms when eager.
# The cost is a connection to each broker, which a sink's producer soon has anyway when its
# topics' partitions spread over the cluster.
_EAGER: Final = {"enable.sparse.connections": False}


class _KeptProducerError(Exception):
    """A kept producer failed before its first record: the step starts again with a new one."""


# ------------------------------------------------------------------ errors
class KafkaSinkFenceError(SinkPublishError):
    """Step 1 failed: the lane's transactional producer could not be initialized."""


class KafkaSinkProduceError(SinkPublishError):
    """Step 4 failed: the broker refused a record (too large, unknown topic, ...)."""


class KafkaSinkCommitError(SinkPublishError):
    """Step 5 failed: the marker or the commit was refused; the transaction was aborted."""


# ------------------------------------------------------------------ serializers
class Serializer:
    """A key's or value's serializer: a value to bytes; ``None`` stays ``None``."""

    def __call__(self, value: Any) -> bytes | None:
        return None if value is None else self.serialize(value)

    def serialize(self, value: Any) -> bytes:
        """The bytes of ``value`` (not ``None``)."""
        raise NotImplementedError

    def serialize_many(self, values: Sequence[Any]) -> list[bytes | None]:
        """``[self(v) for v in values]``; a subclass does it with a loop in C where it can."""
        return [self(v) for v in values]

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class BytesSerializer(Serializer):
    """Bytes as they are."""

    def serialize(self, value: Any) -> bytes:
        """``value``, which must be ``bytes`` (or a ``bytearray`` / ``memoryview``)."""
        if isinstance(value, bytes | bytearray | memoryview):
            return bytes(value)
        msg = f"expected bytes, got {type(value).__name__}"
        raise TypeError(msg)


class StringSerializer(Serializer):
    """A ``str`` encoded (UTF-8 by default)."""

    def __init__(self, encoding: str = "utf-8") -> None:
        self.encoding = encoding

    def serialize(self, value: Any) -> bytes:
        """``value``, which must be a ``str``, encoded."""
        if not isinstance(value, str):
            msg = f"expected a str, got {type(value).__name__} (use the json serializer)"
            raise TypeError(msg)
        return value.encode(self.encoding)

    def serialize_many(self, values: Sequence[Any]) -> list[bytes | None]:
        """Each ``str`` encoded; a column holding anything else goes value by value."""
        try:
            return list(map(str.encode, values, repeat(self.encoding)))
        except TypeError:  # a None, or a value that is no str: serialize says which
            return [self(v) for v in values]

    def __repr__(self) -> str:
        return f"StringSerializer({self.encoding!r})"


# One encoder for every JSON value: ``json.dumps`` with arguments makes a new one per call.
_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


class JsonSerializer(Serializer):
    """Compact JSON, UTF-8."""

    def serialize(self, value: Any) -> bytes:
        """The JSON of ``value``."""
        return _JSON(value).encode()

    def serialize_many(self, values: Sequence[Any]) -> list[bytes | None]:
        """Each value's JSON; ``None`` stays ``None``, as ``__call__`` keeps it.

        A column of only ints, or only strs, is written as the encoder writes those (an int's
        ``repr``, a str quoted and escaped), without the encoder's call per value.
        """
        kinds = set(map(type, values))
        if kinds == {int}:
            return list(map(str.encode, map(int.__repr__, values)))
        if kinds == {str}:
            return list(map(str.encode, map(encode_basestring, values)))
        if type(None) in kinds:
            return [self(v) for v in values]
        return list(map(str.encode, map(_JSON, values)))


class MsgpackSerializer(Serializer):
    """msgpack."""

    def serialize(self, value: Any) -> bytes:
        """The msgpack of ``value``."""
        packed = msgpack.packb(value, use_bin_type=True)
        assert isinstance(packed, bytes)  # noqa: S101 - packb returns bytes without a stream
        return packed


SERIALIZERS: dict[str, Callable[[], Serializer]] = {
    "bytes": BytesSerializer,
    "str": StringSerializer,
    "json": JsonSerializer,
    "msgpack": MsgpackSerializer,
}


def serializer(given: str | Callable[[Any], bytes | None]) -> Callable[[Any], bytes | None]:
    """A serializer from its name (``"bytes"``, ``"str"``, ``"json"``, ``"msgpack"``) or callable.

    Raises:
        ValueError: an unknown name, or neither a name nor a callable.
    """
    if isinstance(given, str):
        try:
            return SERIALIZERS[given]()
        except KeyError:
            msg = f"serializer {given!r} is not one of {sorted(SERIALIZERS)}"
            raise ValueError(msg) from None
    if not callable(given):
        msg = f"a serializer is a name {sorted(SERIALIZERS)} or a callable, got {given!r}"
        raise ValueError(msg)
    return given


class ProducerRecord(NamedTuple):
    """What a ``mapper`` makes of a tuple: the record's value, and optionally the rest.

    ``topic`` ``None``: the sink's topic; ``partition`` ``None``: the producer's partitioner
    (by key); ``headers``: ``(name, bytes or str)`` pairs.
    """

    value: Any
    key: Any = None
    topic: str | None = None
    partition: int | None = None
    headers: Sequence[tuple[str, Any]] = ()


# ------------------------------------------------------------------ settings
class KafkaSinkConfig(BaseModel):
    """The ``sink.kafka.*`` keys ``KafkaSink`` reads; its arguments win over them."""

    model_config = ConfigDict(frozen=True, extra="ignore", strict=True, populate_by_name=False)

    topic: str | None = Field(
        None,
        alias=SINK_TOPIC_KEY,
        description=(
            "`KafkaSink`: the topic records go to when neither the sink's `topic` argument "
            "nor a record names one."
        ),
    )
    marker_topic: str | None = Field(
        None,
        alias=MARKER_TOPIC_KEY,
        description=(
            "`KafkaSink`: the topic whose partition 0 carries each sink task's marker (the "
            "offsets its consumer group commits in each publish transaction). It must exist."
        ),
        json_schema_extra={"shown_default": "the sink's topic"},
    )
    transactional_id_prefix: str | None = Field(
        None,
        alias=TRANSACTIONAL_ID_PREFIX_KEY,
        description=(
            "`KafkaSink`: the start of each sink task's `transactional.id` (and marker group): "
            "`<prefix>.<component>.<task>of<parallelism>`. Give the principal's transactional "
            "id ACL this prefix."
        ),
        json_schema_extra={"shown_default": "`statefulbolts.<topology>`"},
    )
    partitioning: Literal["key", "task"] | None = Field(
        None,
        alias=PARTITIONING_KEY,
        description=(
            "`KafkaSink`: the partition of a record that names none: `key` (the producer's "
            "partitioner, by the record's key) or `task` (the sink task's index modulo the "
            "topic's partitions: each task writes partitions of its own)."
        ),
        json_schema_extra={"shown_default": "`key`"},
    )
    publish_timeout_ms: int | None = Field(
        None,
        alias=PUBLISH_TIMEOUT_KEY,
        ge=1000,
        description=(
            "`KafkaSink`: the longest one publish step (fence, marker, records, commit) may "
            "take before it is given up and its transaction aborted."
        ),
        json_schema_extra={"shown_default": f"`{DEFAULT_PUBLISH_TIMEOUT_MS}`"},
    )
    transaction_timeout_ms: int | None = Field(
        None,
        alias=TRANSACTION_TIMEOUT_KEY,
        ge=1000,
        description=(
            "`KafkaSink`: the producers' `transaction.timeout.ms`; above "
            f"`{PUBLISH_TIMEOUT_KEY}`, at most the brokers' `transaction.max.timeout.ms`."
        ),
        json_schema_extra={"shown_default": f"`{DEFAULT_TRANSACTION_TIMEOUT_MS}`"},
    )

    @field_validator("topic", "marker_topic")
    @classmethod
    def _topic_name(cls, value: str | None) -> str | None:
        """A Kafka topic name."""
        if value is not None and not TOPIC_NAME.fullmatch(value):
            msg = f"{value!r} is not a Kafka topic name (letters, digits, '.', '_', '-')"
            raise ValueError(msg)
        return value

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any] | None, *, who: str = _NAME) -> Self:
        """This model's keys in ``conf``, validated.

        Raises:
            SinkConfigError: a key has the wrong type or value (named).
        """
        given = {}
        for field in cls.model_fields.values():
            key = str(field.alias)
            value = (conf or {}).get(key)
            if value is not None and value != "":
                given[key] = value
        try:
            return cls.model_validate(given)
        except ValidationError as exc:
            problems = []
            for err in exc.errors(include_url=False):
                key = str(err["loc"][0]) if err["loc"] else ""
                message = err["msg"].removeprefix("Value error, ")
                problems.append(f"config {key!r}: {message} (got {err['input']!r:.80})")
            raise SinkConfigError(f"{who}: " + "; ".join(problems)) from None


class _Settings(NamedTuple):
    """The sink's settings for one topology config: arguments over keys (``KafkaSink.settings``)."""

    topic: str | None
    marker_topic: str
    prefix: str | None  # None: statefulbolts.<topology>
    partitioning: str
    publish_timeout_s: float
    transaction_timeout_ms: int
    client: tuple[tuple[str, Any], ...]  # bootstrap.servers, kafka.* and sink.kafka.producer.*

    @property
    def bootstrap(self) -> str:
        return str(dict(self.client)["bootstrap.servers"])


def producer_settings(conf: Mapping[str, Any] | None, *, who: str = _NAME) -> dict[str, Any]:
    """The librdkafka settings of the sink's producers in ``conf`` (``bootstrap.servers`` aside).

    Every ``kafka.*`` key but the spout's own (``KafkaSpoutConfig``; its password goes through),
    then every ``sink.kafka.producer.*`` key, the prefix taken off.

    Raises:
        SinkConfigError: a setting the sink decides (named, with what to use instead), or a
            value that is not a string, number or bool.
    """
    spout_keys = {str(f.alias) for f in KafkaSpoutConfig.model_fields.values()}
    out: dict[str, Any] = {}
    for key, value in sorted((conf or {}).items()):
        if value is None:
            continue
        if key.startswith(PRODUCER_PREFIX):
            setting = key.removeprefix(PRODUCER_PREFIX)
        elif key.startswith(PREFIX) and (key not in spout_keys or key == PASSWORD_KEY):
            setting = key.removeprefix(PREFIX)
        else:
            continue
        if setting in _OWN:
            msg = f"{who}: config {key!r} is the sink's to decide: {_OWN[setting]}"
            raise SinkConfigError(msg)
        secret = getattr(value, "get_secret_value", None)
        if callable(secret):
            value = secret()
        if not isinstance(value, str | int | float | bool):
            shown = "" if key == PASSWORD_KEY else f" (got {value!r:.80})"
            msg = f"{who}: config {key!r}: a client setting is a string, number or bool{shown}"
            raise SinkConfigError(msg)
        out[setting] = value
    return out


# ------------------------------------------------------------------ the process's clients
_ADMINS: dict[tuple[tuple[str, Any], ...], Any] = {}
_WRITERS: dict[tuple[tuple[str, Any], ...], LaneProducer] = {}
# When each admin client and writer was last asked for (``time.monotonic``; under the lock).
_ADMINS_USED: dict[tuple[tuple[str, Any], ...], float] = {}
_WRITERS_USED: dict[tuple[tuple[str, Any], ...], float] = {}
_CLIENTS_LOCK = threading.Lock()


def _admin(client: tuple[tuple[str, Any], ...]) -> Any:
    """This process's admin client for ``client`` settings (made once: it follows no topic)."""
    with _CLIENTS_LOCK:
        admin = _ADMINS.get(client)
        if admin is None:
            from confluent_kafka.admin import AdminClient

            admin = _ADMINS[client] = AdminClient(dict(client))
            on_idle_check(_close_idle_clients)
        _ADMINS_USED[client] = time.monotonic()
    return admin


def _close_idle_clients(now: float | None = None, idle_s: float = KEPT_IDLE_S) -> int:
    """Drop the admin clients and close the writers unused for ``idle_s`` s by ``now``; how many.

    As ``_producers.close_idle`` does for the lanes' producers. A writer is closed under its
    lock, after a write that took it before it was dropped; an admin client has no ``close``,
    and goes with its last reference.
    """
    now = time.monotonic() if now is None else now
    with _CLIENTS_LOCK:
        admins = [k for k, used in _ADMINS_USED.items() if now - used >= idle_s]
        writers = [k for k, used in _WRITERS_USED.items() if now - used >= idle_s]
        for key in admins:
            _ADMINS_USED.pop(key)
            _ADMINS.pop(key, None)
        closing = [_WRITERS.pop(key, None) for key in writers]
        for key in writers:
            _WRITERS_USED.pop(key)
    for writer in closing:
        if writer is not None:
            with writer.lock:
                _close(writer.client)
    return len(admins) + len(writers)


# ------------------------------------------------------------------ the sink
class KafkaSink(Sink):
    """Records of a sink bolt's tuples, written to Kafka exactly once (module docstring).

    Args:
        topic: the topic records go to (else config ``sink.kafka.topic``), unless a record
            names its own (``topic_field``, or a mapper's ``ProducerRecord.topic``).
        key: the field holding the record's key (``None``: no key).
        value: the field holding the record's value.
        topic_field: a field holding the record's topic (``None`` in it: ``topic``).
        partition_field: a field holding the record's partition (``None``: by
            ``partitioning``).
        headers_field: a field holding ``(name, value)`` header pairs.
        mapper: a function of the tuple returning a ``ProducerRecord`` (or ``None`` to write
            nothing); used instead of the fields. Module-level, so it pickles.
        key_serializer: ``"str"`` (the default), ``"bytes"``, ``"json"``, ``"msgpack"`` or a
            callable.
        value_serializer: the same, for the value.
        bootstrap_servers: ``host:port,...`` (else ``kafka.bootstrap.servers``, else
            ``localhost:9092``).
        transactional_id_prefix: else ``sink.kafka.transactional.id.prefix``, else
            ``statefulbolts.<topology>``.
        marker_topic: else ``sink.kafka.marker.topic``, else ``topic``.
        publish_timeout_ms: else ``sink.kafka.publish.timeout.ms``, else 30 s.
        transaction_timeout_ms: else ``sink.kafka.transaction.timeout.ms``, else 60 s.
        txid_headers: add the ``statefulbolts.txid`` and ``statefulbolts.publish`` headers.
        partitioning: where a record that names no partition goes: ``"key"`` (the producer's
            partitioner, by key) or ``"task"`` (the sink task's index modulo the topic's
            partitions, so each task writes partitions of its own; with the sink's input
            grouped by the record key, a key still stays in one partition while the
            parallelism stays the same) (else ``sink.kafka.partitioning``, else ``"key"``).
    """

    def __init__(
        self,
        topic: str | None = None,
        *,
        key: str | None = None,
        value: str = "value",
        topic_field: str | None = None,
        partition_field: str | None = None,
        headers_field: str | None = None,
        mapper: Callable[[Tuple], ProducerRecord | None] | None = None,
        key_serializer: Any = "str",
        value_serializer: Any = "str",
        bootstrap_servers: str | None = None,
        transactional_id_prefix: str | None = None,
        marker_topic: str | None = None,
        publish_timeout_ms: int | None = None,
        transaction_timeout_ms: int | None = None,
        txid_headers: bool = False,
        partitioning: str | None = None,
    ) -> None:
        given = {
            PARTITIONING_KEY: partitioning,
            SINK_TOPIC_KEY: topic,
            MARKER_TOPIC_KEY: marker_topic,
            TRANSACTIONAL_ID_PREFIX_KEY: transactional_id_prefix,
            PUBLISH_TIMEOUT_KEY: publish_timeout_ms,
            TRANSACTION_TIMEOUT_KEY: transaction_timeout_ms,
        }
        try:
            KafkaSinkConfig.from_conf(given)
        except SinkConfigError as exc:  # the arguments' names, not the keys'
            raise ValueError(str(exc).replace("config 'sink.kafka.", "argument for '")) from None
        if mapper is not None and not callable(mapper):
            msg = f"{_NAME}: mapper must be a function of the tuple, got {mapper!r}"
            raise ValueError(msg)
        self.topic = topic
        self.key = key
        self.value = value
        self.topic_field = topic_field
        self.partition_field = partition_field
        self.headers_field = headers_field
        self.mapper = mapper
        self.key_serializer = serializer(key_serializer)
        self.value_serializer = serializer(value_serializer)
        self.bootstrap_servers = bootstrap_servers
        self.transactional_id_prefix = transactional_id_prefix
        self.marker_topic = marker_topic
        self.publish_timeout_ms = publish_timeout_ms
        self.transaction_timeout_ms = transaction_timeout_ms
        self.txid_headers = txid_headers
        self.partitioning = partitioning
        self._reset()

    def _reset(self) -> None:
        """A task's settings and topic sizes: none is pickled with the sink."""
        self._settings: _Settings | None = None
        self._for_conf: Mapping[str, Any] | None = None
        self._task = 0  # the sink task's index, for partitioning "task"
        self._partitions: dict[str, int] = {}  # topic -> its number of partitions

    def __getstate__(self) -> dict[str, Any]:
        own = ("_settings", "_for_conf", "_task", "_partitions")
        return {k: v for k, v in vars(self).items() if k not in own}

    def __setstate__(self, state: dict[str, Any]) -> None:
        vars(self).update(state)
        self._reset()

    @property
    def name(self) -> str:
        """``Kafka topic '<topic>'`` (or the field that names it)."""
        topic = self.topic or (self._settings.topic if self._settings is not None else None)
        if topic is not None:
            return f"Kafka topic {topic!r}"
        return (
            "Kafka topics" if self.topic_field is None else f"Kafka topic of {self.topic_field!r}"
        )

    def __repr__(self) -> str:
        return f"KafkaSink({self.topic!r})"

    # ---------------------------------------------------------------- settings
    def settings(self, conf: Mapping[str, Any]) -> _Settings:
        """The arguments over the keys of ``conf``, validated (kept for that config).

        Raises:
            SinkConfigError: a key is wrong (named), no topic for the marker, or the
                transaction timeout does not exceed the publish deadline.
        """
        if self._settings is not None and self._for_conf is conf:
            return self._settings
        config = KafkaSinkConfig.from_conf(conf)
        client = producer_settings(conf)
        client["bootstrap.servers"] = (
            self.bootstrap_servers
            or KafkaSpoutConfig.from_conf(conf, who=_NAME).bootstrap_servers
            or _DEFAULT_BOOTSTRAP
        )
        topic = self.topic or config.topic
        marker = self.marker_topic or config.marker_topic or topic
        if marker is None:
            msg = (
                f"{_NAME}: no topic to keep the markers on: give the sink a topic (argument, or "
                f"{SINK_TOPIC_KEY!r}) or a marker topic ({MARKER_TOPIC_KEY!r})"
            )
            raise SinkConfigError(msg)
        publish_ms = self.publish_timeout_ms or config.publish_timeout_ms
        publish_ms = publish_ms or DEFAULT_PUBLISH_TIMEOUT_MS
        txn_ms = self.transaction_timeout_ms or config.transaction_timeout_ms
        txn_ms = txn_ms or DEFAULT_TRANSACTION_TIMEOUT_MS
        if txn_ms <= publish_ms:
            msg = (
                f"{_NAME}: {TRANSACTION_TIMEOUT_KEY!r} ({txn_ms} ms) must exceed "
                f"{PUBLISH_TIMEOUT_KEY!r} ({publish_ms} ms): a publish step gives up, and "
                "aborts its transaction, before the broker could abort it under it; raise the "
                "first or lower the second"
            )
            raise SinkConfigError(msg)
        settings = _Settings(
            topic,
            marker,
            self.transactional_id_prefix or config.transactional_id_prefix,
            self.partitioning or config.partitioning or "key",
            publish_ms / 1000.0,
            txn_ms,
            tuple(sorted(client.items())),
        )
        self._settings, self._for_conf = settings, conf
        return settings

    def _current(self) -> _Settings:
        if self._settings is None:
            msg = f"{_NAME}: used before open(conf, context)"
            raise SinkPublishError(msg)
        return self._settings

    def transactional_id(self, lane: Lane) -> str:
        """The lane's ``transactional.id``, which also names its marker group."""
        prefix = self._settings.prefix if self._settings is not None else None
        prefix = prefix or self.transactional_id_prefix or f"statefulbolts.{lane.topology}"
        return f"{prefix}.{lane.component}.{lane.name}"

    def open(self, conf: Mapping[str, Any], context: TopologyContext) -> None:
        """Resolve the settings for this task (nothing connects yet)."""
        require_kafka(_NAME)
        self.settings(conf)
        self._task = int(getattr(context, "this_task_index", 0) or 0)

    def check_config(self, conf: Mapping[str, Any]) -> None:
        """The keys, the producer settings, and (if the cluster answers in 5 s) topics and limit.

        Raises:
            SinkConfigError: a key or client setting is wrong, a topic does not exist, or the
                transaction timeout is above the brokers' ``transaction.max.timeout.ms``.
        """
        settings = self.settings(conf)
        kafka = require_kafka(_NAME)
        probe = {
            **dict(settings.client),
            "transactional.id": "statefulbolts-config-check",
            "transaction.timeout.ms": settings.transaction_timeout_ms,
        }
        try:
            kafka.Producer(probe).close()
        except (kafka.KafkaException, ValueError, TypeError) as exc:
            msg = f"{_NAME}: the Kafka client refused its producer settings: {exc}"
            raise SinkConfigError(msg) from exc
        from confluent_kafka.admin import AdminClient

        admin = AdminClient(dict(settings.client))
        try:
            topics = admin.list_topics(timeout=5).topics
        except kafka.KafkaException as exc:
            log.warning(
                "%s: the topics are not checked now: the cluster did not answer: %s", _NAME, exc
            )
            return
        wanted = {t for t in (settings.topic, settings.marker_topic) if t is not None}
        missing = sorted(t for t in wanted if t not in topics)
        if missing:
            msg = (
                f"{_NAME}: topic{'s' if len(missing) > 1 else ''} "
                f"{', '.join(repr(t) for t in missing)} not found on the Kafka cluster at "
                f"{settings.bootstrap}; create {'them' if len(missing) > 1 else 'it'} (the sink "
                "never creates topics)"
            )
            raise SinkConfigError(msg)
        limit = _broker_limit(admin, "transaction.max.timeout.ms")
        if limit is not None and settings.transaction_timeout_ms > limit:
            msg = (
                f"{_NAME}: {TRANSACTION_TIMEOUT_KEY!r} ({settings.transaction_timeout_ms} ms) is "
                f"above the brokers' transaction.max.timeout.ms ({limit} ms): every producer "
                "would be refused; lower it"
            )
            raise SinkConfigError(msg)

    # ---------------------------------------------------------------- stage
    def stage(self, tuple_: Tuple) -> list[Any] | None:
        """``[topic, partition (-1: by key), key bytes, value bytes, headers]`` of a tuple.

        ``topic`` is ``None`` for the sink's own topic, named when the record is written: a
        staged record then holds no copy of the name (it was most of a small record's bytes,
        kept in the state, shipped to the driver and back).

        Raises:
            SinkStageError: a named field is missing, no topic, or a serializer refused.
        """
        if self.mapper is not None:
            made = self.mapper(tuple_)
            if made is None:
                return None
            if not isinstance(made, ProducerRecord):
                msg = f"{_NAME}: mapper returned {made!r:.80}, not a ProducerRecord or None"
                raise SinkStageError(msg)
            record = made
        else:
            record = ProducerRecord(
                self._field(tuple_, self.value),
                self._field(tuple_, self.key) if self.key is not None else None,
                self._field(tuple_, self.topic_field) if self.topic_field else None,
                self._field(tuple_, self.partition_field) if self.partition_field else None,
                self._field(tuple_, self.headers_field) if self.headers_field else (),
            )
        topic = record.topic or self.topic or (self._settings.topic if self._settings else None)
        if topic is None:
            msg = f"{_NAME}: a record with no topic, and the sink has none ({SINK_TOPIC_KEY!r})"
            raise SinkStageError(msg)
        partition = record.partition
        if partition is None:
            by_task = self._settings is not None and self._settings.partitioning == "task"
            partition = self._task % self._partition_count(topic) if by_task else -1
        if isinstance(partition, bool) or not isinstance(partition, int) or partition < -1:
            msg = f"{_NAME}: partition {partition!r} is not a partition number"
            raise SinkStageError(msg)
        try:
            key = self.key_serializer(record.key)
        except Exception as exc:
            msg = (
                f"{_NAME}: the key serializer {self.key_serializer!r} refused "
                f"{record.key!r:.80}: {exc}"
            )
            raise SinkStageError(msg) from exc
        try:
            value = self.value_serializer(record.value)
        except Exception as exc:
            msg = (
                f"{_NAME}: the value serializer {self.value_serializer!r} refused "
                f"{record.value!r:.80}: {exc}"
            )
            raise SinkStageError(msg) from exc
        headers = [[str(n), v.encode() if isinstance(v, str) else v] for n, v in record.headers]
        return [record.topic or None, partition, key, value, headers or None]

    def stage_batch(self, batch: ColumnBatch) -> Sequence[Any]:
        """``stage`` of every tuple of ``batch``, from its columns (a mapper: tuple by tuple).

        The records are what ``stage`` makes of each tuple, kept as columns
        (``StagedColumns`` of ``[topic, partition, key, value, headers]``): a column's values
        are serialized together (``Serializer.serialize_many``), and a field that is the same
        for every record (the sink's own topic, a task's partition, no key, no headers) is kept
        once, so a record costs no Python object of its own when the sink takes its fields by
        name.

        Raises:
            SinkStageError, TypeError, ValueError: a tuple ``stage`` refuses; the runtime then
                stages the batch tuple by tuple, and ``stage`` names it.
        """
        n = len(batch)
        if self.mapper is not None or self.partition_field is not None or n == 0:
            # A mapper's records, and partitions from a field, are checked one by one.
            return super().stage_batch(batch)
        column = batch.column
        own = self.topic or (self._settings.topic if self._settings else None)
        lists: dict[int, list[Any]] = {}
        constants: dict[int, Any] = {}
        if self.topic_field is None:
            if own is None:
                msg = f"{_NAME}: a record with no topic, and the sink has none ({SINK_TOPIC_KEY!r})"
                raise SinkStageError(msg)
            constants[0] = None  # the sink's own (see ``stage``)
        else:
            topics = [t or None for t in column(self.topic_field)]
            if own is None and None in topics:
                return super().stage_batch(batch)
            lists[0] = topics
        if self._settings is None or self._settings.partitioning != "task":
            constants[1] = -1
        elif self.topic_field is None and own is not None:  # its partitions listed once
            constants[1] = self._task % self._partition_count(own)
        else:
            lists[1] = [self._task % self._partition_count(t or str(own)) for t in lists[0]]
        if self.key is None:
            constants[2] = None
        else:
            lists[2] = _many(self.key_serializer, column(self.key))
        lists[3] = _many(self.value_serializer, column(self.value))
        if self.headers_field is None:
            constants[4] = None
        else:
            lists[4] = [
                [[str(h), v.encode() if isinstance(v, str) else v] for h, v in pairs] or None
                for pairs in column(self.headers_field)
            ]
        return StagedColumns(5, lists, constants, n)

    def _partition_count(self, topic: str) -> int:
        """How many partitions ``topic`` has, listed once per task.

        All topics are listed: naming one makes a broker that creates topics on demand make it.

        Raises:
            SinkStageError: the topic does not exist.
            KafkaUnavailableError: the cluster did not answer.
        """
        count = self._partitions.get(topic)
        if count is None:
            settings = self._current()
            kafka = require_kafka(_NAME)
            try:
                listed = _admin(settings.client).list_topics(timeout=settings.publish_timeout_s)
            except kafka.KafkaException as exc:
                raise broker_error(
                    exc, step="listing topics", subject=self.name, bootstrap=settings.bootstrap
                ) from exc
            self._partitions = {
                n: len(t.partitions) for n, t in listed.topics.items() if t.partitions
            }
            count = self._partitions.get(topic)
            if count is None:
                msg = (
                    f"{_NAME}: topic {topic!r} not found on the Kafka cluster at "
                    f"{settings.bootstrap}"
                )
                raise SinkStageError(msg)
        return count

    def _field(self, tuple_: Tuple, name: str) -> Any:
        try:
            return tuple_.get_value_by_field(name)
        except (KeyError, ValueError) as exc:
            msg = f"{_NAME}: the tuple has no field {name!r} (its fields: {list(tuple_.fields)})"
            raise SinkStageError(msg) from exc

    # ---------------------------------------------------------------- the marker
    def published(self, lane: Lane) -> int | None:
        """The lane's marker: its group's committed offset on the marker topic, minus one.

        Raises:
            KafkaUnavailableError: the cluster did not answer (an outage).
            SinkMarkerError: the offset is not one a publish wrote.
        """
        return self._marker(self._current(), lane, stable=False)

    def _marker(self, settings: _Settings, lane: Lane, *, stable: bool) -> int | None:
        from confluent_kafka import ConsumerGroupTopicPartitions, TopicPartition

        kafka = require_kafka(_NAME)
        group = self.transactional_id(lane)
        request = ConsumerGroupTopicPartitions(group, [TopicPartition(settings.marker_topic, 0)])
        timeout = settings.publish_timeout_s
        try:
            [future] = (
                _admin(settings.client)
                .list_consumer_group_offsets(
                    [request], require_stable=stable, request_timeout=timeout
                )
                .values()
            )
            result = future.result(timeout=timeout)
        except (kafka.KafkaException, TimeoutError) as exc:
            raise self._step_error(exc, "reading the marker", lane, SinkMarkerError) from exc
        [tp] = result.topic_partitions
        if tp.error is not None:
            raise self._step_error(
                kafka.KafkaException(tp.error), "reading the marker", lane, SinkMarkerError
            )
        if tp.offset < 0:
            return None
        if tp.offset == 0:
            msg = (
                f"{_NAME}: group {group!r} holds offset 0 on {settings.marker_topic}/0, which no "
                "publish writes (its markers are txid + 1): another consumer shares the group's "
                "name; rename the sink's transactional.id prefix"
            )
            raise SinkMarkerError(msg)
        return int(tp.offset) - 1

    # ---------------------------------------------------------------- publish
    def publish(
        self, lane: Lane, txid: int, batches: Sequence[StagedBatch], epoch: int | None
    ) -> PublishResult:
        """Publish the lane's records above its marker, up to ``txid``, in one transaction.

        1. **Fence**: the lane's transactional producer. The one this process kept from the
           lane's last step (``_producers``), else a new one, which runs ``init_transactions``:
           the broker aborts any transaction the id left open (an attempt that died) and
           refuses every older producer of the id from now on (a zombie attempt, a stale
           driver's executor, a producer another process kept).
        2. **Read the marker**: the lane group's committed offset, stable (after any
           transaction of the id has ended). Only the id's newest producer can move it, and a
           producer that is not the newest commits nothing (steps 4 and 6).
        3. **Decide**: the batches with ``marker < batch.txid <= txid``; none (the marker is at
           ``txid`` already: a replayed COMMIT) ends the step, no transaction opened.
        4. **Mark**: ``begin_transaction``, then ``send_offsets_to_transaction`` sets the
           marker to ``txid`` (offset ``txid + 1``) in the transaction. The coordinator refuses
           a fenced producer here, before any record goes out: a kept producer refused, or
           failing in steps 2 to 4, is closed and the step starts again at 1 with a new one.
        5. **Produce** every record of those batches, oldest txid first, in staged order.
        6. **Commit**: ``commit_transaction`` makes records and marker visible at once; the
           producer is kept for the lane's next step.

        A failure in 4 to 6 aborts the transaction (at most ``_ABORT_WAIT_S``; step 1 of the
        retry aborts it otherwise), closes the producer and raises; nothing of it is visible.
        The whole step keeps to ``sink.kafka.publish.timeout.ms``. ``epoch`` is not used:
        Kafka fences with its own producer epochs (step 1).

        Raises:
            KafkaSinkFenceError, SinkMarkerError, KafkaSinkProduceError, KafkaSinkCommitError:
                the step that failed.
            SinkFencedError: a newer producer of the lane took over.
            KafkaUnavailableError: the cluster did not answer (an outage, waited out).
            KafkaRefusedError: the cluster refused (authentication, authorization).
        """
        settings = self._current()
        deadline = time.monotonic() + settings.publish_timeout_s
        key = self._producer_key(settings, lane)
        kept = take_producer(key)
        if kept is not None:
            try:
                return self._step(kept, key, settings, lane, txid, batches, deadline, kept=True)
            except _KeptProducerError as refused:
                log.debug(
                    "%s: lane %s: the producer kept from its last step is no longer the lane's "
                    "(%s); a new one fences",
                    _NAME,
                    lane.name,
                    refused.__cause__,
                )
        producer = self._new_producer(settings, lane, deadline)
        return self._step(producer, key, settings, lane, txid, batches, deadline, kept=False)

    def warm(self, lane: Lane) -> None:
        """Make the lane's producer on a thread while the PREPARE runs (``_producers``).

        The COMMIT's publish step then takes it made (step 1 done); nothing is made when this
        process keeps one for the lane already. It fences what a new producer at the COMMIT
        would: a lane's PREPARE starts only after its last COMMIT ended.
        """
        settings = self._current()

        def make() -> LaneProducer:
            return self._new_producer(settings, lane, time.monotonic() + settings.publish_timeout_s)

        warm_producer(self._producer_key(settings, lane), make)

    def _step(
        self,
        producer: LaneProducer,
        key: ProducerKey,
        settings: _Settings,
        lane: Lane,
        txid: int,
        batches: Sequence[StagedBatch],
        deadline: float,
        *,
        kept: bool,
    ) -> PublishResult:
        """Steps 2 to 6 with ``producer`` (``kept``: from an earlier step; see ``publish``)."""
        client = producer.client
        opened = checked = False
        try:
            marker = self._marker(settings, lane, stable=True)
            due = [b for b in batches if b.txid <= txid and (marker is None or b.txid > marker)]
            if not due or (marker is not None and marker >= txid):
                keep_producer(key, producer)
                return PublishResult(txid, (), 0, marker)
            producer.start_step()
            client.begin_transaction()
            opened = True
            self._mark(producer, settings, lane, txid, deadline)
            checked = True
            records = self._produce(producer, settings, lane, due, txid, deadline)
            self._commit(client, lane, deadline)
            opened = False
        except BaseException as exc:
            # A fenced producer's transaction is the newer producer's to abort (its fence did);
            # asking the coordinator again only waits (Tansu lets the call time out).
            fenced = isinstance(exc, SinkFencedError)
            aborted = not opened or (not fenced and _abort(client, lane))
            _close(client, wait=aborted)
            if kept and not checked and isinstance(exc, Exception):
                raise _KeptProducerError from exc
            raise
        keep_producer(key, producer)
        return PublishResult(txid, tuple(b.txid for b in due), records, marker)

    def _producer_key(self, settings: _Settings, lane: Lane) -> ProducerKey:
        own = (
            ("transaction.timeout.ms", settings.transaction_timeout_ms),
            ("message.timeout.ms", int(settings.publish_timeout_s * 1000)),
        )
        return self.transactional_id(lane), settings.client + own

    def _new_producer(self, settings: _Settings, lane: Lane, deadline: float) -> LaneProducer:
        """Step 1 with a new producer: made, fenced, with its group's metadata."""
        producer = LaneProducer()
        producer.client = self._fence(settings, lane, deadline, on_delivery=producer.delivered)
        try:
            producer.metadata = self._group_metadata(settings, lane)
        except BaseException:
            _close(producer.client)
            raise
        return producer

    def _fence(
        self,
        settings: _Settings,
        lane: Lane,
        deadline: float,
        on_delivery: Callable[[Any, Any], None] | None = None,
    ) -> Any:
        """Step 1: a new transactional producer of the lane, initialized (see ``publish``).

        ``on_delivery``: the producer's delivery reports, for refused records only.
        """
        kafka = require_kafka(_NAME)
        config = {
            **_QUEUE,
            **_EAGER,
            **dict(settings.client),
            "transactional.id": self.transactional_id(lane),
            "transaction.timeout.ms": settings.transaction_timeout_ms,
            "message.timeout.ms": int(settings.publish_timeout_s * 1000),
        }
        if on_delivery is not None:
            config |= {"on_delivery": on_delivery, "delivery.report.only.error": True}
        try:
            producer = kafka.Producer(config)
        except (kafka.KafkaException, ValueError, TypeError) as exc:
            msg = f"{_NAME}: the Kafka client refused the producer settings: {exc}"
            raise KafkaSinkFenceError(msg) from exc
        try:
            producer.init_transactions(_left(deadline))
        except kafka.KafkaException as exc:
            _close(producer)
            raise self._step_error(exc, "fencing", lane, KafkaSinkFenceError) from exc
        return producer

    def _group_metadata(self, settings: _Settings, lane: Lane) -> Any:
        """The lane group's metadata for ``send_offsets_to_transaction`` (of a consumer)."""
        kafka = require_kafka(_NAME)
        reader = kafka.Consumer({**dict(settings.client), "group.id": self.transactional_id(lane)})
        try:
            return reader.consumer_group_metadata()
        finally:
            reader.close()

    def _mark(
        self,
        producer: LaneProducer,
        settings: _Settings,
        lane: Lane,
        txid: int,
        deadline: float,
    ) -> None:
        """Step 4: the marker at ``txid`` in the open transaction; refused if fenced."""
        from confluent_kafka import TopicPartition

        kafka = require_kafka(_NAME)
        try:
            producer.client.send_offsets_to_transaction(
                [TopicPartition(settings.marker_topic, 0, txid + 1)],
                producer.metadata,
                _left(deadline),
            )
        except kafka.KafkaException as exc:
            raise self._step_error(exc, "moving the marker", lane, KafkaSinkCommitError) from exc

    def _produce(
        self,
        producer: LaneProducer,
        settings: _Settings,
        lane: Lane,
        due: Sequence[StagedBatch],
        txid: int,
        deadline: float,
    ) -> int:
        """Step 5: every record of ``due``, in order, delivered; how many."""
        kafka = require_kafka(_NAME)
        client = producer.client
        attempt = f"{lane.name}/{txid}/{uuid.uuid4().hex[:12]}".encode()

        def full() -> KafkaSinkProduceError:
            return KafkaSinkProduceError(
                f"{_NAME}: lane {lane.name}: the producer's queue stayed full"
            )

        count = 0
        for batch in due:
            extra = (
                [(TXID_HEADER, str(batch.txid).encode()), (PUBLISH_HEADER, attempt)]
                if self.txid_headers
                else []
            )
            try:
                produce_all(client, batch.records, settings.topic, extra, deadline, full)
            except kafka.KafkaException as exc:
                raise self._step_error(exc, "producing", lane, KafkaSinkProduceError) from exc
            except ValueError as exc:
                msg = f"{_NAME}: lane {lane.name}: {exc} ({SINK_TOPIC_KEY!r})"
                raise KafkaSinkProduceError(msg) from exc
            count += len(batch.records)
        left = client.flush(_left(deadline))
        if producer.refused or left:
            what = (
                "; ".join(producer.refused)
                if producer.refused
                else f"{left} records not delivered in time"
            )
            msg = (
                f"{_NAME}: lane {lane.name}: the cluster at {settings.bootstrap} refused "
                f"records: {what}"
            )
            raise (KafkaSinkProduceError(msg) if producer.refused else KafkaUnavailableError(msg))
        return count

    def _commit(self, client: Any, lane: Lane, deadline: float) -> None:
        """Step 6: records and marker committed."""
        kafka = require_kafka(_NAME)
        try:
            client.commit_transaction(_left(deadline))
        except kafka.KafkaException as exc:
            raise self._step_error(exc, "committing", lane, KafkaSinkCommitError) from exc

    def _step_error(
        self, exc: BaseException, step: str, lane: Lane, kind: type[SinkPublishError]
    ) -> Exception:
        """What a client error in ``step`` is: fenced, an outage, a refusal, or ``kind``."""
        settings = self._current()
        name = error_name(exc)
        subject = f"lane {lane.name} of sink {lane.component!r} ({self.transactional_id(lane)})"
        if name in _FENCED:
            msg = (
                f"{_NAME}: {step} {subject}: a newer producer of the lane took over (a later "
                f"attempt of the task): {exc}"
            )
            return SinkFencedError(msg)
        error = exc.args[0] if exc.args else None
        retriable = getattr(error, "retriable", None)
        if isinstance(exc, TimeoutError) or name in _AWAY or (callable(retriable) and retriable()):
            return broker_error(exc, step=step, subject=subject, bootstrap=settings.bootstrap)
        judged = broker_error(exc, step=step, subject=subject, bootstrap=settings.bootstrap)
        if isinstance(judged, KafkaRefusedError):
            return judged
        return kind(f"{_NAME}: {step} {subject} failed: {type(exc).__name__}: {exc}")

    # ---------------------------------------------------------------- at-least-once
    def write(self, records: Sequence[Any]) -> None:
        """Write ``records`` now with an idempotent producer (one per process); wait for them.

        Raises:
            KafkaSinkProduceError: the cluster refused a record.
            KafkaUnavailableError: not every record was delivered in time.
        """
        settings = self._current()
        kafka = require_kafka(_NAME)
        with _CLIENTS_LOCK:
            producer = _WRITERS.get(settings.client)
            if producer is None:
                producer = LaneProducer()
                producer.client = kafka.Producer(
                    {
                        **_QUEUE,
                        **_EAGER,
                        **dict(settings.client),
                        "enable.idempotence": True,
                        "message.timeout.ms": int(settings.publish_timeout_s * 1000),
                        "on_delivery": producer.delivered,
                        "delivery.report.only.error": True,
                    }
                )
                _WRITERS[settings.client] = producer
                on_idle_check(_close_idle_clients)
            _WRITERS_USED[settings.client] = time.monotonic()
        deadline = time.monotonic() + settings.publish_timeout_s

        def full() -> KafkaSinkProduceError:
            return KafkaSinkProduceError(f"{_NAME}: the producer's queue stayed full")

        with producer.lock:  # one write at a time: its refusals are its own
            producer.start_step()
            try:
                produce_all(producer.client, records, settings.topic, [], deadline, full)
            except ValueError as exc:
                msg = f"{_NAME}: {exc} ({SINK_TOPIC_KEY!r})"
                raise KafkaSinkProduceError(msg) from exc
            left = producer.client.flush(_left(deadline))
            refused = list(producer.refused)
        if refused or left:
            what = "; ".join(refused) if refused else f"{left} records not delivered in time"
            msg = f"{_NAME}: the cluster at {settings.bootstrap} did not take records: {what}"
            raise (KafkaSinkProduceError(msg) if refused else KafkaUnavailableError(msg))

    # ---------------------------------------------------------------- operations
    def lane_markers(
        self, conf: Mapping[str, Any], topology: str, component: str
    ) -> dict[str, int | None]:
        """Every lane of ``component`` the cluster knows a marker group of: lane -> marker.

        The marker groups are listed by name (``<transactional.id prefix>.<component>.``), so
        lanes of every parallelism the component ever published with are found.
        """
        settings = self.settings(conf)
        kafka = require_kafka(_NAME)
        probe = Lane(topology, component, 0, 1)
        start = self.transactional_id(probe).removesuffix(probe.name)
        admin = _admin(settings.client)
        try:
            listed = admin.list_consumer_groups(request_timeout=settings.publish_timeout_s).result(
                timeout=settings.publish_timeout_s
            )
        except (kafka.KafkaException, TimeoutError) as exc:
            raise broker_error(
                exc,
                step="listing groups",
                subject=f"sink {component!r}",
                bootstrap=settings.bootstrap,
            ) from exc
        out: dict[str, int | None] = {}
        for group in listed.valid:
            gid = group.group_id
            if not gid.startswith(start):
                continue
            try:
                task, parallelism = Lane.parse_name(gid.removeprefix(start))
            except ValueError:
                continue
            lane = probe._replace(task=task, parallelism=parallelism)
            out[lane.name] = self._marker(settings, lane, stable=False)
        return out

    def abort_lingering(self, conf: Mapping[str, Any], lanes: Sequence[Lane]) -> list[str]:
        """Fence each lane's ``transactional.id``, aborting its open transaction; the ids fenced.

        ``init_transactions`` of a new producer aborts what a producer killed outside the
        protocol left open. Safe while the topology runs: a publish step this fences fails,
        and its COMMIT is tried again, which publishes what it had to (the marker decides).
        """
        settings = self.settings(conf)
        self._settings, self._for_conf = settings, conf
        done = []
        for lane in lanes:
            producer = self._fence(settings, lane, time.monotonic() + settings.publish_timeout_s)
            _close(producer)
            done.append(self.transactional_id(lane))
        return done


def _many(given: Callable[[Any], bytes | None], values: Sequence[Any]) -> list[Any]:
    """``given`` of each value: a ``Serializer``'s ``serialize_many``, else one by one."""
    if isinstance(given, Serializer):
        return given.serialize_many(values)
    return list(map(given, values))


def _left(deadline: float) -> float:
    """Seconds to the deadline, at least a tenth of one (a call needs some time to fail)."""
    return max(0.1, deadline - time.monotonic())


def _abort(producer: Any, lane: Lane) -> bool:
    """Abort the open transaction of a failed step, briefly; the next fence aborts it anyway.

    Whether it was aborted.
    """
    try:
        producer.abort_transaction(_ABORT_WAIT_S)
    except Exception as exc:  # noqa: BLE001 - the step's own error is the one raised
        log.warning(
            "%s: lane %s: the failed publish's transaction was not aborted now (%s); the next "
            "publish of the lane aborts it when it fences",
            _NAME,
            lane.name,
            exc,
        )
        return False
    return True


def _broker_limit(admin: Any, name: str) -> int | None:
    """A broker config value, if the cluster says it within 5 s (``None``: it does not)."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    try:
        metadata = admin.list_topics(timeout=5)
        broker = next(iter(metadata.brokers))
        [future] = admin.describe_configs(
            [ConfigResource(ResourceType.BROKER, str(broker))], request_timeout=5
        ).values()
        entries = future.result(timeout=5)
    except Exception as exc:  # noqa: BLE001 - a limit the cluster does not say is not checked
        log.info("%s: the brokers' %s is not known (%s); not checked", _NAME, name, exc)
        return None
    entry = entries.get(name)
    try:
        return None if entry is None or entry.value is None else int(entry.value)
    except ValueError:
        return None
