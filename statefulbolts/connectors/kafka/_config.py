"""The Kafka spout's settings: its ``kafka.*`` config keys, the client settings, its errors.

``KafkaSpoutConfig`` validates the keys the spout itself reads (strict types, as the topology
config's; the key named in every error, a password never printed). Every other ``kafka.*`` key
is a setting of the client library (librdkafka) with the prefix taken off:
``kafka.security.protocol`` is ``security.protocol``. The settings the spout decides itself
(how offsets are committed and reset, the isolation level, where partitions end) are refused
there, naming the key that sets them instead (``client_settings``). librdkafka checks the rest
when a client is made; ``check_client_settings`` makes one, without connecting, so an unknown
setting is refused before the topology starts.

The errors, in the project's tree (``statefulbolts.errors``)::

    StateBackendError (providers)
    └── KafkaUnavailableError       the broker is away or slow: waited out, as a store's outage
    StateBackendRefusedError (providers)
    └── KafkaRefusedError           the broker refused (authentication, authorization)
    StateLostError (providers)
    └── KafkaReplayError            a stored batch's records are gone: no exact replay
    ConfigError
    └── KafkaTopicNotFoundError     a named topic does not exist (LookupError too)
    TopologyError
    └── KafkaRecordError            a record the deserializer or translator cannot take
    StatefulBoltsError
    └── KafkaGapError               offsets skipped (reported by a transactional emitter)

Example:
    >>> conf = {"kafka.topics": "clicks, views", "kafka.sasl.password": "pw",
    ...         "kafka.start": 1700000000000}
    >>> config = KafkaSpoutConfig.from_conf(conf, who="doc")
    >>> config.topics, config.start
    (('clicks', 'views'), 1700000000000)
    >>> config.sasl_password
    SecretStr('**********')
    >>> client_settings({"kafka.security.protocol": "SASL_SSL", "kafka.topics": "a"}, who="doc")
    {'security.protocol': 'SASL_SSL'}
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from types import ModuleType
from typing import Any, Final, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from providers import StateBackendError, StateBackendRefusedError, StateLostError
from statefulbolts.errors import ConfigError, StatefulBoltsError, TopologyError

__all__ = [
    "BOOTSTRAP_KEY",
    "COMMIT_KEY",
    "GROUP_KEY",
    "INSTALL",
    "ISOLATION_KEY",
    "PASSWORD_KEY",
    "PATTERN_KEY",
    "START_KEY",
    "TIMEOUT_KEY",
    "TOPICS_KEY",
    "KafkaGapError",
    "KafkaRecordError",
    "KafkaRefusedError",
    "KafkaReplayError",
    "KafkaSpoutConfig",
    "KafkaTopicNotFoundError",
    "KafkaUnavailableError",
    "check_client_settings",
    "client_settings",
    "require_kafka",
]

BOOTSTRAP_KEY: Final = "kafka.bootstrap.servers"
TOPICS_KEY: Final = "kafka.topics"
PATTERN_KEY: Final = "kafka.topic.pattern"
GROUP_KEY: Final = "kafka.group.id"
START_KEY: Final = "kafka.start"
ISOLATION_KEY: Final = "kafka.isolation.level"
TIMEOUT_KEY: Final = "kafka.timeout.ms"
COMMIT_KEY: Final = "kafka.commit.offsets"
PASSWORD_KEY: Final = "kafka.sasl.password"
PREFIX: Final = "kafka."
INSTALL: Final = "pip install 'statefulbolts[kafka]'"
DEFAULT_TIMEOUT_MS: Final = 10_000

# Kafka's own rule for a topic name (the broker refuses any other).
TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
# Client settings the spout decides itself, and what to set instead.
_OWN = {
    "enable.auto.commit": "the spout commits offsets to the group itself (kafka.commit.offsets)",
    "enable.auto.offset.store": "the spout's offsets live in the checkpoint",
    "auto.offset.reset": "set where a partition starts with kafka.start",
    "enable.partition.eof": "the spout reads each partition up to an end fixed per transaction",
    "isolation.level": f"use {ISOLATION_KEY!r}",
    "group.instance.id": "the spout never joins its group",
}


class KafkaUnavailableError(StateBackendError):
    """A Kafka broker could not be reached or did not answer in time: waited out, then retried."""


class KafkaRefusedError(StateBackendRefusedError):
    """A Kafka broker answered and refused (authentication, authorization): the topology stops."""


class KafkaTopicNotFoundError(ConfigError, LookupError):
    """A topic named to the spout does not exist on the cluster."""


class KafkaRecordError(TopologyError):
    """A record the spout's deserializer or translator could not take (names topic and offset)."""


class KafkaReplayError(StateLostError):
    """A partitioned transactional spout cannot replay a stored batch: its records are gone.

    Retention, deleted records, compaction or a topic deleted and made again removed or
    changed records that a txid not yet committed had read. Its batch cannot be emitted again
    identically, and waiting does not bring the records back: the topology stops at once
    (a ``StateLostError``), the message naming the partition, the txid and the offsets.
    """


