"""The word count over partitioned spouts read on the executors: files, or Redis streams.

``files -> split -> count``: each line of each file is a tuple (``DirectorySpout``), or each
entry of each stream (``PartitionedRedisStreamSpout``, ``stream_word_count``); ``split`` emits
its words, grouped by word into ``count``, a stateful bolt whose committed state is the
verdict. The expected counts are a plain ``Counter`` over the files (the streams) as they are at
the end of a run, and the expected positions each file's size (each stream's last entry id).
"""

from __future__ import annotations

import json
import os
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from seed_lists import env_seeds

from checkpoint.runner import CheckpointRunner
from providers import STATE_PROVIDER_CONFIG_KEY, STATE_PROVIDER_KEY
from statefulbolts import (
    BasicBolt,
    DirectorySpout,
    Fields,
    PartitionBatch,
    PartitionedRedisStreamSpout,
    PartitionReader,
    StatefulBolt,
    StormTopology,
    TopologyBuilder,
)
from statefulbolts.listeners import KillPoint, NoFaults

WORDS = ["apple", "pear", "fig", "plum", "kiwi", "lime", "date", "yuzu"]


class Split(BasicBolt):
    """A line's words, one tuple each."""

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002 - Storm's name
        """Emit each word of the line."""
        for word in tuple.get_value(0).split():
            collector.emit([word])

    def declare_output_fields(self, declarer: Any) -> None:
        """``word``."""
        declarer.declare(Fields("word"))


class WordCount(StatefulBolt):
    """Counts words in its state; acks each one."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        """Keep the collector."""
        self.collector = collector

    def init_state(self, state: Any) -> None:
        """The counts as of the last commit."""
        self.state = state

    def execute(self, tuple: Any) -> None:  # noqa: A002 - Storm's name
        """Add one to the word's count."""
        word = tuple.get_value(0)
        self.state.put(word, self.state.get(word, 0) + 1)
        self.collector.ack(tuple)


def word_count(
    directory: Path, spouts: int = 2, counters: int = 2, spout: DirectorySpout | None = None
) -> StormTopology:
    """``files`` (``spouts`` tasks) -> ``split`` -> ``count`` (``counters`` tasks).

    ``spout``: the files' spout (default: a ``DirectorySpout`` of ``directory``).
    """
    builder = TopologyBuilder()
    builder.set_spout("files", spout or DirectorySpout(str(directory)), spouts)
    builder.set_bolt("split", Split(), 2).shuffle_grouping("files")
    builder.set_bolt("count", WordCount(), counters).fields_grouping("split", Fields("word"))
    return builder.create_topology()


def write_lines(path: Path, seed: int, lines: int, mode: str = "w") -> None:
    """``lines`` lines of 1-4 random words (seeded), each ending in a newline."""
    rng = random.Random(seed)
    text = "".join(
        " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4))) + "\n" for _ in range(lines)
    )
    with path.open(mode, encoding="utf-8") as f:
        f.write(text)


def corpus(directory: Path, files: int = 3, lines: int = 20, seed: int = 0) -> Path:
    """``files`` files of ``lines`` lines in ``directory`` (made); returns it."""
    directory.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        write_lines(directory / f"part-{i}.txt", seed * 100 + i, lines)
    return directory


def expected_counts(directory: Path) -> dict[str, int]:
    """The word counts of every file of ``directory``, as they are now."""
    counts: Counter[str] = Counter()
    for path in sorted(directory.iterdir()):
        if path.is_file() and not path.name.startswith("."):
            counts.update(path.read_text(encoding="utf-8").split())
    return dict(counts)


def end_positions(directory: Path) -> dict[str, int]:
    """Each file's size: where a spout that read it whole stands."""
    return {p.name: p.stat().st_size for p in sorted(directory.iterdir()) if p.is_file()}


