"""The transactional coordinator and its meta store, driver-side only.

Covers section 8 items 1-7 and the fixes 9.2-9.6. No Spark: the coordinator is a pure machine
that returns commands; these tests play the driver and check every command it returns.
"""

from __future__ import annotations

import itertools
import json
import random
import uuid
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from providers import (
    STATE_PROVIDER_CONFIG_KEY,
    STATE_PROVIDER_KEY,
    InMemoryKeyValueState,
    InMemoryKeyValueStateProvider,
    KeyValueState,
    StateFactory,
    StateSerializationError,
)
from statefulbolts.errors import ConfigError, FailedException, TopologyError
from statefulbolts.transactional._attempt import TransactionAttempt
from statefulbolts.transactional._coordinator import (
    CoordinatorClosedError,
    StartBatch,
    StartCommit,
    TransactionalSpoutCoordinator,
    TransactionStatus,
    opaque_coordinator,
    partitioned_coordinator,
)
from statefulbolts.transactional._txstate import (
    RotatingTransactionalState,
    TransactionalStateError,
)

A = TransactionAttempt
PROCESSING = TransactionStatus.PROCESSING
PROCESSED = TransactionStatus.PROCESSED
COMMITTING = TransactionStatus.COMMITTING


def batch(txid: int, attempt_id: int, meta: Any, committed: int | None) -> StartBatch:
    return StartBatch(A(txid, attempt_id), meta, committed)


def commit(txid: int, attempt_id: int) -> StartCommit:
    return StartCommit(A(txid, attempt_id))


class UserCoordinator:
    """A scriptable user coordinator that records what the machine asks of it.

    ``meta`` is what a new txid gets (a callable ``(txid, prev) -> meta`` or a constant);
    ``ready`` is a bool or a list of answers consumed one per poll (then ``True``);
    ``fail_inits`` is how many next ``initialize_transaction`` calls raise ``FailedException``.
    """

    def __init__(self, meta: Any = 10, ready: bool | list[bool] = True) -> None:
        self.meta = meta
        self.ready = ready
        self.fail_inits = 0
        self.inits: list[tuple[int, Any]] = []
        self.polls = 0
        self.closes = 0

    def initialize_transaction(self, txid: int, prev_metadata: Any) -> Any:
        self.inits.append((txid, prev_metadata))
        if self.fail_inits:
            self.fail_inits -= 1
            raise FailedException(f"source not reachable for txid {txid}")
        return self.meta(txid, prev_metadata) if callable(self.meta) else self.meta

    def is_ready(self) -> bool:
        self.polls += 1
        if isinstance(self.ready, list):
            return self.ready.pop(0) if self.ready else True
        return self.ready

    def close(self) -> None:
        self.closes += 1


def offsets(txid: int, prev: Any) -> dict[str, int]:
    """A meta like a real spout's: where the batch starts and how much it takes."""
    start = 0 if prev is None else prev["start"] + prev["n"]
    return {"start": start, "n": 3}


MEMORY_PREFIX = "test-txcoord"


def memory_state(name: str = "coord") -> KeyValueState:
    """An in-memory state; states made with the same name share their data, as after a restart."""
    state = StateFactory.get_state(f"{MEMORY_PREFIX}/{name}", {})
    assert isinstance(state, KeyValueState)
    return state


@pytest.fixture(autouse=True)
def _forget_memory_states() -> Iterator[None]:
    yield
    InMemoryKeyValueStateProvider.drop(MEMORY_PREFIX)


def make(
    user: UserCoordinator | None = None,
    state: KeyValueState | None = None,
    max_pending: int | None = None,
) -> tuple[TransactionalSpoutCoordinator, UserCoordinator]:
    user = user or UserCoordinator()
    coord = TransactionalSpoutCoordinator(
        user, state if state is not None else memory_state(), max_pending=max_pending
    )
    return coord, user


