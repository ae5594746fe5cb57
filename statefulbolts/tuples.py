"""``Fields``, ``Values``, ``Tuple`` and ``ColumnBatch``: what flows between components."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from statefulbolts.errors import FieldNotFoundError

DEFAULT_STREAM = "default"


class Fields:
    """An ordered list of field names with O(1) lookup.

    Example:
        >>> f = Fields("word", "count")
        >>> f.index("count"), list(f)
        (1, ['word', 'count'])
    """

    __slots__ = ("_names", "_index")

    def __init__(self, *names: str | Iterable[str]) -> None:
        first = names[0] if len(names) == 1 else None
        if first is not None and not isinstance(first, str):
            flat: list[Any] = list(first)
        else:
            flat = list(names)
        for name in flat:
            if not isinstance(name, str) or not name:
                msg = f"field names must be non-empty strings, got {name!r} in {flat!r}"
                raise TypeError(msg)
        if len(set(flat)) != len(flat):
            msg = f"duplicate field name in {flat!r}"
            raise ValueError(msg)
        self._names: tuple[str, ...] = tuple(flat)
        self._index = {name: i for i, name in enumerate(flat)}

    def __len__(self) -> int:
        return len(self._names)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __getitem__(self, i: int) -> str:
        return self._names[i]

    def __contains__(self, name: object) -> bool:
        return name in self._index

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Fields) and other._names == self._names

    def __hash__(self) -> int:
        return hash(self._names)

    def __repr__(self) -> str:
        return f"Fields({', '.join(map(repr, self._names))})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Fields, (list(self._names),))

    def index(self, name: str) -> int:
        """Position of ``name``; raises ``FieldNotFoundError`` listing the known fields."""
        try:
            return self._index[name]
        except KeyError:
            msg = f"no field {name!r}; fields are {list(self._names)}"
            raise FieldNotFoundError(msg) from None

    def select(self, selector: Fields, values: Sequence[Any]) -> list[Any]:
        """The values of ``selector``'s fields, in ``selector``'s order."""
        return [values[self.index(name)] for name in selector]

    def to_list(self) -> list[str]:
        """The names as a list."""
        return list(self._names)


class Values(list[Any]):
    """A list of tuple values, as in Storm: ``Values("storm", 1)``."""

    def __init__(self, *values: Any) -> None:
        super().__init__(values)


class Tuple:
    """One tuple as a bolt sees it.

    ``values`` and ``fields`` line up; ``source_component``, ``source_task`` (global task id) and
    ``source_stream_id`` say where it came from. The acking identity is internal.

    Example:
        >>> t = Tuple(["storm", 2], Fields("word", "count"), "split", 3, "default")
        >>> t.get_value_by_field("word"), t.get_value(1)
        ('storm', 2)
    """

    __slots__ = (
        "values",
        "fields",
        "source_component",
        "source_task",
        "source_stream_id",
        "_root",
        "_edge",
        "_more",
    )

    def __init__(
        self,
        values: Sequence[Any],
        fields: Fields,
        source_component: str,
        source_task: int,
        source_stream_id: str = DEFAULT_STREAM,
        anchors: Sequence[tuple[int, int]] = (),
        root: int = 0,
        edge: int = 0,
    ) -> None:
        self.values = values
        self.fields = fields
        self.source_component = source_component
        self.source_task = source_task
        self.source_stream_id = source_stream_id
        # Acking identity: (root id, this tuple's edge id) for each spout tree it belongs to.
        # The first pair is kept in two slots (the common case), any others in ``_more``. The
        # runtime's edge id is the number the receiving task gave the tuple (see ``acker``).
        self._more: tuple[tuple[int, int], ...] | None = None
        if anchors:
            root, edge = anchors[0]
            if len(anchors) > 1:
                self._more = tuple(anchors[1:])
        self._root = root
        self._edge = edge

    @property
    def anchors(self) -> tuple[tuple[int, int], ...]:
        """``(root id, edge id)`` per spout tree this tuple belongs to; empty when untracked."""
        if not self._root:
            return ()
        first = ((self._root, self._edge),)
        return first + self._more if self._more else first

    def get_value(self, i: int) -> Any:
        """The value at position ``i``."""
        return self.values[i]

    def get_value_by_field(self, name: str) -> Any:
        """The value of field ``name``."""
        return self.values[self.fields.index(name)]

    def get_string(self, i: int) -> str:
        """The value at ``i``, as a ``str`` (it must be one)."""
        value = self.values[i]
        if not isinstance(value, str):
            msg = f"value {i} of {self!r} is {type(value).__name__}, not str"
            raise TypeError(msg)
        return value

    def get_string_by_field(self, name: str) -> str:
        """The value of field ``name`` as a ``str``."""
        return self.get_string(self.fields.index(name))

    def get_integer(self, i: int) -> int:
        """The value at ``i``, as an ``int`` (it must be one; a ``bool`` or a float is not).

        Like ``get_string``, this checks rather than converts: ``int("7")`` or ``int(2.9)`` would
        silently hide an upstream bolt emitting the wrong type.
        """
        value = self.values[i]
        if isinstance(value, bool) or not isinstance(value, int):
            msg = f"value {i} of {self!r} is {type(value).__name__}, not int"
            raise TypeError(msg)
        return value

    def get_integer_by_field(self, name: str) -> int:
        """The value of field ``name`` as an ``int`` (it must be one)."""
        return self.get_integer(self.fields.index(name))

    def contains(self, name: str) -> bool:
        """Whether the tuple has field ``name``."""
        return name in self.fields

    def select(self, selector: Fields) -> list[Any]:
        """Values of the fields in ``selector``."""
        return self.fields.select(selector, self.values)

    def __len__(self) -> int:
        return len(self.values)

    def __getitem__(self, i: int) -> Any:
        return self.values[i]

    def __iter__(self) -> Iterator[Any]:
        return iter(self.values)

    def __repr__(self) -> str:
        return (
            f"Tuple(source={self.source_component}:{self.source_task}, "
            f"stream={self.source_stream_id}, values={list(self.values)!r})"
        )


class ColumnBatch:
    """Consecutive tuples of one source task and stream, as columns: a batch bolt's input.

    What ``BasicBolt.execute_batch`` gets in place of one ``Tuple`` per value: ``len(batch)``
    tuples, in the order the per-tuple path would execute them, read a field at a time
    (``column``) without a ``Tuple`` object per value. ``fields``, ``source_component``,
    ``source_task`` (global task id) and ``source_stream_id`` are those every tuple of the
    batch shares. Columns are views of what the runtime received: read them, do not change them.

    ``tuple(i)`` is the ``i``-th tuple as the per-tuple path gives it (acking identity
    included), for the rare tuple that needs one.

    Example:
        >>> batch = ColumnBatch(
        ...     [["storm", 2], ["spark", 3]], Fields("word", "count"), "count", 4, "default"
        ... )
        >>> len(batch), batch.column("count"), batch.column(0)
        (2, [2, 3], ['storm', 'spark'])
        >>> batch.tuple(1).get_value_by_field("word")
        'spark'
    """

    __slots__ = (
        "fields",
        "source_component",
        "source_task",
        "source_stream_id",
        "_rows",
        "_single",
        "_columns",
        "_roots",
        "_first",
    )

    def __init__(
        self,
        rows: Sequence[Any],
        fields: Fields,
        source_component: str,
        source_task: int,
        source_stream_id: str = DEFAULT_STREAM,
        *,
        single: bool = False,
        roots: Sequence[int] | None = None,
        first: int = 0,
    ) -> None:
        # ``rows`` holds each tuple's values; with ``single`` (a one-field stream) the bare
        # value, as the runtime ships it: the rows are then the column itself.
        self._rows = rows
        self._single = single
        self.fields = fields
        self.source_component = source_component
        self.source_task = source_task
        self.source_stream_id = source_stream_id
        self._columns: dict[int, Sequence[Any]] = {0: rows} if single else {}
        # Acking identity: tuple ``i`` is numbered ``first + i`` by its task and belongs to the
        # tree of ``roots[i]`` (0: none), as ``Tuple._edge`` and ``Tuple._root`` say.
        self._roots: Sequence[int] = roots if roots is not None else [0] * len(rows)
        self._first = first

    def __len__(self) -> int:
        return len(self._rows)

    def column(self, field: str | int) -> Sequence[Any]:
        """The values of ``field`` (a name, or a position), one per tuple, in order."""
        i = field if isinstance(field, int) else self.fields.index(field)
        found = self._columns.get(i)
        if found is None:
            if not 0 <= i < len(self.fields):
                msg = f"no field at position {i}; fields are {self.fields.to_list()}"
                raise IndexError(msg)
            found = self._columns[i] = [row[i] for row in self._rows]
        return found

    @property
    def columns(self) -> dict[str, Sequence[Any]]:
        """Every field's column, by field name."""
        return {name: self.column(i) for i, name in enumerate(self.fields)}

    def row(self, i: int) -> list[Any]:
        """The values of the ``i``-th tuple."""
        values = self._rows[i]
        return [values] if self._single else list(values)

    def tuple(self, i: int) -> Tuple:
        """The ``i``-th tuple, as the per-tuple path would have executed it."""
        # Slot by slot, as the runtime's hot loop builds tuples: an emit anchored to a row
        # makes one, and ``Tuple.__init__`` would cost a third more.
        t = object.__new__(Tuple)
        values = self._rows[i]
        t.values = [values] if self._single else values
        t.fields = self.fields
        t.source_component = self.source_component
        t.source_task = self.source_task
        t.source_stream_id = self.source_stream_id
        t._root = self._roots[i]
        t._edge = self._first + i
        t._more = None
        return t

    def tuples(self) -> Iterator[Tuple]:
        """Every tuple of the batch, in order (what the per-tuple path executes)."""
        return (self.tuple(i) for i in range(len(self._rows)))

    def __repr__(self) -> str:
        return (
            f"ColumnBatch(source={self.source_component}:{self.source_task}, "
            f"stream={self.source_stream_id}, fields={self.fields.to_list()}, "
            f"len={len(self._rows)})"
        )
