"""The collector of a bolt task: routes emits to destination batches, and its ack ledger.

An emit appends the tuple's value and the root of its anchor to the batch of each destination
task (``TupleBatch`` columns, see ``_records``); the XOR ids that acking needs are made by the
task a tuple is delivered to (``statefulbolts.acker``), so an emit computes none, and checks
nothing: the task seals the batches (``seal``: each values column pickled once, ``_sealing``)
before it hands them on (``records``). Most emits take one fast path (one anchor on one tree, a
one-field stream routed by fields grouping on that field, a ``str`` value seen before): that
path lives here, in ``TaskCollector._emitter`` (the closure that is a collector's ``emit``) and
its copy in ``_TaskBasicCollector._emit``, and nowhere else but the compiled copy of the
latter (``_native/_basicemit.c``, ``_TaskBasicCollector``'s base where it was built).

No pyspark here: this module runs inside Spark's Python workers but is plain Python.
"""

from __future__ import annotations

import traceback
from collections.abc import Callable, Iterator, Sequence
from operator import itemgetter
from typing import TYPE_CHECKING, Any, NamedTuple

from statefulbolts.acker import DeliveryLedger, id_base
from statefulbolts.collectors import Anchors, BasicOutputCollector, OutputCollector
from statefulbolts.errors import TopologyError, UnanchoredEmitError
from statefulbolts.keygroups import stable_hash
from statefulbolts.runtime._plan import ExecutionPlan, Router
from statefulbolts.runtime._records import ReportedError, TupleBatch, id_column
from statefulbolts.runtime._sealing import seal_column
from statefulbolts.runtime._stats import format_traceback
from statefulbolts.runtime._task_errors import exception_types
from statefulbolts.tuples import DEFAULT_STREAM, ColumnBatch, Tuple

try:
    from statefulbolts.runtime._native import _basicemit
except ImportError:  # not compiled at install (no C compiler), or imported from a zip
    _basicemit = None  # type: ignore[assignment]

__all__ = ["TaskCollector", "Unsealed"]

# Values a fields grouping on one str field remembers the route of, the first ``_MEMO_SIZE`` of
# them: per task, the batch each went to (``TaskCollector._memo``), and per process, per tuple
# of key group owners, each value's owner and the first str object of that value (``_ROUTES``),
# kept from one job to the next. A Python worker runs a topology's jobs one after another, and
# a transactional batch bolt's ``finish_batch`` emits each distinct word of its batch once:
# within a task no word is routed twice, while from batch to batch the words repeat, and hashing
# each again and filling a task's memo was most of the cost of those emits.
_MEMO_SIZE = 100_000
_ROUTES: dict[tuple[int, ...], dict[str, tuple[int, str]]] = {}


def _new_route(
    routes: dict[str, tuple[int, str]], owners: tuple[int, ...], value: str
) -> tuple[int, str]:
    """``value``'s owner by ``stable_hash`` and ``value``, kept in ``routes`` (of ``owners``)."""
    route = (owners[stable_hash((value,)) % len(owners)], value)
    if len(routes) < _MEMO_SIZE:
        routes[value] = route
    return route


def _batch_in(
    batches: dict[tuple[int, int, int], list[Any]],
    dest_of: dict[int, tuple[int, int]],
    dest: int,
    dtask: int,
    stream: int,
) -> list[Any]:
    """The batch of ``batches`` for ``(dest, dtask, stream)``, made (and noted) if new."""
    key = (dest, dtask, stream)
    batch = batches.get(key)
    if batch is None:
        # values, first roots (0: untracked), {position: further roots} or None
        batch = batches[key] = [[], [], None]
        dest_of[id(batch)] = (dest, dtask)
    return batch


