"""Drive one spout, bolt or checkpoint executor without Spark.

``RecordingCollector`` records what a component emitted, acked, failed and reported;
``make_tuple``, ``make_context`` and ``checkpoint_tuple`` build the inputs; ``ManualClock`` moves
time by hand. ``crash`` raises ``ABORT``-style failures deterministically.

Example:
    >>> from examples.wordcount import SplitSentence
    >>> from statefulbolts import BasicBolt
    >>> from statefulbolts._components import BasicBoltExecutor
    >>> bolt = BasicBoltExecutor(SplitSentence())
    >>> out = RecordingCollector()
    >>> bolt.prepare({}, make_context("split"), out)
    >>> bolt.execute(make_tuple(["a b"], fields=["sentence"]))
    >>> [e.values for e in out.emitted], len(out.acked)
    ([['a'], ['b']], 1)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from statefulbolts._clock import ManualClock
from statefulbolts._collectors import Anchors, OutputCollector, SpoutOutputCollector, anchor_list
from statefulbolts._components import Bolt, OutputFieldsDeclarer, Spout, StatefulBolt
from statefulbolts._context import TopologyContext
from statefulbolts._topology import (
    CHECKPOINT_COMPONENT_ID,
    CHECKPOINT_FIELDS,
    CHECKPOINT_STREAM_ID,
    StormTopology,
    TopologyBuilder,
)
from statefulbolts._tuple import DEFAULT_STREAM, Fields, Tuple

__all__ = [
    "Emitted",
    "ManualClock",
    "RecordingCollector",
    "RecordingSpoutCollector",
    "checkpoint_tuple",
    "make_context",
    "make_tuple",
]


@dataclass
class Emitted:
    """One emit seen by a recording collector."""

    values: list[Any]
    stream: str = DEFAULT_STREAM
    anchors: list[Tuple] = field(default_factory=list)
    message_id: Any = None


class RecordingCollector(OutputCollector):
    """An ``OutputCollector`` that records everything, in order, in ``events`` as well."""

    def __init__(self) -> None:
        self.emitted: list[Emitted] = []
        self.acked: list[Tuple] = []
        self.failed: list[Tuple] = []
        self.errors: list[BaseException] = []
        self.events: list[tuple[str, Any]] = []

    def emit(
        self, values: Sequence[Any], anchors: Anchors = None, stream: str = DEFAULT_STREAM
    ) -> None:
        """Record an emit."""
        record = Emitted(list(values), stream, anchor_list(anchors))
        self.emitted.append(record)
        self.events.append(("emit", record))

    def ack(self, tuple_: Tuple) -> None:
        """Record an ack."""
        self.acked.append(tuple_)
        self.events.append(("ack", tuple_))

    def fail(self, tuple_: Tuple) -> None:
        """Record a fail."""
        self.failed.append(tuple_)
        self.events.append(("fail", tuple_))

    def report_error(self, error: BaseException) -> None:
        """Record a reported error."""
        self.errors.append(error)
        self.events.append(("error", error))

    def on_stream(self, stream: str) -> list[Emitted]:
        """Emits on one stream."""
        return [e for e in self.emitted if e.stream == stream]


class RecordingSpoutCollector(SpoutOutputCollector):
    """A ``SpoutOutputCollector`` that records emits and errors."""

    def __init__(self) -> None:
        self.emitted: list[Emitted] = []
        self.errors: list[BaseException] = []

    def emit(
        self, values: Sequence[Any], message_id: Any = None, stream: str = DEFAULT_STREAM
    ) -> None:
        """Record an emit."""
        self.emitted.append(Emitted(list(values), stream, [], message_id))

    def report_error(self, error: BaseException) -> None:
        """Record a reported error."""
        self.errors.append(error)

    def take(self) -> list[Emitted]:
        """Return the emits so far and forget them."""
        out, self.emitted = self.emitted, []
        return out


def make_tuple(
    values: Sequence[Any],
    fields: Fields | Iterable[str] | None = None,
    component: str = "source",
    task: int = 1,
    stream: str = DEFAULT_STREAM,
) -> Tuple:
    """A tuple as if ``component`` task ``task`` emitted it on ``stream``."""
    if fields is None:
        names = Fields([f"field{i}" for i in range(len(values))])
    else:
        names = fields if isinstance(fields, Fields) else Fields(list(fields))
    return Tuple(list(values), names, component, task, stream)


def checkpoint_tuple(
    action: Any, txid: int, component: str = CHECKPOINT_COMPONENT_ID, task: int = 1
) -> Tuple:
    """A ``$checkpoint`` tuple ``(txid, action)`` from ``component`` task ``task``."""
    name = getattr(action, "value", action)
    return Tuple([txid, name], CHECKPOINT_FIELDS, component, task, CHECKPOINT_STREAM_ID)


class _Source(Spout):
    def __init__(self, fields: Fields) -> None:
        self._fields = fields

    def next_tuple(self) -> None:
        """Never called."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(self._fields)


class _Sink(Bolt):
    def execute(self, tuple: Tuple) -> None:  # noqa: A002
        """Never called."""


class _StatefulSink(StatefulBolt):
    def init_state(self, state: Any) -> None:
        """Never called."""

    def execute(self, tuple: Tuple) -> None:  # noqa: A002
        """Never called."""


def make_context(
    component_id: str = "bolt",
    task_index: int = 0,
    parallelism: int = 1,
    *,
    topology: StormTopology | None = None,
    topology_name: str = "test",
    stateful: bool = True,
    sources: dict[str, int] | None = None,
    source_fields: Sequence[str] = ("value",),
) -> TopologyContext:
    """A context for ``component_id`` task ``task_index``.

    Without ``topology``, builds one where ``component_id`` (stateful by default) subscribes to
    ``sources`` (name -> parallelism; default one spout ``source``), so checkpoint inputs are wired
    as the real builder does.
    """
    if topology is None:
        builder = TopologyBuilder()
        bolt: Bolt = _StatefulSink() if stateful else _Sink()
        declarer = builder.set_bolt(component_id, bolt, parallelism)
        for name, n in (sources or {"source": 1}).items():
            builder.set_spout(name, _Source(Fields(list(source_fields))), n)
            declarer.shuffle_grouping(name)
        topology = builder.create_topology()
    return TopologyContext(topology, topology_name, component_id, task_index)