def statuses(coord: TransactionalSpoutCoordinator) -> dict[int, tuple[str, TransactionStatus]]:
    return {t: (str(e.attempt), e.status) for t, e in coord.active.items()}


# --- section 8 item 1: Storm's coordinator test, exactly ------------------------------------
def test_storms_coordinator_sequence() -> None:
    coord, user = make(UserCoordinator(meta=10), max_pending=4)

    # 1. One poll starts 1-4 with meta 10; a second starts nothing.
    assert coord.sync() == [
        batch(1, 1, 10, None),
        batch(2, 2, 10, None),
        batch(3, 3, 10, None),
        batch(4, 4, 10, None),
    ]
    assert coord.sync() == []
    # 2. fail(2) resends 2, 3 and 4 with new attempt ids.
    assert coord.fail(A(2, 2)) == [
        batch(2, 5, 10, None),
        batch(3, 6, 10, None),
        batch(4, 7, 10, None),
    ]
    # 3. ack(new 2) sends nothing; ack(1) sends commit(1).
    assert coord.ack(A(2, 5)) == []
    assert coord.ack(A(1, 1)) == [commit(1, 1)]
    # 4. With meta 12, ack(commit 1) sends commit(2), then batch(5, 12).
    user.meta = 12
    assert coord.ack(A(1, 1)) == [commit(2, 5), batch(5, 8, 12, 1)]
    # 5. Not ready: ack(commit 2) sends nothing.
    user.ready = False
    assert coord.ack(A(2, 5)) == []
    # 6. fail(3) resends 3, 4, 5 with metas 10, 10, 12 (stored: is_ready is not asked).
    assert coord.fail(A(3, 6)) == [
        batch(3, 9, 10, 2),
        batch(4, 10, 10, 2),
        batch(5, 11, 12, 2),
    ]
    # 7. Ready again: a poll sends batch(6, 12).
    user.ready = True
    assert coord.sync() == [batch(6, 12, 12, 2)]
    # 8. ack(3) sends commit(3); ack(4) sends nothing.
    assert coord.ack(A(3, 9)) == [commit(3, 9)]
    assert coord.ack(A(4, 10)) == []
    # 9. fail(commit 3) resends 3-6; ack(3) sends commit(3); ack(4) and a poll send nothing.
    assert coord.fail(A(3, 9)) == [
        batch(3, 13, 10, 2),
        batch(4, 14, 10, 2),
        batch(5, 15, 12, 2),
        batch(6, 16, 12, 2),
    ]
    assert coord.ack(A(3, 13)) == [commit(3, 13)]
    assert coord.ack(A(4, 14)) == []
    assert coord.sync() == []
    # 10. ack(commit 3) sends commit(4) and batch(7, 12).
    assert coord.ack(A(3, 13)) == [commit(4, 14), batch(7, 17, 12, 3)]

    assert user.inits == [(1, None), (2, 10), (3, 10), (4, 10), (5, 10), (6, 12), (7, 12)]
    assert statuses(coord) == {
        4: ("4:14", COMMITTING),
        5: ("5:15", PROCESSING),
        6: ("6:16", PROCESSING),
        7: ("7:17", PROCESSING),
    }


# --- section 8 item 2: pipelining limits ----------------------------------------------------
def drive_in_order(
    coord: TransactionalSpoutCoordinator, steps: int
) -> list[StartBatch | StartCommit]:
    """Execute each command as it comes and ack it; return the commands executed."""
    queue = deque(coord.sync())
    executed: list[StartBatch | StartCommit] = []
    while queue and len(executed) < steps:
        command = queue.popleft()
        executed.append(command)
        queue.extend(coord.ack(command.attempt))
        assert len(coord.active) <= coord.max_pending
    return executed


def test_unset_pending_is_strictly_sequential() -> None:
    coord, _ = make(UserCoordinator(meta=offsets))
    assert coord.max_pending == 1
    assert drive_in_order(coord, 6) == [
        batch(1, 1, {"start": 0, "n": 3}, None),
        commit(1, 1),
        batch(2, 2, {"start": 3, "n": 3}, 1),
        commit(2, 2),
        batch(3, 3, {"start": 6, "n": 3}, 2),
        commit(3, 3),
    ]


