"""Bolts that do, by script, what a per-tuple bolt may do to its tuples: the fast path's suite.

Imported by the driver and by Spark's Python workers (see ``topologies``). Each input tuple
carries its script in its first value, ``"<ops>:<key>"``: the bolt runs the ops in order.

===  =============================================================================
op   what the bolt does with the tuple ``t``
===  =============================================================================
e    emit ``[key]`` on ``one``, anchored to ``t`` (a ``BasicBolt``'s emits always are)
E    emit ``[key, number of tuples kept]`` on ``two``, anchored to ``t``
u    emit ``[key]`` on ``one`` untracked (``anchors=[]``; a ``BasicBolt`` anchors it)
M    emit ``[key]`` on ``one`` anchored to ``t`` and every tuple kept (``BasicBolt``: ``t``)
k    keep ``t`` (acked later: ``r``, ``pre_prepare``, ``cleanup``; a ``BasicBolt`` acked it)
v    keep ``t.values`` only
r    for each tuple kept, newest first: emit its values on ``one`` anchored to it, then ack
     it; and emit each kept values list's first value; forget them
s    count ``key`` in the state (stateful bolts)
g    emit what ``t`` says of itself (source, stream, values, fields) on ``two``
a    ack ``t`` (a ``BasicBolt`` acks by itself)
f    fail ``t`` (``BasicBolt``: raise ``FailedException``, which ends the script)
F    report an error, then fail ``t`` (``BasicBolt``: raise ``ReportedFailedException``)
x    raise ``ValueError`` (the task fails)
===  =============================================================================

With ``once`` (a folder, for end-to-end runs whose replays must end), ``f``, ``F`` and ``x``
act only the first time for their key and stream; afterwards ``f`` and ``F`` ack instead.

A stateful bolt acks what it still keeps in ``pre_prepare``; any other bolt in ``cleanup``
(a ``BasicBolt``'s executor acked each already).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from statefulbolts import (
    BaseTransactionalBolt,
    BasicBolt,
    Bolt,
    Committer,
    FailedException,
    Fields,
    MemoryTransactionalSpout,
    StatefulBolt,
    StormTopology,
    TopologyBuilder,
    TransactionalMap,
    TransactionalTopologyBuilder,
)
from statefulbolts.errors import ReportedFailedException


def _first_time(marker_dir: str | None, op: str, key: str, t: Any) -> bool:
    """Whether ``op`` acts now: always without a marker folder, else the first time only."""
    if marker_dir is None:
        return True
    name = f"{ord(op)}-{t.source_stream_id}-{key}"
    try:
        fd = os.open(os.path.join(marker_dir, name), os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        return False
    os.close(fd)
    return True


def _declare(declarer: Any) -> None:
    declarer.declare_stream("one", Fields("word"))
    declarer.declare_stream("two", Fields("word", "n"))


def _describe(t: Any) -> str:
    return repr((t.source_component, t.source_task, t.source_stream_id, list(t), list(t.fields)))


class _Script:
    """What the three kinds of bolt share: the script's parsing and the kept tuples."""

    once: str | None = None  # a folder: ``x`` raises once per key (end-to-end runs)

    def _begin(self) -> None:
        self.kept: list[Any] = []
        self.values_kept: list[Any] = []

    def _released(self, emit: Any) -> list[Any]:
        """Emit what ``r`` emits; return the tuples kept, newest first, and forget them."""
        kept, self.kept = self.kept[::-1], []
        for t in kept:
            emit([t.get_value(0)], t)
        values, self.values_kept = self.values_kept, []
        for v in values:
            emit([v[0]], None)
        return kept


class ScriptBasic(_Script, BasicBolt):
    """The script as a ``BasicBolt``: acked by its executor unless it raises."""

    def __init__(self, once: str | None = None) -> None:
        self.once = once

    def prepare(self, conf: Mapping[str, Any], context: Any) -> None:
        self._begin()

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        ops, _, key = str(tuple.get_value(0)).partition(":")
        for op in ops:
            if op in "euM":
                collector.emit([key], "one")
            elif op == "E":
                collector.emit([key, len(self.kept)], "two")
            elif op == "k":
                self.kept.append(tuple)
            elif op == "v":
                self.values_kept.append(tuple.values)
            elif op == "r":
                self._released(lambda values, _t: collector.emit(values, "one"))
            elif op == "g":
                collector.emit([_describe(tuple), 0], "two")
            elif op in "fFx" and _first_time(self.once, op, key, tuple):
                if op == "f":
                    raise FailedException(key)
                if op == "F":
                    raise ReportedFailedException(key)
                msg = f"boom {key}"
                raise ValueError(msg)

    def declare_output_fields(self, declarer: Any) -> None:
        _declare(declarer)


