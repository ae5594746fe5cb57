"""``providers.redis.connect``: the one factory of redis-py clients, and its users.

Unit tests on the settings each client gets (no server needed: redis-py connects lazily),
fakeredis for handed-in clients, and the real redis-server for what a server says.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest

from providers import ProviderConfigError, StateBackendRefusedError, redacted_url
from providers.redis import address_of, backend_error, connect, reset_clients
from statefulbolts import TopologyBuilder, TopologyContext
from statefulbolts.connectors import RedisStreamSpout, load_stream, pending_count
from statefulbolts.connectors.redis import close_connections
from statefulbolts.testing import RecordingSpoutCollector
from statefulbolts.transactional import RedisBackingMap, RedisStreamsTransactionalSpout

SECRET = "s3cret-pw"


@pytest.fixture(autouse=True)
def _fresh_clients() -> Iterator[None]:
    reset_clients()
    yield
    reset_clients()


def _kwargs(client: Any) -> dict[str, Any]:
    return dict(client.connection_pool.connection_kwargs)


# --- what a made client is -----------------------------------------------------------------
def test_a_url_gives_a_client_with_its_server_credentials_and_timeout() -> None:
    client = connect(f"redis://bob:{SECRET}@10.0.0.5:6380/3", purpose="t", timeout_ms=1500)
    kwargs = _kwargs(client)
    assert (kwargs["host"], kwargs["port"], kwargs["db"]) == ("10.0.0.5", 6380, 3)
    assert (kwargs["username"], kwargs["password"]) == ("bob", SECRET)
    assert kwargs["socket_timeout"] == kwargs["socket_connect_timeout"] == 1.5
    assert kwargs["decode_responses"] is False
    assert address_of(client) == "10.0.0.5:6380"
    client.close()


def test_rediss_means_tls_and_a_zero_timeout_means_none() -> None:
    client = connect("rediss://h", purpose="t", timeout_ms=0)
    assert client.connection_pool.connection_class.__name__ == "SSLConnection"
    assert (_kwargs(client)["port"], _kwargs(client)["socket_timeout"]) == (6379, None)
    client.close()


def test_a_mapping_is_read_as_redis_config_fields() -> None:
    client = connect({"host": "::1", "port": 7001, "database": 2}, purpose="t")
    kwargs = _kwargs(client)
    assert (kwargs["host"], kwargs["port"], kwargs["db"]) == ("::1", 7001, 2)
    assert kwargs["socket_timeout"] == 2.0  # the provider config's default, 2000 ms
    client.close()


def test_str_replies_are_asked_for_by_the_caller() -> None:
    client = connect("redis://h:1/0", purpose="t", decode_responses=True)
    assert client.get_encoder().decode_responses is True
    client.close()


# --- what is refused, and how it is said ----------------------------------------------------
@pytest.mark.parametrize(
    ("target", "said"),
    [
        ("http://x", "'http://x' is not a Redis URL: scheme must be 'redis' or 'rediss'"),
        (
            f"redis://bob:{SECRET}@h:port/0",
            "'redis://bob:***@h:port/0' is not a Redis URL: must be redis://",
        ),
        ("redis://h/0?socket_timeout=1", "query strings and fragments are not supported"),
        ({"hots": "x"}, "unknown field 'hots' (did you mean 'host'?)"),
        ({"port": 0}, "field 'port': Input should be greater than or equal to 1"),
        ({"url": "redis://h", "password": SECRET}, "give either url or password, not both"),
    ],
)
def test_a_bad_address_names_who_gave_it_and_never_the_password(target: Any, said: str) -> None:
    with pytest.raises(ProviderConfigError) as info:
        connect(target, purpose="RedisStreamSpout 'reader'")
    assert str(info.value).startswith("RedisStreamSpout 'reader': ")
    assert said in str(info.value)
    assert SECRET not in str(info.value)


def test_a_handed_in_client_is_used_as_it_is_once_its_decoding_is_checked() -> None:
    binary, text = fakeredis.FakeRedis(), fakeredis.FakeRedis(decode_responses=True)
    assert connect(binary, purpose="t") is binary
    assert connect(text, purpose="t", decode_responses=True) is text
    assert connect(text, purpose="t", decode_responses=None) is text
    with pytest.raises(ProviderConfigError, match="^map m needs a client made with decode_"):
        connect(text, purpose="map m")
    with pytest.raises(ProviderConfigError, match=r"decode_responses=True \(str replies\)"):
        connect(binary, purpose="t", decode_responses=True)


def test_redacted_url_hides_only_the_password() -> None:
    assert redacted_url(f"rediss://bob:{SECRET}@h:1/0") == "rediss://bob:***@h:1/0"
    assert redacted_url("redis://h:1/0") == "redis://h:1/0"
    assert SECRET not in redacted_url(f"redis://:{SECRET}@[::1")  # unparseable: nothing shown


# --- shared clients ------------------------------------------------------------------------
def test_a_shared_client_is_one_per_process_endpoint_and_decoding(monkeypatch: Any) -> None:
    first = connect("redis://h:1/0", purpose="t", shared=True)
    assert connect({"host": "h", "port": 1}, purpose="t", shared=True) is first
    assert connect("redis://h:1/0", purpose="t", shared=True, decode_responses=True) is not first
    assert connect("redis://h:1/0", purpose="t", shared=True, timeout_ms=5) is not first
    assert connect("redis://h:1/0", purpose="t") is not first  # not shared: a new one
    import providers.redis._clients as clients

    monkeypatch.setattr(clients.os, "getpid", lambda: -1)  # a forked Spark worker
    assert connect("redis://h:1/0", purpose="t", shared=True) is not first


def test_reset_clients_forgets_the_shared_ones() -> None:
    first = connect("redis://h:1/0", purpose="t", shared=True)
    reset_clients()
    assert connect("redis://h:1/0", purpose="t", shared=True) is not first


# --- against the real server ---------------------------------------------------------------
@pytest.mark.redis
def test_every_user_reaches_the_server_through_connect(redis_db: Any) -> None:
    client = connect(redis_db.url, purpose="t", decode_responses=True)
    assert client.ping() is True
    assert load_stream(redis_db.url, "s", ["a b", "c"]) == 2
    assert client.xlen("s") == 2
    client.xgroup_create("s", "g", id="0")
    client.xreadgroup("g", "c", {"s": ">"})
    assert pending_count(redis_db.url, "s", "g") == 2
    with RedisBackingMap(redis_db.url, "m:", owner="o") as backing:
        backing.multi_put(["k"], [[1, 2]], record=[1, ["k"]])
        assert backing.multi_get(["k"]) == [[1, 2]]
    client.close()


@pytest.mark.redis
def test_a_spout_given_host_and_port_reads_through_the_same_factory(redis_db: Any) -> None:
    load_stream(redis_db.url, "sentences", ["the cow"])
    spout = RedisStreamSpout("sentences", host="127.0.0.1", port=redis_db.port, db=0)
    builder = TopologyBuilder()
    builder.set_spout("reader", spout, 1)
    context = TopologyContext(builder.create_topology(), "wc", "reader", 0)
    collector = RecordingSpoutCollector()
    spout.open({}, context, collector)
    spout.next_tuple()
    spout.close()
    assert [e.values for e in collector.emitted] == [["the cow"]]
    assert spout.consumer == "wc/reader-0"


@pytest.mark.redis
def test_a_spout_with_a_bad_url_says_so_before_it_reads(redis_db: Any) -> None:
    spout = RedisStreamSpout("sentences", redis_url=f"redis://:{SECRET}@127.0.0.1:nope/0")
    builder = TopologyBuilder()
    builder.set_spout("reader", spout, 1)
    context = TopologyContext(builder.create_topology(), "wc", "reader", 0)
    with pytest.raises(ProviderConfigError) as info:
        spout.open({}, context, RecordingSpoutCollector())
    assert str(info.value).startswith(
        "RedisStreamSpout 'reader': 'redis://:***@127.0.0.1:nope/0' is not a Redis URL"
    )


@pytest.mark.redis
def test_a_wrong_password_is_a_refusal_whoever_connects(redis_server_factory: Any) -> None:
    server = redis_server_factory(extra_args=("--requirepass", "right"))
    url = f"redis://:{SECRET}@{server.host}:{server.port}/0"
    client = connect(url, purpose="t")
    with pytest.raises(Exception) as raw:
        client.ping()
    error = backend_error(raw.value, address=address_of(client), step="ping")
    assert isinstance(error, StateBackendRefusedError)
    assert str(error).startswith(
        f"Redis at 127.0.0.1:{server.port} refused the ping: the username or password is wrong"
    )
    assert SECRET not in str(error)
    client.close()
    spout = RedisStreamsTransactionalSpout(url, ["p0"], ["word"], 3)
    with pytest.raises(StateBackendRefusedError, match="the username or password is wrong"):
        spout.get_emitter({}, None).emit_partition_batch_new(_attempt(), _Rows(), 0, None)
    close_connections()


def _attempt() -> Any:
    from statefulbolts.transactional._attempt import TransactionAttempt

    return TransactionAttempt(1, 1)


class _Rows:
    def emit(self, values: list[Any]) -> None:
        raise AssertionError(values)

    def report_error(self, error: BaseException) -> None:
        raise AssertionError(error)