class GrowsUnderItsFirstAttempt(DirectorySpout):
    """A ``DirectorySpout`` whose first read of ``victim`` appends to it, then crashes its worker.

    Each read is logged to ``log`` (a JSON line: the partition, the Spark task attempt, the
    start, the end position and the lines read). The first read of ``victim`` then appends
    ``grow`` lines to it and ends its Python worker (``os._exit``), once (``marker``): Spark runs
    the task again over a longer file, and must read what the first attempt read.
    """

    def __init__(self, directory: Path, victim: str, grow: int, log: Path, marker: Path) -> None:
        super().__init__(str(directory))
        self.victim, self.grow, self.log, self.marker = victim, grow, str(log), str(marker)

    def open_reader(
        self, conf: Any, context: Any, partition: str, position: Any, end: int | None = None
    ) -> Any:
        inner = super().open_reader(conf, context, partition, position, end)
        spout = self

        class Logged(PartitionReader):
            def read(self, max_records: int) -> PartitionBatch:
                from pyspark import TaskContext

                batch = inner.read(max_records)
                task = TaskContext.get()
                entry = {
                    "partition": partition,
                    "attempt": task.attemptNumber() if task is not None else -1,
                    "start": position,
                    "position": batch.position,
                    "lines": len(batch.records),
                }
                with open(spout.log, "a", encoding="utf-8") as f:
                    f.write(json.dumps(entry) + "\n")
                if partition == spout.victim and _first(spout.marker):
                    path = Path(spout.directory) / partition
                    write_lines(path, len(spout.log), spout.grow, mode="a")
                    os._exit(1)  # the Python worker dies, as a crash does
                return batch

        return Logged()


def _first(marker: str) -> bool:
    """Whether this call made ``marker`` (only one call, in any process, does)."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
    except FileExistsError:
        return False
    return True


# ----------------------------------------------------------------- the same over Redis streams
def stream_word_count(spout: PartitionedRedisStreamSpout, spouts: int = 2) -> StormTopology:
    """``streams`` (``spouts`` tasks) -> ``split`` -> ``count`` (2 tasks)."""
    builder = TopologyBuilder()
    builder.set_spout("streams", spout, spouts)
    builder.set_bolt("split", Split(), 2).shuffle_grouping("streams")
    builder.set_bolt("count", WordCount(), 2).fields_grouping("split", Fields("word"))
    return builder.create_topology()


def stream_conf(server: Any, **extra: Any) -> dict[str, Any]:
    """``FAST`` with the state in ``server`` (a ``RedisServer``), the spout's URL, ``extra``."""
    pool = {"host": server.host, "port": server.port, "database": 0}
    return {
        **FAST,
        STATE_PROVIDER_KEY: "providers.redis.RedisKeyValueStateProvider",
        STATE_PROVIDER_CONFIG_KEY: json.dumps({"jedisPoolConfig": pool}),
        "redis.stream.url": server.url,
        **extra,
    }


def add_entries(client: Any, stream: str, seed: int, entries: int) -> None:
    """``entries`` entries ``{sentence: 1-4 random words}`` (seeded) at the end of ``stream``."""
    rng = random.Random(seed)
    for _ in range(entries):
        words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4)))
        client.xadd(stream, {"sentence": words})


def fill_streams(client: Any, streams: list[str], entries: int, seed: int = 0) -> None:
    """``entries`` entries on each of ``streams`` (seeded per stream)."""
    for i, stream in enumerate(streams):
        add_entries(client, stream, seed * 100 + i, entries)


def stream_counts(client: Any, streams: list[str]) -> tuple[dict[str, int], dict[str, str]]:
    """The word counts of every entry of ``streams`` now, and each stream's last entry id."""
    counts: Counter[str] = Counter()
    last: dict[str, str] = {}
    for stream in streams:
        entries = client.xrange(stream)
        for _, data in entries:
            counts.update(data[b"sentence"].decode().split())
        if entries:
            last[stream] = entries[-1][0].decode()
    return dict(counts), last


# ----------------------------------------------------------------- driving it, dying, restarting
FAST = {"topology.state.checkpoint.interval.ms": 1, "topology.max.spout.pending": 4}
POINTS = [
    KillPoint.AFTER_PREPARE,
    KillPoint.AFTER_COMMITTING_SAVED,
    KillPoint.MID_COMMIT,
    KillPoint.AFTER_COMMITTED,
]