class ScriptBolt(_Script, Bolt):
    """The script as a ``Bolt`` that acks (and fails) through its collector."""

    def __init__(self, once: str | None = None) -> None:
        self.once = once

    def prepare(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector
        self._begin()

    def _state(self, key: str) -> None:
        """Nothing: a bolt without state."""

    def execute(self, tuple: Any) -> None:  # noqa: A002
        out = self.collector
        ops, _, key = str(tuple.get_value(0)).partition(":")
        for op in ops:
            if op == "e":
                out.emit([key], anchors=tuple, stream="one")
            elif op == "E":
                out.emit([key, len(self.kept)], anchors=tuple, stream="two")
            elif op == "u":
                out.emit([key], anchors=[], stream="one")
            elif op == "M":
                out.emit([key], anchors=[tuple, *self.kept], stream="one")
            elif op == "k":
                self.kept.append(tuple)
            elif op == "v":
                self.values_kept.append(tuple.values)
            elif op == "r":
                self._release(tuple)
            elif op == "s":
                self._state(key)
            elif op == "g":
                out.emit([_describe(tuple), 0], anchors=tuple, stream="two")
            elif op == "a":
                out.ack(tuple)
            elif op in "fF" and not _first_time(self.once, op, key, tuple):
                out.ack(tuple)
            elif op == "f":
                out.fail(tuple)
            elif op == "F":
                out.report_error(ValueError(f"reported {key}"))
                out.fail(tuple)
            elif op == "x" and _first_time(self.once, op, key, tuple):
                msg = f"boom {key}"
                raise ValueError(msg)

    def _release(self, anchor: Any) -> None:
        out = self.collector

        def emit(values: list[Any], t: Any) -> None:
            out.emit(values, anchors=anchor if t is None else t, stream="one")

        for t in self._released(emit):
            out.ack(t)

    def cleanup(self) -> None:
        for t in self.kept:
            self.collector.ack(t)
        self.kept = []

    def declare_output_fields(self, declarer: Any) -> None:
        _declare(declarer)


class ScriptStateful(ScriptBolt, StatefulBolt):
    """The script as a ``StatefulBolt``: ``s`` counts the key; held acks until the checkpoint."""

    def init_state(self, state: Any) -> None:
        self.state = state

    def _state(self, key: str) -> None:
        self.state.put(key, self.state.get(key, 0) + 1)

    def pre_prepare(self, txid: int) -> None:
        for t in self.kept:
            self.collector.ack(t)
        self.kept = []

    def cleanup(self) -> None:
        """Nothing: what it kept was acked in ``pre_prepare``."""


class Upstream(BasicBolt):
    """What feeds the bolt under test: ``one`` (``script``) and ``two`` (``script``, ``n``)."""

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        script = tuple.get_value(0)
        collector.emit([script], "one")
        collector.emit([script, len(script)], "two")

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare_stream("one", Fields("script"))
        declarer.declare_stream("two", Fields("script", "n"))


class Count(StatefulBolt):
    """Counts each value it is given (the first field) in its state, and acks it."""

    def prepare(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector

    def init_state(self, state: Any) -> None:
        self.state = state

    def execute(self, tuple: Any) -> None:  # noqa: A002
        key = f"{tuple.source_stream_id}|{tuple.get_value(0)}"
        self.state.put(key, self.state.get(key, 0) + 1)
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer: Any) -> None:
        """No output."""


KINDS = {"basic": ScriptBasic, "rich": ScriptBolt, "stateful": ScriptStateful}


def scripted(
    spout: Any,
    kind: str,
    *,
    parallelism: int = 2,
    grouping: str = "shuffle",
    stateful_downstream: bool = True,
    once: str | None = None,
) -> StormTopology:
    """``src`` -> ``up`` -> ``bolt`` (a ``KINDS[kind]``) -> ``down`` (``Count``) and ``side``.

    ``bolt`` takes both of ``up``'s streams by ``grouping`` (``fields``: on ``script``);
    ``down`` counts ``bolt``'s ``one`` by fields grouping; ``side`` takes ``two`` by
    ``local_or_shuffle`` (chained where the parallelisms match): a ``Count`` when
    ``stateful_downstream``, else a ``Relay``-like ``Upstream`` (no stateful bolt but ``bolt``).
    """
    builder = TopologyBuilder()
    builder.set_spout("src", spout)
    builder.set_bolt("up", Upstream(), 2).shuffle_grouping("src")
    declarer = builder.set_bolt("bolt", KINDS[kind](once), parallelism)
    for stream in ("one", "two"):
        if grouping == "fields":
            declarer.fields_grouping("up", Fields("script"), stream)
        else:
            getattr(declarer, f"{grouping}_grouping")("up", stream)
    if stateful_downstream:
        builder.set_bolt("down", Count(), 2).fields_grouping("bolt", Fields("word"), "one")
        builder.set_bolt("side", Count(), parallelism).local_or_shuffle_grouping("bolt", "two")
    return builder.create_topology()


# ------------------------------------------------------------------- transactional topologies
#
# A transactional job's tuples lead with the batch's attempt; its bolts do not ack. The split
# passes each script on and emits what its ops say as values with no ops (``:...``); the batch
# bolt counts every value it gets and runs the ops. Ops: ``k`` keep the tuple, ``v`` keep its
# values, ``e`` emit the key, ``g`` emit what the tuple says of itself, ``f`` raise
# ``FailedException`` (the attempt fails and is replayed), ``x`` raise ``ValueError`` (a
# crash), each only the first time for its key (``once``), in the batch bolt; ``F`` and ``X``
# the same in the split. What was kept is
# emitted again at the end of the batch (a batch bolt) or with the next tuple (a
# ``BasicBolt``): a tuple changed under the bolt would show there.


class TxScriptSplit(BasicBolt):
    """``(attempt, script)`` -> ``(attempt, key)`` per emit of the script; a ``BasicBolt``."""

    def __init__(self, once: str) -> None:
        self.once = once

    def prepare(self, conf: Mapping[str, Any], context: Any) -> None:
        self.kept: list[Any] = []

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        attempt = tuple.get_value(0)
        for t in self.kept:
            collector.emit([attempt, f":kept|{t.get_value(1)}"])
        self.kept = []
        ops, _, key = str(tuple.get_value(1)).partition(":")
        for op in ops:
            if op == "e":
                collector.emit([attempt, f":{key}"])
            elif op == "k":
                self.kept.append(tuple)
            elif op == "g":
                collector.emit([attempt, f":{_describe(tuple)}"])
            elif op in "FX" and _first_time(self.once, op, key, tuple):
                if op == "F":
                    raise FailedException(key)
                msg = f"boom {key}"
                raise ValueError(msg)
        collector.emit([attempt, str(tuple.get_value(1))])  # the script goes on

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "script"))