def test_committing_txid_counts_against_max_pending() -> None:
    coord, _ = make(max_pending=2)
    assert coord.sync() == [batch(1, 1, 10, None), batch(2, 2, 10, None)]
    assert coord.ack(A(1, 1)) == [commit(1, 1)]
    # 1 COMMITTING and 2 PROCESSED fill the window: no batch 3 yet.
    assert coord.ack(A(2, 2)) == []
    assert coord.sync() == []
    assert statuses(coord) == {1: ("1:1", COMMITTING), 2: ("2:2", PROCESSED)}
    assert coord.ack(A(1, 1)) == [commit(2, 2), batch(3, 3, 10, 1)]


def test_random_acks_and_fails_keep_the_protocol() -> None:
    """Seeded chaos: the window bound, commits in order without gaps, one meta per txid."""
    rng = random.Random(20240611)
    user = UserCoordinator(meta=offsets, ready=[rng.random() < 0.8 for _ in range(2000)])
    coord, _ = make(user, max_pending=3)
    in_flight = list(coord.sync())
    committed: list[int] = []
    metas: dict[int, Any] = {}
    for _ in range(1500):
        if not in_flight:
            in_flight.extend(coord.sync())
            continue
        command = in_flight.pop(rng.randrange(len(in_flight)))
        txid = command.attempt.transaction_id
        if isinstance(command, StartBatch):
            # A replay gets the very meta its txid was first started with.
            assert metas.setdefault(txid, command.metadata) == command.metadata
        if rng.random() < 0.15:
            in_flight.extend(coord.fail(command.attempt))
        else:
            entry = coord.active.get(txid)
            commit_done = (
                isinstance(command, StartCommit)
                and entry is not None
                and entry.attempt == command.attempt
                and entry.status is COMMITTING
            )
            in_flight.extend(coord.ack(command.attempt))
            if commit_done:
                committed.append(txid)
        assert len(coord.active) <= 3
        assert all(coord.curr <= t < coord.curr + 3 for t in coord.active)
    assert len(committed) > 50
    assert committed == list(range(1, len(committed) + 1))
    assert coord.curr == len(committed) + 1
    # initialize_transaction ran once per txid, each from its predecessor's meta.
    assert [t for t, _ in user.inits] == list(range(1, len(user.inits) + 1))
    for txid, meta in metas.items():
        assert meta == {"start": 3 * (txid - 1), "n": 3}


# --- section 8 item 3: initialize_transaction ------------------------------------------------
def test_initialize_transaction_once_per_txid_from_the_previous_meta() -> None:
    coord, user = make(UserCoordinator(meta=lambda txid, prev: txid * 10), max_pending=3)
    assert coord.sync() == [batch(1, 1, 10, None), batch(2, 2, 20, None), batch(3, 3, 30, None)]
    # Replays (a fail, and the fail of a commit) reuse the stored metas.
    assert coord.fail(A(1, 1)) == [
        batch(1, 4, 10, None),
        batch(2, 5, 20, None),
        batch(3, 6, 30, None),
    ]
    assert coord.ack(A(1, 4)) == [commit(1, 4)]
    assert coord.fail(A(1, 4)) == [
        batch(1, 7, 10, None),
        batch(2, 8, 20, None),
        batch(3, 9, 30, None),
    ]
    assert user.inits == [(1, None), (2, 10), (3, 20)]


