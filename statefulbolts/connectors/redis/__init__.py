"""The Redis connectors: sources over Redis Streams, one per protocol.

=====================================  ============================  ==============================
class                                  protocol                      reads
=====================================  ============================  ==============================
``RedisStreamSpout``                   checkpoint, driver-side       one stream, through a consumer
                                       (``Spout``)                   group; ``XACK`` after COMMIT
``PartitionedRedisStreamSpout``        checkpoint, on the executors  streams (a list or a pattern),
                                       (``PartitionedSpout``)        a stream a partition
``RedisStreamsTransactionalSpout``     transactional, exact replay   streams, a stream a partition
``OpaqueRedisStreamsTransactionalSpout``  transactional, opaque      streams, a stream a partition
=====================================  ============================  ==============================

In parts: ``_streams`` (``RedisStreamSpout``, ``load_stream``, ``pending_count`` and the
``python -m statefulbolts.connectors.redis load|info`` command line), ``_partitioned``,
``_transactional`` (with ``load_streams``). redis-py is imported only when a connector connects,
so this package imports without it; then a missing redis-py fails with the install command.
"""

from statefulbolts.connectors.redis._partitioned import (
    KEYS_KEY,
    PATTERN_KEY,
    PartitionedRedisStreamSpout,
)
from statefulbolts.connectors.redis._streams import (
    DEFAULT_URL,
    GROUP_KEY,
    STREAM_KEY,
    URL_KEY,
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
    "PartitionedRedisStreamSpout",
    "RedisStreamSpout",
    "RedisStreamsTransactionalSpout",
    "close_connections",
    "entry_values",
    "load_stream",
    "load_streams",
    "main",
    "pending_count",
]

# The public home of the classes: what repr, pickle and messages name. (The transactional
# spouts name it themselves, as it is in their field name, ``TX_FIELD``.)
RedisStreamSpout.__module__ = __name__
PartitionedRedisStreamSpout.__module__ = __name__
