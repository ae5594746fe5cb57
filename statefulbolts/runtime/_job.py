"""One checkpoint transaction as one Spark job: a chain of stages, one per bolt level."""

from __future__ import annotations

from typing import Any

from statefulbolts.runtime._plan import ExecutionPlan
from statefulbolts.runtime._task import TaskEnv, reduce_acks, run_slot


def _identity(key: int) -> int:
    return key


def run_job(sc: Any, env: TaskEnv, topology_blob: Any, first: list[list[Any]]) -> list[Any]:
    """Run every level over ``first`` (the records per level-0 slot) and return the acker output.

    Returns a list of ``(acks, fails, side_records)`` per acker partition.
    """
    plan: ExecutionPlan = env.plan
    n0 = len(plan.levels[0].slots)
    rdd = sc.parallelize([(s, first[s]) for s in range(n0)], n0)

    def stage(level: int) -> Any:
        def fn(slot: int, items: Any) -> Any:
            return run_slot(env, topology_blob, level, slot, items)

        return fn

    rdd = rdd.mapPartitionsWithIndex(stage(0), preservesPartitioning=False)
    for level in range(1, plan.depth):
        n = len(plan.levels[level].slots)
        rdd = rdd.partitionBy(n, _identity).mapPartitionsWithIndex(stage(level))
    if env.ackers > 0:
        rdd = rdd.partitionBy(env.ackers, _identity).mapPartitions(reduce_acks)
        return rdd.collect()
    return reduce_acks(rdd.collect())
