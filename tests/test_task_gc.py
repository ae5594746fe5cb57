"""A task runs with the garbage collector off; young garbage is still collected, cheaply."""

from __future__ import annotations

import gc
import pickle
from collections.abc import Iterator
from typing import Any

import pytest

from statefulbolts.runtime import _worker
from statefulbolts.runtime._worker import _QUIET_YOUNG_LIMIT, _YOUNG_LIMIT, YoungGarbage


@pytest.fixture
def gc_off() -> Iterator[None]:
    was = gc.isenabled()
    gc.disable()
    gc.collect()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _cycles(n: int) -> None:
    for _ in range(n):
        a: list[Any] = []
        a.append(a)  # unreachable once the loop moves on: only the collector frees it


def test_cyclic_garbage_is_collected_and_keeps_the_limit(gc_off: None) -> None:
    young = YoungGarbage()
    young.limit = 1_000
    _cycles(5_000)
    young()
    assert gc.get_count()[0] < 1_000  # collected
    assert young.limit == _YOUNG_LIMIT  # garbage found: keep looking at the usual pace


def test_a_collection_that_finds_nothing_backs_off(gc_off: None) -> None:
    young = YoungGarbage()
    young.limit = 1_000
    alive = [[i] for i in range(5_000)]  # tracked, young and all reachable
    young()
    assert young.limit == _QUIET_YOUNG_LIMIT
    assert len(alive) == 5_000


def test_below_the_limit_nothing_is_collected(gc_off: None) -> None:
    young = YoungGarbage()
    _cycles(100)
    before = gc.get_count()[0]
    young()
    assert gc.get_count()[0] >= before
    assert young.limit == _YOUNG_LIMIT
    assert _worker._YOUNG_LIMIT < _QUIET_YOUNG_LIMIT


@pytest.mark.parametrize("on", [False, True])
def test_reading_a_broadcast_leaves_the_collector_as_it_was(tmp_path: Any, on: bool) -> None:
    # A broadcast as a Spark worker sees it: a path to the pickled value, read on first use.
    # PySpark's own read turns the collector on whatever it was; a task reads images while
    # its hot loop runs with the collector off.
    from pyspark.core.broadcast import Broadcast

    path = tmp_path / "image"
    path.write_bytes(pickle.dumps(b"an image"))
    ref = Broadcast(path=str(path))
    was = gc.isenabled()
    try:
        _collector(on)
        assert _worker.broadcast_value(ref) == b"an image"
        assert gc.isenabled() is on
    finally:
        _collector(was)


def _collector(on: bool) -> None:
    if on:
        gc.enable()
    else:
        gc.disable()
