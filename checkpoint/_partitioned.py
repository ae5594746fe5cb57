"""Partitioned spouts in the checkpoint protocol: read in the PREPARE job, positions committed.

A ``PartitionedSpout`` (``statefulbolts.partitioned``) is not run by the driver: its tasks are
the first stage of every PREPARE job. The protocol, for PREPARE(t):

1. **Assign** (driver, ``PartitionedSpouts.orders``): list each spout's partitions, sort them,
   give partition ``i`` to task ``i % parallelism`` (``assign``), each at its committed
   position and, for a spout that defines ``ends``, with its end now: every Spark attempt of
   the task then reads the same records, however much the source grew in between. Reserve a
   block of root ids per task (``topology.max.spout.pending`` of them): the task's tuples are
   roots ``first_root, first_root + 1, ...``, tracked as a driver spout's are, without the
   driver making each one.
2. **Read** (task, ``PartitionReadTask``): read the task's partitions, the record budget shared
   out in turn, emit each record as a tuple of the spout's stream, and return the end
   positions (``ReadResult``) in the task's report, with any gap a reader jumped (records its
   source no longer held: ``PartitionReader.gap``).
3. **Judge** (driver, ``finished``): the PREPARE's reads count only if every tuple they emitted
   was acked and none failed: a tuple of a partitioned spout has no message to replay alone,
   so a failed or incomplete one fails the transaction, which is read again from the same
   start positions (and stops the topology after ``topology.max.transaction.retries``).
4. **Save** (driver, ``save``): before COMMITTING(t) is saved, put the positions every
   partition will start t + 1 from (t's end positions over the committed ones: a partition
   t did not read keeps its own) under ``POSITIONS_KEY`` in the checkpoint spout's state: the
   commit that saves COMMITTING(t) saves them too (as ``_manifest`` does with message ids).
   Once that commit is done (``saved``) they are the start of the next transaction, the
   tuples t read count as acked (``acked``: the transaction that carried them will commit),
   and each spout is told them (``PartitionedSpout.committed``: Kafka commits them to its
   consumer group, for monitoring tools only).

Every transaction that reaches COMMITTING commits (the recovery rolls it forward), so the saved
positions are always where the next new transaction starts: a restarted driver reads them
(``recover``) whatever phase it finds. A failed PREPARE(t) saves nothing: its replay starts
from the same positions and reads the same records. Positions are per partition, so a restart
with another spout parallelism only assigns them differently.

The stored form, plain values any provider can serialize::

    {"txid": t, "spouts": {component: {partition: position, ...}, ...}}
"""

from __future__ import annotations

import logging
import reprlib
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from statefulbolts.errors import CheckpointError, StatefulBoltsError, TopologyError
from statefulbolts.partitioned import DEFAULT_MAX_RECORDS, Gap, PartitionedSpout

if TYPE_CHECKING:  # the task side runs in Spark workers: importing it loads no engine
    from providers import KeyValueState
    from statefulbolts.context import TopologyContext
    from statefulbolts.runtime import ExecutionPlan, JobResult
    from statefulbolts.topology import ComponentSpec, StormTopology
    from statefulbolts.tuples import Tuple

__all__ = [
    "POSITIONS_KEY",
    "PartitionReadTask",
    "PartitionedSpouts",
    "ReadResult",
    "TaskReads",
    "assign",
]

log = logging.getLogger(__name__)

POSITIONS_KEY = "__positions"

# Positions per spout component: component -> partition -> position.
Positions = dict[str, dict[str, Any]]


def assign(partitions: Sequence[str], parallelism: int) -> list[list[str]]:
    """Each task's partitions: sorted, partition ``i`` to task ``i % parallelism``.

    Example:
        >>> assign(["c", "a", "d", "b", "e"], 2)
        [['a', 'c', 'e'], ['b', 'd']]
    """
    tasks: list[list[str]] = [[] for _ in range(parallelism)]
    for i, partition in enumerate(sorted(partitions)):
        tasks[i % parallelism].append(partition)
    return tasks


class TaskReads(NamedTuple):
    """What one spout task reads in one PREPARE (shipped in the job's program).

    ``spout`` goes with the order: the tasks load the topology without spout objects.
    """

    spout: PartitionedSpout
    starts: tuple[tuple[str, Any], ...]  # (partition, start position), in partition order
    first_root: int
    max_records: int
    ends: Mapping[str, Any] | None = None  # the spout's ``ends`` of these partitions, if any


class ReadResult(NamedTuple):
    """What one spout task read: how many records, each partition's end position, any gaps."""

    read: int
    positions: dict[str, Any]
    gaps: tuple[tuple[str, Gap], ...] = ()  # (partition, the jump its reader made)


