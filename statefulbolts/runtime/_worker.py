"""A Spark Python worker's garbage collection, tuned for tasks that hold many live tuples.

No pyspark here.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

__all__ = ["YoungGarbage", "broadcast_value", "freeze_long_lived"]

# The young objects that make a chunk boundary of the hot loop collect.
_YOUNG_LIMIT = 200_000
# The limit after a young collection found no garbage: a task of a million tuples collects once
# more at most, and cyclic garbage a bolt starts making later stays bounded (some 100 MB).
_QUIET_YOUNG_LIMIT = 1_000_000


class YoungGarbage:
    """Collects the youngest generation at chunk boundaries of a task that runs with GC off.

    It is there for cyclic garbage made by user code. The tuples of a task stay alive until its
    end (acks keep them), so a young collection mostly walks live tuples to find nothing: once
    one finds nothing, the bolt is taken to make no cycles, and the next waits 5 times longer.

    ``held`` counts the young objects the runtime itself keeps alive and made since this
    object was (a task's collector: the row of each tuple emitted on a stream of two or more
    fields): they are not counted towards the limit. A counting task that emits
    ``(word, count)`` keeps one list per word until the task ends, and a young collection
    walked every one of them to find nothing (some 50 ms a task of 500,000 words, in either
    bolt form). Young objects alive when this object is made (the task's input, unpickled)
    are not counted either: they are not garbage the task's bolts made.
    """

    __slots__ = ("base", "held", "limit")

    def __init__(self, held: Callable[[], int] = lambda: 0) -> None:
        self.limit = _YOUNG_LIMIT
        self.held = held
        # young = gc count - held() - base: nothing young yet, whatever is alive now.
        self.base = gc.get_count()[0] - held()

    def __call__(self) -> None:
        if gc.get_count()[0] - self.held() - self.base > self.limit:
            self.limit = _YOUNG_LIMIT if gc.collect(0) else _QUIET_YOUNG_LIMIT
            self.base = -self.held()  # the collection left nothing young


def broadcast_value(ref: Any) -> Any:
    """A PySpark broadcast's ``value``, with the collector left off if it was off.

    ``Broadcast.load`` turns the collector off while it unpickles and back on when done, on
    whatever it was before. A task reads images from broadcasts after it turned the collector
    off for its hot loop: read bare, the rest of the task ran with it on, and a counting task
    of 500,000 tuples paid some 2,000 automatic collections (0.6 s of its 1.3 s) in the jobs
    where its worker read a broadcast.
    """
    was_on = gc.isenabled()
    try:
        return ref.value
    finally:
        if not was_on:
            gc.disable()


_frozen_in_this_process = False


def freeze_long_lived() -> None:
    """Once per Python worker: take the objects alive now out of the collector's sight.

    PySpark's daemon runs a full ``gc.collect()`` after every task of a reused worker. A full
    collection walks every tracked object, some 50,000 once pyspark and this package are
    imported, and took 10-40 ms here: on the path between two stages of every job. What is
    alive before the first task is modules, classes and functions; freezing them (after
    importing what tasks use) leaves the collector only the objects made since.
    """
    global _frozen_in_this_process
    if _frozen_in_this_process:
        return
    _frozen_in_this_process = True
    # The job's protocol (its ``TaskProgram``'s package) came in with the job's closure; the
    # providers its tasks open are imported now, so that they are frozen too.
    import providers  # noqa: F401

    gc.collect()
    gc.freeze()
