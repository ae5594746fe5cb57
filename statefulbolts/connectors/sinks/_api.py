"""The sink contract: what an external system must do for a sink bolt to write to it once.

A *sink* is the client side of one external system (a Kafka cluster, a database, a directory).
``ExactlyOnceSinkBolt`` stages what its tuples become while a checkpoint transaction is
prepared and hands it to the sink when the transaction commits; the sink makes it visible. The
bolt does the staging, the recovery and the rescaling; a sink implements four things:

``stage(tuple)``
    The record one tuple becomes, in the form that will be kept in the bolt's state until it
    is published: plain values (bytes, str, numbers, lists, dicts) that msgpack encodes.
    Serialize here, in the PREPARE, so that a bad value fails the tuple that carries it, and
    the commit only moves bytes. ``None`` leaves the tuple out.

``stage_batch(batch)`` (optional)
    The records of a column batch's tuples (``ColumnBatch``), in order, those ``stage`` leaves
    out left out: exactly what ``stage`` gives tuple by tuple. The bolts call it for every batch
    the runtime hands them; the default calls ``stage`` per tuple. A sink overrides it to stage
    from the batch's columns, with a loop in C rather than a Python call per record (the
    built-in sinks do). It may give the records as columns (``StagedColumns``: a list per
    field, or one value for all) rather than a list of rows: the bolt then stores columns, and
    ``publish`` and ``write`` get them back as a ``StagedColumns``, a sequence of the same rows
    (``KafkaSink`` does, and reads the columns). When it raises, the runtime runs the batch
    again a tuple at a time through ``stage``, so the error names the tuple.

``published(lane)``
    The *marker* of a lane: the last txid whose records the target holds for it, read from
    the target (``None``: nothing yet). A lane (``Lane``) is one staging task: the task index
    and the component's parallelism when it staged, so a marker never mixes two tasks' output
    and survives a change of parallelism.

``publish(lane, txid, batches, epoch)``
    Make records visible, once. ``batches`` are the lane's staged records per txid
    (``StagedBatch``), oldest first, each txid at most ``txid``. In ONE atomic step of the
    target the sink reads the lane's marker ``m``, writes the records of every batch with
    ``m < batch.txid`` in order, and sets the marker to ``txid``; when ``m >= txid``, or when
    no batch is above ``m``, it writes nothing (the marker included). This is the idempotence
    rule: a commit re-run after any crash, a Spark retry of the task, or a stale attempt still
    running publishes nothing twice, because the marker is stored with the records, in the
    same step, and decides. ``epoch`` is the lease epoch of
    the driver running the task (``None``: no lease): a target that can compare it in the
    same step (a row in a database, a Redis script) refuses a publish whose epoch is below the
    one stored with the marker, raising ``SinkFencedError``; one that cannot (Kafka fences
    zombies with its own producer epochs instead) ignores it.

``write(records)`` (optional)
    For ``AtLeastOnceSinkBolt``: write at once, no staging and no marker; return only when the
    records are durable. A replayed transaction writes them again.

``lane_markers(conf, topology, component)`` (optional)
    Every lane of a sink component the target keeps a marker of, whatever parallelism it
    published with (``statefulbolts sink status`` shows those no task holds records of);
    ``None``: the target cannot list them.

``open(conf, context)`` / ``close()`` bracket a task's use; ``check_config(conf)`` runs in the
driver at submit and refuses a setting that cannot work, naming it.

Errors, in the project's tree (``statefulbolts.errors``)::

    StatefulBoltsError (RuntimeError)
    └── SinkError                   a sink could not do a step; names component, task, lane
        ├── SinkStageError          a tuple the sink cannot stage (its field, its serializer)
        └── SinkPublishError        a publish failed: none of it is visible, the COMMIT is retried
            ├── SinkFencedError     another publisher of the lane, or a newer driver, took over
            └── SinkMarkerError     the lane's marker could not be read, or makes no sense
    ConfigError (ValueError)
    └── SinkConfigError             a sink setting that cannot work (named, with the fix)

A ``SinkError`` is the failure of the tuple or the transaction it happened in, not of the
topology's wiring: a stage error goes the way of an exception in ``execute`` (failed, replayed,
dead-lettered by ``topology.deadletter.policy``), a publish error fails the COMMIT, which the
runtime runs again (``topology.max.transaction.retries`` bounds how often). A sink's outage (the
target away or slow) is the target's ``StateBackendError``: the runtime
waits it out as it waits out a state store's (``topology.state.backend.timeout.secs``).

Example:
    >>> lane = Lane("wordcount", "publish", 1, 4)
    >>> lane.name, lane.qualified()
    ('1of4', 'wordcount.publish.1of4')
    >>> Lane.parse_name("1of4")
    (1, 4)
    >>> StagedBatch(7, ("a", "b")).txid
    7
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

from statefulbolts.errors import ConfigError, StatefulBoltsError

if TYPE_CHECKING:
    from statefulbolts.context import TopologyContext
    from statefulbolts.tuples import ColumnBatch, Tuple

__all__ = [
    "Lane",
    "PublishResult",
    "Sink",
    "SinkConfigError",
    "SinkError",
    "SinkFencedError",
    "SinkMarkerError",
    "SinkPublishError",
    "SinkStageError",
    "StagedBatch",
]

_LANE_NAME = re.compile(r"(\d+)of(\d+)")


class SinkError(StatefulBoltsError, RuntimeError):
    """A sink could not do one of its steps (the message names component, task and lane)."""


class SinkStageError(SinkError):
    """A tuple the sink cannot stage: a missing field, a value its serializer refuses."""


class SinkPublishError(SinkError):
    """A publish step failed; nothing it wrote is visible, and the COMMIT is tried again."""


class SinkFencedError(SinkPublishError):
    """Another publisher of the lane (a later attempt, or a newer driver) took it over."""


class SinkMarkerError(SinkPublishError):
    """A lane's marker could not be read from the target, or holds something unexpected."""


