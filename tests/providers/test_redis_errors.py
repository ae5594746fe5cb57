"""Which Redis errors are waited out and which stop a topology: the classifier and real replies.

The first part feeds the classifier redis-py's exceptions as redis-py itself makes them from the
exact replies a Redis server sends (its reply parser), and its client-side exceptions. The
second part provokes the replies from a real redis-server (out of memory, a read-only replica,
a key of the wrong type, passwords, ACLs, a busy script) through every user of Redis: the state
provider, ``RedisBackingMap``, and both kinds of stream spout.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from typing import Any

import msgpack
import pytest
import redis
from redis import exceptions as rx
from redis._parsers.base import BaseParser

from providers import StateBackendError, StateBackendRefusedError, StateFactory
from providers.redis import ErrorKind, backend_error, classify_error, reply_code, reset_clients
from statefulbolts import TopologyBuilder, TopologyContext
from statefulbolts.connectors import RedisStreamSpout
from statefulbolts.connectors.redis import close_connections
from statefulbolts.errors import FailedException
from statefulbolts.testing import RecordingSpoutCollector
from statefulbolts.transactional import (
    OpaqueRedisStreamsTransactionalSpout,
    RedisBackingMap,
    RedisStreamsTransactionalSpout,
    TransactionAttempt,
)

OUTAGE, REFUSED = ErrorKind.OUTAGE, ErrorKind.REFUSED

# Replies exactly as a Redis 7 server sends them (the text after the leading "-").
REPLIES = [
    ("LOADING Redis is loading the dataset in memory", OUTAGE, "is loading its dataset"),
    (
        "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
        OUTAGE,
        "is busy running a script",
    ),
    ("TRYAGAIN Multiple keys request during rehashing of slot", OUTAGE, "asked to try again"),
    (
        "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
        OUTAGE,
        "lost the link to its primary",
    ),
    ("CLUSTERDOWN The cluster is down", OUTAGE, "reports the cluster down"),
    ("MOVED 3999 127.0.0.1:6381", OUTAGE, "redirected the command"),
    ("ASK 3999 127.0.0.1:6381", OUTAGE, "redirected the command"),
    ("NOREPLICAS Not enough good replicas to write.", OUTAGE, "too few replicas"),
    (
        "UNBLOCKED force unblock from blocking operation, instance state changed",
        OUTAGE,
        "unblocked the command",
    ),
    ("ERR max number of clients reached", OUTAGE, "could not be reached"),
    ("OOM command not allowed when used memory > 'maxmemory'.", REFUSED, "out of memory"),
    ("READONLY You can't write against a read only replica.", REFUSED, "read-only replica"),
    (
        "WRONGTYPE Operation against a key holding the wrong kind of value",
        REFUSED,
        "a key holds another type of value",
    ),
    ("NOAUTH Authentication required.", REFUSED, "requires a password and none was given"),
    (
        "WRONGPASS invalid username-password pair or user is disabled.",
        REFUSED,
        "the username or password is wrong",
    ),
    ("ERR invalid password", REFUSED, "the username or password is wrong"),
    (
        "ERR AUTH <password> called without any password configured for the default user. "
        "Are you sure your configuration is correct?",
        REFUSED,
        "a password was given but the server has none",
    ),
    (
        "NOPERM this user has no permissions to run the 'evalsha' command",
        REFUSED,
        "lacks a permission",
    ),
    ("NOSCRIPT No matching script. Please use EVAL.", REFUSED, "forgot a Lua script"),
    (
        "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist "
        "to disk. Commands that may modify the data set are disabled.",
        REFUSED,
        "cannot save to disk",
    ),
    ("CROSSSLOT Keys in request don't hash to the same slot", REFUSED, "different cluster slots"),
    ("EXECABORT Transaction discarded because of previous errors.", REFUSED, "an error"),
    (
        "NOGROUP No such key 'events' or consumer group 'wc' in XREADGROUP with GROUP option",
        REFUSED,
        "consumer group does not exist",
    ),
    ("ERR unknown command 'EVALSHA', with args beginning with: ", REFUSED, "an error"),
    (
        "ERR user_script:1: Script attempted to access nonexistent global variable 'x' script: "
        "3c1b68f0, on @user_script:1.",
        REFUSED,
        "an error",
    ),
]


@pytest.mark.parametrize(("reply", "kind", "cause"), REPLIES, ids=[r[0][:14] for r in REPLIES])
def test_every_server_reply_is_an_outage_or_a_refusal(
    reply: str, kind: ErrorKind, cause: str
) -> None:
    exc = BaseParser.parse_error(reply)
    verdict = classify_error(exc)
    assert verdict.kind is kind
    assert cause in verdict.cause
    assert (verdict.fix != "") == (kind is REFUSED)


def test_a_reply_inside_a_pipeline_is_read_past_redis_py_s_annotation() -> None:
    exc = BaseParser.parse_error("BUSY Redis is busy running a script.")
    redis.client.Pipeline.annotate_exception(None, exc, 1, ("MULTI",))  # type: ignore[arg-type]
    assert str(exc).startswith("Command # 1 (MULTI) of pipeline caused error: BUSY")
    assert reply_code(exc) == "BUSY"
    assert classify_error(exc).kind is OUTAGE


CLIENT_SIDE = [
    (rx.ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused."), OUTAGE),
    (rx.TimeoutError("Timeout reading from socket"), OUTAGE),
    (rx.MaxConnectionsError("Too many connections"), OUTAGE),
    (rx.ClusterError("TTL exhausted."), OUTAGE),
    (rx.SlotNotCoveredError("Command # 1 (GET a) requires a slot nobody serves"), OUTAGE),
    (rx.RedisClusterException("Redis Cluster cannot be connected."), OUTAGE),
    (rx.RedisError("something else"), OUTAGE),
    (rx.InvalidResponse("Protocol Error: H, b'TTP/1.1 400'"), REFUSED),
    (rx.DataError("Invalid input of type: 'NoneType'."), REFUSED),
    (rx.AuthorizationError("you are not authorized to view this ocsp certificate"), REFUSED),
]


@pytest.mark.parametrize(
    ("exc", "kind"), CLIENT_SIDE, ids=[type(e).__name__ for e, _ in CLIENT_SIDE]
)
def test_client_side_errors_are_outages_unless_the_server_is_no_redis(
    exc: BaseException, kind: ErrorKind
) -> None:
    assert classify_error(exc).kind is kind


def test_an_outage_keeps_its_message_and_a_refusal_names_cause_fix_and_reply() -> None:
    down = backend_error(
        rx.ConnectionError("Connection refused."),
        address="127.0.0.1:6390",
        step="prepare of txid 4",
        subject="state 'wc/count-1'",
    )
    assert type(down) is StateBackendError
    assert str(down) == (
        "Redis at 127.0.0.1:6390 could not be reached during prepare of txid 4 of state "
        "'wc/count-1': ConnectionError: Connection refused."
    )
    refused = backend_error(
        BaseParser.parse_error("NOAUTH Authentication required."),
        address="127.0.0.1:6390",
        step="connection",
        settings="the URL",
    )
    assert type(refused) is StateBackendRefusedError
    assert str(refused) == (
        "Redis at 127.0.0.1:6390 refused the connection: it requires a password and none was "
        "given; set the password (and the username, if not 'default') in the URL "
        "[AuthenticationError: Authentication required.]"
    )


# ------------------------------------------------------------------ a real redis-server


def _conf(server: Any, **pool: Any) -> dict[str, Any]:
    return {
        "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
        "topology.state.provider.config": json.dumps(
            {"redisConfig": {"host": server.host, "port": server.port, **pool}}
        ),
    }


@pytest.fixture(autouse=True)
def _fresh_clients() -> Iterator[None]:
    """Each test's servers are new: no pooled client may outlive them."""
    yield
    reset_clients()
    close_connections()


