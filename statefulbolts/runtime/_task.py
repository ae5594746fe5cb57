"""What one Spark task runs: one task of one component, for one job.

A task is, in Storm's words, a worker that (re)starts: it loads the shipped topology, asks the
job's protocol (``TaskProgram``) for an executor of its component, prepares it, feeds it the
job's tuples in a deterministic order (per source task in emit order, sources sorted; tuples of
control streams after all data), lets the executor finish, and returns what it emitted (sealed:
each values column pickled here, once, ``_sealing``; a value that does not pickle is the error
of the tuple that emitted it) plus side records: XOR acks pre-combined per root, fails, and
one ``TaskReport`` (metrics, reported errors, the changes a driver-owned provider's states made,
the executor's result).
Deterministic order and ids mean a Spark retry of the task reproduces the same output.

The protocol decides what a task does around its tuples (the checkpoint protocol: restore the
state, supersede a lost attempt's prepare, release held acks; the transactional protocol: a
fresh batch bolt per attempt, ``finish_batch``); this module decides nothing of a protocol. It
only runs the executor's steps in order, fast.

No pyspark here: this module runs inside Spark's Python workers but is plain Python.
"""

from __future__ import annotations

import gc
import itertools
import pickle
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import CodeType
from typing import Any, NamedTuple

from statefulbolts.components import BasicRows
from statefulbolts.context import TopologyContext
from statefulbolts.errors import UnshippableValueError
from statefulbolts.namespaces import TaskNamespace, topology_prefix, window_namespace
from statefulbolts.runtime._collector import TaskCollector
from statefulbolts.runtime._columns import feed_columns
from statefulbolts.runtime._held_images import finish_images, install_images
from statefulbolts.runtime._images import ShippedImage
from statefulbolts.runtime._local_files import spill_changes
from statefulbolts.runtime._program import TaskInfo, TaskJob
from statefulbolts.runtime._records import (
    Aborted,
    AckLedger,
    Fails,
    TaskMetrics,
    TaskReport,
    TupleBatch,
)
from statefulbolts.runtime._rows import RowAcks, fast, feed_basic, feed_lead, feed_rows
from statefulbolts.runtime._sealing import unshippable_error
from statefulbolts.runtime._spark import task_attempt
from statefulbolts.runtime._task_errors import FailingTuple, encode_task_error
from statefulbolts.runtime._worker import YoungGarbage, broadcast_value, freeze_long_lived
from statefulbolts.topology import ComponentSpec, StormTopology
from statefulbolts.tuples import ColumnBatch, Fields, Tuple

__all__ = ["run_stages", "run_task"]


# Tuples per chunk of the hot loop.
_CHUNK = 1 << 15


def _load_topology(blob: Any) -> StormTopology:
    data = broadcast_value(blob) if hasattr(blob, "value") else blob
    topology = pickle.loads(data)  # noqa: S301 - our own cloudpickled topology
    assert isinstance(topology, StormTopology)  # noqa: S101
    return topology


class _Input(NamedTuple):
    """A task's input, sorted: its own data and control batches, what it carries on."""

    data: list[TupleBatch]
    control: list[TupleBatch]
    carry: list[TupleBatch]
    acks: dict[int, int]
    fails: list[int]
    reports: list[TaskReport]
    aborted: list[Aborted]


def _sort_input(job: TaskJob, comp: int, task: int, items: Iterable[Any]) -> _Input:
    plan, program = job.plan, job.program
    into = _Input([], [], [], {}, [], [], [])
    acks = into.acks
    for _key, records in items:
        for r in records:
            kind = type(r)
            if kind is TupleBatch:
                if r.dest != comp or r.dest_task != task:
                    into.carry.append(r)  # sealed as it came: it is only passed on
                elif program.is_control(plan.streams[r.src][r.stream]):
                    into.control.append(r.unsealed())
                else:
                    into.data.append(r.unsealed())
            elif kind is AckLedger:
                for root, x in r.acks.items():
                    acks[root] = acks.get(root, 0) ^ x
            elif kind is Fails:
                into.fails.extend(r.roots)
            elif kind is Aborted:
                into.aborted.append(r)
            else:
                into.reports.append(r)
    # A deterministic delivery order: by (source component, source task, stream).
    into.data.sort(key=lambda b: (b.src, b.src_task, b.stream))
    into.control.sort(key=lambda b: (b.src, b.src_task, b.stream))
    return into