def test_failed_initialize_transaction_delays_the_txid_without_losing_it() -> None:
    coord, user = make(UserCoordinator(meta=lambda txid, prev: txid * 10), max_pending=3)
    user.fail_inits = 1
    assert coord.sync() == []
    assert coord.active == {}
    assert coord.sync() == [batch(1, 1, 10, None), batch(2, 2, 20, None), batch(3, 3, 30, None)]
    assert coord.ack(A(1, 1)) == [commit(1, 1)]
    # txid 4's first try fails in the round the commit ack of 1 opens; the next poll starts it.
    user.fail_inits = 1
    assert coord.ack(A(1, 1)) == []
    assert coord.sync() == [batch(4, 4, 40, 1)]
    assert user.inits == [(1, None), (1, None), (2, 10), (3, 20), (4, 30), (4, 30)]


def test_failed_initialize_transaction_ends_the_round_leaving_no_gap() -> None:
    refused: list[int] = []

    def meta(txid: int, prev: Any) -> int:
        if txid == 2 and not refused:
            refused.append(txid)
            raise FailedException("not now")
        return txid * 10

    coord, user = make(UserCoordinator(meta=meta), max_pending=3)
    assert coord.sync() == [batch(1, 1, 10, None)]
    assert coord.sync() == [batch(2, 2, 20, None), batch(3, 3, 30, None)]
    assert user.inits == [(1, None), (2, 10), (2, 10), (3, 20)]


def _raise_failed() -> Any:
    raise FailedException("not now")


# --- section 8 item 4 / fix 9.4: is_ready stops the round -------------------------------------
def test_not_ready_for_t_but_ready_for_t_plus_1_leaves_no_gap() -> None:
    user = UserCoordinator(meta=lambda txid, prev: txid * 10, ready=[True, False, True])
    coord, _ = make(user, max_pending=3)
    # Storm asked again for txid 3, got True, and broke the strict order; the round stops at 2.
    assert coord.sync() == [batch(1, 1, 10, None)]
    assert user.polls == 2
    assert coord.sync() == [batch(2, 2, 20, None), batch(3, 3, 30, None)]
    assert user.inits == [(1, None), (2, 10), (3, 20)]
    assert coord.metas.txids() == [1, 2, 3]


# --- section 8 item 5 / fix 9.2: the commit ack ------------------------------------------------
class CountingState(InMemoryKeyValueState):
    """An in-memory state that counts its commits and can be told to fail the next one."""

    def __init__(self, namespace: str) -> None:
        super().__init__(namespace)
        self.commits = 0
        self.fail_next_commit = False

    def commit(self, txid: int | None = None) -> None:
        if self.fail_next_commit:
            self.fail_next_commit = False
            raise OSError("disk full")
        self.commits += 1
        super().commit(txid)


def test_commit_ack_advances_currtx_and_cleans_older_metas_in_one_write() -> None:
    state = CountingState("test/commit-ack")
    coord, user = make(UserCoordinator(meta=lambda txid, prev: txid * 10), state, max_pending=3)
    coord.sync()
    for txid, attempt_id in ((1, 1), (2, 2), (3, 3)):
        coord.ack(A(txid, attempt_id))
    assert coord.ack(A(1, 1)) == [commit(2, 2), batch(4, 4, 40, 1)]
    user.ready = False  # so that the commit ack of 2 is the only write below
    writes_before = state.commits
    assert coord.ack(A(2, 2)) == [commit(3, 3)]
    assert state.commits == writes_before + 1
    assert dict(state) == {"currtx": 3, "meta/2": [20], "meta/3": [30], "meta/4": [40]}
    assert coord.curr == 3


def test_a_failed_commit_ack_write_changes_nothing() -> None:
    state = CountingState("test/commit-ack-fails")
    coord, _ = make(state=state, max_pending=2)
    coord.sync()
    coord.ack(A(1, 1))
    coord.ack(A(2, 2))
    assert coord.ack(A(1, 1)) == [commit(2, 2), batch(3, 3, 10, 1)]
    before = dict(state)
    state.fail_next_commit = True
    with pytest.raises(OSError, match="disk full"):
        coord.ack(A(2, 2))
    assert dict(state) == before
    assert coord.curr == 2
    assert statuses(coord)[2] == ("2:2", COMMITTING)
    # The retried ack applies once, and nothing of the failed write rides along later.
    assert coord.ack(A(2, 2)) == [batch(4, 4, 10, 2)]
    assert dict(state) == {"currtx": 3, "meta/2": [10], "meta/3": [10], "meta/4": [10]}


