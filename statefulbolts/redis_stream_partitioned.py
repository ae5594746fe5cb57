"""Moved to ``statefulbolts.connectors.redis``; this old path warns once and re-exports it."""

from statefulbolts._moved import warn_moved
from statefulbolts.connectors.redis import KEYS_KEY, PATTERN_KEY, PartitionedRedisStreamSpout

__all__ = ["KEYS_KEY", "PATTERN_KEY", "PartitionedRedisStreamSpout"]

warn_moved("statefulbolts.redis_stream_partitioned", __name__)
