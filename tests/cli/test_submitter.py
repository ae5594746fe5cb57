"""``StormSubmitter`` and ``statefulbolts run`` inside an application, on the shared session.

Under ``spark-submit`` these find the application's session; in this test session the shared
``local[2]`` session is that session (the active one), so the waiting, killing and signal
handling are tested here, and ``tests/cli/test_cluster_submit.py`` runs them under a real
``spark-submit``. ``PYSPARK_GATEWAY_PORT`` set by hand makes this process look launched by
``spark-submit`` where only that decision is tested.
"""

from __future__ import annotations

import json
import logging
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from examples.wordcount import build, expected_counts
from statefulbolts import StormSubmitter
from statefulbolts.cli import main as cli_main
from statefulbolts.errors import ConfigError
from statefulbolts.runtime._spark import (
    DAEMON_KEY,
    LOOPBACK,
    UDS_KEY,
    _session_settings,
    python_worker_settings,
)
from statefulbolts.submitter import check_supervise, cluster_for_run

ROOT = Path(__file__).resolve().parents[2]
# Endless input in small transactions.
ENDLESS = {"topology.max.spout.pending": 200, "topology.state.checkpoint.interval.ms": 100}
# The kill tests stop the topology this long after its first commit: varied by
# STATEFULBOLTS_SEED (loops run it with many seeds, so the stop lands in different phases).
STOP_DELAY = random.Random(os.environ.get("STATEFULBOLTS_SEED", "0")).uniform(0.0, 0.8)


def _after_first_commit(action: Any) -> tuple[Any, threading.Event]:
    """An ``on_transaction`` callback, and an event set once the first COMMIT succeeded."""
    committed = threading.Event()

    def on_transaction(info: Any) -> None:
        if info.action == "COMMIT" and info.ok:
            committed.set()

    def run() -> None:
        if committed.wait(240):
            time.sleep(STOP_DELAY)
            action()

    threading.Thread(target=run, daemon=True).start()
    return on_transaction, committed


def committed_prefix(counts: dict[str, int]) -> int:
    """The ``k`` for which ``counts`` are exactly the counts of sentences ``0 .. k-1``."""
    total, k = sum(counts.values()), 0
    while sum(expected_counts(k).values()) < total:
        k += 1
    assert Counter(counts) == expected_counts(k), "not the counts of a prefix of the sentences"
    return k


@pytest.mark.spark
def test_wait_until_idle_returns_the_outcome_and_kills_the_topology(spark: Any) -> None:
    handle = StormSubmitter.submit_topology("sub-idle", {}, build(300))
    assert handle.runner.engine.sc is spark.sparkContext  # the application's session
    assert StormSubmitter.wait(240, until_idle=True) == {"sub-idle": "idle"}
    assert handle.runner.done and handle.error is None
    assert handle.read_state("count") == dict(expected_counts(300))


@pytest.mark.spark
def test_sigterm_kills_the_topologies_and_ends_the_wait(spark: Any) -> None:
    original = signal.getsignal(signal.SIGTERM)

    def terminate() -> None:
        # Only once wait() handles SIGTERM: the default action would end this test session.
        deadline = time.monotonic() + 60
        while signal.getsignal(signal.SIGTERM) is original and time.monotonic() < deadline:
            time.sleep(0.01)
        if signal.getsignal(signal.SIGTERM) is not original:
            os.kill(os.getpid(), signal.SIGTERM)

    on_transaction, _ = _after_first_commit(terminate)
    handle = StormSubmitter.submit_topology(
        "sub-term", ENDLESS, build(10**9), on_transaction=on_transaction
    )
    assert StormSubmitter.wait(240) == {"sub-term": "terminated"}
    assert signal.getsignal(signal.SIGTERM) is original
    assert handle.runner.done and handle.error is None
    # Stopped after a transaction: the committed counts are those of the first k sentences.
    assert committed_prefix(handle.read_state("count")) > 0


@pytest.mark.spark
def test_a_kill_from_another_thread_ends_the_wait(spark: Any) -> None:
    on_transaction, _ = _after_first_commit(lambda: StormSubmitter.kill_topology("sub-kill"))
    handle = StormSubmitter.submit_topology(
        "sub-kill", ENDLESS, build(10**9), on_transaction=on_transaction
    )
    assert StormSubmitter.wait(240) == {"sub-kill": "killed"}
    assert committed_prefix(handle.read_state("count")) > 0
    with pytest.raises(ValueError, match="no topology named 'sub-kill' was submitted"):
        StormSubmitter.kill_topology("sub-kill")


@pytest.mark.spark
def test_a_wait_that_times_out_kills_the_topologies(spark: Any) -> None:
    handle = StormSubmitter.submit_topology("sub-slow", ENDLESS, build(10**9))
    with pytest.raises(TimeoutError, match=r"\['sub-slow'\] still running after 1.0 s"):
        StormSubmitter.wait(1.0)
    assert handle.runner.done and handle.error is None