class _Memo(dict[str, tuple[list[Any], str]]):
    """One fields-grouped one-field stream's memo: ``value -> (its batch, the first equal str)``.

    Looked up with ``memo[value]`` for a ``str`` value only. A value not in it is routed there
    and then (``__missing__``): its owner from the process's routes (``_ROUTES``: a hash the
    first time this process sees the value), this task's batch for that owner, remembered
    for the task's next emits of it (the first ``_MEMO_SIZE`` values). A task's first emit of
    a value costs that one frame, not the general path's (a collector's batches are new with
    every job, so a small transaction's emits were mostly first ones).

    It holds the collector's tables, not the collector: no reference cycle through it, and
    this task's batch for each task of the destination once made (``by_task``, which
    ``emit_to``'s ``_ByField`` shares), so a value seen first finds its batch by its owner.
    """

    __slots__ = ("_batches", "_dest", "_dest_of", "_owners", "_routes", "_stream", "by_task")

    def __init__(
        self,
        batches: dict[tuple[int, int, int], list[Any]],
        dest_of: dict[int, tuple[int, int]],
        dest: int,
        stream: int,
        owners: tuple[int, ...],
        routes: dict[str, tuple[int, str]],
        tasks: int,
    ) -> None:
        super().__init__()
        self._batches, self._dest_of, self._dest, self._stream = batches, dest_of, dest, stream
        self._owners, self._routes = owners, routes
        self.by_task: list[list[Any] | None] = [None] * tasks

    def __missing__(self, value: str) -> tuple[list[Any], str]:
        routes = self._routes
        task, value = routes.get(value) or _new_route(routes, self._owners, value)
        batch = self.by_task[task]
        if batch is None:
            batch = _batch_in(self._batches, self._dest_of, self._dest, task, self._stream)
            self.by_task[task] = batch
        entry = (batch, value)
        if len(self) < _MEMO_SIZE:
            self[value] = entry
        return entry

    def reset(self) -> None:
        """Forget every value and batch: the collector let go of its batches."""
        self.clear()
        self.by_task[:] = [None] * len(self.by_task)


class _ByField(NamedTuple):
    """``emit_to``'s route of one stream fields-grouped on one field into one component."""

    width: int  # the stream's values, without the job's leading ones
    pos: int  # the grouped field's position among them
    routes: dict[str, tuple[int, str]]  # the process's routes over ``owners`` (``_ROUTES``)
    batches: list[list[Any] | None]  # this task's batch for each destination task, once made
    ids: Sequence[int]  # the global id of each destination task
    stream: int
    dest: int
    owners: tuple[int, ...]


class Unsealed(NamedTuple):
    """A batch whose values column did not pickle: its key and what pickling it raised."""

    key: tuple[int, int, int]  # (destination, destination task, stream)
    error: BaseException


