"""``WindowedBoltExecutor``: runs a windowed bolt through the checkpoint protocol.

``TopologyBuilder.set_bolt`` wraps every ``BaseWindowedBolt`` in this executor, a
``StatefulBolt``: the topology is checkpointed and the runtime drives the executor as any
stateful bolt (``checkpoint.StatefulBoltExecutor``). On this runtime a task lives for one
transaction, so the windows cannot live in a task's memory: they live in the state provider,
in the task's window namespace (``statefulbolts.namespaces.window_namespace``), prepared,
committed and rolled back with the checkpoint. What is stored there:

==================  =====================================================================
key                 value
==================  =====================================================================
``"manager"``       the ``WindowManager`` snapshot (its items are event ids), the next
                    event id, the ids of the last window fired, and the released ids kept
                    for that window's successor (its ``get_expired()``)
``"event/<id>"``    one held tuple: values, fields, source component, task and stream
``"generation"``    a token new in every transaction that changed the windows: names the
                    committed windows a process may still hold warm (below)
``"lineage"``       the last 16 such tokens that committed, the newest last
==================  =====================================================================

The steps, per transaction of a task:

1. Time: processing time is the transaction's start time (``begin_transaction``), fixed by
   the driver and the same in every replay. Each tuple and each tick tuple first advances the
   manager to it (``on_time``): due windows fire, due watermarks are emitted. The executor asks
   for tick tuples itself (``get_component_configuration``), so windows fire on an idle input.
2. A data tuple gets the next event id, is stored, and is added to the manager with its
   timestamp (processing time: the transaction's; event time: its timestamp field).
3. Carry out the manager's update: run each fired window (``execute(window)``, its tuples read
   from memory or the provider), emit late tuples on the late stream, delete released tuples
   once no window to come can show them.
4. Ack: a tuple is acked in the transaction that carried it, once it is held by the window
   state that transaction commits (or was late, or left every window). The driver acks its
   spout tuple when that transaction commits. Storm's executor acks a tuple only when it leaves
   its last window, which ties the window to ``topology.max.spout.pending`` and the message
   timeout; here the commit makes the tuple durable, so neither limits the window.
5. PREPARE(t): the manager's snapshot is written and the window state prepared; COMMIT(t)
   commits it; ROLLBACK rolls it back. A replayed transaction starts from the last commit, so
   a window fires in exactly one committed transaction: the window index it has (``Window.index``)
   is counted in the committed snapshot.

Memory: at most ``topology.state.windowing.max.events.in.memory`` held tuples are kept in
memory; the others are read from the provider when their window fires (and kept, within the
bound, once read).

Warm windows: a task lives for one transaction, but the process it ran in often runs the next
transaction of the same task (the inline engine always; a Spark Python worker when it is
reused). At the end of its PREPARE a task leaves its manager and its tuples in memory in a
per-process table (``_WARM``), under the ``"generation"`` token it wrote. The next task of the
same window namespace takes them only if the committed token is that one: the windows it would
read from the provider are exactly those. A replay after a rollback, a commit made by another
attempt or another process, or a token never committed: the token differs, and the task reads
the windows' snapshot from the provider. Their tuples it still takes from the warm entry if
its token is in the committed ``"lineage"``: an older commit's tuples are the provider's, since
a committed event id is never given again (a rolled-back one is). The entry is taken out of
the table before use, so a task that fails halfway leaves nothing behind. The table keeps the
``_WARM_TASKS`` most recent namespaces.
"""

from __future__ import annotations

import collections
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from statefulbolts.collectors import Anchors, OutputCollector
from statefulbolts.components import OutputFieldsDeclarer, StatefulBolt
from statefulbolts.config import Config, read_setting
from statefulbolts.namespaces import TaskNamespace, window_namespace
from statefulbolts.ticks import TICK_FREQ_KEY, is_tick_tuple
from statefulbolts.tuples import DEFAULT_STREAM, Fields, Tuple
from statefulbolts.windowing._bolt import LATE_TUPLE_FIELD, BaseWindowedBolt
from statefulbolts.windowing._config import Duration, WindowConfig
from statefulbolts.windowing._errors import WindowingError, WindowStateError, WindowTimeError
from statefulbolts.windowing._manager import WindowManager, WindowUpdate
from statefulbolts.windowing._stateful import BaseStatefulWindowedBolt
from statefulbolts.windowing._window import Window

