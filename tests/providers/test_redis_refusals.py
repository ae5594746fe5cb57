"""Redis refuses while a word count runs on it: the topology stops at once, and loses nothing.

A refusal (``StateBackendRefusedError``) is not an outage: waiting does not make a full server
empty, a replica writable or a wrong password right. So with ``topology.state.backend.timeout
.secs`` at its default of 300 s, each topology here must stop within seconds, naming the cause
and the fix:

- ``OOM``: the server's ``maxmemory`` drops to 1 byte under ``noeviction`` mid-run, either from
  the driver right after a COMMIT (the driver's own checkpoint save meets it) or from a counter
  task's ``pre_prepare`` (a task's prepare meets it). What committed before stays committed:
  read back once ``maxmemory`` is raised, it equals what Redis held after the last COMMIT, and a
  restarted run counts on from it exactly.
- ``NOAUTH`` / ``WRONGPASS``: a password-protected server, with no password or a wrong one.
- ``READONLY``: the config points at a replica.

These two meet the driver's first write, the checkpoint spout's initial save while the topology
starts: ``submit_topology`` raises the refusal itself.

The other side, a server killed and restarted, is still waited out:
``tests/providers/test_redis_outage``.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest
from outage_topologies import (
    burst_wordcount,
    checkpoint_state,
    counts_in_redis,
    redis_conf,
    snapshot,
)

from examples.wordcount import WordCount, build, expected_counts
from providers import StateBackendRefusedError
from statefulbolts import TopologyFailedError

pytestmark = [pytest.mark.spark, pytest.mark.redis]

SENTENCES = 300
BURST = 20  # one burst per transaction
# The server fills up before PREPARE(SQUEEZE_AT); a loop of this file varies it (1 to 12).
SQUEEZE_AT = int(os.environ.get("STATEFULBOLTS_TEST_SQUEEZE_AT", "3"))
TIMEOUT = 180
FAST = 60  # seconds: "at once" on a shared two-core machine, against the 300 s of an outage


class ShrinkRedisOnPrepare(WordCount):
    """The word count's counter, which drops Redis' ``maxmemory`` in ``pre_prepare(txid)``, once.

    Only the first task attempt to create ``marker`` does it; the prepare of that task (and of
    every later attempt) then meets ``OOM``.
    """

    def __init__(self, txid: int, port: int, marker: str) -> None:
        self.at_txid = txid
        self.port = port
        self.marker = marker

    def pre_prepare(self, txid: int) -> None:
        """Fill the server up if this is the chosen txid and nobody did it before."""
        if txid != self.at_txid:
            return
        try:
            os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        import redis

        client = redis.Redis(host="127.0.0.1", port=self.port)
        try:
            squeeze(client)
        finally:
            client.close()


def squeeze(client: Any) -> None:
    """No room left, and nothing may be evicted."""
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", "1")


class Squeeze:
    """Fills the server up before ``PREPARE(SQUEEZE_AT)``; keeps what had committed by then."""

    def __init__(self, server: Any, where: str, name: str, marker: Path) -> None:
        self.server = server
        self.where = where
        self.name = name
        self.marker = marker
        self.committed: dict[bytes, Any] | None = None
        self.counts: dict[str, int] | None = None
        self.at = 0.0
        self.infos: list[Any] = []

    def topology(self) -> Any:
        counter = None
        if self.where == "task":
            counter = ShrinkRedisOnPrepare(SQUEEZE_AT, self.server.port, str(self.marker))
        return burst_wordcount(SENTENCES, BURST, counter)

    def on_transaction(self, info: Any) -> None:
        """Runs on the driver thread between jobs: nothing is in flight here."""
        self.infos.append(info)
        if info.action == "COMMIT" and info.txid == SQUEEZE_AT - 1 and info.ok:
            client = self.server.client()
            self.committed = committed_hashes(client, self.name)
            self.counts = counts_in_redis(client, self.name)
            self.at = time.monotonic()
            if self.where == "driver":
                squeeze(client)


def committed_hashes(client: Any, name: str) -> dict[bytes, Any]:
    """Each counter's committed hash and committed txid (not what is prepared)."""
    found: dict[bytes, Any] = {}
    for key, value in snapshot(client, name).items():
        if not key.startswith(f"{name}/count-".encode()) or key.endswith(b"$prepare"):
            continue
        found[key] = value.get(b"commit") if key.endswith(b"$txid") else value
    return found


