"""A COMMIT without tasks: when the driver may commit the stateful bolts' states itself.

A COMMIT(t) task (``StatefulBoltExecutor``) runs the bolt's ``pre_commit(t)``, then
``state.commit(t)``, then forwards the checkpoint tuple. In COMMIT's data-free job the forward
reaches no other task, and the acks a COMMIT releases were released when PREPARE(t) ended. So
where no stateful bolt has a ``pre_commit`` of its own, COMMIT(t) is ``state.commit(t)`` on the
namespace of every stateful task, in any order, and needs no task at all: the driver reaches the
same states through the provider (the runtime's ``CheckpointJobs.commit_here``), and the
transaction saves a Spark job (35-60 ms for one Python stage on two cores: most of what a
small transaction's COMMIT cost).

What stays the same: a state that cannot commit raises as the task would (the COMMIT fails and
is retried through the spout's recovery); a state backend outage is one; the mid-commit kill
point fires after each task's state committed; COMMITTED(t) is saved only after every state
committed. What a task would add and the driver leaves out: ``prepare`` and ``cleanup`` of the
bolt objects, which only set up for the tuples a COMMIT does not carry.
"""

from __future__ import annotations

from statefulbolts.components import StatefulBolt
from statefulbolts.topology import StormTopology

__all__ = ["commit_hooks"]


def commit_hooks(topology: StormTopology) -> list[str]:
    """The stateful bolts whose class has a ``pre_commit`` of its own: their COMMIT is a task.

    Example:
        >>> from statefulbolts import TopologyBuilder
        >>> from examples.wordcount import SentenceSpout, SplitSentence, WordCount
        >>> builder = TopologyBuilder()
        >>> _ = builder.set_spout("s", SentenceSpout(10))
        >>> _ = builder.set_bolt("split", SplitSentence()).shuffle_grouping("s")
        >>> _ = builder.set_bolt("count", WordCount()).fields_grouping("split", ["word"])
        >>> commit_hooks(builder.create_topology())
        []
    """
    found = []
    for cid in topology.components:
        spec = topology.component(cid)
        if spec.is_stateful and type(spec.obj).pre_commit is not StatefulBolt.pre_commit:
            found.append(cid)
    return found