def run_task(
    job: TaskJob,
    topology_blob: Any,
    stage: int,
    slot: int,
    items: Iterable[Any],
    *,
    in_worker: bool = True,
) -> list[tuple[int, list[Any]]]:
    """Run the task in ``slot`` of ``stage`` over its records; return its keyed output.

    ``in_worker`` False: the task runs in the driver (``_inline``), whose heap is not frozen.
    """
    return run_stages(job, topology_blob, (stage,), slot, items, in_worker=in_worker)


def run_stages(
    job: TaskJob,
    topology_blob: Any,
    stages: Sequence[int],
    slot: int,
    items: Iterable[Any],
    *,
    in_worker: bool = True,
) -> list[tuple[int, list[Any]]]:
    """Run the tasks in ``slot`` of ``stages``, one after the other; return the last one's output.

    ``stages`` follow one another across narrow boundaries (``ExecutionPlan.layout``): each
    takes the output of the one before, as Spark pipelines them in one Python task, and what
    goes from one to the next travels unpickled.

    The garbage collector is off from the first task's start until the last one's output is
    made. Every task emits into lists it holds until its output is made (a list per tuple of a
    stream of two or more fields), and a task's output to the next of ``stages`` carries them
    on: turned on while they were alive, its next automatic collection walked every one, to
    find nothing (about 50 ms for a counting task's 500,000 ``[word, count]`` lists, in either
    bolt form). Each task frees them (``TaskCollector.release``) once they are pickled for a
    shuffle, or once the next task here has executed them.
    """
    was_on = gc.isenabled()
    gc.disable()
    try:
        out: list[tuple[int, list[Any]]] = []
        fed: Iterable[Any] = items
        for stage in stages:
            out = list(_run(job, topology_blob, stage, slot, fed, in_worker))
            fed = out
        return out
    finally:
        if was_on:
            gc.enable()


