"""Config: Storm's dotted keys, defaults, validation errors, unknown-key warnings and files."""

from __future__ import annotations

import json
import warnings

import pydantic
import pytest

from statefulbolts import Config, ConfigError, StatefulBoltsError, TopologyConfig, validate_config
from statefulbolts.config import KNOWN_KEYS

INTERVAL = "topology.state.checkpoint.interval.ms"


def test_config_constants_are_storms_keys():
    constants = {
        name: getattr(Config, name) for name in dir(Config) if name.startswith("TOPOLOGY_")
    }
    # The keys, spelled as Storm spells them.
    assert {
        "TOPOLOGY_STATE_PROVIDER": "topology.state.provider",
        "TOPOLOGY_STATE_PROVIDER_CONFIG": "topology.state.provider.config",
        "TOPOLOGY_STATE_CHECKPOINT_INTERVAL": "topology.state.checkpoint.interval.ms",
        "TOPOLOGY_MESSAGE_TIMEOUT_SECS": "topology.message.timeout.secs",
        "TOPOLOGY_ACKER_EXECUTORS": "topology.acker.executors",
        "TOPOLOGY_MAX_SPOUT_PENDING": "topology.max.spout.pending",
        "TOPOLOGY_ENABLE_MESSAGE_TIMEOUTS": "topology.enable.message.timeouts",
    }.items() <= constants.items()
    # One constant per known key, and no constant for a key the validator does not know.
    assert set(constants.values()) == set(KNOWN_KEYS)
    # Every constant is a key validate_config knows (none of them warns).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        validate_config({key: None for key in constants.values() if "acker" in key})


def test_defaults():
    tc = validate_config({})
    assert tc.state_provider == "providers.memory.InMemoryKeyValueStateProvider"
    assert tc.state_provider_config is None
    assert tc.checkpoint_interval_ms == 1000
    assert tc.message_timeout_secs == 30
    assert tc.acker_executors is None
    assert tc.max_spout_pending is None
    assert tc.enable_message_timeouts is True
    assert tc.max_transaction_retries == 5
    assert tc.task_max_failures == 4
    assert tc.extlib_dir is None
    assert tc.debug is False
    assert validate_config(None) == tc


def test_values_are_read_by_storms_keys():
    conf = Config()
    conf[Config.TOPOLOGY_STATE_CHECKPOINT_INTERVAL] = 250
    conf[Config.TOPOLOGY_STATE_PROVIDER] = "extlib_mod.Provider"
    conf[Config.TOPOLOGY_STATE_PROVIDER_CONFIG] = '{"jedisPoolConfig": {"port": 7000}}'
    conf[Config.TOPOLOGY_ENABLE_MESSAGE_TIMEOUTS] = False
    conf.set_num_ackers(0)
    conf.set_max_spout_pending(50)
    conf.set_message_timeout_secs(2.5)
    assert dict(conf) == {
        "topology.state.checkpoint.interval.ms": 250,
        "topology.state.provider": "extlib_mod.Provider",
        "topology.state.provider.config": '{"jedisPoolConfig": {"port": 7000}}',
        "topology.enable.message.timeouts": False,
        "topology.acker.executors": 0,
        "topology.max.spout.pending": 50,
        "topology.message.timeout.secs": 2.5,
    }
    tc = validate_config(conf)
    assert (tc.checkpoint_interval_ms, tc.state_provider, tc.acker_executors) == (
        250,
        "extlib_mod.Provider",
        0,
    )
    assert (tc.max_spout_pending, tc.message_timeout_secs, tc.enable_message_timeouts) == (
        50,
        2.5,
        False,
    )
    assert tc.state_provider_config == '{"jedisPoolConfig": {"port": 7000}}'


def test_provider_config_may_be_a_mapping():
    tc = validate_config({"topology.state.provider.config": {"jedisPoolConfig": {"port": 1}}})
    assert tc.state_provider_config == {"jedisPoolConfig": {"port": 1}}


def test_null_provider_means_the_default():
    tc = validate_config({"topology.state.provider": None})
    assert tc.state_provider == "providers.memory.InMemoryKeyValueStateProvider"


def test_other_keys_pass_through_silently():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tc = validate_config({"my.app.setting": 1, "spark.executor.memory": "1g"})
    assert tc == validate_config({})


def test_validated_config_is_frozen():
    tc = validate_config({})
    with pytest.raises(pydantic.ValidationError):
        tc.checkpoint_interval_ms = 5  # type: ignore[misc]
    assert isinstance(tc, TopologyConfig)


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [
        (INTERVAL, 0, "greater than 0"),
        (INTERVAL, -100, "greater than 0"),
        (INTERVAL, "abc", "valid integer"),
        (INTERVAL, "500", "valid integer"),
        (INTERVAL, 2.5, "valid integer"),
        (INTERVAL, None, "valid integer"),
        ("topology.message.timeout.secs", 0, "greater than 0"),
        ("topology.message.timeout.secs", True, "valid number"),
        ("topology.acker.executors", -1, "greater than or equal to 0"),
        ("topology.acker.executors", True, "valid integer"),
        ("topology.max.spout.pending", -5, "greater than or equal to 0"),
        ("topology.max.transaction.retries", 0, "greater than or equal to 1"),
        ("topology.spark.task.max.failures", 0, "greater than or equal to 1"),
        ("topology.enable.message.timeouts", "yes", "valid boolean"),
        ("topology.enable.message.timeouts", 1, "valid boolean"),
        ("topology.debug", "maybe", "valid boolean"),
        ("topology.state.provider", 5, "valid string"),
        ("topology.state.provider.config", 5, "valid string"),
        ("topology.state.extlib.dir", ["a"], "valid string"),
    ],
)
def test_wrong_type_or_value_raises_config_error_naming_the_key(key, value, problem):
    with pytest.raises(ConfigError) as info:
        validate_config({key: value})
    message = str(info.value)
    assert message.startswith(f"invalid topology config: {key}")
    assert problem in message
    assert f"(got {value!r})" in message