# --- section 8 item 6: restart ----------------------------------------------------------------
class Backend:
    """A provider under test: its config, and states of one namespace from it."""

    def __init__(self, provider: str, config: dict[str, Any]) -> None:
        self.provider = provider
        self.config = config
        self.prefix = f"txcoord-{uuid.uuid4().hex[:8]}"

    def state(self, name: str) -> KeyValueState:
        conf = {
            STATE_PROVIDER_KEY: self.provider,
            STATE_PROVIDER_CONFIG_KEY: json.dumps(self.config),
        }
        state = StateFactory.get_state(f"{self.prefix}/{name}", conf)
        assert isinstance(state, KeyValueState)
        return state


@pytest.fixture(
    params=["memory", "fakeredis", pytest.param("redis", marks=pytest.mark.redis), "sqlite"]
)
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    kind = request.param
    if kind == "memory":
        b = Backend("providers.memory.InMemoryKeyValueStateProvider", {})
        yield b
        InMemoryKeyValueStateProvider.drop(b.prefix)
    elif kind == "fakeredis":
        import fakeredis

        from providers.redis import override_client

        with override_client(fakeredis.FakeRedis(server=fakeredis.FakeServer())):
            yield Backend("providers.redis.RedisKeyValueStateProvider", {})
    elif kind == "redis":
        server = request.getfixturevalue("redis_db")
        pool = {"host": server.host, "port": server.port}
        yield Backend("providers.redis.RedisKeyValueStateProvider", {"jedisPoolConfig": pool})
        from providers.redis import reset_clients

        reset_clients()
    else:
        yield Backend("sqlite_state.SqliteKeyValueStateProvider", {"path": str(tmp_path / "s.db")})
        from providers import load_module

        sqlite_state = load_module("sqlite_state")

        sqlite_state.close_connections()


def test_restart_resumes_at_currtx_and_replays_stored_txids(backend: Backend) -> None:
    first = UserCoordinator(meta=offsets)
    coord = TransactionalSpoutCoordinator(first, backend.state("coordinator"), max_pending=3)
    assert coord.sync() == [
        batch(1, 1, {"start": 0, "n": 3}, None),
        batch(2, 2, {"start": 3, "n": 3}, None),
        batch(3, 3, {"start": 6, "n": 3}, None),
    ]
    assert coord.ack(A(1, 1)) == [commit(1, 1)]
    assert coord.ack(A(1, 1)) == [batch(4, 4, {"start": 9, "n": 3}, 1)]
    assert coord.ack(A(2, 2)) == [commit(2, 2)]
    # The driver dies with commit 2 in flight; a new one opens the same namespace.
    again = UserCoordinator(meta=offsets, ready=False)
    coord = TransactionalSpoutCoordinator(again, backend.state("coordinator"), max_pending=3)
    assert coord.curr == 2
    assert coord.sync() == [
        batch(2, 1, {"start": 3, "n": 3}, 1),
        batch(3, 2, {"start": 6, "n": 3}, 1),
        batch(4, 3, {"start": 9, "n": 3}, 1),
    ]
    assert (again.inits, again.polls) == ([], 0)
    assert coord.ack(A(2, 1)) == [commit(2, 1)]
    again.ready = True
    assert coord.ack(A(2, 1)) == [batch(5, 4, {"start": 12, "n": 3}, 2)]
    assert again.inits == [(5, {"start": 9, "n": 3})]
    assert dict(backend.state("coordinator")) == {
        "currtx": 3,
        "meta/2": [{"start": 3, "n": 3}],
        "meta/3": [{"start": 6, "n": 3}],
        "meta/4": [{"start": 9, "n": 3}],
        "meta/5": [{"start": 12, "n": 3}],
    }