def _run(
    job: TaskJob,
    topology_blob: Any,
    stage: int,
    slot: int,
    items: Iterable[Any],
    in_worker: bool,
) -> Iterator[tuple[int, list[Any]]]:
    """``run_task``'s work, with the collector off (``run_stages``)."""
    started = time.perf_counter()
    if in_worker:
        freeze_long_lived()
    comp, task = job.layout.stages[stage][slot]
    final = stage == job.layout.depth - 1
    n_next = max(job.ackers, 1) if final else len(job.layout.stages[stage + 1])
    into = _sort_input(job, comp, task, items)
    if into.aborted:  # a task before this one failed by its protocol: do nothing of the batch
        report = TaskReport(comp, task, TaskMetrics(0, 0, 0, 0, 0.0), attempt=task_attempt())
        return _aborted(into, report, stage, slot, final, n_next, job)
    topology = _load_topology(topology_blob)
    spec = topology.component(job.plan.component_ids[comp])
    context = TopologyContext(topology, job.topology_name, spec.id, task)
    pipelined = job.layout.pipelined(stage)
    collector = TaskCollector(
        job.plan, comp, task, job.txid, spec.id, job.program.data_free, pipelined
    )
    failing: list[Tuple] = []  # the data tuple being executed when the task raised
    try:
        roots = _begin_state(job, spec, task)
        set_up = time.perf_counter()
        executed, result = _execute(job, spec, context, collector, into, failing)
        executed_at = time.perf_counter()
        if job.program.tracking:
            # Usually every tuple was acked once, and the ledger has nothing to report.
            left, exact = collector.ledger.settle()
        else:
            left, exact = {}, True
        acked = executed if exact else collector.ledger.settled + _held(job, collector)
        unsealed = collector.seal()  # what the protocol's finish and control tuples emitted
        if unsealed is not None:
            raise unshippable_error(
                job.plan, comp, task, collector.batches, unsealed.key, unsealed.error, (), None
            )
    except Exception as exc:
        failed = job.program.failure(exc)
        if failed is None:
            if isinstance(exc, UnshippableValueError):
                culprit = exc.failing  # named where the value was found (``_sealing``)
            else:
                culprit = _failing_tuple(job, task, failing)
            raise encode_task_error(exc, spec.id, task, job.txid, spec.user_class, culprit) from exc
        seconds = time.perf_counter() - started
        metrics = TaskMetrics(0, 0, 0, 0, seconds)
        errors = tuple(collector.errors)
        report = TaskReport(comp, task, metrics, errors, (), failed, task_attempt())
        into.aborted.append(Aborted(comp, task))
        return _aborted(into, report, stage, slot, final, n_next, job)
    finally:
        # Free the task's tuples at once: the collector is off (``run_stages``), and its
        # first collection once on would walk every one still held.
        collector.ledger.forget()
    changes = _end_state(job, roots)
    seconds = time.perf_counter() - started
    metrics = TaskMetrics(
        executed,
        collector.emitted,
        acked,
        collector.failed,
        seconds,
        set_up - started,
        executed_at - set_up,
    )
    errors = tuple(collector.errors)
    report = TaskReport(
        comp, task, metrics, errors, changes, result, task_attempt(), context.take_metric_values()
    )
    return _output(job, collector, into, left, report, stage, slot, final, n_next)


def _failing_tuple(job: TaskJob, task: int, failing: list[Tuple]) -> FailingTuple | None:
    """The facts of the data tuple the task executed last (``None``: it executed none)."""
    if not failing:
        return None
    tuple_, plan = failing[-1], job.plan
    comp = plan.index.get(tuple_.source_component)
    ids = plan.task_ids[comp] if comp is not None else ()
    index = ids.index(tuple_.source_task) if tuple_.source_task in ids else None
    return FailingTuple.of(tuple_, task, len(job.lead), index)


def _aborted(
    into: _Input,
    report: TaskReport,
    stage: int,
    slot: int,
    final: bool,
    n_next: int,
    job: TaskJob,
) -> Iterator[tuple[int, list[Any]]]:
    """A task that does nothing: the abort to every next slot, its report and side records home.

    What it was to carry is dropped: the job's outcome is a failure, and nobody reads it.
    """
    home = slot % n_next
    out: dict[int, list[Any]] = {home: [*into.reports, report]}
    abort = into.aborted[-1]
    if final:
        out[home].append(abort)
    else:
        for k in range(n_next):
            out.setdefault(k, []).append(abort)
    if into.fails:
        out[home].append(Fails(into.fails))
    if into.acks:
        out[home].append(AckLedger(into.acks))
    yield from out.items()


def _held(job: TaskJob, collector: TaskCollector) -> int:
    """Data tuples acked and not yet settled (control tuples are not counted as acked)."""
    is_control = job.program.is_control
    ledger = collector.ledger
    held = sum(1 for t in ledger.acked if not is_control(t.source_stream_id))
    return held + ledger.acked_in_runs  # batches acked whole are data


def _begin_state(job: TaskJob, spec: ComponentSpec, task: int) -> tuple[str, ...]:
    """Hand a driver-owned provider the state shipped for this task; return the task's roots.

    A task's state is its namespace and, for a windowed bolt, its windows' namespace
    (``statefulbolts.namespaces.window_namespace``), a framework record beside it: each is a
    root whose shipped images are installed and whose changes go back to the driver. A
    shipped image may be a descriptor: this worker's kept copy is then used, caught up, or
    replaced by the snapshot (``_held_images``).
    """
    if job.images is None:
        return ()
    from providers import DriverOwnedStateProvider, get_provider

    ns = TaskNamespace(topology_prefix(job.state_root or job.topology_name), spec.id, task)
    provider = get_provider(job.conf)
    assert isinstance(provider, DriverOwnedStateProvider)  # noqa: S101 - the driver checked
    roots = (str(ns), window_namespace(ns))
    for root in roots:
        install_images(provider, root, _shipped(job, root))
    return roots


