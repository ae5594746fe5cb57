"""Config keys are read once, through the config models: one rule and one message per key."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from providers import (
    STATE_PROVIDER_CONFIG_KEY,
    STATE_PROVIDER_KEY,
    ProviderConfigError,
    StateFactory,
    provider_config_fields,
)
from statefulbolts import BasicBolt, Config, Fields, Spout, TopologyBuilder, TopologyContext
from statefulbolts.config import read_setting
from statefulbolts.connectors import RedisStreamSpout
from statefulbolts.errors import ConfigError, TopologyError
from statefulbolts.keygroups import MAX_PARALLELISM_KEY, component_key_groups
from statefulbolts.state import serializers_of
from statefulbolts.state._scope import serializer_fields
from statefulbolts.testing import RecordingSpoutCollector

SQLITE = "sqlite_state.SqliteKeyValueStateProvider"


# --- topology.state.provider.config: one parse -----------------------------------------------
def test_the_provider_config_is_parsed_once_per_text_and_handed_out_read_only() -> None:
    text = '{"valueClass": "int", "jedisPoolConfig": {"port": 7000}}'
    fields = provider_config_fields(text)
    assert provider_config_fields(text) is fields  # cached by text
    assert dict(fields) == {"valueClass": "int", "jedisPoolConfig": {"port": 7000}}
    with pytest.raises(TypeError):
        fields["valueClass"] = "str"  # type: ignore[index]
    assert provider_config_fields(text.encode()) == fields
    assert dict(provider_config_fields({"keyClass": "str"})) == {"keyClass": "str"}
    assert dict(provider_config_fields(None)) == dict(provider_config_fields("  ")) == {}


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        ('{"jedisPoolConfig": {"password": "pw-123"', "is not valid JSON: Expecting"),
        ("[1, 2]", "must be a JSON object, got list"),
        (5, "must be a JSON object string or a dict, got int"),
    ],
)
def test_every_reader_of_the_provider_config_says_the_same(
    raw: Any, said: str, tmp_path: Path
) -> None:
    expected = f"{STATE_PROVIDER_CONFIG_KEY} {said}"
    conf = {STATE_PROVIDER_CONFIG_KEY: raw}
    sqlite = {**conf, STATE_PROVIDER_KEY: SQLITE}
    readers = [
        lambda: provider_config_fields(raw),
        lambda: serializers_of(conf),  # the stored shape
        lambda: StateFactory.get_state("once/x-0", conf),  # the in-memory provider
        lambda: StateFactory.get_system_state("once/x-0", conf),
        lambda: StateFactory.get_state("once/x-0", sqlite),  # an extlib provider
    ]
    for read in readers:
        with pytest.raises(ProviderConfigError) as info:
            read()
        assert str(info.value).startswith(expected)
        assert "pw-123" not in str(info.value)
    # The state tool's serializer columns: a broken config shows none (opening a state says why).
    assert serializer_fields(conf) == {}


def test_serializer_fields_read_the_same_fields_whatever_the_form() -> None:
    fields = {"keyClass": "builtins.str", "valueClass": "int", "jedisPoolConfig": {}}
    for raw in (fields, json.dumps(fields), json.dumps(fields).encode()):
        conf = {STATE_PROVIDER_CONFIG_KEY: raw}
        assert serializer_fields(conf) == {"keyClass": "builtins.str", "valueClass": "int"}
        assert dict(serializers_of(conf)) == {
            "keyClass": "builtins.str",
            "keySerializerClass": None,
            "valueClass": "int",
            "valueSerializerClass": None,
        }


# --- topology.* keys read from a raw config -------------------------------------------------
def test_read_setting_validates_by_the_model_and_defaults_as_it_does() -> None:
    key = Config.TOPOLOGY_MAX_SPOUT_PENDING
    assert read_setting({key: 500}, key) == 500
    assert read_setting({key: None}, key) is None
    assert read_setting(None, Config.TOPOLOGY_STATE_CHECKPOINT_INTERVAL) == 1000
    with pytest.raises(ConfigError) as info:
        read_setting({key: "500"}, key)
    assert str(info.value) == (
        "invalid topology config: topology.max.spout.pending: Input should be a valid integer "
        "(got '500')"
    )
    with pytest.raises(KeyError):
        read_setting({}, "topology.no.such.key")


def _keyed(groups: Any) -> Any:
    builder = TopologyBuilder()
    builder.set_spout("words", _Words(), 1)
    bolt = builder.set_bolt("count", _Sink(), 2).fields_grouping("words", Fields("word"))
    bolt.add_configuration(MAX_PARALLELISM_KEY, groups)
    return builder.create_topology()


@pytest.mark.parametrize(
    ("groups", "said"),
    [
        (True, "Input should be a valid integer (got True)"),
        (0, "Input should be greater than or equal to 1 (got 0)"),
        (40000, "Input should be less than or equal to 32768 (got 40000)"),
    ],
)
def test_a_component_max_parallelism_is_checked_by_the_model(groups: Any, said: str) -> None:
    with pytest.raises(TopologyError) as info:
        component_key_groups(_keyed(groups).components, 128, stateful={"count"})
    assert str(info.value) == (
        f"component 'count': invalid topology config: {MAX_PARALLELISM_KEY}: {said}"
    )


def test_a_component_max_parallelism_wins_over_the_topology_default() -> None:
    assert component_key_groups(_keyed(16).components, 128, stateful={"count"})["count"] == 16
    assert component_key_groups(_keyed(None).components, 64, stateful={"count"})["count"] == 64


def test_a_stream_spout_reads_max_spout_pending_through_the_model() -> None:
    spout = RedisStreamSpout("s", redis_url="redis://127.0.0.1:1/0")
    builder = TopologyBuilder()
    builder.set_spout("reader", spout, 1)
    context = TopologyContext(builder.create_topology(), "wc", "reader", 0)
    with pytest.raises(ConfigError, match="topology.max.spout.pending: Input should be a valid"):
        spout.open({Config.TOPOLOGY_MAX_SPOUT_PENDING: "5"}, context, RecordingSpoutCollector())


class _Words(Spout):
    def next_tuple(self) -> None:
        pass

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word"))


class _Sink(BasicBolt):
    def execute(self, tup: Any, collector: Any) -> None:
        pass

    def declare_output_fields(self, declarer: Any) -> None:
        pass