class KafkaGapError(StatefulBoltsError):
    """Offsets a transactional Kafka emitter skipped: never raised, reported by the emitter.

    The records were gone before any batch read them (retention, deleted records), or the
    topic was deleted and made again; the emitter read on and reported the jump (a warning in
    the driver's log and the spout's reported errors).
    """


def require_kafka(who: str) -> ModuleType:
    """confluent-kafka, or an ``ImportError`` saying ``who`` needs it and how to install it."""
    try:
        import confluent_kafka
    except ImportError as exc:  # pragma: no cover - depends on the environment
        msg = f"{who} needs confluent-kafka: {INSTALL}"
        raise ImportError(msg) from exc
    return confluent_kafka


Start = Literal["earliest", "latest", "committed"]
Isolation = Literal["read_committed", "read_uncommitted"]


class KafkaSpoutConfig(BaseModel):
    """The ``kafka.*`` keys ``KafkaSpout`` reads itself; its arguments win over them.

    A key that is missing, ``None`` or empty is unset. Types are strict.
    """

    model_config = ConfigDict(frozen=True, extra="ignore", strict=True, populate_by_name=False)

    bootstrap_servers: str | None = Field(
        None,
        alias=BOOTSTRAP_KEY,
        description=(
            "`KafkaSpout`: the brokers to first contact, `host:port[,host:port...]`, when none "
            "is given as an argument."
        ),
        json_schema_extra={"shown_default": "`localhost:9092`"},
    )
    topics: tuple[str, ...] | None = Field(
        None,
        alias=TOPICS_KEY,
        description=(
            "`KafkaSpout`: the topics read, a list or one comma-separated string, when neither "
            "topics nor a pattern is given as an argument. A topic that does not exist is an "
            "error naming it."
        ),
    )
    pattern: str | None = Field(
        None,
        alias=PATTERN_KEY,
        description=(
            "`KafkaSpout`: a regular expression; every topic whose whole name matches it is "
            "read (internal `__` topics left out), new ones as they appear. Not with "
            "`kafka.topics`."
        ),
    )
    group_id: str | None = Field(
        None,
        alias=GROUP_KEY,
        description=(
            "`KafkaSpout`: the consumer group its offsets are committed to after each "
            "checkpoint, for lag monitoring tools only (never read back, except by "
            '`kafka.start` `"committed"` for a partition the topology never read).'
        ),
        json_schema_extra={"shown_default": "the topology name"},
    )
    start: Start | int | None = Field(
        None,
        alias=START_KEY,
        description=(
            "`KafkaSpout`: where a partition the topology never read starts: `earliest`, "
            "`latest` (only records written after the first transaction that reads it), "
            "`committed` (the group's committed offset, else earliest), or a timestamp in "
            "epoch milliseconds (the first record at or after it)."
        ),
        json_schema_extra={"shown_default": "`earliest`"},
    )
    isolation_level: Isolation | None = Field(
        None,
        alias=ISOLATION_KEY,
        description=(
            "`KafkaSpout`: `read_committed` reads a transactional topic's committed records "
            "only (aborted ones and markers are passed over); `read_uncommitted` reads all."
        ),
        json_schema_extra={"shown_default": "`read_committed`"},
    )
    timeout_ms: int | None = Field(
        None,
        alias=TIMEOUT_KEY,
        ge=1,
        description=(
            "`KafkaSpout`: how long one request to the cluster (listing, offsets, a read of a "
            "partition) may take before the broker counts as away: an outage, waited out for "
            "`topology.state.backend.timeout.secs`."
        ),
        json_schema_extra={"shown_default": f"`{DEFAULT_TIMEOUT_MS}`"},
    )
    commit_offsets: bool | None = Field(
        None,
        alias=COMMIT_KEY,
        description=(
            "`KafkaSpout`: commit each checkpoint's offsets to the consumer group (`kafka."
            "group.id`), so lag tools see the topology's progress."
        ),
        json_schema_extra={"shown_default": "`true`"},
    )
    sasl_password: SecretStr | None = Field(
        None,
        alias=PASSWORD_KEY,
        description=(
            "`KafkaSpout`: the SASL password (librdkafka's `sasl.password`, never printed); "
            "any other `kafka.<setting>` key is librdkafka's `<setting>` (`kafka.security."
            "protocol`, `kafka.sasl.mechanism`, `kafka.sasl.username`, `kafka.ssl.ca.location`)."
        ),
    )

    @field_validator("topics", mode="before")
    @classmethod
    def _listed(cls, value: Any) -> Any:
        """A comma-separated string, or a list, as a tuple of names (strict types take tuples)."""
        if isinstance(value, str):
            value = [name.strip() for name in value.split(",") if name.strip()]
        if isinstance(value, list):
            return tuple(value) or None
        return value

    @field_validator("topics")
    @classmethod
    def _named(cls, value: tuple[str, ...] | None) -> tuple[str, ...] | None:
        """Each a Kafka topic name (letters, digits, ``.``, ``_``, ``-``; 249 at most)."""
        for name in value or ():
            if not TOPIC_NAME.fullmatch(name):
                msg = f"{name!r} is not a Kafka topic name (letters, digits, '.', '_', '-')"
                raise ValueError(msg)
        return value

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        """A regular expression Python compiles."""
        if value is not None:
            try:
                re.compile(value)
            except re.error as exc:
                msg = f"not a regular expression: {exc}"
                raise ValueError(msg) from None
        return value

    @field_validator("start")
    @classmethod
    def _timestamp(cls, value: Any) -> Any:
        """A timestamp is 0 or more (a bool is not one)."""
        if isinstance(value, bool) or (isinstance(value, int) and value < 0):
            msg = "a timestamp is epoch milliseconds, 0 or more"
            raise ValueError(msg)
        return value

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any] | None, *, who: str) -> Self:
        """This model's keys in ``conf``, validated.

        Raises:
            ConfigError: a key has the wrong type or value; the message starts with ``who``,
                names the key and what was got (never the password).
        """
        conf = conf or {}
        given = {}
        for field in cls.model_fields.values():
            key = str(field.alias)
            value = conf.get(key)
            if value is None or (isinstance(value, str | list | tuple) and not value):
                continue
            given[key] = value
        try:
            return cls.model_validate(given)
        except ValidationError as exc:
            raise ConfigError(_describe(exc, who)) from None