def _end_state(job: TaskJob, roots: Sequence[str]) -> tuple[tuple[str, bytes], ...]:
    """What the task's states did to the shipped (or new) state under its roots."""
    if not roots:
        return ()
    from providers import DriverOwnedStateProvider, get_provider

    provider = get_provider(job.conf)
    assert isinstance(provider, DriverOwnedStateProvider)  # noqa: S101
    changes: dict[str, bytes] = {}
    for root in roots:
        shipped = _shipped(job, root)
        taken = provider.end_task(root, list(shipped))
        finish_images(provider, shipped, taken)
        changes.update(taken)
    return spill_changes(sorted(changes.items()), job.spill)


def _shipped(job: TaskJob, root: str) -> dict[str, bytes | ShippedImage]:
    from providers import under

    return {ns: image for ns, image in (job.images or {}).items() if under(ns, root)}


def _execute(
    job: TaskJob,
    spec: ComponentSpec,
    context: TopologyContext,
    collector: TaskCollector,
    into: _Input,
    failing: list[Tuple],
) -> tuple[int, Any]:
    """Prepare the executor, feed it every tuple, finish it: ``(data tuples executed, result)``.

    When executing a data tuple raises, that tuple is appended to ``failing`` before the
    exception goes on (``_raised_executing``): the driver learns which tuple it was. When the
    data tuples are executed, what they emitted is sealed (``TaskCollector.seal``); a value that
    does not pickle raises ``UnshippableValueError`` naming the tuple that emitted it
    (``_sealing.unshippable_error``, which may execute tuples of its tree again to find it).

    The hot loops of the runtime, one per way a bolt takes its single-tree data batches:

    - a bolt that takes column batches (``BasicBolt.execute_batch`` or
      ``StatefulBolt.execute_batch``, offered by the protocol's executor as ``batch_target``):
      ``_columns.feed_columns``, no ``Tuple``, call or ack per value;
    - a per-tuple bolt whose executor says where its acks go (``row_acks``) or takes its
      ``BasicBolt``'s step apart (``basic_rows``): ``_rows.feed_rows`` / ``feed_basic``, one
      reused ``Tuple`` and acks settled as runs; a transactional job's bolts (their tuples
      lead with the attempt): ``_rows.feed_lead``, one reused ``Tuple``;
    - anything else, and every per-tuple bolt of a job that asks for it (``_rows.fast``): the
      reference loop, ``_feed``, which builds a ``Tuple`` per value and calls the executor's
      data target, and nothing else.

    Tuples are built slot by slot (no call into ``Tuple.__init__``: 40% cheaper), in chunks,
    so that a young-garbage check runs between chunks of a long batch. With GC off: the tuples
    a stateful bolt holds until the checkpoint are all alive, and every full collection walked
    all of them again (it was half the time of a counting task); young garbage is still
    collected between chunks. (``run_stages`` turns the collector off around this.)
    """
    plan = job.plan
    info = TaskInfo(spec.id, context.this_task_index, job.txid, task_attempt())
    executor = job.program.executor(spec, info)
    collect_young = YoungGarbage(collector.held_rows)
    target = executor.prepare(job.conf, context, collector)
    # The fault listener's target: the executor's own, unless a fault may fire in this task.
    execute = job.faults.tuple_target(target, spec.id, info.task, job.txid, info.attempt)
    before_data = getattr(executor, "before_data", None)  # a protocol's optional step
    if before_data is not None:
        before_data(plan, into.data)
    executed = _system_tuples(executor, target, collector)
    # A protocol's optional sink, told each tuple's root before it is executed (a transactional
    # batch bolt's collector: what the bolt emits then carries that root as its lineage).
    sink = getattr(executor, "lineage_sink", None)
    fields, comp_ids, streams, widths = plan.fields, plan.component_ids, plan.streams, plan.widths
    task_ids = plan.task_ids
    deliver, compact = collector.ledger.deliver, collector.ledger.compact
    lead = job.lead
    plain = execute is target and not lead and sink is None
    columns = _batch_target(executor, plain)
    rows = fast(job.conf)
    basic, acks = _row_targets(executor, plain and rows)
    # A transactional job's tuples (they lead with the attempt): one reused Tuple too.
    leading = rows and execute is target and len(lead) == 1
    told = _NOWHERE if sink is None else sink

    def chunked() -> None:
        compact()  # the acks of the chunk before, if in order (a BasicBolt's are)
        collect_young()

    def by_tuple(
        rows: Sequence[Any],
        rooted: Sequence[int],
        at: int,
        single: bool,
        source: tuple[Fields, str, int, str],
    ) -> None:
        """The per-tuple path over rows a batch bolt raised on (``feed_columns``)."""
        _feed(execute, rows, rooted, at, single, source, lead, chunked, failing)

    delivered: list[tuple[TupleBatch, int]] = []  # each data batch, with its first number
    for b in into.data:
        src, s = b.src, b.stream
        f, cid, tid, sid = fields[src][s], comp_ids[src], task_ids[src][b.src_task], streams[src][s]
        values, roots, more = b.values, b.roots, b.more
        single = widths[src][s] == 1
        first = deliver(roots, more)  # each tuple's number: first, first + 1, ...
        delivered.append((b, first))
        n = len(values)
        if more is None:
            source = (f, cid, tid, sid)
            if columns is not None:
                feed_columns(columns, values, roots, first, single, source, chunked, by_tuple)
            elif basic is not None:
                feed_basic(basic, values, roots, first, single, source, chunked, failing)
            elif acks is not None:
                feed_rows(target, acks, values, roots, first, single, source, chunked, failing)
            elif leading:
                feed_lead(
                    target, lead[0], told, values, roots, first, single, source, chunked, failing
                )
            else:
                _feed(execute, values, roots, first, single, source, lead, chunked, failing, sink)
            executed += n
            continue
        t: Tuple | None = None
        try:
            for i, (vals, root) in enumerate(zip(values, roots, strict=True)):
                if i % _CHUNK == 0:
                    chunked()
                full = [*lead, vals] if single else [*lead, *vals]
                t = Tuple(full, f, cid, tid, sid, (), root, first + i)
                if more is not None and i in more:
                    t._more = tuple((extra, first + i) for extra in more[i])
                if sink is not None:
                    sink.lineage = root
                execute(t)
                executed += 1
        except Exception as exc:
            if t is not None and _raised_executing(exc, chunked.__code__, _TUPLE_INIT):
                failing.append(t)
            raise

    def again(b: TupleBatch, first: int, i: int) -> None:
        """Execute the ``i``-th tuple of ``b`` again, as the loops above executed it."""
        src, s, vals, root = b.src, b.stream, b.column()[i], b.roots[i]
        full = [*lead, vals] if widths[src][s] == 1 else [*lead, *vals]
        t = Tuple(full, fields[src][s], comp_ids[src], task_ids[src][b.src_task], streams[src][s],
                  (), root, first + i)  # fmt: skip
        if b.more is not None and i in b.more:
            t._more = tuple((extra, first + i) for extra in b.more[i])
        if sink is not None:
            sink.lineage = root
        target(t)

    unsealed = collector.seal()
    if unsealed is not None:
        raise unshippable_error(
            plan, collector.comp, collector.task, collector.batches, unsealed.key,
            unsealed.error, delivered, again,
        )  # fmt: skip
    for b in into.control:
        src, s = b.src, b.stream
        f, cid, tid, sid = fields[src][s], comp_ids[src], task_ids[src][b.src_task], streams[src][s]
        first = deliver(b.roots, b.more)
        for i, (vals, root) in enumerate(zip(b.values, b.roots, strict=True)):
            executor.control(Tuple(vals, f, cid, tid, sid, (), root, first + i))
    result = executor.finish()
    executor.cleanup()
    return executed, result


