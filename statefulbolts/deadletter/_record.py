"""A dead letter: the record a poison tuple leaves, and how it is stored.

A record says what failed (the component and task, the exception's class, message and
traceback), on which tuple (the failing tuple's source, stream and values), and where that
tuple came from, which is what is taken out of the topology and what a replay puts back:

- ``SpoutOrigin`` (checkpoint protocol): the root spout tuple, by spout component, task index
  and message id, with its stream and values. A tuple that fanned out (a sentence split into
  words) is dead-lettered whole: the spout tuple is the unit.
- ``BatchOrigin`` (transactional protocol): the emitted batch tuple, by txid and its place in
  the emission, ``slot`` (``Slot``: ``partition`` p of a partitioned spout, ``emitter-task`` k
  of a plain one, ``replayed`` entry k of dead letters replayed into that txid) and ``index``
  (its position in that slot's emission).

Every kind a record names is an enum whose values are the stored strings: the record's
``Scope`` (a checkpointed topology's, or a transactional id's), its ``LetterState`` (held, or
asked to go back in), its origin's ``OriginKind`` and a batch origin's ``Slot``. The task is
named twice: ``task_index`` (what every message shows) and ``task``, Storm's global task id.

A record's id is a digest of where the tuple came from (``spout_record_id``,
``batch_record_id``), so recording the same tuple twice writes the same key: a driver killed
after writing a record and restarted writes that record again, never a second one.

The stored form is a plain dict (``to_value``) of values any provider's system state holds
(msgpack); ``from_value`` reads it back and refuses anything else with a ``DeadLetterError``.

Example:
    >>> failed = FailedTuple("split", 3, "default", ["poison"], "['poison']")
    >>> origin = SpoutOrigin("sentences", 0, 17, "default", ["a poison pill"], "['a poison pill']")
    >>> letter = DeadLetter.first(
    ...     "wc", Scope.TOPOLOGY, "count", 5, 1, failed, origin, ("builtins.ValueError",),
    ...     "bad word", None, txid=4, attempts=2, at=1700000000.0,
    ... )
    >>> letter.id == spout_record_id("wc", "sentences", 0, 17)
    True
    >>> DeadLetter.from_value(letter.to_value()) == letter
    True
    >>> letter.state, letter.to_value()["state"], letter.origin.kind
    (<LetterState.DEAD: 'dead'>, 'dead', <OriginKind.SPOUT: 'spout'>)
"""

from __future__ import annotations

import enum
import hashlib
import reprlib
from dataclasses import asdict, dataclass, replace
from typing import Any

import msgpack

from statefulbolts.errors import DeadLetterError

__all__ = [
    "BatchOrigin",
    "DeadLetter",
    "FailedTuple",
    "LetterState",
    "OriginKind",
    "Scope",
    "Slot",
    "SpoutOrigin",
    "batch_record_id",
    "spout_record_id",
]

# A record's traceback is kept up to this many characters (its start: the user's error).
TRACEBACK_CAP = 8000


class LetterState(enum.StrEnum):
    """A record's state: held, or asked to go back into the topology."""

    DEAD = "dead"
    REPLAY = "replay"


class Scope(enum.StrEnum):
    """Whose record it is: a checkpointed topology's, or a transactional id's."""

    TOPOLOGY = "topology"
    TRANSACTIONAL = "transactional"


class OriginKind(enum.StrEnum):
    """What a record's origin is: a spout tuple, or an emitted batch tuple."""

    SPOUT = "spout"
    BATCH = "batch"


class Slot(enum.StrEnum):
    """Which part of a txid's emission a batch origin is in."""

    PARTITION = "partition"  # partition p of a partitioned spout
    EMITTER_TASK = "emitter-task"  # emitter task k of a plain transactional spout
    REPLAYED = "replayed"  # entry k of the dead letters replayed into the txid


def _digest(*parts: bytes) -> str:
    return hashlib.sha256(b"\0".join(parts)).hexdigest()[:16]


def _canonical(value: Any) -> bytes:
    """``value`` as bytes that are equal for equal message ids (msgpack, else its repr)."""
    try:
        return b"m" + msgpack.packb(value, use_bin_type=True)
    except (TypeError, ValueError, OverflowError):
        return b"r" + repr(value).encode("utf-8", "replace")