class TxScriptBatch(BaseTransactionalBolt):
    """A batch bolt running the scripts; ``(attempt, key, 1)`` per emit, more at the end."""

    def __init__(self, once: str) -> None:
        self.once = once

    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.collector, self.attempt = collector, id
        self.kept: list[Any] = []
        self.values_kept: list[Any] = []

    def execute(self, tuple: Any) -> None:  # noqa: A002
        emit = self.collector.emit
        emit([self.attempt, tuple.get_value(1), 1])  # every value it gets, counted
        ops, _, key = str(tuple.get_value(1)).partition(":")
        for op in ops:
            if op == "e":
                emit([self.attempt, key, 1])
            elif op == "k":
                self.kept.append(tuple)
            elif op == "v":
                self.values_kept.append(tuple.values)
            elif op == "g":
                emit([self.attempt, _describe(tuple), 1])
            elif op in "fx" and _first_time(self.once, op, key, tuple):
                if op == "f":
                    raise FailedException(key)
                msg = f"boom {key}"
                raise ValueError(msg)

    def finish_batch(self) -> None:
        for t in self.kept:
            self.collector.emit([self.attempt, f"kept|{_describe(t)}", 1])
        for v in self.values_kept:
            self.collector.emit([self.attempt, f"values|{v!r}", 1])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "key", "n"))


class TxSum(BaseTransactionalBolt, Committer):
    """The committer: adds each key's ``n`` into its map, exactly once per txid."""

    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.attempt, self.counts = id, {}
        self.map = TransactionalMap(context.backing_map())

    def execute(self, tuple: Any) -> None:  # noqa: A002
        key = tuple.get_value(1)
        self.counts[key] = self.counts.get(key, 0) + tuple.get_value(2)

    def finish_batch(self) -> None:
        keys = sorted(self.counts)
        updaters = [lambda old, n=self.counts[k]: (old or 0) + n for k in keys]
        self.map.multi_update(self.attempt, keys, updaters)

    def declare_output_fields(self, declarer: Any) -> None:
        """Nothing."""


def transactional(
    tid: str, partitions: dict[int, list[list[Any]]], take: int, once: str, parallelism: int
) -> Any:
    """memory spout -> ``split`` (``TxScriptSplit``) -> ``batch`` (``TxScriptBatch``) -> ``sum``."""
    spout = MemoryTransactionalSpout(partitions, ["script"], take)
    b = TransactionalTopologyBuilder(tid, "scripts", spout, parallelism)
    b.set_bolt("split", TxScriptSplit(once), parallelism).none_grouping("scripts")
    b.set_bolt("batch", TxScriptBatch(once), parallelism).fields_grouping("split", Fields("script"))
    b.set_committer_bolt("sum", TxSum(), parallelism).fields_grouping("batch", Fields("key"))
    return b.build_topology()
