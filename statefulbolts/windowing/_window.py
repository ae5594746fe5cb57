"""``Window``: what a windowed bolt's ``execute`` receives when a window fires."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Generic, TypeVar

T = TypeVar("T")
U = TypeVar("U")


class Window(Generic[T]):
    """One firing of a window: its tuples, the new and the expired ones, and its bounds.

    - ``get()``: the tuples in the window, oldest first (event time: in timestamp order).
    - ``get_new()``: those that were not in the previous window that fired.
    - ``get_expired()``: those of the previous window that are not in this one. So the window is
      always the previous one, minus ``get_expired()``, plus ``get_new()``: an aggregate can be
      kept up to date incrementally.
    - ``get_end_timestamp()``: the window's end in milliseconds. A window that slides by time
      ends at its boundary and holds the tuples with ``start <= ts < end``. A window that slides
      by count ends at the timestamp of the tuple that made it fire, which it holds.
    - ``get_start_timestamp()``: ``end - length`` for a window whose length is a ``Duration``;
      ``None`` for a window of ``Count`` tuples (it has no start in time).
    - ``index``: how many windows fired before this one (0 for the first), the same after a
      restore and replay, so a consumer can tell a window it has already seen.

    Example:
        >>> w = Window(["b", "c"], new=["c"], expired=["a"], start=0, end=10, index=1)
        >>> w.get(), w.get_new(), w.get_expired(), len(w), list(w)
        (['b', 'c'], ['c'], ['a'], 2, ['b', 'c'])
        >>> w.map(str.upper).get()
        ['B', 'C']
    """

    __slots__ = ("_items", "_new", "_expired", "_start", "_end", "index")

    def __init__(
        self,
        items: Sequence[T],
        *,
        new: Sequence[T],
        expired: Sequence[T],
        start: int | None,
        end: int,
        index: int,
    ) -> None:
        self._items = list(items)
        self._new = list(new)
        self._expired = list(expired)
        self._start = start
        self._end = end
        self.index = index

    def get(self) -> list[T]:
        """The tuples in the window, oldest first."""
        return list(self._items)

    def get_new(self) -> list[T]:
        """The tuples in this window that were not in the previous one that fired."""
        return list(self._new)

    def get_expired(self) -> list[T]:
        """The tuples of the previous window that fired that are not in this one."""
        return list(self._expired)

    def get_start_timestamp(self) -> int | None:
        """``end - length`` in milliseconds for a window of a ``Duration``; else ``None``."""
        return self._start

    def get_end_timestamp(self) -> int:
        """The window's end in milliseconds (see the class docstring for what it includes)."""
        return self._end

    def map(self, fn: Callable[[T], U]) -> Window[U]:
        """The same window with ``fn`` applied to every tuple (ids to tuples, say)."""
        return Window(
            [fn(x) for x in self._items],
            new=[fn(x) for x in self._new],
            expired=[fn(x) for x in self._expired],
            start=self._start,
            end=self._end,
            index=self.index,
        )

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[T]:
        return iter(self._items)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Window):
            return NotImplemented
        return self._key() == other._key()

    def __hash__(self) -> int:
        return hash((self.index, self._end, len(self._items)))

    def _key(self) -> tuple[object, ...]:
        return (self._items, self._new, self._expired, self._start, self._end, self.index)

    def __repr__(self) -> str:
        return (
            f"Window(index={self.index}, start={self._start}, end={self._end}, "
            f"items={self._items!r}, new={self._new!r}, expired={self._expired!r})"
        )
