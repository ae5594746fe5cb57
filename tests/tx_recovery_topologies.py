"""The transactional topology that the recovery tests kill, and how they watch it.

``python -m statefulbolts.cli run tests.tx_recovery_topologies:words --conf FILE --json`` runs
the word count of ``examples.transactional_crash`` (spout -> split -> count (committer) ->
bucketize -> buckets) over a smaller fixed corpus, under the transactional id
``TRANSACTIONAL_ID``; the tests run it in-process too, with ``build``.

Emitters and bolts run in Spark's Python workers, so they report through a file: with the
config key ``LOG_KEY`` naming one, every emitter call and every ``split`` / ``count`` prepare
and finish appends one JSON line to it (one ``write`` on an ``O_APPEND`` descriptor: lines from
several worker processes never interleave). An emitter line says which call it was (``new``:
``emit_partition_batch_new``, ``replay``: ``emit_partition_batch``), for which txid, attempt and
partition, with the meta it got and the one it returned; a bolt line carries Spark's attempt
number of its task, so a test sees a task that Spark ran again.

With the config key ``HOLD_KEY`` (``{"txid": t, "until": path}``), task 0 of ``split`` holds
txid ``t``'s processing until the file ``path`` exists: a test then knows, without racing the
topology, that ``t`` cannot commit while the txids after it emit and process.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from examples.transactional_crash import SplitCount, SumUpdater, corpus
from examples.transactional_words import BucketCountUpdater, Bucketize
from statefulbolts import (
    Fields,
    MemoryTransactionalSpout,
    TransactionalTopology,
    TransactionalTopologyBuilder,
)

ROOT = Path(__file__).resolve().parent.parent
LOG_KEY = "tx.recovery.log"
HOLD_KEY = "tx.recovery.hold"
HOLD_LIMIT_SECS = 600  # a held task gives up (fails its batch) if no test releases it
TRANSACTIONAL_ID = "tx-recovery"
PARTITIONS = 4
PER_PARTITION = 32
TAKE = 2  # rows per partition and batch: 16 txids of data
MAX_PENDING = 3
KILLED = 137


def data() -> dict[int, list[list[str]]]:
    """The corpus of the tests: four partitions of 32 sentences."""
    return corpus(PARTITIONS, PER_PARTITION)


def expected_data_txids() -> int:
    """How many txids carry data: each takes ``TAKE`` rows of every partition."""
    return -(-PER_PARTITION // TAKE)


def _append(path: str | None, **line: Any) -> None:
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


def _spark_attempt() -> int:
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return -1 if ctx is None else ctx.attemptNumber()


class RecordingSpout(MemoryTransactionalSpout):
    """A ``MemoryTransactionalSpout`` whose emitters log every call to the ``LOG_KEY`` file."""

    def get_emitter(self, conf: Mapping[str, Any], context: Any) -> Any:
        inner = super().get_emitter(conf, context)
        return _RecordingEmitter(inner, conf.get(LOG_KEY), context.this_task_index)


class _RecordingEmitter(MemoryTransactionalSpout.Emitter):
    def __init__(self, inner: Any, path: str | None, task: int) -> None:
        self._inner, self._path, self._task = inner, path, task

    def _log(self, call: str, tx: Any, partition: int, got: Any, returned: Any) -> None:
        _append(
            self._path,
            kind="emit",
            call=call,
            txid=tx.transaction_id,
            attempt=tx.attempt_id,
            partition=partition,
            meta_in=got,
            meta_out=returned,
            task=self._task,
            pid=os.getpid(),
        )

    def emit_partition_batch_new(
        self, tx: Any, collector: Any, partition: int, last_partition_meta: Any
    ) -> Any:
        meta = self._inner.emit_partition_batch_new(tx, collector, partition, last_partition_meta)
        self._log("new", tx, partition, last_partition_meta, meta)
        return meta

    def emit_partition_batch(
        self, tx: Any, collector: Any, partition: int, partition_meta: Any
    ) -> None:
        self._inner.emit_partition_batch(tx, collector, partition, partition_meta)
        self._log("replay", tx, partition, partition_meta, None)

    def close(self) -> None:
        self._inner.close()


def _hold(conf: Mapping[str, Any], txid: int, task: int) -> None:
    """Wait, in task 0 of txid ``HOLD_KEY["txid"]``, until the release file exists."""
    hold = conf.get(HOLD_KEY)
    if not hold or task != 0 or txid != hold["txid"]:
        return
    deadline = time.monotonic() + HOLD_LIMIT_SECS
    while not os.path.exists(hold["until"]):
        if time.monotonic() > deadline:
            msg = f"txid {txid} held {HOLD_LIMIT_SECS} s: no test created {hold['until']}"
            raise TimeoutError(msg)
        time.sleep(0.02)


class LoggedSplit(SplitCount):
    """``SplitCount`` that logs its prepare, with Spark's attempt number of the task."""

    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        super().prepare(conf, context, collector, id)
        _hold(conf, id.transaction_id, context.this_task_index)
        _append(
            conf.get(LOG_KEY),
            kind="prepare",
            component="split",
            task=context.this_task_index,
            txid=id.transaction_id,
            attempt=id.attempt_id,
            spark_attempt=_spark_attempt(),
        )