class TaskCollector(OutputCollector):
    """The raw collector of a bolt task: routes emits and keeps this task's ``DeliveryLedger``.

    An emit records, per destination batch, the value and the roots of its anchors; the ids
    that XOR acking needs are made by the task the tuple is delivered to (see ``acker``).

    In a data-free job (``data_free`` names its step: a checkpoint COMMIT, ROLLBACK or
    INITSTATE) an emit on the control stream goes nowhere, and a data emit is an error: no task
    downstream takes part.
    """

    def __init__(
        self,
        plan: ExecutionPlan,
        comp: int,
        task: int,
        txid: int,
        name: str,
        data_free: str | None = None,
        pipelined: frozenset[int] = frozenset(),
    ) -> None:
        self.comp, self.task = comp, task
        # Destinations reached without leaving this Python task (``JobLayout.pipelined``): their
        # batches go on as objects, as Spark pipelines them, and are never sealed.
        self._pipelined = pipelined
        self._task_id = plan.task_ids[comp][task]
        self._name = name
        self._flat_action = data_free
        self._streams = plan.stream_index[comp]
        self._fields = plan.fields[comp]
        self._widths = plan.widths[comp]  # without the job's leading values (``plan.lead``)
        self._lead = plan.lead
        self._router = Router(plan, comp, task)
        self._cp_stream = plan.checkpoint_stream[comp]
        self.batches: dict[tuple[int, int, int], list[Any]] = {}
        # Each batch's values column as sealed, with how many values it held then (``seal``).
        self._sealed: dict[tuple[int, int, int], tuple[int, bytes]] = {}
        # Which (destination, task) each batch list goes to, by the list's id (``emit_to``).
        self._dest_of: dict[int, tuple[int, int]] = {}
        self._task_ids = plan.task_ids
        # Fields grouping on one str field: remember which batch a value goes to, with the first
        # str object of that value: (field position, {value: (batch, value)}, dest, the key
        # group owners of dest's tasks, the process's routes over those owners).
        self._memo: dict[
            int,
            tuple[
                int,
                _Memo,
                int,
                tuple[int, ...],
                dict[str, tuple[int, str]],
            ],
        ] = {}
        for stream in range(len(self._widths)):
            single = self._router.single_field_route(stream)
            if single is not None:
                dest, pos, owners = single
                routes = _ROUTES.setdefault(owners, {})
                tasks = len(plan.task_ids[dest])
                memo = _Memo(self.batches, self._dest_of, dest, stream, owners, routes, tasks)
                self._memo[stream] = (pos, memo, dest, owners, routes)
        # The same caches by stream name, for the one-field data streams ``emit`` has a fast
        # path for (none in a data-free job, where a data emit is an error).
        self._fast: dict[str, _Memo] = {}
        if data_free is None:
            self._fast = {
                name: self._memo[s][1]
                for name, s in self._streams.items()
                if s in self._memo and self._widths[s] == 1
            }
        # Streams whose every tuple goes to one task (``Router.single_target``), by name: the
        # width and, once the first emit made it, the batch (set in place); the fast path
        # appends to it.
        self._fixed: dict[str, list[Any]] = {}
        # ``emit_to``'s fast paths: the fixed streams' task ids; the fields-grouped streams by
        # name, ``_ByField``: routed by the process's routes alone, into a batch per task.
        self._fixed_ids: dict[str, int] = {}
        self._by_field: dict[str, _ByField] = {}
        if data_free is None:
            for name, s in self._streams.items():
                target = self._router.single_target(s)
                if s != self._cp_stream and target is not None:
                    self._fixed[name] = [self._widths[s], None]
                    self._fixed_ids[name] = plan.task_ids[target[0]][target[1]]
                if s in self._memo:
                    pos, memo, dest, owners, routes = self._memo[s]
                    ids = plan.task_ids[dest]
                    self._by_field[name] = _ByField(  # the memo's batches per task, shared
                        self._widths[s], pos, routes, memo.by_task, ids, s, dest, owners
                    )
        # ``emit``'s two fast paths by stream name, in one lookup: (the fields-grouping cache
        # of a one-field stream, the fixed stream's entry), either ``None``.
        self._quick: dict[str, tuple[dict[str, tuple[list[Any], str]] | None, list[Any] | None]]
        self._quick = {
            name: (self._fast.get(name), self._fixed.get(name))
            for name in {*self._fast, *self._fixed}
        }
        self._anchored_only = False  # ``refuse_unanchored``
        self.emit = self._emitter()  # type: ignore[method-assign]
        self.ledger = DeliveryLedger(id_base(txid, comp, task))
        # Acks only keep the tuple (the ledger's own list methods); ``settle`` does the rest.
        self.ack = self.ledger.ack  # type: ignore[method-assign,assignment]
        # The list ``ack`` appends to (``_rows.RowAcks``: a row loop takes a single ack of the
        # row's tuple back out of it, and acks the run with ``ack_batch``).
        self.acked: list[Tuple] = self.ledger.acked
        self.ack_many = self.ledger.ack_many  # type: ignore[method-assign,assignment]
        self.fails: list[int] = []
        self.errors: list[ReportedError] = []
        # Fast-path emits count nothing: each appends one value to one batch, so ``emitted``
        # is what the general path counted plus what it did not append.
        self._emits = 0  # counted by the general path
        self._appends = 0  # values the general path appended
        self.failed = 0

    def _bad_emit(self, values: Sequence[Any], stream: str) -> TopologyError:
        s = self._streams.get(stream)
        if s is None:
            msg = (
                f"bolt {self._name!r} task {self.task} emitted on undeclared stream "
                f"{stream!r}; "
                f"it declares {sorted(self._streams)}"
            )
        elif self._flat_action is not None:
            msg = (
                f"bolt {self._name!r} task {self.task} emitted {list(values)!r} during "
                f"{self._flat_action}; bolts may emit only while executing tuples (not from "
                "init_state or the pre_commit / pre_rollback hooks of a data-free checkpoint)"
            )
        else:
            msg = (
                f"bolt {self._name!r} emitted {len(values) + self._lead} values on stream "
                f"{stream!r}, which declares {self._widths[s] + self._lead} fields "
                f"{self._fields[s].to_list()}"
            )
        return TopologyError(msg)

    def emit(
        self, values: Sequence[Any], anchors: Anchors = None, stream: str = DEFAULT_STREAM
    ) -> None:
        """Route one tuple to its destination tasks, with the roots of its anchors.

        An instance's ``emit`` is the closure ``_emitter`` made (its fast paths first); this
        is the general path alone, which gives the same batches.
        """
        self._emit(values, anchors, stream)

    def _emitter(self) -> Callable[..., None]:
        """This collector's ``emit``: the fast paths, then the general path (``_emit``).

        A closure over the collector's routing tables, so the hot path reads no attribute of
        the collector. The fast paths take an emit anchored to one tuple of one tree (the shape
        of most):

        - the default stream, when it goes into one task (a count emitted on to a sink), once
          its batch exists: checked first, by identity of the stream name (the default
          argument, or the interned literal), since a per-tuple bolt's emit per tuple is a
          third of its ``execute``;
        - a ``str`` on a one-field data stream routed by fields grouping (see ``_memo``):
          the value shipped is the first equal str this task emitted, so the pickled batch
          holds each distinct word once (later ones are memo references) and the next stage
          gets one object per word, its hash computed once (a first emit routes it in the
          memo's lookup, ``_Memo``);
        - any other stream into one task, once its batch exists.
        """
        quick, general = self._quick, self._emit
        route = quick.get(DEFAULT_STREAM)
        # The default stream's entry in ``_fixed`` when it takes the first path; else a name no
        # emit passes, so the first test fails at once.
        first: object = DEFAULT_STREAM
        fixed_default: list[Any] = [0, None]
        if route is not None and route[0] is None and route[1] is not None:
            fixed_default = route[1]
        else:
            first = object()
        width_default = fixed_default[0]

        def emit(
            values: Sequence[Any], anchors: Anchors = None, stream: str = DEFAULT_STREAM
        ) -> None:
            if (
                stream is first
                and type(anchors) is Tuple
                and anchors._more is None
                and len(values) == width_default
            ):
                to = fixed_default[1]
                if to is not None:
                    to[0].append(values[0] if width_default == 1 else list(values))
                    to[1].append(anchors._root)
                    return
            route = quick.get(stream)
            if route is not None and type(anchors) is Tuple and anchors._more is None:
                cache, fixed = route
                if cache is not None and len(values) == 1:
                    value = values[0]
                    if type(value) is str:
                        batch, value = cache[value]  # routed now if not yet (``_Memo``)
                        batch[0].append(value)
                        batch[1].append(anchors._root)
                        return
                if fixed is not None:
                    width, to = fixed
                    if to is not None and len(values) == width:
                        to[0].append(values[0] if width == 1 else list(values))
                        to[1].append(anchors._root)
                        return
            general(values, anchors, stream)

        return emit

    @property
    def emitted(self) -> int:
        """Data tuples emitted (one per ``emit``, whatever the number of destinations)."""
        appended = sum(len(batch[0]) for batch in self.batches.values())
        return self._emits + appended - self._appends

    def held_rows(self) -> int:
        """The rows the batches hold: a list per tuple emitted on a stream of two or more fields.

        Objects the garbage collector tracks that this collector keeps alive until the task's
        output goes on (``_worker.YoungGarbage`` does not count them as garbage to look for).
        """
        widths = self._widths
        return sum(len(b[0]) for key, b in self.batches.items() if widths[key[2]] > 1)

    def basic_collector(self, out: OutputCollector) -> BasicOutputCollector:
        """The ``BasicOutputCollector`` of a ``BasicBolt`` on this task, fast path inlined."""
        return _TaskBasicCollector(out, self)

    def fast_routes(self) -> dict[str, _Memo]:
        """Per one-field stream routed by fields grouping: the fast path's memo of values.

        For a collector of its own that inlines ``emit``'s fast path (one frame less per emit),
        as ``basic_collector`` does. Look a ``str`` value up with ``memo[value]``: a value not
        routed yet is routed by the lookup (``_Memo``).
        """
        return self._fast

    def emit_to(
        self, values: Sequence[Any], stream: str = DEFAULT_STREAM, root: int = 0, skip: int = 0
    ) -> list[int]:
        """Emit one unanchored tuple; return the global task ids it was sent to.

        ``root`` rides in the tuple's root column untracked: a transactional batch's lineage.
        ``skip``: how many leading values ``values`` has that are the job's and not shipped
        (``ExecutionPlan.lead``: a transactional tuple's attempt), left out here rather than
        sliced off by the caller, so that an emit of several values makes one list, not two.
        """
        # The fast paths of ``emit`` (a batch bolt's and an emitter's every emit comes here):
        # a stream into one task whose batch exists, and a str value of a fields grouping.
        if not self._anchored_only:
            fixed = self._fixed.get(stream)
            if fixed is not None:
                width, to = fixed
                if to is not None and len(values) == width + skip:
                    to[0].append(values[skip] if width == 1 else _row(values, skip))
                    to[1].append(root)
                    return [self._fixed_ids[stream]]
            by = self._by_field.get(stream)
            if by is not None and len(values) == by.width + skip:
                value = values[skip + by.pos]
                if type(value) is str:
                    # By the process's routes, not the task's memo: ``finish_batch`` emits each
                    # distinct value once, so a task's memo would only be filled, never read.
                    route = by.routes.get(value) or _new_route(by.routes, by.owners, value)
                    task = route[0]
                    batch = by.batches[task]
                    if batch is None:
                        batch = by.batches[task] = self._batch(by.dest, task, by.stream)
                    if by.width == 1:
                        batch[0].append(route[1])
                    elif skip and type(values) is list:
                        batch[0].append(values[skip:])  # a new list already (``_row``)
                    else:
                        batch[0].append(_row(values, skip))
                    batch[1].append(root)
                    return [by.ids[task]]
        ids = self._task_ids
        dest_of = self._dest_of
        batches = self._emit(values[skip:] if skip else values, None, stream, root)
        return [ids[d][t] for d, t in (dest_of[id(b)] for b in batches)]

    def emit_run(self, rows: Sequence[Sequence[Any]], stream: str, first_root: int) -> None:
        """Emit unanchored tuples, the k-th rooted at ``first_root + k``, as ``emit_to`` each.

        A partitioned spout's task emits what it read this way (``checkpoint._partitioned``):
        where ``stream`` goes to one task, or to one consumer by shuffle, the rows go into
        their batches by slices, in C, instead of one call each; the round-robin goes on from
        where it was, so the tuples land where ``emit_to`` one by one would have put them.
        Any other stream, or a row of the wrong width (``emit_to`` then names it), goes one
        row at a time.
        """
        if not rows:
            return
        s = self._streams.get(stream)
        width = None if s is None else self._widths[s]
        if (
            s is None
            or s == self._cp_stream
            or self._flat_action is not None
            or self._anchored_only
            or not set(map(len, rows)) <= {width}
        ):
            self._emit_each(rows, stream, first_root)
            return
        values = list(map(itemgetter(0), rows)) if width == 1 else list(map(list, rows))
        end = first_root + len(values)
        single = self._router.single_target(s)
        shuffle = self._router.single_shuffle_routes().get(s) if single is None else None
        if single is not None:
            batch = self._batch(single[0], single[1], s)
            batch[0].extend(values)
            batch[1].extend(range(first_root, end))
        elif shuffle is not None:
            # Row k goes to task (i + k) % n, i the route's counter: Router.targets's order.
            dest, n, i = shuffle[1], shuffle[2], shuffle[4]
            for j in range(min(n, len(values))):
                batch = self._batch(dest, (i + j) % n, s)
                batch[0].extend(values[j::n])
                batch[1].extend(range(first_root + j, end, n))
            shuffle[4] = i + len(values)
        else:
            self._emit_each(rows, stream, first_root)

    def _emit_each(self, rows: Sequence[Sequence[Any]], stream: str, first_root: int) -> None:
        emit_to = self.emit_to
        for root, values in enumerate(rows, first_root):
            emit_to(values, stream, root)

    def emit_columns(
        self,
        columns: Sequence[Sequence[Any]],
        roots: Sequence[int],
        stream: str = DEFAULT_STREAM,
    ) -> None:
        """Emit ``len(roots)`` tuples at once: tuple ``i`` is ``[c[i] for c in columns]``.

        Each is what ``emit`` of those values makes, anchored to one tree, ``roots[i]`` (0:
        untracked), in order: a batch bolt's emits (``ColumnOutputCollector.emit_columns``).
        A stream into one task, once its batch exists, takes the whole columns in one
        ``extend``; a fields-grouped one-field stream looks each value up in ``emit``'s cache;
        anything else goes a tuple at a time through the general path, with its checks.
        """
        n = len(roots)
        s = self._streams.get(stream)
        if s is None or len(columns) != self._widths[s]:
            raise self._bad_emit([c[0] if c else None for c in columns], stream)
        if any(len(c) != n for c in columns):
            lengths = [len(c) for c in columns]
            msg = (
                f"bolt {self._name!r} task {self.task} emitted columns of lengths "
                f"{lengths} on stream {stream!r} with {n} anchors: give one value per tuple "
                "in every column"
            )
            raise TopologyError(msg)
        if not n:
            return
        width = len(columns)
        fixed = self._fixed.get(stream)
        if fixed is not None and fixed[1] is None:
            # The stream's batch is made by its first emit, through the general path (which
            # leaves it unmade when the value took the fields-grouping cache instead).
            self._emit([c[0] for c in columns], (), stream, roots[0])
            columns, roots = [c[1:] for c in columns], roots[1:]
            fixed = self._fixed[stream]
        if fixed is not None and fixed[1] is not None:
            to = fixed[1]
            # Single-field streams ship bare values (see ``_emit``).
            to[0].extend(columns[0] if width == 1 else map(list, zip(*columns, strict=True)))
            to[1].extend(roots)
            return
        cache = self._fast.get(stream)
        if cache is not None:
            column = columns[0]
            try:  # the lookups in one C loop: a third of the cost of a split bolt's emits
                entries = list(map(cache.get, column))
            except TypeError:  # an unhashable value: only a str is looked up, as in ``emit``
                entries = [cache.get(v) if type(v) is str else None for v in column]
            emit = self._emit
            for entry, value, root in zip(entries, column, roots, strict=True):
                if type(value) is not str:  # the memo takes str values only
                    emit([value], (), stream, root)
                    continue
                if entry is None:
                    entry = cache[value]  # first seen here: routed now (``_Memo``)
                batch = entry[0]  # see ``emit``
                batch[0].append(entry[1])
                batch[1].append(root)
            return
        for values, root in zip(zip(*columns, strict=True), roots, strict=True):
            self._emit(list(values), (), stream, root)

    def refuse_unanchored(self) -> None:
        """From now on an emit with ``anchors=None`` raises ``UnanchoredEmitError``.

        For a bolt of a stateful topology, where every emit must be anchored (an explicit empty
        list is the deliberate untracked emit): its collector hands emits straight here.
        """
        self._anchored_only = True

    def _emit(
        self, values: Sequence[Any], anchors: Anchors, stream: str, lineage: int = 0
    ) -> Sequence[list[Any]]:
        """The general path of ``emit``; returns the batches the tuple went to.

        ``lineage``: the root column's value when there are no anchors (``emit_to``).
        """
        if anchors is None and self._anchored_only:
            msg = (
                f"bolt {self._name!r} task {self.task} emitted {list(values)!r} on stream "
                f"{stream!r} without anchors; bolts in a stateful topology must emit anchored "
                "tuples: pass anchors=<input tuple>"
            )
            raise UnanchoredEmitError(msg)
        s = self._streams.get(stream)
        if s is None or len(values) != self._widths[s]:
            raise self._bad_emit(values, stream)
        if self._flat_action is not None:
            if s == self._cp_stream:
                return ()
            raise self._bad_emit(values, stream)
        memo = self._memo.get(s)
        value = values[memo[0]] if memo is not None else None
        if memo is not None and type(value) is str:
            targets: Sequence[list[Any]] = (memo[1][value][0],)
        else:
            targets = [self._batch(d, t, s) for d, t in self._router.targets(self.comp, s, values)]
            fixed = self._fixed.get(stream)
            if fixed is not None:
                fixed[1] = targets[0]  # for ``emit``'s fast path
        if s != self._cp_stream:
            self._emits += 1
        if not targets:
            return targets
        self._appends += len(targets)
        # Single-field streams ship bare values; the receiver wraps them back in a list.
        vals = values[0] if self._widths[s] == 1 else list(values)
        root = lineage
        more: tuple[int, ...] | None = None
        if isinstance(anchors, Tuple):
            root = anchors._root
            if anchors._more:
                more = tuple(r for r, _ in anchors._more if r != root)
        elif anchors:
            # Every tree of every anchor, each once, in anchor order.
            roots = list(dict.fromkeys(r for a in anchors for r, _ in a.anchors))
            if roots:
                root = roots[0]
                more = tuple(roots[1:])
        for batch in targets:
            if more:
                if batch[2] is None:
                    batch[2] = {}
                batch[2][len(batch[0])] = more
            batch[0].append(vals)
            batch[1].append(root)
        return targets

    def _batch(self, dest: int, dtask: int, stream: int) -> list[Any]:
        return _batch_in(self.batches, self._dest_of, dest, dtask, stream)

    def seal(self) -> Unsealed | None:
        """Pickle every values column emitted into since it was last sealed; the first that fails.

        Called by the task when its tuples are executed, and again when it ends (what a
        protocol's ``finish`` emitted): a column nothing was emitted into since is not pickled
        again, nor is one for a pipelined destination (it never leaves the Python task).
        ``None``: every batch is sealed.
        """
        sealed, pipelined = self._sealed, self._pipelined
        for key, batch in self.batches.items():
            if key[0] in pipelined:
                continue
            n = len(batch[0])
            done = sealed.get(key)
            if done is not None and done[0] == n:
                continue
            try:
                sealed[key] = (n, seal_column(batch[0]))
            except Exception as exc:  # noqa: BLE001 - the task names the value and its tuple
                return Unsealed(key, exc)
        return None

    def records(self) -> Iterator[TupleBatch]:
        """Everything emitted, a sealed ``TupleBatch`` per (destination task, stream).

        Every batch must be sealed (``seal`` returned ``None``) since its last emit, but one for
        a pipelined destination, which goes on unsealed, its roots as the list they are: made
        an ``id_column`` (an array, which pickles as one block), the next task's loop made an
        int object of each root again, as many as it had tuples (7-10% of a counting task
        whose pairs a chained sink takes, measured with ``bench/count_steps.py``).
        """
        comp, task, sealed, pipelined = self.comp, self.task, self._sealed, self._pipelined
        for key, (vals, roots, more) in self.batches.items():
            if key[0] in pipelined:
                yield TupleBatch(key[0], key[1], comp, task, key[2], vals, roots, more)
                continue
            n, data = sealed[key]
            if n != len(vals):
                msg = f"batch {key} of {self._name!r} emitted into after it was sealed"
                raise RuntimeError(msg)
            dest, dtask, s = key
            yield TupleBatch(dest, dtask, comp, task, s, data, id_column(roots), more)

    def release(self) -> None:
        """Let go of what was emitted, once ``records`` has been handed on.

        A bolt that keeps its context makes a reference cycle (bolt -> context -> topology ->
        its spec -> bolt) that holds this collector: only a full collection frees it, and PySpark's
        daemon runs one after each task. Holding the batches too, that collection walked every
        value emitted: a counting task's 500,000 ``[word, count]`` lists cost it 0.1 s. Released,
        the values go with the records that carry them on. ``emitted`` still counts them.
        """
        self._emits, self._appends = self.emitted, 0
        self.batches.clear()
        self._sealed.clear()
        self._dest_of.clear()
        for _pos, cache, _dest, _owners, _routes in self._memo.values():
            cache.reset()  # and each ``_ByField``'s batches: the same list
        for fixed in self._fixed.values():
            fixed[1] = None

    def ack(self, tuple_: Tuple) -> None:
        """Ack a tuple this task was given (settled by the ledger when the task ends)."""
        self.ledger.ack(tuple_)

    def ack_many(self, tuples: Sequence[Tuple]) -> None:
        """``ack`` each of ``tuples`` (a stateful task releases its held acks at once)."""
        self.ledger.ack_many(tuples)

    def ack_batch(self, batch: ColumnBatch) -> None:
        """Ack every tuple of a batch this task was given, in one step of the ledger."""
        self.ledger.ack_run(batch._first, batch._roots)

    def fail(self, tuple_: Tuple) -> None:
        """Fail every root of the tuple."""
        self.fails.extend(root for root, _ in tuple_.anchors)
        if tuple_.source_stream_id != "$checkpoint":
            self.failed += 1

    def report_error(self, error: BaseException) -> None:
        """Keep the error; it is logged by the driver and counted in metrics."""
        text = "".join(traceback.format_exception_only(type(error), error)).strip()
        # Raised, caught, then reported: say where.
        trace = format_traceback(error) if error.__traceback__ is not None else None
        types = exception_types(error)
        self.errors.append(ReportedError(self.comp, self.task, types, text, trace))