def _batch_target(executor: Any, plain: bool) -> Callable[[ColumnBatch], None] | None:
    """Where the executor takes its data input as column batches, if it does and may.

    A protocol's executor offers ``batch_target`` (a ``BasicBolt`` or ``StatefulBolt``
    defining ``execute_batch``) once prepared. Only a ``plain`` task takes it: one whose data
    target gets the tuples as they are (no fault listener counting them, no shared leading
    values, no lineage sink), since the batch path hands none of those a tuple.
    """
    offered = getattr(executor, "batch_target", None) if plain else None
    return offered if callable(offered) else None


def _row_targets(executor: Any, plain: bool) -> tuple[BasicRows | None, RowAcks | None]:
    """How a per-tuple bolt's rows may go through ``_rows``'s loops, if they may.

    A ``BasicBolt``'s executor offers its step taken apart (``basic_rows``); any other
    executor may say where its bolt's acks go (``row_acks``). Only a ``plain`` task (as for
    ``_batch_target``) of a job that does not ask for the reference loop (``_rows.fast``)
    takes them; ``(None, None)``: the reference loop, ``_feed``.
    """
    if not plain:
        return None, None
    basic = getattr(executor, "basic_rows", None)
    if isinstance(basic, BasicRows):
        return basic, None
    acks = getattr(executor, "row_acks", None)
    if isinstance(getattr(acks, "acked", None), list) and callable(
        getattr(acks, "ack_batch", None)
    ):
        return None, acks
    return None, None


