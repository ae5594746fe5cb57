"""CheckpointSpout: the state machine of docs/protocol/checkpoint.md, without Spark."""

from __future__ import annotations

import uuid

import pytest

from checkpoint import TX_STATE_KEY, CheckpointSpout, CheckPointState, TxPhase
from providers import InMemoryKeyValueState, InMemoryKeyValueStateProvider
from statefulbolts import CHECKPOINT_COMPONENT_ID, CHECKPOINT_STREAM_ID, Fields
from statefulbolts.components import OutputFieldsDeclarer
from statefulbolts.context import TopologyContext
from statefulbolts.errors import CheckpointError, ConfigError
from statefulbolts.testing import ManualClock, RecordingSpoutCollector, make_context

INTERVAL_KEY = "topology.state.checkpoint.interval.ms"


class Harness:
    """A spout opened with ``open_with`` on a real in-memory state, and short step helpers."""

    def __init__(
        self,
        interval_ms: float = 0,
        state: InMemoryKeyValueState | None = None,
        clock: ManualClock | None = None,
    ) -> None:
        self.clock = clock or ManualClock(10_000)
        self.state = state if state is not None else InMemoryKeyValueState("t/$checkpointspout-0")
        self.out = RecordingSpoutCollector()
        self.spout = CheckpointSpout(self.clock)
        self.spout.open_with(self.out, interval_ms, self.state)

    def n(self, advance_ms: float = 1) -> list[tuple[int, str]]:
        """``next_tuple`` after moving the clock (interval 0 still needs 1 ms: the test is >)."""
        self.clock.advance(advance_ms)
        self.spout.next_tuple()
        return [tuple(e.values) for e in self.out.take()]

    def saved(self) -> CheckPointState:
        return CheckPointState.from_value(self.state.get(TX_STATE_KEY))


def saved_state(txid: int, phase: TxPhase) -> InMemoryKeyValueState:
    state = InMemoryKeyValueState("t/$checkpointspout-0")
    state.put(TX_STATE_KEY, CheckPointState(txid, phase).to_value())
    state.commit()
    return state


def test_emits_on_checkpoint_stream_with_txid_as_message_id():
    h = Harness()
    h.spout.next_tuple()
    (emit,) = h.out.take()
    assert emit.stream == CHECKPOINT_STREAM_ID
    assert emit.values == [-1, "INITSTATE"]
    assert emit.message_id == -1


def test_declares_checkpoint_stream_with_txid_and_action():
    declarer = OutputFieldsDeclarer()
    CheckpointSpout().declare_output_fields(declarer)
    assert declarer.streams == {CHECKPOINT_STREAM_ID: Fields("txid", "action")}


def test_fresh_start_saves_committed_minus_one():
    h = Harness()
    assert h.saved() == CheckPointState(-1, TxPhase.COMMITTED)
    assert h.spout.recovering is True


def test_fresh_start_sequence_initstate_prepare_commit_prepare():
    h = Harness()
    seen = []
    for _ in range(7):
        (emitted,) = h.n()
        seen.append(emitted)
        h.spout.ack(emitted[0])
    assert seen == [
        (-1, "INITSTATE"),
        (0, "PREPARE"),
        (0, "COMMIT"),
        (1, "PREPARE"),
        (1, "COMMIT"),
        (2, "PREPARE"),
        (2, "COMMIT"),
    ]
    assert h.saved() == CheckPointState(2, TxPhase.COMMITTED)


def test_has_checkpointed_turns_true_with_the_first_prepare_only():
    h = Harness()
    assert h.spout.has_checkpointed is False
    (initstate,) = h.n()
    h.spout.ack(initstate[0])
    assert h.spout.has_checkpointed is False  # recovery actions are not checkpoints
    assert h.n() == [(0, "PREPARE")]
    assert h.spout.has_checkpointed is True


