"""State and state providers: the ABCs, the in-memory provider, serializers and lookup."""

from providers._base import (
    DriverOwnedStateProvider,
    KeyValueState,
    State,
    StateProvider,
    merge_layers,
    under,
)
from providers._config import provider_config_fields, redacted_url
from providers._extlib import add_extlib_dirs, extlib_dirs, extlib_origin, load_module
from providers._factory import (
    DEFAULT_PROVIDER,
    SERIALIZER_FIELDS,
    STATE_PROVIDER_CONFIG_KEY,
    STATE_PROVIDER_KEY,
    StateFactory,
    fence_epoch,
    get_provider,
    load_object,
    provider_name,
)
from providers._lease import FENCE_EPOCH_KEY, Lease, LeaseHolder, LeaseStore
from providers._resolve import resolve_serializers
from providers._serializers import MsgpackSerializer, Serializer, encode_value
from providers._ttl import StateTtl, TtlRefresh, is_expired
from providers.errors import (
    FATAL_STATE_ERRORS,
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
from providers.memory import InMemoryKeyValueState, InMemoryKeyValueStateProvider

__all__ = [
    "DEFAULT_PROVIDER",
    "FATAL_STATE_ERRORS",
    "FENCE_EPOCH_KEY",
    "SERIALIZER_FIELDS",
    "STATE_PROVIDER_CONFIG_KEY",
    "STATE_PROVIDER_KEY",
    "DriverOwnedStateProvider",
    "InMemoryKeyValueState",
    "InMemoryKeyValueStateProvider",
    "KeyValueState",
    "Lease",
    "LeaseHeldError",
    "LeaseHolder",
    "LeaseLostError",
    "LeaseStore",
    "MsgpackSerializer",
    "ProviderConfigError",
    "ProviderError",
    "ProviderNotFoundError",
    "Serializer",
    "State",
    "StateBackendError",
    "StateBackendRefusedError",
    "StateFactory",
    "StateFencedError",
    "StateLostError",
    "StateProvider",
    "StateSerializationError",
    "StateTransactionError",
    "StateTtl",
    "StatefulBoltsError",
    "TtlRefresh",
    "add_extlib_dirs",
    "encode_value",
    "extlib_dirs",
    "extlib_origin",
    "fence_epoch",
    "get_provider",
    "is_expired",
    "load_module",
    "load_object",
    "merge_layers",
    "provider_config_fields",
    "provider_name",
    "redacted_url",
    "resolve_serializers",
    "under",
]