def spout_record_id(topology: str, component: str, task: int, message_id: Any) -> str:
    """The id of the record of a spout tuple: one per (spout component, task, message id).

    Example:
        >>> spout_record_id("wc", "sentences", 0, "1700000000000-0")
        '12b512736dcdc5e7'
    """
    return _digest(
        b"spout", topology.encode(), component.encode(), str(task).encode(), _canonical(message_id)
    )


def batch_record_id(transactional_id: str, txid: int, slot: Slot, number: int, index: int) -> str:
    """The id of the record of an emitted batch tuple: one per place in one txid's batch."""
    where = f"{txid}/{Slot(slot).value}/{number}/{index}".encode()
    return _digest(b"batch", transactional_id.encode(), where)


@dataclass(frozen=True)
class FailedTuple:
    """The tuple the component raised on: its source, stream and values.

    ``values`` is ``None`` when they could not be kept (msgpack has no type for one of them,
    or they were too big); ``text`` is always their ``repr``, cut. ``source_task`` is the
    tuple's ``source_task`` (Storm's global task id), ``source_task_index`` the sending task's
    index (``None`` in records written before it was kept, or from a framework source).
    """

    source_component: str
    source_task: int
    stream: str
    values: list[Any] | None
    text: str
    source_task_index: int | None = None

    def describe_source(self) -> str:
        """``'split' task 1``: the sending task by its index (its global id if not known)."""
        if self.source_task_index is None:
            return f"{self.source_component!r} task id {self.source_task}"
        return f"{self.source_component!r} task {self.source_task_index}"


@dataclass(frozen=True)
class SpoutOrigin:
    """The spout tuple a failing tuple belongs to (checkpoint protocol): what is taken out.

    ``values`` are what the spout emitted, kept for a replay (``None``: they could not be
    stored, and the record cannot be replayed).
    """

    component: str
    task: int
    message_id: Any
    stream: str
    values: list[Any] | None
    text: str

    @property
    def kind(self) -> OriginKind:
        """``OriginKind.SPOUT``."""
        return OriginKind.SPOUT

    def describe(self) -> str:
        """``spout 'sentences' task 0 message 17``."""
        return f"spout {self.component!r} task {self.task} message {self.message_id!r}"


@dataclass(frozen=True)
class BatchOrigin:
    """The emitted batch tuple a failing tuple came from (transactional protocol).

    ``values`` and ``stream`` are what the emitter emitted there, learnt when the batch is
    emitted without it (``None`` until then).
    """

    txid: int
    slot: Slot
    number: int
    index: int
    stream: str | None = None
    values: list[Any] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "slot", Slot(self.slot))  # the stored string, read back

    @property
    def kind(self) -> OriginKind:
        """``OriginKind.BATCH``."""
        return OriginKind.BATCH

    def describe(self) -> str:
        """``txid 4, partition 2, tuple 7``."""
        where = self.slot.value.replace("-", " ")
        if self.slot is Slot.REPLAYED:
            where = "dead letter replayed as"
        return f"txid {self.txid}, {where} {self.number}, tuple {self.index}"


