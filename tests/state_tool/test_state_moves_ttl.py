"""``state export`` / ``import`` carry state TTL; a task's timers are the framework's records.

A topology's state is written as a stateful task writes it (a transaction timestamp and a TTL,
each key in its own transaction so each has its own expiry), moved through a state file between
real stores (the in-memory provider, a SQLite file, a real redis-server), and read back: each
key's expiry and the committed timestamp are the source's, so a moved key reads until its
expiry and not at it. A file of format version 1 (before TTL) still imports.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from providers import (
    STATE_PROVIDER_CONFIG_KEY,
    STATE_PROVIDER_KEY,
    InMemoryKeyValueStateProvider,
    KeyValueState,
    StateFactory,
    StateTtl,
)
from statefulbolts.state import export_state, import_state, read_info, read_state
from statefulbolts.state._format import MAGIC
from statefulbolts.timers import TimerService, stored_timers

TOPO = "wc"
TTL = StateTtl(60_000)
WRITES = {"storm": (1, 1_000), "spark": (2, 2_000), "flink": (3, 3_000)}  # key: (value, at ms)


@pytest.fixture
def confs(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, dict[str, Any]]]:
    InMemoryKeyValueStateProvider.drop()
    server = request.getfixturevalue("redis_db")
    pool = {"host": "127.0.0.1", "port": server.port}
    yield {
        "memory": {},
        "sqlite": {
            STATE_PROVIDER_KEY: "sqlite_state.SqliteKeyValueStateProvider",
            STATE_PROVIDER_CONFIG_KEY: json.dumps({"path": str(tmp_path / "s.db")}),
        },
        "redis": {
            STATE_PROVIDER_KEY: "providers.redis.RedisKeyValueStateProvider",
            STATE_PROVIDER_CONFIG_KEY: json.dumps({"jedisPoolConfig": pool}),
        },
    }
    InMemoryKeyValueStateProvider.drop()
    from providers import load_module
    from providers.redis import reset_clients

    reset_clients()
    load_module("sqlite_state").close_connections()


def kv(conf: dict[str, Any], namespace: str, system: bool = False) -> KeyValueState:
    state = (StateFactory.get_system_state if system else StateFactory.get_state)(namespace, conf)
    assert isinstance(state, KeyValueState)
    return state


def leave(conf: dict[str, Any]) -> None:
    """``wc/count-0`` written under the TTL at txids 1..3, and its timers, committed at 3."""
    for txid, (key, (value, at)) in enumerate(WRITES.items(), start=1):
        state = kv(conf, f"{TOPO}/count-0")
        state.set_transaction_time(at, TTL)
        state.put(key, value)
        state.prepare_commit(txid)
        state.commit(txid)
    timers = kv(conf, f"{TOPO}/count-0/$timers", system=True)
    TimerService(timers, lambda *_: None).register_event_time_timer("storm", 9_000)
    timers.prepare_commit(3)
    timers.commit(3)


def assert_ttl_kept(conf: dict[str, Any]) -> None:
    state = kv(conf, f"{TOPO}/count-0")
    expiries = {state.decode_key(k): at for k, at in state.scan_expiries()}
    assert expiries == {key: at + TTL.ttl_ms for key, (_, at) in WRITES.items()}
    assert state.committed_time() == 3_000
    for key, (value, at) in WRITES.items():
        before, then = kv(conf, f"{TOPO}/count-0"), kv(conf, f"{TOPO}/count-0")
        before.set_transaction_time(at + TTL.ttl_ms - 1)
        then.set_transaction_time(at + TTL.ttl_ms)
        assert (before.get(key), then.get(key)) == (value, None), key


@pytest.mark.redis
@pytest.mark.parametrize(("source", "target"), [("memory", "sqlite"), ("sqlite", "redis")])
def test_an_exported_key_expires_after_import_exactly_when_it_would_have(
    confs: dict[str, dict[str, Any]], tmp_path: Path, source: str, target: str
) -> None:
    leave(confs[source])
    path = tmp_path / "wc.sbstate"
    info = export_state(confs[source], path, topology=TOPO)
    [task] = [n for n in info.namespaces if n.name == f"{TOPO}/count-0"]
    assert (task.committed, task.expiries, task.committed_time) == (3, 3, 3_000)
    assert read_info(path).namespaces == info.namespaces
    import_state(confs[target], path, topology=TOPO)
    assert_ttl_kept(confs[target])
    timers = kv(confs[target], f"{TOPO}/count-0/$timers", system=True)
    assert [(d.value, at, k) for d, at, k in stored_timers(timers)] == [("event", 9_000, "storm")]


def _frame(record: list[Any]) -> bytes:
    body = msgpack.packb(record, use_bin_type=True)
    return struct.pack(">II", len(body), zlib.crc32(body)) + body


@pytest.mark.redis
def test_a_version_1_file_still_imports_its_keys_never_expire(
    confs: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    header = {
        "format": "statefulbolts-state",
        "version": 1,
        "scope": "topology",
        "name": TOPO,
        "prefix": f"{TOPO}/",
        "provider": "memory",
        "location": "memory",
        "created_at": "2025-01-01T00:00:00+00:00",
        "serializers": {},
    }
    entries = [[msgpack.packb("storm"), msgpack.packb(7)]]
    data = MAGIC + b"".join(
        _frame(r)
        for r in (
            ["header", header],
            ["namespace", f"{TOPO}/count-0", 3, None],
            ["committed", entries],
            ["end", f"{TOPO}/count-0", 1, 0],
        )
    )
    trailer = {
        "records": 4,
        "namespaces": 1,
        "entries": 1,
        "sha256": hashlib.sha256(data).hexdigest(),
    }
    path = tmp_path / "old.sbstate"
    path.write_bytes(data + _frame(["trailer", trailer]))
    assert read_info(path).namespaces[0].expiries == 0
    conf = confs["redis"]
    import_state(conf, path, topology=TOPO)
    state = kv(conf, f"{TOPO}/count-0")
    assert (list(state.scan_expiries()), state.committed_time()) == ([], None)
    assert read_state(conf, "count", topology=TOPO) == {"storm": 7}


@pytest.mark.redis
def test_a_tasks_timers_import_whatever_the_bolts_serializers(
    confs: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    """Timers are plain msgpack: a file holding no bolt state needs no matching serializers."""
    source = confs["sqlite"]
    timers = kv(source, f"{TOPO}/count-0/$timers", system=True)
    TimerService(timers, lambda *_: None).register_processing_time_timer("storm", 5)
    timers.prepare_commit(0)
    timers.commit(0)
    path = tmp_path / "timers.sbstate"
    export_state(source, path, topology=TOPO)
    typed = {
        **confs["redis"],
        STATE_PROVIDER_CONFIG_KEY: json.dumps(
            {**json.loads(confs["redis"][STATE_PROVIDER_CONFIG_KEY]), "valueClass": "int"}
        ),
    }
    import_state(typed, path, topology=TOPO)
    moved = kv(typed, f"{TOPO}/count-0/$timers", system=True)
    assert [(d.value, at, k) for d, at, k in stored_timers(moved)] == [("processing", 5, "storm")]
