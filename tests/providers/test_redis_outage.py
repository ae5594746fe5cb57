"""Redis goes away mid-run: the driver waits for it, and gives up only after the backend timeout.

A dedicated append-only redis-server (``redis_server_factory``) carries the word count's state.
It goes down just before ``PREPARE(3)``, in one of two places:

- ``driver``: right after ``COMMIT(2)``, from the driver's transaction callback, so the first
  thing to meet the outage is the driver's own checkpoint save (``PREPARING(3)``).
- ``task``: inside the ``PREPARE(3)`` job, from a counter task's ``pre_prepare`` hook
  (``SHUTDOWN``), so a task's ``prepare_commit`` fails while the other task may have prepared.

A short outage (a few seconds, then a restart on the same port and directory) must be waited
out: the run finishes with exact counts, nothing left prepared, without spending
``topology.max.transaction.retries`` (set to 1 here). An outage longer than
``topology.state.backend.timeout.secs`` stops the topology with a ``TopologyFailedError`` that
names the Redis error, and the committed state stays as ``COMMIT(2)`` left it.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from outage_topologies import (
    CHECKPOINT,
    ShutdownRedisOnPrepare,
    burst_wordcount,
    checkpoint_state,
    counts_in_redis,
    redis_conf,
)

from examples.wordcount import expected_counts
from statefulbolts import TopologyFailedError

pytestmark = [pytest.mark.spark, pytest.mark.redis]

DRIVER_LOG = "checkpoint.runner"
SENTENCES = 400
BURST = 20  # one burst per transaction: 20 transactions, most of them after the outage
OUTAGE_AT = 3  # the outage meets PREPARE(OUTAGE_AT)
DOWN_FOR = 4.0
TIMEOUT = 180


class Outage:
    """Takes the Redis server down before ``PREPARE(OUTAGE_AT)`` and brings it back."""

    def __init__(self, server: Any, where: str, name: str, marker: Path) -> None:
        self.server = server
        self.port = server.port
        self.where = where
        self.name = name
        self.marker = marker
        self.committed: dict[str, Any] | None = None
        self.down = threading.Event()
        self.down_at = 0.0
        self.up_at = 0.0
        self.infos: list[Any] = []

    def topology(self) -> Any:
        counter = None
        if self.where == "task":
            counter = ShutdownRedisOnPrepare(OUTAGE_AT, self.port, str(self.marker))
        return burst_wordcount(SENTENCES, BURST, counter)

    def on_transaction(self, info: Any) -> None:
        """Runs on the driver thread between jobs: nothing is in flight here."""
        self.infos.append(info)
        if info.action == "COMMIT" and info.txid == OUTAGE_AT - 1 and info.ok:
            self.committed = committed_state(self.server.client(), self.name)
            if self.where == "driver":
                self.server.stop()  # SIGTERM: the append-only file is fsynced
                self.down_at = time.monotonic()
                self.down.set()

    def wait_down(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        if self.where == "task":
            while self.server.process is not None and self.server.process.poll() is None:
                assert time.monotonic() < deadline, f"Redis still up; transactions {self.infos}"
                time.sleep(0.01)
            self.down_at = time.monotonic()
            self.server.stop()  # reap it
            self.down.set()
        assert self.down.wait(max(0.0, deadline - time.monotonic())), self.infos

    def restart(self) -> None:
        self.server.start(port=self.port)
        self.up_at = time.monotonic()


def committed_state(client: Any, name: str) -> dict[str, Any]:
    """The committed part of every counter namespace: its hash and its committed txid."""
    state: dict[str, Any] = {}
    for task in range(2):
        ns = f"{name}/count-{task}"
        state[ns] = client.hgetall(ns)
        state[f"{ns}$txid.commit"] = client.hget(f"{ns}$txid", "commit")
    return state


def topology_keys(name: str) -> set[bytes]:
    bases = [f"{name}/count-0", f"{name}/count-1", f"{name}/{CHECKPOINT}", f"{name}/$shape"]
    lease = {f"{{{name}/}}${what}" for what in ("lease", "epoch", "leases")}  # the driver's lease
    return {k.encode() for base in bases for k in (base, f"{base}$txid")} | {
        k.encode() for k in lease
    }


def backend_warnings(caplog: Any) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == DRIVER_LOG and r.levelno == logging.WARNING and "state backend" in r.message
    ]


@pytest.mark.parametrize("where", ["driver", "task"])
def test_short_outage_is_waited_out_and_counts_stay_exact(
    cluster: Any, redis_server_factory: Any, tmp_path: Path, caplog: Any, where: str
) -> None:
    caplog.set_level(logging.INFO, logger=DRIVER_LOG)
    server = redis_server_factory(appendonly=True)
    name = f"outage-{where}"
    outage = Outage(server, where, name, tmp_path / "shutdown.marker")
    conf = redis_conf(
        server.port,
        **{
            "topology.max.transaction.retries": 1,
            "topology.state.backend.timeout.secs": 120,
        },
    )
    handle = cluster.submit_topology(
        name, conf, outage.topology(), on_transaction=outage.on_transaction
    )
    try:
        outage.wait_down(60)
        time.sleep(DOWN_FOR)
        outage.restart()
        handle.await_idle(TIMEOUT)
        counts = handle.read_state("count")
    finally:
        handle.kill()

    expected = dict(expected_counts(SENTENCES))
    client = server.client()
    assert counts_in_redis(client, name) == expected
    assert counts == expected
    assert not client.keys(f"{name}/*$prepare")
    assert set(client.keys("*")) == topology_keys(name)
    last = max(i.txid for i in outage.infos if i.action == "COMMIT" and i.ok)
    assert checkpoint_state(client, name) == [last, "COMMITTED"]
    assert last > OUTAGE_AT  # it went on past the outage
    # The driver said what it was waiting for.
    waits = backend_warnings(caplog)
    assert waits, [r.getMessage() for r in caplog.records]
    assert all(f"127.0.0.1:{server.port}" in w for w in waits), waits
    failed = [(i.action, i.txid, i.error) for i in outage.infos if not i.ok]
    if where == "driver":
        # The driver waited before PREPARE(3) started: no transaction failed, none rolled back.
        assert failed == []
        assert any(w.startswith("starting a checkpoint") for w in waits), waits
        assert not any(i.action == "ROLLBACK" for i in outage.infos)
    else:
        # PREPARE(3) failed on Redis, was rolled back once Redis was back, then went through.
        assert failed, outage.infos
        assert failed[0][:2] == ("PREPARE", OUTAGE_AT)
        assert all("StateBackendError" in (error or "") for _, _, error in failed), failed
        assert ("ROLLBACK", OUTAGE_AT, True) in [(i.action, i.txid, i.ok) for i in outage.infos]
        assert any("before retrying" in w for w in waits), waits


@pytest.mark.parametrize("where", ["driver", "task"])
def test_outage_longer_than_backend_timeout_stops_the_topology(
    cluster: Any, redis_server_factory: Any, tmp_path: Path, where: str
) -> None:
    server = redis_server_factory(appendonly=True)
    name = f"long-outage-{where}"
    outage = Outage(server, where, name, tmp_path / "shutdown.marker")
    conf = redis_conf(server.port, **{"topology.state.backend.timeout.secs": 2})
    handle = cluster.submit_topology(
        name, conf, outage.topology(), on_transaction=outage.on_transaction
    )
    try:
        outage.wait_down(60)
        with pytest.raises(TopologyFailedError) as info:
            handle.await_idle(TIMEOUT)
        stopped_after = time.monotonic() - outage.down_at
    finally:
        handle.kill()

    message = str(info.value)
    assert f"topology {name!r} stopped" in message
    assert "(topology.state.backend.timeout.secs = 2.0)" in message
    assert f"Redis at 127.0.0.1:{server.port} could not be reached" in message
    assert "StateBackendError" in message or "ConnectionError" in message
    assert 2 <= stopped_after < 60, stopped_after

    outage.restart()
    client = server.client()
    # What COMMIT(2) left is what Redis holds: the stop wrote nothing committed.
    assert committed_state(client, name) == outage.committed
    assert outage.committed is not None
    assert outage.committed[f"{name}/count-0$txid.commit"] == str(OUTAGE_AT - 1).encode()
    spout = checkpoint_state(client, name)
    if where == "driver":
        # The driver could not even save PREPARING(3).
        assert spout == [OUTAGE_AT - 1, "COMMITTED"]
        assert not client.keys(f"{name}/*$prepare")
    else:
        # PREPARING(3) was saved before the job; a restarted driver rolls it back.
        assert spout == [OUTAGE_AT, "PREPARING"]
        for key in client.keys(f"{name}/*$prepare"):
            ns = key.decode().removesuffix("$prepare")
            assert client.hget(f"{ns}$txid", "prepare") == str(OUTAGE_AT).encode()
