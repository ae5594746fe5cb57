"""The recovery tests' shared fixture: the providers the stored state moves on."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from providers import STATE_PROVIDER_CONFIG_KEY, STATE_PROVIDER_KEY, InMemoryKeyValueStateProvider


@pytest.fixture(params=["memory", "sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def conf(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A topology config on memory, SQLite (a file of its own) and the real redis-server."""
    InMemoryKeyValueStateProvider.drop()
    if request.param == "memory":
        made: dict[str, Any] = {}
    elif request.param == "sqlite":
        made = {
            STATE_PROVIDER_KEY: "sqlite_state.SqliteKeyValueStateProvider",
            STATE_PROVIDER_CONFIG_KEY: json.dumps({"path": str(tmp_path / "state.db")}),
        }
    else:
        server = request.getfixturevalue("redis_db")
        pool = {"host": "127.0.0.1", "port": server.port}
        made = {
            STATE_PROVIDER_KEY: "providers.redis.RedisKeyValueStateProvider",
            STATE_PROVIDER_CONFIG_KEY: json.dumps({"jedisPoolConfig": pool}),
        }
    yield made
    InMemoryKeyValueStateProvider.drop()
    from providers import load_module

    sqlite_state = load_module("sqlite_state")

    from providers.redis import reset_clients

    reset_clients()
    sqlite_state.close_connections()
