"""``_rowloop.c``: the inner loops of ``_rows.feed_rows`` and ``feed_basic``, compiled."""

from collections.abc import Callable, Sequence
from typing import Any

def bind(tuple_class: type, /) -> None: ...
def stretch(
    execute: Callable[[Any], None],
    acked: list[Any],
    values: list[Any],
    roots: Sequence[int],
    t: Any,
    start: int,
    stop: int,
    first: int,
    single: bool,
    /,
) -> tuple[int, BaseException | None]: ...
def stretch_basic(
    execute: Callable[[Any, Any], None],
    collector: Any,
    values: list[Any],
    roots: Sequence[int],
    t: Any,
    start: int,
    stop: int,
    first: int,
    single: bool,
    /,
) -> tuple[int, BaseException | None]: ...
