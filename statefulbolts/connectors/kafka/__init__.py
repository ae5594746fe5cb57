"""The Kafka connector: ``KafkaSpout`` and the transactional spouts, topics read on the executors.

In parts:

- ``_config``: ``KafkaSpoutConfig`` (the ``kafka.*`` keys the spout reads), the client settings
  (every other ``kafka.*`` key, for librdkafka) and the connector's errors;
- ``_records``: ``KafkaRecord``, the deserializers and the record translators;
- ``_client``: the driver's admin client (``Cluster``), the readers' consumers, and how a client
  error becomes an outage or a refusal;
- ``_spout``: ``KafkaSpout``, its partition ids (``KafkaPartition``) and ends (``KafkaEnd``);
- ``_transactional``: ``KafkaTransactionalSpout`` (batches that replay exactly) and
  ``OpaqueKafkaTransactionalSpout`` (replays may differ), for transactional topologies.

confluent-kafka is imported only when the spout connects, so this package imports without it;
a spout that connects without it fails with the install command
(``pip install 'statefulbolts[kafka]'``).
"""

from statefulbolts.connectors.kafka._config import (
    BOOTSTRAP_KEY,
    COMMIT_KEY,
    GROUP_KEY,
    ISOLATION_KEY,
    PASSWORD_KEY,
    PATTERN_KEY,
    START_KEY,
    TIMEOUT_KEY,
    TOPICS_KEY,
    KafkaGapError,
    KafkaRecordError,
    KafkaRefusedError,
    KafkaReplayError,
    KafkaSpoutConfig,
    KafkaTopicNotFoundError,
    KafkaUnavailableError,
)
from statefulbolts.connectors.kafka._records import (
    BytesDeserializer,
    ByTopicRecordTranslator,
    DefaultRecordTranslator,
    Deserializer,
    JsonDeserializer,
    KafkaRecord,
    MsgpackDeserializer,
    RecordTranslator,
    SimpleRecordTranslator,
    StringDeserializer,
)
from statefulbolts.connectors.kafka._sink import (
    MARKER_TOPIC_KEY,
    PARTITIONING_KEY,
    PRODUCER_PREFIX,
    PUBLISH_HEADER,
    PUBLISH_TIMEOUT_KEY,
    SINK_TOPIC_KEY,
    TRANSACTION_TIMEOUT_KEY,
    TRANSACTIONAL_ID_PREFIX_KEY,
    TXID_HEADER,
    BytesSerializer,
    JsonSerializer,
    KafkaSink,
    KafkaSinkCommitError,
    KafkaSinkConfig,
    KafkaSinkFenceError,
    KafkaSinkProduceError,
    MsgpackSerializer,
    ProducerRecord,
    Serializer,
    StringSerializer,
)
from statefulbolts.connectors.kafka._spout import KafkaEnd, KafkaPartition, KafkaSpout
from statefulbolts.connectors.kafka._transactional import (
    KafkaTransactionalSpout,
    OpaqueKafkaTransactionalSpout,
)

__all__ = [
    "BOOTSTRAP_KEY",
    "COMMIT_KEY",
    "GROUP_KEY",
    "ISOLATION_KEY",
    "MARKER_TOPIC_KEY",
    "PARTITIONING_KEY",
    "PASSWORD_KEY",
    "PATTERN_KEY",
    "PRODUCER_PREFIX",
    "PUBLISH_HEADER",
    "PUBLISH_TIMEOUT_KEY",
    "SINK_TOPIC_KEY",
    "START_KEY",
    "TIMEOUT_KEY",
    "TOPICS_KEY",
    "TRANSACTIONAL_ID_PREFIX_KEY",
    "TRANSACTION_TIMEOUT_KEY",
    "TXID_HEADER",
    "ByTopicRecordTranslator",
    "BytesDeserializer",
    "BytesSerializer",
    "DefaultRecordTranslator",
    "Deserializer",
    "JsonDeserializer",
    "JsonSerializer",
    "KafkaEnd",
    "KafkaGapError",
    "KafkaPartition",
    "KafkaRecord",
    "KafkaRecordError",
    "KafkaRefusedError",
    "KafkaReplayError",
    "KafkaSink",
    "KafkaSinkCommitError",
    "KafkaSinkConfig",
    "KafkaSinkFenceError",
    "KafkaSinkProduceError",
    "KafkaSpout",
    "KafkaSpoutConfig",
    "KafkaTopicNotFoundError",
    "KafkaTransactionalSpout",
    "KafkaUnavailableError",
    "MsgpackDeserializer",
    "MsgpackSerializer",
    "OpaqueKafkaTransactionalSpout",
    "ProducerRecord",
    "RecordTranslator",
    "Serializer",
    "SimpleRecordTranslator",
    "StringDeserializer",
    "StringSerializer",
]

# The public home of the spout and the sink: what repr, pickle and messages name.
KafkaSpout.__module__ = __name__
KafkaSink.__module__ = __name__
