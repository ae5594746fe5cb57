"""statefulbolts: Storm-style stateful topologies, checkpointed, running on Apache Spark.

Example:
    >>> from statefulbolts import TopologyBuilder, Config, LocalCluster  # doctest: +SKIP
    >>> with LocalCluster() as cluster:  # doctest: +SKIP
    ...     handle = cluster.submit_topology("wc", Config(), builder.create_topology())
    ...     handle.await_idle(60)
    ...     counts = handle.read_state("count")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from statefulbolts.clock import Clock, ManualClock
from statefulbolts.collectors import (
    BasicOutputCollector,
    ColumnOutputCollector,
    OutputCollector,
    SpoutOutputCollector,
)
from statefulbolts.components import (
    BasicBolt,
    Bolt,
    OutputFieldsDeclarer,
    Spout,
    SpoutReplayWarning,
    StatefulBolt,
)
from statefulbolts.config import Config, TopologyConfig, validate_config
from statefulbolts.connectors import DirectorySpout, PartitionedRedisStreamSpout
from statefulbolts.context import TopologyContext
from statefulbolts.errors import (
    ConfigError,
    FailedException,
    ReportedFailedException,
    StatefulBoltsError,
    TopologyError,
    TopologyFailedError,
)
from statefulbolts.partitioned import PartitionBatch, PartitionedSpout, PartitionReader
from statefulbolts.ticks import SYSTEM_COMPONENT_ID, TICK_STREAM_ID, is_tick_tuple
from statefulbolts.timers import TimeDomain, TimerBolt, TimerService
from statefulbolts.topology import (
    CHECKPOINT_COMPONENT_ID,
    CHECKPOINT_STREAM_ID,
    BoltDeclarer,
    GlobalStreamId,
    Grouping,
    GroupingKind,
    StormTopology,
    TopologyBuilder,
)
from statefulbolts.transactional import (
    BackingMap,
    BaseTransactionalBolt,
    BatchBolt,
    BatchOutputCollector,
    Committer,
    MemoryBackingMap,
    MemoryTransactionalSpout,
    OpaqueMap,
    OpaqueMemoryTransactionalSpout,
    OpaquePartitionedTransactionalSpout,
    OpaqueValue,
    PartitionedTransactionalSpout,
    StateBackingMap,
    TransactionalMap,
    TransactionalSpout,
    TransactionalTopology,
    TransactionalTopologyBuilder,
    TransactionalValue,
    TransactionAttempt,
)
from statefulbolts.tuples import ColumnBatch, Fields, Tuple, Values
from statefulbolts.windowing import (
    BaseStatefulWindowedBolt,
    BaseWindowedBolt,
    Count,
    Duration,
    Window,
)

if TYPE_CHECKING:
    from statefulbolts._cluster import LocalCluster, TopologyHandle
    from statefulbolts.submitter import StormSubmitter

__all__ = [
    "CHECKPOINT_COMPONENT_ID",
    "CHECKPOINT_STREAM_ID",
    "SYSTEM_COMPONENT_ID",
    "TICK_STREAM_ID",
    "BackingMap",
    "BaseStatefulWindowedBolt",
    "BaseTransactionalBolt",
    "BaseWindowedBolt",
    "BasicBolt",
    "BasicOutputCollector",
    "BatchBolt",
    "BatchOutputCollector",
    "Bolt",
    "BoltDeclarer",
    "Clock",
    "ColumnBatch",
    "ColumnOutputCollector",
    "Committer",
    "Config",
    "ConfigError",
    "Count",
    "DirectorySpout",
    "Duration",
    "FailedException",
    "Fields",
    "GlobalStreamId",
    "Grouping",
    "GroupingKind",
    "LocalCluster",
    "ManualClock",
    "MemoryBackingMap",
    "MemoryTransactionalSpout",
    "OpaqueMap",
    "OpaqueMemoryTransactionalSpout",
    "OpaquePartitionedTransactionalSpout",
    "OpaqueValue",
    "OutputCollector",
    "OutputFieldsDeclarer",
    "PartitionBatch",
    "PartitionReader",
    "PartitionedRedisStreamSpout",
    "PartitionedSpout",
    "PartitionedTransactionalSpout",
    "ReportedFailedException",
    "Spout",
    "SpoutOutputCollector",
    "SpoutReplayWarning",
    "StateBackingMap",
    "StatefulBolt",
    "StatefulBoltsError",
    "StormSubmitter",
    "StormTopology",
    "TimeDomain",
    "TimerBolt",
    "TimerService",
    "TopologyBuilder",
    "TopologyConfig",
    "TopologyContext",
    "TopologyError",
    "TopologyFailedError",
    "TopologyHandle",
    "TransactionAttempt",
    "TransactionalMap",
    "TransactionalSpout",
    "TransactionalTopology",
    "TransactionalTopologyBuilder",
    "TransactionalValue",
    "Tuple",
    "Values",
    "Window",
    "is_tick_tuple",
    "validate_config",
]

_LAZY = {
    "LocalCluster": "statefulbolts._cluster",
    "StormSubmitter": "statefulbolts.submitter",
    "TopologyHandle": "statefulbolts._cluster",
}


def __getattr__(name: str) -> Any:
    # The cluster imports the engine, which imports pyspark; load it only when asked for, so
    # components (which run inside Spark workers) and the protocol packages import
    # statefulbolts cheaply and without cycles.
    if name in _LAZY:
        from importlib import import_module

        return getattr(import_module(_LAZY[name]), name)
    msg = f"module 'statefulbolts' has no attribute {name!r}"
    raise AttributeError(msg)
