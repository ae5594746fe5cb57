"""The transactional Kafka word count that the Spark crash and spout rescale tests run.

``spout`` (``KafkaTransactionalSpout`` or ``OpaqueKafkaTransactionalSpout``, ``k`` tasks) ->
``split`` (2 tasks, ``SplitCount``) -> committer ``count`` (2 tasks, fields grouping on the
word, ``WordSum``: a ``TransactionalMap``, or an ``OpaqueMap`` behind the opaque spout), as
``examples.kafka_transactional_words`` builds it, with the spout's parallelism a parameter.
``python -m statefulbolts.cli run tests.ktx_topologies:topology`` builds it from the
``Params`` in ``$STATEFULBOLTS_KTX_PARAMS`` (a child driver the tests kill).

Every record the tests write is a sentence that starts with a word of its own (``r<n>``,
``Written``): a count of 1 for each such word says that its record was counted exactly once,
so the expected counts check "nothing read twice, nothing skipped" record by record.

Bolts and emitters run in Spark's Python workers, so they report through a file: with the
config key ``LOG_KEY`` naming one, each ``split`` / ``count`` prepare appends a JSON line (one
``write`` on an ``O_APPEND`` descriptor) with the task, the batch attempt and Spark's attempt
number of the task, and so does each emission of a partition (``kind: "emit"``, with the
emitter task and how many there are). A test sees which emitter task read which partition,
and that a task it crashed was run again by Spark within the same batch attempt.

``EmitterCrash`` makes the spout's emitter end its Python worker (``os._exit``) at its first
emission of one partition in one txid (once: an exclusive marker file), optionally after
writing more records to that partition: Spark runs the emitter task again, which lists
another end. ``topology.faults`` cannot do this: its task faults fire in a bolt's task,
before its n-th *input* tuple, and an emitter task has none (a fault there refuses the run).
"""

from __future__ import annotations

import collections
import json
import os
import random
import sys
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from examples.corpus import words
from examples.kafka_transactional_words import WordSum, load
from examples.kafka_wordcount import SENTENCES
from examples.transactional_crash import SplitCount
from statefulbolts import Fields, TransactionalTopology, TransactionalTopologyBuilder
from statefulbolts.connectors.kafka import (
    KafkaTransactionalSpout,
    OpaqueKafkaTransactionalSpout,
)

PARAMS_ENV = "STATEFULBOLTS_KTX_PARAMS"
SEEDS_ENV = "STATEFULBOLTS_KAFKA_TX_SEEDS"
LOG_KEY = "ktx.test.log"
VOCABULARY = ["apple", "pear", "fig", "plum", "kiwi", "lime", "date", "yuzu", "quince", "sloe"]


def seeds(default: int) -> list[int]:
    """The seeds of ``$STATEFULBOLTS_KAFKA_TX_SEEDS``: ``"N"`` for 0 to N-1 (``25``: a loop of
    25), ``"a-b"`` for a to b inclusive (``"7-7"``: seed 7 alone); the first ``default`` seeds
    when it is unset (each seed is a few seconds of Spark runs).
    """
    raw = os.environ.get(SEEDS_ENV, str(default))
    low, dash, high = raw.partition("-")
    if not dash:
        return list(range(int(low)))
    return list(range(int(low), int(high) + 1))


