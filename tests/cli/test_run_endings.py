"""How ``statefulbolts run`` ends, as a user meets it: ``--timeout``, a closed pipe, a store away.

Each test runs the installed-script form of the command (``test_cli_first_hour.script``) in a
child process, from a folder of its own, and asserts what the user sees: the lines, the exit
status and, for ``--timeout``, how long the command took (that is the feature).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from redis_fixtures import free_port
from test_cli_first_hour import ROOT, script, statefulbolts, write_conf, write_module

from recovery.supervisor import BAD_INPUT_EXIT_CODE, TIMEOUT_EXIT_CODE
from statefulbolts.cli import _stdout

__all__ = ["script"]  # the fixture, shared with test_cli_first_hour

REDIS = "providers.redis.RedisKeyValueStateProvider"

# A word count whose one transaction takes far longer than any test: every sentence sleeps.
SLOW_TOPOLOGY = """\
    import time

    from examples.wordcount import SentenceSpout, SplitSentence, WordCount
    from statefulbolts import BasicBolt, Fields, TopologyBuilder


    class Slow(BasicBolt):
        def execute(self, tuple, collector):
            time.sleep(0.05)
            collector.emit([tuple.get_value(0)])

        def declare_output_fields(self, declarer):
            declarer.declare(Fields("sentence"))


    def topology():
        builder = TopologyBuilder()
        builder.set_spout("sentences", SentenceSpout(100_000), 1)
        builder.set_bolt("slow", Slow(), 1).shuffle_grouping("sentences")
        builder.set_bolt("split", SplitSentence(), 2).shuffle_grouping("slow")
        builder.set_bolt("count", WordCount(), 2).fields_grouping("split", Fields("word"))
        return builder.create_topology()