def test_outside_an_application_submitting_says_what_to_do(tmp_path: Path) -> None:
    code = (
        "from examples.wordcount import build\n"
        "from statefulbolts import StormSubmitter\n"
        "StormSubmitter.submit_topology('x', {}, build(1))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYSPARK_GATEWAY_PORT"}
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip
    assert result.returncode == 1
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("statefulbolts.errors.ConfigError: no Spark application to submit to")
    assert "spark-submit --master URL app.py" in last and "LocalCluster(master)" in last


@pytest.mark.spark
def test_run_under_spark_submit_takes_its_session_and_ignores_master(
    spark: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1")  # as spark-submit's child sees it
    with caplog.at_level(logging.WARNING, logger="statefulbolts.submitter"):
        cluster = cluster_for_run("local[7]")
    cluster.shutdown()
    assert cluster.spark is spark
    assert not spark.sparkContext._jsc.sc().isStopped()  # not the cluster's to stop
    master = spark.sparkContext.master
    assert caplog.messages == [
        f"--master local[7] ignored: spark-submit runs this application on {master}"
    ]


def test_supervise_is_refused_under_spark_submit(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    check_supervise()  # not under spark-submit: fine
    monkeypatch.setenv("PYSPARK_GATEWAY_PORT", "1")
    with pytest.raises(
        ConfigError, match="--supervise cannot restart a driver inside spark-submit"
    ):
        check_supervise()
    assert cli_main(["run", "examples.wordcount:topology", "--supervise"]) == 2
    assert "use spark-submit's own --supervise" in capsys.readouterr().err


def test_run_with_the_inline_engine_runs_the_word_count_without_spark(capsys: Any) -> None:
    assert cli_main(["run", "examples.wordcount:topology", "--engine", "inline", "--json"]) == 0
    lines = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    [done] = [line for line in lines if line["event"] == "done"]
    words = sum(expected_counts(2000).values())
    assert done["components"]["count"]["executed"] == words
    assert done["components"]["count"]["failed"] == 0


def test_the_inline_engine_takes_no_master(capsys: Any) -> None:
    argv = ["run", "examples.wordcount:topology", "--engine", "inline", "--master", "local[2]"]
    assert cli_main(argv) == 2
    assert "--engine inline runs without Spark: it takes no --master local[2]" in (
        capsys.readouterr().err
    )


def test_the_launcher_gives_its_path_and_runs_the_command_line_from_the_current_folder(
    tmp_path: Path,
) -> None:
    found = subprocess.run(
        [sys.executable, "-m", "statefulbolts.launcher", "--path"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    launcher = found.stdout.strip()
    assert launcher == str(ROOT / "statefulbolts" / "launcher.py")
    # Run as a script (as spark-submit runs it), with a topology module in the current folder.
    (tmp_path / "here_topology.py").write_text("def topology():\n    return 42\n")
    run = subprocess.run(
        [sys.executable, launcher, "run", "here_topology:topology"],
        cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert run.returncode == 2
    assert run.stderr.strip() == (
        "error: here_topology:topology returned int; expected a StormTopology, a "
        "TransactionalTopology or their builder"
    )


def test_what_a_session_gets_for_each_kind_of_master() -> None:
    uds = {UDS_KEY: "true"} if python_worker_settings() else {}
    loopback = {
        "spark.driver.host": LOOPBACK,
        "spark.driver.bindAddress": LOOPBACK,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
    }
    c1 = "-XX:TieredStopAtLevel=1"
    local = _session_settings("local[2]", {}, 4)
    assert local.pop("spark.executorEnv.PYTHONPATH").split(os.pathsep)[0]  # this sys.path
    assert local == {
        **loopback,
        **uds,
        DAEMON_KEY: "statefulbolts.runtime._daemon",
        "spark.driver.extraJavaOptions": c1,
    }
    # A standalone master here: loopback, but executors get the project only by shipping, and
    # start PySpark's own daemon (ours is not on their path before the first task); its
    # executors share this machine's cores, so they get the C1 JIT as the driver does.
    here = _session_settings("spark://127.0.0.1:7077", {}, 6)
    assert here == {
        **loopback,
        **uds,
        "spark.task.maxFailures": "6",
        "spark.driver.extraJavaOptions": c1,
        "spark.executor.extraJavaOptions": c1,
    }
    assert _session_settings("spark://10.0.0.5:7077", {}, 4) == {"spark.task.maxFailures": "4"}
    assert _session_settings("yarn", {"spark.task.maxFailures": "9"}, 4) == {}
    # What the user (or spark-submit's --conf) set is never overridden.
    given = {
        "spark.driver.host": "10.0.0.7",
        DAEMON_KEY: "mine",
        "spark.executorEnv.PYTHONPATH": "x",
    }
    assert not set(given) & set(_session_settings("local[2]", given, 4))