# ------------------------------------------------------------------ what the tests write
class Written:
    """Every sentence a test wrote, per partition of one topic: the expected counts and ends."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap, self.topic = bootstrap, topic
        self.sentences: dict[int, list[str]] = collections.defaultdict(list)
        self._n = 0

    def sentences_for(self, seed: Any, records: int) -> list[str]:
        """``records`` new sentences: a word of their own, then 1-4 seeded words."""
        rng = random.Random(f"ktx/{seed}")
        found = []
        for _ in range(records):
            body = " ".join(rng.choice(VOCABULARY) for _ in range(rng.randint(1, 4)))
            found.append(f"r{self._n} {body}")
            self._n += 1
        return found

    def write(self, partition: int, seed: Any, records: int) -> None:
        """``records`` new sentences to ``partition``, one record per request (Tansu's ends)."""
        lines = self.sentences_for(seed, records)
        load(self.bootstrap, self.topic, {partition: lines})
        self.sentences[partition].extend(lines)

    def add(self, partition: int, lines: list[str]) -> None:
        """Count ``lines`` as written to ``partition`` (by someone else: a crashing emitter)."""
        self.sentences[partition].extend(lines)

    def fill(self, partitions: int, records: int, seed: Any) -> None:
        """``records`` sentences on each of ``partitions`` partitions."""
        for p in range(partitions):
            self.write(p, f"{seed}/{p}", records)

    def counts(self) -> dict[str, int]:
        """The word counts of every sentence written."""
        counts: collections.Counter[str] = collections.Counter()
        for lines in self.sentences.values():
            for line in lines:
                counts.update(words(line))
        return dict(counts)

    def ends(self) -> dict[str, int]:
        """Each written partition's end offset (``topic/p``): its records (no deletes)."""
        return {f"{self.topic}/{p}": len(lines) for p, lines in sorted(self.sentences.items())}


def positions(conf: Mapping[str, Any], transactional_id: str) -> dict[str, int]:
    """Where the stored metas say each partition's next batch starts: ``topic/p`` -> offset.

    Each spout partition's latest stored meta (the last committed txid's, when the topology
    is idle); ``None`` metas (a partition past its topic's) are left out.
    """
    from statefulbolts.transactional import transactional_status

    found: dict[str, int] = {}
    for metas in transactional_status(conf, transactional_id).partitions.values():
        if not metas:
            continue
        meta = metas[max(metas)]
        if meta is not None:
            found[f"{meta['topic']}/{meta['partition']}"] = meta["next"]
    return dict(sorted(found.items()))


# ------------------------------------------------------------------ the topology
@dataclass(frozen=True)
class EmitterCrash:
    """The emitter's worker dies at its first emission of ``partition`` in ``txid`` (once).

    ``more`` records (``more_lines``) are written to that partition first, so Spark's retry
    of the task lists another end than the attempt that died.
    """

    txid: int
    partition: int
    marker: str
    more_lines: tuple[str, ...] = ()


@dataclass(frozen=True)
class Params:
    """What a topology is built from (also the child driver's ``$STATEFULBOLTS_KTX_PARAMS``)."""

    transactional_id: str
    bootstrap: str
    topic: str
    opaque: bool = False
    take_per_batch: int = 2
    spout_parallelism: int = 2
    crash: EmitterCrash | None = None

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's) with these params in ``$STATEFULBOLTS_KTX_PARAMS``."""
        env = dict(os.environ if base is None else base)
        env[PARAMS_ENV] = json.dumps(asdict(self))
        return env

    @classmethod
    def from_env(cls) -> Params:
        """The params in ``$STATEFULBOLTS_KTX_PARAMS``."""
        raw = json.loads(os.environ[PARAMS_ENV])
        crash = raw.pop("crash")
        if crash is not None:
            crash = EmitterCrash(**{**crash, "more_lines": tuple(crash["more_lines"])})
        return cls(**raw, crash=crash)


def build(params: Params) -> TransactionalTopology:
    """spout (``params.spout_parallelism`` tasks) -> split (2) -> count (2, committer)."""
    kind = LoggedOpaqueKafkaSpout if params.opaque else LoggedKafkaSpout
    spout = kind(
        params.topic,
        take_per_batch=params.take_per_batch,
        bootstrap_servers=params.bootstrap,
        translator=SENTENCES,
    )
    spout.crash = params.crash
    builder = TransactionalTopologyBuilder(
        params.transactional_id, "spout", spout, params.spout_parallelism
    )
    builder.set_bolt("split", LoggedSplit(), 2).shuffle_grouping("spout")
    builder.set_committer_bolt("count", LoggedSum(params.opaque), 2).fields_grouping(
        "split", Fields("word")
    )
    return builder.build_topology()


def child_command(conf_path: Path, name: str) -> list[str]:
    """A child driver of ``topology()`` on the inline engine (the params in its environment)."""
    spec = "tests.ktx_topologies:topology"  # run from the repository's root
    cmd = [sys.executable, "-m", "statefulbolts.cli", "run", spec, "--conf", str(conf_path)]
    return [*cmd, "--name", name, "--json", "--engine", "inline"]


def topology() -> TransactionalTopology:
    """What a child driver runs: ``build`` of the params in the environment."""
    return build(Params.from_env())


# ------------------------------------------------------------------ observing the tasks
def append(path: str | None, **line: Any) -> None:
    """One JSON line appended to ``path`` in one write (none without a path)."""
    if not path:
        return
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


def read_log(path: str | os.PathLike[str], **match: Any) -> list[dict[str, Any]]:
    """The lines of a ``LOG_KEY`` file whose fields equal ``match``, in order."""
    try:
        with open(path, encoding="utf-8") as f:
            lines = [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []
    return [e for e in lines if all(e.get(k) == v for k, v in match.items())]


def read_by(path: str | os.PathLike[str]) -> tuple[set[int], set[tuple[int, int]]]:
    """From a ``LOG_KEY`` file: the emitter task counts its emissions saw (one, in one run),
    and each (partition, emitter task) that emitted.
    """
    emits = read_log(path, kind="emit")
    return {e["tasks"] for e in emits}, {(e["partition"], e["task"]) for e in emits}


def spark_attempt() -> int:
    """Spark's attempt number of the running task (-1 outside a Spark task)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return -1 if ctx is None else ctx.attemptNumber()


def _log_prepare(conf: Mapping[str, Any], context: Any, attempt: Any) -> None:
    append(
        conf.get(LOG_KEY),
        kind="prepare",
        component=context.this_component_id,
        task=context.this_task_index,
        txid=attempt.transaction_id,
        attempt=attempt.attempt_id,
        spark_attempt=spark_attempt(),
    )


class LoggedSplit(SplitCount):
    """``SplitCount`` that logs each prepare."""

    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        """Log, then ``SplitCount.prepare``."""
        _log_prepare(conf, context, id)
        super().prepare(conf, context, collector, id)


class LoggedSum(WordSum):
    """``WordSum`` that logs each prepare."""

    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        """Log, then ``WordSum.prepare``."""
        _log_prepare(conf, context, id)
        super().prepare(conf, context, collector, id)


# ------------------------------------------------------------------ emitters that log (and die)
def _claim(marker: str) -> bool:
    """Whether this call made ``marker`` (one call in any process does)."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


class _Emissions:
    """What both logged emitters do before an emission of a partition: log it, maybe die."""

    def __init__(self, spout: Any, conf: Mapping[str, Any], context: Any) -> None:
        self._spout, self._conf = spout, conf
        self._task, self._tasks = context.this_task_index, len(context.this_component_tasks)

    def before(self, tx: Any, partition: int, call: str) -> None:
        append(
            self._conf.get(LOG_KEY),
            kind="emit",
            call=call,
            task=self._task,
            tasks=self._tasks,
            txid=tx.transaction_id,
            attempt=tx.attempt_id,
            partition=partition,
            spark_attempt=spark_attempt(),
        )
        crash: EmitterCrash | None = self._spout.crash
        if crash is None or (tx.transaction_id, partition) != (crash.txid, crash.partition):
            return
        if not _claim(crash.marker):
            return
        if crash.more_lines:
            tp = self._spout.partition_of(self._spout.topics(self._conf), partition)
            bootstrap = self._spout.source.settings(self._conf).bootstrap
            load(bootstrap, tp.topic, {tp.partition: list(crash.more_lines)})
        os._exit(1)  # the Python worker dies, as a crash does


class LoggedKafkaSpout(KafkaTransactionalSpout):
    """``KafkaTransactionalSpout`` whose emitters log each emission and die as ``crash`` says."""

    crash: EmitterCrash | None = None

    def get_emitter(self, conf: Any, context: Any) -> Any:
        """The spout's emitter behind ``_Emissions``."""
        inner = super().get_emitter(conf, context)
        return _LoggedEmitter(inner, _Emissions(self, conf, context))


class _LoggedEmitter(KafkaTransactionalSpout.Emitter):
    def __init__(self, inner: Any, emissions: _Emissions) -> None:
        self._inner, self._emissions = inner, emissions

    def emit_partition_batch_new(
        self, tx: Any, collector: Any, partition: int, last_partition_meta: Any
    ) -> Any:
        self._emissions.before(tx, partition, "new")
        return self._inner.emit_partition_batch_new(tx, collector, partition, last_partition_meta)

    def emit_partition_batch(
        self, tx: Any, collector: Any, partition: int, partition_meta: Any
    ) -> None:
        self._emissions.before(tx, partition, "replay")
        self._inner.emit_partition_batch(tx, collector, partition, partition_meta)

    def close(self) -> None:
        self._inner.close()


class LoggedOpaqueKafkaSpout(OpaqueKafkaTransactionalSpout):
    """``OpaqueKafkaTransactionalSpout`` whose emitters log and die as ``LoggedKafkaSpout``'s."""

    crash: EmitterCrash | None = None

    def get_emitter(self, conf: Any, context: Any) -> Any:
        """The spout's emitter behind ``_Emissions``."""
        inner = super().get_emitter(conf, context)
        return _LoggedOpaqueEmitter(inner, _Emissions(self, conf, context))


class _LoggedOpaqueEmitter(OpaqueKafkaTransactionalSpout.Emitter):
    def __init__(self, inner: Any, emissions: _Emissions) -> None:
        self._inner, self._emissions = inner, emissions

    def emit_partition_batch(
        self, tx: Any, collector: Any, partition: int, last_partition_meta: Any
    ) -> Any:
        self._emissions.before(tx, partition, "opaque")
        return self._inner.emit_partition_batch(tx, collector, partition, last_partition_meta)

    def num_partitions(self) -> int:
        return int(self._inner.num_partitions())

    def close(self) -> None:
        self._inner.close()
