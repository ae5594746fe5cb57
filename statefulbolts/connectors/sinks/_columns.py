"""Staged records kept as columns: what a sink's ``stage_batch`` may give instead of rows.

A sink stages a record as a short row of plain values (Kafka's is ``[topic, partition, key,
value, headers]``). Made from a column batch, those rows cost a Python list each when staged,
msgpack an array header and every field again when stored, and a list each again when read
back at COMMIT: for a million small records, a third of what exactly-once adds to a run.
``StagedColumns`` keeps the same records as one list per field, and a field that is the same
for every record (the sink's own topic, no headers) as that one value: stored as one map per
chunk, read back as a handful of lists.

In a sink bolt's state a chunk of columns is that map packed once more into bytes (``packed``):
the state stores bytes as they are, and the bolt that staged them can tell, by comparing
bytes, that what its state holds at COMMIT is exactly what it staged (``ExactlyOnceSinkBolt``
then publishes the columns it kept instead of decoding them again).

To everything that reads rows it is a sequence of rows: ``len``, iteration and indexing give
each record as the list ``stage`` would have made, so a sink's ``publish`` or ``write`` that
loops over records works unchanged; one that knows columns (``KafkaSink``) reads ``column(i)``
and ``constant(i)`` instead. Slicing gives columns again, which is how ``ExactlyOnceSinkBolt``
cuts chunks.

Example:
    >>> cols = StagedColumns(3, {1: [b"a", b"b"], 2: [b"1", b"2"]}, {0: None})
    >>> len(cols), list(cols)
    (2, [[None, b'a', b'1'], [None, b'b', b'2']])
    >>> cols[1:].stored()
    {'$columns': 1, 'width': 3, 'lists': {'1': [b'b'], '2': [b'2']}, 'constants': {'0': None}}
    >>> StagedColumns.from_stored(cols.stored()) == cols
    True
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import repeat
from typing import Any, overload

from providers import pack_plain, unpack_plain

__all__ = ["StagedColumns", "concat_staged", "staged_count"]

_TAG = "$columns"


class StagedColumns(Sequence[list[Any]]):
    """``width``-field records: ``lists[i]`` holds field i of each, ``constants[i]`` one for all.

    Every field is in exactly one of the two maps; every list has the same length, ``n`` (which
    only records whose every field is a constant need given).

    Raises:
        ValueError: a field in both maps or in neither, or lists of different lengths.
    """

    __slots__ = ("_n", "constants", "lists", "width")

    def __init__(
        self,
        width: int,
        lists: Mapping[int, list[Any]],
        constants: Mapping[int, Any],
        n: int | None = None,
    ) -> None:
        if set(lists) & set(constants) or set(lists) | set(constants) != set(range(width)):
            msg = (
                f"staged columns of {width} fields need each field once, as a list or a "
                f"constant: lists {sorted(lists)}, constants {sorted(constants)}"
            )
            raise ValueError(msg)
        lengths = {len(v) for v in lists.values()} | ({n} if n is not None else set())
        if len(lengths) > 1:
            msg = f"staged columns of different lengths: {sorted(lengths)}"
            raise ValueError(msg)
        self.width = width
        self.lists = dict(lists)
        self.constants = dict(constants)
        self._n = lengths.pop() if lengths else 0

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[list[Any]]:
        fields = [self.column(i) for i in range(self.width)]
        return map(list, zip(*fields, strict=False)) if self._n else iter(())

    @overload
    def __getitem__(self, index: int) -> list[Any]: ...
    @overload
    def __getitem__(self, index: slice) -> StagedColumns: ...
    def __getitem__(self, index: int | slice) -> list[Any] | StagedColumns:
        if isinstance(index, slice):
            n = len(range(*index.indices(self._n)))
            return StagedColumns(
                self.width, {i: v[index] for i, v in self.lists.items()}, self.constants, n
            )
        if not -self._n <= index < self._n:
            msg = f"record {index} of {self._n} staged"
            raise IndexError(msg)
        return [
            self.lists[i][index] if i in self.lists else self.constants[i]
            for i in range(self.width)
        ]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, StagedColumns):
            return NotImplemented
        return (self.width, self.lists, self.constants) == (
            other.width,
            other.lists,
            other.constants,
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, as a list is

    def __repr__(self) -> str:
        return f"StagedColumns({self._n} records of {self.width} fields)"

    def column(self, i: int) -> Sequence[Any] | repeat[Any]:
        """Field ``i`` of every record: its list, or its constant repeated (as many times)."""
        if i in self.lists:
            return self.lists[i]
        return repeat(self.constants[i], self._n)

    def stored(self) -> dict[str, Any]:
        """The form kept in a sink bolt's state (msgpack: string keys, plain values)."""
        return {
            _TAG: self._n,
            "width": self.width,
            "lists": {str(i): v for i, v in self.lists.items()},
            "constants": {str(i): v for i, v in self.constants.items()},
        }

    def packed(self) -> bytes:
        """``stored`` in the state's codec, as bytes: how a sink bolt keeps a chunk.

        Raises:
            TypeError, ValueError, OverflowError: a value the codec cannot encode.
        """
        return pack_plain(self.stored())

    @staticmethod
    def is_stored(value: Any) -> bool:
        """Whether ``value`` is what ``stored`` or ``packed`` makes (and not a chunk of rows)."""
        return isinstance(value, bytes) or (isinstance(value, dict) and _TAG in value)

    @classmethod
    def from_stored(cls, value: Mapping[str, Any] | bytes) -> StagedColumns:
        """The columns ``stored`` (or ``packed``) gave ``value`` of."""
        fields: Mapping[str, Any] = unpack_plain(value) if isinstance(value, bytes) else value
        lists = {int(i): v for i, v in fields["lists"].items()}
        constants = {int(i): v for i, v in fields["constants"].items()}
        return cls(int(fields["width"]), lists, constants, int(fields[_TAG]))


def staged_count(value: Any) -> int:
    """How many records a stored chunk holds: rows (a list), or columns (``stored``, ``packed``)."""
    if isinstance(value, bytes):
        value = unpack_plain(value)
    return int(value[_TAG]) if StagedColumns.is_stored(value) else len(value)


def concat_staged(chunks: Sequence[Any]) -> Sequence[Any]:
    """The records of chunks, in order: columns when they all are, with equal constants.

    A chunk is as stored (rows, or columns ``stored`` or ``packed``) or already
    ``StagedColumns``. A chunk of rows (the form every sink staged in before columns, and a
    sink that stages rows) or columns of another shape make the whole a list of rows.
    """
    parts = [
        StagedColumns.from_stored(c)
        if not isinstance(c, StagedColumns) and StagedColumns.is_stored(c)
        else c
        for c in chunks
    ]
    first = parts[0] if parts else None
    if isinstance(first, StagedColumns) and all(
        isinstance(p, StagedColumns)
        and p.width == first.width
        and p.constants == first.constants
        and p.lists.keys() == first.lists.keys()
        for p in parts
    ):
        if len(parts) == 1:
            return first
        lists: dict[int, list[Any]] = {i: [] for i in first.lists}
        for part in parts:
            for i, values in part.lists.items():
                lists[i] += values
        n = sum(len(p) for p in parts)
        return StagedColumns(first.width, lists, first.constants, n)
    return [row for part in parts for row in part]
