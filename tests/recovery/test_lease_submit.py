"""The lease at submit, in process: both protocols, every kind of provider.

``LocalCluster.submit_topology`` takes the lease before the runner opens anything; these tests
use the inline engine and real stores (SQLite, and a real redis-server) in one process. The
child-process scenarios (two drivers started together, take-over, SIGSTOP, supervised
restarts) are in ``test_one_driver.py``.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from examples.transactional_global_count import DATA, GLOBAL_KEY
from examples.transactional_global_count import build as global_count
from examples.wordcount import build as wordcount
from providers import LeaseHeldError, StateProvider
from providers.memory import InMemoryKeyValueStateProvider
from recovery.lease import read_lease
from statefulbolts import LocalCluster


def sqlite_conf(tmp_path: Path) -> dict[str, Any]:
    return {
        "topology.state.provider": "sqlite_state.SqliteKeyValueStateProvider",
        "topology.state.provider.config": {"path": str(tmp_path / "state.sqlite3")},
    }


def redis_conf(port: int) -> dict[str, Any]:
    return {
        "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
        "topology.state.provider.config": {"jedisPoolConfig": {"host": "127.0.0.1", "port": port}},
    }


@pytest.fixture(params=["sqlite", pytest.param("redis", marks=pytest.mark.redis)])
def conf(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    if request.param == "sqlite":
        return sqlite_conf(tmp_path)
    return redis_conf(request.getfixturevalue("redis_db").port)


def test_a_second_transactional_driver_of_one_id_is_refused(conf: dict[str, Any]) -> None:
    # Two topologies of other names, one transactional id: one progress, so one driver.
    first, second = LocalCluster(engine="inline"), LocalCluster(engine="inline")
    handle = first.submit_topology("counts-a", conf, global_count(transactional_id="gc"))
    try:
        with pytest.raises(LeaseHeldError) as refused:
            second.submit_topology("counts-b", conf, global_count(transactional_id="gc"))
        assert str(refused.value).startswith(
            "transactional id 'gc' (topology 'counts-b') is already running: host "
        )
        handle.await_idle(120)
        # Every word of the example's data, counted once.
        assert handle.read_state("sum") == {GLOBAL_KEY: sum(len(rows) for rows in DATA.values())}
    finally:
        first.shutdown()
        second.shutdown()
    lease = read_lease(conf, "$transactional/gc/")
    assert lease is not None and lease.epoch == 1 and not lease.live  # released at the end


def test_a_released_lease_lets_the_next_run_start_at_once(conf: dict[str, Any]) -> None:
    with LocalCluster(engine="inline") as cluster:
        cluster.submit_topology("wc", conf, wordcount(40)).await_idle(120)
        cluster.kill_topology("wc")
        again = cluster.submit_topology("wc", conf, wordcount(40))
        again.await_idle(120)
        assert sum(again.read_state("count").values()) == 2 * sum(
            len(s.split()) for s in _sentences(40)
        )
    lease = read_lease(conf, "wc/")
    assert lease is not None and lease.epoch == 2


def test_take_over_in_process_fences_the_running_runner(tmp_path: Path) -> None:
    conf = sqlite_conf(tmp_path)
    first, second = LocalCluster(engine="inline"), LocalCluster(engine="inline")
    try:
        held = first.submit_topology("wc", conf, wordcount(40))
        held.await_idle(120)
        taken = second.submit_topology("wc", conf, wordcount(40), take_over=True)
        taken.await_idle(120)
        lease = read_lease(conf, "wc/")
        assert lease is not None and lease.epoch == 2 and lease.live
        assert held.runner.lease is not None
        seen = held.runner.lease.taken_over()  # the new holder's lease, read a moment apart
        assert seen is not None and (seen.epoch, seen.holder) == (lease.epoch, lease.holder)
    finally:
        first.shutdown()
        second.shutdown()


def _sentences(n: int) -> list[str]:
    from examples.corpus import sentence

    return [sentence(i) for i in range(n)]


class DurableWithoutLeases(StateProvider):
    """A provider of a store outliving its driver that keeps no leases (a user's, say)."""

    def new_state(self, namespace: str, conf: Any, context: Any = None) -> Any:
        return InMemoryKeyValueStateProvider().new_state(namespace, conf, context)


def test_a_durable_provider_without_leases_is_warned_about_at_submit() -> None:
    conf = {"topology.state.provider": f"{__name__}.DurableWithoutLeases"}
    with LocalCluster(engine="inline") as cluster:
        with pytest.warns(UserWarning, match="keeps no leases") as caught:
            cluster.submit_topology("wc-nolease", conf, wordcount(10)).await_idle(120)
    (warning,) = [w for w in caught if "keeps no leases" in str(w.message)]
    assert str(warning.message).startswith(
        f"topology 'wc-nolease': the state provider {__name__}.DurableWithoutLeases keeps no leases"
    )


def test_memory_state_takes_no_lease_and_says_nothing() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with LocalCluster(engine="inline") as cluster:
            handle = cluster.submit_topology("wc-memory", {}, wordcount(10))
            handle.await_idle(120)
            assert handle.runner.lease is None
