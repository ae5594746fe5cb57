"""Connectors: the sources a topology reads and the sinks it writes, one home.

One module or subpackage per external system, each holding its client, its config model (the
dotted keys it reads from the topology config) and its errors, its sources beside its sinks:

- ``files``: ``DirectorySpout``, the lines of the files of a directory (a file a partition),
  and ``FileSink`` (part files per sink task and committed transaction, committed by a
  manifest entry; ``read_committed_parts`` lists them).
- ``redis``: Redis Streams, one source per protocol: ``RedisStreamSpout`` (driver-side, a
  consumer group), ``PartitionedRedisStreamSpout`` (read on the executors),
  ``RedisStreamsTransactionalSpout`` / ``OpaqueRedisStreamsTransactionalSpout`` (transactional
  topologies); ``load_stream`` / ``load_streams`` / ``pending_count`` to fill and inspect
  streams, ``python -m statefulbolts.connectors.redis load|info`` from a shell; and
  ``RedisSink`` (each sink task's records of a committed transaction, and its marker, in one
  Lua script).

- ``kafka``: ``KafkaSpout`` (read on the executors, offsets in the checkpoint),
  ``KafkaTransactionalSpout`` / ``OpaqueKafkaTransactionalSpout`` (transactional topologies),
  the record translators and deserializers, and ``KafkaSink`` (each sink task's records of a
  committed transaction in one Kafka transaction, with its marker); imported from
  ``statefulbolts.connectors.kafka`` (the client, confluent-kafka, is the ``kafka`` extra).
- ``postgres``: ``PostgresSink`` (each sink task's rows of a committed transaction, inserted
  or upserted in one database transaction with its marker row); imported from
  ``statefulbolts.connectors.postgres`` (the client, psycopg 3, is the ``postgres`` extra).
- ``sinks``: what every sink shares: the ``Sink`` contract, ``ExactlyOnceSinkBolt`` (staged
  in its state while a transaction is prepared, published when it commits, the marker in the
  same atomic step of the target), ``AtLeastOnceSinkBolt``; the bolts are also here.

A sink for another system comes here the same way, in its own module next to the system's
sources.

Connectors sit above the protocols, as user code does: they implement the spout interfaces of
``statefulbolts`` (``Spout``, ``PartitionedSpout``) and of ``statefulbolts.transactional``
through their public API, and nothing in ``checkpoint``, ``statefulbolts.transactional``,
``statefulbolts.runtime`` or ``recovery`` imports them. Their Redis connections are made by the
project's one connection layer, ``providers.redis`` (at the bottom, since the state provider
uses it too), through ``statefulbolts.connectors.redis._connection``.

Example:
    >>> from statefulbolts.connectors import RedisStreamSpout
    >>> spout = RedisStreamSpout("clicks", redis_url="redis://127.0.0.1:6379/0",
    ...                          fields=("user", "url"))
    >>> spout.output_fields  # nothing connects before the topology runs
    ['user', 'url']
    >>> builder.set_spout("clicks", spout, 2)  # doctest: +SKIP
"""

from statefulbolts.connectors.files import DirectorySpout
from statefulbolts.connectors.redis import (
    OpaqueRedisStreamsTransactionalSpout,
    PartitionedRedisStreamSpout,
    RedisStreamSpout,
    RedisStreamsTransactionalSpout,
    load_stream,
    load_streams,
    pending_count,
)
from statefulbolts.connectors.sinks import AtLeastOnceSinkBolt, ExactlyOnceSinkBolt, Sink

__all__ = [
    "AtLeastOnceSinkBolt",
    "DirectorySpout",
    "ExactlyOnceSinkBolt",
    "OpaqueRedisStreamsTransactionalSpout",
    "PartitionedRedisStreamSpout",
    "RedisStreamSpout",
    "RedisStreamsTransactionalSpout",
    "Sink",
    "load_stream",
    "load_streams",
    "pending_count",
]
