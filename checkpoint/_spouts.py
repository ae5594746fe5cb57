"""The user spouts on the driver: their tasks, their collectors, and the emit buffer.

Spouts run in the driver, on the driver loop's thread: ``open`` once, then ``next_tuple`` in
bursts (``gather``), and ``ack`` / ``fail`` on the same instance, as Storm promises. An emitted
tuple goes straight into the emit buffer, as columns per (destination task, spout task,
stream), until a transaction takes the whole buffer (``take``) as ``TupleBatch`` records. A
tracked tuple (one with a message id, while acking is on) becomes a live root in the
``RootLedger``; an untracked one is acked at once.

The emit path is the driver's hot path (one call per spout tuple): it is ``_emit``, bound to
each spout's collector with ``functools.partial`` so that a spout's ``emit`` costs one frame.

A spout task remembers the message ids it was told had failed (``SpoutTask.failed_ids``) until
they are emitted again, acked, or too many: an emit of one of them counts as a replay. The emit
path pays for this only while some failed id waits (``_count_replay``).

Besides the user's spout tasks there may be framework sources (``add_source``): spout tasks of
no topology component, named ``$...``, whose tuples go out as a user spout task's would
(``emit_as``: its routes) while their roots, acks and fails stay the source's own. The replay
of dead letters is one (``_deadletters``).
"""

from __future__ import annotations

import collections
import functools
import logging
from collections.abc import Mapping, Sequence
from typing import Any

from checkpoint._ledger import RootLedger
from statefulbolts.collectors import SpoutOutputCollector
from statefulbolts.context import TopologyContext
from statefulbolts.errors import TopologyError, TopologyFailedError
from statefulbolts.runtime import (
    ExecutionPlan,
    Router,
    Stats,
    TupleBatch,
    format_traceback,
    id_column,
    task_copy,
)
from statefulbolts.topology import StormTopology
from statefulbolts.tuples import DEFAULT_STREAM

__all__ = ["MAX_BUFFER", "SpoutTask", "SpoutTasks"]

log = logging.getLogger(__name__)

MAX_BUFFER = 2_000_000
# Failed message ids a spout task remembers to count their replays; the oldest go beyond this.
_MAX_FAILED_IDS = 100_000
# Calls of next_tuple per spout task per gathering step, at most.
_BURST = 64


class SpoutTask:
    """One task of one spout on the driver: the instance, its routes, its counters."""

    __slots__ = (
        "comp",
        "task",
        "spout",
        "router",
        "shuffle",
        "streams",
        "emitted",
        "acked",
        "failed",
        "live",
        "name",
        "context",
        "index",
        "failed_ids",
    )

    def __init__(
        self, comp: int, task: int, spout: Any, router: Router, name: str, index: int = -1
    ) -> None:
        self.comp, self.task, self.spout, self.router, self.name = comp, task, spout, router, name
        self.index = index  # in the list of user spout tasks
        self.shuffle = router.single_shuffle_routes()
        # Per declared stream name: (stream index, width, its one shuffle route or None, and for
        # that route the buffer's batch per destination task, None until the first emit there).
        self.streams: dict[str, tuple[int, int, list[Any] | None, list[Any]]] = {}
        self.emitted = 0
        self.acked = 0
        self.failed = 0
        self.live = 0
        self.context: TopologyContext | None = None
        # Message ids failed and not yet emitted again or acked, oldest first (values unused).
        self.failed_ids: dict[Any, None] = {}


class _Collector(SpoutOutputCollector):
    def __init__(self, spouts: SpoutTasks, st: SpoutTask) -> None:
        self._spouts, self._st = spouts, st
        if type(self).emit is _Collector.emit:  # not in a subclass that emits elsewhere
            # A spout emits once per next_tuple: straight to the buffer, without this frame.
            self.emit = functools.partial(spouts._emit, st)  # type: ignore[method-assign]

    def emit(
        self, values: Sequence[Any], message_id: Any = None, stream: str = DEFAULT_STREAM
    ) -> None:
        self._spouts._emit(self._st, values, message_id, stream)

    def report_error(self, error: BaseException) -> None:
        self._spouts.report_error(self._st.name, error)


