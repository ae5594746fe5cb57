"""A topology change takes a stateful bolt's timers and its keys' TTL along (``recovery.evolve``).

State is left as a stopped ``TimerBolt`` topology leaves it: every task's state, written under a
TTL at a transaction timestamp, and its ``$timers`` namespace (timers, bounds, watermark), all
committed at txid 4 with the checkpoint's record and the stored shape. Then a start of another
shape runs ``evolve``, and the stores are read back: which timer is in which task, the bounds
and the watermark each task starts with, which timers a transaction then fires, and when each
moved key expires. Stores: the in-memory provider, a real SQLite file, a real redis-server.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from checkpoint import TX_STATE_KEY, CheckPointState, TxPhase
from providers import (
    KeyValueState,
    StateFactory,
    StateTtl,
    get_provider,
)
from recovery.evolve import Wanted
from statefulbolts.errors import StateEvolutionError
from statefulbolts.keygroups import KeyGroups
from statefulbolts.listeners import KillPoint
from statefulbolts.offline import drop, evolve
from statefulbolts.state import (
    ComponentShape,
    Partitioning,
    StoredShape,
    read_shape,
    shape_namespace,
    write_shape,
)
from statefulbolts.timers import TimeDomain, TimerService, stored_timers

TOPO = "tm"
PREFIX = f"{TOPO}/"
WORDS = [f"user{i}" for i in range(40)]
GROUPS = KeyGroups(128)
TTL = StateTtl(60_000)
WRITTEN_AT = 1_000_000  # the transaction timestamp the keys were written at
# Each old task's watermark: the new tasks must all start at the lowest, 1500.
WATERMARKS = {0: 2500, 1: 1500, 2: 4000}
P, E = TimeDomain.PROCESSING_TIME, TimeDomain.EVENT_TIME
TX = 100  # the txid the topology stopped at (each key was written in a transaction before)




def kv(conf: Mapping[str, Any], namespace: str, system: bool = False) -> KeyValueState:
    make = StateFactory.get_system_state if system else StateFactory.get_state
    state = make(namespace, conf)
    assert isinstance(state, KeyValueState)
    return state


def keyed(parallelism: int) -> ComponentShape:
    return ComponentShape(parallelism, Partitioning.KEYED, key_groups=128, key_arity=1)


def owner(key: str, parallelism: int) -> int:
    return GROUPS.owner(GROUPS.group_of(key), parallelism)


def timers_of(word: str) -> list[tuple[TimeDomain, int, str]]:
    """Two timers per key, times unique to the key: processing 10_000 + i, event 2_000 + i."""
    i = WORDS.index(word)
    return [(P, 10_000 + i, word), (E, 2_000 + i, word)]


def expiry_of(word: str) -> int:
    """The key's expiry: written at its own timestamp, so each key expires at its own time."""
    return WRITTEN_AT + WORDS.index(word) + TTL.ttl_ms


def leave(conf: dict[str, Any], parallelism: int, *, component: str = "count") -> None:
    """Every task's state (under the TTL) and timers, committed at ``TX``, as a bolt leaves them."""
    for task in range(parallelism):
        mine = [w for w in WORDS if owner(w, parallelism) == task]
        ns = f"{PREFIX}{component}-{task}"
        for i, word in enumerate(mine):  # one transaction per key: its own expiry
            state = kv(conf, ns)
            state.set_transaction_time(WRITTEN_AT + WORDS.index(word), TTL)
            state.put(word, len(word))
            state.prepare_commit(i)
            state.commit(i)
        state = kv(conf, ns)
        state.set_transaction_time(WRITTEN_AT + 500, TTL)
        state.prepare_commit(TX)
        state.commit(TX)
        timer_state = kv(conf, f"{ns}/$timers", system=True)
        service = TimerService(timer_state, lambda *_: None)
        for word in mine:
            service.register_processing_time_timer(word, timers_of(word)[0][1])
            service.register_event_time_timer(word, timers_of(word)[1][1])
        if task in WATERMARKS:
            timer_state.put("watermark", WATERMARKS[task])
        timer_state.prepare_commit(TX)
        timer_state.commit(TX)
    cp = kv(conf, f"{PREFIX}$checkpointspout-0", system=True)
    cp.put(TX_STATE_KEY, CheckPointState(TX, TxPhase.COMMITTED).to_value())
    cp.commit()
    write_shape(
        kv(conf, shape_namespace(PREFIX), system=True),
        StoredShape({component: keyed(parallelism)}),
    )


def listed(conf: dict[str, Any]) -> list[str]:
    return sorted(get_provider(conf).namespaces(conf, PREFIX) or [])


def timer_tasks(conf: dict[str, Any], component: str = "count") -> dict[int, KeyValueState]:
    found = [n for n in listed(conf) if n.endswith("/$timers")]
    assert all(n.startswith(f"{PREFIX}{component}-") for n in found), found
    return {int(n[: -len("/$timers")].rsplit("-", 1)[1]): kv(conf, n, True) for n in found}


def assert_moved(conf: dict[str, Any], parallelism: int, component: str = "count") -> None:
    """Every timer in the task owning its key, bounds tight, watermark the old minimum."""
    tasks = timer_tasks(conf, component)
    assert sorted(tasks) == list(range(parallelism))
    for task, state in tasks.items():
        mine = [w for w in WORDS if owner(w, parallelism) == task]
        expected = sorted(t for w in mine for t in timers_of(w))
        assert sorted(stored_timers(state)) == expected, task
        assert state.stored_txids() == (TX, None)
        bound_p = min((at for d, at, _ in expected if d is P), default=None)
        bound_e = min((at for d, at, _ in expected if d is E), default=None)
        assert state.get_committed("next:p") == bound_p
        assert state.get_committed("next:e") == bound_e
        assert state.get_committed("watermark") == min(WATERMARKS.values())


