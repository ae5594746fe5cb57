"""The Redis connectors: sources over Redis Streams, one per protocol.

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
  ``load_streams`` and ``close_connections``.

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
    "STREAM_KEY",
    "URL_KEY",
    "OpaqueRedisStreamsTransactionalSpout",
    "PartitionedRedisStreamConfig",
    "PartitionedRedisStreamSpout",
    "RedisConnectorConfig",
    "RedisStreamConfig",
    "RedisStreamSpout",
    "RedisStreamsTransactionalSpout",
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
