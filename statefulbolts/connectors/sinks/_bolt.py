"""The sink bolts: ``ExactlyOnceSinkBolt`` (published with the commit), ``AtLeastOnceSinkBolt``.

``ExactlyOnceSinkBolt`` is a ``StatefulBolt`` whose state holds its staged records
(``_staging``). Its part in the checkpoint protocol, per task:

1. **execute**: each tuple becomes a record (``Sink.stage``), kept in memory and acked; the ack
   is held until the transaction commits, as every stateful bolt's is. A column batch's records
   come from ``Sink.stage_batch``, as rows or as columns (``StagedColumns``), and are kept so.
   A transaction's first record also asks the sink to get ready for its COMMIT
   (``Sink.warm``: the Kafka sink makes its lane's producer meanwhile).
2. **PREPARE(t)** (``pre_prepare``): first *clean*: records of earlier transactions that the
   target's marker covers are deleted (one marker read per lane held). Then *stage*: t's
   records go into the state under keys of this task's lane and txid t, in chunks (of rows, or
   of columns where the sink staged columns); the state's
   prepare makes them durable exactly when t is prepared. A replayed PREPARE(t) replaces them
   (the runtime supersedes a lost attempt's delta); a ROLLBACK(t) drops them with the rest.
3. **COMMIT(t)** (``pre_commit``, on the executors, every sink task in parallel): *publish*:
   for each lane this task holds records of, oldest txid first, the records above the lane's
   marker up to t go to ``Sink.publish``, which writes them and moves the marker to t in one
   atomic step of the target. Then the state commits t. A COMMIT(t) run again (a driver that
   died mid-commit, a Spark retry) finds the records still staged and the marker at t:
   nothing is published twice. A transaction committed without this hook (a start that
   changes the topology's shape settles a half-finished one) leaves committed records above
   the marker: the next COMMIT publishes them first, under their own txids. Chunks of columns
   are stored packed (bytes): a COMMIT in the process that staged them, whose state holds
   exactly the bytes it stored, publishes the columns it kept (``_kept``) instead of decoding
   them again.
4. **Fence**: before publishing, a task whose state was written by a newer driver (a higher
   lease epoch, ``State.stored_fence``) refuses to publish (``SinkFencedError``): its driver
   was taken over. The lease epoch also goes to ``Sink.publish`` for targets that can compare
   it in their atomic step.

Records are in the target exactly once when their transaction has committed: not before, and
not twice. Their order: per lane, by txid, then as the tuples came; lanes (sink tasks) publish
independently, so two tasks' records of one transaction interleave in any order. Group the
sink's input by fields (the record key) to keep a key's records in one lane, in order.

Rescaling: a fields-grouped sink moves each lane's staged records, whole, to one task (the
anchor, ``_staging``); the others keep each task's records in it, so they scale up, and scale
down only once the tasks that go hold nothing.

``AtLeastOnceSinkBolt`` writes each tuple's record with ``Sink.write`` while the transaction
runs, acks it once written, and keeps no state: the record is visible before its transaction
commits, and a transaction that rolls back and replays writes it again. For targets whose
writes are idempotent (an upsert by key), when latency matters more than duplicates.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from providers import fence_epoch
from statefulbolts.components import BasicBolt, StatefulBolt
from statefulbolts.connectors.sinks._api import (
    Lane,
    PublishResult,
    Sink,
    SinkError,
    SinkFencedError,
    SinkStageError,
    StagedBatch,
)
from statefulbolts.connectors.sinks._columns import StagedColumns, concat_staged
from statefulbolts.connectors.sinks._metrics import SinkMetrics
from statefulbolts.connectors.sinks._staging import StagedKey, lane_anchor

if TYPE_CHECKING:
    from providers import KeyValueState
    from statefulbolts.collectors import (
        BasicOutputCollector,
        ColumnOutputCollector,
        OutputCollector,
    )
    from statefulbolts.context import TopologyContext
    from statefulbolts.tuples import ColumnBatch, Tuple

__all__ = ["AtLeastOnceSinkBolt", "ExactlyOnceSinkBolt", "staged_holdings"]

log = logging.getLogger(__name__)

DEFAULT_CHUNK_RECORDS = 1000


class _Kept(NamedTuple):
    """A lane's last PREPARE in this process: its chunks as stored, and their records."""

    txid: int
    stored: list[bytes]
    parts: list[Any]


# Lane -> what this process last staged for it (Python workers outlive their tasks): its
# COMMIT, most often on the same worker, publishes these instead of decoding the chunks again
# (``ExactlyOnceSinkBolt._kept_or_stored``). One transaction per lane, dropped once published;
# at most ``KEPT_LANES`` lanes, the oldest forgotten first (a lane whose COMMIT ran elsewhere,
# a topology that ended), so a worker shared by many topologies holds no more.
_kept: dict[Lane, _Kept] = {}
KEPT_LANES = 8