class SinkConfigError(ConfigError):
    """A sink setting that cannot work; names the key or argument and the fix."""


class Lane(NamedTuple):
    """One staging task of a sink component: whose marker, whose records.

    ``task`` is the task index and ``parallelism`` the component's parallelism when it staged:
    after a rescale the new tasks stage under new lanes, and what an old lane left is published
    under its own marker by whichever task holds it now.
    """

    topology: str
    component: str
    task: int
    parallelism: int

    @property
    def name(self) -> str:
        """``<task>of<parallelism>``."""
        return f"{self.task}of{self.parallelism}"

    def qualified(self, sep: str = ".") -> str:
        """``<topology>.<component>.<task>of<parallelism>``: unique per topology and lane."""
        return sep.join((self.topology, self.component, self.name))

    @staticmethod
    def parse_name(text: str) -> tuple[int, int]:
        """``(task, parallelism)`` of a lane name ``"<task>of<parallelism>"``.

        Raises:
            ValueError: ``text`` is not a lane name.
        """
        match = _LANE_NAME.fullmatch(text)
        if match is None or int(match[1]) >= int(match[2]):
            msg = f"{text!r} is not a lane name ('<task>of<parallelism>', task < parallelism)"
            raise ValueError(msg)
        return int(match[1]), int(match[2])


class StagedBatch(NamedTuple):
    """The records one lane staged in one transaction, in the order the tuples came."""

    txid: int
    records: Sequence[Any]


class PublishResult(NamedTuple):
    """What one ``publish`` did.

    ``published``: the txids whose records it wrote (empty: the marker already covered
    ``txid``, a replayed commit); ``records``: how many records; ``marker_before``: the marker
    it found in its atomic step.
    """

    txid: int
    published: tuple[int, ...]
    records: int
    marker_before: int | None


class Sink(ABC):
    """The client of one external system, as ``ExactlyOnceSinkBolt`` uses it (module docstring).

    A sink object is built in the user's code, pickled with the topology and used in every
    task of its bolt: connect in ``open`` or lazily, never in ``__init__``, and keep no
    connection in what pickles.

    ``name`` says what it writes to, for messages (``"Kafka topic 'counts'"``).
    ``exactly_once`` is ``False`` for a sink that cannot keep the idempotence rule (it may
    still offer ``write`` to ``AtLeastOnceSinkBolt``).
    """

    exactly_once: ClassVar[bool] = True

    @property
    def name(self) -> str:
        """What the sink writes to, for messages; the class name by default."""
        return type(self).__name__

    def open(self, conf: Mapping[str, Any], context: TopologyContext) -> None:  # noqa: B027
        """Called once per task life before anything else: read settings, make clients."""

    def close(self) -> None:  # noqa: B027
        """Called when the task ends: release clients."""

    def check_config(self, conf: Mapping[str, Any]) -> None:  # noqa: B027
        """In the driver, at submit: refuse a setting that cannot work (``SinkConfigError``)."""

    @abstractmethod
    def stage(self, tuple_: Tuple) -> Any:
        """The staged form of the record ``tuple_`` becomes (msgpack-able); ``None``: none.

        Raises:
            SinkStageError: the tuple lacks a field, or its value cannot be serialized.
        """

    def stage_batch(self, batch: ColumnBatch) -> Sequence[Any]:
        """The staged records of ``batch``'s tuples, in order; those ``stage`` leaves out left out.

        The default stages tuple by tuple. An override must give what that gives (as a list
        of rows, or as ``StagedColumns`` of the same rows); when it raises, the runtime stages
        the batch again tuple by tuple, so the error names its tuple.

        Raises:
            SinkStageError: a tuple lacks a field, or its value cannot be serialized.
        """
        staged = map(self.stage, batch.tuples())
        return [record for record in staged if record is not None]

    def warm(self, lane: Lane) -> None:  # noqa: B027
        """Get ready to publish ``lane`` soon, without waiting: called as a PREPARE stages.

        For a client whose making is slow (the Kafka sink's transactional producer), so the
        COMMIT after the PREPARE finds it made. It must not block, publish or fence anything
        a COMMIT of the lane may still be using; by default it does nothing.
        """

    @abstractmethod
    def published(self, lane: Lane) -> int | None:
        """The lane's marker in the target: the last txid published (``None``: none yet)."""

    @abstractmethod
    def publish(
        self, lane: Lane, txid: int, batches: Sequence[StagedBatch], epoch: int | None
    ) -> PublishResult:
        """Publish ``batches`` above the marker and set it to ``txid``, in one atomic step.

        See the module docstring for the idempotence rule.

        Raises:
            SinkPublishError: the step failed (a subclass names which step); nothing of it is
                visible.
            SinkFencedError: another publisher of the lane, or a newer driver, took over.
            StateBackendError: the target is away (an outage, waited out).
        """

    def lane_markers(
        self, conf: Mapping[str, Any], topology: str, component: str
    ) -> dict[str, int | None] | None:
        """Every lane of ``component`` the target has a marker of: lane name -> marker.

        ``None`` (the default): the target cannot list its lanes.
        """
        return None

    def write(self, records: Sequence[Any]) -> None:
        """Write ``records`` at once, durably (``AtLeastOnceSinkBolt``); optional.

        Raises:
            NotImplementedError: this sink only publishes exactly once.
        """
        msg = f"{type(self).__qualname__} has no at-least-once write(); use ExactlyOnceSinkBolt"
        raise NotImplementedError(msg)
