"""The exception tree shared by every statefulbolts package.

It is rooted here because ``providers`` imports nothing of ours; ``statefulbolts.errors`` re-exports
it and adds the topology and runtime branches::

    StatefulBoltsError
    ├── ProviderError
    │   ├── ProviderConfigError (ValueError)        bad topology.state.provider.config
    │   ├── ProviderNotFoundError (LookupError)     a dotted name that does not resolve
    │   ├── StateSerializationError (TypeError)     a key or value the serializer cannot encode
    │   ├── StateTransactionError (RuntimeError)    prepare / commit / rollback out of order
    │   ├── StateFencedError (RuntimeError)         a write of a driver another one took over from
    │   ├── StateBackendError (ConnectionError)     the store is unavailable: wait it out
    │   ├── StateBackendRefusedError (RuntimeError) the store answers but refuses (OOM, auth, ...)
    │   ├── StateLostError (RuntimeError)           committed state is not where it should be
    │   ├── LeaseHeldError (RuntimeError)           another driver holds the topology's lease
    │   └── LeaseLostError (RuntimeError)           this driver's lease was taken over
    └── (statefulbolts.errors adds the rest)

``StateBackendError`` is the one a runtime waits out (``topology.state.backend.timeout.secs``):
a connection lost, a timeout, a server still loading. ``StateBackendRefusedError`` and
``StateLostError`` stop a topology at once (``FATAL_STATE_ERRORS``): waiting does not make a
full store empty or bring back a flushed one, and going on would write over the evidence.
``StateFencedError`` and ``LeaseLostError`` stop a driver for good too: another driver of the
same topology took its lease over (``providers._lease``), and only that one may write now.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from providers._lease import Lease


class StatefulBoltsError(Exception):
    """Root of every error statefulbolts raises on purpose."""


class ProviderError(StatefulBoltsError):
    """Something about a state provider or its state went wrong."""


class ProviderConfigError(ProviderError, ValueError):
    """The provider configuration is invalid; the message names the key and what is allowed."""


class ProviderNotFoundError(ProviderError, LookupError):
    """A dotted provider or serializer name did not resolve to a usable class."""


class StateSerializationError(ProviderError, TypeError):
    """A key or value could not be serialized or deserialized."""


class StateTransactionError(ProviderError, RuntimeError):
    """A state transaction step was called out of order (for example commit without prepare)."""


class StateBackendError(ProviderError, ConnectionError):
    """The store behind a state (a server, a file) failed or could not be reached."""


class StateBackendRefusedError(ProviderError, RuntimeError):
    """The store answered and refused, for a reason retrying will not fix.

    Out of memory under ``noeviction``, a read-only replica, a key of the wrong type, a wrong
    password, a missing permission. The message names the cause and the fix.
    """


class StateLostError(ProviderError, RuntimeError):
    """A namespace's committed state is not the one the protocol expects.

    The store lost committed data (restarted empty, flushed, pointed at another database) or
    holds a later copy than the checkpoint. The message names the store, the namespace, the
    txid found and the txid expected. A topology never continues from such a state.
    """


class StateFencedError(ProviderError, RuntimeError):
    """The store refused a write: it carries an older epoch than the namespace has seen.

    Another driver of the same topology took the lease over (``providers._lease``) and
    fenced this one off; nothing of the refused step was written. ``epoch`` is the writer's,
    ``fence`` the namespace's (``None`` when the store did not say).
    """

    def __init__(self, message: str, *, epoch: int | None = None, fence: int | None = None) -> None:
        super().__init__(message)
        self.epoch = epoch
        self.fence = fence

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), str(self), {"epoch": self.epoch, "fence": self.fence}))


class LeaseHeldError(ProviderError, RuntimeError):
    """Another driver holds the scope's live lease; ``lease`` says whose it is."""

    def __init__(self, message: str, *, lease: Lease | None = None) -> None:
        super().__init__(message)
        self.lease = lease

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), str(self), {"lease": self.lease}))


class LeaseLostError(ProviderError, RuntimeError):
    """This driver's lease is gone: taken over by another driver (``lease``, if known)."""

    def __init__(self, message: str, *, lease: Lease | None = None) -> None:
        super().__init__(message)
        self.lease = lease

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild, (type(self), str(self), {"lease": self.lease}))


def _rebuild(cls: type[Exception], message: str, fields: dict[str, object]) -> Exception:
    """Unpickle an error with keyword fields (they cross process boundaries with tasks)."""
    return cls(message, **fields)


# The provider errors that stop a topology at once instead of being retried or waited out.
FATAL_STATE_ERRORS: tuple[type[ProviderError], ...] = (
    StateBackendRefusedError,
    StateLostError,
    StateFencedError,
    LeaseLostError,
)
