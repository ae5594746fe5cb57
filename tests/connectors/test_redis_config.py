"""The Redis connectors' config models: the ``redis.stream.*`` keys, validated where read.

No server: a key of the wrong type fails before anything connects, naming the connector and the
key, and never printing a URL (it may hold a password).
"""

from __future__ import annotations

import pytest

from statefulbolts import TopologyBuilder, TopologyContext
from statefulbolts.connectors.redis import (
    GROUP_KEY,
    KEYS_KEY,
    PATTERN_KEY,
    STREAM_KEY,
    URL_KEY,
    PartitionedRedisStreamConfig,
    PartitionedRedisStreamSpout,
    RedisStreamConfig,
    RedisStreamSpout,
)
from statefulbolts.errors import ConfigError
from statefulbolts.testing import RecordingSpoutCollector

SECRET = "s3cret-pw"


def test_unset_keys_are_none_and_empty_ones_unset() -> None:
    config = RedisStreamConfig.from_conf({STREAM_KEY: "", GROUP_KEY: None, "other": 1}, who="x")
    assert (config.url, config.key, config.group) == (None, None, None)
    assert RedisStreamConfig.from_conf(None, who="x") == config


def test_the_stream_spouts_keys_are_read_and_the_url_kept_secret() -> None:
    url = f"redis://:{SECRET}@10.0.0.5:6380/1"
    config = RedisStreamConfig.from_conf(
        {URL_KEY: url, STREAM_KEY: "clicks", GROUP_KEY: "g"}, who="x"
    )
    assert (config.key, config.group) == ("clicks", "g")
    assert config.url is not None and config.url.get_secret_value() == url
    assert SECRET not in repr(config) and SECRET not in str(config)


def test_a_key_of_the_wrong_type_names_the_connector_the_key_and_what_was_got() -> None:
    with pytest.raises(ConfigError) as info:
        RedisStreamConfig.from_conf({STREAM_KEY: 5, GROUP_KEY: ["g"]}, who="RedisStreamSpout 's'")
    assert str(info.value) == (
        "RedisStreamSpout 's': config 'redis.stream.key': Input should be a valid string "
        "(got 5); config 'redis.stream.group': Input should be a valid string (got ['g'])"
    )
    with pytest.raises(ConfigError, match="^x: config 'redis.stream.url': ") as info:
        RedisStreamConfig.from_conf({URL_KEY: [f"redis://:{SECRET}@h"]}, who="x")
    assert SECRET not in str(info.value) and "got" not in str(info.value)


@pytest.mark.parametrize(
    ("given", "keys"),
    [("b, a,,c ", ("b", "a", "c")), (["a", "b"], ("a", "b")), (("a",), ("a",)), ([], None)],
)
def test_stream_keys_are_a_list_or_one_comma_separated_string(given, keys) -> None:
    assert PartitionedRedisStreamConfig.from_conf({KEYS_KEY: given}, who="x").keys == keys


def test_a_stream_key_that_is_not_a_string_is_named_with_its_index() -> None:
    with pytest.raises(ConfigError, match=r"config 'redis\.stream\.keys'\[1\]: .*\(got 2\)"):
        PartitionedRedisStreamConfig.from_conf({KEYS_KEY: ["a", 2]}, who="x")
    with pytest.raises(ConfigError, match=r"config 'redis\.stream\.pattern': .*\(got 3\)"):
        PartitionedRedisStreamSpout().partitions({PATTERN_KEY: 3})


def test_the_spouts_arguments_win_over_their_keys() -> None:
    spout = PartitionedRedisStreamSpout(["a"])
    both = {KEYS_KEY: ["b"], PATTERN_KEY: "b*"}  # for another spout; not this one's business
    assert spout.partitions(both) == ["a"]
    with pytest.raises(ConfigError, match="both 'redis.stream.keys' and 'redis.stream.pattern'"):
        PartitionedRedisStreamSpout().partitions(both)


def test_the_stream_spout_checks_its_keys_when_it_opens_before_connecting() -> None:
    builder = TopologyBuilder()
    spout = RedisStreamSpout(redis_url="redis://127.0.0.1:1/0")
    builder.set_spout("reader", spout)
    context = TopologyContext(builder.create_topology(), "wc", "reader", 0)
    with pytest.raises(ConfigError, match="^RedisStreamSpout 'reader': config 'redis.stream.key'"):
        spout.open({STREAM_KEY: 7}, context, RecordingSpoutCollector())
    with pytest.raises(ConfigError, match="no stream key; pass stream= to RedisStreamSpout"):
        spout.open({}, context, RecordingSpoutCollector())
