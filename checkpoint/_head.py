"""The driver runs a small transaction's stateless head itself (``topology.driver.head``).

A job that carries data (a PREPARE, a plain batch) runs every bolt, stage by stage, and its
first stages are often stateless bolts (the word count's ``split``). Every stage boundary costs
the Spark job a shuffle and a stage, 20-40 ms on two cores however little it carries, and a
tuple's latency waits for all of it. So for a small transaction the driver runs those stages
itself, with the same task code, and Spark runs the rest (``JobSpec.driver_stages``): the word
count's PREPARE is one Spark stage. The job's outcome is the one it would have had: the same
tasks, fed the same records in the same order, send Spark's first stage what a ``partitionBy``
would have brought it; a head task's error fails the job as the same ``TaskFailedError``.

Which stages (``head_depth``), decided once per topology:

1. The leading stages of the data job whose every component is a bolt the driver can run as a
   task runs it (``movable``): not stateful, no timers, not windowed, no tick tuples. A
   topology reading a partitioned spout moves nothing: those spouts are read in the job's
   first stage, by the tasks (the runner passes ``never``), and so does the inline engine,
   which runs every stage here anyway.
2. The head ends at a wide boundary (``JobLayout.narrow``): across a narrow one Spark pipelines
   two stages in one task and seals nothing, so a cut there would ship what Spark never ships.
3. Spark runs at least the last stage of every job: a topology of stateless bolts only keeps
   its last stage on Spark, whatever leads to it.

When (``DriverHead.stages``), by ``topology.driver.head``: ``never``; ``always``; ``auto``
(the default) when the transaction's tuples times the head's cost per tuple fits
``topology.driver.head.budget.ms``. The cost is measured, from every data job's head tasks
whether Spark or the driver ran them (``observe``: their run time less the setup each task pays
whatever it carries, per tuple fed to the job, smoothed); before the first measurement it is
``DEFAULT_SECONDS_PER_TUPLE``, on the cautious side. A large batch, where the head is worth
Spark's parallel tasks, keeps it there.

Example:
    >>> from examples.wordcount import build
    >>> from statefulbolts.runtime import ExecutionPlan
    >>> plan = ExecutionPlan(build(10, parallelism=2))
    >>> layout = plan.layout(plan.bolts(), chain=True)
    >>> head = DriverHead("auto", 10.0, layout, {plan.index["split"]})
    >>> head.depth, head.stages(100), head.stages(100_000)
    (1, 1, 0)
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from typing import Literal

from statefulbolts.config import Config
from statefulbolts.runtime import JobLayout, JobResult, TupleBatch

__all__ = ["DEFAULT_SECONDS_PER_TUPLE", "HEAD_KEY", "DriverHead", "HeadMode", "fed", "head_depth"]

HEAD_KEY = Config.TOPOLOGY_DRIVER_HEAD
# The head's cost per tuple before any job measured it: a bolt that does a little work per
# tuple (the word count's split costs some 5-15 us a sentence on two busy cores).
DEFAULT_SECONDS_PER_TUPLE = 40e-6
# The weight of the latest job's measurement in the smoothed cost per tuple.
_SMOOTHING = 0.3

HeadMode = Literal["auto", "always", "never"]


def head_depth(layout: JobLayout, movable: Collection[int]) -> int:
    """How many leading stages of ``layout`` the driver may run (rules 1-3 of the module doc).

    Example:
        >>> layout = JobLayout(3, [[(0, 0)], [(1, 0)], [(2, 0)]], [True, False])
        >>> head_depth(layout, {0, 1, 2}), head_depth(layout, {0}), head_depth(layout, {1, 2})
        (2, 0, 0)
    """
    depth = 0
    for k in range(layout.depth - 1):  # rule 3: never the last stage
        if not all(comp in movable for comp, _ in layout.stages[k]):
            break  # rule 1
        if not layout.narrow[k]:
            depth = k + 1  # rule 2: a cut after stage k ships sealed records only
    return depth


class DriverHead:
    """Which leading stages of a data job the driver runs, transaction by transaction.

    ``layout`` is the topology's data job (every bolt, chained); ``movable`` the bolts whose
    tasks may run here (rule 1). ``components`` are those of the head, for ``observe`` and for
    the fault listener (a fault that needs a Spark worker there refuses the run).
    """

    def __init__(
        self,
        mode: HeadMode,
        budget_ms: float,
        layout: JobLayout,
        movable: Collection[int],
    ) -> None:
        self.mode = mode
        self.budget = budget_ms / 1000
        self.depth = 0 if mode == "never" else head_depth(layout, movable)
        self.components = frozenset(c for slots in layout.stages[: self.depth] for c, _ in slots)
        self.per_tuple: float | None = None  # measured seconds per tuple, smoothed

    def stages(self, tuples: int) -> int:
        """How many leading stages the driver runs in a job fed ``tuples`` tuples (0: none)."""
        if not self.depth:
            return 0
        if self.mode == "always":
            return self.depth
        per_tuple = DEFAULT_SECONDS_PER_TUPLE if self.per_tuple is None else self.per_tuple
        return self.depth if tuples * per_tuple <= self.budget else 0

    def observe(self, result: JobResult, records: Sequence[TupleBatch]) -> None:
        """Learn the head's cost per tuple from a data job fed ``records`` that succeeded."""
        tuples = fed(records)
        if not self.components or not tuples:
            return
        spent = sum(
            r.metrics.seconds - r.metrics.setup
            for r in result.reports
            if r.comp in self.components
        )
        sample = spent / tuples
        if not math.isfinite(sample) or sample < 0:
            return
        known = self.per_tuple
        self.per_tuple = sample if known is None else known + _SMOOTHING * (sample - known)


def fed(records: Sequence[TupleBatch]) -> int:
    """How many tuples ``records`` carry (one root, perhaps 0, per tuple)."""
    return sum(len(r.roots) for r in records)
