"""What a transactional batch costs Spark at ``topology.max.spout.pending`` 1 (issue 35).

One Spark job of one stage per batch: its emitters are the first step of its processing tasks,
chained in the same Python task (``TransactionalJobs.emit_and_process``), and the commit runs
in the driver ("auto", ``SparkEngine.run_here``). The job's tasks get no input from the driver,
so no job writes one (``SparkEngine._empty_slots``). Spark's status tracker counts the jobs and
their stages; the counts are exact.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import topologies as topo
import tx_topologies as tx

from statefulbolts import MemoryTransactionalSpout, TransactionalTopologyBuilder
from statefulbolts.runtime._pyrdd import PythonStages

pytestmark = pytest.mark.spark

DATA = {
    0: [["cat"], ["dog"], ["cat"], ["apple"], ["dog"], ["cat"], ["pear"]],
    1: [["dog"], ["fig"], ["cat"], ["fig"]],
    2: [["apple"], ["cat"], ["dog"], ["dog"], ["kiwi"], ["cat"]],
}


def test_a_batch_is_one_spark_job_of_one_stage_and_its_commit_none(
    cluster: Any, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sc = spark.sparkContext
    made: list[int] = []
    parallelize = type(sc).parallelize

    def counted(self: Any, data: Any, slices: Any = None) -> Any:
        made.append(len(data))
        return parallelize(self, data, slices)

    # The context's empty slots, which an earlier topology may have made already: every job
    # of this one starts from them, and none parallelizes anything.
    PythonStages.of(sc).empty_slots(2)
    monkeypatch.setattr(type(sc), "parallelize", counted)
    log = tx.Log(tmp_path)
    tid = topo.new_key("one-job")
    builder = TransactionalTopologyBuilder(
        tid, "spout", MemoryTransactionalSpout(DATA, ["word"], 2), 2
    )
    # The bench's shape: bolts after the emitters in their tasks, a committer after a fields
    # grouping.
    builder.set_bolt("ones", tx.Ones(), 2).none_grouping("spout")
    builder.set_bolt("count", tx.Recorder(log), 2).none_grouping("ones")
    builder.set_committer_bolt("commit", tx.CountCommitter(log), 2).fields_grouping(
        "count", ["key"]
    )
    conf = {"topology.max.spout.pending": 1, "topology.state.checkpoint.interval.ms": 50}
    handle = cluster.submit_topology(tid, conf, builder.build_topology())
    handle.await_idle(240)
    assert handle.read_state("commit") == tx.total(DATA)
    committed = [t for t in handle.metrics()["transactions"] if t["ok"]]
    assert [t["txid"] for t in committed] == list(range(1, len(committed) + 1))
    assert sum(t["tuples"] for t in committed) == sum(len(rows) for rows in DATA.values())
    tracker = sc.statusTracker()
    for t in committed:
        # Attempt ids count up over the run: each txid has one (no batch failed here).
        jobs = {
            action: [
                job
                for attempt in range(1, 40)
                for job in tracker.getJobIdsForGroup(
                    f"{tid}/{action}/txid={t['txid']}/attempt={attempt}"
                )
            ]
            for action in ("EMIT+PROCESS", "EMIT", "PROCESS", "COMMIT")
        }
        assert [len(jobs[a]) for a in jobs] == [1, 0, 0, 0], (t, jobs)
        assert len(tracker.getJobInfo(jobs["EMIT+PROCESS"][0]).stageIds) == 1, t
    handle.kill()
    assert made == []
