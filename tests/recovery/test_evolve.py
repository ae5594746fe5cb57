"""Changing a topology's stored state at start (``recovery.evolve``), on real stores, no Spark.

Every test leaves state as a stopped topology would (its tasks committed at txid 4, the
checkpoint spout's record, the stored shape), then starts a topology of another shape over it
and reads the stores back: each key in the task that owns its key group, every task committed at
the same txid, nothing left in a namespace no task reads, or a refusal that changed nothing.
Stores: the in-memory provider, a real SQLite file and a real redis-server.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from checkpoint import TX_STATE_KEY, Action, CheckPointState, TxPhase, check_stored_txids
from providers import (
    KeyValueState,
    StateFactory,
    StateLostError,
    get_provider,
)
from recovery.evolve import Wanted
from statefulbolts import StatefulBolt
from statefulbolts.errors import StateEvolutionError
from statefulbolts.keygroups import KeyGroups
from statefulbolts.listeners import KillPoint
from statefulbolts.offline import evolve, plan_evolution
from statefulbolts.state import (
    ComponentShape,
    Partitioning,
    StoredShape,
    legacy_hash,
    read_shape,
    shape_namespace,
    write_shape,
)

TOPO = "wc"
PREFIX = f"{TOPO}/"
WORDS = [f"word{i}" for i in range(300)]
GROUPS = KeyGroups(128)




# ---------------------------------------------------------------- leaving state behind
def kv(conf: Mapping[str, Any], namespace: str, system: bool = False) -> KeyValueState:
    make = StateFactory.get_system_state if system else StateFactory.get_state
    state = make(namespace, conf)
    assert isinstance(state, KeyValueState)
    return state


def keyed(parallelism: int, groups: int = 128, **kw: Any) -> ComponentShape:
    return ComponentShape(parallelism, Partitioning.KEYED, key_groups=groups, key_arity=1, **kw)


def owner(word: str, parallelism: int) -> int:
    return GROUPS.owner(GROUPS.group_of(word), parallelism)


def counts() -> dict[str, int]:
    return {w: i + 1 for i, w in enumerate(WORDS)}


def leave(
    conf: dict[str, Any],
    parallelism: int,
    *,
    place: Any = owner,
    txid: int = 4,
    phase: TxPhase = TxPhase.COMMITTED,
    component: str = "count",
    shape: ComponentShape | None = None,
    data: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """``data`` committed at ``txid`` by ``parallelism`` tasks as ``place`` puts each key."""
    data = counts() if data is None else data
    by_task: dict[int, dict[str, Any]] = {t: {} for t in range(parallelism)}
    for key, value in data.items():
        by_task[place(key, parallelism)][key] = value
    for task, entries in by_task.items():
        state = kv(conf, f"{PREFIX}{component}-{task}")
        for key, value in entries.items():
            state.put(key, value)
        state.prepare_commit(txid)
        state.commit(txid)
    cp = kv(conf, f"{PREFIX}$checkpointspout-0", system=True)
    cp.put(TX_STATE_KEY, CheckPointState(txid, phase).to_value())
    cp.commit()
    if shape is not None:
        write_shape(kv(conf, shape_namespace(PREFIX), system=True), StoredShape({component: shape}))
    return dict(data)


def read_tasks(conf: dict[str, Any], component: str = "count") -> dict[int, dict[str, Any]]:
    """Every task namespace of ``component`` the store lists, with its committed map."""
    found = get_provider(conf).namespaces(conf, f"{PREFIX}{component}-") or []
    out = {}
    for ns in found:
        task = int(ns.rsplit("-", 1)[1])
        state = kv(conf, ns)
        out[task] = {state.decode_key(k): state.decode_value(v) for k, v in state.scan_committed()}
    return out


def txids(conf: dict[str, Any], component: str = "count") -> set[tuple[Any, Any]]:
    found = get_provider(conf).namespaces(conf, f"{PREFIX}{component}-") or []
    return {kv(conf, ns).stored_txids() for ns in found}


def assert_keyed(conf: dict[str, Any], parallelism: int, expected: Mapping[str, Any]) -> None:
    tasks = read_tasks(conf)
    assert sorted(tasks) == list(range(parallelism))
    for task, entries in tasks.items():
        assert all(owner(key, parallelism) == task for key in entries), task
    merged = {k: v for entries in tasks.values() for k, v in entries.items()}
    assert merged == dict(expected)


def no_leftovers(conf: dict[str, Any]) -> None:
    listed = get_provider(conf).namespaces(conf, PREFIX) or []
    assert not [ns for ns in listed if ns.startswith(f"{PREFIX}$evolve")], listed
    shape = read_shape(kv(conf, shape_namespace(PREFIX), system=True))
    assert shape is not None and shape.operation is None


def wanted(shape: ComponentShape, component: str = "count", bolt: Any = None) -> Wanted:
    return Wanted({component: shape}, {component: bolt} if bolt is not None else {})


def cp_state(conf: dict[str, Any]) -> Any:
    return kv(conf, f"{PREFIX}$checkpointspout-0", system=True).get(TX_STATE_KEY)


# ---------------------------------------------------------------- rescaling
def test_a_new_topology_records_its_shape(conf: dict[str, Any]) -> None:
    report = evolve(conf, PREFIX, wanted(keyed(2)), checkpointed=True)
    assert report.lines == [
        "count: new, parallelism 2, keyed by 1 field in 128 key groups, state version 1"
    ]
    assert not report.changed
    shape = read_shape(kv(conf, shape_namespace(PREFIX), system=True))
    assert shape == StoredShape({"count": keyed(2)})


@pytest.mark.parametrize(("before", "after"), [(2, 3), (3, 1), (1, 4), (4, 2)])
def test_a_rescale_puts_every_key_in_the_owner_of_its_group(
    conf: dict[str, Any], before: int, after: int
) -> None:
    data = leave(conf, before, shape=keyed(before))
    report = evolve(conf, PREFIX, wanted(keyed(after)), checkpointed=True)
    assert report.lines == [f"count: parallelism {before} -> {after}"]
    assert report.moved == {"count": len(data)}
    assert_keyed(conf, after, data)
    assert txids(conf) == {(4, None)}  # every task, the new ones too, committed at 4
    assert cp_state(conf) == [4, "COMMITTED"]
    no_leftovers(conf)
    assert read_shape(kv(conf, shape_namespace(PREFIX), system=True)).components == {
        "count": keyed(after)
    }


def test_a_rescale_round_trip_keeps_every_value(conf: dict[str, Any]) -> None:
    data = leave(conf, 2, shape=keyed(2))
    for p in (3, 1, 4, 2):
        evolve(conf, PREFIX, wanted(keyed(p)), checkpointed=True)
        assert_keyed(conf, p, data)
    no_leftovers(conf)


def test_other_key_groups_redistribute_too(conf: dict[str, Any]) -> None:
    data = leave(conf, 2, shape=keyed(2))
    evolve(conf, PREFIX, wanted(keyed(2, groups=16)), checkpointed=True)
    groups = KeyGroups(16)
    tasks = read_tasks(conf)
    for task, entries in tasks.items():
        assert all(groups.owner(groups.group_of(k), 2) == task for k in entries)
    assert {k: v for e in tasks.values() for k, v in e.items()} == data


def test_state_committed_before_key_groups_is_migrated_once(conf: dict[str, Any]) -> None:
    data = leave(conf, 2, place=lambda key, p: legacy_hash((key,)) % p)  # no shape record
    plan = plan_evolution(conf, PREFIX, wanted(keyed(2)), checkpointed=True)
    assert plan.legacy
    assert [c.describe() for c in plan.changes] == [
        "count: layout: hash % 2 (before key groups) -> 128 key groups"
    ]
    report = evolve(conf, PREFIX, wanted(keyed(2)), checkpointed=True)
    assert report.moved == {"count": len(data)}
    assert_keyed(conf, 2, data)
    assert txids(conf) == {(4, None)}
    no_leftovers(conf)
    # Once: the next start finds the recorded shape and moves nothing.
    again = evolve(conf, PREFIX, wanted(keyed(2)), checkpointed=True)
    assert again.moved == {} and again.lines == [
        "count: unchanged, parallelism 2, keyed by 1 field in 128 key groups, state version 1"
    ]


def test_refuse_mode_names_the_command_and_changes_nothing(conf: dict[str, Any]) -> None:
    data = leave(conf, 2, shape=keyed(2))
    with pytest.raises(
        StateEvolutionError, match="parallelism 2 -> 3.*Change it offline with: do-it"
    ):
        evolve(conf, PREFIX, wanted(keyed(3)), checkpointed=True, mode="refuse", command="do-it")
    assert read_tasks(conf) == {
        t: {k: v for k, v in data.items() if owner(k, 2) == t} for t in (0, 1)
    }


# ---------------------------------------------------------------- what cannot be moved
def test_state_not_keyed_by_the_grouped_field_is_refused_and_left_alone(
    conf: dict[str, Any],
) -> None:
    # Each task also keeps a total of its own: "total" is in both tasks.
    leave(conf, 2, shape=keyed(2))
    for task in (0, 1):
        state = kv(conf, f"{PREFIX}count-{task}")
        state.put("total", 100 + task)
        state.prepare_commit(5)
        state.commit(5)
    cp = kv(conf, f"{PREFIX}$checkpointspout-0", system=True)
    cp.put(TX_STATE_KEY, [5, "COMMITTED"])
    cp.commit()
    before = read_tasks(conf)
    with pytest.raises(StateEvolutionError) as info:
        evolve(conf, PREFIX, wanted(keyed(3)), checkpointed=True)
    message = str(info.value)
    wrong = 1 - owner("total", 2)
    assert f"task {wrong} holds key 'total', which its fields grouping sends to task" in message
    assert "Define grouping_key(state_key) on the bolt" in message
    assert read_tasks(conf) == before
    no_leftovers(conf)


class _ByUser(StatefulBolt):
    """Keys its state ``<user>:<what>`` while grouped on ``user``."""

    def init_state(self, state: Any) -> None:
        self.state = state

    def execute(self, tup: Any) -> None:
        return None

    def grouping_key(self, state_key: Any) -> Any:
        return state_key.split(":", 1)[0]


def test_grouping_key_places_keys_the_bolt_derives_from_the_grouped_value(
    conf: dict[str, Any],
) -> None:
    users = [f"user{i}" for i in range(50)]
    data = {f"{u}:{what}": n for n, u in enumerate(users) for what in ("clicks", "views")}
    leave(conf, 2, shape=keyed(2), data=data, place=lambda key, p: owner(key.split(":")[0], p))
    evolve(conf, PREFIX, wanted(keyed(3), bolt=_ByUser()), checkpointed=True)
    tasks = read_tasks(conf)
    for task, entries in tasks.items():
        assert all(owner(key.split(":")[0], 3) == task for key in entries)
    assert {k: v for e in tasks.values() for k, v in e.items()} == data


def test_per_task_state_scales_up_but_never_loses_a_task(conf: dict[str, Any]) -> None:
    per_task = ComponentShape(2, Partitioning.PER_TASK)
    data = leave(conf, 2, shape=per_task, place=lambda key, p: int(key[4:]) % p)
    evolve(conf, PREFIX, wanted(per_task.with_parallelism(3)), checkpointed=True)
    tasks = read_tasks(conf)
    assert tasks[2] == {} and {**tasks[0], **tasks[1]} == data
    with pytest.raises(StateEvolutionError, match="task 2 holds state|task 1 holds state"):
        evolve(conf, PREFIX, wanted(per_task.with_parallelism(1)), checkpointed=True)
    assert read_tasks(conf) == tasks


def test_replicated_state_is_copied_to_new_tasks(conf: dict[str, Any]) -> None:
    replicated = ComponentShape(1, Partitioning.REPLICATED)
    data = leave(conf, 1, shape=replicated, place=lambda key, p: 0)
    evolve(conf, PREFIX, wanted(replicated.with_parallelism(3)), checkpointed=True)
    assert read_tasks(conf) == {0: data, 1: data, 2: data}


# ---------------------------------------------------------------- renames and orphans
def test_a_rename_moves_the_state_and_leaves_no_orphan(conf: dict[str, Any]) -> None:
    data = leave(conf, 2, shape=keyed(2))
    report = evolve(
        conf,
        PREFIX,
        wanted(keyed(3), component="counter"),
        checkpointed=True,
        renames={"count": "counter"},
    )
    assert report.lines == ["counter: renamed from 'count'; parallelism 2 -> 3"]
    assert read_tasks(conf, "count") == {}
    tasks = read_tasks(conf, "counter")
    assert {k: v for e in tasks.values() for k, v in e.items()} == data
    assert txids(conf, "counter") == {(4, None)}
    shape = read_shape(kv(conf, shape_namespace(PREFIX), system=True))
    assert set(shape.components) == {"counter"}
    # The same mapping again is harmless: the state is already under the new id.
    again = evolve(
        conf,
        PREFIX,
        wanted(keyed(3), component="counter"),
        checkpointed=True,
        renames={"count": "counter"},
    )
    assert again.moved == {}


def test_an_orphan_is_refused_unless_allowed(conf: dict[str, Any]) -> None:
    leave(conf, 2, shape=keyed(2))
    with pytest.raises(StateEvolutionError) as info:
        evolve(conf, PREFIX, wanted(keyed(2), component="counter"), checkpointed=True)
    message = str(info.value)
    assert "state of component 'count' is stored (parallelism 2" in message
    assert 'topology.state.renames {"count": "<new id>"}' in message
    assert "statefulbolts state drop --component count" in message
    assert read_shape(kv(conf, shape_namespace(PREFIX), system=True)).components.keys() == {"count"}
    report = evolve(
        conf,
        PREFIX,
        wanted(keyed(2), component="counter"),
        checkpointed=True,
        allow_orphaned=True,
    )
    assert "count: stored, not in the topology" in report.lines[-1]
    shape = read_shape(kv(conf, shape_namespace(PREFIX), system=True))
    assert set(shape.components) == {"count", "counter"}  # still reported next time
    assert len(read_tasks(conf, "count")) == 2


def test_another_serializer_is_refused(conf: dict[str, Any]) -> None:
    leave(conf, 2, shape=keyed(2))
    changed = keyed(
        2,
        serializers=(
            ("keyClass", None),
            ("keySerializerClass", None),
            ("valueClass", "float"),
            ("valueSerializerClass", None),
        ),
    )
    with pytest.raises(StateEvolutionError, match=r"now asks for \{'valueClass': 'float'\}"):
        evolve(conf, PREFIX, wanted(changed), checkpointed=True)


# ---------------------------------------------------------------- state versions
class _CountsV2(StatefulBolt):
    state_version = 2

    def init_state(self, state: Any) -> None:
        self.state = state

    def execute(self, tup: Any) -> None:
        return None

    def migrate_state(self, key: Any, value: Any, from_version: int) -> Any:
        assert from_version == 1
        return key.upper(), {"n": value}


class _CountsV2Whole(_CountsV2):
    def migrate_states(self, items: Any, from_version: int) -> Any:
        total = 0
        for key, value in items:
            total += value
            yield key, value * 10
        yield "word-total", total


class _CountsV2NoHook(StatefulBolt):
    state_version = 2

    def init_state(self, state: Any) -> None:
        self.state = state

    def execute(self, tup: Any) -> None:
        return None


def test_a_higher_state_version_migrates_each_key(conf: dict[str, Any]) -> None:
    data = leave(conf, 2, shape=keyed(2))
    evolve(conf, PREFIX, wanted(keyed(3, state_version=2), bolt=_CountsV2()), checkpointed=True)
    assert_keyed(conf, 3, {k.upper(): {"n": v} for k, v in data.items()})


def test_a_whole_state_migration_sees_every_task(conf: dict[str, Any]) -> None:
    data = leave(conf, 2, shape=keyed(2))
    evolve(
        conf, PREFIX, wanted(keyed(2, state_version=2), bolt=_CountsV2Whole()), checkpointed=True
    )
    expected = {k: v * 10 for k, v in data.items()} | {"word-total": sum(data.values())}
    assert_keyed(conf, 2, expected)


def test_a_version_change_without_a_hook_or_backwards_is_refused(conf: dict[str, Any]) -> None:
    leave(conf, 2, shape=keyed(2, state_version=2))
    with pytest.raises(StateEvolutionError, match="declares 1, an older one"):
        evolve(conf, PREFIX, wanted(keyed(2, state_version=1)), checkpointed=True)
    with pytest.raises(StateEvolutionError, match="declares 3 without a migration: define"):
        evolve(
            conf,
            PREFIX,
            wanted(keyed(2, state_version=3), bolt=_CountsV2NoHook()),
            checkpointed=True,
        )


# ---------------------------------------------------------------- the checkpoint
def test_a_transaction_left_preparing_is_rolled_back_before_the_move(conf: dict[str, Any]) -> None:
    data = leave(conf, 2, shape=keyed(2), txid=4)
    for task in (0, 1):  # PREPARE(5) reached both tasks, then the driver died
        state = kv(conf, f"{PREFIX}count-{task}")
        state.put("uncommitted", task)
        state.prepare_commit(5)
    cp = kv(conf, f"{PREFIX}$checkpointspout-0", system=True)
    cp.put(TX_STATE_KEY, [5, "PREPARING"])
    cp.commit()
    evolve(conf, PREFIX, wanted(keyed(3)), checkpointed=True)
    assert_keyed(conf, 3, data)
    assert cp_state(conf) == [4, "COMMITTED"]
    assert txids(conf) == {(4, None)}


def test_a_transaction_left_committing_is_committed_before_the_move(conf: dict[str, Any]) -> None:
    data = leave(conf, 2, shape=keyed(2), txid=4)
    extra = {"word0": 1000, "fresh": 7}
    for task in (0, 1):
        state = kv(conf, f"{PREFIX}count-{task}")
        for key, value in extra.items():
            if owner(key, 2) == task:
                state.put(key, value)
        state.prepare_commit(5)
    kv(conf, f"{PREFIX}count-0").commit(5)  # one task committed before the driver died
    cp = kv(conf, f"{PREFIX}$checkpointspout-0", system=True)
    cp.put(TX_STATE_KEY, [5, "COMMITTING"])
    cp.commit()
    evolve(conf, PREFIX, wanted(keyed(1)), checkpointed=True)
    assert_keyed(conf, 1, {**data, **extra})
    assert cp_state(conf) == [5, "COMMITTED"]
    assert txids(conf) == {(5, None)}


def test_a_component_added_after_a_crash_while_preparing_gets_what_the_rollback_needs(
    conf: dict[str, Any],
) -> None:
    leave(conf, 2, shape=keyed(2), txid=4)
    for task in (0, 1):  # PREPARE(5) reached both tasks, then the driver died
        state = kv(conf, f"{PREFIX}count-{task}")
        state.put("uncommitted", task)
        state.prepare_commit(5)
    cp = kv(conf, f"{PREFIX}$checkpointspout-0", system=True)
    cp.put(TX_STATE_KEY, [5, "PREPARING"])
    cp.commit()
    shapes = {"count": keyed(2), "extra": keyed(1)}
    evolve(conf, PREFIX, Wanted(shapes), checkpointed=True)  # nothing moves: nothing settled
    assert cp_state(conf) == [5, "PREPARING"]
    added = kv(conf, f"{PREFIX}extra-0")
    assert added.stored_txids() == (4, None)  # committed as the old tasks are, not at 5
    check_stored_txids(added, Action.ROLLBACK, 5)  # the spout's recovery starts with it


def test_a_store_that_lost_a_task_stops_the_start(conf: dict[str, Any]) -> None:
    leave(conf, 2, shape=keyed(2))
    kv(conf, f"{PREFIX}count-1", system=True).replace_stored(None, (), None, {})
    with pytest.raises(StateLostError) as info:
        evolve(conf, PREFIX, wanted(keyed(2)), checkpointed=True)
    message = str(info.value)
    assert f"state '{PREFIX}count-1'" in message
    assert "holds nothing committed, but the checkpoint is at INITSTATE(4)" in message


def test_a_checkpoint_record_lost_beside_committed_tasks_stops_the_start(
    conf: dict[str, Any],
) -> None:
    leave(conf, 2, shape=keyed(2))
    kv(conf, f"{PREFIX}$checkpointspout-0", system=True).replace_stored(None, (), None, {})
    with pytest.raises(StateLostError, match="the checkpoint's record .* is gone"):
        evolve(conf, PREFIX, wanted(keyed(2)), checkpointed=True)


# ---------------------------------------------------------------- crashes in the middle
class _Crash(Exception):
    pass


class _CrashAt:
    """A fault plan whose driver kill raises instead of exiting (the process goes on)."""

    def __init__(self, point: KillPoint, step: int) -> None:
        self.point, self.step = point, step

    def on_driver(self, point: KillPoint, step: int) -> None:
        if point is self.point and step == self.step:
            raise _Crash(f"{point.value} {step}")


@pytest.mark.parametrize(
    ("point", "step"),
    [(KillPoint.EVOLVE_STAGED, 0), (KillPoint.EVOLVE_MID_SWAP, 0), (KillPoint.EVOLVE_MID_SWAP, 2)],
)
def test_a_start_after_a_crash_mid_change_finishes_it(
    conf: dict[str, Any], point: KillPoint, step: int
) -> None:
    data = leave(conf, 2, shape=keyed(2))
    with pytest.raises(_Crash):
        evolve(conf, PREFIX, wanted(keyed(4)), checkpointed=True, faults=_CrashAt(point, step))
    shape = read_shape(kv(conf, shape_namespace(PREFIX), system=True))
    assert shape.operation is not None and shape.operation["phase"] == "swapping"
    report = evolve(conf, PREFIX, wanted(keyed(4)), checkpointed=True)
    assert report.resumed
    assert_keyed(conf, 4, data)
    assert txids(conf) == {(4, None)}
    no_leftovers(conf)


def test_a_start_after_a_crash_while_staging_starts_the_change_again(conf: dict[str, Any]) -> None:
    data = leave(conf, 2, shape=keyed(2))
    staging = kv(conf, f"{PREFIX}$evolve/count-0", system=True)
    staging.put("half-written", 1)
    staging.commit()
    write_shape(
        kv(conf, shape_namespace(PREFIX), system=True),
        StoredShape({"count": keyed(2)}, {"phase": "staging"}),
    )
    evolve(conf, PREFIX, wanted(keyed(3)), checkpointed=True)
    assert_keyed(conf, 3, data)
    no_leftovers(conf)


# ---------------------------------------------------------------- transactional maps
TX_PREFIX = "$transactional/words/"


def _map(conf: dict[str, Any], component: str, task: int) -> KeyValueState:
    return kv(conf, f"{TX_PREFIX}{component}-{task}/default", system=True)


def test_committer_maps_move_with_their_txids_and_records(conf: dict[str, Any]) -> None:
    from statefulbolts.transactional import OpaqueMap, StateBackingMap

    words = WORDS[:60]
    for task in range(2):
        backing = StateBackingMap(_map(conf, "count", task))
        mine = [w for w in words if owner(w, 2) == task]
        OpaqueMap(backing).multi_update(7, mine, [lambda old: (old or 0) + 1] * len(mine))
    write_shape(kv(conf, shape_namespace(TX_PREFIX), system=True), StoredShape({"count": keyed(2)}))
    evolve(conf, TX_PREFIX, wanted(keyed(3)), checkpointed=False)
    seen: dict[str, Any] = {}
    records = {}
    for task in range(3):
        state = _map(conf, "count", task)
        for key, value in state:
            if key == "$record":
                records[task] = value
                continue
            assert owner(key[0], 3) == task
            seen[key[0]] = value
    assert seen == {w: [7, 1, None] for w in words}
    # Each new task's record lists the keys of txid 7 it now owns.
    for task, (txid, keys) in records.items():
        assert txid == 7 and sorted(keys) == sorted(w for w in words if owner(w, 3) == task)
    assert get_provider(conf).namespaces(conf, f"{TX_PREFIX}count-") == [
        f"{TX_PREFIX}count-{t}/default" for t in range(3)
    ]


@pytest.mark.parametrize(
    ("point", "step"), [(KillPoint.EVOLVE_STAGED, 0), (KillPoint.EVOLVE_MID_SWAP, 1)]
)
def test_a_crash_in_the_middle_of_migrating_legacy_state_is_finished_by_the_next_start(
    conf: dict[str, Any], point: KillPoint, step: int
) -> None:
    data = leave(conf, 2, place=lambda key, p: legacy_hash((key,)) % p)  # no shape record
    with pytest.raises(_Crash):
        evolve(conf, PREFIX, wanted(keyed(2)), checkpointed=True, faults=_CrashAt(point, step))
    report = evolve(conf, PREFIX, wanted(keyed(2)), checkpointed=True)
    assert report.resumed
    assert_keyed(conf, 2, data)
    assert txids(conf) == {(4, None)}
    no_leftovers(conf)