def _no_data(tuple_: Tuple) -> None:
    msg = f"a partitioned spout task got a tuple ({tuple_!r}); it has no input"
    raise TopologyError(msg)


class PartitionReadTask:
    """A partitioned spout's task in a PREPARE job: step 2 of the module docstring."""

    def __init__(self, spec: ComponentSpec, reads: TaskReads) -> None:
        self.spec, self.reads = spec, reads
        self._conf: Mapping[str, Any] = {}
        self._context: TopologyContext | None = None
        self._out: Any = None

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: Any
    ) -> Callable[[Tuple], None]:
        """Keep what ``finish`` reads with; the task takes no data."""
        self._conf, self._context, self._out = conf, context, collector
        return _no_data

    def control(self, tuple_: Tuple) -> None:
        """No control tuple reaches a spout task."""

    def finish(self) -> ReadResult:
        """Read each partition in turn, emit its records, return the end positions.

        A partition gets an even share of what the budget has left (rounded up), so one full
        partition cannot starve the others, and a short one leaves its share to the next.
        """
        reads, spout, emit_run = self.reads, self.reads.spout, self._out.emit_run
        budget, root, left = reads.max_records, reads.first_root, len(reads.starts)
        positions: dict[str, Any] = {}
        gaps: list[tuple[str, Gap]] = []
        for partition, start in reads.starts:
            share = -(-budget // left) if budget > 0 else 0
            left -= 1
            if share == 0:
                positions[partition] = start
                continue
            batch, gap = self._read(spout, partition, start, share)
            if gap is not None:
                gaps.append((partition, gap))
            records = batch.records
            emit_run(records, batch.stream, root)  # roots root, root + 1, ...: one per record
            root += len(records)
            budget -= len(records)
            positions[partition] = batch.position
        return ReadResult(root - reads.first_root, positions, tuple(gaps))

    def _read(
        self, spout: PartitionedSpout, partition: str, start: Any, share: int
    ) -> tuple[Any, Gap | None]:
        context, ends = self._context, self.reads.ends
        assert context is not None  # noqa: S101 - prepare ran
        if ends is None:
            reader = spout.open_reader(self._conf, context, partition, start)
        else:  # ``end`` is in the signature of the spouts that define ``ends`` only
            bounded: Any = spout.open_reader
            reader = bounded(self._conf, context, partition, start, end=ends.get(partition))
        try:
            batch = reader.read(share)
            gap = reader.gap()
        finally:
            reader.close()
        if len(batch.records) > share:
            kind = f"{type(spout).__module__}.{type(spout).__qualname__}"
            msg = (
                f"spout {self.spec.id!r} task {context.this_task_index}: {kind} returned "
                f"{len(batch.records)} records of partition {partition!r}, asked for at most "
                f"{share}; a reader returns up to max_records records"
            )
            raise TopologyError(msg)
        return batch, gap

    def cleanup(self) -> None:
        """Nothing to release: each reader closed after its read."""


class _TaskRoots(NamedTuple):
    """One spout task's root block in one PREPARE: its first root and how many it emitted."""

    component: str
    task: int
    first_root: int


class PartitionedSpouts:
    """The driver's half for every partitioned spout of a topology (see the module docstring).

    Args:
        topology: the topology; its ``PartitionedSpout`` components are the ones handled.
        plan: its execution plan.
        conf: the topology config, given to ``partitions`` and ``has_more``.
        max_records: records per spout task per transaction (``None``: the default).
    """

    def __init__(
        self,
        topology: StormTopology,
        plan: ExecutionPlan,
        conf: Mapping[str, Any],
        max_records: int | None,
    ) -> None:
        self._conf = conf
        self._spouts: dict[str, tuple[PartitionedSpout, int]] = {
            cid: (spec.obj, spec.parallelism)
            for cid, spec in sorted(topology.spouts.items())
            if isinstance(spec.obj, PartitionedSpout)
        }
        self._plan = plan
        self.components: tuple[str, ...] = tuple(self._spouts)
        self.indexes: tuple[int, ...] = tuple(plan.index[cid] for cid in self._spouts)
        self.max_records = max_records or DEFAULT_MAX_RECORDS
        self._positions: Positions = {cid: {} for cid in self._spouts}  # where t + 1 starts
        self._given: dict[int, list[_TaskRoots]] = {}  # per PREPARE txid: the tasks' roots
        self._ended: dict[int, Positions] = {}  # per PREPARE that succeeded: its end positions
        self._saving: tuple[int, Positions] | None = None
        self.emitted: dict[str, int] = dict.fromkeys(self._spouts, 0)
        # Per spout: its tuples whose transaction committed (Storm's spout acks: a partitioned
        # spout's tuples are acked all at once, by the commit that saves their positions).
        self.acked: dict[str, int] = dict.fromkeys(self._spouts, 0)
        self._read: dict[int, int] = {}  # per PREPARE txid: the tuples its spout tasks read
        self._counted: dict[int, dict[str, int]] = {}  # per PREPARE that counted, per spout
        # Per spout: the gaps its readers jumped in PREPAREs that counted (records gone).
        self.gaps: dict[str, int] = dict.fromkeys(self._spouts, 0)

    def __bool__(self) -> bool:
        """Whether the topology has a partitioned spout."""
        return bool(self._spouts)

    @property
    def positions(self) -> Positions:
        """Where each partition's next new transaction starts (a copy)."""
        return {cid: dict(parts) for cid, parts in self._positions.items()}

    # ---------------------------------------------------------------- opening
    def recover(self, state: KeyValueState) -> None:
        """Start from the positions saved in the checkpoint spout's ``state`` (if any).

        Raises:
            CheckpointError: what is saved is not in the form ``save`` writes.
        """
        saved = state.get(POSITIONS_KEY)
        if saved is None:
            return
        spouts = saved.get("spouts") if isinstance(saved, dict) else None
        if not isinstance(spouts, dict) or not all(
            isinstance(c, str) and isinstance(p, dict) for c, p in spouts.items()
        ):
            msg = (
                f"saved partition positions {POSITIONS_KEY!r} are {reprlib.repr(saved)}, not "
                '{"txid": <int>, "spouts": {component: {partition: position}}}'
            )
            raise CheckpointError(msg)
        for cid in self._spouts:  # a spout no longer in the topology is left out
            self._positions[cid] = dict(spouts.get(cid, {}))

    # ---------------------------------------------------------------- before a PREPARE
    def _partitions(self, cid: str, spout: PartitionedSpout) -> list[str]:
        try:
            found = list(spout.partitions(self._conf))
        except StatefulBoltsError:
            raise  # names the source, the cause and the fix already (a backend error, typed)
        except Exception as exc:
            msg = f"spout {cid!r}: {_kind(spout)}.partitions raised: {exc}"
            raise TopologyError(msg) from exc
        if not all(isinstance(p, str) for p in found) or len(set(found)) != len(found):
            msg = (
                f"spout {cid!r}: {_kind(spout)}.partitions returned {reprlib.repr(found)}; "
                "expected distinct partition ids (strings)"
            )
            raise TopologyError(msg)
        return found

    def _ends(
        self, cid: str, spout: PartitionedSpout, found: list[str]
    ) -> Mapping[str, Any] | None:
        try:
            ends = spout.ends(self._conf, found)
        except StatefulBoltsError:
            raise  # names the source, the cause and the fix already (a backend error, typed)
        except Exception as exc:
            msg = f"spout {cid!r}: {_kind(spout)}.ends raised: {exc}"
            raise TopologyError(msg) from exc
        if ends is not None and not isinstance(ends, Mapping):
            msg = (
                f"spout {cid!r}: {_kind(spout)}.ends returned {reprlib.repr(ends)}; expected "
                "None or a mapping of partition id to its end"
            )
            raise TopologyError(msg)
        return ends

    def has_more(self) -> bool:
        """Whether any partition of any partitioned spout may hold records to read."""
        for cid, (spout, _) in self._spouts.items():
            committed = self._positions[cid]
            for partition in self._partitions(cid, spout):
                if spout.has_more(self._conf, partition, committed.get(partition)):
                    return True
        return False

    def orders(self, txid: int, reserve: Callable[[int], int]) -> dict[tuple[str, int], TaskReads]:
        """Step 1: what each spout task reads in PREPARE(``txid``), by (component, task).

        ``reserve(n)`` hands out ``n`` consecutive root ids and returns the first.
        """
        given: list[_TaskRoots] = []
        out: dict[tuple[str, int], TaskReads] = {}
        for cid, (spout, parallelism) in self._spouts.items():
            committed = self._positions[cid]
            found = self._partitions(cid, spout)
            ends = self._ends(cid, spout, found)
            for task, mine in enumerate(assign(found, parallelism)):
                first = reserve(self.max_records)
                starts = tuple((p, committed.get(p)) for p in mine)
                bounds = None if ends is None else {p: ends.get(p) for p in mine}
                out[(cid, task)] = TaskReads(spout, starts, first, self.max_records, bounds)
                given.append(_TaskRoots(cid, task, first))
        self._given[txid] = given
        return out

    # ---------------------------------------------------------------- after a PREPARE
    def finished(self, txid: int, result: JobResult) -> str | None:
        """Step 3: take PREPARE(``txid``)'s end positions; ``None``, or why they do not count.

        Raises:
            CheckpointError: a spout task of the job sent no read result.
        """
        given = self._given.pop(txid, [])
        names = self._plan.component_ids
        read: dict[tuple[str, int], ReadResult] = {}
        for report in result.reports:
            if isinstance(report.result, ReadResult):
                read[(names[report.comp], report.task)] = report.result
        blocks: list[tuple[int, int, str]] = []
        ended: Positions = {cid: {} for cid in self._spouts}
        gaps: list[tuple[str, str, Gap]] = []
        for roots in given:
            got = read.get((roots.component, roots.task))
            if got is None:
                msg = (
                    f"PREPARE({txid}): spout {roots.component!r} task {roots.task} sent no "
                    "read result; the job ran without its partitioned spout task"
                )
                raise CheckpointError(msg)
            blocks.append((roots.first_root, roots.first_root + got.read, roots.component))
            ended[roots.component].update(got.positions)
            gaps += [(roots.component, partition, gap) for partition, gap in got.gaps]
        self._read[txid] = sum(end - first for first, end, _ in blocks)
        for root in [*result.fails, *(r for r, x in result.acks.items() if x)]:
            for first, end, cid in blocks:
                if first <= root < end:
                    state = "failed" if root in result.fails else "was not acked"
                    return (
                        f"a tuple of partitioned spout {cid!r} {state} in PREPARE({txid}); "
                        "the transaction is read again from the same positions"
                    )
        self._ended[txid] = ended
        counted = self._counted[txid] = dict.fromkeys(self._spouts, 0)
        for first, end, cid in blocks:
            self.emitted[cid] += end - first
            counted[cid] += end - first
        for cid, partition, gap in gaps:
            self.gaps[cid] += 1
            log.warning(
                "spout %r partition %r: %s; PREPARE(%s) read on from %r instead of %r",
                cid,
                partition,
                gap.reason,
                txid,
                gap.resumed,
                gap.start,
            )
        return None

    def read_in(self, txid: int) -> int:
        """The tuples PREPARE(``txid``)'s spout tasks read, as ``finished`` took them (0: none).

        For the transaction's figures: they are its tuples, acked once it commits.
        """
        return self._read.pop(txid, 0)

    def failed(self, txid: int) -> None:
        """PREPARE(``txid``)'s job failed: what it was given is void."""
        self._given.pop(txid, None)
        self._ended.pop(txid, None)
        self._read.pop(txid, None)
        self._counted.pop(txid, None)

    # ---------------------------------------------------------------- the commit decision
    def save(self, txid: int, state: KeyValueState) -> None:
        """Step 4: put where t + 1 starts in ``state``; the caller commits it with COMMITTING.

        Idempotent: a COMMITTING(t) saved again after a backend outage puts the same value.
        """
        ended = self._ended.get(txid, {})
        merged = {cid: {**parts, **ended.get(cid, {})} for cid, parts in self._positions.items()}
        state.put(POSITIONS_KEY, {"txid": txid, "spouts": merged})
        self._saving = (txid, merged)

    def saved(self, txid: int) -> None:
        """COMMITTING(``txid``) is saved: its positions are where the next transaction starts."""
        saving = self._saving
        if saving is None or saving[0] != txid:
            return
        self._positions, self._saving = saving[1], None
        for t in [t for t in self._ended if t <= txid]:
            del self._ended[t]
        for t in [t for t in self._counted if t <= txid]:
            for cid, n in self._counted.pop(t).items():
                self.acked[cid] += n
        for cid, (spout, _) in self._spouts.items():
            try:
                spout.committed(self._conf, dict(self._positions[cid]))
            except Exception as exc:  # noqa: BLE001 - a monitoring record never stops the topology
                log.warning("spout %r: %s.committed raised: %s", cid, _kind(spout), exc)

    def lags(self) -> dict[str, dict[str, int]]:
        """Per spout, per partition, the records after its committed position (if it knows).

        Safe from another thread: each spout answers from what it already knows.
        """
        out: dict[str, dict[str, int]] = {}
        positions = self._positions
        for cid, (spout, _) in self._spouts.items():
            found = spout.lags(dict(positions.get(cid, {})))
            if found is not None:
                out[cid] = {p: int(n) for p, n in sorted(found.items())}
        return out


def _kind(obj: object) -> str:
    return f"{type(obj).__module__}.{type(obj).__qualname__}"