def test_a_new_namespace_starts_at_txid_1(backend: Backend) -> None:
    used = TransactionalSpoutCoordinator(UserCoordinator(), backend.state("used"), max_pending=1)
    used.sync()
    used.ack(A(1, 1))
    used.ack(A(1, 1))
    fresh_user = UserCoordinator(meta=7)
    fresh = TransactionalSpoutCoordinator(fresh_user, backend.state("fresh"), max_pending=1)
    assert fresh.curr == 1
    assert fresh.sync() == [batch(1, 1, 7, None)]
    assert fresh_user.inits == [(1, None)]


# --- fixes 9.3, 9.5, 9.6 ----------------------------------------------------------------------
def test_attempt_ids_come_from_a_counter_and_can_be_injected() -> None:
    coord, _ = make(max_pending=2)
    assert [c.attempt for c in coord.sync()] == [A(1, 1), A(2, 2)]
    assert [c.attempt for c in coord.fail(A(1, 1))] == [A(1, 3), A(2, 4)]
    injected = TransactionalSpoutCoordinator(
        UserCoordinator(), memory_state("injected"), max_pending=2, attempt_ids=itertools.count(100)
    )
    assert [c.attempt for c in injected.sync()] == [A(1, 100), A(2, 101)]


def test_a_stale_fail_is_ignored() -> None:
    coord, _ = make(max_pending=2)
    coord.sync()
    assert coord.fail(A(1, 1)) == [batch(1, 3, 10, None), batch(2, 4, 10, None)]
    # Storm dropped the live 1:3 here, orphaning it; the stale report changes nothing.
    assert coord.fail(A(1, 1)) == []
    assert coord.fail(A(2, 2)) == []
    assert statuses(coord) == {1: ("1:3", PROCESSING), 2: ("2:4", PROCESSING)}
    assert coord.ack(A(1, 3)) == [commit(1, 3)]


def test_stale_and_duplicate_acks_are_ignored() -> None:
    coord, _ = make(max_pending=2)
    coord.sync()
    coord.fail(A(2, 2))  # 2 replays as 2:3
    assert coord.ack(A(2, 2)) == []
    assert coord.ack(A(5, 9)) == []
    assert coord.ack(A(2, 3)) == []
    assert coord.ack(A(2, 3)) == []  # a duplicate: 2 stays PROCESSED, it is not curr
    assert statuses(coord) == {1: ("1:1", PROCESSING), 2: ("2:3", PROCESSED)}


def test_a_fail_drops_later_txids_but_keeps_earlier_ones() -> None:
    coord, _ = make(max_pending=3)
    coord.sync()
    coord.ack(A(1, 1))  # commit 1 starts
    assert coord.fail(A(2, 2)) == [batch(2, 4, 10, None), batch(3, 5, 10, None)]
    assert statuses(coord) == {
        1: ("1:1", COMMITTING),
        2: ("2:4", PROCESSING),
        3: ("3:5", PROCESSING),
    }


def test_close_closes_the_user_coordinator_once() -> None:
    coord, user = make()
    coord.sync()
    coord.close()
    coord.close()
    assert user.closes == 1
    with pytest.raises(CoordinatorClosedError, match="sync after close"):
        coord.sync()
    with pytest.raises(CoordinatorClosedError, match="ack after close"):
        coord.ack(A(1, 1))


# --- validation -------------------------------------------------------------------------------
@pytest.mark.parametrize("bad", [0, -1, True, "3", 2.0])
def test_max_pending_must_be_a_positive_int(bad: Any) -> None:
    with pytest.raises(ConfigError, match=r"topology\.max\.spout\.pending") as info:
        make(max_pending=bad)
    assert repr(bad) in str(info.value)


