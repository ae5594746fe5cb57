"""Spouts and bolts: the classes users subclass."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from statefulbolts.collectors import (
    BasicOutputCollector,
    ColumnOutputCollector,
    OutputCollector,
    SpoutOutputCollector,
    anchored_target,
)
from statefulbolts.errors import FailedException, ReportedFailedException
from statefulbolts.tuples import DEFAULT_STREAM, ColumnBatch, Fields, Tuple

if TYPE_CHECKING:
    from providers import KeyValueState
    from statefulbolts.context import TopologyContext

__all__ = [
    "BasicBolt",
    "BasicBoltExecutor",
    "BasicRows",
    "Bolt",
    "Component",
    "OutputFieldsDeclarer",
    "Spout",
    "SpoutReplayWarning",
    "StatefulBolt",
]


class SpoutReplayWarning(UserWarning):
    """A spout that does not say it can replay after a restart feeds state kept across one.

    See ``Spout.durable_source``: after a driver restart such a spout may emit again what the
    durable state already counted.
    """


class OutputFieldsDeclarer:
    """Collects the streams a component declares in ``declare_output_fields``."""

    def __init__(self) -> None:
        self.streams: dict[str, Fields] = {}

    def declare(self, fields: Fields | Iterable[str]) -> None:
        """Declare the fields of the default stream."""
        self.declare_stream(DEFAULT_STREAM, fields)

    def declare_stream(self, stream_id: str, fields: Fields | Iterable[str]) -> None:
        """Declare the fields of ``stream_id``."""
        if not isinstance(stream_id, str) or not stream_id:
            msg = f"stream id must be a non-empty string, got {stream_id!r}"
            raise ValueError(msg)
        if stream_id in self.streams:
            msg = f"stream {stream_id!r} declared twice"
            raise ValueError(msg)
        self.streams[stream_id] = fields if isinstance(fields, Fields) else Fields(list(fields))


class Component(ABC):  # noqa: B024 - a marker base with optional hooks
    """What spouts and bolts share."""

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:  # noqa: B027
        """Declare output streams; components that emit nothing need not override it."""

    def get_component_configuration(self) -> Mapping[str, Any] | None:
        """Component-specific config merged over the topology config (optional)."""
        return None


class Spout(Component):
    """A source of tuples. ``open`` once; ``next_tuple``, ``ack`` and ``fail`` on one instance.

    ``durable_source`` says whether the spout can replay after a restart: whether a new
    instance, opened by a restarted driver, emits again exactly what the crashed driver's had
    emitted and not seen committed (acked), and nothing that was. Its source keeps the place
    outside the driver: a Redis stream's consumer group (``RedisStreamSpout``), a partitioned
    spout's positions committed with the state (``DirectorySpout``, ``KafkaSpout``), or an
    offset the spout stores where its ``ack`` runs. ``None`` (the default) means not said, and
    ``False`` cannot: a spout that keeps what it sent in memory (``sent``, ``replay``) starts
    from the beginning again after a restart, and a durable state provider, which kept what
    was already counted, then counts it twice. ``LocalCluster.submit_topology`` warns
    (``SpoutReplayWarning``) when a topology with state in a durable provider runs a spout
    that does not declare ``durable_source = True``.

    Example:
        >>> class Numbers(Spout):
        ...     def open(self, conf, context, collector):
        ...         self.collector, self.n = collector, 0
        ...     def next_tuple(self):
        ...         if self.n < 3:
        ...             self.collector.emit([self.n], message_id=self.n)
        ...             self.n += 1
        ...     def declare_output_fields(self, declarer):
        ...         declarer.declare(Fields("n"))
    """

    # Whether a restarted driver's instance resumes where the committed state left off (above).
    durable_source: bool | None = None

    def open(  # noqa: B027
        self, conf: Mapping[str, Any], context: TopologyContext, collector: SpoutOutputCollector
    ) -> None:
        """Called once before the first ``next_tuple``."""

    @abstractmethod
    def next_tuple(self) -> None:
        """Emit zero or more tuples; must not block for long."""

    def ack(self, msg_id: Any) -> None:  # noqa: B027
        """The tuple tree of ``msg_id`` completed and its transaction committed."""

    def fail(self, msg_id: Any) -> None:  # noqa: B027
        """The tuple tree of ``msg_id`` failed, timed out or was rolled back; replay it."""

    def close(self) -> None:  # noqa: B027
        """Called when the topology is killed."""

    def activate(self) -> None:  # noqa: B027
        """Called when the spout is activated."""

    def deactivate(self) -> None:  # noqa: B027
        """Called when the spout is deactivated."""


class Bolt(Component):
    """Processes tuples. Ack (or fail) every input; anchor emits to inputs.

    Example:
        >>> class Upper(Bolt):
        ...     def prepare(self, conf, context, collector):
        ...         self.collector = collector
        ...     def execute(self, tuple):
        ...         self.collector.emit([tuple.get_value(0).upper()], anchors=tuple)
        ...         self.collector.ack(tuple)
    """

    def prepare(  # noqa: B027
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        """Called once per task life before ``execute``."""

    @abstractmethod
    def execute(self, tuple: Tuple) -> None:  # noqa: A002 - Storm's parameter name
        """Process one tuple."""

    def cleanup(self) -> None:  # noqa: B027
        """Called when the task ends (not guaranteed after a crash)."""


class BasicBolt(Component):
    """A bolt whose emits are anchored to the input and whose input is acked for it.

    Raise ``FailedException`` from ``execute`` to fail the input instead.

    Example:
        >>> class Split(BasicBolt):
        ...     def execute(self, tuple, collector):
        ...         for word in tuple.get_value(0).split():
        ...             collector.emit([word])
        ...     def declare_output_fields(self, declarer):
        ...         declarer.declare(Fields("word"))
    """

    def prepare(self, conf: Mapping[str, Any], context: TopologyContext) -> None:  # noqa: B027
        """Called once per task life before ``execute``."""

    @abstractmethod
    def execute(self, tuple: Tuple, collector: BasicOutputCollector) -> None:  # noqa: A002
        """Process one tuple; emits go through ``collector``."""

    def execute_batch(self, batch: ColumnBatch, collector: ColumnOutputCollector) -> None:
        """Process consecutive tuples at once, as columns; optional (see ``takes_batches``).

        Define it to take the input a batch at a time: the runtime then calls it, not
        ``execute``, for each batch of data tuples of one source task and stream, and acks the
        batch's tuples together when it returns. It must do what ``execute`` would do for
        each tuple of the batch in order: ``execute`` stays the definition (a tuple of several
        trees, tick tuples, and the search for a tuple that makes the bolt raise, all go
        through it). ``collector.emit(values, row)`` anchors an emit to the batch's ``row``-th
        tuple, as ``execute``'s emits are anchored to its tuple; ``collector.emit_columns``
        makes many such emits in one call.

        Raising ``FailedException`` fails every tuple of the batch. Raising anything else
        fails the task, as it would from ``execute``; first the batch runs again through
        ``execute``, a tuple at a time, so the error names the tuple that raises.

        Example:
            >>> class Total(BasicBolt):
            ...     def prepare(self, conf, context):
            ...         self.total = 0
            ...     def execute(self, tuple, collector):
            ...         self.total += tuple.get_value_by_field("count")
            ...     def execute_batch(self, batch, collector):
            ...         self.total += sum(batch.column("count"))
        """
        raise NotImplementedError

    @classmethod
    def takes_batches(cls) -> bool:
        """Whether this bolt class defines ``execute_batch``."""
        return cls.execute_batch is not BasicBolt.execute_batch

    def cleanup(self) -> None:  # noqa: B027
        """Called when the task ends."""


class StatefulBolt(Bolt):
    """A bolt with managed ``KeyValueState``, checkpointed by the framework.

    ``init_state`` receives the state restored to the last commit before any tuple is executed.
    Keep what must survive in the state, not in fields: a bolt instance lives for one transaction.

    Example:
        >>> class Count(StatefulBolt):
        ...     def prepare(self, conf, context, collector):
        ...         self.collector = collector
        ...     def init_state(self, state):
        ...         self.counts = state
        ...     def execute(self, tuple):
        ...         word = tuple.get_value(0)
        ...         self.counts.put(word, self.counts.get(word, 0) + 1)
        ...         self.collector.ack(tuple)
    """

    #: The version of what this bolt stores. Raise it when the stored keys or values change
    #: meaning; the next start then calls ``migrate_state`` (or ``migrate_states``) on the
    #: committed state before the bolt sees it, and refuses to start if neither is defined.
    state_version: ClassVar[int] = 1

    @abstractmethod
    def init_state(self, state: KeyValueState) -> None:
        """Receive the state, restored to the last committed checkpoint."""

    def execute_batch(self, batch: ColumnBatch, collector: ColumnOutputCollector) -> None:
        """Process consecutive tuples at once, as columns; optional (see ``takes_batches``).

        Define it to take the input a batch at a time: the runtime then calls it, not
        ``execute``, for each batch of data tuples of one source task and stream. It must do
        what ``execute`` would do for each tuple of the batch in order, acking each, to the
        state and to what is emitted: ``execute`` stays the definition (a tuple of several
        trees, and the search for a tuple that makes the bolt raise, go through it; so does
        every tuple of a task in which a test's injected fault may fire).
        ``collector.emit(values, row)`` anchors
        an emit to the batch's ``row``-th tuple, and ``collector.emit_columns`` makes many
        emits at once; ``prepare``'s collector still reports errors.

        When it returns, every tuple of the batch is acked: the acks are held until the
        checkpoint that covers them commits, and failed if it rolls back, as ``execute``'s
        acks are. To fail a tuple on its own, leave the batch to ``execute``. Raising fails
        the task, as raising from ``execute`` does (the transaction rolls back and is
        replayed); first the batch runs again through ``execute``, a tuple at a time, so the
        error names the tuple that raises.

        ``KeyValueState.get_many`` and ``put_many`` read and write many keys in one call.

        Example:
            >>> class Count(StatefulBolt):
            ...     def prepare(self, conf, context, collector):
            ...         self.collector = collector
            ...     def init_state(self, state):
            ...         self.counts = state
            ...     def execute(self, tuple):
            ...         word = tuple.get_value(0)
            ...         self.counts.put(word, self.counts.get(word, 0) + 1)
            ...         self.collector.ack(tuple)
            ...     def execute_batch(self, batch, collector):
            ...         words = batch.column("word")
            ...         distinct = list(dict.fromkeys(words))
            ...         counts = dict(zip(distinct, self.counts.get_many(distinct, 0)))
            ...         for word in words:
            ...             counts[word] += 1
            ...         self.counts.put_many(counts.items())
        """
        raise NotImplementedError

    @classmethod
    def takes_batches(cls) -> bool:
        """Whether this bolt class defines ``execute_batch``."""
        return cls.execute_batch is not StatefulBolt.execute_batch

    def grouping_key(self, state_key: Any) -> Any:
        """The grouped value(s) ``state_key`` belongs to: the key itself by default.

        A rescale puts each stored key in the task that owns the key group of this value, so
        it must be the value of the field(s) the bolt is fields-grouped on for the tuples that
        write the key (a tuple of them, in order, for several fields). Override it when the
        state is keyed otherwise, e.g. ``"user:clicks"`` for a bolt grouped on ``user``::

            def grouping_key(self, state_key):
                return state_key.split(":", 1)[0]
        """
        return state_key

    def migrate_state(self, key: Any, value: Any, from_version: int) -> tuple[Any, Any] | None:
        """Rewrite one stored entry of version ``from_version`` for ``state_version``.

        Return the new ``(key, value)``, or ``None`` to drop the entry. Called once per
        committed key, at the start after ``state_version`` was raised, before any tuple.
        Not defined by default: define this or ``migrate_states``.
        """
        raise NotImplementedError

    def migrate_states(
        self, items: Iterator[tuple[Any, Any]], from_version: int
    ) -> Iterable[tuple[Any, Any]]:
        """Rewrite the whole stored state of version ``from_version`` for ``state_version``.

        ``items`` yields every committed ``(key, value)`` of the component (all its tasks);
        return (or yield) the entries of the new state. For migrations that need more than one
        entry at a time. Wins over ``migrate_state`` when both are defined. Not defined by
        default.
        """
        raise NotImplementedError

    def pre_prepare(self, txid: int) -> None:  # noqa: B027
        """Called before the state's ``prepare_commit(txid)``."""

    def pre_commit(self, txid: int) -> None:  # noqa: B027
        """Called before the state's ``commit(txid)``."""

    def pre_rollback(self) -> None:  # noqa: B027
        """Called before the state's ``rollback()``."""


class BasicRows(NamedTuple):
    """A ``BasicBolt``'s step per tuple, taken apart for a runtime's loop over many tuples.

    What ``BasicBoltExecutor.execute`` does with one tuple ``t``, for a loop that does it to
    each tuple of a batch without a call into the executor (``statefulbolts.runtime``'s
    ``feed_basic``): set ``collector``'s input to ``t``, call ``execute(t, collector)``; on
    ``FailedException``, ``failed(t, exc)``; otherwise ``t`` is acked, and ``ack_batch`` acks a
    run of such tuples at once.
    """

    execute: Callable[[Tuple, BasicOutputCollector], None]
    collector: BasicOutputCollector
    failed: Callable[[Tuple, FailedException], None]
    ack_batch: Callable[[ColumnBatch], None]


class BasicBoltExecutor(Bolt):
    """Runs a ``BasicBolt`` as a ``Bolt``: anchors its emits and acks (or fails) its input."""

    def __init__(self, bolt: BasicBolt) -> None:
        self.bolt = bolt
        self._collector: OutputCollector | None = None
        self._basic: BasicOutputCollector | None = None
        self._batch: ColumnOutputCollector | None = None

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """Delegate to the wrapped bolt."""
        self.bolt.declare_output_fields(declarer)

    def get_component_configuration(self) -> Mapping[str, Any] | None:
        """Delegate to the wrapped bolt."""
        return self.bolt.get_component_configuration()

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        """Prepare the wrapped bolt."""
        self._collector = anchored_target(collector)  # acks and fails of the input
        # A runtime collector may offer its own BasicOutputCollector, with its emit path inlined.
        make = getattr(self._collector, "basic_collector", None)
        basic = make(collector) if callable(make) else None
        self._basic = (
            basic if isinstance(basic, BasicOutputCollector) else BasicOutputCollector(collector)
        )
        self._batch = ColumnOutputCollector(collector)
        self.bolt.prepare(conf, context)

    @property
    def batch_target(self) -> Callable[[ColumnBatch], None] | None:
        """``execute_batch`` when the wrapped bolt takes batches (``None`` when it does not)."""
        return self.execute_batch if self.bolt.takes_batches() else None

    @property
    def basic_rows(self) -> BasicRows | None:
        """This executor's step per tuple, taken apart.

        ``None`` before ``prepare``, or when its collector cannot ack a run of tuples at once.
        """
        collector, basic = self._collector, self._basic
        ack_batch = getattr(collector, "ack_batch", None)
        if basic is None or not callable(ack_batch):
            return None
        return BasicRows(self.bolt.execute, basic, self.failed, ack_batch)

    def execute(self, tuple: Tuple) -> None:  # noqa: A002
        """Execute the wrapped bolt, then ack the input, or fail it on ``FailedException``."""
        collector, basic = self._collector, self._basic
        assert collector is not None and basic is not None, "execute before prepare"  # noqa: S101
        basic._input = tuple  # set_context without the call: this runs once per tuple
        try:
            self.bolt.execute(tuple, basic)
        except FailedException as exc:
            self.failed(tuple, exc)
        else:
            collector.ack(tuple)

    def failed(self, tuple: Tuple, exc: FailedException) -> None:  # noqa: A002
        """The bolt raised ``exc`` executing ``tuple``: report it if asked to, fail the tuple."""
        collector = self._collector
        assert collector is not None, "execute before prepare"  # noqa: S101
        if isinstance(exc, ReportedFailedException):
            collector.report_error(exc)
        collector.fail(tuple)

    def execute_batch(self, batch: ColumnBatch) -> None:
        """Execute the wrapped bolt on a batch, ack its tuples (fail them on ``FailedException``).

        The acks are one step (the runtime's collector's ``ack_batch``), or one ``ack`` per
        tuple from a collector without it. Any other exception goes on: the caller fails the
        task (and first looks for the tuple that raises, through ``execute``).
        """
        collector, out = self._collector, self._batch
        assert collector is not None and out is not None, "execute before prepare"  # noqa: S101
        out.set_batch(batch)
        try:
            self.bolt.execute_batch(batch, out)
        except FailedException as exc:
            if isinstance(exc, ReportedFailedException):
                collector.report_error(exc)
            for t in batch.tuples():
                collector.fail(t)
            return
        ack_batch = getattr(collector, "ack_batch", None)
        if ack_batch is not None:
            ack_batch(batch)
        else:
            for t in batch.tuples():
                collector.ack(t)

    def cleanup(self) -> None:
        """Clean up the wrapped bolt."""
        self.bolt.cleanup()

    def __repr__(self) -> str:
        return f"BasicBoltExecutor({self.bolt!r})"
