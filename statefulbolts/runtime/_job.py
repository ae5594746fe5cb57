"""One checkpoint transaction as one Spark job: a chain of stages, one per bolt level."""

from __future__ import annotations

from typing import Any

from statefulbolts.runtime._plan import ExecutionPlan
from statefulbolts.runtime._task import TaskEnv, reduce_acks, run_flat, run_slot


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


def run_flat_job(sc: Any, env: TaskEnv, topology_blob: Any, per_task: list[list[Any]]) -> list[Any]:
    """A data-free checkpoint (COMMIT, ROLLBACK, INITSTATE): one stage over the stateful tasks.

    Each stateful task gets the checkpoint tuple from every one of its checkpoint input tasks, as
    if it had been forwarded down the DAG; forwarders have no state and no hooks, so skipping them
    changes nothing but the cost (one stage instead of one per level).
    """
    n = len(per_task)
    rdd = sc.parallelize([(i, per_task[i]) for i in range(n)], n)

    def fn(slot: int, items: Any) -> Any:
        return run_flat(env, topology_blob, slot, items)

    return reduce_acks(rdd.mapPartitionsWithIndex(fn).collect())
