"""``TimerService`` alone, over one provider after another: order, dedup, delete, transactions.

The service's state comes from ``StateFactory.get_system_state`` with each provider the
contract suite covers (in memory, Redis through fakeredis, a real redis-server, the extlib
SQLite provider): the timers must behave identically on each, and be prepared, committed
and rolled back as the state's other writes are.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from providers import (
    STATE_PROVIDER_CONFIG_KEY,
    STATE_PROVIDER_KEY,
    InMemoryKeyValueStateProvider,
    KeyValueState,
    StateFactory,
)
from statefulbolts.namespaces import TaskNamespace, timers_namespace
from statefulbolts.timers import (
    TimeDomain,
    TimerArgumentError,
    TimerNotReadyError,
    TimerService,
    stored_timers,
)

P, E = TimeDomain.PROCESSING_TIME, TimeDomain.EVENT_TIME


class Store:
    """One provider: its config and fresh states of one timers namespace."""

    def __init__(self, provider: str, config: dict[str, Any]) -> None:
        self.topology = f"timers-{uuid.uuid4().hex[:8]}"
        self.namespace = timers_namespace(str(TaskNamespace.of_topology(self.topology, "s", 0)))
        # A user's serializer fields must not reach the timers (they use the system state).
        self.conf = {
            STATE_PROVIDER_KEY: provider,
            STATE_PROVIDER_CONFIG_KEY: json.dumps({**config, "keyClass": "str"}),
        }

    def state(self) -> KeyValueState:
        state = StateFactory.get_system_state(self.namespace, self.conf)
        assert isinstance(state, KeyValueState)
        return state


@pytest.fixture(
    params=["memory", "fakeredis", pytest.param("redis", marks=pytest.mark.redis), "sqlite"]
)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    kind = request.param
    if kind == "memory":
        s = Store("providers.memory.InMemoryKeyValueStateProvider", {})
        yield s
        InMemoryKeyValueStateProvider.drop(s.topology)
    elif kind == "fakeredis":
        import fakeredis

        from providers.redis import override_client

        client = fakeredis.FakeRedis(server=fakeredis.FakeServer())
        with override_client(client):
            yield Store("providers.redis.RedisKeyValueStateProvider", {})
    elif kind == "redis":
        server = request.getfixturevalue("redis_db")
        pool = {"host": server.host, "port": server.port}
        yield Store("providers.redis.RedisKeyValueStateProvider", {"jedisPoolConfig": pool})
        from providers.redis import reset_clients

        reset_clients()
    else:
        yield Store("sqlite_state.SqliteKeyValueStateProvider", {"path": str(tmp_path / "t.db")})
        from providers import load_module

        load_module("sqlite_state").close_connections()


class Recorder:
    """A service over ``state`` whose callback records ``(key, at, domain)``."""

    def __init__(self, state: KeyValueState) -> None:
        self.state = state
        self.fired: list[tuple[Any, Any, str]] = []
        self.on_fire: Any = None  # an extra action per firing: (service, key, at, domain)
        self.service = TimerService(state, self._fire)

    def _fire(self, key: Any, at: Any, domain: TimeDomain) -> None:
        self.fired.append((key, at, domain.value))
        if self.on_fire is not None:
            self.on_fire(self.service, key, at, domain)


def test_processing_timers_fire_once_in_time_then_key_order(store: Store) -> None:
    r = Recorder(store.state())
    t = r.service
    for key, at in [("bob", 2000), ("ann", 2000), ("cat", 1500), ("ann", 3000)]:
        t.register_processing_time_timer(key, at)
    t.register_processing_time_timer("ann", 2000.0)  # the same timer as ("ann", 2000)
    assert t.fire_due(1499) == 0 and r.fired == []
    assert t.current_processing_time() == 1499
    assert t.fire_due(2000) == 3
    assert r.fired == [("cat", 1500, "processing"), ("ann", 2000, "processing"),
                       ("bob", 2000, "processing")]  # fmt: skip
    assert t.fire_due(2999) == 0
    assert t.fire_due(10_000) == 1 and r.fired[-1] == ("ann", 3000, "processing")
    assert t.fire_due(20_000) == 0 and t.registered() == []


def test_delete_and_the_domains_are_apart(store: Store) -> None:
    r = Recorder(store.state())
    t = r.service
    t.register_processing_time_timer("k", 100)
    t.register_event_time_timer("k", 100)
    t.delete_processing_time_timer("k", 100)
    t.delete_event_time_timer("absent", 5)  # nothing to delete: no error
    assert t.registered() == [(E, 100, "k")]
    assert t.fire_due(1000) == 0  # the watermark is -inf: the event-time timer waits
    assert t.current_watermark() == -math.inf
    t.advance_watermark(99)
    assert r.fired == []
    t.advance_watermark(100)
    assert r.fired == [("k", 100, "event")]
    t.advance_watermark(50)  # a watermark never goes back
    assert t.current_watermark() == 100


def test_a_timer_at_or_before_the_watermark_fires_at_the_next_pass(store: Store) -> None:
    r = Recorder(store.state())
    t = r.service
    t.advance_watermark(1000)
    t.register_event_time_timer("late", 400)
    assert r.fired == []
    assert t.fire_due(0) == 1  # the next transaction's start
    assert r.fired == [("late", 400, "event")]


def test_callbacks_delete_pending_timers_and_register_for_the_next_pass(store: Store) -> None:
    r = Recorder(store.state())
    t = r.service
    for key in ["a", "b", "c"]:
        t.register_processing_time_timer(key, 10)

    def chain(service: TimerService, key: Any, at: Any, domain: TimeDomain) -> None:
        if key == "a":
            service.delete_processing_time_timer("b", 10)  # not fired yet: never fires
            service.register_processing_time_timer("a", 10)  # due, but waits a pass
            service.register_processing_time_timer("z", 5)

    r.on_fire = chain
    assert t.fire_due(10) == 2
    assert r.fired == [("a", 10, "processing"), ("c", 10, "processing")]
    r.on_fire = None
    assert t.fire_due(10) == 2
    assert r.fired[2:] == [("z", 5, "processing"), ("a", 10, "processing")]


def test_a_watermark_raised_in_a_callback_fires_what_it_passes(store: Store) -> None:
    r = Recorder(store.state())
    t = r.service
    t.register_processing_time_timer("tick", 1)
    t.register_event_time_timer("e1", 10)
    t.register_event_time_timer("e2", 20)
    r.on_fire = lambda service, key, at, domain: (
        service.advance_watermark(15) if key == "tick" else None
    )
    assert t.fire_due(1) == 2
    assert r.fired == [("tick", 1, "processing"), ("e1", 10, "event")]
    assert t.registered() == [(E, 20, "e2")]


def test_timers_commit_and_roll_back_with_the_transaction(store: Store) -> None:
    r = Recorder(store.state())
    r.service.register_processing_time_timer("keep", 100)
    r.service.register_event_time_timer("keep", 7)
    r.state.prepare_commit(0)
    r.state.commit(0)
    # Transaction 1 fires "keep", registers "gone", advances the watermark, then rolls back.
    r1 = Recorder(store.state())
    assert r1.service.fire_due(500) == 1
    r1.service.register_processing_time_timer("gone", 600)
    r1.service.advance_watermark(9)
    assert r1.fired == [("keep", 100, "processing"), ("keep", 7, "event")]
    r1.state.prepare_commit(1)
    r1.state.rollback()
    # Its replay fires the very same timers, and commits.
    r2 = Recorder(store.state())
    assert r2.service.registered() == [(P, 100, "keep"), (E, 7, "keep")]
    assert r2.service.current_watermark() == -math.inf
    assert r2.service.fire_due(500) == 1
    r2.service.advance_watermark(9)
    assert r2.fired == r1.fired
    r2.state.prepare_commit(1)
    r2.state.commit(1)
    # What is committed: nothing left to fire, the watermark kept.
    after = Recorder(store.state())
    assert stored_timers(after.state) == []
    assert after.service.current_watermark() == 9
    assert after.service.fire_due(10**9) == 0


def test_keys_and_times_of_every_shape(store: Store) -> None:
    r = Recorder(store.state())
    t = r.service
    t.register_processing_time_timer(("user", 7), 5)  # a tuple key comes back a list
    t.register_processing_time_timer(3, 5)  # keys that do not compare: by msgpack bytes
    t.register_processing_time_timer("s", 4.5)
    assert t.fire_due(5) == 3
    assert r.fired[0] == ("s", 4.5, "processing")
    assert sorted(map(repr, r.fired[1:])) == ["(3, 5, 'processing')",
                                              "(['user', 7], 5, 'processing')"]  # fmt: skip


@pytest.mark.parametrize("bad", [math.nan, math.inf, True, "5", None])
def test_a_time_that_is_not_one_is_refused(bad: Any) -> None:
    from providers import InMemoryKeyValueState

    t = TimerService(InMemoryKeyValueState("t/x-0/$timers"), lambda *a: None)
    with pytest.raises(TimerArgumentError, match=r"timer of key 'k' must be a finite number"):
        t.register_processing_time_timer("k", bad)
    with pytest.raises(TimerArgumentError, match=r"the watermark must be a finite number"):
        t.advance_watermark(bad)


def test_a_key_msgpack_cannot_store_is_refused_naming_its_type() -> None:
    from providers import InMemoryKeyValueState

    t = TimerService(InMemoryKeyValueState("t/x-0/$timers"), lambda *a: None)
    with pytest.raises(TimerArgumentError, match=r"key .* of type builtins.object"):
        t.register_event_time_timer(object(), 1)
    with pytest.raises(TimerNotReadyError, match=r"no transaction time"):
        t.current_processing_time()