def test_storm_prepare_with_fail_trace_step_by_step():
    """Storm's testPrepareWithFail, interval 0, one row per step."""
    h = Harness(interval_ms=0)
    emits: list[tuple[int, str]] = []

    def n(expected):
        got = h.n()
        emits.extend(got)
        assert got == expected

    n([(-1, "INITSTATE")])  # 1
    h.spout.ack(-1)  # 2: recovery done, nothing saved
    assert h.spout.recovering is False
    assert h.saved() == CheckPointState(-1, TxPhase.COMMITTED)
    n([(0, "PREPARE")])  # 3
    assert h.saved() == CheckPointState(0, TxPhase.PREPARING)
    h.spout.ack(0)  # 4
    assert h.saved() == CheckPointState(0, TxPhase.COMMITTING)
    n([(0, "COMMIT")])  # 5
    assert h.saved() == CheckPointState(0, TxPhase.COMMITTING)
    h.spout.ack(0)  # 6
    assert h.saved() == CheckPointState(0, TxPhase.COMMITTED)
    n([(1, "PREPARE")])  # 7
    assert h.saved() == CheckPointState(1, TxPhase.PREPARING)
    h.spout.fail(1)  # 8
    assert h.spout.recovering is True
    n([(1, "ROLLBACK")])  # 9
    h.spout.fail(1)  # 10
    n([(1, "ROLLBACK")])  # 11
    assert h.saved() == CheckPointState(1, TxPhase.PREPARING)
    h.spout.ack(1)  # 12
    assert h.saved() == CheckPointState(0, TxPhase.COMMITTED)
    n([(0, "INITSTATE")])  # 13
    h.spout.ack(0)  # 14: recovery done
    assert h.spout.recovering is False
    n([(1, "PREPARE")])  # 15: txid 1 is reused
    assert h.saved() == CheckPointState(1, TxPhase.PREPARING)
    assert len(emits) == 8


def test_nothing_is_reemitted_while_an_action_is_in_flight():
    h = Harness()
    assert h.n() == [(-1, "INITSTATE")]
    assert h.n(5_000) == []  # recovery step in progress
    h.spout.ack(-1)
    assert h.n() == [(0, "PREPARE")]
    assert h.spout.in_progress is True
    assert h.n(5_000) == []  # checkpoint step in progress
    assert h.spout.due() is False


def test_recovery_from_preparing_rolls_back_then_reuses_the_txid():
    h = Harness(state=saved_state(5, TxPhase.PREPARING))
    assert h.n() == [(5, "ROLLBACK")]
    h.spout.ack(5)
    assert h.saved() == CheckPointState(4, TxPhase.COMMITTED)
    assert h.n() == [(4, "INITSTATE")]
    h.spout.ack(4)
    assert h.spout.recovering is False
    assert h.n() == [(5, "PREPARE")]
    assert h.saved() == CheckPointState(5, TxPhase.PREPARING)


def test_recovery_from_committing_rolls_forward():
    h = Harness(state=saved_state(7, TxPhase.COMMITTING))
    assert h.n() == [(7, "COMMIT")]
    h.spout.ack(7)
    assert h.saved() == CheckPointState(7, TxPhase.COMMITTED)
    assert h.n() == [(7, "INITSTATE")]
    h.spout.ack(7)
    assert h.n() == [(8, "PREPARE")]
    assert h.saved() == CheckPointState(8, TxPhase.PREPARING)


def test_recovery_from_committed_sends_initstate_then_next_txid():
    h = Harness(state=saved_state(3, TxPhase.COMMITTED))
    assert h.n() == [(3, "INITSTATE")]
    h.spout.ack(3)
    assert h.saved() == CheckPointState(3, TxPhase.COMMITTED)
    assert h.n() == [(4, "PREPARE")]


def test_failed_commit_is_retried_then_initstate():
    h = Harness(state=saved_state(2, TxPhase.COMMITTED))
    for expected in [(2, "INITSTATE"), (3, "PREPARE")]:
        assert h.n() == [expected]
        h.spout.ack(expected[0])
    assert h.n() == [(3, "COMMIT")]
    h.spout.fail(3)
    assert h.n() == [(3, "COMMIT")]  # roll forward, same txid
    h.spout.ack(3)
    assert h.saved() == CheckPointState(3, TxPhase.COMMITTED)
    assert h.n() == [(3, "INITSTATE")]
    h.spout.ack(3)
    assert h.n() == [(4, "PREPARE")]