def _system_tuples(executor: Any, target: Callable[[Tuple], None], collector: TaskCollector) -> int:
    """Feed the executor's optional ``system_tuples`` (tick tuples) to ``target``; how many.

    They are untracked (root 0) and numbered by the task's ledger like any tuple delivered to
    it, so a bolt that acks them (every ``BasicBolt``) settles as usual. They go to the
    executor's own target, not through the fault listener's: injected faults count data.
    """
    system = getattr(executor, "system_tuples", None)
    if not system:
        return 0
    first = collector.ledger.deliver([0] * len(system))
    for i, t in enumerate(system):
        t._edge = first + i
        target(t)
    return len(system)


def _feed(
    execute: Callable[[Tuple], None],
    values: Sequence[Any],
    roots: Sequence[int],
    first: int,
    single: bool,
    source: tuple[Fields, str, int, str],
    lead: tuple[Any, ...],
    chunked: Callable[[], None],
    failing: list[Tuple],
    sink: Any = None,
) -> None:
    """The reference loop: one batch of single-tree tuples into ``execute``, chunk by chunk.

    Tuples are built slot by slot: without the call into ``Tuple.__init__`` this costs 40%
    less. A job whose tuples share leading values (``lead``: a transactional batch's attempt)
    gets them put back in front by its own copy of the loop, so the usual loop tests nothing;
    that copy also tells ``sink`` (when the executor has one) each tuple's root before
    executing it: one attribute store, where wrapping the bolt's ``execute`` cost a call.

    Which tuple raised is found after the fact, in the handler around the whole loop (free in
    Python 3.11 until something raises): ``t`` is the tuple last built, and it is the one
    that raised if the exception came out of ``execute`` rather than out of ``chunked``.
    """
    f, cid, tid, sid = source
    new = object.__new__
    n = len(values)
    t = None
    try:
        for start in range(0, n, _CHUNK):
            chunked()
            stop = min(start + _CHUNK, n)
            chunk = zip(
                values[start:stop],
                roots[start:stop],
                range(first + start, first + stop),
                strict=True,
            )
            if lead:
                (head,) = lead
                told = _NOWHERE if sink is None else sink
                for vals, root, number in chunk:
                    t = new(Tuple)
                    t.values = [head, vals] if single else [head, *vals]
                    t.fields = f
                    t.source_component = cid
                    t.source_task = tid
                    t.source_stream_id = sid
                    t._root = root
                    t._edge = number
                    t._more = None
                    told.lineage = root
                    execute(t)
                continue
            for vals, root, number in chunk:
                t = new(Tuple)
                t.values = [vals] if single else vals
                t.fields = f
                t.source_component = cid
                t.source_task = tid
                t.source_stream_id = sid
                t._root = root
                t._edge = number
                t._more = None
                execute(t)
    except Exception as exc:
        if t is not None and _raised_executing(exc, chunked.__code__):
            failing.append(t)
        raise


