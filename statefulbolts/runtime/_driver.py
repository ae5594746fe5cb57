"""The driver side of a running topology.

One ``TopologyRunner`` per submitted topology owns the spout instances (``open`` once;
``next_tuple``, ``ack`` and ``fail`` on one thread), the ``CheckpointSpout``, the ledger of live
spout tuples and the results of the acker. Its loop:

1. Gather: call the user spouts' ``next_tuple`` round-robin (within ``topology.max.spout.pending``)
   into a buffer. Gathering goes on while a Spark job runs, so spouts and Spark overlap.
2. When no job is running, ask the checkpoint spout for its next action. A recovery action or a
   COMMIT is a job of its own; a PREPARE takes the whole buffer with it. An idle topology (nothing
   buffered) does not run empty PREPAREs.
3. When the job ends: apply driver-owned state changes, settle every root (complete, failed or
   incomplete) and ack or fail the checkpoint tuple, which moves the checkpoint spout. Spout
   ``ack`` runs only after the COMMIT of the tuple's transaction; failed trees and rolled-back
   transactions ``fail`` at once; incomplete trees fail when ``topology.message.timeout.secs``
   runs out.
4. A failed job rolls back through the checkpoint spout's recovery; after
   ``topology.max.transaction.retries`` consecutive failures the topology stops with an error
   naming component, task, txid and cause.
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import itertools
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from checkpoint import Action, CheckpointSpout, TxPhase
from providers import (
    DriverOwnedStateProvider,
    KeyValueState,
    StateBackendError,
    StateFactory,
    StateSerializationError,
    get_provider,
)
from recovery.faults import FaultPlan, KillPoint
from statefulbolts._config import TopologyConfig, validate_config
from statefulbolts.acker import RotatingMap
from statefulbolts.clock import Clock
from statefulbolts.collectors import SpoutOutputCollector
from statefulbolts.context import TopologyContext
from statefulbolts.errors import TopologyError, TopologyFailedError
from statefulbolts.runtime._job import run_flat_job, run_job
from statefulbolts.runtime._plan import (
    ERROR,
    METRICS,
    STATE,
    TUPLE,
    ExecutionPlan,
    Router,
    id_column,
)
from statefulbolts.runtime._task import TASK_ERROR_MARK, TaskEnv
from statefulbolts.topology import (
    CHECKPOINT_COMPONENT_ID,
    CHECKPOINT_STREAM_ID,
    StormTopology,
)
from statefulbolts.tuples import DEFAULT_STREAM

log = logging.getLogger(__name__)

_MAX_BUFFER = 2_000_000
# While a job runs: gather for a slice, then pause so the job thread can take the GIL.
_GATHER_SLICE = 0.001
_GATHER_ROUNDS = 64
_GATHER_PAUSE = 0.0001
MANIFEST_KEY = "__txn"
# extlib folders already shipped, per SparkContext: (folder, newest mtime).
_SHIPPED_EXTLIB: dict[int, set[tuple[str, int]]] = {}
_ZIP_DIR: list[Path] = []


def _extlib_zip_dir() -> Path:
    """One temporary directory per process for extlib zips, removed when the process exits."""
    if not _ZIP_DIR:
        import atexit
        import shutil
        import tempfile

        path = Path(tempfile.mkdtemp(prefix="statefulbolts-extlib-"))
        atexit.register(shutil.rmtree, path, True)
        _ZIP_DIR.append(path)
    return _ZIP_DIR[0]


_TASK_ERROR = re.compile(
    re.escape(TASK_ERROR_MARK) + r" component='([^']*)' task=(\d+) txid=(-?\d+)\] ([^\n]*)"
)


@dataclass
class TransactionInfo:
    """What one Spark job did; handed to ``on_transaction`` callbacks and kept in metrics."""

    txid: int
    action: str | None
    tuples: int
    seconds: float
    ok: bool
    acked: int = 0
    failed: int = 0
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return dict(self.__dict__)


class _SpoutTask:
    __slots__ = (
        "comp",
        "task",
        "spout",
        "router",
        "shuffle",
        "streams",
        "emitted",
        "live",
        "name",
        "context",
        "index",
    )

    def __init__(
        self, comp: int, task: int, spout: Any, router: Router, name: str, index: int = -1
    ) -> None:
        self.comp, self.task, self.spout, self.router, self.name = comp, task, spout, router, name
        self.index = index  # in the runner's list of user spout tasks
        self.shuffle = router.single_shuffle_routes()
        # Per declared stream name: (stream index, width, its one shuffle route or None, and for
        # that route the buffer's batch per destination task, None until the first emit there).
        self.streams: dict[str, tuple[int, int, list[Any] | None, list[Any]]] = {}
        self.emitted = 0
        self.live = 0
        self.context: TopologyContext | None = None


# A live spout tuple: (index of its spout task in ``_spouts``, message id). A plain tuple, so
# the garbage collector stops tracking it (an int and a plain message id inside): the driver may
# hold a million of them, and full collections walked them all.
_Root = tuple[int, Any]


def _ids_per_task(live: Iterable[_Root | None]) -> dict[int, list[Any]]:
    """The message ids of ``live`` spout tuples per spout task index (``None`` entries skipped)."""
    per_task: dict[int, list[Any]] = {}
    for r in live:
        if r is not None:
            ids = per_task.get(r[0])
            if ids is None:
                ids = per_task[r[0]] = []
            ids.append(r[1])
    return per_task


class _Collector(SpoutOutputCollector):
    def __init__(self, runner: TopologyRunner, st: _SpoutTask) -> None:
        self._runner, self._st = runner, st
        if type(self).emit is _Collector.emit:  # not in a subclass that emits elsewhere
            # A spout emits once per next_tuple: straight to the runner, without this frame.
            self.emit = functools.partial(runner._spout_emit, st)  # type: ignore[method-assign]

    def emit(
        self, values: Sequence[Any], message_id: Any = None, stream: str = DEFAULT_STREAM
    ) -> None:
        self._runner._spout_emit(self._st, values, message_id, stream)

    def report_error(self, error: BaseException) -> None:
        self._runner._record_error(self._st.name, error)


@dataclass
class _Job:
    txid: int
    action: str | None
    roots: list[int]
    tuples: int
    started: float
    cp_root: int | None = None
    future: concurrent.futures.Future[Any] | None = None


@dataclass
class _Stats:
    components: dict[str, dict[str, float]] = field(default_factory=dict)
    transactions: list[TransactionInfo] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def add(self, component: str, **values: float) -> None:
        row = self.components.setdefault(
            component, {"executed": 0, "emitted": 0, "acked": 0, "failed": 0, "errors": 0}
        )
        for key, value in values.items():
            row[key] = row.get(key, 0) + value


class TopologyRunner:
    """Runs one topology on a SparkContext until killed or failed."""

    def __init__(
        self,
        name: str,
        conf: Mapping[str, Any] | None,
        topology: StormTopology,
        spark: Any,
        *,
        clock: Clock | None = None,
        on_transaction: Callable[[TransactionInfo], None] | None = None,
        faults: Any = None,
    ) -> None:
        if not isinstance(name, str) or not name or "/" in name:
            msg = f"topology name must be a non-empty string without '/', got {name!r}"
            raise TopologyError(msg)
        if not isinstance(topology, StormTopology):
            msg = f"expected a StormTopology from create_topology(), got {type(topology).__name__}"
            raise TopologyError(msg)
        self.name = name
        self.tc: TopologyConfig = validate_config(conf)
        self.conf: dict[str, Any] = {**dict(conf or {}), "topology.name": name}
        if self.tc.extlib_dir:
            self.conf["topology.state.extlib.dir"] = self.tc.extlib_dir
        self.topology = topology
        self.plan = ExecutionPlan(topology)
        self.spark = spark
        self.sc = spark.sparkContext
        self.clock = clock or Clock()
        self.on_transaction = on_transaction
        self.faults = faults if faults is not None else FaultPlan.from_conf(self.conf)
        self.stats = _Stats()
        self.provider = get_provider(self.conf) if topology.has_stateful_bolt else None
        self._driver_owned = isinstance(self.provider, DriverOwnedStateProvider)

        from pyspark import cloudpickle

        try:
            blob = cloudpickle.dumps(topology)
        except Exception as exc:
            msg = f"topology {name!r} cannot be serialized for Spark: {exc}"
            raise TopologyError(msg) from exc
        self._topology_blob = self.sc.broadcast(blob)
        self._broadcast_released = False
        self._ship_extlib()

        # Root ids (spout and checkpoint tuples) count up from 1. Storm draws them at random
        # because many executors make them; here one driver thread does, so a count is unique
        # for the run, and small ints are cheaper to make, ship and look up than 63-bit ones.
        # A root id never outlives its driver: a restarted one may count from 1 again.
        self._root_ids = itertools.count(1).__next__
        self._tracking = self.tc.tracking
        self._batches: dict[tuple[int, int, int, int, int], tuple[list[Any], ...]] = {}
        self._buffered = 0
        self._buffer_roots: list[int] = []
        self._roots: dict[int, _Root] = {}
        self._timeouts: RotatingMap[int, _Root] = RotatingMap(2, self._expire)
        self._awaiting: dict[int, list[int]] = {}
        self._cp_emits: list[Any] = []
        self._last_batch_ms: float | None = None
        self._plain_txid = 0
        self._consecutive_failures = 0
        self._recovered: tuple[int, list[Any]] | None = None
        self._manifest_warned = False
        self._backend_down_since: float | None = None
        self._backend_attempts = 0
        self._not_before = 0.0
        self._filling_since: float | None = None
        self._next_rotate = 0.0
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix=f"sb-{name}-job")
        self._job: _Job | None = None
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._idle = threading.Event()
        self._done = threading.Event()
        self.error: BaseException | None = None

        self._spouts: list[_SpoutTask] = []
        for cid, spec in sorted(topology.spouts.items()):
            if cid == CHECKPOINT_COMPONENT_ID:
                continue
            c = self.plan.index[cid]
            for t in range(spec.parallelism):
                instance = cloudpickle.loads(cloudpickle.dumps(spec.obj))
                router = Router(self.plan, c, t)
                self._spouts.append(_SpoutTask(c, t, instance, router, cid, len(self._spouts)))
        self.cp: CheckpointSpout | None = None
        self._thread = threading.Thread(target=self._main, name=f"sb-{name}", daemon=True)

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Open the spouts and start the driver loop in a thread."""
        self._open()
        self._thread.start()

    def _open(self) -> None:
        """Open the spouts, then the checkpoint spout; if anything fails, close what opened."""
        opened: list[_SpoutTask] = []
        try:
            self._open_all(opened)
        except BaseException:
            self._close_spouts(opened)
            self._release_broadcast()
            raise

    def _release_broadcast(self) -> None:
        """Drop the topology's broadcast (its JVM blocks and the driver's temp file), once.

        Called when no job can need it any more: after the loop ended, or a failed open.
        """
        if self._broadcast_released:
            return
        self._broadcast_released = True
        if self.sc._jsc is None:  # the SparkContext was stopped, and its broadcasts with it
            return
        self._topology_blob.destroy()

    def _open_all(self, opened: list[_SpoutTask]) -> None:
        for st in self._spouts:
            st.context = TopologyContext(self.topology, self.name, st.name, st.task)
            try:
                st.spout.open(self.conf, st.context, _Collector(self, st))
                opened.append(st)
                st.spout.activate()
            except Exception as exc:
                task_id = st.context.this_task_id
                msg = f"spout {st.name!r} task {task_id} failed in open: {exc}"
                raise TopologyFailedError(msg, component=st.name, task=task_id) from exc
        if self.topology.has_stateful_bolt:
            cp = CheckpointSpout(self.clock)
            c = self.plan.index[CHECKPOINT_COMPONENT_ID]
            st = _SpoutTask(c, 0, cp, Router(self.plan, c, 0), CHECKPOINT_COMPONENT_ID)
            st.context = TopologyContext(self.topology, self.name, CHECKPOINT_COMPONENT_ID, 0)
            self._cp_task = st
            cp.open(self.conf, st.context, _CheckpointCollector(self, st))
            self.cp = cp
            self._load_manifest()

    def kill(self, timeout: float | None = 60) -> None:
        """Stop the loop after the running job, close the spouts."""
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)
        self._pool.shutdown(wait=True)

    @property
    def done(self) -> bool:
        """Whether the loop has ended (killed or failed)."""
        return self._done.is_set()

    def await_idle(self, timeout: float | None = None) -> None:
        """Block until the topology is idle; raise its error if it failed."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self.error is not None:
                raise self.error
            if self._idle.wait(0.05):
                with self._lock:
                    if self._idle.is_set():
                        return
            if self.done:
                if self.error is not None:
                    raise self.error
                msg = f"topology {self.name!r} was killed before it became idle"
                raise TopologyFailedError(msg)
            if deadline is not None and time.monotonic() > deadline:
                msg = f"topology {self.name!r} not idle after {timeout} s: {self.status()}"
                raise TimeoutError(msg)

    def status(self) -> dict[str, Any]:
        """A snapshot of where the topology is."""
        with self._lock:
            return {
                "checkpoint": str(self.cp.cur) if self.cp else None,
                "recovering": self.cp.recovering if self.cp else False,
                "buffered": self._buffered,
                "live_roots": len(self._roots),
                "awaiting_commit": sum(len(v) for v in self._awaiting.values()),
                "job": f"{self._job.action}({self._job.txid})" if self._job else None,
            }

    # ----------------------------------------------------------------- spout side
    def _spout_emit(
        self,
        st: _SpoutTask,
        values: Sequence[Any],
        message_id: Any = None,
        stream: str = DEFAULT_STREAM,
    ) -> None:
        info = st.streams.get(stream)
        if info is None:
            info = self._stream_info(st, stream)
        s, width, shuffle, slots = info
        if len(values) != width:
            fields = self.plan.fields[st.comp][s]
            msg = (
                f"spout {st.name!r} emitted {len(values)} values on stream {stream!r}, which "
                f"declares {width} fields {fields.to_list()}"
            )
            raise TopologyError(msg)
        tracked = message_id is not None and self._tracking
        batches = self._batches
        value = values[0] if width == 1 else list(values)
        # The tree's root id; its tuples' own ids are made by the tasks they are delivered to.
        root = self._root_ids() if tracked else 0
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
        self._buffered += 1
        st.emitted += 1
        if root and sent:
            self._roots[root] = (st.index, message_id)
            self._buffer_roots.append(root)
            st.live += 1
        elif message_id is not None:
            st.spout.ack(message_id)  # untracked, or a tree with no edges: complete at once
            self.stats.add(st.name, acked=1)

    def _stream_info(
        self, st: _SpoutTask, stream: str
    ) -> tuple[int, int, list[Any] | None, list[Any]]:
        """What ``_spout_emit`` needs to know of one stream of one spout task, kept per name."""
        plan = self.plan
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

    def _new_id(self) -> int:
        return self._root_ids()

    def _record_error(self, component: str, error: BaseException) -> None:
        text = f"{component}: {type(error).__name__}: {error}"
        log.warning("error reported by %s", text)
        self.stats.errors.append(text)
        self.stats.add(component, errors=1)

    def _gather(self) -> int:
        """Calls of ``next_tuple``, a burst per spout task in turn; returns tuples emitted.

        A burst is up to ``_GATHER_ROUNDS`` calls, fewer if a call emits nothing, the task
        reaches ``topology.max.spout.pending`` or the buffer is full: one call per loop step
        spent more time on the step than on the spout.
        """
        if not self._may_gather():
            return 0
        emitted = 0
        limit = self.tc.max_spout_pending or 0
        for st in self._spouts:
            next_tuple = st.spout.next_tuple
            start = st.emitted
            try:
                for _ in range(_GATHER_ROUNDS):
                    if (limit and st.live >= limit) or self._buffered >= _MAX_BUFFER:
                        break
                    before = st.emitted
                    next_tuple()
                    if st.emitted == before:
                        break
            except Exception as exc:
                task_id = self.plan.task_ids[st.comp][st.task]
                msg = f"spout {st.name!r} task {task_id} raised in next_tuple: {exc}"
                raise TopologyFailedError(msg, component=st.name, task=task_id) from exc
            emitted += st.emitted - start
        return emitted

    # ----------------------------------------------------------------- the transaction manifest
    # What makes a driver crash after the commit decision cost nothing: before COMMITTING(t) is
    # saved, the message ids that transaction t carried are saved with it (one commit of the
    # checkpoint spout's state). A restarted driver that finishes COMMIT(t), or finds COMMITTED(t)
    # already saved, acks exactly those messages at their spouts before calling any spout, so a
    # durable spout does not deliver them again.

    def _put_manifest(self, txid: int) -> None:
        cp = self.cp
        # A driver-owned provider's data dies with the driver, so no restart could read it: the
        # manifest would cost encoding every message id of the transaction for nothing.
        if cp is None or cp.state is None or self._driver_owned:
            return
        # Message ids grouped per spout task: [[component, task, [msg_id, ...]], ...].
        by_task = _ids_per_task(map(self._roots.get, self._awaiting.get(txid, [])))
        spouts = [[self._spouts[i].name, self._spouts[i].task, ids] for i, ids in by_task.items()]
        try:
            cp.state.put(MANIFEST_KEY, {"txid": txid, "spouts": spouts})
        except StateSerializationError as exc:
            if not self._manifest_warned:
                log.warning(
                    "spout message ids cannot be saved (%s); a driver crash between a commit "
                    "and its spout acks will replay that transaction (at-least-once)",
                    exc,
                )
                self._manifest_warned = True
            cp.state.put(MANIFEST_KEY, {"txid": txid, "spouts": None})

    def _load_manifest(self) -> None:
        """After opening: keep the saved manifest if its transaction may have committed."""
        cp = self.cp
        if cp is None or cp.state is None:
            return
        saved = cp.state.get(MANIFEST_KEY)
        if not isinstance(saved, dict) or saved.get("txid") != cp.cur.txid:
            return
        groups = saved.get("spouts")
        if groups is None or cp.cur.phase is TxPhase.PREPARING:
            return
        self._recovered = (int(saved["txid"]), list(groups))
        if cp.cur.phase is TxPhase.COMMITTED:
            self._ack_recovered(cp.cur.txid)

    def _ack_recovered(self, txid: int) -> None:
        if self._recovered is None or self._recovered[0] != txid:
            return
        tasks = {(st.name, st.task): st for st in self._spouts}
        delivered = 0
        for component, task, msg_ids in self._recovered[1]:
            st = tasks.get((component, task))
            if st is not None:
                for msg_id in msg_ids:
                    st.spout.ack(msg_id)
                delivered += len(msg_ids)
        self._recovered = None
        log.info("txid %s had committed: acked its %d spout tuples", txid, delivered)

    def _may_gather(self) -> bool:
        # While recovering, a crashed run's messages may still be acked by the recovery (see
        # the manifest); gathering now could replay them first. Without a manifest to deliver
        # (a fresh start, or a crash before the commit decision) the spouts need not wait.
        return self.cp is None or not self.cp.recovering or self._recovered is None

    def _settle_acks(self, roots: Sequence[int]) -> None:
        # Message ids per spout task first, then each task's acks in one C-level loop.
        per_task = _ids_per_task(map(self._roots.pop, roots, itertools.repeat(None)))
        for index, ids in per_task.items():
            st = self._spouts[index]
            st.live -= len(ids)
            collections.deque(map(st.spout.ack, ids), maxlen=0)
            self.stats.add(st.name, acked=len(ids))

    def _settle_fail(self, root: int) -> None:
        r = self._roots.pop(root, None)
        if r is not None:
            self._timeouts.remove(root)
            st = self._spouts[r[0]]
            st.live -= 1
            st.spout.fail(r[1])
            self.stats.add(st.name, failed=1)

    def _expire(self, root: int, r: _Root) -> None:
        if self._roots.get(root) is r:
            log.info("tuple %r of spout %s timed out; failing it", r[1], self._spouts[r[0]].name)
            self._settle_fail(root)

    def _tick(self) -> None:
        if not self.tc.enable_message_timeouts:
            return
        now = self.clock.now_ms()
        period = self.tc.message_timeout_secs * 1000.0
        if self._next_rotate == 0.0:
            self._next_rotate = now + period
        while now >= self._next_rotate:
            self._timeouts.rotate()
            self._next_rotate += period

    # ----------------------------------------------------------------- the loop
    def _main(self) -> None:
        yielded = time.perf_counter()
        try:
            while not self._stop.is_set():
                progressed = self._step()
                if not progressed:
                    self._wait_a_little()
                    yielded = time.perf_counter()
                elif self._job is not None and time.perf_counter() - yielded > _GATHER_SLICE:
                    # Gathering holds the GIL; the thread submitting the Spark job needs it for
                    # every py4j reply and would otherwise wait a whole switch interval (5 ms)
                    # each time. A short sleep hands it over.
                    time.sleep(_GATHER_PAUSE)
                    yielded = time.perf_counter()
        except BaseException as exc:  # noqa: BLE001 - kept and re-raised to the caller
            log.error("topology %s stopped: %s", self.name, exc)
            self.error = exc
        finally:
            self._drain_job()
            self._close_spouts(self._spouts)
            self._release_broadcast()
            self._done.set()

    @staticmethod
    def _close_spouts(spouts: Sequence[_SpoutTask]) -> None:
        for st in spouts:
            try:
                st.spout.deactivate()
                st.spout.close()
            except Exception:  # noqa: BLE001 - closing must not hide the real error
                log.exception("spout %s failed to close", st.name)

    def _wait_a_little(self) -> None:
        job = self._job
        if job is not None and job.future is not None:
            concurrent.futures.wait([job.future], timeout=0.002)
        else:
            self._stop.wait(0.002)

    def _drain_job(self) -> None:
        job = self._job
        if job is not None and job.future is not None:
            try:
                job.future.result()
            except Exception:  # noqa: BLE001 - the topology is stopping; the job is abandoned
                log.info("job %s(%s) ended with an error while stopping", job.action, job.txid)
            self._job = None

    def _step(self) -> bool:
        with self._lock:
            self._tick()
            job = self._job
            if job is not None:
                assert job.future is not None  # noqa: S101
                if job.future.done():
                    self._finish(job)
                    self._job = None
                    return True
                return self._gather() > 0
            gathered = self._gather()
            if self.clock.now_ms() < self._not_before:
                return gathered > 0
            if self._start_next_job(gathered):
                self._idle.clear()
                return True
            idle = (
                gathered == 0
                and not self._buffered
                and not self._roots
                and (
                    self.cp is None
                    or (not self.cp.recovering and self.cp.cur.phase is TxPhase.COMMITTED)
                )
            )
            if idle:
                self._idle.set()
            else:
                self._idle.clear()
            return gathered > 0

    def _filling_first(self, gathered: int) -> bool:
        """Whether to hold the first transaction since the start back: the spouts still produce.

        Storm sends the first PREPARE as soon as recovery ends, and its tuples flow between
        checkpoints anyway. Here data moves only with a transaction, and the next PREPARE may not
        start until one interval after this one: a first transaction cut after a few ms of
        gathering left the rest of a burst waiting most of an interval while Spark idled. So the
        first transaction, like every later one, carries up to one interval of data, and goes
        at once when the spouts go quiet (a gathering step emitted nothing, or the buffer is
        full).
        """
        if not gathered or self._buffered >= _MAX_BUFFER:
            return False
        now = self.clock.now_ms()
        if self._filling_since is None:
            self._filling_since = now
        return now - self._filling_since <= self.tc.checkpoint_interval_ms

    def _start_next_job(self, gathered: int = 0) -> bool:
        cp = self.cp
        if cp is None:
            due = self._last_batch_ms is None or (
                self.clock.now_ms() - self._last_batch_ms > self.tc.checkpoint_interval_ms
            )
            if not (self._buffered and due):
                return False
            if self._last_batch_ms is None and self._filling_first(gathered):
                return False
            self._last_batch_ms = self.clock.now_ms()
            self._plain_txid += 1
            self._submit(self._plain_txid, None)
            return True
        needs_recovery = cp.recovering or cp.cur.phase is not TxPhase.COMMITTED
        if not needs_recovery and not self._buffered:
            return False  # nothing to checkpoint: skip empty PREPAREs
        if not cp.due():
            return False
        if not needs_recovery and not cp.has_checkpointed and self._filling_first(gathered):
            return False
        self._with_backend("starting a checkpoint", cp.next_tuple)
        if not self._cp_emits:
            return False
        txid, action = self._cp_emits.pop()
        self._cp_emits.clear()
        self._submit(txid, action)
        return True

    def _checkpoint_records(self, txid: int, action: str) -> tuple[list[list[Any]], int]:
        """The checkpoint tuple of a job, per first-stage slot (PREPARE) or per stateful task."""
        plan = self.plan
        root = self._new_id()
        vals = [txid, action]
        if action == Action.PREPARE.value:
            st = self._cp_task
            slots: list[list[Any]] = [[] for _ in plan.levels[0].slots]
            for dest, dtask in st.router.targets(st.comp, 0, vals):
                rec = (TUPLE, dest, dtask, st.comp, st.task, 0, [vals], [root], None)
                slots[plan.key_for(-1, dest, dtask)].append(rec)
            return slots, root
        per_task: list[list[Any]] = []
        for c, t in plan.stateful_tasks():
            recs = []
            for inp in self.topology.inputs(plan.component_ids[c]):
                if inp.source.stream_id != CHECKPOINT_STREAM_ID:
                    continue
                src = plan.index[inp.source.component_id]
                s = plan.checkpoint_stream[src]
                for src_task in range(plan.parallelism[src]):
                    recs.append((TUPLE, c, t, src, src_task, s, [vals], [root], None))
            per_task.append(recs)
        return per_task, root

    def _submit(self, txid: int, action: str | None) -> None:
        plan = self.plan
        carries_data = action in (None, Action.PREPARE.value)
        records: list[Any] = []
        roots: list[int] = []
        if carries_data:
            records = [
                (TUPLE, dest, dtask, src, stask, s, vals, id_column(roots_), None)
                for (dest, dtask, src, stask, s), (vals, roots_) in self._batches.items()
            ]
            self._batches, self._buffered = {}, 0
            for st in self._spouts:  # their batch slots point into the buffer just taken
                for info in st.streams.values():
                    info[3][:] = [None] * len(info[3])
            roots, self._buffer_roots = self._buffer_roots, []
        job = _Job(txid, action, roots, len(roots), time.perf_counter())
        if plan.depth == 0:
            future: concurrent.futures.Future[Any] = concurrent.futures.Future()
            future.set_result([({}, set(), [])])
            job.future = future
            self._job = job
            return
        cp_slots: list[list[Any]] = []
        if action is not None:
            cp_slots, job.cp_root = self._checkpoint_records(txid, action)
        images: dict[str, bytes] = {}
        if self._driver_owned:
            assert isinstance(self.provider, DriverOwnedStateProvider)  # noqa: S101
            for c, t in plan.stateful_tasks():
                ns = f"{self.name}/{plan.component_ids[c]}-{t}"
                images[ns] = self.provider.export_image(ns)
        env = TaskEnv(
            plan=plan,
            topology_name=self.name,
            conf=self.conf,
            txid=txid,
            action=action,
            ackers=self.tc.acker_partitions,
            images=images,
            provider=self.tc.state_provider,
            faults=self.faults,
        )
        description = f"{self.name} {action or 'BATCH'}({txid}) {len(roots)} tuples"
        blob = self._topology_blob
        sc = self.sc
        if carries_data:
            first: list[list[Any]] = [[] for _ in plan.levels[0].slots]
            key_for = plan.key_for
            for r in records:
                first[key_for(-1, r[1], r[2])].append(r)
            for slot, recs in enumerate(cp_slots):
                first[slot].extend(recs)

            def work() -> Any:
                sc.setJobDescription(description)
                return run_job(sc, env, blob, first)

        else:

            def work() -> Any:
                sc.setJobDescription(description)
                return run_flat_job(sc, env, blob, cp_slots)

        job.future = self._pool.submit(work)
        self._job = job
        log.debug("submitted %s", description)

    # ----------------------------------------------------------------- results
    def _finish(self, job: _Job) -> None:
        assert job.future is not None  # noqa: S101
        exc = job.future.exception()
        seconds = time.perf_counter() - job.started
        if exc is not None:
            self._job_failed(job, exc, seconds)
            return
        parts = job.future.result()
        if len(parts) == 1:  # the driver-side acker: already one ledger
            acks, fails, side = parts[0]
        else:
            acks, fails, side = {}, set(), []
            for part_acks, part_fails, part_side in parts:
                for root, x in part_acks.items():
                    acks[root] = acks.get(root, 0) ^ x
                fails.update(part_fails)
                side.extend(part_side)
        errors: list[str] = []
        for rec in side:
            kind = rec[0]
            if kind == STATE and self._driver_owned:
                self.provider.apply_changes(rec[1], rec[2])  # type: ignore[union-attr]
            elif kind == METRICS:
                m = rec[3]
                self.stats.add(
                    self.plan.component_ids[rec[1]],
                    executed=m["executed"],
                    emitted=m["emitted"],
                    acked=m["acked"],
                    failed=m["failed"],
                    seconds=m["seconds"],
                )
            elif kind == ERROR:
                name = self.plan.component_ids[rec[1]]
                task_id = self.plan.task_ids[rec[1]][rec[2]]
                text = f"component {name!r} task {task_id}: {rec[3]}"
                log.warning("txid %s: %s", job.txid, text)
                errors.append(text)
                self.stats.errors.append(text)
                self.stats.add(name, errors=1)

        # A root the tasks reported nothing for had every tuple of its tree acked exactly once
        # (see ``statefulbolts.acker``): complete, unless it was failed.
        cp_ok = True
        if job.cp_root is not None:
            cp_ok = job.cp_root not in fails and not acks.get(job.cp_root, 0)
        failed = 0
        complete: list[int] = []
        roots = self._roots
        if cp_ok and not fails and not acks:
            complete = job.roots  # the usual outcome: nothing left open, nothing failed
        else:
            for root in job.roots:
                r = roots.get(root)
                if r is None:
                    continue
                if root in fails or not cp_ok:
                    self._settle_fail(root)
                    failed += 1
                elif not acks.get(root, 0):
                    complete.append(root)
                else:
                    self._timeouts.put(root, r)  # incomplete: it fails when the timeout runs out
        acked = len(complete)
        if self.cp is not None:
            if complete:
                self._awaiting.setdefault(job.txid, []).extend(complete)  # acked at COMMIT
        else:
            self._settle_acks(complete)

        faults = self.faults
        is_prepare = job.action == Action.PREPARE.value
        cp = self.cp
        if cp is not None:
            if cp_ok:
                if faults is not None and is_prepare:
                    faults.on_driver(KillPoint.AFTER_PREPARE, job.txid)
                if is_prepare:
                    self._put_manifest(job.txid)
                what = f"saving checkpoint state after {job.action}({job.txid})"
                self._with_backend(what, lambda: cp.ack(job.txid))
                if faults is not None and is_prepare:
                    faults.on_driver(KillPoint.AFTER_COMMITTING_SAVED, job.txid)
            else:
                self._with_backend("recording a failed checkpoint", lambda: cp.fail(job.txid))
        if cp_ok:
            if job.action == Action.COMMIT.value:
                self._consecutive_failures = 0
                self._backend_down_since = None
                if faults is not None:
                    faults.on_driver(KillPoint.AFTER_COMMITTED, job.txid)
                self._settle_acks(self._awaiting.pop(job.txid, []))
                self._ack_recovered(job.txid)
            elif job.action == Action.ROLLBACK.value:
                for txid in list(self._awaiting):
                    for root in self._awaiting.pop(txid):
                        self._settle_fail(root)
        else:
            cause = errors[-1] if errors else "a checkpoint tuple was failed"
            self._count_failure(job, cause, None, None)
        info = TransactionInfo(job.txid, job.action, job.tuples, seconds, cp_ok, acked, failed)
        if not cp_ok:
            info.error = errors[-1] if errors else "checkpoint failed"
        self._record(info)

    def _job_failed(self, job: _Job, exc: BaseException, seconds: float) -> None:
        text = str(exc)
        match = _TASK_ERROR.search(text)
        if match:
            component, task, cause = match.group(1), int(match.group(2)), match.group(4)
        else:
            component, task = None, None
            lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
            picked = [ln for ln in lines if "Error" in ln or "Exception" in ln or "crash" in ln]
            cause = (picked or lines or [type(exc).__name__])[0][:500]
        log.warning(
            "%s(%s) failed (%s): %s", job.action or "BATCH", job.txid, component or "spark", cause
        )
        for root in job.roots:
            self._settle_fail(root)
        if self.cp is not None and job.cp_root is not None:
            cp = self.cp
            self._with_backend("recording a failed checkpoint", lambda: cp.fail(job.txid))
        self._record(
            TransactionInfo(
                job.txid, job.action, job.tuples, seconds, False, 0, len(job.roots), cause
            )
        )
        self._count_failure(job, cause, component, task)

    def _count_failure(
        self, job: _Job, cause: str, component: str | None, task: int | None
    ) -> None:
        if "StateBackendError" in cause:
            self._backend_failure(job, cause)
            return
        self._consecutive_failures += 1
        n = self._consecutive_failures
        if n > self.tc.max_transaction_retries:
            where = f"component {component!r} task {task}" if component else "the Spark job"
            msg = (
                f"topology {self.name!r} stopped: {job.action or 'BATCH'}({job.txid}) failed "
                f"{n} times in a row (topology.max.transaction.retries = "
                f"{self.tc.max_transaction_retries}); last failure in {where}: {cause}"
            )
            raise TopologyFailedError(
                msg, component=component, task=task, txid=job.txid, cause=cause
            )
        backoff = min(0.1 * 2 ** (n - 1), 5.0)
        log.info("retrying txid %s in %.1f s (attempt %d)", job.txid, backoff, n + 1)
        self._not_before = self.clock.now_ms() + backoff * 1000.0

    def _backend_failure(self, job: _Job, cause: str) -> None:
        """The state store failed: wait for it (with backoff) instead of counting a retry."""
        now = self.clock.now_ms()
        if self._backend_down_since is None:
            self._backend_down_since = now
            self._backend_attempts = 0
        self._backend_attempts += 1
        waited = (now - self._backend_down_since) / 1000.0
        limit = self.tc.state_backend_timeout_secs
        if waited > limit:
            msg = (
                f"topology {self.name!r} stopped: the state backend failed for {waited:.0f} s "
                f"(topology.state.backend.timeout.secs = {limit}); last error: {cause}"
            )
            raise TopologyFailedError(msg, txid=job.txid, cause=cause)
        backoff = min(0.25 * 2 ** (self._backend_attempts - 1), 5.0)
        log.warning(
            "waiting %.1f s for the state backend before retrying %s(%s) (down for %.1f s): %s",
            backoff,
            job.action or "BATCH",
            job.txid,
            waited,
            cause,
        )
        self._not_before = now + backoff * 1000.0

    def _with_backend(self, what: str, call: Callable[[], Any]) -> Any:
        """Run a driver-side state call, waiting out a state backend outage.

        The outage is timed from its first failure, driver-side or in a job, so the two kinds of
        waiting share one ``topology.state.backend.timeout.secs``.
        """
        attempt = 0
        while True:
            try:
                result = call()
            except StateBackendError as exc:
                attempt += 1
                now = self.clock.now_ms()
                if self._backend_down_since is None:
                    self._backend_down_since = now
                    self._backend_attempts = 0
                waited = (now - self._backend_down_since) / 1000.0
                limit = self.tc.state_backend_timeout_secs
                if self._stop.is_set():
                    raise
                if waited > limit:
                    cause = f"{type(exc).__name__}: {exc}"
                    msg = (
                        f"topology {self.name!r} stopped: the state backend failed for "
                        f"{waited:.0f} s (topology.state.backend.timeout.secs = {limit}) while "
                        f"{what}; last error: {cause}"
                    )
                    raise TopologyFailedError(msg, cause=cause) from exc
                backoff = min(0.25 * 2 ** (attempt - 1), 5.0)
                log.warning(
                    "%s: state backend unavailable for %.1f s, retrying in %.1f s: %s",
                    what,
                    waited,
                    backoff,
                    exc,
                )
                self.clock.sleep(backoff)
            else:
                if attempt:
                    # It failed and now answered: the outage is over. A call that never failed
                    # proves nothing (cp.fail does not even touch the store).
                    self._backend_down_since = None
                return result

    def _record(self, info: TransactionInfo) -> None:
        self.stats.transactions.append(info)
        if len(self.stats.transactions) > 10_000:
            del self.stats.transactions[:5_000]
        if self.on_transaction is not None:
            self.on_transaction(info)

    # ----------------------------------------------------------------- reading
    def read_state(self, component_id: str) -> dict[Any, Any]:
        """The state of a stateful component, merged over its tasks."""
        spec = self.topology.component(component_id)
        if not spec.is_stateful:
            msg = f"component {component_id!r} is not a stateful bolt"
            raise TopologyError(msg)
        merged: dict[Any, Any] = {}
        with self._lock:
            for t in range(spec.parallelism):
                ns = f"{self.name}/{component_id}-{t}"
                state = StateFactory.get_state(ns, self.conf)
                assert isinstance(state, KeyValueState)  # noqa: S101
                for key, value in state:
                    merged[_hashable(key)] = value
        return merged

    def metrics(self) -> dict[str, Any]:
        """Per component counters and per transaction figures."""
        with self._lock:
            comps = {k: dict(v) for k, v in self.stats.components.items()}
            spout_emits: dict[str, int] = {}
            for st in self._spouts:
                spout_emits[st.name] = spout_emits.get(st.name, 0) + st.emitted
            for name, emitted in spout_emits.items():
                comps.setdefault(name, {})["emitted"] = emitted
            return {
                "components": comps,
                "transactions": [t.as_dict() for t in self.stats.transactions],
                "errors": list(self.stats.errors),
                "status": self.status(),
            }

    def _ship_extlib(self) -> None:
        """Send every extlib folder to the executors as a zip on their ``sys.path``.

        Each folder is zipped once per version (newest mtime) into this process's temporary
        directory, removed at exit, and added once per SparkContext.
        """
        import zipfile

        from providers import add_extlib_to_path

        shipped = _SHIPPED_EXTLIB.setdefault(id(self.sc), set())
        for folder in add_extlib_to_path(self.conf):
            files = [p for p in folder.rglob("*.py") if "__pycache__" not in p.parts]
            stamp = (str(folder), max((p.stat().st_mtime_ns for p in files), default=0))
            if not files or stamp in shipped:
                continue
            shipped.add(stamp)
            name = _extlib_zip_dir() / f"extlib-{abs(hash(stamp)):x}.zip"
            if not name.exists():
                with zipfile.ZipFile(name, "w") as zf:
                    for path in files:
                        zf.write(path, path.relative_to(folder).as_posix())
            self.sc.addPyFile(str(name))


class _CheckpointCollector(_Collector):
    """Records the checkpoint spout's emits; the runner routes them (see ``_submit``)."""

    def emit(
        self, values: Sequence[Any], message_id: Any = None, stream: str = DEFAULT_STREAM
    ) -> None:
        self._runner._cp_emits.append((int(values[0]), str(values[1])))


def _hashable(key: Any) -> Any:
    if isinstance(key, list):
        return tuple(_hashable(k) for k in key)
    return key
