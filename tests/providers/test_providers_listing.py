"""Finding a topology's stateful tasks through ``StateProvider.namespaces``, on every provider.

``checkpoint.status.checkpoint_status`` with no task list asks the configured provider what it
holds; these tests run it over the in-memory, fakeredis, real Redis and SQLite providers, with
user key and value classes configured that the framework's own records must not go through.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

import pytest
from redis_fixtures import free_port
from test_state_contract import Backend, backend  # noqa: F401 (the fixture)

from checkpoint import TX_STATE_KEY, CheckPointState, TxPhase
from checkpoint.status import (
    TaskStatus,
    checkpoint_status,
    provider_stateful_tasks,
)
from providers import (
    STATE_PROVIDER_CONFIG_KEY,
    STATE_PROVIDER_KEY,
    StateBackendError,
    StateFactory,
    StateProvider,
    get_provider,
)
from providers.memory import InMemoryKeyValueState

USER_CLASSES = {"keyClass": "str", "valueClass": "int"}


def leave_state(
    store: Backend, namespace: str, committed: int | None = None, prepared: int | None = None
) -> None:
    state = store.state(namespace, **USER_CLASSES)
    if committed is not None:
        state.put("storm", committed)
        state.prepare_commit(committed)
        state.commit(committed)
    if prepared is not None:
        state.put("storm", prepared)
        state.prepare_commit(prepared)


def test_checkpoint_status_finds_the_tasks_the_provider_holds(backend: Backend) -> None:  # noqa: F811
    topo = backend.namespace.split("/")[0]
    conf = backend.conf(**USER_CLASSES)
    spout = StateFactory.get_system_state(f"{topo}/$checkpointspout-0", conf)
    spout.put(TX_STATE_KEY, CheckPointState(3, TxPhase.COMMITTING).to_value())
    spout.commit()
    leave_state(backend, f"{topo}/count-0", committed=2, prepared=3)
    leave_state(backend, f"{topo}/count-1", committed=3)
    leave_state(backend, f"{topo}/split-0", prepared=0)
    leave_state(backend, f"{topo}/not-a-task", committed=1)  # no task index: not listed
    leave_state(backend, f"{topo}x/count-0", committed=7)  # another topology

    assert provider_stateful_tasks(conf, topo) == [("count", 0), ("count", 1), ("split", 0)]
    status = checkpoint_status(conf, topo)
    assert status.checkpoint == CheckPointState(3, TxPhase.COMMITTING)
    assert status.on_restart == ["COMMIT(3)", "INITSTATE(3)"]
    assert status.provider == backend.provider
    assert status.tasks == [
        TaskStatus("count", 0, f"{topo}/count-0", 2, 3),
        TaskStatus("count", 1, f"{topo}/count-1", 3, None),
        TaskStatus("split", 0, f"{topo}/split-0", None, 0),
    ]


def test_checkpoint_status_of_nothing_stored(backend: Backend) -> None:  # noqa: F811
    topo = backend.namespace.split("/")[0]
    status = checkpoint_status(backend.conf(**USER_CLASSES), topo)
    assert (status.checkpoint, status.tasks, status.found) == (None, [], False)


class SilentProvider(StateProvider):
    """A provider that keeps to the minimum contract: it cannot list."""

    def new_state(
        self, namespace: str, conf: Mapping[str, Any], context: Any | None = None
    ) -> InMemoryKeyValueState:
        return InMemoryKeyValueState(namespace)


def test_a_provider_that_cannot_list_gives_no_tasks() -> None:
    conf = {STATE_PROVIDER_KEY: f"{__name__}.SilentProvider"}
    assert get_provider(conf).namespaces(conf, "wc/") is None
    assert provider_stateful_tasks(conf, "wc") == []
    status = checkpoint_status(conf, "wc")
    assert (status.checkpoint, status.tasks) == (None, [])
    given = checkpoint_status(conf, "wc", [("count", 1)])
    assert given.tasks == [TaskStatus("count", 1, "wc/count-1", None, None)]


def redis_conf(config: dict[str, Any]) -> dict[str, Any]:
    return {
        STATE_PROVIDER_KEY: "providers.redis.RedisKeyValueStateProvider",
        STATE_PROVIDER_CONFIG_KEY: json.dumps({**USER_CLASSES, **config}),
    }


def test_listing_an_unreachable_redis_says_where() -> None:
    from providers.redis import reset_clients

    port = free_port()
    conf = redis_conf({"jedisPoolConfig": {"host": "127.0.0.1", "port": port, "timeout": 500}})
    with pytest.raises(StateBackendError, match=f"127.0.0.1:{port} could not be reached"):
        get_provider(conf).namespaces(conf, "wc/")
    reset_clients()


@pytest.mark.redis
def test_listing_on_a_cluster_unwraps_the_hash_tags(redis_server_factory: Any) -> None:
    from providers.redis import reset_clients

    # An explicit bus port: the default (port + 10000) can be taken or above 65535.
    node = redis_server_factory(
        extra_args=(
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-port",
            str(free_port()),
        )
    )
    admin = node.client()
    admin.execute_command("CLUSTER", "ADDSLOTSRANGE", "0", "16383")
    deadline = time.monotonic() + 10
    while admin.cluster("info")["cluster_state"] != "ok":
        assert time.monotonic() < deadline, "single-node cluster did not come up"
        time.sleep(0.05)
    conf = redis_conf({"jedisClusterConfig": {"nodes": [f"{node.host}:{node.port}"]}})
    try:
        for namespace in ("wc/count-1", "wc/count-0", "wc/$checkpointspout-0", "wcx/count-0"):
            state = StateFactory.get_state(namespace, conf)
            state.put("k", 1)
            state.commit()
        assert {k.decode() for k in admin.keys("*$txid")} == {
            "{wc/count-0}$txid",
            "{wc/count-1}$txid",
            "{wc/$checkpointspout-0}$txid",
            "{wcx/count-0}$txid",
        }
        assert get_provider(conf).namespaces(conf, "wc/") == [
            "wc/$checkpointspout-0",
            "wc/count-0",
            "wc/count-1",
        ]
        assert provider_stateful_tasks(conf, "wc") == [("count", 0), ("count", 1)]
    finally:
        reset_clients()
