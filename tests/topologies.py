"""Spouts, bolts and topologies for the end-to-end Spark tests (``tests/test_spark_*.py``).

This module is imported by the driver (pytest puts ``tests/`` on ``sys.path``) and by Spark's
Python workers (the library ships the driver's ``sys.path`` to local workers), so the classes here
are pickled by reference.

How the tests observe what happened, given that bolt instances live in worker processes for one
transaction each:

- Spouts run on the driver. Every spout here records its ``emit`` / ``ack`` / ``fail`` calls in
  ``RECORDS[key]`` (a ``SpoutRecord``), ``key`` being unique per test.
- Bolts keep what the test checks in managed state (read back with ``handle.read_state``), or
  append lines to files under the test's ``tmp_path`` (hooks, crash markers).
"""

from __future__ import annotations

import collections
import os
import re
import threading
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from examples.wordcount import SentenceSpout, SplitSentence, WordCount
from statefulbolts import (
    BasicBolt,
    Bolt,
    Fields,
    Spout,
    StatefulBolt,
    StormTopology,
    TopologyBuilder,
)

# --------------------------------------------------------------------------- driver-side records


@dataclass
class SpoutRecord:
    """What the spout tasks of one test did, by message id."""

    emits: collections.Counter[Any] = field(default_factory=collections.Counter)
    acks: collections.Counter[Any] = field(default_factory=collections.Counter)
    fails: collections.Counter[Any] = field(default_factory=collections.Counter)
    # Per spout task index: the most tuples it had emitted and not yet seen acked or failed.
    max_live: dict[int, int] = field(default_factory=dict)
    opened: int = 0
    closed: int = 0


RECORDS: dict[str, SpoutRecord] = {}
_RECORDS_LOCK = threading.Lock()


def record(key: str) -> SpoutRecord:
    """The record of ``key`` (created on first use)."""
    with _RECORDS_LOCK:
        rec = RECORDS.get(key)
        if rec is None:
            rec = RECORDS[key] = SpoutRecord()
        return rec


def new_key(prefix: str) -> str:
    """A topology name and record key unique to one test (names must not contain '/')."""
    clean = "".join(c if c.isalnum() else "-" for c in prefix)[:40]
    return f"{clean}-{uuid.uuid4().hex[:8]}"


# --------------------------------------------------------------------------------------- spouts


