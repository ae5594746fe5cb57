"""Components that emit a value no task can be sent (it does not pickle), for the tests of it.

``unpicklable(kind)`` makes one: a dict nested 1,000 deep (``deep``: "excessively deep
recursion"), a lock (``lock``) or a generator (``generator``). Each component makes it in place
of the poison word or sentence of ``deadletter_topologies`` and emits everything else as the
word count does:

- ``ShippingSplit``: the word count's split, which emits it for the word ``poison``;
- ``ShippingTag`` (one task, after split): passes each word on, and emits it for ``poison``:
  the task receives every word of the poisoned sentence, so which of them emitted it must be
  found;
- ``LockSpout``: a driver-side spout that emits a lock in place of the poisoned sentence;
- ``ShippingSplitWords`` and ``LockingMemorySpout``: the transactional word count's split, and
  a partitioned spout whose emitter emits a lock in place of the poisoned sentence.

``wordcount(spout, split, tag)`` is ``sentences -> split [-> tag] -> count``. For
``statefulbolts run`` (the exit status): ``stopped_wordcount``, the split emitting a lock, and
``stopped_lines`` the sentences it reads.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from typing import Any

from deadletter_topologies import POISON, POISON_SENTENCE, SplitWords, partitions, sentences
from topologies import ValueSpout

from examples.corpus import words
from examples.wordcount import SplitSentence, WordCount
from statefulbolts import (
    BasicBolt,
    Fields,
    MemoryTransactionalSpout,
    StormTopology,
    TopologyBuilder,
    TransactionalTopology,
    TransactionalTopologyBuilder,
)
from statefulbolts.transactional import BatchOutputCollector

KINDS = ("deep", "lock", "generator")
# What pickling each kind raises, as the error's message shows it.
WHY = {
    "deep": "PicklingError: Could not pickle object as excessively deep recursion required.",
    "lock": "TypeError: cannot pickle '_thread.lock' object",
    "generator": "TypeError: cannot pickle 'generator' object",
}
TYPE_OF = {"deep": "builtins.dict", "lock": "_thread.lock", "generator": "builtins.generator"}


def unpicklable(kind: str) -> Any:
    """A value that does not pickle (see the module docstring)."""
    if kind == "deep":
        top: dict[str, Any] = {}
        inner = top
        for _ in range(1000):
            inner["x"] = {}
            inner = inner["x"]
        return top
    if kind == "lock":
        return threading.Lock()
    return (n for n in range(3))


def line(kind: str, component: str, task_index: int, field: str, what: str = "bolt") -> str:
    """The one line of the error, as the runtime words it."""
    return (
        f"{what} {component!r} task index {task_index} emitted a value of type {TYPE_OF[kind]} "
        f"on stream 'default' field {field!r} that cannot be pickled to travel to the task it "
        f"is for ({WHY[kind]}); emit values that pickle: no locks, sockets, open files or "
        "generators, no structure nested hundreds deep"
    )


class ShippingSplit(BasicBolt):
    """Splits sentences; emits ``unpicklable(kind)`` in place of the word ``poison``."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        for word in words(tuple.get_value(0)):
            collector.emit([unpicklable(self.kind) if word == POISON else word])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word"))


class ShippingTag(BasicBolt):
    """Passes words on; emits ``unpicklable(kind)`` for ``poison`` (``kind`` None: passes it)."""

    def __init__(self, kind: str | None) -> None:
        self.kind = kind

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        word = tuple.get_value(0)
        poisoned = word == POISON and self.kind is not None
        collector.emit([unpicklable(self.kind) if poisoned else word])  # type: ignore[arg-type]

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word"))


class Unshipped(BasicBolt):
    """Passes words on; a value that is not a ``str`` goes on as the word ``unshipped``."""

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        word = tuple.get_value(0)
        collector.emit([word if isinstance(word, str) else "unshipped"])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word"))


class LockSpout(ValueSpout):
    """``ValueSpout`` of sentences that emits a lock in place of the one at ``poisoned``."""

    def __init__(self, key: str, lines: list[str], poisoned: int) -> None:
        super().__init__(key, lines, fields=("sentence",))
        self.poisoned = poisoned

    def _emit(self, i: int) -> None:
        if i != self.poisoned:
            super()._emit(i)
            return
        self.rec.emits[i] += 1
        self.live += 1
        self.collector.emit([threading.Lock()], message_id=i)


