"""The word count over a directory of files, read by a ``DirectorySpout`` on the executors.

``files -> split -> count``: each line of each file is a tuple; ``split`` emits its words,
grouped by word into ``count``, a stateful bolt whose committed state is the verdict. The
expected counts are a plain ``Counter`` over the files as they are at the end of a run.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from checkpoint.runner import CheckpointRunner
from recovery.faults import KillPoint
from statefulbolts import (
    BasicBolt,
    DirectorySpout,
    Fields,
    StatefulBolt,
    StormTopology,
    TopologyBuilder,
)
from statefulbolts.listeners import NoFaults

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


def word_count(directory: Path, spouts: int = 2, counters: int = 2) -> StormTopology:
    """``files`` (``spouts`` tasks) -> ``split`` -> ``count`` (``counters`` tasks)."""
    builder = TopologyBuilder()
    builder.set_spout("files", DirectorySpout(str(directory)), spouts)
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


# ----------------------------------------------------------------- driving it, dying, restarting
FAST = {"topology.state.checkpoint.interval.ms": 1, "topology.max.spout.pending": 4}
POINTS = [
    KillPoint.AFTER_PREPARE,
    KillPoint.AFTER_COMMITTING_SAVED,
    KillPoint.MID_COMMIT,
    KillPoint.AFTER_COMMITTED,
]


def seeds() -> list[int]:
    """The seeds of ``STATEFULBOLTS_PARTITIONED_SEEDS``: ``"a-b"`` (inclusive) or one int."""
    raw = os.environ.get("STATEFULBOLTS_PARTITIONED_SEEDS", "0-3")
    low, _, high = raw.partition("-")
    return list(range(int(low), int(high or low) + 1))


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