if TYPE_CHECKING:
    from providers import KeyValueState
    from statefulbolts.context import TopologyContext

__all__ = ["WindowedBoltExecutor", "holds_window_tuples", "tick_secs_for"]

MAX_EVENTS_KEY = Config.TOPOLOGY_STATE_WINDOWING_MAX_EVENTS_IN_MEMORY
_MANAGER_KEY = "manager"
_GENERATION_KEY = "generation"
_LINEAGE_KEY = "lineage"
# How many committed generations the window state names (module: "Warm windows").
_LINEAGE = 16
_EVENT_PREFIX = "event/"
# How many tasks' windows one process keeps warm between transactions (module: "Warm windows").
_WARM_TASKS = 64
_STORED_FORMAT = 1
# ``statefulbolts.topology.CHECKPOINT_STREAM_ID``, the barrier input every checkpointed bolt
# has; imported, it would close a circle (the topology module wraps windowed bolts in this).
_BARRIER_STREAM = "$checkpoint"


def tick_secs_for(config: WindowConfig) -> int | None:
    """Seconds between the tick tuples a window needs; ``None`` if only tuples move it.

    Event time needs a tick per watermark interval, a window sliding by time one per sliding
    interval (processing time), each rounded down to whole seconds, at least 1. A processing
    time window that slides by count fires on its tuples alone.

    Example:
        >>> from statefulbolts.windowing import Count
        >>> tick_secs_for(WindowConfig(Duration.minutes(10), Duration.minutes(1)))
        60
        >>> tick_secs_for(WindowConfig(Count(5), Count(5), "ts", watermark_interval_ms=500))
        1
        >>> tick_secs_for(WindowConfig(Duration(5000), Count(1))) is None
        True
    """
    if config.event_time:
        interval = config.watermark_interval_ms
    elif isinstance(config.sliding, Duration):
        interval = config.sliding.value
    else:
        return None
    return max(1, interval // 1000)


def holds_window_tuples(keys: Iterable[Any]) -> bool:
    """Whether the keys of a task's stored windows include a held tuple (an open window).

    A task's windows without one hold only the manager's snapshot: the trigger state of a task
    whose windows have all closed, which a task may start without (``recovery.evolve`` gives a
    new task empty windows, and refuses to split windows that hold tuples).

    Example:
        >>> holds_window_tuples(["manager"]), holds_window_tuples(["manager", "event/7"])
        (False, True)
    """
    return any(isinstance(key, str) and key.startswith(_EVENT_PREFIX) for key in keys)


def _event_key(event_id: int) -> str:
    return f"{_EVENT_PREFIX}{event_id}"


def _stored(tuple_: Tuple) -> list[Any]:
    return [
        list(tuple_.values),
        tuple_.fields.to_list(),
        tuple_.source_component,
        tuple_.source_task,
        tuple_.source_stream_id,
    ]


def _loaded(value: Any, where: str, known: dict[tuple[str, ...], Fields]) -> Tuple:
    """A stored tuple back: untracked (its spout tree completed when it was stored).

    ``known``: the ``Fields`` made so far, by names (a window's tuples share a few).
    """
    if not isinstance(value, list | tuple) or len(value) != 5:
        msg = f"{where}: a stored window tuple is [values, fields, component, task, stream], got "
        raise WindowStateError(msg + repr(value))
    values, names, component, task, stream = value
    key = tuple(names)
    fields = known.get(key)
    if fields is None:
        fields = known[key] = Fields(list(names))
    return Tuple(list(values), fields, component, task, stream)


@dataclass
class _Warm:
    """What a task's PREPARE left in memory: its windows as of the token it wrote."""

    generation: str
    manager: WindowManager[int]
    next_id: int
    last_window: list[int]
    kept: set[int]
    memory: collections.OrderedDict[int, Tuple]


class _WarmTable:
    """The process's warm windows, by window namespace; the most recent ``size`` of them."""

    def __init__(self, size: int) -> None:
        self._size = size
        self._lock = threading.Lock()
        self._entries: collections.OrderedDict[str, _Warm] = collections.OrderedDict()

    def leave(self, namespace: str, warm: _Warm) -> None:
        with self._lock:
            self._entries[namespace] = warm
            self._entries.move_to_end(namespace)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def take(self, namespace: str) -> _Warm | None:
        with self._lock:
            return self._entries.pop(namespace, None)


_WARM = _WarmTable(_WARM_TASKS)


def _still_held(
    memory: collections.OrderedDict[int, Tuple], snapshot: Mapping[str, Any], kept: set[int]
) -> collections.OrderedDict[int, Tuple]:
    """The tuples of an older committed generation's memory the restored windows still hold.

    Every id in that memory was given in a transaction that committed, and a committed id is
    never given again, so each tuple is the one the provider holds under its id.
    """
    wanted = {entry[2] for name in ("held", "prev") for entry in snapshot[name]} | kept
    return collections.OrderedDict((i, t) for i, t in memory.items() if i in wanted)


def _untracked(tuple_: Tuple) -> Tuple:
    """``tuple_`` as the window state gives it back: the same values and source, no anchors."""
    return Tuple(
        tuple_.values,
        tuple_.fields,
        tuple_.source_component,
        tuple_.source_task,
        tuple_.source_stream_id,
    )


class _WindowCollector(OutputCollector):
    """The collector a windowed bolt gets: emits anchored to the window's tuples by default.

    The executor acks the tuples (step 4 of the module docstring), so the bolt's ``ack`` does
    nothing; ``fail`` fails the tuple's spout tree as usual.
    """

    def __init__(self, delegate: OutputCollector) -> None:
        self._delegate = delegate
        self.anchors: list[Tuple] = []

    def emit(
        self, values: Sequence[Any], anchors: Anchors = None, stream: str = DEFAULT_STREAM
    ) -> None:
        """Emit, anchored to ``anchors`` or else to the tracked tuples of the window."""
        self._delegate.emit(values, self.anchors if anchors is None else anchors, stream)

    def ack(self, tuple_: Tuple) -> None:
        """Nothing: the executor acks every tuple a window holds."""

    def ack_input(self, tuple_: Tuple) -> None:
        """The executor's ack of a tuple it holds durably (or that left every window)."""
        self._delegate.ack(tuple_)

    def fail(self, tuple_: Tuple) -> None:
        """Fail ``tuple_``'s spout tree."""
        self._delegate.fail(tuple_)

    def report_error(self, error: BaseException) -> None:
        """Record an error against this task."""
        self._delegate.report_error(error)


class WindowedBoltExecutor(StatefulBolt):
    """A ``BaseWindowedBolt`` as a ``StatefulBolt`` (see the module docstring).

    Example:
        >>> from statefulbolts.windowing import Count
        >>> class Sum(BaseWindowedBolt):
        ...     def execute(self, window):
        ...         self.collector.emit([sum(t.get_value(0) for t in window)])
        >>> executor = WindowedBoltExecutor(Sum().with_window(Count(3), Count(1)))
        >>> print(executor.window_config)
        sliding every 1 tuples window of 3 tuples (processing time)
        >>> executor.user_bolt.__class__.__name__
        'Sum'
    """

    def __init__(self, bolt: BaseWindowedBolt) -> None:
        if not isinstance(bolt, BaseWindowedBolt):
            kind = f"{type(bolt).__module__}.{type(bolt).__qualname__}"
            msg = f"WindowedBoltExecutor runs a BaseWindowedBolt, got {kind}"
            raise TypeError(msg)
        self.user_bolt = bolt
        self.window_config = bolt.window_config()  # refuses a bolt with no or a bad window
        self._collector: _WindowCollector | None = None
        self._window_state: KeyValueState | None = None
        self._where = type(bolt).__qualname__
        self._streams: dict[tuple[str, str], str] = {}
        self._max_in_memory = 1
        self._now: int | None = None
        self._manager: WindowManager[int] | None = None
        self._next_id = 0
        self._last_window: list[int] = []  # ids of the last window fired
        self._kept: set[int] = set()  # released, still shown by the next window's expired
        self._memory: collections.OrderedDict[int, Tuple] = collections.OrderedDict()
        self._changed = False
        self._namespace = ""  # the task's window namespace (after prepare)
        self._generation: str | None = None  # the token of the windows this task started from
        self._lineage: list[str] = []  # the tokens of the last commits that changed the windows
        self._fresh: set[int] = set()  # this transaction's tracked tuples (they have anchors)
        self._fields: dict[tuple[str, ...], Fields] = {}  # one Fields per stored field list

    @property
    def stateful(self) -> bool:
        """Whether the user's bolt keeps state of its own (``BaseStatefulWindowedBolt``)."""
        return isinstance(self.user_bolt, BaseStatefulWindowedBolt)

    @property
    def window_state(self) -> KeyValueState:
        """The task's window namespace (after ``prepare``)."""
        if self._window_state is None:
            msg = f"{self._where}: the windowed bolt's executor was used before prepare"
            raise WindowingError(msg)
        return self._window_state

    # ------------------------------------------------------------------ what the topology sees

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """The bolt's streams, and the late tuple stream if it has one."""
        self.user_bolt.declare_output_fields(declarer)
        late = self.window_config.late_tuple_stream
        if late is not None and late not in declarer.streams:
            declarer.declare_stream(late, Fields(LATE_TUPLE_FIELD))

    def get_component_configuration(self) -> Mapping[str, Any] | None:
        """The bolt's own configuration, with the tick frequency its window needs.

        A tick frequency the bolt sets itself (``topology.tick.tuple.freq.secs``) wins.
        """
        own = self.user_bolt.get_component_configuration()
        secs = tick_secs_for(self.window_config)
        if secs is None or (own is not None and own.get(TICK_FREQ_KEY) is not None):
            return own
        return {**(own or {}), TICK_FREQ_KEY: secs}

    def grouping_key(self, state_key: Any) -> Any:
        """The user's bolt's, for a stateful windowed bolt's own state."""
        if isinstance(self.user_bolt, BaseStatefulWindowedBolt):
            return self.user_bolt.grouping_key(state_key)
        return state_key

    # ------------------------------------------------------------------ life

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        """Open the window namespace and prepare the user's bolt (collector as ``collector``)."""
        from providers import KeyValueState, StateFactory

        self._where = (
            f"windowed bolt {context.this_component_id!r} task {context.this_task_index} "
            f"({type(self.user_bolt).__module__}.{type(self.user_bolt).__qualname__})"
        )
        self._max_in_memory = int(read_setting(conf, MAX_EVENTS_KEY))
        task = TaskNamespace.of_topology(
            context.topology_name, context.this_component_id, context.this_task_index
        )
        sources = [s for s in context.this_sources if s.stream_id != _BARRIER_STREAM]
        self._streams = {
            (s.component_id, s.stream_id): f"{s.component_id}:{s.stream_id}" for s in sources
        }
        self._namespace = window_namespace(task)
        state = StateFactory.get_system_state(self._namespace, conf, context)
        if not isinstance(state, KeyValueState):
            msg = (
                f"{self._where}: the state provider gave the window namespace a "
                f"{type(state).__qualname__}, not a KeyValueState"
            )
            raise WindowingError(msg)
        self._window_state = state
        self._collector = _WindowCollector(collector)
        self.user_bolt.collector = self._collector  # type: ignore[attr-defined]
        self.user_bolt.prepare(conf, context, self._collector)

    def begin_transaction(self, started_ms: float | None) -> None:
        """This transaction's start time: processing time for every tuple it carries."""
        self._now = None if started_ms is None else int(started_ms)

    def init_state(self, state: KeyValueState) -> None:
        """Give a stateful windowed bolt its state; the windows are read when first needed."""
        if isinstance(self.user_bolt, BaseStatefulWindowedBolt):
            self.user_bolt.init_state(state)

    def execute(self, tuple: Tuple) -> None:  # noqa: A002 - Storm's parameter name
        """A tick advances time; a data tuple is stored, added, and acked (module steps 1-4)."""
        manager = self._restored()
        collector = self._collector
        assert collector is not None  # noqa: S101 - _restored checked prepare ran
        self._changed = True
        update: WindowUpdate[int] = self._advance(manager)
        if is_tick_tuple(tuple):
            self._carry_out(update)
            return
        stream = self._stream_of(tuple)
        if self.window_config.event_time:
            ts = self.window_config.timestamp_of(tuple)
        else:
            ts = self._processing_time()
        event_id = self._next_id
        self._next_id += 1
        self.window_state.put(_event_key(event_id), _stored(tuple))
        self._remember(event_id, tuple)
        if tuple.anchors:
            self._fresh.add(event_id)
        update = update + manager.add(event_id, ts, stream)
        self._carry_out(update)
        collector.ack_input(tuple)  # held until PREPARE succeeds (module step 4)

    def pre_prepare(self, txid: int) -> None:
        """Write the windows' snapshot and prepare the window namespace (then the bolt's hook)."""
        manager = self._manager
        if self._changed and manager is not None:
            self._generation = uuid.uuid4().hex
            self.window_state.put(
                _MANAGER_KEY,
                {
                    "format": _STORED_FORMAT,
                    "manager": manager.snapshot(),
                    "next_id": self._next_id,
                    "last_window": list(self._last_window),
                    "kept": sorted(self._kept),
                },
            )
            self.window_state.put(_GENERATION_KEY, self._generation)
            self._lineage = [*self._lineage, self._generation][-_LINEAGE:]
            self.window_state.put(_LINEAGE_KEY, self._lineage)
        self.window_state.prepare_commit(txid)
        if manager is not None and self._generation is not None:
            # Handed over: this task must not change them any more (module: "Warm windows").
            # Its tracked tuples stay as what the next transaction reads back: untracked.
            memory = self._memory
            for event_id in self._fresh:
                held = memory.get(event_id)
                if held is not None:
                    memory[event_id] = _untracked(held)
            self._fresh = set()
            _WARM.leave(
                self._namespace,
                _Warm(
                    self._generation,
                    manager,
                    self._next_id,
                    self._last_window,
                    self._kept,
                    self._memory,
                ),
            )
            self._manager, self._memory = None, collections.OrderedDict()
            self._changed = False
        if isinstance(self.user_bolt, BaseStatefulWindowedBolt):
            self.user_bolt.pre_prepare(txid)

    def pre_commit(self, txid: int) -> None:
        """Commit the window namespace, then the bolt's hook."""
        self.window_state.commit(txid)
        if isinstance(self.user_bolt, BaseStatefulWindowedBolt):
            self.user_bolt.pre_commit(txid)

    def pre_rollback(self) -> None:
        """Roll the window namespace back to its last commit, then the bolt's hook."""
        self.window_state.rollback()
        self._manager = None  # read again from the committed snapshot if needed
        self._memory = collections.OrderedDict()
        self._fresh = set()
        _WARM.take(self._namespace)
        if isinstance(self.user_bolt, BaseStatefulWindowedBolt):
            self.user_bolt.pre_rollback()

    def cleanup(self) -> None:
        """Clean up the user's bolt."""
        self.user_bolt.cleanup()

    # ------------------------------------------------------------------ the steps

    def _restored(self) -> WindowManager[int]:
        """The manager, read from the window namespace the first time this task needs it."""
        if self._manager is not None:
            return self._manager
        if self._collector is None:
            msg = f"{self._where}: a tuple arrived before prepare"
            raise WindowingError(msg)
        generation = self.window_state.get(_GENERATION_KEY)
        self._lineage = list(self.window_state.get(_LINEAGE_KEY) or [])
        warm = _WARM.take(self._namespace)
        if warm is not None and generation is not None and warm.generation == generation:
            self._generation = generation
            self._next_id, self._last_window, self._kept = warm.next_id, warm.last_window, warm.kept
            self._memory = warm.memory
            self._manager = warm.manager
            return warm.manager
        self._generation = generation
        manager: WindowManager[int] = WindowManager(
            self.window_config, input_streams=self._streams.values() or ("default",)
        )
        saved = self.window_state.get(_MANAGER_KEY)
        if saved is not None:
            if not isinstance(saved, dict) or saved.get("format") != _STORED_FORMAT:
                msg = f"{self._where}: the stored windows are not in format {_STORED_FORMAT}: "
                raise WindowStateError(msg + repr(saved)[:200])
            try:
                manager.restore(saved["manager"])
            except WindowStateError as exc:
                msg = (
                    f"{self._where}: the stored windows cannot be restored ({exc}); a changed "
                    "window needs a new topology name, or its window namespace emptied"
                )
                raise WindowStateError(msg) from exc
            self._next_id = int(saved["next_id"])
            self._last_window = list(saved["last_window"])
            self._kept = set(saved["kept"])
            if warm is not None and warm.generation in self._lineage:
                self._memory = _still_held(warm.memory, saved["manager"], self._kept)
        self._manager = manager
        return manager

    def _processing_time(self) -> int:
        if self._now is None:
            msg = (
                f"{self._where}: a processing-time window needs the transaction's start time, "
                "and this task was given none; run the topology with a CheckpointRunner (or "
                "LocalCluster), which gives every transaction one"
            )
            raise WindowTimeError(msg)
        return self._now

    def _advance(self, manager: WindowManager[int]) -> WindowUpdate[int]:
        return WindowUpdate() if self._now is None else manager.on_time(self._now)

    def _stream_of(self, tuple_: Tuple) -> str:
        key = (tuple_.source_component, tuple_.source_stream_id)
        stream = self._streams.get(key)
        if stream is None:
            msg = (
                f"{self._where}: a tuple from {key[0]!r} stream {key[1]!r}, which this bolt "
                f"does not subscribe to (its inputs: {sorted(self._streams.values())})"
            )
            raise WindowingError(msg)
        return stream

    def _remember(self, event_id: int, tuple_: Tuple) -> None:
        memory = self._memory
        memory[event_id] = tuple_
        while len(memory) > self._max_in_memory:
            memory.popitem(last=False)

    def _carry_out(self, update: WindowUpdate[int]) -> None:
        """Fired windows, then late tuples, then released ones (``WindowUpdate``'s order)."""
        collector = self._collector
        assert collector is not None  # noqa: S101 - _restored checked prepare ran
        for window in update.fired:
            tuples = self._window_of(window)
            # This transaction's tuples of the window: the others are untracked, held
            # durably since the transaction that carried them committed.
            tracked = self._fresh.intersection(window.get())
            collector.anchors = [self._tuple(i) for i in sorted(tracked)]
            try:
                self.user_bolt.execute(tuples)
            finally:
                collector.anchors = []
            self._last_window = window.get()
            self._forget(self._kept - set(self._last_window))
            self._kept &= set(self._last_window)
        late_stream = self.window_config.late_tuple_stream
        for event_id in update.late:
            tuple_ = self._tuple(event_id)
            if late_stream is not None:
                collector.emit([tuple_], [tuple_], late_stream)
            self._forget([event_id])
        if update.released:
            shown = set(self._last_window)
            self._forget(i for i in update.released if i not in shown)
            self._kept.update(i for i in update.released if i in shown)

    def _forget(self, event_ids: Iterable[int]) -> None:
        for event_id in event_ids:
            self._memory.pop(event_id, None)
            self._fresh.discard(event_id)
            self.window_state.delete(_event_key(event_id))

    def _tuple(self, event_id: int) -> Tuple:
        found = self._memory.get(event_id)
        if found is not None:
            return found
        value = self.window_state.get(_event_key(event_id))
        if value is None:
            msg = (
                f"{self._where}: window event {event_id} is not in the window namespace; "
                "the stored windows are incomplete (was the namespace emptied by hand?)"
            )
            raise WindowStateError(msg)
        found = _loaded(value, self._where, self._fields)
        self._remember(event_id, found)
        return found

    def _window_of(self, window: Window[int]) -> Window[Tuple]:
        loaded: dict[int, Tuple] = {}

        def load(event_id: int) -> Tuple:
            found = loaded.get(event_id)
            if found is None:
                found = loaded[event_id] = self._tuple(event_id)
            return found

        return window.map(load)