def test_interval_counts_from_the_start_of_the_previous_prepare_strictly():
    clock = ManualClock(0)
    h = Harness(interval_ms=1000, clock=clock)
    assert h.n(0) == [(-1, "INITSTATE")]
    h.spout.ack(-1)
    # The first PREPARE goes out at once after recovery (no previous checkpoint).
    assert h.n(0) == [(0, "PREPARE")]  # t = 0
    clock.advance(600)
    h.spout.ack(0)
    # COMMIT does not wait for the interval.
    assert h.n(0) == [(0, "COMMIT")]  # t = 600
    clock.advance(300)
    h.spout.ack(0)  # COMMITTED at t = 900
    assert h.n(99) == []  # t = 999
    assert h.spout.due() is False
    assert h.n(1) == []  # t = 1000: exactly the interval is not enough (strict >)
    assert h.n(1) == [(1, "PREPARE")]  # t = 1001, not 900 + 1000
    assert h.saved() == CheckPointState(1, TxPhase.PREPARING)


def test_interval_zero_still_needs_time_to_pass():
    h = Harness(interval_ms=0)
    h.n()
    h.spout.ack(-1)
    assert h.n(0) == [(0, "PREPARE")]
    h.spout.ack(0)
    assert h.n(0) == [(0, "COMMIT")]
    h.spout.ack(0)
    assert h.n(0) == []
    assert h.n(1) == [(1, "PREPARE")]


class Waiting:
    """The runtime's ``waiting``: whether tuples wait; counts how often it was asked."""

    def __init__(self) -> None:
        self.now, self.asked = False, 0

    def __call__(self) -> bool:
        self.asked += 1
        return self.now


def _committed_at_0(back_to_back: bool, waiting: Waiting) -> tuple[Harness, ManualClock]:
    """A spout (interval 1000 ms) that ran INITSTATE, PREPARE(0), COMMIT(0) at t = 0."""
    clock = ManualClock(0)
    h = Harness(clock=clock)
    h.spout = CheckpointSpout(clock, waiting)
    h.spout.open_with(h.out, 1000, h.state, back_to_back=back_to_back)
    for expected in [(-1, "INITSTATE"), (0, "PREPARE"), (0, "COMMIT")]:
        assert h.n(0) == [expected]
        h.spout.ack(expected[0])
    assert h.saved() == CheckPointState(0, TxPhase.COMMITTED)
    return h, clock


def test_back_to_back_prepares_as_soon_as_tuples_wait_after_the_commit():
    waiting = Waiting()
    h, clock = _committed_at_0(True, waiting)
    assert h.n(0) == []  # nothing waits, the interval has not passed: nothing to do
    waiting.now = True
    assert h.spout.due() is True
    assert h.n(0) == [(1, "PREPARE")]  # t = 0: no interval waited
    assert clock.now_ms() == 0
    # Still one transaction at a time: nothing while PREPARE(1) is out, then its COMMIT.
    assert h.n(0) == []
    assert h.spout.due() is False
    h.spout.ack(1)
    assert h.n(0) == [(1, "COMMIT")]
    assert h.n(0) == []  # COMMIT(1) not acked yet: no PREPARE(2), tuples or not
    h.spout.ack(1)
    assert h.n(0) == [(2, "PREPARE")]
    assert h.saved() == CheckPointState(2, TxPhase.PREPARING)


def test_back_to_back_keeps_the_interval_when_nothing_waits():
    waiting = Waiting()
    h, _clock = _committed_at_0(True, waiting)
    assert h.n(1000) == []  # t = 1000: not past the interval (strict >), nothing waits
    assert h.n(1) == [(1, "PREPARE")]  # t = 1001: the interval's PREPARE, as Storm's
    assert waiting.asked


