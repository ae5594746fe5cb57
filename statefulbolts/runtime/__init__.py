"""The Spark runtime: the only package that imports pyspark."""

from statefulbolts.runtime._cluster import LocalCluster, TopologyHandle
from statefulbolts.runtime._driver import TopologyRunner, TransactionInfo
from statefulbolts.runtime._spark import build_session, is_local, task_attempt

__all__ = [
    "LocalCluster",
    "TopologyHandle",
    "TopologyRunner",
    "TransactionInfo",
    "build_session",
    "is_local",
    "task_attempt",
]
