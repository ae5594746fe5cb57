"""A partitioned spout on real Spark: the files are read in the PREPARE jobs' Spark tasks.

The word count of ``partitioned_topologies`` on the shared ``local[2]`` session, with a Python
worker crash in ``count`` on the first attempt of a PREPARE: Spark runs the task again (the
spout tasks' output is the input it reads again), and the counts and positions are exact.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import topologies as topo
from partitioned_topologies import corpus, end_positions, expected_counts, word_count

pytestmark = pytest.mark.spark


def test_the_word_count_over_a_directory_on_spark_is_exact_through_a_worker_crash(
    spark: Any, cluster: Any, tmp_path: Path
) -> None:
    folder = corpus(tmp_path / "in", files=3, lines=30)
    crash = {"component": "count", "task": 0, "kind": "crash", "txid": 2, "at_tuple": 2}
    conf = {
        "topology.state.checkpoint.interval.ms": 1,
        "topology.max.spout.pending": 25,
        "topology.faults": {"tasks": [crash]},
    }
    outcomes: list[bool] = []
    name = topo.new_key("part-spark")
    handle = cluster.submit_topology(
        name,
        conf,
        word_count(folder),
        on_transaction=lambda info: outcomes.append(info.ok),
    )
    handle.await_idle(240)
    assert handle.read_state("count") == expected_counts(folder)
    assert handle.status()["partition_positions"]["files"] == end_positions(folder)
    assert all(outcomes)  # the crash was Spark's to retry: no transaction failed
    # It happened, in PREPARE(2)'s job, whose first stage is the spout's two tasks.
    tracker = spark.sparkContext.statusTracker()
    [job] = tracker.getJobIdsForGroup(f"{name}/PREPARE/txid=2")
    stages = tracker.getJobInfo(job).stageIds
    assert sum(tracker.getStageInfo(s).numFailedTasks for s in stages) == 1