@pytest.mark.redis
def test_out_of_memory_refuses_the_prepare_with_the_figures_and_keeps_what_committed(
    redis_server_factory: Any,
) -> None:
    server = redis_server_factory()
    admin = server.client()
    state = StateFactory.get_state("topo/count-0", _conf(server))
    state.put("cat", 1)
    state.prepare_commit(1)
    state.commit(1)
    admin.config_set("maxmemory-policy", "noeviction")
    admin.config_set("maxmemory", "1")
    state.put("cat", 2)
    state.put("dog", 1)
    with pytest.raises(StateBackendRefusedError) as info:
        state.prepare_commit(2)
    text = str(info.value)
    assert re.fullmatch(
        rf"Redis at 127\.0\.0\.1:{server.port} refused the prepare of txid 2 of state "
        r"'topo/count-0': out of memory \(maxmemory 1B, policy noeviction: the write of \d+ "
        r"bytes did not fit; [0-9.]+[KM] used now, after the refused write, so it needs "
        r"maxmemory [0-9.]+[KM] or more\); "
        r"raise maxmemory, or use a volatile-\* / allkeys-\* eviction policy only if losing "
        r"state is acceptable \(it is not for topology state\) \[OutOfMemoryError: command not "
        r"allowed when used memory > 'maxmemory'\. script: \w+, on @user_script:\d+\.\]",
        text,
    ), text
    assert isinstance(info.value.__cause__, rx.OutOfMemoryError)
    admin.config_set("maxmemory", "0")
    state.prepare_commit(2)  # the pending writes were kept
    state.commit(2)
    fresh = StateFactory.get_state("topo/count-0", _conf(server))
    assert (fresh.get("cat"), fresh.get("dog"), fresh.committed_txid) == (2, 1, 2)


