"""What ``build_session`` sets for local masters, and what a Python worker sets up once.

Loopback binding, the driver JVM's options, Unix domain sockets to the Python workers; and a
worker's first task freezing the objects that live as long as the worker.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyspark
import pytest

from statefulbolts.runtime._spark import (
    DAEMON_KEY,
    DAEMON_MODULE,
    LOCAL_JVM_OPTIONS,
    LOOPBACK,
    UDS_KEY,
    local_jvm_settings,
    loopback_settings,
    python_worker_settings,
    with_task_retries,
)

ROOT = Path(__file__).resolve().parents[2]


def test_local_jvm_runs_c1_only_unless_the_user_chose_options():
    assert local_jvm_settings() == {"spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1"}
    assert local_jvm_settings({"spark.driver.extraJavaOptions": "-Xss4m"}) == {}
    assert local_jvm_settings({"spark.driver.extraJavaOptions": ""}) == {}
    # A standalone cluster on this machine: its executors too.
    assert local_jvm_settings(executors=True) == {
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
        "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1",
    }
    mine = {"spark.executor.extraJavaOptions": "-Xss4m"}
    assert local_jvm_settings(mine, executors=True) == {
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1"
    }


def test_loopback_settings_keep_what_the_user_set():
    settings = loopback_settings({"spark.driver.host": "10.0.0.5"})
    assert "spark.driver.host" not in settings
    assert settings["spark.driver.bindAddress"] == LOOPBACK


def test_python_workers_use_unix_sockets_unless_the_user_chose():
    assert python_worker_settings({UDS_KEY: "false"}) == {}
    major, minor = (int(p) for p in pyspark.__version__.split(".")[:2])
    expected = {UDS_KEY: "true"} if (major, minor) >= (4, 1) else {}
    assert python_worker_settings() == expected


def test_local_masters_retry_tasks_like_a_cluster():
    assert with_task_retries("local[2]", 4) == "local[2,4]"
    assert with_task_retries("local", 3) == "local[1,3]"
    assert with_task_retries("local[2,1]", 4) == "local[2,1]"
    assert with_task_retries("spark://127.0.0.1:7077", 4) == "spark://127.0.0.1:7077"


def test_the_shared_local_session_got_loopback_and_the_jvm_options(spark: Any):
    conf = spark.sparkContext.getConf()
    assert conf.get("spark.driver.host") == LOOPBACK
    assert conf.get("spark.driver.bindAddress") == LOOPBACK
    assert conf.get("spark.driver.extraJavaOptions").endswith(LOCAL_JVM_OPTIONS)
    # The running JVM really took the flag (it was started with it, not just told about it).
    jvm = spark.sparkContext._jvm
    args = list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments())
    assert LOCAL_JVM_OPTIONS in args


def test_the_shared_local_session_talks_to_its_workers_over_unix_sockets(spark: Any):
    if not python_worker_settings():
        # The only way to get here is an older PySpark, which has no such transport.
        assert tuple(int(p) for p in pyspark.__version__.split(".")[:2]) < (4, 1)
        return
    assert spark.sparkContext.getConf().get(UDS_KEY) == "true"

    def transport(_: Any) -> Any:
        yield os.environ.get("PYTHON_UNIX_DOMAIN_ENABLED")

    seen = spark.sparkContext.parallelize([0, 1], 2).mapPartitions(transport).collect()
    assert [value.lower() for value in seen] == ["true", "true"]


# Runs in a fresh interpreter: it freezes objects of the process it runs in.
_FREEZE_PROBE = """
import gc, json
from pyspark import cloudpickle
from examples.wordcount import build
from checkpoint import Action, CheckpointTaskProgram
from statefulbolts.runtime._plan import ExecutionPlan
from statefulbolts.runtime._records import TupleBatch, id_column
from statefulbolts.runtime._program import TaskJob
from statefulbolts.runtime._task import run_task

topology = build(4, 1)
plan = ExecutionPlan(topology)
blob = cloudpickle.dumps(topology)
program = CheckpointTaskProgram(Action.PREPARE, 0)
job = TaskJob(plan, plan.layout(plan.bolts()), program, "probe", {"topology.name": "probe"}, 0, 0)
spout, split = plan.index["sentences"], plan.index["split"]
batch = TupleBatch(split, 0, spout, 0, 0, ["a b c"], id_column([7]), None)
counts = [gc.get_freeze_count()]
out = list(run_task(job, blob, 0, 0, [(0, [batch])]))
counts.append(gc.get_freeze_count())
made_between_tasks = [[i] for i in range(5000)]  # alive at the next task's start
out = list(run_task(job, blob, 0, 0, [(0, [batch])]))
counts.append(gc.get_freeze_count())
emitted = sum(len(r.column()) for _, records in out for r in records if type(r) is TupleBatch)
print(json.dumps({"counts": counts, "emitted": emitted}))
"""


def test_a_worker_freezes_what_outlives_its_tasks_once():
    # PySpark's daemon runs a full collection after every task; frozen objects are not walked.
    result = subprocess.run(
        [sys.executable, "-c", _FREEZE_PROBE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    before, first, second = report["counts"]
    assert report["emitted"] == 3  # the task ran: three words
    assert before == 0
    assert first > 10_000  # modules, classes and functions of pyspark and this package
    # Once per process: what later tasks find alive (5,000 lists here) stays collectable.
    assert abs(second - first) < 100


def test_local_workers_run_under_the_quiet_daemon(spark: Any):
    assert spark.sparkContext.getConf().get(DAEMON_KEY) == DAEMON_MODULE

    def daemon(_: Any) -> Any:
        main = sys.modules["__main__"]
        yield getattr(getattr(main, "__spec__", None), "name", None)

    seen = spark.sparkContext.parallelize([0, 1], 2).mapPartitions(daemon).collect()
    assert seen == [DAEMON_MODULE, DAEMON_MODULE]


# Runs in a fresh interpreter: sessions of its own, started and stopped as a user's script does.
_CLEAN_EXIT_PROBE = """
from examples import wordcount
for _ in range(3):
    assert wordcount.main(["--sentences", "200", "--json"]) == 0
"""


@pytest.mark.spark
def test_runs_end_without_worker_tracebacks():
    # PySpark's daemon printed a BrokenPipeError traceback for idle workers at session stop,
    # in about one run of three; three sessions here.
    result = subprocess.run(
        [sys.executable, "-c", _CLEAN_EXIT_PROBE],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    assert "BrokenPipeError" not in result.stderr