def test_every_bad_key_is_named_at_once():
    with pytest.raises(ConfigError) as info:
        validate_config({INTERVAL: 0, "topology.acker.executors": -1})
    assert INTERVAL in str(info.value)
    assert "topology.acker.executors" in str(info.value)


def test_config_error_is_a_value_error_in_our_tree():
    assert issubclass(ConfigError, ValueError)
    assert issubclass(ConfigError, StatefulBoltsError)


def test_unknown_topology_key_warns_with_the_closest_key():
    with pytest.warns(UserWarning) as record:
        tc = validate_config({"topology.state.checkpoint.interval": 500})
    assert [str(w.message) for w in record] == [
        "unknown config key 'topology.state.checkpoint.interval'; "
        "did you mean 'topology.state.checkpoint.interval.ms'?"
    ]
    assert tc.checkpoint_interval_ms == 1000  # the misspelt key is not used


def test_unknown_topology_key_warns_with_closest_for_a_typo():
    with pytest.warns(UserWarning, match="did you mean 'topology.acker.executors'"):
        validate_config({"topology.acker.executor": 2})


@pytest.mark.parametrize("key", ["topology.zzz", "topology.workers", "topology.kryo.register"])
def test_unknown_topology_key_with_nothing_close_warns_without_a_hint(key):
    # The shared "topology." prefix alone must not make a key "close" (topology.workers is not
    # a misspelling of topology.name).
    with pytest.warns(UserWarning) as record:
        validate_config({key: 1})
    assert [str(w.message) for w in record] == [f"unknown config key {key!r}"]


@pytest.mark.parametrize(
    ("typo", "meant"),
    [
        ("topology.debugg", "topology.debug"),
        ("topology.message.timeout", "topology.message.timeout.secs"),
        ("topology.max.spout.pendng", "topology.max.spout.pending"),
        ("topology.state.provider.conf", "topology.state.provider.config"),
    ],
)
def test_typos_get_the_intended_key(typo, meant):
    with pytest.warns(UserWarning, match=f"did you mean '{meant}'\\?$"):
        validate_config({typo: 1})


# ----------------------------------------------------------------- files


def test_json_file(tmp_path):
    path = tmp_path / "conf.json"
    path.write_text(json.dumps({INTERVAL: 300, "topology.acker.executors": 0}))
    conf = Config.from_file(path)
    assert isinstance(conf, Config)
    assert dict(conf) == {INTERVAL: 300, "topology.acker.executors": 0}
    assert validate_config(conf).checkpoint_interval_ms == 300


@pytest.mark.parametrize("suffix", [".yaml", ".yml", ".YAML"])
def test_yaml_file(tmp_path, suffix):
    path = tmp_path / f"conf{suffix}"
    path.write_text(
        "topology.state.checkpoint.interval.ms: 400\n"
        "topology.enable.message.timeouts: false\n"
        "topology.state.provider.config:\n"
        "  jedisPoolConfig: {host: redis, port: 6380}\n"
    )
    conf = Config.from_file(str(path))
    tc = validate_config(conf)
    assert (tc.checkpoint_interval_ms, tc.enable_message_timeouts) == (400, False)
    assert tc.state_provider_config == {"jedisPoolConfig": {"host": "redis", "port": 6380}}


def test_empty_yaml_file_is_an_empty_config(tmp_path):
    path = tmp_path / "empty.yaml"
    path.write_text("")
    assert Config.from_file(path) == {}


def test_missing_file_is_a_config_error(tmp_path):
    path = tmp_path / "nope.json"
    with pytest.raises(ConfigError, match=f"config file '{path}' cannot be read"):
        Config.from_file(path)


@pytest.mark.parametrize(
    ("name", "text"),
    [("bad.json", "{not json"), ("bad.yaml", "a: [1, 2"), ("bad.conf", "key = value")],
)
def test_unparsable_file_is_a_config_error(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"config file '{path}' is not valid"):
        Config.from_file(path)


@pytest.mark.parametrize(
    ("name", "text", "kind"), [("l.json", "[1, 2]", "list"), ("s.yaml", "hi", "str")]
)
def test_file_that_is_not_a_mapping_is_a_config_error(tmp_path, name, text, kind):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError, match=f"must hold a mapping of keys, got {kind}"):
        Config.from_file(path)
