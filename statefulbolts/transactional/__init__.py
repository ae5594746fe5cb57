"""Storm's transactional topologies: exactly-once batches, committed strictly in txid order.

Every batch has a transaction id (txid) that stays the same when it is replayed; batches are
processed in parallel (up to ``topology.max.spout.pending``) and committed one at a time, in
txid order; committers store next to each value the txid that wrote it, so a replayed commit
recognises itself. ``docs/protocol/transactional.md`` is the protocol's reference.

- Spouts: ``TransactionalSpout``, ``PartitionedTransactionalSpout``,
  ``OpaquePartitionedTransactionalSpout``; ready-made ``MemoryTransactionalSpout``,
  ``OpaqueMemoryTransactionalSpout`` and, over Redis Streams,
  ``RedisStreamsTransactionalSpout`` / ``OpaqueRedisStreamsTransactionalSpout`` (connectors, in
  ``statefulbolts.connectors.redis``; named here too).
- Bolts: ``BatchBolt`` / ``BaseTransactionalBolt`` (a fresh object per batch attempt;
  ``finish_batch`` once per task per attempt), ``Committer``; ``BasicBolt``s work too.
- Exactly-once writes: ``TransactionalValue``, ``OpaqueValue``, ``TransactionalMap`` and
  ``OpaqueMap`` over a ``BackingMap`` (``context.backing_map()`` in a committer: the topology's
  state provider; or ``RedisBackingMap``, whose opaque record is each committer task's own
  unless told an owner, ``MemoryBackingMap``, ``StateBackingMap``).
- ``TransactionalTopologyBuilder(id, spout_id, spout)``: ``set_bolt``, ``set_committer_bolt``,
  ``build_topology()``; submit with ``LocalCluster.submit_topology``.

Example:
    >>> from statefulbolts.transactional import TransactionalTopologyBuilder
    >>> from examples.transactional_global_count import build
    >>> topology = build()
    >>> topology.transactional_id, sorted(topology.commit_phase)
    ('global-count', ['sum'])
"""

from statefulbolts.transactional._attempt import TransactionAttempt
from statefulbolts.transactional._bolts import (
    BaseTransactionalBolt,
    BatchBolt,
    BatchOutputCollector,
    Committer,
)
from statefulbolts.transactional._coordinator import (
    CoordinatorClosedError,
    StartBatch,
    StartCommit,
    TransactionalSpoutCoordinator,
    TransactionStatus,
    opaque_coordinator,
    partitioned_coordinator,
)
from statefulbolts.transactional._maps import (
    BackingMap,
    MemoryBackingMap,
    OpaqueMap,
    StateBackingMap,
    TransactionalMap,
)
from statefulbolts.transactional._memory import (
    MemoryTransactionalSpout,
    OpaqueMemoryTransactionalSpout,
)
from statefulbolts.transactional._phase import BatchAction
from statefulbolts.transactional._spouts import (
    OpaquePartitionedTransactionalSpout,
    PartitionedTransactionalSpout,
    TransactionalSpout,
)
from statefulbolts.transactional._status import (
    TransactionalStatus,
    stored_transactional_ids,
    transactional_status,
)
from statefulbolts.transactional._task import BatchFailed, TransactionalContext
from statefulbolts.transactional._topology import (
    TransactionalTopology,
    TransactionalTopologyBuilder,
)
from statefulbolts.transactional._txstate import (
    RotatingTransactionalState,
    TransactionalStateError,
)
from statefulbolts.transactional._values import OpaqueValue, TransactionalValue, txid_of

__all__ = [
    "BackingMap",
    "BaseTransactionalBolt",
    "BatchAction",
    "BatchBolt",
    "BatchFailed",
    "BatchOutputCollector",
    "Committer",
    "CoordinatorClosedError",
    "MemoryBackingMap",
    "MemoryTransactionalSpout",
    "OpaqueMap",
    "OpaqueMemoryTransactionalSpout",
    "OpaquePartitionedTransactionalSpout",
    "OpaqueRedisStreamsTransactionalSpout",
    "OpaqueValue",
    "PartitionedTransactionalSpout",
    "RedisBackingMap",
    "RedisStreamsTransactionalSpout",
    "RotatingTransactionalState",
    "StartBatch",
    "StartCommit",
    "StateBackingMap",
    "TransactionAttempt",
    "TransactionStatus",
    "TransactionalContext",
    "TransactionalMap",
    "TransactionalSpout",
    "TransactionalSpoutCoordinator",
    "TransactionalStateError",
    "TransactionalStatus",
    "TransactionalTopology",
    "TransactionalTopologyBuilder",
    "TransactionalValue",
    "load_streams",
    "opaque_coordinator",
    "partitioned_coordinator",
    "stored_transactional_ids",
    "transactional_status",
    "txid_of",
]

# Names that need redis-py, resolved when first used: the package imports without it. The
# spouts are connectors, which sit above this package (they implement its spout interfaces):
# they are named here for this package's users, by module name, and loaded only when asked for.
_REDIS = {
    "OpaqueRedisStreamsTransactionalSpout": "statefulbolts.connectors.redis",
    "RedisStreamsTransactionalSpout": "statefulbolts.connectors.redis",
    "load_streams": "statefulbolts.connectors.redis",
    "RedisBackingMap": "statefulbolts.transactional._redis_map",
}


def __getattr__(name: str) -> object:
    module = _REDIS.get(name)
    if module is None:
        msg = f"module 'statefulbolts.transactional' has no attribute {name!r}"
        raise AttributeError(msg)
    import importlib

    return getattr(importlib.import_module(module), name)