@dataclass(frozen=True)
class DeadLetter:
    """One poison tuple, taken out of its topology (see the module docstring).

    ``attempts`` counts the failed transactions it caused, over every time it was tried;
    ``first_seen`` and ``last_seen`` are wall-clock seconds; ``state`` is ``DEAD`` (held) or
    ``REPLAY`` (asked to go back in, by ``statefulbolts deadletter replay``); ``replays``
    counts the times it went back in and failed again.
    """

    id: str
    scope: Scope
    name: str
    component: str
    task: int
    task_index: int
    failed: FailedTuple
    origin: SpoutOrigin | BatchOrigin
    types: tuple[str, ...]
    message: str
    traceback: str | None
    txid: int
    attempts: int
    first_seen: float
    last_seen: float
    state: LetterState = LetterState.DEAD
    replays: int = 0

    def __post_init__(self) -> None:
        # The stored strings, read back (a wrong one is a ValueError: ``from_value`` refuses).
        object.__setattr__(self, "scope", Scope(self.scope))
        object.__setattr__(self, "state", LetterState(self.state))

    @property
    def describe_task(self) -> str:
        """``component 'count' task 1``: the failing task by its index."""
        return f"component {self.component!r} task {self.task_index}"

    @classmethod
    def first(
        cls,
        name: str,
        scope: Scope,
        component: str,
        task: int,
        task_index: int,
        failed: FailedTuple,
        origin: SpoutOrigin | BatchOrigin,
        types: tuple[str, ...],
        message: str,
        traceback: str | None,
        *,
        txid: int,
        attempts: int,
        at: float,
        record_id: str | None = None,
    ) -> DeadLetter:
        """A new record, its id made from ``origin`` unless ``record_id`` is given.

        A traceback longer than ``TRACEBACK_CAP`` keeps its start (a worker's traceback
        begins with the user's error; Spark's frames follow).
        """
        if traceback is not None and len(traceback) > TRACEBACK_CAP:
            traceback = traceback[:TRACEBACK_CAP] + "\n... (cut)"
        if record_id is None:
            if isinstance(origin, SpoutOrigin):
                record_id = spout_record_id(name, origin.component, origin.task, origin.message_id)
            else:
                record_id = batch_record_id(
                    name, origin.txid, origin.slot, origin.number, origin.index
                )
        return cls(
            record_id,
            scope,
            name,
            component,
            task,
            task_index,
            failed,
            origin,
            types,
            message,
            traceback,
            txid,
            attempts,
            at,
            at,
        )

    def again(self, newer: DeadLetter) -> DeadLetter:
        """This record, dead-lettered once more as ``newer`` says (a replay that failed again).

        The first sighting and the replayed origin stay; the failure, attempts and times are
        added; the state is ``"dead"`` again.
        """
        return replace(
            newer,
            id=self.id,
            origin=self.origin,
            attempts=self.attempts + newer.attempts,
            first_seen=self.first_seen,
            state=LetterState.DEAD,
            replays=self.replays + (1 if self.state is LetterState.REPLAY else 0),
        )

    @property
    def type_name(self) -> str:
        """The exception's class name, without its module."""
        return self.types[0].rpartition(".")[2] if self.types else "Exception"

    @property
    def replayable(self) -> bool:
        """Whether the record holds the values a replay would emit."""
        return self.origin.values is not None and (
            not isinstance(self.origin, BatchOrigin) or self.origin.stream is not None
        )

    def to_value(self) -> dict[str, Any]:
        """The stored form: a plain dict of plain values (msgpack can hold it)."""
        value = asdict(self)
        value["types"] = list(self.types)
        value["scope"], value["state"] = self.scope.value, self.state.value
        origin = {"kind": self.origin.kind.value, **asdict(self.origin)}
        if isinstance(self.origin, BatchOrigin):
            origin["slot"] = self.origin.slot.value
        value["origin"] = origin
        if self.failed.source_task_index is None:
            del value["failed"]["source_task_index"]  # as records before it was kept
        return value

    @classmethod
    def from_value(cls, value: Any, where: str = "the dead-letter store") -> DeadLetter:
        """Read the stored form back; anything else is a ``DeadLetterError`` naming ``where``."""
        try:
            data = dict(value)
            origin = dict(data.pop("origin"))
            kind = OriginKind(origin.pop("kind"))
            made: SpoutOrigin | BatchOrigin
            if kind is OriginKind.SPOUT:
                made = SpoutOrigin(**origin)
            else:
                made = BatchOrigin(**origin)
            failed = FailedTuple(**dict(data.pop("failed")))
            letter = cls(**data, failed=failed, origin=made)
            letter = replace(letter, types=tuple(str(t) for t in letter.types))
        except (TypeError, ValueError, KeyError) as exc:
            msg = (
                f"{where}: {reprlib.repr(value)} is not a dead-letter record this version "
                f"reads ({exc})"
            )
            raise DeadLetterError(msg) from exc
        return letter

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict (values JSON cannot hold are shown by their ``repr``)."""
        return _jsonable(self.to_value())


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return repr(value)