def _describe(exc: ValidationError, who: str) -> str:
    """One clause per problem: the key, what is wrong, what was got (unless the password)."""
    problems = []
    for err in exc.errors(include_url=False):
        key = str(err["loc"][0]) if err["loc"] else ""
        message = err["msg"].removeprefix("Value error, ")
        shown = "" if key == PASSWORD_KEY else f" (got {err['input']!r:.80})"
        problems.append(f"config {key!r}: {message}{shown}")
    return f"{who}: " + "; ".join(problems)


def client_settings(conf: Mapping[str, Any] | None, *, who: str) -> dict[str, Any]:
    """The librdkafka settings in ``conf``: every ``kafka.*`` key the spout does not read.

    The prefix comes off (``kafka.client.id`` is ``client.id``); ``kafka.sasl.password`` is
    the one key of the model that goes to the client too (as ``sasl.password``).

    Raises:
        ConfigError: a setting the spout decides itself (named, with what to use instead), or
            a value that is not a string, number or bool.
    """
    own = {str(f.alias) for f in KafkaSpoutConfig.model_fields.values()}
    out: dict[str, Any] = {}
    for key, value in (conf or {}).items():
        if not key.startswith(PREFIX) or (key in own and key != PASSWORD_KEY) or value is None:
            continue
        setting = key.removeprefix(PREFIX)
        if setting in _OWN:
            msg = f"{who}: config {key!r} is the spout's to decide: {_OWN[setting]}"
            raise ConfigError(msg)
        if isinstance(value, SecretStr):
            value = value.get_secret_value()
        if not isinstance(value, str | int | float | bool):
            shown = "" if key == PASSWORD_KEY else f" (got {value!r:.80})"
            msg = f"{who}: config {key!r}: a client setting is a string, number or bool{shown}"
            raise ConfigError(msg)
        out[setting] = value
    return out


def check_client_settings(settings: Mapping[str, Any], *, who: str) -> None:
    """Have librdkafka check ``settings`` by making a consumer with them (it connects to nothing).

    Raises:
        ConfigError: librdkafka refused a setting; names the ``kafka.*`` key (found by trying
            the settings one at a time), with the closest key the spout reads when one is near
            (a misspelt ``kafka.topics``).
    """
    kafka = require_kafka(who)
    if _refusal(kafka, settings) is None:
        return
    for setting, value in settings.items():
        if setting == "bootstrap.servers":
            continue
        text = _refusal(kafka, {"bootstrap.servers": "localhost:9092", setting: value})
        if text is not None:
            key = f"{PREFIX}{setting}"
            own = [str(f.alias) for f in KafkaSpoutConfig.model_fields.values()]
            near = difflib.get_close_matches(key, own, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            msg = f"{who}: config {key!r}: the Kafka client refused it: {text}{hint}"
            raise ConfigError(msg)
    msg = f"{who}: the Kafka client refused its settings: {_refusal(kafka, settings)}"
    raise ConfigError(msg)


def _refusal(kafka: ModuleType, settings: Mapping[str, Any]) -> str | None:
    """What librdkafka says against ``settings`` (``None``: it takes them)."""
    try:
        consumer = kafka.Consumer({"group.id": "statefulbolts-check", **settings})
    except (kafka.KafkaException, ValueError, TypeError) as exc:
        error = exc.args[0] if exc.args else exc
        return str(error.str() if hasattr(error, "str") else error)
    consumer.close()
    return None