def seeds(default: str = "0-3") -> list[int]:
    """The seeds of ``STATEFULBOLTS_PARTITIONED_SEEDS``: ``"a-b"`` (inclusive) or one int.

    ``default`` when it is unset (the Spark tests run one seed by default).
    """
    return env_seeds("STATEFULBOLTS_PARTITIONED_SEEDS", default)


class DriverDies(NoFaults):
    """Ends the driver loop at ``point`` of ``txid``, as a driver process dying there.

    Mid-commit: after the first stateful task committed (the driver commits them in turn).
    """

    def __init__(self, point: KillPoint, txid: int) -> None:
        self.point, self.txid, self.fired = point, txid, False

    def _die(self, point: KillPoint, txid: int) -> None:
        if point is self.point and txid == self.txid and not self.fired:
            self.fired = True
            msg = f"driver died at {point.value} of txid {txid}"
            raise SystemExit(msg)

    def on_driver(self, point: Any, txid: int) -> None:
        self._die(point, txid)

    def on_task_committed(self, component: str, task: int, txid: int) -> None:
        self._die(KillPoint.MID_COMMIT, txid)


def start_driver(
    name: str,
    conf: dict[str, Any],
    topology: StormTopology,
    faults: NoFaults | None = None,
    on_transaction: Any = None,
) -> CheckpointRunner:
    """A driver of ``topology`` on the inline engine, started."""
    runner = CheckpointRunner(
        name, conf, topology, None, faults=faults, on_transaction=on_transaction, engine="inline"
    )
    runner.start()
    return runner


def dies(runner: CheckpointRunner) -> None:
    """The driver ends at its ``DriverDies`` kill point."""
    with pytest.raises(SystemExit, match="driver died"):
        runner.await_idle(60)


def finish(runner: CheckpointRunner, spout: str) -> tuple[dict[Any, Any], dict[str, Any]]:
    """Run to idle; the committed counts and the driver's positions of ``spout``."""
    try:
        runner.await_idle(60)
        return runner.read_state("count"), runner.status()["partition_positions"][spout]
    finally:
        runner.kill()


# ----------------------------------------------------------------- the same over Kafka topics
def kafka_word_count(spout: Any, spouts: int = 2) -> StormTopology:
    """``kafka`` (a ``KafkaSpout`` whose tuples are ``(sentence,)``) -> ``split`` -> ``count``."""
    builder = TopologyBuilder()
    builder.set_spout("kafka", spout, spouts)
    builder.set_bolt("split", Split(), 2).shuffle_grouping("kafka")
    builder.set_bolt("count", WordCount(), 2).fields_grouping("split", Fields("word"))
    return builder.create_topology()


class Written:
    """What a test wrote to Kafka, per partition id: the verdict's counts and end offsets."""

    def __init__(self) -> None:
        self.sentences: dict[str, list[str]] = {}

    def write(self, broker: Any, topic: str, partition: int, seed: int, records: int) -> None:
        """``records`` sentences of 1-4 random words (seeded) to one partition of ``topic``."""
        from kafka_fixtures import produce

        rng = random.Random(seed)
        lines = [
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 4))) for _ in range(records)
        ]
        produce(broker, topic, [line.encode() for line in lines], partition=partition)
        self.sentences.setdefault(f"{topic}/{partition}", []).extend(lines)

    def fill(self, broker: Any, topic: str, partitions: int, records: int, seed: int = 0) -> None:
        """``records`` sentences on each of ``partitions`` partitions (seeded per partition)."""
        for p in range(partitions):
            self.write(broker, topic, p, seed * 100 + p, records)

    def counts(self) -> dict[str, int]:
        """The word counts of every sentence written."""
        counts: Counter[str] = Counter()
        for lines in self.sentences.values():
            for line in lines:
                counts.update(line.split())
        return dict(counts)

    def ends(self) -> dict[str, int]:
        """Each partition's end offset: records written (no transactions, no deletes)."""
        return {p: len(lines) for p, lines in sorted(self.sentences.items())}