def test_back_to_back_recovery_goes_first_whatever_waits():
    waiting = Waiting()
    waiting.now = True
    h, _clock = _committed_at_0(True, waiting)
    assert h.n(0) == [(1, "PREPARE")]
    h.spout.fail(1)
    # PREPARING(1) failed: roll back, INITSTATE, then the next PREPARE reuses the txid.
    assert h.n(0) == [(1, "ROLLBACK")]
    h.spout.ack(1)
    assert h.n(0) == [(0, "INITSTATE")]
    h.spout.ack(0)
    assert h.n(0) == [(1, "PREPARE")]


def test_interval_cadence_ignores_waiting_tuples():
    waiting = Waiting()
    waiting.now = True
    h, _clock = _committed_at_0(False, waiting)
    assert h.spout.due() is False
    assert h.n(1000) == []
    assert h.n(1) == [(1, "PREPARE")]
    assert waiting.asked == 0


def test_open_reads_the_cadence(topology_name):
    spout = CheckpointSpout(ManualClock())
    spout.open({}, _spout_context(topology_name), RecordingSpoutCollector())
    assert spout.back_to_back is True
    conf = {"topology.state.checkpoint.cadence": "interval"}
    spout = CheckpointSpout(ManualClock())
    spout.open(conf, _spout_context(topology_name), RecordingSpoutCollector())
    assert spout.back_to_back is False
    with pytest.raises(ConfigError, match="topology.state.checkpoint.cadence"):
        CheckpointSpout(ManualClock()).open(
            {"topology.state.checkpoint.cadence": "eager"},
            _spout_context(topology_name),
            RecordingSpoutCollector(),
        )


def test_next_tuple_never_sleeps():
    clock = ManualClock(0)
    h = Harness(interval_ms=1000, clock=clock)
    h.n(0)
    for _ in range(5):
        h.spout.next_tuple()  # in progress: nothing to do
    assert clock.now_ms() == 0
    assert h.out.take() == []


def _spout_context(topology_name: str) -> TopologyContext:
    topology = make_context("count").topology
    return TopologyContext(topology, topology_name, CHECKPOINT_COMPONENT_ID, 0)


@pytest.fixture
def topology_name():
    name = f"cpspout-{uuid.uuid4().hex}"
    yield name
    InMemoryKeyValueStateProvider.drop(name + "/")


@pytest.mark.parametrize(
    ("conf", "expected"),
    [
        ({}, 1000),  # the config model's default, as the driver reads it
        ({INTERVAL_KEY: None}, 1000),
        ({INTERVAL_KEY: 1}, 100),
        ({INTERVAL_KEY: 10}, 100),
        ({INTERVAL_KEY: 100}, 100),
        ({INTERVAL_KEY: 2500}, 2500),
    ],
)
def test_open_clamps_interval_to_at_least_100_ms(topology_name, conf, expected):
    spout = CheckpointSpout(ManualClock())
    spout.open(conf, _spout_context(topology_name), RecordingSpoutCollector())
    assert spout.interval_ms == expected


@pytest.mark.parametrize("value", [0, -5, "500", True])
def test_open_refuses_an_interval_the_config_model_refuses(topology_name, value):
    spout = CheckpointSpout(ManualClock())
    with pytest.raises(ConfigError, match=INTERVAL_KEY.replace(".", r"\.")):
        spout.open({INTERVAL_KEY: value}, _spout_context(topology_name), RecordingSpoutCollector())


def test_open_with_does_not_clamp():
    assert Harness(interval_ms=0).spout.interval_ms == 0


def test_open_saves_state_through_the_provider_under_the_spout_namespace(topology_name):
    clock = ManualClock()
    out = RecordingSpoutCollector()
    spout = CheckpointSpout(clock)
    spout.open({}, _spout_context(topology_name), out)
    spout.next_tuple()
    spout.ack(-1)
    spout.next_tuple()
    assert [e.values for e in out.take()] == [[-1, "INITSTATE"], [0, "PREPARE"]]
    # What the spout saved is committed in the provider's store, visible to a fresh state object.
    fresh = InMemoryKeyValueStateProvider().new_state(f"{topology_name}/$checkpointspout-0", {})
    assert fresh.get(TX_STATE_KEY) == [0, "PREPARING"]
    assert list(fresh) == [(TX_STATE_KEY, [0, "PREPARING"])]
    assert fresh.prepared_txid is None