class LoggedSum(SumUpdater):
    """``SumUpdater`` that logs its prepare and its ``finish_batch`` (a task's commit of t)."""

    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        super().prepare(conf, context, collector, id)
        self._path, self._task = conf.get(LOG_KEY), context.this_task_index
        _append(
            self._path,
            kind="prepare",
            component="count",
            task=self._task,
            txid=id.transaction_id,
            attempt=id.attempt_id,
            spark_attempt=_spark_attempt(),
        )

    def finish_batch(self) -> None:
        super().finish_batch()
        _append(
            self._path,
            kind="finish",
            component="count",
            task=self._task,
            txid=self.attempt.transaction_id,
            attempt=self.attempt.attempt_id,
            words=len(self.counts),
        )


def build(transactional_id: str = TRANSACTIONAL_ID) -> TransactionalTopology:
    """The word count of ``examples.transactional_crash`` over ``data()``, logging."""
    spout = RecordingSpout(data(), ["line"], TAKE)
    builder = TransactionalTopologyBuilder(transactional_id, "spout", spout, 2)
    builder.set_bolt("split", LoggedSplit(), 2).shuffle_grouping("spout")
    builder.set_committer_bolt("count", LoggedSum(), 2).fields_grouping("split", Fields("word"))
    builder.set_bolt("bucketize", Bucketize()).none_grouping("count")
    builder.set_bolt("buckets", BucketCountUpdater(), 2).fields_grouping(
        "bucketize", Fields("bucket")
    )
    return builder.build_topology()


def words() -> TransactionalTopology:
    """What the child driver runs."""
    return build()


# --------------------------------------------------------------------------- reading the log
def read_log(path: str | os.PathLike[str], **match: Any) -> list[dict[str, Any]]:
    """The lines of a log file whose fields equal ``match``, in the order they were written."""
    try:
        with open(path, encoding="utf-8") as fh:
            lines = [json.loads(line) for line in fh if line.strip()]
    except FileNotFoundError:
        return []
    return [e for e in lines if all(e.get(k) == v for k, v in match.items())]


# --------------------------------------------------------------------------- a child driver
def child_env() -> dict[str, str]:
    """This environment, with ``tests`` importable and a JVM that starts faster.

    C1-only JIT and the serial GC start a child driver's short-lived JVM sooner on a small
    machine (set ``JAVA_TOOL_OPTIONS``, even empty, to run the children with your own).
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p)
    env.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
    return env


def driver_command(conf: Path, name: str, engine: str = "spark") -> list[str]:
    """The CLI command that runs ``words`` as a child driver, printing JSON lines."""
    cmd = [sys.executable, "-m", "statefulbolts.cli", "run", "tests.tx_recovery_topologies:words"]
    return [*cmd, "--conf", str(conf), "--name", name, "--json", "--engine", engine]
