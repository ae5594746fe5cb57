"""Bolts and a topology for the column-batch tests (``BasicBolt.execute_batch``).

Imported by the driver and by Spark's Python workers (see ``topologies``): what a test checks is
kept in managed state, in the spout's ``RECORDS`` entry, or in files under the test's
``tmp_path``.

The topology: ``src`` -shuffle-> ``relay`` (a per-tuple ``BasicBolt``) -fields-> ``count``
(stateful, emits ``(value, count)``) -local_or_shuffle-> ``scale`` (a ``BasicBolt``, chained to
``count``: per tuple, or in column batches) -fields-> ``keep`` (stateful: every scaled count it
was given, per value). A run is exactly-once when ``count`` holds each value's occurrences and
``keep`` each value's ``[10, 20, ..., 10 * occurrences]``.
"""

from __future__ import annotations

import collections
import os
from collections.abc import Mapping, Sequence
from typing import Any

import topologies as topo
from topologies import Relay, Tally, ValueSpout

from statefulbolts import (
    BasicBolt,
    FailedException,
    Fields,
    LocalCluster,
    StatefulBolt,
    StormTopology,
    TopologyBuilder,
)
from statefulbolts.runtime._records import TaskReport, TupleBatch

# Checkpoint every millisecond: transactions back to back.
FAST = {"topology.state.checkpoint.interval.ms": 1}