def _keep(lane: Lane, kept: _Kept) -> None:
    _kept.pop(lane, None)
    _kept[lane] = kept
    while len(_kept) > KEPT_LANES:
        del _kept[next(iter(_kept))]


def staged_holdings(
    items: Iterator[tuple[Any, Any]], below: int | None = None
) -> dict[str, dict[int, list[tuple[StagedKey, Any]]]]:
    """The staged chunks among a state's ``items``: lane -> txid -> ``(key, records)``, sorted.

    ``below``: only txids up to it.
    """
    found: dict[str, dict[int, list[tuple[StagedKey, Any]]]] = {}
    for raw, value in items:
        key = StagedKey.parse(raw)
        if key is None or (below is not None and key.txid > below):
            continue
        found.setdefault(key.lane, {}).setdefault(key.txid, []).append((key, value))
    for per_txid in found.values():
        for chunks in per_txid.values():
            chunks.sort(key=lambda kv: kv[0].chunk)
    return found


class ExactlyOnceSinkBolt(StatefulBolt):
    """Writes each tuple's record to ``sink`` once, when its transaction commits.

    See the module docstring for the steps. Declares no output. Its state holds only staged
    records: give the component the default serializers (keys are strings, values msgpack).

    Args:
        sink: the external system's ``Sink`` (``KafkaSink``, ...).
        chunk_records: records per stored chunk (one state entry), at most.

    Example:
        >>> from statefulbolts.connectors.kafka import KafkaSink
        >>> bolt = ExactlyOnceSinkBolt(KafkaSink("counts", key="word", value="count"))
        >>> builder.set_bolt("publish", bolt, 2).fields_grouping(  # doctest: +SKIP
        ...     "count", Fields("word"))
    """

    def __init__(self, sink: Sink, *, chunk_records: int = DEFAULT_CHUNK_RECORDS) -> None:
        if not isinstance(sink, Sink):
            msg = f"ExactlyOnceSinkBolt needs a Sink, got {type(sink).__qualname__}"
            raise TypeError(msg)
        if not sink.exactly_once:
            msg = (
                f"{sink.name} cannot publish exactly once ({type(sink).__qualname__}."
                "exactly_once is False); use AtLeastOnceSinkBolt"
            )
            raise TypeError(msg)
        if (
            isinstance(chunk_records, bool)
            or not isinstance(chunk_records, int)
            or chunk_records < 1
        ):
            msg = f"chunk_records must be an int of 1 or more, got {chunk_records!r}"
            raise ValueError(msg)
        self.sink = sink
        self.chunk_records = chunk_records

    def __repr__(self) -> str:
        return f"ExactlyOnceSinkBolt({self.sink.name})"

    def check_config(self, conf: Mapping[str, Any]) -> None:
        """The sink's ``check_config``: in the driver, before the topology starts."""
        self.sink.check_config(conf)

    # ---------------------------------------------------------------- the task's life
    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        """Open the sink; find this task's lane and anchor."""
        self._collector = collector
        self._who = f"sink {context.this_component_id!r} task {context.this_task_index}"
        spec = context.topology.component(context.this_component_id)
        parallelism = len(context.this_component_tasks)
        self._lane = Lane(
            context.topology_name, context.this_component_id, context.this_task_index, parallelism
        )
        self._anchor, self._arity = lane_anchor(spec, context.this_task_index, conf)
        self._epoch = fence_epoch(conf)
        # This transaction's records so far, in order: runs of rows, and StagedColumns.
        self._records: list[Any] = []
        self._segments: list[Sequence[Any]] = []
        self._state: KeyValueState | None = None
        # Whether this transaction asked the sink to get ready to publish (``Sink.warm``).
        self._warmed = False
        self._metrics = SinkMetrics.registered(context)
        self.sink.open(conf, context)

    def init_state(self, state: KeyValueState) -> None:
        """Keep the state: it holds the staged records."""
        self._state = state

    def cleanup(self) -> None:
        """Close the sink."""
        self.sink.close()

    def grouping_key(self, state_key: Any) -> Any:
        """A staged key's lane anchor (see ``_staging``): a rescale moves a lane whole."""
        key = StagedKey.parse(state_key)
        if key is None:
            msg = f"{state_key!r} is not a key ExactlyOnceSinkBolt stores"
            raise ValueError(msg)
        return key.grouping_value

    # ---------------------------------------------------------------- step 1: execute
    def execute(self, tuple: Tuple) -> None:  # noqa: A002 - Storm's parameter name
        """Keep the tuple's record for this transaction's PREPARE; ack the tuple."""
        record = self._staged(tuple)
        if record is not None:
            self._records.append(record)
            if not self._warmed:
                self._warm()
        self._collector.ack(tuple)

    def execute_batch(self, batch: ColumnBatch, collector: ColumnOutputCollector) -> None:
        """Keep the records of ``batch`` (``Sink.stage_batch``); the runtime acks them together.

        A batch the sink cannot stage runs again tuple by tuple through ``execute`` (the
        runtime does that), whose error names the tuple.
        """
        staged = self.sink.stage_batch(batch)
        if not staged:
            return
        if not self._warmed:
            self._warm()
        if isinstance(staged, StagedColumns):
            self._cut_rows()
            self._segments.append(staged)
        else:
            self._records += staged

    def _warm(self) -> None:
        """The first record of a transaction: the sink gets ready for its COMMIT meanwhile."""
        self._warmed = True
        self.sink.warm(self._lane)

    def _cut_rows(self) -> None:
        """End the run of rows kept so far (before columns, or at PREPARE)."""
        if self._records:
            self._segments.append(self._records)
            self._records = []

    def _staged(self, tuple_: Tuple) -> Any:
        try:
            return self.sink.stage(tuple_)
        except SinkError:
            raise
        except Exception as exc:
            msg = (
                f"{self._who}: {self.sink.name} could not stage tuple {list(tuple_.values)!r:.200} "
                f"from {tuple_.source_component!r}: {type(exc).__name__}: {exc}"
            )
            raise SinkStageError(msg) from exc

    # ---------------------------------------------------------------- step 2: PREPARE
    def pre_prepare(self, txid: int) -> None:
        """Clean what the markers cover, then stage this transaction's records under ``txid``."""
        state = self._ready()
        self._clean(state, txid)
        self._stage(state, txid)
        self._warmed = False

    def _clean(self, state: KeyValueState, txid: int) -> None:
        """Delete records of earlier transactions that their lane's marker covers.

        The keys say all it needs (lane and txid): no staged chunk is read for it.
        """
        keys = ((key, None) for key in state.iter_keys())
        for lane, per_txid in staged_holdings(keys, below=txid - 1).items():
            marker = self.sink.published(self._lane_of(lane))
            if marker is None:
                continue
            for staged_txid, chunks in per_txid.items():
                if staged_txid <= marker:
                    for key, _ in chunks:
                        state.delete(str(key))

    def _stage(self, state: KeyValueState, txid: int) -> None:
        self._cut_rows()
        segments, self._segments = self._segments, []
        size = self.chunk_records
        lane = self._lane.name
        chunk = staged = 0
        stored: list[Any] = []
        parts: list[Any] = []
        for records in segments:
            for start in range(0, len(records), size):
                key = StagedKey(self._anchor, self._arity, lane, txid, chunk)
                part = records[start : start + size]
                value = self._packed(part, txid) if isinstance(part, StagedColumns) else part
                state.put(str(key), value)
                stored.append(value)
                parts.append(part)
                chunk += 1
            staged += len(records)
        if parts and all(isinstance(v, bytes) for v in stored):
            _keep(self._lane, _Kept(txid, stored, parts))
        else:
            _kept.pop(self._lane, None)
        self._metrics.staged(staged)

    def _packed(self, part: StagedColumns, txid: int) -> bytes:
        try:
            return part.packed()
        except (TypeError, ValueError, OverflowError) as exc:
            msg = (
                f"{self._who}: {self.sink.name} staged a record of txid {txid} that the state "
                f"cannot store: {type(exc).__name__}: {exc}"
            )
            raise SinkStageError(msg) from exc

    # ---------------------------------------------------------------- step 3: COMMIT
    def pre_commit(self, txid: int) -> None:
        """Publish, lane by lane, every staged record above its marker, up to ``txid``."""
        state = self._ready()
        holdings = staged_holdings(iter(state), below=txid)
        if not holdings:
            return
        self._check_fence(state)
        for name in sorted(holdings):
            per_txid, lane = holdings[name], self._lane_of(name)
            batches = [
                StagedBatch(t, self._kept_or_stored(lane, t, [chunk for _, chunk in per_txid[t]]))
                for t in sorted(per_txid)
            ]
            self._publish(lane, txid, batches)
            _kept.pop(lane, None)

    @staticmethod
    def _kept_or_stored(lane: Lane, txid: int, stored: list[Any]) -> Sequence[Any]:
        """The records of a lane's chunks of ``txid``: kept from its PREPARE here, if the same.

        The chunks this process staged are used when the state holds exactly the bytes it
        stored for them (this worker's PREPARE is the one the driver applied); otherwise, or
        for chunks of rows, they are decoded from the state.
        """
        kept = _kept.get(lane)
        if (
            kept is not None
            and kept.txid == txid
            and len(kept.stored) == len(stored)
            and all(a == b for a, b in zip(stored, kept.stored, strict=True))
        ):
            return concat_staged(kept.parts)
        return concat_staged(stored)

    def _publish(self, lane: Lane, txid: int, batches: list[StagedBatch]) -> None:
        marker = self.sink.published(lane)
        due = [b for b in batches if marker is None or b.txid > marker]
        if not due:
            log.debug("%s: lane %s published up to txid %s already", self._who, lane.name, marker)
            self._metrics.replayed()
            return
        started = time.perf_counter()
        result: PublishResult = self.sink.publish(lane, txid, due, self._epoch)
        seconds = time.perf_counter() - started
        if result.published:
            self._metrics.published(result.records, seconds)
            log.debug(
                "%s: lane %s published txids %s (%s records) in %.3f s",
                self._who,
                lane.name,
                list(result.published),
                result.records,
                seconds,
            )
        else:
            self._metrics.replayed()

    def _check_fence(self, state: KeyValueState) -> None:
        """Refuse to publish for a driver whose lease a newer one took (step 4)."""
        mine = self._epoch
        if mine is None:
            return
        stored = state.stored_fence()
        if stored is not None and stored > mine:
            msg = (
                f"{self._who}: its state was written by a driver with lease epoch {stored}, "
                f"newer than this task's {mine}: this driver was taken over, and its tasks "
                "publish nothing"
            )
            raise SinkFencedError(msg)

    # ---------------------------------------------------------------- ROLLBACK
    def pre_rollback(self) -> None:
        """Drop the records kept for a transaction that will not commit."""
        self._records, self._segments = [], []
        self._warmed = False
        _kept.pop(self._lane, None)

    # ---------------------------------------------------------------- helpers
    def _ready(self) -> KeyValueState:
        if self._state is None:
            msg = f"{self._who}: a checkpoint step before init_state"
            raise SinkError(msg)
        return self._state

    def _lane_of(self, name: str) -> Lane:
        task, parallelism = Lane.parse_name(name)
        return self._lane._replace(task=task, parallelism=parallelism)


