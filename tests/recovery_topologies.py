"""Topologies that the driver-kill tests and the CLI tests run in a child driver process.

``python -m statefulbolts.cli run tests.recovery_topologies:wordcount --conf FILE --json``
runs RedisStreamSpout -> split -> count (a ``StatefulBolt``, parallelism 2). The stream and
Redis come from the config (``redis.stream.url``, ``redis.stream.key``); the count bolt appends
each hook call it gets, one JSON line ``{"task", "pid", "call"}``, to the file named by the
config key ``recovery.hooks.file`` (or the environment variable ``STATEFULBOLTS_HOOKS_FILE``).
Bolt instances live in Spark's Python workers for one transaction each, so a file is how a test
sees the hooks; every line is one ``write`` on an ``O_APPEND`` descriptor, so lines from the two
tasks' worker processes never interleave.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Mapping
from typing import Any

from examples.corpus import words
from statefulbolts import BasicBolt, Fields, StatefulBolt, StormTopology, TopologyBuilder
from statefulbolts.connectors import RedisStreamSpout

HOOKS_KEY = "recovery.hooks.file"
HOOKS_ENV = "STATEFULBOLTS_HOOKS_FILE"
PARALLELISM = 2


class SplitWords(BasicBolt):
    """Splits a sentence into lower-case words."""

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        for word in words(tuple.get_value(0)):
            collector.emit([word])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word"))


class CountWordsNoCommitHook(StatefulBolt):
    """Counts words in managed state and logs its hook calls (but has no ``pre_commit``).

    Without a ``pre_commit`` its COMMITs are done by the driver (``checkpoint.driver_commit``).
    """

    def prepare(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector
        self.task = context.this_task_index
        self.path = conf.get(HOOKS_KEY) or os.environ.get(HOOKS_ENV)

    def _log(self, *call: Any) -> None:
        if not self.path:
            return
        line = json.dumps({"task": self.task, "pid": os.getpid(), "call": list(call)}) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)

    def init_state(self, state: Any) -> None:
        self.counts = state
        self._log("init_state", getattr(state, "committed_txid", None))

    def execute(self, tuple: Any) -> None:  # noqa: A002
        word = tuple.get_value(0)
        self.counts.put(word, self.counts.get(word, 0) + 1)
        self.collector.ack(tuple)

    def pre_prepare(self, txid: int) -> None:
        self._log("pre_prepare", txid)

    def pre_rollback(self) -> None:
        self._log("pre_rollback")


class CountWords(CountWordsNoCommitHook):
    """Counts words in managed state and logs its hook calls to the hooks file."""

    def pre_commit(self, txid: int) -> None:
        self._log("pre_commit", txid)


def wordcount(count: StatefulBolt | None = None) -> StormTopology:
    """The Redis word count: stream and server from the config, counts in the state provider."""
    builder = TopologyBuilder()
    builder.set_spout("sentences", RedisStreamSpout(batch=100), 1)
    builder.set_bolt("split", SplitWords(), PARALLELISM).shuffle_grouping("sentences")
    counter = count or CountWords()
    builder.set_bolt("count", counter, PARALLELISM).fields_grouping("split", Fields("word"))
    return builder.create_topology()


def wordcount_driver_commit() -> StormTopology:
    """The same word count, its bolt without ``pre_commit``: the driver does its COMMITs."""
    return wordcount(CountWordsNoCommitHook())


def child_env() -> dict[str, str]:
    """The environment for a child driver: this one, with a JVM that starts faster.

    A child driver's JVM lives for a few seconds of tiny jobs; C1-only JIT and the serial GC
    roughly halve Spark's start-up on a busy two-core machine. Set ``JAVA_TOOL_OPTIONS`` (even
    empty) to run the children with your own JVM options instead.
    """
    env = dict(os.environ)
    env.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
    return env


def run_driver_process(
    cmd: list[str],
    cwd: str | os.PathLike[str],
    timeout: float,
    env: Mapping[str, str] | None = None,
) -> tuple[int, list[dict[str, Any]], str]:
    """Run a child driver to its end in its own process group: (exit status, JSON events, stderr).

    Whatever happened, no driver, JVM or Python worker of the run is left behind. The status is
    ``recovery.exit_status``'s (137 for a SIGKILL).
    """
    from recovery import exit_status

    proc = subprocess.Popen(
        cmd,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=dict(child_env() if env is None else env),
    )
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    events = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    return exit_status(proc.returncode), events, err


def read_hooks(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The hook lines of a hooks file, in the order they were written."""
    try:
        with open(path, encoding="utf-8") as fh:
            return [json.loads(line) for line in fh if line.strip()]
    except FileNotFoundError:
        return []


SPARK_KILLS_ENV = "STATEFULBOLTS_KILLS_ON_SPARK"


def child_engine(point: str, on_spark: str) -> str:
    """The engine a kill test's child drivers run on: Spark for ``on_spark``, else inline.

    What a kill-point test checks is the driver's protocol across a real process death, which
    is the same on both engines; one point per test keeps it on Spark (executors, a JVM) and the
    others save a JVM start per child (~8 s). ``STATEFULBOLTS_KILLS_ON_SPARK=1`` runs every
    point on Spark, for the loops before a release.
    """
    if point == on_spark or os.environ.get(SPARK_KILLS_ENV, "") not in ("", "0"):
        return "spark"
    return "inline"