def wordcount(
    spout: Any, split: Any = None, tag: Any = None, *, chained: bool = False
) -> StormTopology:
    """``sentences`` -> ``split`` (default: the examples') [-> ``tag``] -> ``count``.

    ``tag`` has one task, fed by shuffle; ``chained``: as many as ``split``, chained to it
    (local-or-shuffle: one Python task runs both, and what ``split`` sends it is never pickled).
    """
    builder = TopologyBuilder()
    builder.set_spout("sentences", spout, 1)
    builder.set_bolt("split", split or SplitSentence(), 2).shuffle_grouping("sentences")
    counted = "split"
    if tag is not None and chained:
        builder.set_bolt("tag", tag, 2).local_or_shuffle_grouping("split")
        counted = "tag"
    elif tag is not None:
        builder.set_bolt("tag", tag, 1).shuffle_grouping("split")
        counted = "tag"
    builder.set_bolt("count", WordCount(), 2).fields_grouping(counted, Fields("word"))
    return builder.create_topology()


def stopped_lines() -> list[str]:
    """What ``stopped_wordcount`` reads: 20 sentences, the sixth poisoned."""
    return sentences(20, [5])


def stopped_wordcount() -> StormTopology:
    """For ``statefulbolts run``: the split emits a lock for ``poison``."""
    return wordcount(ValueSpout("unshippable-cli", stopped_lines(), fields=("sentence",)),
                     ShippingSplit("lock"))  # fmt: skip


# ------------------------------------------------------------------ transactional word count
class ShippingSplitWords(SplitWords):
    """The transactional split, emitting ``unpicklable(kind)`` in place of ``poison``."""

    def __init__(self, kind: str) -> None:
        self.kind = kind

    def execute(self, tuple: Any) -> None:  # noqa: A002
        for word in words(tuple.get_value(1)):
            self.collector.emit([self.attempt, unpicklable(self.kind) if word == POISON else word])


class _Locking(BatchOutputCollector):
    """Emits a lock in place of the poisoned sentence, everything else as it comes."""

    def __init__(self, out: Any) -> None:
        self._out = out

    def emit(self, values: Any, stream: str = "default") -> list[int]:
        if values[1] == POISON_SENTENCE:
            values = [values[0], threading.Lock()]
        emitted: list[int] = self._out.emit(values, stream)
        return emitted

    def report_error(self, error: BaseException) -> None:
        self._out.report_error(error)


class _LockingEmitter:
    def __init__(self, emitter: Any) -> None:
        self._emitter = emitter

    def emit_partition_batch_new(self, tx: Any, collector: Any, partition: int, last: Any) -> Any:
        return self._emitter.emit_partition_batch_new(tx, _Locking(collector), partition, last)

    def emit_partition_batch(self, tx: Any, collector: Any, partition: int, meta: Any) -> Any:
        return self._emitter.emit_partition_batch(tx, _Locking(collector), partition, meta)

    def close(self) -> None:
        self._emitter.close()


class LockingMemorySpout(MemoryTransactionalSpout):
    """A memory spout whose emitter emits a lock in place of the poisoned sentence."""

    def get_emitter(self, conf: Mapping[str, Any], context: Any) -> Any:
        return _LockingEmitter(super().get_emitter(conf, context))


def tx_wordcount(
    transactional_id: str, split: Any = None, spout_class: type = MemoryTransactionalSpout
) -> TransactionalTopology:
    """The transactional word count of ``deadletter_topologies`` with these components."""
    from deadletter_topologies import PartialCount, SumCommitter

    spout = spout_class(tx_partitions(), ["sentence"], 2)
    builder = TransactionalTopologyBuilder(transactional_id, "spout", spout, 2)
    builder.set_bolt("split", split or SplitWords(), 2).shuffle_grouping("spout")
    builder.set_bolt("partial", PartialCount(), 2).fields_grouping("split", Fields("word"))
    builder.set_committer_bolt("count", SumCommitter(), 2).fields_grouping(
        "partial", Fields("word")
    )
    return builder.build_topology()


TX_POISONED = (1, 5)  # partition 1, row 5: txid 3 (rows 4-5), the second of its emission


def tx_partitions() -> dict[int, list[Any]]:
    """3 partitions of 8 sentences, the one at ``TX_POISONED`` poisoned."""
    return partitions(3, 8, TX_POISONED)


def tx_lines() -> Iterator[str]:
    """Every sentence of ``tx_partitions``."""
    for rows in tx_partitions().values():
        for row in rows:
            yield row[0]
