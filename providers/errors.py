"""The exception tree shared by every statefulbolts package.

It is rooted here because ``providers`` imports nothing of ours; ``statefulbolts.errors`` re-exports
it and adds the topology and runtime branches::

    StatefulBoltsError
    ├── ProviderError
    │   ├── ProviderConfigError (ValueError)        bad topology.state.provider.config
    │   ├── ProviderNotFoundError (LookupError)     a dotted name that does not resolve
    │   ├── StateSerializationError (TypeError)     a key or value the serializer cannot encode
    │   ├── StateTransactionError (RuntimeError)    prepare / commit / rollback out of order
    │   └── StateBackendError (ConnectionError)     the store itself failed (Redis down, ...)
    └── (statefulbolts.errors adds the rest)
"""

from __future__ import annotations


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