def _append(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def _first_time(marker: str) -> bool:
    """Whether this is the first call for ``marker`` in any process (the file is the flag)."""
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


class Scale(BasicBolt):
    """``(value, count)`` -> ``(value, 10 * count)``, a tuple at a time."""

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        """Emit the scaled count, anchored to the input."""
        collector.emit([tuple.get_value(0), 10 * tuple.get_value(1)])

    def declare_output_fields(self, declarer: Any) -> None:
        """``value``, ``count``."""
        declarer.declare(Fields("value", "count"))


class BatchScale(Scale):
    """``Scale`` in column batches; logs each batch's size to ``log``.

    ``fail_on``: the first batch (across processes, by a marker file next to ``log``) holding
    that value fails: with ``crash``, by raising ``RuntimeError`` (the task fails); else by
    raising ``FailedException`` (the batch's tuples fail). ``poison``: every batch and every
    tuple holding that value raises.
    """

    def __init__(
        self,
        log: str,
        *,
        fail_on: Any = None,
        crash: bool = False,
        poison: Any = None,
    ) -> None:
        self.log = log
        self.fail_on = fail_on
        self.crash = crash
        self.poison = poison

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        """The per-tuple definition; raises on ``poison``."""
        if self.poison is not None and tuple.get_value(0) == self.poison:
            msg = f"poison value {self.poison!r}"
            raise RuntimeError(msg)
        super().execute(tuple, collector)

    def execute_batch(self, batch: Any, collector: Any) -> None:
        """Scale a column at a time; emit each result anchored to its row."""
        values = batch.column("value")
        if self.poison is not None and self.poison in values:
            msg = f"a batch holding the poison value {self.poison!r}"
            raise RuntimeError(msg)
        if (
            self.fail_on is not None
            and self.fail_on in values
            and _first_time(f"{self.log}.failed")
        ):
            msg = f"the first batch holding {self.fail_on!r}"
            if self.crash:
                raise RuntimeError(msg)
            raise FailedException(msg)
        for row, (value, count) in enumerate(zip(values, batch.column("count"), strict=True)):
            collector.emit([value, 10 * count], row)
        _append(self.log, str(len(batch)))


class Keep(StatefulBolt):
    """Keeps, per value, every count it was given (in managed state)."""

    def prepare(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        """Keep the collector."""
        self.collector = collector

    def init_state(self, state: Any) -> None:
        """The lists, as of the last commit."""
        self.state = state

    def execute(self, tuple: Any) -> None:  # noqa: A002
        """Append the count to the value's list; ack."""
        value, count = tuple.get_value(0), tuple.get_value(1)
        self.state.put(value, [*self.state.get(value, []), count])
        self.collector.ack(tuple)


def values(n: int) -> list[str]:
    """``n`` values over 4 distinct words (``w0``, ``w1``, ``w2``, ``w4``), unevenly."""
    return [f"w{(i * i) % 7}" for i in range(n)]


def crash_case() -> tuple[int, str]:
    """The crash tests' value count and the value whose first batch crashes.

    From ``STATEFULBOLTS_FAULT_SEED`` (default 0: 200 values, ``w2``): loop the crash tests
    over seeds to move the crash across batches and transactions.
    """
    seed = int(os.environ.get("STATEFULBOLTS_FAULT_SEED", "0"))
    return 200 + 13 * (seed % 7), ("w2", "w0", "w1", "w4")[seed % 4]


def scaled(key: str, n: int, scale: BasicBolt, *, burst: int = 40) -> StormTopology:
    """The module's topology over ``values(n)``, in bursts, with ``scale`` as the chained bolt."""
    builder = TopologyBuilder()
    builder.set_spout("src", ValueSpout(key, values(n), burst=burst))
    builder.set_bolt("relay", Relay(), 2).shuffle_grouping("src")
    builder.set_bolt("count", Tally(emit=True), 2).fields_grouping("relay", Fields("value"))
    builder.set_bolt("scale", scale, 2).local_or_shuffle_grouping("count")
    builder.set_bolt("keep", Keep(), 2).fields_grouping("scale", Fields("value"))
    return builder.create_topology()


def expected(n: int) -> tuple[dict[str, int], dict[str, list[int]]]:
    """What ``count`` and ``keep`` commit after exactly-once processing of ``values(n)``."""
    counts = dict(collections.Counter(values(n)))
    return counts, {v: [10 * k for k in range(1, c + 1)] for v, c in counts.items()}


def sorted_lists(state: Mapping[str, Sequence[int]]) -> dict[str, list[int]]:
    """``keep``'s state with each list sorted (transactions interleave the tasks' emits)."""
    return {value: sorted(counts) for value, counts in state.items()}


# ------------------------------------------------------------------ stateful bolts in batches


class BatchTally(StatefulBolt):
    """Counts each value in managed state and emits ``(value, count)``; per tuple or in batches.

    ``execute`` is the definition; ``execute_batch`` reads each distinct value once
    (``get_many``), writes each once (``put_many``) and emits in one ``emit_columns`` (with
    ``one_by_one``: one ``emit`` per row instead). ``log``: each batch's size is appended to it.
    ``crash_on``: the first batch holding that value (across processes, by a marker file next
    to ``log``) raises. ``poison``: every batch and every tuple holding that value raises.
    """

    def __init__(
        self,
        log: str | None = None,
        *,
        crash_on: Any = None,
        poison: Any = None,
        one_by_one: bool = False,
    ) -> None:
        self.log = log
        self.crash_on = crash_on
        self.poison = poison
        self.one_by_one = one_by_one

    def prepare(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        """Keep the collector."""
        self.collector = collector

    def init_state(self, state: Any) -> None:
        """The counts, as of the last commit."""
        self.counts = state

    def execute(self, tuple: Any) -> None:  # noqa: A002
        """Add one to the value's count, emit ``(value, count)`` anchored to the input, ack."""
        value = tuple.get_value(0)
        if self.poison is not None and value == self.poison:
            msg = f"poison value {value!r}"
            raise RuntimeError(msg)
        count = self.counts.get(value, 0) + 1
        self.counts.put(value, count)
        self.collector.emit([value, count], anchors=tuple)
        self.collector.ack(tuple)

    def execute_batch(self, batch: Any, collector: Any) -> None:
        """Count a column at a time; emit each new count anchored to its row."""
        values = batch.column("value")
        if self.poison is not None and self.poison in values:
            msg = f"a batch holding the poison value {self.poison!r}"
            raise RuntimeError(msg)
        if self.crash_on is not None and self.crash_on in values:
            if _first_time(f"{self.log}.crashed"):
                msg = f"the first batch holding {self.crash_on!r}"
                raise RuntimeError(msg)
        distinct = list(dict.fromkeys(values))
        counts = dict(zip(distinct, self.counts.get_many(distinct, 0), strict=True))
        after = []
        for value in values:
            counts[value] += 1
            after.append(counts[value])
        self.counts.put_many(counts.items())
        if self.one_by_one:
            for row, (value, count) in enumerate(zip(values, after, strict=True)):
                collector.emit([value, count], row)
        else:
            collector.emit_columns([values, after])
        if self.log is not None:
            _append(self.log, str(len(batch)))

    def declare_output_fields(self, declarer: Any) -> None:
        """``value``, ``count``."""
        declarer.declare(Fields("value", "count"))


class Tallied(BatchTally):
    """``BatchTally`` without ``execute_batch``: the per-tuple bolt it must equal."""

    execute_batch = StatefulBolt.execute_batch  # type: ignore[assignment]


class BatchKeep(Keep):
    """``Keep`` in batches: plain ``get`` and ``put`` per row, no emit."""

    def execute_batch(self, batch: Any, collector: Any) -> None:
        """Append each row's count to its value's list."""
        state = self.state
        for value, count in zip(batch.column(0), batch.column(1), strict=True):
            state.put(value, [*state.get(value, []), count])


def tallied(key: str, n: int, count: StatefulBolt, keep: StatefulBolt, burst: int = 40) -> Any:
    """``src`` -> ``relay`` -fields-> ``count`` -fields-> ``keep`` over ``values(n)``."""
    builder = TopologyBuilder()
    builder.set_spout("src", ValueSpout(key, values(n), burst=burst))
    builder.set_bolt("relay", Relay(), 2).shuffle_grouping("src")
    builder.set_bolt("count", count, 2).fields_grouping("relay", Fields("value"))
    builder.set_bolt("keep", keep, 2).fields_grouping("count", Fields("value"))
    return builder.create_topology()


# ------------------------------------------------------------------ for the tests themselves


class Delivered:
    """A delivered tuple as the ledger reads it: its number and root, no other trees."""

    def __init__(self, number: int, root: int) -> None:
        self._edge, self._root, self._more = number, root, None


def comparable(sent: list[Any]) -> list[Any]:
    """A task's records with the metrics' timings left out, tuple batches unsealed."""
    return [
        r._replace(metrics=r.metrics._replace(seconds=0, setup=0, execute=0))
        if isinstance(r, TaskReport)
        else r.unsealed()
        if isinstance(r, TupleBatch)
        else r
        for r in sent
    ]


def outcome(cluster: LocalCluster, key: str, topology: StormTopology) -> dict[str, Any]:
    """Run ``topology`` (``scaled``, ``tallied``) until idle: state, acks, fails, rollbacks."""
    handle = cluster.submit_topology(key, FAST, topology)
    try:
        handle.await_idle(120)
        counts, kept = handle.read_state("count"), handle.read_state("keep")
        actions = [t["action"] for t in handle.metrics()["transactions"]]
    finally:
        handle.kill()
    rec = topo.record(key)
    return {
        "count": counts,
        "keep": kept,
        "acks": dict(rec.acks),
        "fails": dict(rec.fails),
        "rollbacks": actions.count("ROLLBACK"),
    }
