"""Every error statefulbolts raises on purpose, in one tree.

::

    StatefulBoltsError                          (providers.errors)
    ├── ProviderError ...                       state and providers (see providers.errors)
    ├── ConfigError (ValueError)                a config key with a wrong type or value
    ├── TopologyError (ValueError)              wiring: unknown component or stream, cycle, ...
    ├── FieldNotFoundError (KeyError)           a tuple has no such field
    ├── UnanchoredEmitError (RuntimeError)      a bolt in a stateful topology emitted unanchored
    ├── UnshippableValueError (TypeError)       a component emitted a value that cannot be pickled
    ├── CheckpointError (RuntimeError)          illegal checkpoint transition
    ├── FailedException                         raised by a BasicBolt to fail its input (Storm's)
    │   └── ReportedFailedException             ... and report the error too
    ├── StateFileError (ValueError)             a state export file is corrupt, truncated, foreign
    ├── StateToolError (RuntimeError)           the state tool cannot do it (statefulbolts.state)
    │   ├── StateNotFoundError (LookupError)    nothing stored for that topology / component
    │   ├── StateOverwriteError                 an import target already holds state
    │   └── StateEvolutionError                 stored state cannot take the topology's shape
    ├── DeadLetterError (RuntimeError)          a dead-letter record cannot be read or used
    │   └── DeadLetterNotFoundError (LookupError)   no record with that id
    ├── WindowingError ...                      windowed bolts (see statefulbolts.windowing)
    ├── TimerError ...                          per-key timers (see statefulbolts.timers)
    └── TopologyFailedError (RuntimeError)      the runtime gave up (names component, task, txid)
        ├── TaskFailedError                     one task's error, carried from a Spark worker
        └── DriverFencedError                   another driver of the topology took over
"""

from __future__ import annotations

from typing import Any

from providers.errors import (
    LeaseHeldError,
    LeaseLostError,
    ProviderConfigError,
    ProviderError,
    ProviderNotFoundError,
    StateBackendError,
    StateBackendRefusedError,
    StateFencedError,
    StatefulBoltsError,
    StateLostError,
    StateSerializationError,
    StateTransactionError,
)

__all__ = [
    "mark_raised_in",
    "raised_in",
    "CheckpointError",
    "ConfigError",
    "DeadLetterError",
    "DeadLetterNotFoundError",
    "DriverFencedError",
    "FailedException",
    "FieldNotFoundError",
    "LeaseHeldError",
    "LeaseLostError",
    "ProviderConfigError",
    "ProviderError",
    "ProviderNotFoundError",
    "ReportedFailedException",
    "StateBackendError",
    "StateBackendRefusedError",
    "StateEvolutionError",
    "StateFencedError",
    "StateFileError",
    "StateLostError",
    "StateNotFoundError",
    "StateOverwriteError",
    "StateSerializationError",
    "StateToolError",
    "StateTransactionError",
    "StatefulBoltsError",
    "TaskFailedError",
    "TopologyError",
    "TopologyFailedError",
    "UnanchoredEmitError",
    "UnshippableValueError",
]


class ConfigError(StatefulBoltsError, ValueError):
    """A config key has a wrong type or value; the message names the key and what is allowed."""


class TopologyError(StatefulBoltsError, ValueError):
    """The topology is wired wrongly; the message names the component."""


class FieldNotFoundError(StatefulBoltsError, KeyError):
    """A tuple or a ``Fields`` has no field of that name."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class UnanchoredEmitError(StatefulBoltsError, RuntimeError):
    """A bolt in a stateful topology emitted a tuple without anchors."""


class UnshippableValueError(StatefulBoltsError, TypeError):
    """A component emitted a value that cannot be pickled, so no task can be sent it.

    The error of the tuple whose processing emitted it (or of the spout tuple itself), as if
    ``execute`` had raised it: the dead-letter policy takes it like the user's own exception.
    The message is one line naming the component, task index, stream, field and the value's
    type. ``failing`` is the tuple to blame when the runtime names it itself (a spout's own
    tuple, or the input tuple that emitted the value): its ``statefulbolts.runtime``
    ``FailingTuple``.
    """

    def __init__(self, message: str, failing: Any = None) -> None:
        super().__init__(message)
        self.failing = failing


class CheckpointError(StatefulBoltsError, RuntimeError):
    """An illegal checkpoint state transition or action."""


class FailedException(StatefulBoltsError):  # noqa: N818 - Storm's name, kept for users
    """Raise from ``BasicBolt.execute`` to fail the input tuple (it is replayed)."""


class ReportedFailedException(FailedException):
    """Like ``FailedException``, and the error is reported as well."""


class StateFileError(StatefulBoltsError, ValueError):
    """A state export file is not one this version can read; names the file and where."""


class StateToolError(StatefulBoltsError, RuntimeError):
    """The state tool cannot do what was asked; the message says why and what to do."""


class StateNotFoundError(StateToolError, LookupError):
    """Nothing is stored for the topology, transactional id or component asked for."""


class StateEvolutionError(StateToolError):
    """The stored state cannot take the shape the topology asks for; nothing was changed.

    The message names the component, what is stored, what was asked, and the fix.
    """


class StateOverwriteError(StateToolError):
    """An import's target already holds state of the namespaces it would write."""


class DeadLetterError(StatefulBoltsError, RuntimeError):
    """A dead-letter record cannot be read or used; names the record and the store."""


class DeadLetterNotFoundError(DeadLetterError, LookupError):
    """No dead-letter record has that id in the topology's store."""


class TopologyFailedError(StatefulBoltsError, RuntimeError):
    """The runtime stopped the topology; ``component``, ``task`` and ``txid`` say where."""

    def __init__(
        self,
        message: str,
        *,
        component: str | None = None,
        task: int | None = None,
        txid: int | None = None,
        cause: str | None = None,
        fatal: bool = False,
    ) -> None:
        super().__init__(message)
        self.component = component
        self.task = task
        self.txid = txid
        self.cause = cause
        # Stopped by a state error a restart cannot fix (providers.FATAL_STATE_ERRORS): the
        # store refused, or lost committed state. ``statefulbolts run`` exits 2, not 1.
        self.fatal = fatal


class TaskFailedError(TopologyFailedError):
    """A task's user code raised inside a Spark worker."""


class DriverFencedError(TopologyFailedError):
    """Another driver of the topology took its lease over; this one stopped for good.

    Always ``fatal``: a restart of this driver would only be refused (or take the topology
    back from the driver that now runs it), so ``statefulbolts run`` exits 2.
    """


# The attribute ``mark_raised_in`` sets on an exception.
_RAISED_IN = "_statefulbolts_raised_in"


def mark_raised_in(exc: BaseException, where: str) -> None:
    """Say on ``exc`` which framework callback it came out of (``on_timer of key 'a' ...``).

    The innermost callback wins: a mark already there stays. A task that fails with ``exc``
    names ``where`` in its error (``TaskError.raised_in``), and the traceback shows it as a
    note. An exception that takes no attributes only gets the note.
    """
    if raised_in(exc) is not None:
        return
    exc.add_note(f"raised in {where}")
    try:
        setattr(exc, _RAISED_IN, where)
    except AttributeError:  # a class with __slots__ and no __dict__
        pass


def raised_in(exc: BaseException) -> str | None:
    """The callback ``mark_raised_in`` named on ``exc``, or ``None``."""
    where = getattr(exc, _RAISED_IN, None)
    return where if isinstance(where, str) else None