def test_second_spout_on_the_same_state_resumes_from_it(topology_name):
    context = _spout_context(topology_name)
    clock = ManualClock()
    first = CheckpointSpout(clock)
    first.open({}, context, RecordingSpoutCollector())
    for _ in range(3):  # INITSTATE(-1), PREPARE(0), COMMIT(0), all acked
        first.next_tuple()
        first.ack(first.cur.txid)
    clock.advance(1001)  # past the default 1000 ms interval
    first.next_tuple()  # PREPARE(1), then the driver "crashes"
    assert first.cur == CheckPointState(1, TxPhase.PREPARING)

    out = RecordingSpoutCollector()
    second = CheckpointSpout(ManualClock())
    second.open({}, context, out)
    assert second.cur == CheckPointState(1, TxPhase.PREPARING)
    assert second.recovering is True
    second.next_tuple()
    second.ack(1)
    second.next_tuple()
    second.ack(0)
    second.next_tuple()
    assert [e.values for e in out.take()] == [[1, "ROLLBACK"], [0, "INITSTATE"], [1, "PREPARE"]]


def test_second_spout_resumes_from_the_same_state_object():
    h = Harness()
    for _ in range(2):
        (emitted,) = h.n()
        h.spout.ack(emitted[0])
    assert h.saved() == CheckPointState(0, TxPhase.COMMITTING)
    again = Harness(state=h.state)
    assert again.n() == [(0, "COMMIT")]


def test_corrupt_saved_state_fails_open():
    state = InMemoryKeyValueState("t/$checkpointspout-0")
    state.put(TX_STATE_KEY, ["x", "COMMITTED"])
    state.commit()
    with pytest.raises(CheckpointError, match="not \\[txid, phase\\]"):
        CheckpointSpout().open_with(RecordingSpoutCollector(), 0, state)


# Deliberate differences from Storm: each test fails on Storm's behaviour.


def test_mismatched_ack_is_ignored_and_does_not_reemit_unlike_storm():
    h = Harness(state=saved_state(5, TxPhase.COMMITTED))
    h.n()
    h.spout.ack(5)
    assert h.n() == [(6, "PREPARE")]
    h.spout.ack(4)  # a late ack of an older transaction
    assert h.spout.in_progress is True
    assert h.n() == []  # Storm would re-emit PREPARE(6) here
    assert h.saved() == CheckPointState(6, TxPhase.PREPARING)
    h.spout.ack(6)
    assert h.n() == [(6, "COMMIT")]


def test_mismatched_ack_while_recovering_is_ignored_and_does_not_reemit_unlike_storm():
    h = Harness(state=saved_state(5, TxPhase.PREPARING))
    assert h.n() == [(5, "ROLLBACK")]
    h.spout.ack(3)
    assert h.n() == []  # Storm would re-emit ROLLBACK(5)
    assert h.saved() == CheckPointState(5, TxPhase.PREPARING)


def test_stale_fail_is_ignored_unlike_storm_which_starts_recovery():
    h = Harness(state=saved_state(5, TxPhase.COMMITTED))
    h.n()
    h.spout.ack(5)
    assert h.n() == [(6, "PREPARE")]
    h.spout.fail(4)  # a late fail of an older transaction
    assert h.spout.recovering is False
    assert h.n() == []  # Storm would emit ROLLBACK(6) here
    h.spout.ack(6)
    assert h.n() == [(6, "COMMIT")]
    assert h.saved() == CheckPointState(6, TxPhase.COMMITTING)


def test_stale_fail_while_recovering_does_not_reemit_unlike_storm():
    h = Harness(state=saved_state(5, TxPhase.PREPARING))
    assert h.n() == [(5, "ROLLBACK")]
    h.spout.fail(2)
    assert h.n() == []  # Storm clears the recovery flag and re-emits ROLLBACK(5)