class ValueSpout(Spout):
    """Emits ``values[i]`` with message id ``i``; replays on ``fail``; records into ``RECORDS``.

    Args:
        key: the ``RECORDS`` key.
        values: one entry per tuple; a scalar when ``fields`` has one name, else a sequence.
        fields: output field names.
        burst: ``None`` emits one tuple per ``next_tuple``. A number emits that many in one call,
            and the next burst only once every tuple emitted so far was acked or failed: with
            acks deferred to COMMIT, each burst is a transaction of its own.
        streams: declare these streams (same fields) instead of the default one; tuple ``i``
            goes out on ``streams[i % len(streams)]``.
        emit_stream: emit on this stream whatever was declared (to test undeclared streams).

    With several tasks, task ``k`` of ``n`` emits the indices ``i`` with ``i % n == k``.
    """

    def __init__(
        self,
        key: str,
        values: Sequence[Any],
        fields: Sequence[str] = ("value",),
        *,
        burst: int | None = None,
        streams: Sequence[str] | None = None,
        emit_stream: str | None = None,
    ) -> None:
        self.key = key
        self.values = list(values)
        self.fields = tuple(fields)
        self.burst = burst
        self.streams = tuple(streams) if streams else None
        self.emit_stream = emit_stream

    def open(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        """Pick this task's share of the values."""
        self.collector = collector
        self.task = context.this_task_index
        n = len(context.this_component_tasks)
        self.todo: collections.deque[int] = collections.deque(
            i for i in range(len(self.values)) if i % n == self.task
        )
        self.replay: collections.deque[int] = collections.deque()
        self.live = 0
        self.rec = record(self.key)
        self.rec.opened += 1
        self.rec.max_live.setdefault(self.task, 0)

    def _emit(self, i: int) -> None:
        value = self.values[i]
        row = [value] if len(self.fields) == 1 else list(value)
        if self.emit_stream is not None:
            stream = self.emit_stream
        elif self.streams is not None:
            stream = self.streams[i % len(self.streams)]
        else:
            stream = "default"
        self.rec.emits[i] += 1
        self.live += 1
        self.collector.emit(row, message_id=i, stream=stream)
        self.rec.max_live[self.task] = max(self.rec.max_live[self.task], self.live)

    def next_tuple(self) -> None:
        """Replays first; then one new tuple, or a whole burst once nothing is live."""
        if self.replay:
            while self.replay:
                self._emit(self.replay.popleft())
                if self.burst is None:
                    return
            return
        if not self.todo:
            return
        if self.burst is None:
            self._emit(self.todo.popleft())
            return
        if self.live:
            return
        for _ in range(min(self.burst, len(self.todo))):
            self._emit(self.todo.popleft())

    def ack(self, msg_id: Any) -> None:
        """Count the ack."""
        self.rec.acks[msg_id] += 1
        self.live -= 1

    def fail(self, msg_id: Any) -> None:
        """Count the fail and replay."""
        self.rec.fails[msg_id] += 1
        self.live -= 1
        self.replay.append(msg_id)

    def close(self) -> None:
        """Count the close."""
        self.rec.closed += 1

    def declare_output_fields(self, declarer: Any) -> None:
        """``fields`` on the default stream, or on each of ``streams``."""
        if self.streams is None:
            declarer.declare(Fields(list(self.fields)))
        else:
            for stream in self.streams:
                declarer.declare_stream(stream, Fields(list(self.fields)))


class RecordingSentenceSpout(SentenceSpout):
    """The word count's ``SentenceSpout``, recording its emits, acks and fails in ``RECORDS``."""

    def __init__(self, key: str, count: int) -> None:
        super().__init__(count)
        self.key = key

    def open(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        """Open the word count spout behind a recording collector."""
        self.rec = record(self.key)
        self.rec.opened += 1
        super().open(conf, context, _RecordingSpoutCollector(collector, self.rec))

    def ack(self, msg_id: Any) -> None:
        """Count, then let the word count spout forget ``msg_id``."""
        self.rec.acks[msg_id] += 1
        super().ack(msg_id)

    def fail(self, msg_id: Any) -> None:
        """Count, then let the word count spout replay ``msg_id``."""
        self.rec.fails[msg_id] += 1
        super().fail(msg_id)


class _RecordingSpoutCollector:
    def __init__(self, collector: Any, rec: SpoutRecord) -> None:
        self._collector = collector
        self._rec = rec

    def emit(self, values: Sequence[Any], message_id: Any = None, stream: str = "default") -> None:
        self._rec.emits[message_id] += 1
        self._collector.emit(values, message_id=message_id, stream=stream)

    def report_error(self, error: BaseException) -> None:
        self._collector.report_error(error)


# ---------------------------------------------------------------------------------------- bolts


class Relay(BasicBolt):
    """Re-emits its input's first value as ``value`` (anchored, acked by ``BasicBolt``)."""

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        """Pass the value on."""
        collector.emit([tuple.get_value(0)])

    def declare_output_fields(self, declarer: Any) -> None:
        """One field: ``value``."""
        declarer.declare(Fields("value"))


class ThresholdRouter(BasicBolt):
    """Sends values below ``threshold`` on stream ``low`` and the others on stream ``high``."""

    def __init__(self, threshold: Any) -> None:
        self.threshold = threshold

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        """Route by threshold."""
        value = tuple.get_value(0)
        collector.emit([value], stream="low" if value < self.threshold else "high")

    def declare_output_fields(self, declarer: Any) -> None:
        """Two streams, one field each."""
        declarer.declare_stream("low", Fields("value"))
        declarer.declare_stream("high", Fields("value"))


class Tally(StatefulBolt):
    """Counts tuples in managed state; acks each one.

    The state key is the value of ``field`` (default: the tuple's first value), prefixed with
    ``<task index>|`` when ``by_task``, ``<stream>|`` when ``by_stream`` and ``<source>|`` when
    ``by_source``. With ``count_prepares`` every ``pre_prepare(t)`` adds one to ``pp|<task>|<t>``
    (written before ``prepare_commit``, so it is committed with the transaction). With ``emit``
    each tuple is re-emitted anchored as ``(value, count)``.
    """

    def __init__(
        self,
        field: str | None = None,
        *,
        by_task: bool = False,
        by_stream: bool = False,
        by_source: bool = False,
        count_prepares: bool = False,
        emit: bool = False,
    ) -> None:
        self.field = field
        self.by_task = by_task
        self.by_stream = by_stream
        self.by_source = by_source
        self.count_prepares = count_prepares
        self.emit = emit

    def prepare(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        """Keep the collector and the task index."""
        self.collector = collector
        self.task = context.this_task_index

    def init_state(self, state: Any) -> None:
        """The counts, as of the last commit."""
        self.state = state

    def key_of(self, tuple_: Any) -> Any:
        """The state key counting ``tuple_``."""
        value = tuple_.get_value(0) if self.field is None else tuple_.get_value_by_field(self.field)
        parts = []
        if self.by_task:
            parts.append(str(self.task))
        if self.by_stream:
            parts.append(tuple_.source_stream_id)
        if self.by_source:
            parts.append(tuple_.source_component)
        return "|".join([*parts, str(value)]) if parts else value

    def count(self, tuple_: Any) -> int:
        """Add one to ``tuple_``'s key; return the new count."""
        key = self.key_of(tuple_)
        n = self.state.get(key, 0) + 1
        self.state.put(key, n)
        return n

    def execute(self, tuple: Any) -> None:  # noqa: A002
        """Count, maybe emit, ack."""
        n = self.count(tuple)
        if self.emit:
            self.collector.emit([tuple.get_value(0), n], anchors=tuple)
        self.collector.ack(tuple)

    def pre_prepare(self, txid: int) -> None:
        """Count the PREPAREs this task ran, per txid."""
        if self.count_prepares:
            key = f"pp|{self.task}|{txid}"
            self.state.put(key, self.state.get(key, 0) + 1)

    def declare_output_fields(self, declarer: Any) -> None:
        """``(value, count)``."""
        declarer.declare(Fields("value", "count"))


class FailFirstDelivery(Tally):
    """``collector.fail``s the first delivery of each value in ``targets``.

    The "already failed" marker is in the task's state: route by value (``by_value``) so that the
    replay meets the same task.
    """

    def __init__(self, targets: Iterable[Any]) -> None:
        super().__init__()
        self.targets = frozenset(targets)

    def execute(self, tuple: Any) -> None:  # noqa: A002
        """Fail a target's first delivery; count everything else."""
        value = tuple.get_value(0)
        if value in self.targets and self.state.get(f"failed|{value}") is None:
            self.state.put(f"failed|{value}", 1)
            self.collector.fail(tuple)
            return
        super().execute(tuple)


class _OnFirstDelivery(Tally):
    """Does ``on_first`` with the first delivery of ``target`` instead of counting it.

    The marker (``<marker>|<value>``) is in the task's state: route by value (``by_value``) so
    that the replay meets it.
    """

    marker = ""

    def __init__(self, target: Any) -> None:
        super().__init__()
        self.target = target

    def execute(self, tuple: Any) -> None:  # noqa: A002
        """The target's first delivery goes to ``on_first``; everything else is counted."""
        value = tuple.get_value(0)
        key = f"{self.marker}|{value}"
        if value == self.target and self.state.get(key) is None:
            self.state.put(key, 1)
            self.on_first(tuple)
            return
        super().execute(tuple)

    def on_first(self, tuple_: Any) -> None:
        """What to do with the target's first delivery."""
        raise NotImplementedError


class IgnoreFirstDelivery(_OnFirstDelivery):
    """Neither acks nor fails the first delivery of ``target``."""

    marker = "ignored"

    def on_first(self, tuple_: Any) -> None:
        """Drop it on the floor."""


class AckTwiceFirstDelivery(_OnFirstDelivery):
    """Counts the first delivery of ``target`` and acks it twice (a bug Storm's XOR catches)."""

    marker = "twice"

    def on_first(self, tuple_: Any) -> None:
        """Count and ack it, then ack it once more."""
        Tally.execute(self, tuple_)
        self.collector.ack(tuple_)


class FirstAttemptFault(Tally):
    """Counts like ``Tally``; on ``target``, logs ``<attempt> <pid>`` to ``log_path`` and, in the
    first Spark attempt of the task only, crashes the Python worker (``os._exit(1)``) or raises.
    """

    def __init__(self, target: Any, log_path: str, mode: str) -> None:
        super().__init__()
        if mode not in ("crash", "raise"):
            msg = f"mode must be 'crash' or 'raise', got {mode!r}"
            raise ValueError(msg)
        self.target = target
        self.log_path = log_path
        self.mode = mode

    def execute(self, tuple: Any) -> None:  # noqa: A002
        """Fault on the target in attempt 0."""
        from statefulbolts.runtime import task_attempt

        if tuple.get_value(0) == self.target:
            attempt = task_attempt()
            _append(self.log_path, f"{attempt} {os.getpid()}")
            if attempt == 0:
                if self.mode == "crash":
                    os._exit(1)
                msg = f"first-attempt fault on {self.target!r}"
                raise RuntimeError(msg)
        super().execute(tuple)


class FailJobOnce(Tally):
    """Raises on ``target`` in the first ``failures`` attempts overall (counted in ``log_path``).

    With ``failures`` equal to Spark's ``spark.task.maxFailures``, every attempt of the first job
    that carries ``target`` raises, so that job fails for good; the replay in a later job passes.
    """

    def __init__(self, target: Any, log_path: str, failures: int) -> None:
        super().__init__()
        self.target = target
        self.log_path = log_path
        self.failures = failures

    def execute(self, tuple: Any) -> None:  # noqa: A002
        """Raise on the target until ``failures`` attempts have raised."""
        from statefulbolts.runtime import task_attempt

        if tuple.get_value(0) == self.target:
            _append(self.log_path, str(task_attempt()))
            raised = Path(self.log_path).read_text(encoding="utf-8").count("\n")
            if raised <= self.failures:
                msg = f"job-failing fault on {self.target!r} ({raised} of {self.failures})"
                raise RuntimeError(msg)
        super().execute(tuple)


class Poison(Tally):
    """Counts like ``Tally`` but always raises on ``poison``."""

    def __init__(self, poison: Any) -> None:
        super().__init__()
        self.poison = poison

    def execute(self, tuple: Any) -> None:  # noqa: A002
        """Raise on the poison value."""
        if tuple.get_value(0) == self.poison:
            msg = f"poison value {self.poison!r}"
            raise RuntimeError(msg)
        super().execute(tuple)


class HookRecorder(StatefulBolt):
    """Appends every hook call to ``<log_dir>/<component>-<task index>.log``, one per line.

    Lines: ``prepare``, ``init_state <count of tuples in state>``, ``execute <value>``,
    ``pre_prepare <txid>``, ``pre_commit <txid>``, ``pre_rollback``, ``cleanup``.
    """

    def __init__(self, log_dir: str) -> None:
        self.log_dir = log_dir

    def _log(self, line: str) -> None:
        _append(self.path, line)

    def prepare(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        """Log, keep the collector."""
        self.collector = collector
        self.path = str(
            Path(self.log_dir) / f"{context.this_component_id}-{context.this_task_index}.log"
        )
        self._log("prepare")

    def init_state(self, state: Any) -> None:
        """Log with the number of tuples the state has counted."""
        self.state = state
        self._log(f"init_state {state.get('count', 0)}")

    def execute(self, tuple: Any) -> None:  # noqa: A002
        """Log, count, ack."""
        self._log(f"execute {tuple.get_value(0)}")
        self.state.put("count", self.state.get("count", 0) + 1)
        self.state.put(tuple.get_value(0), 1)
        self.collector.ack(tuple)

    def pre_prepare(self, txid: int) -> None:
        """Log."""
        self._log(f"pre_prepare {txid}")

    def pre_commit(self, txid: int) -> None:
        """Log."""
        self._log(f"pre_commit {txid}")

    def pre_rollback(self) -> None:
        """Log."""
        self._log("pre_rollback")

    def cleanup(self) -> None:
        """Log."""
        self._log("cleanup")


class UnanchoredEmitter(Bolt):
    """Emits its input unanchored (not allowed in a stateful topology)."""

    def prepare(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        """Keep the collector."""
        self.collector = collector

    def execute(self, tuple: Any) -> None:  # noqa: A002
        """Emit without anchors."""
        self.collector.emit([tuple.get_value(0)])
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer: Any) -> None:
        """One field: ``value``."""
        declarer.declare(Fields("value"))


class StrayStreamEmitter(Bolt):
    """Emits (anchored) on stream ``nowhere``, which it never declared."""

    def prepare(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        """Keep the collector."""
        self.collector = collector

    def execute(self, tuple: Any) -> None:  # noqa: A002
        """Emit on an undeclared stream."""
        self.collector.emit([tuple.get_value(0)], anchors=tuple, stream="nowhere")
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer: Any) -> None:
        """Only the default stream."""
        declarer.declare(Fields("value"))


class PrepareLoggingWordCount(WordCount):
    """The example's counter; each attempt's prepare appends ``"<task> <txid>"`` to ``path``."""

    def __init__(self, path: str) -> None:
        self.path = path

    def prepare(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        """Keep the task index too."""
        super().prepare(conf, context, collector)
        self.task = context.this_task_index

    def pre_prepare(self, txid: int) -> None:
        """One line per prepare of this attempt."""
        _append(self.path, f"{self.task} {txid}")


def _append(path: str, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


# ----------------------------------------------------------------------------------- topologies


def wordcount(key: str, sentences: int, parallelism: int) -> StormTopology:
    """``examples.wordcount.build`` with a recording sentence spout."""
    builder = TopologyBuilder()
    builder.set_spout("sentences", RecordingSentenceSpout(key, sentences), 1)
    builder.set_bolt("split", SplitSentence(), parallelism).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(), parallelism).fields_grouping("split", Fields("word"))
    return builder.create_topology()


def logged_wordcount(sentences: int, parallelism: int, log: str) -> StormTopology:
    """``examples.wordcount.build`` whose counter logs every prepare to ``log``."""
    builder = TopologyBuilder()
    builder.set_spout("sentences", SentenceSpout(sentences), 1)
    builder.set_bolt("split", SplitSentence(), parallelism).shuffle_grouping("sentences")
    counter = PrepareLoggingWordCount(log)
    builder.set_bolt("count", counter, parallelism).fields_grouping("split", Fields("word"))
    return builder.create_topology()


WORDS = [f"word{i:02d}" for i in range(15)]


def grouping_rows(n: int) -> list[tuple[int, str]]:
    """``(n, word)`` rows: each of the 15 ``WORDS`` once every 15 rows."""
    return [(i, WORDS[i % len(WORDS)]) for i in range(n)]


GROUPINGS = ("shuffle", "fields", "all", "global", "none", "local_or_shuffle")


def every_grouping(key: str, rows: int, burst: int, parallelism: int = 3) -> StormTopology:
    """One spout of ``(n, word)`` rows; one stateful ``Tally`` per grouping, keyed by task.

    Bolt ``g_<grouping>`` counts ``<task>|<n>`` (``<task>|<word>`` for fields grouping on word).
    """
    builder = TopologyBuilder()
    builder.set_spout("rows", ValueSpout(key, grouping_rows(rows), ("n", "word"), burst=burst))
    for grouping in GROUPINGS:
        keyed = "word" if grouping == "fields" else "n"
        declarer = builder.set_bolt(f"g_{grouping}", Tally(keyed, by_task=True), parallelism)
        if grouping == "fields":
            declarer.fields_grouping("rows", Fields("word"))
        else:
            getattr(declarer, f"{grouping}_grouping")("rows")
    return builder.create_topology()


def named_streams(key: str, n: int) -> StormTopology:
    """A spout on streams ``left`` / ``right`` (even / odd index); ``right`` is split again.

    ``lefts`` counts the ``left`` stream; ``router`` sends ``right`` values below ``n // 2`` on
    ``low`` and the rest on ``high``; ``lows`` and ``highs`` subscribe to one router stream
    each. Every tally keys by stream id.
    """
    builder = TopologyBuilder()
    builder.set_spout("src", ValueSpout(key, list(range(n)), streams=("left", "right")))
    builder.set_bolt("lefts", Tally(by_stream=True), 2).shuffle_grouping("src", "left")
    builder.set_bolt("router", ThresholdRouter(n // 2), 2).shuffle_grouping("src", "right")
    builder.set_bolt("lows", Tally(by_stream=True), 2).shuffle_grouping("router", "low")
    builder.set_bolt("highs", Tally(by_stream=True), 2).fields_grouping(
        "router", Fields("value"), "high"
    )
    return builder.create_topology()


def two_spouts(key: str, left: Sequence[str], right: Sequence[str]) -> StormTopology:
    """Two spouts (1 and 2 tasks) into one stateful word tally (2 tasks, fields grouping)."""
    builder = TopologyBuilder()
    builder.set_spout("left", ValueSpout(f"{key}-left", left, ("word",)), 1)
    builder.set_spout("right", ValueSpout(f"{key}-right", right, ("word",), burst=7), 2)
    builder.set_bolt("merge", Tally("word", count_prepares=True), 2).fields_grouping(
        "left", Fields("word")
    ).fields_grouping("right", Fields("word"))
    return builder.create_topology()


def spout_and_bolt(key: str, n: int) -> StormTopology:
    """``src`` feeds ``join`` directly and through ``relay`` (3 tasks): 1 + 3 checkpoint inputs."""
    builder = TopologyBuilder()
    builder.set_spout("src", ValueSpout(key, list(range(n)), burst=20))
    builder.set_bolt("relay", Relay(), 3).shuffle_grouping("src")
    builder.set_bolt("join", Tally(by_source=True, count_prepares=True), 2).shuffle_grouping(
        "src"
    ).fields_grouping("relay", Fields("value"))
    return builder.create_topology()


def stateful_chain(key: str, n: int) -> StormTopology:
    """``src`` -> stateful ``first`` (2 tasks, emits ``(value, count)``) -> stateful ``second``."""
    builder = TopologyBuilder()
    builder.set_spout("src", ValueSpout(key, list(range(n)), burst=n // 2))
    builder.set_bolt("first", Tally(emit=True, count_prepares=True), 2).shuffle_grouping("src")
    builder.set_bolt("second", Tally("value", count_prepares=True), 3).fields_grouping(
        "first", Fields("value")
    )
    return builder.create_topology()


def chained_wordcount(
    sentences: int, parallelism: int = 2, seen: StatefulBolt | None = None
) -> StormTopology:
    """A word count whose counter chains into two bolts (one Spark stage after the split).

    sentences -> split -shuffle-> ``count`` (stateful ``Tally``, emits ``(word, count)``)
    -local_or_shuffle-> ``seen`` (stateful ``Tally`` keyed ``<task>|<word>``, emits on)
    -none-> ``relay`` (a ``BasicBolt``: a forwarder). Equal parallelism throughout, so task i
    of ``count`` feeds task i of ``seen`` and of ``relay``, checkpoints included. ``seen``
    may be another bolt (it gets ``(value, count)`` pairs).
    """
    builder = TopologyBuilder()
    builder.set_spout("sentences", SentenceSpout(sentences), 1)
    builder.set_bolt("split", SplitSentence(), parallelism).shuffle_grouping("sentences")
    builder.set_bolt("count", Tally(emit=True), parallelism).fields_grouping(
        "split", Fields("word")
    )
    seen = seen or Tally("value", by_task=True, emit=True)
    builder.set_bolt("seen", seen, parallelism).local_or_shuffle_grouping("count")
    builder.set_bolt("relay", Relay(), parallelism).none_grouping("seen")
    return builder.create_topology()


def hooks(key: str, n: int, burst: int, log_dir: str, parallelism: int = 2) -> StormTopology:
    """Bursts of numbers into a ``HookRecorder`` (shuffle grouping)."""
    builder = TopologyBuilder()
    builder.set_spout("src", ValueSpout(key, list(range(n)), burst=burst))
    builder.set_bolt("hooks", HookRecorder(log_dir), parallelism).shuffle_grouping("src")
    return builder.create_topology()


def relay_into(
    key: str, n: int, bolt: StatefulBolt, *, burst: int | None = None, parallelism: int = 2
) -> StormTopology:
    """``src`` (numbers) -> ``relay`` (2 tasks) -> ``bolt`` as ``sink`` (fields grouping)."""
    builder = TopologyBuilder()
    builder.set_spout("src", ValueSpout(key, list(range(n)), burst=burst))
    builder.set_bolt("relay", Relay(), 2).shuffle_grouping("src")
    builder.set_bolt("sink", bolt, parallelism).fields_grouping("relay", Fields("value"))
    return builder.create_topology()


def direct_into(
    key: str,
    n: int,
    bolt: StatefulBolt,
    *,
    burst: int | None = None,
    parallelism: int = 2,
    spouts: int = 1,
    grouping: Callable[[Any], Any] | None = None,
) -> StormTopology:
    """``src`` (numbers, ``spouts`` tasks) -> ``bolt`` as ``sink`` (shuffle unless told)."""
    builder = TopologyBuilder()
    builder.set_spout("src", ValueSpout(key, list(range(n)), burst=burst), spouts)
    declarer = builder.set_bolt("sink", bolt, parallelism)
    if grouping is None:
        declarer.shuffle_grouping("src")
    else:
        grouping(declarer)
    return builder.create_topology()


def by_value(declarer: Any) -> None:
    """For ``direct_into``: fields grouping on ``value``, so a replay meets the same task."""
    declarer.fields_grouping("src", Fields("value"))


def through(key: str, n: int, middle: Bolt) -> StormTopology:
    """``src`` -> ``middle`` -> a stateful ``Tally`` as ``sink``."""
    builder = TopologyBuilder()
    builder.set_spout("src", ValueSpout(key, list(range(n))))
    builder.set_bolt("middle", middle, 1).shuffle_grouping("src")
    builder.set_bolt("sink", Tally(), 1).shuffle_grouping("middle")
    return builder.create_topology()


# ------------------------------------------------------------------------------- driver helpers


def task_max_failures(spark: Any) -> int:
    """F of the session's ``local[N,F]`` master: how many attempts Spark gives a task."""
    match = re.fullmatch(r"local\[[^,\]]+,(\d+)\]", spark.sparkContext.master)
    assert match, spark.sparkContext.master
    return int(match.group(1))


def image(topology_name: str, component: str, task: int) -> tuple[int | None, int | None]:
    """``(committed_txid, prepared_txid)`` of one task's in-memory state image on the driver."""
    from providers import InMemoryKeyValueStateProvider

    ns = f"{topology_name}/{component}-{task}"
    state = InMemoryKeyValueStateProvider().new_state(ns, {})
    return state.committed_txid, state.prepared_txid


def transactions(handle: Any) -> list[tuple[str | None, int, bool]]:
    """``(action, txid, ok)`` of every job so far, in order."""
    return [(t["action"], t["txid"], t["ok"]) for t in handle.metrics()["transactions"]]


def split_keys(state: Mapping[Any, Any], parts: int) -> list[tuple[list[str], Any]]:
    """``("a|b|v", n)`` entries of a tally keyed by ``parts`` prefixes, as ``([a, b, v], n)``."""
    return [(str(k).split("|", parts), v) for k, v in state.items()]


def seed_keyed_state(
    conf: Mapping[str, Any],
    name: str,
    parallelism: int,
    entries: Mapping[str, Any],
    *,
    component: str = "count",
    txid: int | None = None,
) -> list[str]:
    """Commit ``entries`` into ``component``'s tasks as a running keyed bolt would have.

    Each key goes to the task owning its key group, and the stored shape is written, so a
    topology started on it finds state of its own shape (nothing to move). With ``txid``, every
    task is committed at it and the checkpoint spout's record says ``COMMITTED(txid)``; without,
    the entries are committed with no txid (a topology starts on them as on a new one).
    Returns the task namespaces.
    """
    from checkpoint import TX_STATE_KEY, CheckPointState, TxPhase
    from providers import KeyValueState, StateFactory
    from statefulbolts.keygroups import KeyGroups
    from statefulbolts.state import (
        ComponentShape,
        Partitioning,
        StoredShape,
        serializers_of,
        shape_namespace,
        write_shape,
    )

    groups = KeyGroups(128)
    by_task: dict[int, dict[str, Any]] = {t: {} for t in range(parallelism)}
    for key, value in entries.items():
        by_task[groups.owner(groups.group_of(key), parallelism)][key] = value
    names = []
    for task, mine in by_task.items():
        ns = f"{name}/{component}-{task}"
        state = StateFactory.get_state(ns, conf)
        assert isinstance(state, KeyValueState)
        for key, value in mine.items():
            state.put(key, value)
        if txid is None:
            state.commit()
        else:
            state.prepare_commit(txid)
            state.commit(txid)
        names.append(ns)
    shape = ComponentShape(
        parallelism,
        Partitioning.KEYED,
        key_groups=128,
        key_arity=1,
        serializers=serializers_of(conf),
    )
    record = StateFactory.get_system_state(shape_namespace(f"{name}/"), conf)
    assert isinstance(record, KeyValueState)
    write_shape(record, StoredShape({component: shape}))
    if txid is not None:
        spout = StateFactory.get_system_state(f"{name}/$checkpointspout-0", conf)
        assert isinstance(spout, KeyValueState)
        spout.put(TX_STATE_KEY, CheckPointState(txid, TxPhase.COMMITTED).to_value())
        spout.commit()
    return names
