"""The compiled parts of the per-tuple path, turned off in this process: for A/B figures.

    with python_only():
        ...   # per-tuple bolts run as they do where no C module was built

Three modules are optional C (``setup.py``): the row loop's inner stretch
(``_rows.COMPILED``), a ``BasicBolt``'s emit of one ``str`` (``_TaskBasicCollector.emit``, its
compiled base's) and a layered state's ``get`` and ``put`` of a fresh ``str`` key
(``LayeredKeyValueState``'s compiled base). Each has its Python twin, which this switches to
for the ``with`` block: the same code then runs as an install without a C compiler runs it.
Only in this process: a Spark worker runs what its own imports found.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from providers._layered import LayeredKeyValueState
from statefulbolts.runtime import _rows
from statefulbolts.runtime._collector import _TaskBasicCollector

__all__ = ["python_only"]


@contextmanager
def python_only() -> Iterator[None]:
    """Run the ``with`` block on the Python twins of the compiled parts."""
    saved = (
        _rows.COMPILED,
        vars(LayeredKeyValueState).get("get"),
        vars(LayeredKeyValueState).get("put"),
        vars(_TaskBasicCollector).get("emit"),
    )
    _rows.COMPILED = False
    LayeredKeyValueState.get = LayeredKeyValueState._get  # type: ignore[method-assign]
    LayeredKeyValueState.put = LayeredKeyValueState._put  # type: ignore[method-assign]
    _TaskBasicCollector.emit = _TaskBasicCollector._emit  # type: ignore[method-assign]
    try:
        yield
    finally:
        _rows.COMPILED = saved[0]
        for cls, name, old in (
            (LayeredKeyValueState, "get", saved[1]),
            (LayeredKeyValueState, "put", saved[2]),
            (_TaskBasicCollector, "emit", saved[3]),
        ):
            if old is None:
                delattr(cls, name)  # the compiled base's, again
            else:
                setattr(cls, name, old)