class SpoutTasks:
    """Every task of every user spout, and the buffer of what they emitted."""

    def __init__(
        self,
        topology: StormTopology,
        plan: ExecutionPlan,
        name: str,
        conf: Mapping[str, Any],
        ledger: RootLedger,
        stats: Stats,
        *,
        tracking: bool,
        max_pending: int | None,
        skip: Sequence[str] = (),
    ) -> None:
        self._topology, self._plan, self._name, self._conf = topology, plan, name, conf
        self._ledger, self._stats = ledger, stats
        self._tracking = tracking
        self._limit = max_pending or 0
        self.tasks: list[SpoutTask] = []
        for cid, spec in sorted(topology.spouts.items()):
            if cid in skip:
                continue
            c = plan.index[cid]
            for t in range(spec.parallelism):
                instance = task_copy(spec.obj)
                router = Router(plan, c, t)
                self.tasks.append(SpoutTask(c, t, instance, router, cid, len(self.tasks)))
        self._users = len(self.tasks)  # the user spout tasks come first; sources after them
        self._batches: dict[tuple[int, int, int, int, int], tuple[list[Any], list[int]]] = {}
        self.buffered = 0
        self._buffer_roots: list[int] = []
        self._filling_since: float | None = None
        # Whether the last gathering step found a spout still producing: some task emitted on
        # every call of its burst, with room left (``gather``).
        self.producing = False
        ledger.attach(self)
        stats.task_sources.append(self.task_counters)

    # ---------------------------------------------------------------- lifecycle
    def open(self) -> None:
        """``open`` then ``activate`` every spout task; on an error close what opened."""
        opened: list[SpoutTask] = []
        try:
            for st in self.tasks:
                st.context = TopologyContext(self._topology, self._name, st.name, st.task)
                try:
                    st.spout.open(self._conf, st.context, _Collector(self, st))
                    opened.append(st)
                    st.spout.activate()
                except Exception as exc:
                    msg = f"spout {st.name!r} task {st.task} failed in open: {exc}"
                    raise TopologyFailedError(msg, component=st.name, task=st.task) from exc
        except BaseException:
            self._close(opened)
            raise

    def close(self) -> None:
        """``deactivate`` and ``close`` every spout task (errors are logged, not raised)."""
        self._close(self.tasks)

    def add_source(self, name: str, spout: Any) -> SpoutTask:
        """Open a framework source named ``name`` (``$...``) as one more (last) spout task.

        Its ``next_tuple`` is gathered with the others, within the same limits; it emits
        through ``emit_as``. Needs one user spout task (whose routes it borrows until then).
        """
        first = self.tasks[0]
        st = SpoutTask(first.comp, first.task, spout, first.router, name, len(self.tasks))
        spout.open(self._conf, None, _Collector(self, st))
        self.tasks.append(st)
        return st

    def emit_as(
        self,
        origin: SpoutTask,
        source: SpoutTask,
        values: Sequence[Any],
        message_id: Any,
        stream: str = DEFAULT_STREAM,
    ) -> None:
        """Emit a tuple of ``source`` as ``origin`` would: ``origin``'s routes and stream.

        The tuple's root is ``source``'s (its ``ack`` and ``fail`` are called, and it counts
        against its pending limit), and so is an ack at once (untracked, or no consumer).
        """
        spout, origin.spout = origin.spout, source.spout
        before = len(self._buffer_roots)
        try:
            self._emit(origin, values, message_id, stream)
        finally:
            origin.spout = spout
        origin.emitted -= 1
        source.emitted += 1
        if len(self._buffer_roots) > before:
            root = self._buffer_roots[-1]
            self._ledger.live[root] = (source.index, message_id)
            origin.live -= 1
            source.live += 1

    @staticmethod
    def _close(tasks: Sequence[SpoutTask]) -> None:
        for st in tasks:
            try:
                st.spout.deactivate()
                st.spout.close()
            except Exception:  # noqa: BLE001 - closing must not hide the real error
                log.exception("spout %s failed to close", st.name)

    # ---------------------------------------------------------------- gathering
    def gather(self) -> int:
        """Calls of ``next_tuple``, a burst per spout task in turn; returns tuples emitted.

        A burst is up to ``_BURST`` calls, fewer if a call emits nothing, the task reaches
        ``topology.max.spout.pending`` or the buffer is full: one call per loop step spent more
        time on the step than on the spout. A task whose burst ran all its calls, each emitting,
        is still producing (``producing``): a source with a backlog, not one that keeps pace.
        """
        emitted = 0
        limit = self._limit
        producing = False
        for st in self.tasks:
            next_tuple = st.spout.next_tuple
            start = st.emitted
            try:
                for _ in range(_BURST):
                    if (limit and st.live >= limit) or self.buffered >= MAX_BUFFER:
                        break
                    before = st.emitted
                    next_tuple()
                    if st.emitted == before:
                        break
                else:
                    producing = True
            except Exception as exc:
                msg = f"spout {st.name!r} task {st.task} raised in next_tuple: {exc}"
                raise TopologyFailedError(msg, component=st.name, task=st.task) from exc
            emitted += st.emitted - start
        self.producing = producing
        return emitted

    def still_filling(self, gathered: int, now_ms: float, interval_ms: float) -> bool:
        """Whether to hold the first transaction since the start back: the spouts still produce.

        Storm sends the first PREPARE as soon as recovery ends, and its tuples flow between
        checkpoints anyway. Here data moves only with a transaction, and the next one may not
        start until one interval after this one: a first transaction cut after a few ms of
        gathering left the rest of a burst waiting most of an interval while Spark idled. So the
        first transaction, like every later one, carries up to one interval of data, and goes
        at once when the spouts go quiet (a gathering step emitted nothing, or the buffer is
        full).
        """
        if not gathered or self.buffered >= MAX_BUFFER:
            return False
        if self._filling_since is None:
            self._filling_since = now_ms
        return now_ms - self._filling_since <= interval_ms

    def take(self) -> tuple[list[TupleBatch], list[int]]:
        """Empty the buffer: its records, and the roots they carry in emit order."""
        records = [
            TupleBatch(dest, dtask, src, stask, s, vals, id_column(roots), None)
            for (dest, dtask, src, stask, s), (vals, roots) in self._batches.items()
        ]
        self._batches, self.buffered = {}, 0
        for st in self.tasks:  # their batch slots point into the buffer just taken
            for info in st.streams.values():
                info[3][:] = [None] * len(info[3])
        roots, self._buffer_roots = self._buffer_roots, []
        return records, roots

    # ---------------------------------------------------------------- the emit path
    def _emit(
        self,
        st: SpoutTask,
        values: Sequence[Any],
        message_id: Any = None,
        stream: str = DEFAULT_STREAM,
    ) -> None:
        info = st.streams.get(stream)
        if info is None:
            info = self._stream_info(st, stream)
        s, width, shuffle, slots = info
        if len(values) != width:
            fields = self._plan.fields[st.comp][s]
            msg = (
                f"spout {st.name!r} emitted {len(values)} values on stream {stream!r}, which "
                f"declares {width} fields {fields.to_list()}"
            )
            raise TopologyError(msg)
        tracked = message_id is not None and self._tracking
        batches = self._batches
        value = values[0] if width == 1 else list(values)
        # The tree's root id; its tuples' own ids are made by the tasks they are delivered to.
        root = self._ledger.new_root() if tracked else 0
        sent = True
        if shuffle is not None:  # one consumer, by shuffle: the common case, without the router
            i = shuffle[4]
            shuffle[4] = i + 1
            batch = slots[i % shuffle[2]]
            if batch is None:
                key = (shuffle[1], i % shuffle[2], st.comp, st.task, s)
                batch = slots[i % shuffle[2]] = batches[key] = ([], [])
            batch[0].append(value)
            batch[1].append(root)
        else:
            targets = st.router.targets(st.comp, s, list(values))
            sent = bool(targets)
            for dest, dtask in targets:
                key = (dest, dtask, st.comp, st.task, s)
                batch = batches.get(key)
                if batch is None:
                    batch = batches[key] = ([], [])
                batch[0].append(value)
                batch[1].append(root)
        self.buffered += 1
        st.emitted += 1
        if st.failed_ids and message_id is not None:
            self._count_replay(st, message_id)
        if root and sent:
            self._ledger.live[root] = (st.index, message_id)
            self._buffer_roots.append(root)
            st.live += 1
        elif message_id is not None:
            st.spout.ack(message_id)  # untracked, or a tree with no edges: complete at once
            st.acked += 1
            self._stats.add(st.name, acked=1)

    def _stream_info(
        self, st: SpoutTask, stream: str
    ) -> tuple[int, int, list[Any] | None, list[Any]]:
        """What ``_emit`` needs to know of one stream of one spout task, kept per name."""
        plan = self._plan
        s = plan.stream_index[st.comp].get(stream)
        if s is None:
            msg = (
                f"spout {st.name!r} emitted on undeclared stream {stream!r}; it declares "
                f"{sorted(plan.stream_index[st.comp])}"
            )
            raise TopologyError(msg)
        shuffle = st.shuffle.get(s)
        slots: list[Any] = [None] * (shuffle[2] if shuffle is not None else 0)
        info = (s, len(plan.fields[st.comp][s]), shuffle, slots)
        st.streams[stream] = info
        return info

    def _count_replay(self, st: SpoutTask, message_id: Any) -> None:
        """Count an emit of a message id that had failed as a replay."""
        try:
            replayed = st.failed_ids.pop(message_id, st) is not st
        except TypeError:  # an unhashable message id was never remembered
            return
        if replayed:
            self._stats.add(st.name, replayed=1)

    # ---------------------------------------------------------------- the ledger's calls
    def ack_messages(self, index: int, message_ids: list[Any]) -> None:
        """``ack`` each message id at spout task ``index``, in one C-level loop."""
        st = self.tasks[index]
        st.live -= len(message_ids)
        collections.deque(map(st.spout.ack, message_ids), maxlen=0)
        st.acked += len(message_ids)
        self._stats.add(st.name, acked=len(message_ids))
        if st.failed_ids:  # acked without a replay we saw: no longer waiting for one
            for message_id in message_ids:
                st.failed_ids.pop(message_id, None)

    def fail_message(self, index: int, message_id: Any) -> None:
        """``fail`` one message id at spout task ``index``."""
        st = self.tasks[index]
        st.live -= 1
        try:
            st.failed_ids[message_id] = None
        except TypeError:
            log.debug(
                "spout %s: message id %r is unhashable; its replay is not counted",
                st.name,
                message_id,
            )
        else:
            if len(st.failed_ids) > _MAX_FAILED_IDS:
                del st.failed_ids[next(iter(st.failed_ids))]
        st.spout.fail(message_id)
        st.failed += 1
        self._stats.add(st.name, failed=1)

    def describe(self, index: int) -> str:
        """``component``, for log lines."""
        return self.tasks[index].name

    def report_error(self, component: str, error: BaseException) -> None:
        """A spout's ``report_error``: logged and counted; the topology goes on."""
        text = f"{component}: {type(error).__name__}: {error}"
        log.warning("error reported by %s", text)
        trace = format_traceback(error) if error.__traceback__ is not None else None
        self._stats.error(component, text, traceback=trace)

    def ack_recovered(self, groups: Sequence[tuple[str, int, list[Any]]]) -> None:
        """Ack the messages a crashed driver's committed transaction carried (its manifest)."""
        if not groups:
            return
        tasks = self.by_name()
        delivered = 0
        for component, task, msg_ids in groups:
            st = tasks.get((component, task))
            if st is not None:
                for msg_id in msg_ids:
                    st.spout.ack(msg_id)
                delivered += len(msg_ids)
        log.info("a recovered transaction had committed: acked its %d spout tuples", delivered)

    def emitted_per_component(self) -> dict[str, int]:
        """Tuples emitted so far, per spout component (and per source that emitted any)."""
        out: dict[str, int] = {}
        for k, st in enumerate(self.tasks):
            if k < self._users or st.emitted:
                out[st.name] = out.get(st.name, 0) + st.emitted
        return out

    def task_counters(self) -> dict[tuple[str, int], dict[str, float]]:
        """Per user spout task (component, task index): its id and figures, with ``pending``.

        ``pending`` is the task's live tuple trees (``topology.max.spout.pending`` bounds it).
        Read from a reader's thread (``Stats.task_counters``): plain attribute reads.
        """
        task_ids = self._plan.task_ids
        return {
            (st.name, st.task): {
                "task": task_ids[st.comp][st.task],
                "emitted": st.emitted,
                "acked": st.acked,
                "failed": st.failed,
                "pending": st.live,
            }
            for st in list(self.tasks[: self._users])
        }

    def lags(self) -> dict[str, int]:
        """Per spout component, what its source holds that the topology has not yet acked.

        Asked of every spout task with a ``lag()`` method (``RedisStreamSpout``: the entries
        its consumer group has not acknowledged); the largest answer of a component's tasks
        wins (they usually share one source). A task that answers ``None`` does not know.
        Called from a reader's thread, not the driver's: a spout's ``lag`` must allow that.
        """
        out: dict[str, int] = {}
        for st in list(self.tasks[: self._users]):
            lag = getattr(st.spout, "lag", None)
            value = lag() if callable(lag) else None
            if value is not None:
                out[st.name] = max(out.get(st.name, 0), int(value))
        return out

    def by_name(self) -> dict[tuple[str, int], SpoutTask]:
        """Spout tasks by (component, task index); a source by (its ``$`` name, its task)."""
        return {(st.name, st.task): st for st in self.tasks}

    def user_task(self, component: str, task: int) -> SpoutTask | None:
        """The user spout task ``task`` of ``component``, if the topology has it."""
        for st in self.tasks[: self._users]:
            if st.name == component and st.task == task:
                return st
        return None