def assert_expiries(conf: dict[str, Any], parallelism: int, component: str = "count") -> None:
    """Every key in its owner with the expiry it was written with: readable until, not at."""
    for task in range(parallelism):
        ns = f"{PREFIX}{component}-{task}"
        state = kv(conf, ns)
        stored = {state.decode_key(k): at for k, at in state.scan_expiries()}
        mine = {w: expiry_of(w) for w in WORDS if owner(w, parallelism) == task}
        assert stored == mine, task
        assert state.committed_time() == WRITTEN_AT + 500
        for word, at in list(mine.items())[:3]:
            before, then = kv(conf, ns), kv(conf, ns)
            before.set_transaction_time(at - 1)
            then.set_transaction_time(at)
            assert (before.get(word), then.get(word)) == (len(word), None)


@pytest.mark.parametrize(("before", "after"), [(2, 3), (3, 1)])
def test_a_rescale_moves_each_timer_and_expiry_to_the_owner_of_its_key(
    conf: dict[str, Any], before: int, after: int
) -> None:
    leave(conf, before)
    report = evolve(conf, PREFIX, Wanted({"count": keyed(after)}), checkpointed=True)
    assert report.moved == {"count": len(WORDS)}
    assert_moved(conf, after)
    assert_expiries(conf, after)
    assert not [n for n in listed(conf) if "$evolve" in n]
    # A task fires exactly the timers it now holds: processing time 10_010 passes user0..user10.
    for task, state in timer_tasks(conf).items():
        fired: list[tuple[str, float, str]] = []
        service = TimerService(state, lambda k, at, d, out=fired: out.append((k, at, d.value)))
        service.fire_due(10_010)
        due = [w for w in WORDS[:11] if owner(w, after) == task]
        assert [k for k, _, d in fired if d == "processing"] == due
        # and event time up to the minimum watermark 1500: none of them (they start at 2000)
        assert [k for k, _, d in fired if d == "event"] == []


def test_a_rename_moves_the_timers_and_a_drop_drops_them(conf: dict[str, Any]) -> None:
    leave(conf, 2)
    evolve(
        conf,
        PREFIX,
        Wanted({"counter": keyed(2)}),
        checkpointed=True,
        renames={"count": "counter"},
    )
    assert not [n for n in listed(conf) if n.startswith(f"{PREFIX}count-")]
    assert_moved(conf, 2, component="counter")
    assert_expiries(conf, 2, component="counter")
    dropped = drop(conf, PREFIX, "counter")
    assert f"{PREFIX}counter-1/$timers" in dropped
    assert not [n for n in listed(conf) if n.startswith(f"{PREFIX}counter-")]


def test_a_component_known_by_its_timers_only_is_an_orphan(conf: dict[str, Any]) -> None:
    timer_state = kv(conf, f"{PREFIX}gone-0/$timers", system=True)
    TimerService(timer_state, lambda *_: None).register_event_time_timer("x", 5)
    timer_state.prepare_commit(0)
    timer_state.commit(0)
    cp = kv(conf, f"{PREFIX}$checkpointspout-0", system=True)
    cp.put(TX_STATE_KEY, CheckPointState(0, TxPhase.COMMITTED).to_value())
    cp.commit()
    with pytest.raises(StateEvolutionError, match="state of component 'gone' is stored"):
        evolve(conf, PREFIX, Wanted({"count": keyed(1)}), checkpointed=True)


class _Crash(Exception):
    pass


class _CrashAt:
    def __init__(self, point: KillPoint, step: int) -> None:
        self.point, self.step = point, step

    def on_driver(self, point: KillPoint, step: int) -> None:
        if point is self.point and step == self.step:
            raise _Crash(f"{point.value} {step}")


@pytest.mark.parametrize(
    ("point", "step"), [(KillPoint.EVOLVE_STAGED, 0), (KillPoint.EVOLVE_MID_SWAP, 2)]
)
def test_a_start_after_a_crash_mid_rescale_finishes_moving_the_timers(
    conf: dict[str, Any], point: KillPoint, step: int
) -> None:
    leave(conf, 3)
    with pytest.raises(_Crash):
        evolve(
            conf,
            PREFIX,
            Wanted({"count": keyed(2)}),
            checkpointed=True,
            faults=_CrashAt(point, step),
        )
    report = evolve(conf, PREFIX, Wanted({"count": keyed(2)}), checkpointed=True)
    assert report.resumed
    assert_moved(conf, 2)
    assert_expiries(conf, 2)
    assert not [n for n in listed(conf) if "$evolve" in n]
    assert read_shape(kv(conf, shape_namespace(PREFIX), system=True)).operation is None


def test_a_half_way_transaction_of_the_timers_is_settled_before_they_move(
    conf: dict[str, Any],
) -> None:
    leave(conf, 2)
    # PREPARING(TX + 1): every namespace, the timers' too, holds a prepared delta.
    for task in range(2):
        state = kv(conf, f"{PREFIX}count-{task}")
        state.put("late", 1)
        state.prepare_commit(TX + 1)
        timer_state = kv(conf, f"{PREFIX}count-{task}/$timers", system=True)
        TimerService(timer_state, lambda *_: None).register_processing_time_timer("late", 1)
        timer_state.prepare_commit(TX + 1)
    cp = kv(conf, f"{PREFIX}$checkpointspout-0", system=True)
    cp.put(TX_STATE_KEY, CheckPointState(TX + 1, TxPhase.PREPARING).to_value())
    cp.commit()
    evolve(conf, PREFIX, Wanted({"count": keyed(3)}), checkpointed=True)
    assert_moved(conf, 3)  # the prepared timer was rolled back, not moved
