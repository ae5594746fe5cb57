"""Per-key timers for stateful bolts, as Flink's keyed timers and Spark's ``transformWithState``.

- ``TimerBolt``: a ``StatefulBolt`` whose ``self.timers`` (a ``TimerService``) registers and
  deletes timers per key, in processing time (the transaction's start time, fixed by the
  driver) or event time (a watermark the bolt advances); ``on_timer(key, at_ms, time_domain,
  collector)`` is called once per timer when it is due.
- The timers are stored with the bolt's state (same provider, the task's ``$timers``
  namespace beside its own), and prepared, committed and rolled back with it: a replayed
  transaction fires exactly the timers its first attempt fired, and a timer fired in a
  committed transaction never fires again, a driver restart included.

When each timer fires is written down in ``statefulbolts.timers._service``'s docstring.

Example:
    >>> from providers import InMemoryKeyValueState
    >>> fired = []
    >>> service = TimerService(
    ...     InMemoryKeyValueState("demo/flush-0/$timers"),
    ...     lambda key, at, domain: fired.append((key, at, domain.value)),
    ... )
    >>> service.register_event_time_timer("w1", 1000)
    >>> service.advance_watermark(999)
    >>> service.advance_watermark(1000)
    >>> fired, service.current_watermark()
    ([('w1', 1000, 'event')], 1000)
"""

from statefulbolts.timers._bolt import TimerBolt, TimerOutputCollector, attach_timers, uses_timers
from statefulbolts.timers._errors import TimerArgumentError, TimerError, TimerNotReadyError
from statefulbolts.timers._service import (
    StoredTimer,
    TimeDomain,
    TimerService,
    stored_timers,
    stored_watermark,
    timer_of_entry,
    timer_records,
)

__all__ = [
    "StoredTimer",
    "TimeDomain",
    "TimerArgumentError",
    "TimerBolt",
    "TimerError",
    "TimerNotReadyError",
    "TimerOutputCollector",
    "TimerService",
    "attach_timers",
    "stored_timers",
    "stored_watermark",
    "timer_of_entry",
    "timer_records",
    "uses_timers",
]
