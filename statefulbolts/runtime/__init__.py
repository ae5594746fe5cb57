"""The Spark runtime: the only package that imports pyspark."""

from statefulbolts.runtime._cluster import LocalCluster, TopologyHandle
from statefulbolts.runtime._driver import CheckpointRunner
from statefulbolts.runtime._runner import TopologyRunner
from statefulbolts.runtime._spark import build_session, is_local, task_attempt
from statefulbolts.runtime._stats import TransactionInfo

__all__ = [
    "CheckpointRunner",
    "LocalCluster",
    "TopologyHandle",
    "TopologyRunner",
    "TransactionInfo",
    "build_session",
    "is_local",
    "task_attempt",
]