_TUPLE_INIT = Tuple.__init__.__code__


class _Nowhere:
    """The lineage sink of an executor without one: the store costs less than a test."""

    __slots__ = ("lineage",)
    lineage: int


_NOWHERE = _Nowhere()


def _raised_executing(exc: BaseException, *not_tuples: CodeType) -> bool:
    """Whether ``exc``, caught by a feeding loop, came out of a call about the current tuple.

    The traceback's first entry is the loop's own frame; the next is the function it called.
    No next entry: the loop itself raised (a column of the wrong length). A call among
    ``not_tuples`` (the chunk step, building the tuple) is the runtime's, not the tuple's.
    """
    here = exc.__traceback__
    called = here.tb_next if here is not None else None
    return called is not None and called.tb_frame.f_code not in not_tuples


def _bound_next(job: TaskJob, stage: int, out: dict[int, list[Any]]) -> Iterator[int]:
    """The keys of ``out`` that hold a tuple for a task of the next stage."""
    stage_of = job.layout.stage_of
    for key, records in out.items():
        if any(type(r) is TupleBatch and stage_of[r.dest] == stage + 1 for r in records):
            yield key


def _output(
    job: TaskJob,
    collector: TaskCollector,
    into: _Input,
    left: dict[int, int],
    report: TaskReport,
    stage: int,
    slot: int,
    final: bool,
    n_next: int,
) -> Iterator[tuple[int, list[Any]]]:
    """Key what the task sends on: tuples to their next stage, the rest to one home slot.

    After the last stage, every record goes to the acker partitions (``n_next``): acks by root,
    the rest, tuples bound outside the job included, to the task's home partition.
    """
    home = slot % n_next
    out: dict[int, list[Any]] = {}
    key_for = job.layout.key_for
    for b in itertools.chain(collector.records(), into.carry):
        out.setdefault(home if final else key_for(stage, b.dest, b.dest_task), []).append(b)
    collector.release()
    if (
        not final
        and job.layout.narrow[stage]
        and any(k != slot for k in _bound_next(job, stage, out))
    ):
        # Nothing moves across a narrow boundary: a tuple keyed elsewhere would be lost.
        msg = f"stage {stage} slot {slot} sent tuples across a narrow boundary to another slot"
        raise RuntimeError(msg)
    acks = into.acks
    for root, x in left.items():
        acks[root] = acks.get(root, 0) ^ x
    if final and n_next > 1 and acks:
        split: list[dict[int, int]] = [{} for _ in range(n_next)]
        for root, x in acks.items():
            split[root % n_next][root] = x
        for k, part in enumerate(split):
            if part:
                out.setdefault(k, []).append(AckLedger(part))
    elif acks:
        out.setdefault(home, []).append(AckLedger(acks))
    fails = into.fails + collector.fails
    if fails:
        out.setdefault(home, []).append(Fails(fails))
    out.setdefault(home, []).extend(into.reports)
    out[home].append(report)
    yield from out.items()