class AtLeastOnceSinkBolt(BasicBolt):
    """Writes each tuple's record at once (``Sink.write``): at least once, not exactly once.

    A record is visible before its transaction commits, and written again when a transaction
    rolls back and replays. For an idempotent target (records keyed so that a second write
    changes nothing) that wants the records as soon as they are made; ``ExactlyOnceSinkBolt``
    otherwise. A tuple is acked once its record is durable (``write`` returned); a failed write
    fails the task, and the transaction is tried again.

    Args:
        sink: a ``Sink`` that offers ``write``.
    """

    def __init__(self, sink: Sink) -> None:
        if not isinstance(sink, Sink):
            msg = f"AtLeastOnceSinkBolt needs a Sink, got {type(sink).__qualname__}"
            raise TypeError(msg)
        if type(sink).write is Sink.write:
            msg = f"{sink.name} has no at-least-once write(); use ExactlyOnceSinkBolt"
            raise TypeError(msg)
        self.sink = sink

    def __repr__(self) -> str:
        return f"AtLeastOnceSinkBolt({self.sink.name})"

    def check_config(self, conf: Mapping[str, Any]) -> None:
        """The sink's ``check_config``: in the driver, before the topology starts."""
        self.sink.check_config(conf)

    def prepare(self, conf: Mapping[str, Any], context: TopologyContext) -> None:
        """Open the sink."""
        self._who = f"sink {context.this_component_id!r} task {context.this_task_index}"
        self._metrics = SinkMetrics.registered(context)
        self.sink.open(conf, context)

    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:  # noqa: A002
        """Write the tuple's record; the tuple is acked when this returns."""
        try:
            record = self.sink.stage(tuple)
        except SinkError:
            raise
        except Exception as exc:
            msg = (
                f"{self._who}: {self.sink.name} could not make a record of tuple "
                f"{list(tuple.values)!r:.200}: {type(exc).__name__}: {exc}"
            )
            raise SinkStageError(msg) from exc
        if record is not None:
            self._write([record])

    def execute_batch(self, batch: ColumnBatch, collector: ColumnOutputCollector) -> None:
        """Write the records of a batch at once (``Sink.stage_batch``); then its tuples are acked.

        A batch the sink cannot stage runs again tuple by tuple through ``execute`` (the
        runtime does that), whose error names the tuple.
        """
        self._write(self.sink.stage_batch(batch))

    def _write(self, records: Sequence[Any]) -> None:
        if records:
            started = time.perf_counter()
            self.sink.write(records)
            self._metrics.published(len(records), time.perf_counter() - started)

    def cleanup(self) -> None:
        """Close the sink."""
        self.sink.close()