def _bytes(human: str) -> float:
    """``2.00M`` (Redis' INFO sizes) in bytes."""
    units = {"B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    return float(human[:-1]) * units[human[-1]]


@pytest.mark.redis
def test_a_prepare_too_big_for_maxmemory_says_what_it_needed_and_what_is_used_after(
    redis_server_factory: Any,
) -> None:
    """A 2 MB server under noeviction refuses a 1 MB prepare. Read after the refusal, the memory
    used is below the limit (the refused arguments were freed): the message says so, and gives
    the write's size, so that used + the write is over the limit, and the maxmemory it needs."""
    server = redis_server_factory(
        extra_args=("--maxmemory", "2mb", "--maxmemory-policy", "noeviction")
    )
    state = StateFactory.get_state("topo/count-0", _conf(server))
    for i in range(20_000):
        state.put(f"key-{i}", "x" * 40)
    with pytest.raises(StateBackendRefusedError) as info:
        state.prepare_commit(1)
    text = str(info.value)
    found = re.fullmatch(
        rf"Redis at 127\.0\.0\.1:{server.port} refused the prepare of txid 1 of state "
        r"'topo/count-0': out of memory \(maxmemory (?P<limit>[0-9.]+[BKMG]), policy "
        r"noeviction: the write of (?P<written>\d+) bytes did not fit; (?P<used>[0-9.]+[BKMG]) "
        r"used now, after the refused write, so it needs maxmemory (?P<needs>[0-9.]+[BKMG]) "
        r"or more\); raise maxmemory, or use a volatile-\* / allkeys-\* eviction policy only if "
        r"losing state is acceptable \(it is not for topology state\) \[OutOfMemoryError: "
        r"command not allowed when used memory > 'maxmemory'\. script: \w+, on "
        r"@user_script:\d+\.\]",
        text,
    )
    assert found is not None, text
    limit, used = _bytes(found["limit"]), _bytes(found["used"])
    written = int(found["written"])
    assert limit == 2 * 1024 * 1024
    # The delta's bytes (each key, and its value in a 4-byte envelope) and a few small arguments.
    delta = sum(len(msgpack.packb(f"key-{i}")) + 4 + 42 for i in range(20_000))
    assert delta <= written < delta + 100
    assert used < limit < used + written  # the figure alone would not explain the refusal
    assert _bytes(found["needs"]) == pytest.approx(used + written, rel=0.01)
    server.client().config_set("maxmemory", "0")
    state.prepare_commit(1)  # the pending writes were kept
    state.commit(1)
    assert StateFactory.get_state("topo/count-0", _conf(server)).get("key-19999") == "x" * 40


@pytest.mark.redis
def test_a_read_only_replica_refuses_the_prepare_naming_its_primary(
    redis_server_factory: Any,
) -> None:
    primary, replica = redis_server_factory(), redis_server_factory()
    replica.client().replicaof(primary.host, primary.port)
    state = StateFactory.get_state("topo/count-0", _conf(replica))  # reads are served
    state.put("cat", 1)
    with pytest.raises(StateBackendRefusedError) as info:
        state.prepare_commit(1)
    assert str(info.value).startswith(
        f"Redis at 127.0.0.1:{replica.port} refused the prepare of txid 1 of state "
        f"'topo/count-0': it is a read-only replica (a replica of 127.0.0.1:{primary.port}); "
        "point topology.state.provider.config at the primary, or make this server a primary "
        "(REPLICAOF NO ONE) [ReadOnlyError: You can't write against a read only replica."
    )


@pytest.mark.redis
@pytest.mark.parametrize(
    ("pool", "cause"),
    [
        ({}, "it requires a password and none was given; set the password"),
        ({"password": "not-it"}, "the username or password is wrong; correct them in"),
        (
            {"username": "nobody", "password": "the-password"},
            "the username or password is wrong; correct them in",
        ),
    ],
    ids=["no password", "wrong password", "unknown user"],
)
def test_a_password_problem_is_refused_at_once(
    redis_server_factory: Any, pool: dict[str, Any], cause: str
) -> None:
    server = redis_server_factory(extra_args=("--requirepass", "the-password"))
    started = time.monotonic()
    with pytest.raises(StateBackendRefusedError) as info:
        StateFactory.get_state("topo/count-0", _conf(server, **pool))
    assert time.monotonic() - started < 5
    assert str(info.value).startswith(
        f"Redis at 127.0.0.1:{server.port} refused the connection of state 'topo/count-0': {cause}"
    )
    assert "the-password" not in str(info.value) and "not-it" not in str(info.value)


@pytest.mark.redis
def test_a_user_without_script_permission_is_refused(redis_server_factory: Any) -> None:
    server = redis_server_factory()
    server.client().acl_setuser(
        "reader", enabled=True, passwords=["+pw"], keys=["*"], commands=["+@read", "+hello"]
    )
    with pytest.raises(StateBackendRefusedError) as info:
        StateFactory.get_state("topo/count-0", _conf(server, username="reader", password="pw"))
    assert "refused the connection of state 'topo/count-0': the user lacks a permission" in str(
        info.value
    )
    assert "this user has no permissions to run the 'script|load' command]" in str(info.value)


@pytest.mark.redis
def test_a_flushed_script_cache_is_no_error_redis_py_loads_the_script_again(
    redis_server_factory: Any,
) -> None:
    """``NOSCRIPT`` is a refusal only if it persists: once, redis-py loads the script again."""
    server = redis_server_factory()
    state = StateFactory.get_state("topo/count-0", _conf(server))
    state.put("cat", 1)
    server.client().script_flush()
    state.prepare_commit(1)
    state.commit(1)
    assert StateFactory.get_state("topo/count-0", _conf(server)).get("cat") == 1


@pytest.mark.redis
def test_a_busy_script_is_an_outage_that_ends(redis_server_factory: Any) -> None:
    server = redis_server_factory(extra_args=("--busy-reply-threshold", "20"))
    state = StateFactory.get_state("topo/count-0", _conf(server))
    spinning = threading.Thread(
        target=lambda: _ignore_errors(server.client().eval, "while true do end", 0),
        daemon=True,
    )
    spinning.start()
    probe = server.client()
    _wait_for(lambda: _busy(probe))
    with pytest.raises(StateBackendError) as info:
        state.get("cat")
    assert not isinstance(info.value, StateBackendRefusedError)
    assert "is busy running a script (busy-reply-threshold) during get of state" in str(info.value)
    probe.script_kill()
    spinning.join(10)
    assert state.get("cat") is None


def _ignore_errors(call: Any, *args: Any) -> None:
    try:
        call(*args)
    except rx.RedisError:
        pass  # killed by SCRIPT KILL: what the test wants


def _busy(client: Any) -> bool:
    try:
        client.ping()
    except rx.ResponseError as exc:
        return reply_code(exc) == "BUSY"
    return False


def _wait_for(condition: Any, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "condition not met"
        time.sleep(0.01)


@pytest.mark.redis
def test_the_backing_map_refuses_on_out_of_memory_and_waits_out_a_dead_server(
    redis_server_factory: Any,
) -> None:
    server = redis_server_factory()
    admin = server.client()
    backing = RedisBackingMap(server.url, "counts:", owner="count-0")
    backing.multi_put(["cat"], [[1, 3]], record=[1, ["cat"]])
    admin.config_set("maxmemory-policy", "noeviction")
    admin.config_set("maxmemory", "1")
    with pytest.raises(StateBackendRefusedError) as info:
        backing.multi_put(["dog"], [[2, 1]], record=[2, ["dog"]])
    assert str(info.value).startswith(
        f"Redis at 127.0.0.1:{server.port} refused the multi_put of map 'counts:' (owner "
        "'count-0'): out of memory (maxmemory 1B, policy noeviction"
    )
    admin.config_set("maxmemory", "0")
    assert backing.multi_get(["cat", "dog"]) == [[1, 3], None]  # nothing of the refused put
    server.stop()
    with pytest.raises(StateBackendError) as down:
        backing.multi_get(["cat"])
    assert not isinstance(down.value, StateBackendRefusedError)
    assert f"Redis at 127.0.0.1:{server.port} could not be reached during multi_get" in str(
        down.value
    )
    backing.close()


@pytest.mark.redis
def test_the_backing_map_refuses_a_wrong_password(redis_server_factory: Any) -> None:
    server = redis_server_factory(extra_args=("--requirepass", "right"))
    url = f"redis://:wrong@{server.host}:{server.port}/0"
    with RedisBackingMap(url, "counts:", owner="count-0") as backing:
        with pytest.raises(StateBackendRefusedError) as info:
            backing.get_record()
    assert str(info.value).startswith(
        f"Redis at 127.0.0.1:{server.port} refused the get_record of map 'counts:' (owner "
        "'count-0'): the username or password is wrong; correct them in the client or URL "
        "given to RedisBackingMap"
    )
    assert ":wrong@" not in str(info.value)  # the URL, and its password, are never shown


def _stream_context(spout: RedisStreamSpout) -> TopologyContext:
    builder = TopologyBuilder()
    builder.set_spout("reader", spout, 1)
    return TopologyContext(builder.create_topology(), "wc", "reader", 0)


@pytest.mark.redis
def test_a_stream_spout_over_a_key_that_is_no_stream_is_refused(redis_db: Any) -> None:
    redis_db.client().set("sentences", "a string, not a stream")
    spout = RedisStreamSpout("sentences", redis_url=redis_db.url, fields=("sentence",))
    with pytest.raises(StateBackendRefusedError) as info:
        spout.open({}, _stream_context(spout), RecordingSpoutCollector())
    assert str(info.value).startswith(
        f"Redis at 127.0.0.1:{redis_db.port} refused the consumer group creation of stream "
        "'sentences' (group 'wc'): a key holds another type of value (key 'sentences' holds a "
        "string, not a stream); another program writes these keys"
    )


@pytest.mark.redis
def test_a_stream_spout_reopened_on_its_group_reads_on(redis_db: Any) -> None:
    """BUSYGROUP (the group exists) is not an error: decided on the reply's code."""
    redis_db.client().xadd("sentences", {"sentence": "the cow"})
    for _ in range(2):
        spout = RedisStreamSpout("sentences", redis_url=redis_db.url)
        collector = RecordingSpoutCollector()
        spout.open({}, _stream_context(spout), collector)
        spout.next_tuple()
        spout.close()
    assert redis_db.client().xinfo_groups("sentences")[0]["name"] == b"wc"


def _tx(txid: int) -> TransactionAttempt:
    return TransactionAttempt(txid, 1)


class _Collector:
    def __init__(self) -> None:
        self.rows: list[list[Any]] = []

    def emit(self, values: list[Any]) -> None:
        self.rows.append(values)

    def report_error(self, error: BaseException) -> None:
        raise AssertionError(error)


@pytest.mark.redis
@pytest.mark.parametrize("opaque", [False, True], ids=["transactional", "opaque"])
def test_transactional_stream_spouts_stop_on_a_refusal_and_retry_an_outage(
    redis_server_factory: Any, opaque: bool
) -> None:
    server = redis_server_factory()
    server.client().set("p0", "a string, not a stream")
    kind = OpaqueRedisStreamsTransactionalSpout if opaque else RedisStreamsTransactionalSpout
    emitter = kind(server.url, ["p0"], ["word"], 3).get_emitter({}, None)
    emit = emitter.emit_partition_batch if opaque else emitter.emit_partition_batch_new
    with pytest.raises(StateBackendRefusedError) as info:
        emit(_tx(1), _Collector(), 0, None)
    assert str(info.value).startswith(
        f"Redis at 127.0.0.1:{server.port} refused the read of partition 0 of "
        f"{kind.__qualname__} over ['p0']: a key holds another type of value"
    )
    server.stop()
    if opaque:
        assert emit(_tx(2), _Collector(), 0, None) is None  # emits nothing, goes on
    else:
        with pytest.raises(FailedException, match="cannot read partition 0"):
            emit(_tx(2), _Collector(), 0, None)
