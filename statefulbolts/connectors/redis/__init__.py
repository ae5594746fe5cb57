"""The Redis connectors: sources over Redis Streams, one per protocol, and ``RedisSink``.

==========================================  ==========================  ===========================
class                                       protocol                    reads
==========================================  ==========================  ===========================
``RedisStreamSpout``                        checkpoint, in the driver   one stream, as a consumer
                                            (a ``Spout``)               group; ``XACK`` on COMMIT
``PartitionedRedisStreamSpout``             checkpoint, on the          streams (named, or a key
                                            executors                   pattern), a stream a
                                            (a ``PartitionedSpout``)    partition
``RedisStreamsTransactionalSpout``          transactional, replays      streams, a stream a
                                            each batch exactly          partition
``OpaqueRedisStreamsTransactionalSpout``    transactional, opaque       streams, a stream a
                                                                        partition
==========================================  ==========================  ===========================

In parts, each holding its spout, its config model (the topology config keys it reads) and its
use of the client:

- ``_connection``: what they share: ``RedisConnectorConfig`` (``redis.stream.url``), where a
  connector's server is, the client (made by the project's one connection layer,
  ``providers.redis.connect``, which the state provider uses too) and the Redis errors, raised
  as an outage (``StateBackendError``) or a refusal (``StateBackendRefusedError``) with their
  cause and fix;
- ``_streams``: ``RedisStreamSpout`` and ``RedisStreamConfig`` (``redis.stream.key``,
  ``redis.stream.group``), ``load_stream``, ``pending_count``, and the command line
  ``python -m statefulbolts.connectors.redis load|info``;
- ``_partitioned``: ``PartitionedRedisStreamSpout`` and ``PartitionedRedisStreamConfig``
  (``redis.stream.keys``, ``redis.stream.pattern``);
- ``_transactional``: the two transactional spouts (their URL is an argument, no config key),
  ``load_streams`` and ``close_connections``;
- ``_sink``: ``RedisSink`` (each sink task's records of a committed transaction, and its
  marker, in one Lua script), its records (``HSet``, ``HIncrBy``, ``ZAdd``, ``XAdd``,
  ``SetValue``), its config model (``sink.redis.url``, ``sink.redis.key.prefix``,
  ``sink.redis.marker.key``) and errors.

redis-py is imported only when a connector connects, so this package imports without it; a
connector that connects without it fails with the install command.
"""

from statefulbolts.connectors.redis._connection import DEFAULT_URL, URL_KEY, RedisConnectorConfig
from statefulbolts.connectors.redis._partitioned import (
    KEYS_KEY,
    PATTERN_KEY,
    PartitionedRedisStreamConfig,
    PartitionedRedisStreamSpout,
)
from statefulbolts.connectors.redis._sink import (
    PUBLISH,
    SINK_MARKER_KEY,
    SINK_PREFIX_KEY,
    SINK_URL_KEY,
    TXID_FIELD,
    HIncrBy,
    HSet,
    RedisSink,
    RedisSinkConfig,
    RedisSinkRefusedError,
    SetValue,
    XAdd,
    ZAdd,
)
from statefulbolts.connectors.redis._streams import (
    GROUP_KEY,
    STREAM_KEY,
    RedisStreamConfig,
    RedisStreamSpout,
    entry_values,
    load_stream,
    main,
    pending_count,
)
from statefulbolts.connectors.redis._transactional import (
    OpaqueRedisStreamsTransactionalSpout,
    RedisStreamsTransactionalSpout,
    close_connections,
    load_streams,
)

__all__ = [
    "DEFAULT_URL",
    "GROUP_KEY",
    "KEYS_KEY",
    "PATTERN_KEY",
    "PUBLISH",
    "SINK_MARKER_KEY",
    "SINK_PREFIX_KEY",
    "SINK_URL_KEY",
    "STREAM_KEY",
    "TXID_FIELD",
    "URL_KEY",
    "HIncrBy",
    "HSet",
    "OpaqueRedisStreamsTransactionalSpout",
    "PartitionedRedisStreamConfig",
    "PartitionedRedisStreamSpout",
    "RedisConnectorConfig",
    "RedisSink",
    "RedisSinkConfig",
    "RedisSinkRefusedError",
    "RedisStreamConfig",
    "RedisStreamSpout",
    "RedisStreamsTransactionalSpout",
    "SetValue",
    "XAdd",
    "ZAdd",
    "close_connections",
    "entry_values",
    "load_stream",
    "load_streams",
    "main",
    "pending_count",
]

# The public home of the spouts: what repr, pickle and messages name. (The transactional ones
# name it themselves, as it is part of their field name, ``TX_FIELD``.)
RedisStreamSpout.__module__ = __name__
PartitionedRedisStreamSpout.__module__ = __name__
RedisSink.__module__ = __name__
