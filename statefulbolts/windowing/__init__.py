"""Windowed bolts: Storm's sliding and tumbling windows, by count or duration.

Windows run on processing time, or on event time with watermarks, a lag and late tuples.

- ``BaseWindowedBolt``: subclass it, configure the window with ``with_window`` /
  ``with_tumbling_window`` (``Count(n)`` or ``Duration(ms)``) and, for event time,
  ``with_timestamp_field``, ``with_lag``, ``with_watermark_interval`` and
  ``with_late_tuple_stream``; implement ``execute(window)``.
- ``Window``: ``get()``, ``get_new()``, ``get_expired()``, ``get_start_timestamp()``,
  ``get_end_timestamp()``.
- ``BaseStatefulWindowedBolt``: a windowed bolt with ``init_state(state)``, a
  ``KeyValueState`` committed with the windows.
- ``WindowedBoltExecutor``: what ``TopologyBuilder.set_bolt`` wraps a windowed bolt in; it
  keeps the windows in the state provider, checkpointed (its module docstring: the steps).
- ``WindowManager``: the pure core an executor drives (``add``, ``on_time``, ``on_watermark``),
  returning a ``WindowUpdate`` (windows fired, tuples released, tuples late), with
  ``snapshot()`` / ``restore()`` for checkpointing. Its module docstring defines the windows.

Example:
    >>> from statefulbolts.windowing import Duration, WindowConfig, WindowManager
    >>> manager = WindowManager(WindowConfig(Duration(10), Duration(5)))
    >>> _ = manager.on_time(0)
    >>> _ = manager.add("a", 1), manager.add("b", 3)
    >>> fired = manager.on_time(12).fired
    >>> [(w.get_start_timestamp(), w.get_end_timestamp(), w.get(), w.get_new()) for w in fired]
    [(-5, 5, ['a', 'b'], ['a', 'b']), (0, 10, ['a', 'b'], [])]
"""

from statefulbolts.windowing._bolt import LATE_TUPLE_FIELD, BaseWindowedBolt
from statefulbolts.windowing._config import (
    DEFAULT_LAG_MS,
    DEFAULT_WATERMARK_INTERVAL_MS,
    Count,
    Duration,
    WindowConfig,
)
from statefulbolts.windowing._errors import (
    WindowConfigError,
    WindowingError,
    WindowStateError,
    WindowTimeError,
)
from statefulbolts.windowing._executor import (
    WindowedBoltExecutor,
    holds_window_tuples,
    tick_secs_for,
)
from statefulbolts.windowing._manager import WindowManager, WindowUpdate
from statefulbolts.windowing._stateful import BaseStatefulWindowedBolt
from statefulbolts.windowing._window import Window

__all__ = [
    "DEFAULT_LAG_MS",
    "DEFAULT_WATERMARK_INTERVAL_MS",
    "LATE_TUPLE_FIELD",
    "BaseStatefulWindowedBolt",
    "BaseWindowedBolt",
    "Count",
    "Duration",
    "Window",
    "WindowConfig",
    "WindowConfigError",
    "WindowManager",
    "WindowStateError",
    "WindowTimeError",
    "WindowUpdate",
    "WindowedBoltExecutor",
    "WindowingError",
    "holds_window_tuples",
    "tick_secs_for",
]
