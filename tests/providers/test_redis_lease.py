"""What only the Redis lease store has: its exact keys, the server's clock, resent calls, the
round trips of a grant, lost lease keys, the maxmemory rule of a fenced prepare, and a cluster.

The contract every provider keeps is in test_lease_contract.py. Each test runs on fakeredis and
on a real redis-server, except those only a real server can show (MONITOR, maxmemory, cluster).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import fakeredis
import pytest
from redis_fixtures import single_node_cluster

from providers import (
    FENCE_EPOCH_KEY,
    STATE_PROVIDER_CONFIG_KEY,
    STATE_PROVIDER_KEY,
    LeaseHolder,
    StateBackendRefusedError,
    StateFactory,
    StateFencedError,
    StateLostError,
    get_provider,
)
from providers.redis import RedisLeaseStore, override_client, reset_clients
from providers.redis._lease import ACQUIRE, HISTORY

PROVIDER = "providers.redis.RedisKeyValueStateProvider"
HOLDER = LeaseHolder("host-a", 101, 1_780_000_000.0, process="9001", token="t")
OTHER = LeaseHolder("host-b", 202, 1_780_000_100.0)
TTL_MS = 60_000


def conf_for(config: Any, epoch: int | None = None) -> dict[str, Any]:
    conf: dict[str, Any] = {STATE_PROVIDER_KEY: PROVIDER, STATE_PROVIDER_CONFIG_KEY: config}
    if epoch is not None:
        conf[FENCE_EPOCH_KEY] = epoch
    return conf


def server_ms(client: Any) -> int:
    seconds, micros = client.time()
    return int(seconds) * 1000 + int(micros) // 1000


@pytest.fixture(params=["fakeredis", pytest.param("redis", marks=pytest.mark.redis)])
def client(request: pytest.FixtureRequest) -> Iterator[Any]:
    """A client every state and lease store of the test uses (``override_client``)."""
    if request.param == "fakeredis":
        made = fakeredis.FakeRedis(server=fakeredis.FakeServer())
    else:
        made = request.getfixturevalue("redis_db").client()
    with override_client(made):
        yield made


def write(namespace: str, epoch: int | None = None) -> None:
    """A committed write of ``namespace`` (no txid, as the checkpoint spout saves)."""
    state = StateFactory.get_state(namespace, conf_for("{}", epoch))
    state.put("k", 1)
    state.commit()


def test_the_lease_keys_and_fields_are_exact(client: Any) -> None:
    conf = conf_for("{}")
    store = get_provider(conf).lease_store(conf)
    assert isinstance(store, RedisLeaseStore)
    write("wc/count-0")
    lease = store.acquire("wc/", HOLDER, TTL_MS)
    holder = json.dumps(HOLDER.to_fields(), sort_keys=True).encode()
    assert {k.decode() for k in client.keys("{wc/}*")} == {
        "{wc/}$lease",
        "{wc/}$epoch",
        "{wc/}$leases",
    }
    record = client.hgetall("{wc/}$lease")
    assert set(record) == {b"epoch", b"holder", b"ttl", b"expires", b"grant"}
    assert (record[b"epoch"], record[b"holder"], record[b"ttl"]) == (b"1", holder, b"60000")
    assert 0 < int(record[b"expires"]) - server_ms(client) <= TTL_MS
    assert client.get("{wc/}$epoch") == b"1"
    assert client.hgetall("{wc/}$leases") == {b"1": holder}
    assert client.hget("wc/count-0$txid", "epoch") == b"1"  # fenced at the grant
    assert lease.epoch == 1
    # No lease key is ever taken for a namespace, whatever the prefix listed.
    assert get_provider(conf).namespaces(conf, "") == ["wc/count-0"]
    assert get_provider(conf).namespaces(conf, "{") == []


def test_expiry_is_the_servers_clock_against_the_stored_expiry(client: Any) -> None:
    store = RedisLeaseStore(client)
    store.acquire("wc/", HOLDER, TTL_MS)
    client.hset("{wc/}$lease", "expires", server_ms(client) + 5_000)
    lease = store.read("wc/")
    assert lease is not None and 0 < lease.remaining_ms <= 5_000
    client.hset("{wc/}$lease", "expires", server_ms(client) - 1)
    lapsed = store.read("wc/")
    assert lapsed is not None and not lapsed.live
    assert store.acquire("wc/", OTHER, TTL_MS).epoch == 2


def test_a_resent_acquire_gets_its_own_grant_back(client: Any) -> None:
    # redis-py resends a script after a dropped connection: the same arguments, grant id too.
    script = client.register_script(ACQUIRE)
    keys = ["{wc/}$lease", "{wc/}$epoch", "{wc/}$leases"]
    holder = json.dumps(HOLDER.to_fields(), sort_keys=True)
    args = [holder, TTL_MS, "", uuid.uuid4().hex, HISTORY]
    first, again = script(keys=keys, args=args), script(keys=keys, args=args)
    assert first[:4] == again[:4] == [1, b"1", holder.encode(), b"60000"]
    assert client.get("{wc/}$epoch") == b"1"
    other = script(keys=keys, args=[holder, TTL_MS, "", uuid.uuid4().hex, HISTORY])
    assert other[:2] == [0, b"1"]  # another call, by the same holder: the lease is held


def test_lost_lease_keys_are_found_at_the_grant_and_the_grant_is_released(client: Any) -> None:
    store = RedisLeaseStore(client)
    first = store.acquire("wc/", HOLDER, TTL_MS)
    second = store.acquire("wc/", OTHER, TTL_MS, over=first.epoch)
    write("wc/count-0", second.epoch)
    client.delete("{wc/}$lease", "{wc/}$epoch", "{wc/}$leases")
    with pytest.raises(StateLostError) as info:
        store.acquire("wc/", HOLDER, TTL_MS)
    message = str(info.value)
    assert "granted epoch 1, but namespace 'wc/count-0' was written under epoch 2" in message
    assert "set '{wc/}$epoch' to 2 or more" in message
    lease = store.read("wc/")
    assert lease is not None and not lease.live
    client.set("{wc/}$epoch", 2)
    assert store.acquire("wc/", HOLDER, TTL_MS).epoch == 3


# --- real server only -------------------------------------------------------------------------
def _monitored(server: Any, action: Any) -> tuple[list[str], list[str]]:
    """(commands clients sent, commands scripts ran) while ``action`` ran, seen by MONITOR."""
    marker = f"end-{uuid.uuid4().hex}"
    sent: list[str] = []
    scripted: list[str] = []
    closing = server.client()
    closing.ping()
    with server.client().monitor() as monitor:
        action()
        closing.echo(marker)
        while True:
            seen = monitor.next_command()
            words = seen["command"].split(" ")
            if words[0].upper() == "ECHO" and words[1:] == [marker]:
                return sent, scripted
            if seen["client_type"] == "lua":
                scripted.append(words[0].upper())
            else:
                sent.append(words[0].upper())


@pytest.mark.redis
def test_a_grant_fences_with_one_scan_and_one_pipeline(redis_db: Any) -> None:
    client = redis_db.client()
    with override_client(client):
        for i in range(3):
            write(f"wc/count-{i}")
        write("other/count-0")
        store = RedisLeaseStore(client)
        store.read("wc/")  # loads the client's connection and the READ script
        sent, scripted = _monitored(redis_db, lambda: store.acquire("wc/", HOLDER, TTL_MS))
    # The grant (NOSCRIPT once, then loaded), the listing, then FENCE on each namespace.
    assert [c for c in sent if c not in ("SCRIPT", "EVALSHA")] == ["SCAN", "EVAL", "EVAL", "EVAL"]
    assert scripted.count("HSET") == 2 + 3  # the record and the history; each fence
    assert [client.hget(f"wc/count-{i}$txid", "epoch") for i in range(3)] == [b"1"] * 3
    assert client.hget("other/count-0$txid", "epoch") is None


@pytest.mark.redis
def test_a_fenced_prepare_on_a_full_server_is_refused_before_it_writes(
    redis_server_factory: Any,
) -> None:
    # The fence rises in the prepare's first write, the one Redis checks against maxmemory.
    server = redis_server_factory()
    admin = server.client()
    with override_client(server.client()):
        state = StateFactory.get_state("wc/count-0", conf_for("{}", 4))
        state.put("a", 1)
        state.prepare_commit(1)
        state.commit(1)
        newer = StateFactory.get_state("wc/count-0", conf_for("{}", 5))
        newer.put("b", "x" * 10_000)
        admin.config_set("maxmemory-policy", "noeviction")
        admin.config_set("maxmemory", "1")
        try:
            with pytest.raises(StateBackendRefusedError, match="out of memory"):
                newer.prepare_commit(2)
        finally:
            admin.config_set("maxmemory", "0")
    assert admin.hgetall("wc/count-0$txid") == {b"commit": b"1", b"epoch": b"4"}
    assert admin.exists("wc/count-0$prepare") == 0


@pytest.mark.redis
def test_leases_and_fences_on_a_cluster(redis_server_factory: Any) -> None:
    node = single_node_cluster(redis_server_factory)
    admin = node.client()
    config = json.dumps({"jedisClusterConfig": {"nodes": [f"{node.host}:{node.port}"]}})
    conf = conf_for(config)
    try:
        store = get_provider(conf).lease_store(conf)
        assert store is not None
        first = store.acquire("topo/", HOLDER, TTL_MS)
        stale = StateFactory.get_state("topo/count-0", conf_for(config, first.epoch))
        stale.put("a", 1)
        stale.prepare_commit(1)
        second = store.acquire("topo/", OTHER, TTL_MS, over=first.epoch)
        slots = {admin.cluster("keyslot", k) for k in ("{topo/}$lease", "{topo/}$epoch")}
        assert slots == {admin.cluster("keyslot", "{topo/}$leases")}
        assert admin.hget("{topo/count-0}$txid", "epoch") == str(second.epoch).encode()
        with pytest.raises(StateFencedError) as info:
            stale.commit(1)
        assert (info.value.epoch, info.value.fence) == (first.epoch, second.epoch)
        assert admin.exists("{topo/count-0}") == 0  # nothing committed
        StateFactory.get_state("topo/count-0", conf_for(config, second.epoch)).commit(1)
        assert StateFactory.get_state("topo/count-0", conf).get("a") == 1
        assert get_provider(conf).namespaces(conf, "topo/") == ["topo/count-0"]
        assert sorted(store.holders("topo/")) == [first.epoch, second.epoch]
    finally:
        reset_clients()