def test_a_user_coordinator_without_is_ready_is_refused() -> None:
    class NoReady:
        def initialize_transaction(self, txid: int, prev: Any) -> Any:
            return 1

    with pytest.raises(TopologyError, match=r"NoReady has no method is_ready, close"):
        TransactionalSpoutCoordinator(NoReady(), memory_state())  # type: ignore[arg-type]


def test_a_corrupt_currtx_is_refused() -> None:
    state = memory_state("corrupt")
    state.put("currtx", "seven")
    state.commit()
    with pytest.raises(TransactionalStateError, match=r"'currtx' holds 'seven'"):
        make(state=state)


def test_an_unstorable_meta_names_the_user_class() -> None:
    coord, _ = make(UserCoordinator(meta=object()))
    with pytest.raises(StateSerializationError, match=r"UserCoordinator\.initialize_transaction"):
        coord.sync()
    assert coord.active == {}
    assert coord.metas.txids() == []


# --- the adapters -----------------------------------------------------------------------------
class Partitioned:
    def __init__(self) -> None:
        self.partitions = 2
        self.ready = True
        self.closed = False

    def num_partitions(self) -> int:
        return self.partitions

    def is_ready(self) -> bool:
        return self.ready

    def close(self) -> None:
        self.closed = True


def test_partitioned_meta_is_the_partition_count_when_first_started() -> None:
    spout = Partitioned()
    coord = TransactionalSpoutCoordinator(
        partitioned_coordinator(spout), memory_state("partitioned"), max_pending=2
    )
    assert coord.sync() == [batch(1, 1, 2, None), batch(2, 2, 2, None)]
    spout.partitions = 3
    assert coord.fail(A(1, 1)) == [batch(1, 3, 2, None), batch(2, 4, 2, None)]
    coord.ack(A(1, 3))
    assert coord.ack(A(1, 3)) == [batch(3, 5, 3, 1)]
    coord.close()
    assert spout.closed


def test_opaque_meta_is_none_and_stored_so_replays_skip_is_ready() -> None:
    spout = Partitioned()
    coord = TransactionalSpoutCoordinator(
        opaque_coordinator(spout), memory_state("opaque"), max_pending=2
    )
    assert coord.sync() == [batch(1, 1, None, None), batch(2, 2, None, None)]
    spout.ready = False
    assert coord.fail(A(1, 1)) == [batch(1, 3, None, None), batch(2, 4, None, None)]
    assert 1 in coord.metas and coord.metas.get(1, "absent") is None
    coord.close()
    assert spout.closed


# --- section 8 item 7: the meta store ----------------------------------------------------------
def const(value: Any) -> Any:
    return lambda txid, prev: value


def refuse(txid: int, prev: Any) -> Any:
    raise AssertionError(f"the initializer must not run for txid {txid}")


def test_storms_meta_store_test(backend: Backend) -> None:
    strict = RotatingTransactionalState(backend.state("strict"), strict=True)
    assert strict.get_or_init(1, const(10)) == 10
    assert strict.get_or_init(2, const(10)) == 10
    assert strict.get_or_init(3, const(20)) == 20
    assert strict.get_or_init(1, const(20)) == 10
    with pytest.raises(TransactionalStateError, match=r"txid 5 .*txid 4 has none.*\[1, 2, 3\]"):
        strict.get_or_init(5, const(20))
    assert strict.get_or_init(4, const(20)) == 20
    strict.cleanup_before(3)
    assert strict.txids() == [3, 4]
    reopened = RotatingTransactionalState(backend.state("strict"), strict=True)
    assert [(t, reopened.get(t)) for t in reopened.txids()] == [(3, 20), (4, 20)]

    loose = RotatingTransactionalState(backend.state("loose"), strict=False)
    assert loose.get_or_init(20, const(10)) == 10
    assert loose.get_or_init(12, refuse) is None
    assert loose.get_or_init(19, refuse) is None
    reopened = RotatingTransactionalState(backend.state("loose"), strict=False)
    assert reopened.txids() == [12, 19, 20]
    assert [reopened.get(t, "absent") for t in (11, 12, 19, 20)] == ["absent", None, None, 10]


