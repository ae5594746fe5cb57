"""Poison tuples in a transactional topology: every tuple's lineage, and what a batch leaves out.

Tuples of a batch are not tracked by an acker, so a failing tuple is traced to the emitted
batch tuple it came from by its *lineage*: a number every emitted tuple gets from its place in
the emission (``lineage``: the slot, a partition of a partitioned spout or an emitter task of a
plain one, and its index in that slot's emission), carried where a tracked tuple carries its
root. A tuple a bolt emits while it executes tuple ``t`` inherits ``t``'s lineage (a
``BasicBolt``'s anchor does; a batch bolt's collector is told which tuple it executes); one
emitted from ``finish_batch`` has none (0): it comes from the whole batch, and no one tuple of
the batch can be blamed for it.

A partitioned or plain transactional spout emits the identical batch for a txid every time,
so a place names the same tuple in every replay. When a tuple is dead-lettered, its place is
stored for its txid (``BatchChanges``, under ``$transactional/<id>/$deadletter-batches``,
before the txid is emitted again), and every later emission of that txid, after a driver
restart too, leaves it out (``LineageOut``) and reports what it left out. The same store keeps
the dead letters a txid takes in when they are replayed (slot ``REPLAYED``): a txid's batch is
decided once, at its first emission, and every replay of it is identical.

Example:
    >>> place = lineage(2, 7)
    >>> place_of(place)
    (2, 7)
    >>> place_of(lineage(REPLAYED, 0))
    (-1, 0)
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple, Protocol

from providers import KeyValueState, pack_plain
from statefulbolts.tuples import DEFAULT_STREAM

__all__ = [
    "BATCHES_NAMESPACE",
    "REPLAYED",
    "BatchChange",
    "BatchChanges",
    "LineageOut",
    "lineage",
    "place_of",
]

BATCHES_NAMESPACE = "$deadletter-batches"
REPLAYED = -1  # the slot of the dead letters a txid takes in when they are replayed
_INDEX_BITS = 32
_INDEX_MASK = (1 << _INDEX_BITS) - 1


def lineage(slot: int, index: int) -> int:
    """The lineage of the ``index``-th tuple emitted in ``slot`` (never 0: 0 is "none")."""
    return ((slot + 2) << _INDEX_BITS) | index


def place_of(value: int) -> tuple[int, int]:
    """``(slot, index)`` of a lineage."""
    return (value >> _INDEX_BITS) - 2, value & _INDEX_MASK


class _Out(Protocol):
    """The emitter's collector (``_BatchCollector``), as a lineage sink uses it."""

    def emit_with_lineage(self, values: Sequence[Any], stream: str, lineage: int) -> list[int]:
        """Emit one tuple, carrying ``lineage``."""

    def report_error(self, error: BaseException) -> None:
        """Keep an error."""


class LineageOut:
    """The collector an emitter emits one slot through: numbers its tuples, drops the removed.

    ``dropped`` collects ``lineage -> (stream, values)`` of each tuple left out (the values
    without the attempt), for the driver to keep in its dead letter: ``None`` for values that
    would not read back exactly as they are (``providers.pack_plain``), which cannot be
    replayed, and may not even pickle (a tuple left out because it does not).
    """

    def __init__(
        self,
        out: _Out,
        slot: int,
        removed: frozenset[int],
        dropped: dict[int, tuple[str, list[Any] | None]],
    ) -> None:
        self._out, self._slot, self._removed, self._dropped = out, slot, removed, dropped
        self._emit = out.emit_with_lineage
        self._next = lineage(slot, 0)  # the lineage of the slot's next tuple (``lineage``)

    def emit(self, values: Sequence[Any], stream: str = DEFAULT_STREAM) -> list[int]:
        """Emit ``values`` with the next lineage of the slot, unless that place was removed."""
        place = self._next
        self._next = place + 1
        if place in self._removed:
            self._dropped[place] = (stream, _kept(list(values[1:])))
            return []
        return self._emit(values, stream, place)

    def report_error(self, error: BaseException) -> None:
        """Keep the error (it fails nothing)."""
        self._out.report_error(error)


def _kept(values: list[Any]) -> list[Any] | None:
    """``values`` if a dead letter can keep them as they are, else ``None``."""
    try:
        pack_plain(values, exact=True)
    except (TypeError, ValueError, OverflowError, RecursionError):
        return None
    return values


class BatchChange(NamedTuple):
    """What one txid's batch leaves out (lineages) and takes in (replayed dead letters).

    ``replayed`` holds ``(record id, stream, values)`` per dead letter, in emission order.
    """

    removed: tuple[int, ...] = ()
    replayed: tuple[tuple[str, str, list[Any]], ...] = ()

    def to_value(self) -> dict[str, Any]:
        """The stored form."""
        return {"removed": list(self.removed), "replayed": [list(r) for r in self.replayed]}

    @classmethod
    def from_value(cls, value: Any) -> BatchChange:
        """Read the stored form back (``ValueError`` when it is not one)."""
        try:
            removed = tuple(int(v) for v in value["removed"])
            replayed = tuple((str(r), str(s), list(v)) for r, s, v in value["replayed"])
        except (TypeError, KeyError, ValueError) as exc:
            msg = f"{value!r} is not a dead-letter batch change ({exc})"
            raise ValueError(msg) from exc
        return cls(removed, replayed)


class BatchChanges:
    """Every txid's ``BatchChange``, in a system state (one key per txid), written at once.

    Example:
        >>> from providers import InMemoryKeyValueState
        >>> changes = BatchChanges(InMemoryKeyValueState("doc/$deadletter-batches"))
        >>> changes.put(4, BatchChange(removed=(lineage(0, 3),)))
        >>> changes.get(4).removed == (lineage(0, 3),), changes.get(5)
        (True, None)
        >>> changes.drop([4]); changes.all()
        {}
    """

    def __init__(self, state: KeyValueState) -> None:
        self._state = state

    def all(self) -> dict[int, BatchChange]:
        """Every stored change, by txid."""
        found: dict[int, BatchChange] = {}
        for key, value in self._state:
            try:
                found[int(key)] = BatchChange.from_value(value)
            except ValueError as exc:
                where = getattr(self._state, "namespace", BATCHES_NAMESPACE)
                msg = f"{where!r} key {key!r}: {exc}"
                raise ValueError(msg) from exc
        return dict(sorted(found.items()))

    def get(self, txid: int) -> BatchChange | None:
        """The change stored for ``txid``."""
        value = self._state.get(txid)
        return None if value is None else BatchChange.from_value(value)

    def put(self, txid: int, change: BatchChange) -> None:
        """Store ``change`` for ``txid``, committed."""
        self._state.put(txid, change.to_value())
        self._state.commit()

    def drop(self, txids: Iterable[int]) -> None:
        """Delete the changes of ``txids`` (committed txids: never emitted again)."""
        gone = False
        for txid in txids:
            if self._state.get(txid) is not None:
                self._state.delete(txid)
                gone = True
        if gone:
            self._state.commit()
