"""``StateFactory.get_system_state``: what a provider is handed, whatever form the config has."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import pytest

from providers import (
    SERIALIZER_FIELDS,
    STATE_PROVIDER_CONFIG_KEY,
    STATE_PROVIDER_KEY,
    InMemoryKeyValueStateProvider,
    KeyValueState,
    ProviderConfigError,
    ProviderNotFoundError,
    StateFactory,
    StateProvider,
)
from providers.memory import InMemoryKeyValueState

PROVIDER = f"{__name__}.RecordingProvider"
SERIALIZERS = {
    "keyClass": "str",
    "valueClass": "int",
    "keySerializerClass": "nowhere.Keys",
    "valueSerializerClass": "nowhere.Values",
}


class RecordingProvider(StateProvider):
    """Remembers what ``new_state`` was given; hands out an in-memory state."""

    calls: list[tuple[str, Mapping[str, Any], Any]] = []

    def new_state(
        self, namespace: str, conf: Mapping[str, Any], context: Any | None = None
    ) -> InMemoryKeyValueState:
        RecordingProvider.calls.append((namespace, conf, context))
        return InMemoryKeyValueState(namespace)


@pytest.fixture(autouse=True)
def _forget() -> Any:
    RecordingProvider.calls.clear()
    yield
    InMemoryKeyValueStateProvider.drop("system-test/")


def handed(config: Any) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    """The conf given and the conf the provider got for a system state."""
    conf: dict[str, Any] = {STATE_PROVIDER_KEY: PROVIDER, "topology.workers": 2}
    if config is not None:
        conf[STATE_PROVIDER_CONFIG_KEY] = config
    StateFactory.get_system_state("system-test/$checkpointspout-0", conf, context="ctx")
    [(namespace, got, context)] = RecordingProvider.calls
    assert (namespace, context) == ("system-test/$checkpointspout-0", "ctx")
    return conf, got


def test_the_four_fields_are_the_storm_ones() -> None:
    assert SERIALIZER_FIELDS == (
        "keyClass",
        "valueClass",
        "keySerializerClass",
        "valueSerializerClass",
    )


def test_a_json_config_loses_the_serializer_fields_and_stays_json() -> None:
    where = {"jedisPoolConfig": {"host": "h", "port": 7000}, "url": None}
    conf, got = handed(json.dumps({**SERIALIZERS, **where}))
    assert json.loads(got[STATE_PROVIDER_CONFIG_KEY]) == where
    assert {k: v for k, v in got.items() if k != STATE_PROVIDER_CONFIG_KEY} == {
        STATE_PROVIDER_KEY: PROVIDER,
        "topology.workers": 2,
    }
    assert json.loads(conf[STATE_PROVIDER_CONFIG_KEY]) == {**SERIALIZERS, **where}


def test_a_dict_config_loses_the_serializer_fields_and_is_not_mutated() -> None:
    config = {**SERIALIZERS, "path": "/tmp/x.db"}
    conf, got = handed(config)
    assert got[STATE_PROVIDER_CONFIG_KEY] == {"path": "/tmp/x.db"}
    assert config == {**SERIALIZERS, "path": "/tmp/x.db"}
    assert conf[STATE_PROVIDER_CONFIG_KEY] is config


@pytest.mark.parametrize(
    "config",
    [None, '{"path": "x"}', {"path": "x"}, "", "{not json", "[1, 2]", 42],
    ids=["absent", "json-without", "dict-without", "empty", "bad-json", "json-list", "int"],
)
def test_a_config_with_nothing_to_take_out_is_handed_on_as_it_is(config: Any) -> None:
    conf, got = handed(config)
    assert got is conf


def test_bad_json_is_left_for_the_provider_to_report() -> None:
    conf = {STATE_PROVIDER_CONFIG_KEY: '{"keyClass": '}
    with pytest.raises(ProviderConfigError, match="not valid JSON"):
        StateFactory.get_system_state("system-test/x-0", conf)


def test_user_serializers_that_do_not_even_resolve_do_not_matter() -> None:
    conf = {STATE_PROVIDER_CONFIG_KEY: json.dumps(SERIALIZERS)}
    with pytest.raises(ProviderNotFoundError, match="keySerializerClass 'nowhere.Keys'"):
        StateFactory.get_state("system-test/x-0", conf)
    state = StateFactory.get_system_state("system-test/x-0", conf)
    assert isinstance(state, KeyValueState)
    state.put("__state", [0, "COMMITTED"])
    state.commit()
    again = StateFactory.get_system_state("system-test/x-0", conf)
    assert again.get("__state") == [0, "COMMITTED"]
