"""The errors of per-key timers.

::

    StatefulBoltsError
    └── TimerError                              a timer bolt or its timer service
        ├── TimerArgumentError (ValueError)     a timer's time or key that cannot be one
        └── TimerNotReadyError (RuntimeError)   the service used before it has its state
"""

from __future__ import annotations

from statefulbolts.errors import StatefulBoltsError


class TimerError(StatefulBoltsError):
    """Something about a timer bolt or its timer service went wrong."""


class TimerArgumentError(TimerError, ValueError):
    """A timer's time is not a finite number of milliseconds, or its key cannot be stored."""


class TimerNotReadyError(TimerError, RuntimeError):
    """The timer service was used before ``init_state``, or outside a transaction."""