def _row(values: Sequence[Any], skip: int) -> list[Any]:
    """A new list of ``values`` without the first ``skip``: what a batch keeps of a tuple."""
    if skip and type(values) is list:
        return values[skip:]  # a slice of a list is a new list already
    return list(values[skip:] if skip else values)


# Whether a ``BasicBolt``'s emit of one str takes its fast path in C (``_TaskBasicCollector``).
COMPILED_EMIT = _basicemit is not None

if TYPE_CHECKING or _basicemit is None:

    class _EmitBase:
        """The base without the compiled module: nothing (``emit`` is ``_emit``)."""

        __slots__ = ()

else:
    _EmitBase = _basicemit.BasicEmit


class _TaskBasicCollector(_EmitBase, BasicOutputCollector):
    """A ``BasicOutputCollector`` with ``TaskCollector._emitter``'s fast path written into ``emit``.

    A split bolt emits several tuples per input: one frame less per emit was a tenth of its
    stage. Where ``_native/_basicemit.c`` was built, ``emit`` is its base's, which takes the
    fast path below in C, without a Python frame at all, and hands every other call to
    ``_emit``; without it, ``emit`` is ``_emit``. Anything the fast path does not take goes the
    usual way.
    """

    __slots__ = ("_fast",)

    def __init__(self, out: OutputCollector, task: TaskCollector) -> None:
        super().__init__(out)
        self._fast = task._fast

    def _emit(self, values: Sequence[Any], stream: str = DEFAULT_STREAM) -> None:
        """Emit anchored to the current input tuple."""
        anchor = self._input
        cache = self._fast.get(stream)
        if cache is not None and anchor is not None and anchor._more is None and len(values) == 1:
            value = values[0]
            if type(value) is str:  # see TaskCollector._emitter
                batch, value = cache[value]
                batch[0].append(value)
                batch[1].append(anchor._root)
                return
        BasicOutputCollector.emit(self, values, stream)

    if not COMPILED_EMIT:
        emit = _emit


if _basicemit is not None:
    _basicemit.bind(Tuple, _TaskBasicCollector, DEFAULT_STREAM)