"""


def _timed(script: Path, *args: str, cwd: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = statefulbolts(script, *args, cwd=cwd, timeout=300)
    return done, time.monotonic() - started


# ------------------------------------------------------------------------------------ --timeout
@pytest.mark.spark
def test_timeout_is_counted_from_the_start_and_spark_start_up_is_in_it(
    script: Path, tmp_path: Path
) -> None:
    write_module(tmp_path, "slow", SLOW_TOPOLOGY)
    done, seconds = _timed(script, "run", "slow:topology", "--timeout", "3", cwd=tmp_path)
    assert done.returncode == TIMEOUT_EXIT_CODE, done.stderr
    # Within a second or two on an idle machine; the bound leaves room for a busy one (before
    # the fix, --timeout 3 took 24 s: Spark's start-up and the running transaction uncounted).
    assert seconds < 3 + 12, f"--timeout 3 took {seconds:.1f} s"
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    assert errors[0].startswith("error: --timeout 3 s ran out "), errors
    assert "idle" not in done.stdout, done.stdout


@pytest.mark.spark
def test_timeout_during_a_transaction_says_where_the_topology_was_and_does_not_wait_for_it(
    script: Path, tmp_path: Path
) -> None:
    write_module(tmp_path, "slow", SLOW_TOPOLOGY)
    # Past any Spark start-up, well inside the first PREPARE (an hour and a half of sleeps).
    done, seconds = _timed(script, "run", "slow:topology", "--timeout", "14", cwd=tmp_path)
    assert done.returncode == TIMEOUT_EXIT_CODE, done.stderr
    # Before the fix the run waited for the PREPARE (106 s); the bound leaves room for a busy
    # machine's slow cancel.
    assert seconds < 14 + 20, f"--timeout 14 took {seconds:.1f} s"
    [error] = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    prefix = "error: --timeout 14 s ran out before topology 'slow' was idle ("
    assert error.startswith(prefix), error
    if "running PREPARE(0)" in error:  # the usual case; a very busy machine may start Spark later
        assert error == (
            "error: --timeout 14 s ran out before topology 'slow' was idle (PREPARING(0), running "
            "PREPARE(0); 100000 tuple trees pending); stopped without waiting for its running "
            "transaction"
        )
        lines = done.stdout.splitlines()
        assert "topology 'slow' stopped by --timeout after 1 transactions" in lines
    assert "idle" not in done.stdout, done.stdout


# ---------------------------------------------------------------------------------- | head -1
def test_a_reader_that_goes_away_stops_the_run_quietly(script: Path, tmp_path: Path) -> None:
    """``statefulbolts run ... --json | head -1``: no traceback, the shell's status for SIGPIPE."""
    write_module(
        tmp_path,
        "many",
        "from examples.wordcount import build\n\nTOPOLOGY = build(2000)\n",
    )
    conf = write_conf(tmp_path, {"topology.max.spout.pending": 10})  # 200 transactions
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    env["PYTHONPATH"] = str(ROOT)
    command = [sys.executable, str(script), "run", "many:TOPOLOGY", "--engine", "inline"]
    child = subprocess.Popen(
        [*command, "--conf", str(conf), "--json"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert child.stdout is not None and child.stderr is not None
    first = json.loads(child.stdout.readline())
    child.stdout.close()  # as head -1 does once it has its line
    stderr = child.stderr.read()
    assert child.wait(timeout=120) == _stdout.SIGPIPE_EXIT_CODE == 141, stderr
    assert first["event"] == "transaction"
    assert stderr == ""


# ------------------------------------------------------------------- a store that is not there
def test_an_unreachable_store_is_exit_status_2_before_spark_starts(
    script: Path, tmp_path: Path
) -> None:
    port = free_port()  # nothing listens there
    pool = {"host": "127.0.0.1", "port": port, "timeout": 500}
    provider = {"jedisPoolConfig": pool}
    conf = write_conf(
        tmp_path,
        {"topology.state.provider": REDIS, "topology.state.provider.config": provider},
    )
    args = ["run", "examples.wordcount:topology", "--conf", str(conf)]
    done = statefulbolts(script, *args, cwd=tmp_path, blocked=["pyspark"])
    assert done.returncode == BAD_INPUT_EXIT_CODE, done.stderr
    assert done.stderr.splitlines() == [
        f"error: topology 'wordcount': taking its lease: Redis at 127.0.0.1:{port} could not be "
        "reached during connection of the topologies' leases: ConnectionError: Error 111 "
        f"connecting to 127.0.0.1:{port}. Connection refused; nothing started: start the "
        "store, or fix --conf"
    ]
    assert done.stdout == ""
    # A supervised driver restarted after a crash meets an outage: exit 1, restarted again.
    restarted = statefulbolts(script, *args, "--restarted", cwd=tmp_path, blocked=["pyspark"])
    assert restarted.returncode == 1, restarted.stderr


# A word count publishing its counts to PostgreSQL: the DSN comes from the config.
PG_TOPOLOGY = """\
    from examples.kafka_to_kafka import ChangedCounts
    from examples.wordcount import SentenceSpout, SplitSentence
    from statefulbolts import Fields, TopologyBuilder
    from statefulbolts.connectors.postgres import PostgresSink
    from statefulbolts.connectors.sinks import ExactlyOnceSinkBolt


    def topology():
        builder = TopologyBuilder()
        builder.set_spout("sentences", SentenceSpout(40), 1)
        builder.set_bolt("split", SplitSentence(), 1).shuffle_grouping("sentences")
        builder.set_bolt("count", ChangedCounts(), 1).fields_grouping("split", Fields("word"))
        sink = PostgresSink("counts", columns=("word", "count"), key=("word",))
        builder.set_bolt("publish", ExactlyOnceSinkBolt(sink), 1).shuffle_grouping("count")
        return builder.create_topology()
"""


def test_an_unreachable_sink_database_is_one_line_and_exit_status_2_before_spark_starts(
    script: Path, tmp_path: Path
) -> None:
    port = free_port()  # nothing listens there
    write_module(tmp_path, "to_pg", PG_TOPOLOGY)
    dsn = f"postgresql://app:s3cret@127.0.0.1:{port}/shop"
    conf = write_conf(tmp_path, {"sink.postgres.dsn": dsn})
    args = ["run", "to_pg:topology", "--conf", str(conf)]
    done = statefulbolts(script, *args, cwd=tmp_path, blocked=["pyspark"])
    assert done.returncode == BAD_INPUT_EXIT_CODE, done.stderr
    [line] = done.stderr.splitlines()
    assert line.startswith(
        "error: PostgresSink: checking the table for sink PostgreSQL table 'counts': cannot "
        f"connect to PostgreSQL at 127.0.0.1:{port}/shop as 'app': connection failed: "
    ), line
    assert line.endswith(
        "start the server or fix the DSN ('sink.postgres.dsn' or the sink's dsn); while "
        "running, it is waited for (topology.state.backend.timeout.secs); nothing started"
    ), line
    assert "Connection refused" in line and "s3cret" not in line
    assert done.stdout == ""
    # A supervised driver restarted after a crash meets an outage: exit 1, restarted again.
    restarted = statefulbolts(script, *args, "--restarted", cwd=tmp_path, blocked=["pyspark"])
    assert restarted.returncode == 1, restarted.stderr
