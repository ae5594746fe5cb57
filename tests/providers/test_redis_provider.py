"""Redis-specific behaviour, against a real redis-server started by the fixtures.

The shared contract lives in test_state_contract.py; this file checks what only Redis has: the
exact keys and bytes, the number of round trips, atomicity of the commit script, the config
language, failures, connection pooling and cluster hash tags.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
import redis
from redis_fixtures import free_port, single_node_cluster

from providers import (
    STATE_PROVIDER_CONFIG_KEY,
    STATE_PROVIDER_KEY,
    ProviderConfigError,
    StateBackendError,
    StateBackendRefusedError,
    StateFactory,
    StateTransactionError,
    get_provider,
    load_object,
    resolve_serializers,
)
from providers._config import (
    RedisClusterEndpoint,
    RedisEndpoint,
    StateProviderConfig,
    parse_provider_config,
)
from providers.redis import (
    TOMBSTONE,
    RedisKeyValueState,
    override_client,
    reset_clients,
)

pytestmark = pytest.mark.redis

PROVIDER = "providers.redis.RedisKeyValueStateProvider"
SECRET = "s3cr3t-Pa55"


def conf_for(config: Any) -> dict[str, Any]:
    return {STATE_PROVIDER_KEY: PROVIDER, STATE_PROVIDER_CONFIG_KEY: config}


def pool_conf(server: Any, **extra: Any) -> dict[str, Any]:
    pool = {"host": server.host, "port": server.port, **extra}
    return conf_for(json.dumps({"jedisPoolConfig": pool}))


def k(key: Any) -> bytes:
    """The hash field of a key (msgpack)."""
    return msgpack.packb(key, use_bin_type=True)


def env(value: Any) -> bytes:
    """The stored envelope of a present value."""
    return msgpack.packb([1, msgpack.packb(value, use_bin_type=True)], use_bin_type=True)


def keys_of(client: Any) -> set[str]:
    return {key.decode() for key in client.keys("*")}


@pytest.fixture(autouse=True)
def _fresh_pools() -> Iterator[None]:
    reset_clients()
    yield
    reset_clients()


# --- layout --------------------------------------------------------------------------------
def test_tombstone_envelope_bytes() -> None:
    assert TOMBSTONE == b"\x91\x00"
    assert env(1) == b"\x92\x01\xc4\x01\x01"


def test_exact_keys_through_storm_scenario(redis_db: Any) -> None:
    r = redis_db.client()
    ns = "topo/test-1"
    state = StateFactory.get_state(ns, pool_conf(redis_db))
    state.put("a", 1)
    state.put("b", 2)
    assert keys_of(r) == set(), "writes stay in memory until prepare"
    state.prepare_commit(1)
    assert keys_of(r) == {f"{ns}$prepare", f"{ns}$txid"}
    assert r.hgetall(f"{ns}$prepare") == {k("a"): env(1), k("b"): env(2)}
    assert r.hgetall(f"{ns}$txid") == {b"prepare": b"1"}

    state.put("c", 3)
    state.rollback()
    # Neither the delta nor a stale prepare txid; the rollback is counted (the prepare fence).
    assert keys_of(r) == {f"{ns}$txid"}
    assert r.hgetall(f"{ns}$txid") == {b"rollbacks": b"1"}

    state.put("a", 1)
    state.put("b", 2)
    state.prepare_commit(1)
    state.commit(1)
    assert keys_of(r) == {ns, f"{ns}$txid"}
    assert r.hgetall(ns) == {k("a"): env(1), k("b"): env(2)}
    assert r.hgetall(f"{ns}$txid") == {b"commit": b"1", b"rollbacks": b"1"}

    state.put("c", 3)
    state.delete("b")
    state.delete("c")
    state.prepare_commit(2)
    assert r.hgetall(f"{ns}$prepare") == {k("b"): TOMBSTONE, k("c"): TOMBSTONE}
    assert r.hgetall(f"{ns}$txid") == {b"commit": b"1", b"prepare": b"2", b"rollbacks": b"1"}
    state.commit(2)
    assert keys_of(r) == {ns, f"{ns}$txid"}
    assert r.hgetall(ns) == {k("a"): env(1)}
    assert r.hgetall(f"{ns}$txid") == {b"commit": b"2", b"rollbacks": b"1"}

    state.put("b", 2)
    state.prepare_commit(3)
    state.put("c", 3)
    state.rollback()
    assert keys_of(r) == {ns, f"{ns}$txid"}
    assert r.hgetall(f"{ns}$txid") == {b"commit": b"2", b"rollbacks": b"2"}
    assert r.hgetall(ns) == {k("a"): env(1)}


def test_commit_without_txid_deletes_tombstones(redis_db: Any) -> None:
    r = redis_db.client()
    ns = "topo/$checkpointspout-0"
    state = StateFactory.get_state(ns, pool_conf(redis_db))
    state.put("__state", "COMMITTED")
    state.put("old", 1)
    state.commit()
    assert r.hgetall(ns) == {k("__state"): env("COMMITTED"), k("old"): env(1)}
    assert r.hgetall(f"{ns}$txid") == {b"commit": b"-1"}
    state.delete("old")
    state.commit()
    # Storm wrote the tombstone into the committed hash; we delete the field.
    assert r.hgetall(ns) == {k("__state"): env("COMMITTED")}
    assert keys_of(r) == {ns, f"{ns}$txid"}


def test_refused_prepare_writes_nothing(redis_db: Any) -> None:
    r = redis_db.client()
    ns = "topo/refuse-0"
    state = StateFactory.get_state(ns, pool_conf(redis_db))
    state.put("a", 1)
    state.prepare_commit(4)
    state.put("b", 2)
    with pytest.raises(StateTransactionError):
        state.prepare_commit(5)
    assert r.hgetall(f"{ns}$prepare") == {k("a"): env(1)}
    assert r.hgetall(f"{ns}$txid") == {b"prepare": b"4"}


def test_serializer_classes_are_pluggable(redis_db: Any) -> None:
    r = redis_db.client()
    config = {
        "jedisPoolConfig": {"host": redis_db.host, "port": redis_db.port},
        "keySerializerClass": f"{__name__}.Utf8Keys",
        "valueSerializerClass": f"{__name__}.JsonValues",
    }
    state = StateFactory.get_state("topo/ser-0", conf_for(json.dumps(config)))
    state.put("word", {"n": 1})
    state.prepare_commit(0)
    state.commit(0)
    raw = r.hgetall("topo/ser-0")
    assert raw == {b"word": msgpack.packb([1, b'{"n": 1}'], use_bin_type=True)}
    assert StateFactory.get_state("topo/ser-0", conf_for(json.dumps(config))).get("word") == {
        "n": 1
    }


class Utf8Keys:
    def serialize(self, obj: Any) -> bytes:
        return str(obj).encode()

    def deserialize(self, data: bytes) -> Any:
        return data.decode()


class JsonValues:
    def serialize(self, obj: Any) -> bytes:
        return json.dumps(obj).encode()

    def deserialize(self, data: bytes) -> Any:
        return json.loads(data)


# --- round trips ---------------------------------------------------------------------------
class CountingConnection(redis.Connection):
    """Records the name of every command sent (each is one request/response round trip)."""

    sent: list[str] = []

    def send_command(self, *args: Any, **kwargs: Any) -> None:
        CountingConnection.sent.append(str(args[0]).upper())
        super().send_command(*args, **kwargs)


@pytest.fixture
def counting(redis_db: Any) -> Iterator[list[str]]:
    pool = redis.ConnectionPool(
        host=redis_db.host, port=redis_db.port, connection_class=CountingConnection
    )
    client = redis.Redis(connection_pool=pool)
    with override_client(client):
        # Load the scripts once so the counts below are the steady state.
        warm = StateFactory.get_state("warm/up-0", conf_for(None))
        warm.put("w", 1)
        warm.prepare_commit(0)
        warm.commit(0)
        warm.commit()
        warm.rollback()
        CountingConnection.sent.clear()
        yield CountingConnection.sent
    client.close()


def _sent_during(sent: list[str], action: Any) -> list[str]:
    sent.clear()
    action()
    return list(sent)


@pytest.mark.parametrize("n", [10, 1000])
def test_round_trips_are_constant(counting: list[str], redis_db: Any, n: int) -> None:
    ns = f"topo/rt{n}-0"
    holder: dict[str, Any] = {}
    load = _sent_during(
        counting, lambda: holder.setdefault("s", StateFactory.get_state(ns, conf_for(None)))
    )
    state = holder["s"]
    assert load == ["EVALSHA"]
    for i in range(n):
        state.put(i, i)
    assert _sent_during(counting, lambda: state.prepare_commit(1)) == ["EVALSHA"]
    assert _sent_during(counting, lambda: state.commit(1)) == ["EVALSHA"]
    # Reads of keys this object committed come from its cache.
    assert _sent_during(counting, lambda: [state.get(i) for i in range(n)]) == []
    for i in range(n):
        state.put(i, -i)
    state.delete(0)
    assert _sent_during(counting, lambda: state.prepare_commit(2)) == ["EVALSHA"]
    assert _sent_during(counting, state.rollback) == ["EVALSHA"]
    assert _sent_during(counting, state.commit) == ["EVALSHA"]
    assert redis_db.client().hlen(ns) == n


def test_reads_are_one_round_trip_per_distinct_key(counting: list[str], redis_db: Any) -> None:
    writer = StateFactory.get_state("topo/reads-0", conf_for(None))
    for i in range(20):
        writer.put(i, i)
    writer.prepare_commit(1)
    writer.commit(1)
    reader = StateFactory.get_state("topo/reads-0", conf_for(None))
    counting.clear()
    for _ in range(3):
        assert [reader.get(i) for i in range(20)] == list(range(20))
        assert reader.get("missing", 7) == 7
    assert counting == ["HGET"] * 21
    # The cache follows this object's prepare / commit / rollback.
    reader.put(3, 30)
    reader.delete(4)
    reader.prepare_commit(2)
    reader.commit(2)
    reader.put(5, 50)
    reader.rollback()
    counting.clear()
    assert [reader.get(i) for i in (3, 4, 5, "missing")] == [30, None, 5, None]
    assert counting == []
    assert StateFactory.get_state("topo/reads-0", conf_for(None)).get(3) == 30


def test_iteration_pages_with_hscan_count_100(counting: list[str], redis_db: Any) -> None:
    n = 1200  # above hash-max-listpack-entries (512), so HSCAN pages by COUNT
    state = StateFactory.get_state("topo/scan-0", conf_for(None))
    for i in range(n):
        state.put(i, i)
    state.prepare_commit(1)
    state.commit(1)
    assert redis_db.client().object("encoding", "topo/scan-0") == b"hashtable"
    fresh = StateFactory.get_state("topo/scan-0", conf_for(None))
    counting.clear()
    assert sorted(k for k, _ in fresh) == list(range(n))
    assert set(counting) == {"HSCAN"}
    assert 8 <= len(counting) <= 24
    counting.clear()
    assert fresh.get(17) == 17  # filled by the scan
    assert counting == []


def test_get_many_reads_what_is_not_cached_in_one_hmget(counting: list[str], redis_db: Any) -> None:
    state = StateFactory.get_state("topo/many-0", conf_for(None))
    for i in range(300):
        state.put(f"w{i}", i)
    state.prepare_commit(1)
    state.commit(1)
    fresh = StateFactory.get_state("topo/many-0", conf_for(None))
    assert fresh.get("w7") == 7  # cached from now on
    counting.clear()
    keys = [f"w{i}" for i in range(0, 300, 2)] + ["absent", "w7"]
    assert fresh.get_many(keys) == [*range(0, 300, 2), None, 7]
    assert counting == ["HMGET"]
    counting.clear()
    assert fresh.get_many(keys) == [*range(0, 300, 2), None, 7]  # hits and misses are cached
    assert counting == []


def test_commandstats_agree(redis_db: Any) -> None:
    admin = redis_db.client()
    state = StateFactory.get_state("topo/stats-0", pool_conf(redis_db))
    for i in range(500):
        state.put(i, i)
    state.prepare_commit(1)  # loads the script on first use
    admin.config_resetstat()
    for i in range(500):
        state.put(i, i + 1)
    state.prepare_commit(1)
    state.commit(1)
    stats = admin.info("commandstats")
    assert stats["cmdstat_evalsha"]["calls"] == 2
    assert "cmdstat_eval" not in stats
    # The scripts' reads of ns$txid: one HMGET in the prepare; two HGETs and one HMGET (the
    # prepare's timestamp and expiry) in the commit; without TTL, one EXISTS of ns$ttl (the
    # commit indexes nothing and finds nothing to clean up).
    assert stats["cmdstat_hmget"]["calls"] == 2
    assert stats["cmdstat_hget"]["calls"] == 2
    assert stats["cmdstat_exists"]["calls"] == 1
    assert "cmdstat_zadd" not in stats
    assert "cmdstat_zrangebyscore" not in stats


# --- atomicity -----------------------------------------------------------------------------
def test_commit_is_all_or_nothing_for_observers(redis_db: Any) -> None:
    n = 20000
    ns = "topo/atomic-0"
    state = StateFactory.get_state(ns, pool_conf(redis_db))
    for i in range(n):
        state.put(i, i)
    state.prepare_commit(1)
    observer = redis_db.client()
    before = (0, 1, None)
    after = (n, 0, b"1")
    seen: list[tuple[int, int, bytes | None]] = []
    first = threading.Event()
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            pipe = observer.pipeline(transaction=True)
            pipe.hlen(ns).exists(f"{ns}$prepare").hget(f"{ns}$txid", "commit")
            seen.append(tuple(pipe.execute()))  # type: ignore[arg-type]
            first.set()
            if seen[-1] == after:
                return

    thread = threading.Thread(target=watch)
    thread.start()
    assert first.wait(5)
    state.commit(1)
    stop.set()
    thread.join(5)
    assert seen[0] == before
    assert set(seen) <= {before, after}, "an observer saw a half-applied commit"
    assert StateFactory.get_state(ns, pool_conf(redis_db)).committed_txid == 1


def test_commit_script_is_idempotent_and_cached(redis_db: Any) -> None:
    r = redis_db.client()
    ns = "topo/idem-0"
    state = StateFactory.get_state(ns, pool_conf(redis_db))
    state.put("a", 1)
    state.prepare_commit(1)
    script = state._commit_script
    keys = [ns, f"{ns}$prepare", f"{ns}$txid", f"{ns}$ttl"]
    assert script(keys=keys, args=["1", TOMBSTONE, 100, ""]) == [0, 0]
    snapshot = (r.hgetall(ns), r.hgetall(f"{ns}$txid"), r.exists(f"{ns}$prepare"))
    assert script(keys=keys, args=["1", TOMBSTONE, 100, ""]) == [1]  # a retried COMMIT
    assert (r.hgetall(ns), r.hgetall(f"{ns}$txid"), r.exists(f"{ns}$prepare")) == snapshot
    assert r.script_exists(script.sha) == [True]
    # The state object learns about the commit from Redis when it commits again.
    state.commit(1)
    assert state.committed_txid == 1
    assert state.get("a") == 1


def test_prepare_and_commit_survive_a_restarted_server(redis_server_factory: Any) -> None:
    server = redis_server_factory(appendonly=True)
    conf = pool_conf(server)
    state = StateFactory.get_state("topo/durable-0", conf)
    state.put("a", 1)
    state.prepare_commit(1)
    state.commit(1)
    state.put("b", 2)
    state.prepare_commit(2)
    port = server.port
    server.stop()
    server.start(port=port)
    reset_clients()
    restarted = StateFactory.get_state("topo/durable-0", conf)
    assert (restarted.committed_txid, restarted.prepared_txid) == (1, 2)
    assert dict(restarted) == {"a": 1, "b": 2}
    restarted.commit(2)
    assert server.client().hgetall("topo/durable-0") == {k("a"): env(1), k("b"): env(2)}


# --- isolation and pooling -----------------------------------------------------------------
def test_topologies_with_same_component_ids_do_not_collide(redis_db: Any) -> None:
    r = redis_db.client()
    conf = pool_conf(redis_db)
    a = StateFactory.get_state("wordcount-a/count-0", conf)
    b = StateFactory.get_state("wordcount-b/count-0", conf)
    b.put("storm", 100)
    b.prepare_commit(7)
    b.commit(7)
    b.put("spark", 5)
    b.prepare_commit(8)
    b_keys = {key for key in keys_of(r) if key.startswith("wordcount-b/")}
    b_before = {key: r.hgetall(key) for key in b_keys}
    a.put("storm", 1)
    a.prepare_commit(0)
    a.commit(0)
    a.delete("storm")
    a.prepare_commit(1)
    a.rollback()
    assert {key: r.hgetall(key) for key in b_keys} == b_before
    assert keys_of(r) == {
        "wordcount-a/count-0",
        "wordcount-a/count-0$txid",
        "wordcount-b/count-0",
        "wordcount-b/count-0$txid",
        "wordcount-b/count-0$prepare",
    }
    assert StateFactory.get_state("wordcount-a/count-0", conf).get("storm") == 1
    assert StateFactory.get_state("wordcount-b/count-0", conf).get("storm") == 100


def test_connection_pool_is_shared_per_process_and_config(redis_server_factory: Any) -> None:
    server = redis_server_factory()  # its own server: no other test's connections to count
    admin = server.client()
    before = len(admin.client_list())
    assert before == 1
    conf = pool_conf(server)
    states = [StateFactory.get_state(f"topo/pool-{i}", conf) for i in range(50)]
    for state in states:
        state.put("x", 1)
        state.prepare_commit(1)
        state.commit(1)
        assert state.get("y") is None
    assert len({id(s._client) for s in states}) == 1
    assert len(admin.client_list()) - before == 1, "one pooled connection serves every state"
    # Same server, different setting: a different pool.
    other = StateFactory.get_state("topo/pool-x", pool_conf(server, timeout=3000))
    assert other._client is not states[0]._client
    assert len(admin.client_list()) - before == 2


# --- failures ------------------------------------------------------------------------------


def test_unreachable_redis_names_host_port_and_namespace(caplog: Any) -> None:
    port = free_port()
    config = {"jedisPoolConfig": {"host": "127.0.0.1", "port": port, "password": SECRET}}
    caplog.set_level(logging.DEBUG)
    started = time.monotonic()
    with pytest.raises(StateBackendError) as info:
        StateFactory.get_state("topo/count-3", conf_for(json.dumps(config)))
    assert time.monotonic() - started < 5
    text = str(info.value)
    assert f"127.0.0.1:{port}" in text
    assert "'topo/count-3'" in text
    assert "could not be reached" in text
    assert SECRET not in text
    assert SECRET not in caplog.text
    assert isinstance(info.value, ConnectionError)
    assert isinstance(info.value.__cause__, redis.exceptions.ConnectionError)


def test_redis_dying_mid_run_gives_backend_error(redis_server_factory: Any) -> None:
    server = redis_server_factory()
    state = StateFactory.get_state("topo/dies-0", pool_conf(server))
    state.put("a", 1)
    server.stop()
    with pytest.raises(StateBackendError, match=rf"127\.0\.0\.1:{server.port}.*'topo/dies-0'"):
        state.prepare_commit(1)
    with pytest.raises(StateBackendError, match="during get"):
        state.get("b")
    assert state.get("a") == 1, "pending writes are kept"


def test_wrong_type_reply_is_a_refusal_naming_the_key(redis_db: Any) -> None:
    redis_db.client().set("topo/typed-0", "not a hash")
    with pytest.raises(StateBackendRefusedError) as info:  # the load reads the hash's length
        StateFactory.get_state("topo/typed-0", pool_conf(redis_db))
    assert str(info.value).startswith(
        f"Redis at 127.0.0.1:{redis_db.port} refused the load of state 'topo/typed-0': a key "
        "holds another type of value (key 'topo/typed-0' holds a string, not a hash); another "
        "program writes these keys"
    )
    assert "[ResponseError: WRONGTYPE Operation against a key" in str(info.value)
    assert isinstance(info.value.__cause__, redis.exceptions.ResponseError)


def test_bad_password_does_not_leak(redis_server_factory: Any, caplog: Any) -> None:
    server = redis_server_factory(extra_args=("--requirepass", "the-right-one"))
    caplog.set_level(logging.DEBUG)
    with pytest.raises(StateBackendRefusedError) as info:
        StateFactory.get_state("topo/auth-0", pool_conf(server, password=SECRET))
    assert f"{server.host}:{server.port}" in str(info.value)
    assert "'topo/auth-0'" in str(info.value)
    assert SECRET not in str(info.value)
    assert SECRET not in repr(info.value)
    assert SECRET not in caplog.text
    good = StateFactory.get_state("topo/auth-0", pool_conf(server, password="the-right-one"))
    good.put("a", 1)
    good.prepare_commit(0)
    good.commit(0)
    assert server.client(password="the-right-one").hlen("topo/auth-0") == 1


def test_decode_responses_client_is_refused(redis_db: Any) -> None:
    with pytest.raises(ProviderConfigError, match="decode_responses=False"):
        RedisKeyValueState("topo/x-0", redis_db.client(decode_responses=True))


# --- configuration -------------------------------------------------------------------------
def test_storm_json_config() -> None:
    raw = json.dumps(
        {
            "keyClass": "builtins.str",
            "valueClass": "tuple",
            "jedisPoolConfig": {
                "host": "10.1.2.3",
                "port": 6380,
                "timeout": 500,
                "database": 2,
                "password": SECRET,
            },
        }
    )
    cfg = parse_provider_config({STATE_PROVIDER_CONFIG_KEY: raw})
    endpoint = cfg.redis_endpoint()
    assert isinstance(endpoint, RedisEndpoint)
    assert (endpoint.host, endpoint.port, endpoint.database) == ("10.1.2.3", 6380, 2)
    assert endpoint.timeout_s == 0.5
    assert endpoint.password is not None
    assert endpoint.password.get_secret_value() == SECRET
    keys, values = resolve_serializers(cfg)
    assert values.deserialize(values.serialize((1, 2))) == (1, 2)
    assert keys.deserialize(keys.serialize("k")) == "k"


def test_dict_config_and_missing_config() -> None:
    cfg = parse_provider_config({STATE_PROVIDER_CONFIG_KEY: {"jedisPoolConfig": {"port": 7000}}})
    assert cfg.redis_endpoint().address == "localhost:7000"
    default = parse_provider_config({}).redis_endpoint()
    assert isinstance(default, RedisEndpoint)
    assert (default.host, default.port, default.database, default.timeout_ms) == (
        "localhost",
        6379,
        0,
        2000,
    )


def test_partial_pool_config_gets_real_defaults() -> None:
    endpoint = StateProviderConfig.parse('{"jedisPoolConfig": {"host": "h1"}}').redis_endpoint()
    assert isinstance(endpoint, RedisEndpoint)
    assert (endpoint.host, endpoint.port, endpoint.timeout_ms, endpoint.database) == (
        "h1",
        6379,
        2000,
        0,
    )
    assert endpoint.password is None


def test_zero_timeout_means_none() -> None:
    endpoint = StateProviderConfig.parse({"jedisPoolConfig": {"timeout": 0}}).redis_endpoint()
    assert endpoint.timeout_s is None


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"url": "redis://h2:6390/3"}, ("h2", 6390, 3, None, None, False)),
        ({"url": f"rediss://bob:{SECRET}@h3"}, ("h3", 6379, 0, "bob", SECRET, True)),
        (
            {"redisConfig": {"url": f"redis://:{SECRET}@h4:1234", "timeout": 10}},
            ("h4", 1234, 0, None, SECRET, False),
        ),
        (
            {"redisConfig": {"host": "h5", "username": "u", "ssl": True}},
            ("h5", 6379, 0, "u", None, True),
        ),
    ],
)
def test_url_and_redis_config(config: dict[str, Any], expected: tuple[Any, ...]) -> None:
    endpoint = StateProviderConfig.parse(config).redis_endpoint()
    assert isinstance(endpoint, RedisEndpoint)
    password = endpoint.password.get_secret_value() if endpoint.password else None
    got = (endpoint.host, endpoint.port, endpoint.database, endpoint.username, password)
    assert (*got, endpoint.ssl) == expected
    assert SECRET not in repr(StateProviderConfig.parse(config))
    assert SECRET not in str(StateProviderConfig.parse(config))


def test_url_config_reaches_the_real_server(redis_db: Any) -> None:
    state = StateFactory.get_state("topo/url-0", conf_for(json.dumps({"url": redis_db.url})))
    state.put("a", 1)
    state.prepare_commit(0)
    state.commit(0)
    assert redis_db.client().hgetall("topo/url-0") == {k("a"): env(1)}


@pytest.mark.parametrize(
    ("config", "fragments"),
    [
        (
            {"jedisPoolConfig": {"hots": "h", "password": SECRET}},
            ["'jedisPoolConfig.hots'", "did you mean 'host'", "host, port, timeout, database"],
        ),
        ({"jedisPoolConfig": {"port": "six"}}, ["'jedisPoolConfig.port'", "integer"]),
        ({"jedisPoolConfig": {"port": 0}}, ["'jedisPoolConfig.port'", "greater than or equal"]),
        ({"jedisPoolConfig": {"password": 5}}, ["'jedisPoolConfig.password'", "string"]),
        ({"keyclass": "x"}, ["'keyclass'", "did you mean 'keyClass'"]),
        (
            {"jedisClusterConfig": {"nodes": ["nohost"]}},
            ["'jedisClusterConfig.nodes'", "host:port"],
        ),
        ({"redisConfig": {"url": f"http://:{SECRET}@h"}}, ["'redisConfig.url'", "redis"]),
        ({"redisConfig": {"url": "redis://h", "port": 1}}, ["'redisConfig'", "url or port"]),
        ({"url": "redis://h", "jedisPoolConfig": {}}, ["jedisPoolConfig and url"]),
    ],
)
def test_bad_config_names_the_field(config: dict[str, Any], fragments: list[str]) -> None:
    for raw in (config, json.dumps(config)):
        with pytest.raises(ProviderConfigError) as info:
            StateFactory.get_state("topo/bad-0", conf_for(raw))
        text = str(info.value)
        assert STATE_PROVIDER_CONFIG_KEY in text
        for fragment in fragments:
            assert fragment in text
        assert SECRET not in text


def test_invalid_json_does_not_echo_the_text() -> None:
    raw = '{"jedisPoolConfig": {"password": "' + SECRET + '"'
    with pytest.raises(ProviderConfigError, match="not valid JSON") as info:
        StateFactory.get_state("topo/bad-0", conf_for(raw))
    assert SECRET not in str(info.value)


def test_password_never_in_repr() -> None:
    cfg = StateProviderConfig.parse(
        {
            "jedisPoolConfig": {"password": SECRET},
            "jedisClusterConfig": {"nodes": ["a:1"], "password": SECRET},
        }
    )
    for text in (repr(cfg), str(cfg), repr(cfg.redis_endpoint()), str(cfg.model_dump())):
        assert SECRET not in text


def test_pool_wins_over_cluster(caplog: Any) -> None:
    caplog.set_level(logging.WARNING)
    cfg = StateProviderConfig.parse(
        {
            "jedisPoolConfig": {"host": "pool-host", "password": SECRET},
            "jedisClusterConfig": {"nodes": ["c1:7000"], "password": SECRET},
        }
    )
    assert cfg.redis_endpoint().address == "pool-host:6379"
    assert "using the pool" in caplog.text
    assert SECRET not in caplog.text


def test_cluster_config() -> None:
    cfg = StateProviderConfig.parse(
        '{"jedisClusterConfig": {"nodes": ["c1:7000", "[::1]:7001"], "maxRedirections": 3}}'
    )
    endpoint = cfg.redis_endpoint()
    assert isinstance(endpoint, RedisClusterEndpoint)
    assert endpoint.nodes == (("c1", 7000), ("::1", 7001))
    assert (endpoint.max_redirections, endpoint.timeout_ms) == (3, 2000)


# --- cluster -------------------------------------------------------------------------------
def test_cluster_keys_share_a_slot(redis_server_factory: Any) -> None:
    node = single_node_cluster(redis_server_factory)
    admin = node.client()
    config = {"jedisClusterConfig": {"nodes": [f"{node.host}:{node.port}"]}}
    conf = conf_for(json.dumps(config))
    state = StateFactory.get_state("topo/count-0", conf)
    state.put("a", 1)
    state.put("b", 2)
    state.prepare_commit(1)
    state.commit(1)
    state.delete("b")
    state.prepare_commit(2)
    assert keys_of(admin) == {"{topo/count-0}", "{topo/count-0}$prepare", "{topo/count-0}$txid"}
    restarted = StateFactory.get_state("topo/count-0", conf)
    assert (restarted.committed_txid, restarted.prepared_txid) == (1, 2)
    restarted.commit(2)
    assert dict(StateFactory.get_state("topo/count-0", conf)) == {"a": 1}
    assert admin.hgetall("{topo/count-0}") == {k("a"): env(1)}


# --- the package ---------------------------------------------------------------------------
def test_package_face_is_sorted_and_resolves_by_dotted_name() -> None:
    import providers.redis as package

    assert package.__all__ == [
        "BACKEND_ERRORS",
        "TOMBSTONE",
        "ErrorKind",
        "RedisKeyValueState",
        "RedisKeyValueStateProvider",
        "RedisLeaseStore",
        "Verdict",
        "address_of",
        "backend_error",
        "classify_error",
        "connect",
        "fenced_error",
        "make_client",
        "override_client",
        "reply_code",
        "reset_clients",
    ]
    cls = load_object(PROVIDER, what="state provider")
    assert cls is package.RedisKeyValueStateProvider
    assert type(get_provider({STATE_PROVIDER_KEY: PROVIDER})) is cls
    assert (cls.__module__, RedisKeyValueState.__module__) == ("providers.redis",) * 2
    assert package.RedisLeaseStore.__module__ == "providers.redis"


def test_listing_skips_keys_that_are_not_utf8(redis_db: Any) -> None:
    conf = pool_conf(redis_db)
    state = StateFactory.get_state("topo/count-0", conf)
    state.put("a", 1)
    state.commit()
    redis_db.client().hset(b"topo/\xff-0$txid", b"commit", b"1")
    assert get_provider(conf).namespaces(conf, "topo/") == ["topo/count-0"]