@pytest.mark.parametrize("where", ["driver", "task"])
def test_out_of_memory_stops_the_topology_at_once_and_loses_no_committed_count(
    cluster: Any, redis_server_factory: Any, tmp_path: Path, where: str
) -> None:
    server = redis_server_factory()
    name = f"oom-{where}"
    squeezed = Squeeze(server, where, name, tmp_path / "shrink.marker")
    conf = redis_conf(server.port, **{"topology.state.backend.timeout.secs": 300})
    handle = cluster.submit_topology(
        name, conf, squeezed.topology(), on_transaction=squeezed.on_transaction
    )
    try:
        with pytest.raises(TopologyFailedError) as info:
            handle.await_idle(TIMEOUT)
        stopped_after = time.monotonic() - squeezed.at
    finally:
        handle.kill()

    message = str(info.value)
    assert squeezed.committed is not None, squeezed.infos
    assert stopped_after < FAST, (stopped_after, message)
    assert f"topology {name!r} stopped" in message
    assert f"Redis at 127.0.0.1:{server.port} refused the " in message
    assert "out of memory (maxmemory 1B, policy noeviction" in message
    assert "raise maxmemory, or use a volatile-* / allkeys-* eviction policy only if" in message
    assert "backend.timeout.secs" not in message  # not waited out
    if where == "driver":
        assert "stopped while starting a checkpoint: StateBackendRefusedError: " in message
        assert f"refused the commit of state '{name}/$checkpointspout-0'" in message
    else:
        assert f"stopped: PREPARE({SQUEEZE_AT}) failed: " in message
        assert f"refused the prepare of txid {SQUEEZE_AT} of state '{name}/count-" in message

    client = server.client()
    client.config_set("maxmemory", "0")
    assert committed_hashes(client, name) == squeezed.committed
    assert counts_in_redis(client, name) == squeezed.counts
    last = SQUEEZE_AT - 1
    if where == "driver":
        assert checkpoint_state(client, name) == [last, "COMMITTED"]
    else:
        assert checkpoint_state(client, name) == [SQUEEZE_AT, "PREPARING"]
    assert squeezed.counts  # the first transactions did count

    # Room again: a new run recovers (rolls back what was prepared) and counts on from there.
    # (The example's spout: the burst spout cannot take the acks a recovery may deliver.)
    again = cluster.submit_topology(name, conf, build(SENTENCES))
    try:
        again.await_idle(TIMEOUT)
    finally:
        again.kill()
    expected = dict(squeezed.counts)
    for word, n in expected_counts(SENTENCES).items():
        expected[word] = expected.get(word, 0) + n
    assert counts_in_redis(client, name) == expected
    assert not client.keys(f"{name}/*$prepare")


def _pool_conf(port: int, **pool: Any) -> dict[str, Any]:
    conf = redis_conf(port, **{"topology.state.backend.timeout.secs": 300})
    config = json.loads(conf["topology.state.provider.config"])
    config["jedisPoolConfig"].update(pool)
    conf["topology.state.provider.config"] = json.dumps(config)
    return conf


@pytest.mark.parametrize(
    ("password", "cause"),
    [
        (None, "it requires a password and none was given; set the password"),
        ("not-the-password", "the username or password is wrong; correct them in"),
    ],
    ids=["NOAUTH", "WRONGPASS"],
)
def test_a_password_problem_stops_the_topology_at_start(
    cluster: Any, redis_server_factory: Any, password: str | None, cause: str
) -> None:
    server = redis_server_factory(extra_args=("--requirepass", "the-password"))
    conf = _pool_conf(server.port, **({} if password is None else {"password": password}))
    name = f"auth-{'none' if password is None else 'wrong'}"
    started = time.monotonic()
    with pytest.raises(StateBackendRefusedError) as info:
        cluster.submit_topology(name, conf, burst_wordcount(SENTENCES, BURST))
    assert time.monotonic() - started < FAST
    message = str(info.value)
    # The first contact is the topology's lease, taken before anything else runs.
    assert message.startswith(f"topology {name!r}: taking its lease: ")
    assert f"Redis at 127.0.0.1:{server.port} refused the connection of the topologies' " in message
    assert cause in message and " in topology.state.provider.config [" in message
    assert "not-the-password" not in message and "the-password" not in message
    assert server.client(password="the-password").keys("*") == []


def test_a_read_only_replica_stops_the_topology_at_once(
    cluster: Any, redis_server_factory: Any
) -> None:
    primary, replica = redis_server_factory(), redis_server_factory()
    replica.client().replicaof(primary.host, primary.port)
    conf = _pool_conf(replica.port)
    started = time.monotonic()
    with pytest.raises(StateBackendRefusedError) as info:
        cluster.submit_topology("replica", conf, burst_wordcount(SENTENCES, BURST))
    assert time.monotonic() - started < FAST
    message = str(info.value)
    assert f"Redis at 127.0.0.1:{replica.port} refused the " in message
    assert f"it is a read-only replica (a replica of 127.0.0.1:{primary.port})" in message
    assert "point topology.state.provider.config at the primary" in message
    assert primary.client().keys("*") == []