def test_strict_store_starts_only_at_the_first_txid() -> None:
    store = RotatingTransactionalState(memory_state("first"), strict=True)
    with pytest.raises(TransactionalStateError, match=r"txid 2 .*only txid 1 may start"):
        store.get_or_init(2, refuse)
    assert store.txids() == []
    later = RotatingTransactionalState(memory_state("first-7"), strict=True, first_txid=7)
    assert later.get_or_init(7, const("x")) == "x"


def test_strict_store_refuses_a_txid_below_stored_ones() -> None:
    store = RotatingTransactionalState(memory_state("below"), strict=True)
    store.override(5, "five")
    with pytest.raises(TransactionalStateError, match=r"txid 3 .*later txids \[5\]"):
        store.get_or_init(3, refuse)


def test_non_strict_initializer_gets_the_highest_meta_below() -> None:
    store = RotatingTransactionalState(memory_state("below-loose"), strict=False)
    store.override(2, "two")
    seen: list[tuple[int, Any]] = []

    def nine(txid: int, prev: Any) -> str:
        seen.append((txid, prev))
        return "nine"

    assert store.get_or_init(9, nine) == "nine"
    assert seen == [(9, "two")]
    assert (store.latest_before(9), store.latest_before(2, "none")) == ("two", "none")


def test_stores_with_prefixes_share_a_namespace() -> None:
    state = memory_state("shared")
    state.put("currtx", 4)
    state.put("meta/notatxid", 1)
    state.commit()
    a = RotatingTransactionalState(state, strict=False, prefix="a/")
    b = RotatingTransactionalState(state, strict=False, prefix="b/")
    a.get_or_init(1, const("A"))
    b.get_or_init(1, const("B"))
    b.get_or_init(2, const("B2"))
    a.cleanup_before(2)
    again = memory_state("shared")
    assert dict(again) == {"currtx": 4, "meta/notatxid": 1, "b/1": ["B"], "b/2": ["B2"]}
    assert RotatingTransactionalState(again, strict=False, prefix="b/").txids() == [1, 2]


def test_override_remove_and_stored_none() -> None:
    store = RotatingTransactionalState(memory_state("override"), strict=True)
    store.get_or_init(1, const(None))
    assert 1 in store and store.get(1, "absent") is None
    store.override(1, [1, 2])
    store.remove(1)
    store.remove(1)
    assert 1 not in store
    assert dict(memory_state("override")) == {}


def test_a_failing_initializer_stores_nothing() -> None:
    store = RotatingTransactionalState(memory_state("init-fails"), strict=True)
    with pytest.raises(FailedException):
        store.get_or_init(1, lambda t, p: _raise_failed())
    assert store.txids() == []
    assert store.get_or_init(1, const(3)) == 3


def test_an_unstorable_meta_leaves_nothing_pending() -> None:
    state = memory_state("unstorable")
    store = RotatingTransactionalState(state, strict=False)
    store.get_or_init(1, const(1))
    with pytest.raises(StateSerializationError):
        store.override(2, {"bad": object()})
    store.override(3, 3)
    assert dict(memory_state("unstorable")) == {"meta/1": [1], "meta/3": [3]}


def test_cleanup_refuses_extra_keys_that_look_like_metas() -> None:
    store = RotatingTransactionalState(memory_state("collide"), strict=True)
    with pytest.raises(TransactionalStateError, match=r"also_put key 'meta/4'"):
        store.cleanup_before(3, also_put={"meta/4": 1})


def test_a_value_that_is_not_a_wrapped_meta_is_refused() -> None:
    state = memory_state("not-ours")
    state.put("meta/3", 30)
    state.commit()
    with pytest.raises(TransactionalStateError, match=r"key 'meta/3' holds 30"):
        RotatingTransactionalState(state, strict=True)
