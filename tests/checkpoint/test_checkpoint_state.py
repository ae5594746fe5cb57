"""CheckPointState and its two transition tables, and its saved form."""

from __future__ import annotations

import pytest

from checkpoint import Action, CheckPointState, TxPhase
from statefulbolts.errors import CheckpointError

PREPARING, COMMITTING, COMMITTED = TxPhase.PREPARING, TxPhase.COMMITTING, TxPhase.COMMITTED


# Every row of nextState(recovering), both columns.
@pytest.mark.parametrize(
    ("current", "recovering", "expected"),
    [
        (CheckPointState(5, PREPARING), True, CheckPointState(4, COMMITTED)),
        (CheckPointState(5, PREPARING), False, CheckPointState(5, COMMITTING)),
        (CheckPointState(5, COMMITTING), True, CheckPointState(5, COMMITTED)),
        (CheckPointState(5, COMMITTING), False, CheckPointState(5, COMMITTED)),
        (CheckPointState(5, COMMITTED), True, CheckPointState(5, COMMITTED)),
        (CheckPointState(5, COMMITTED), False, CheckPointState(6, PREPARING)),
    ],
)
def test_next_state_table(current, recovering, expected):
    assert current.next_state(recovering) == expected


# Every row of nextAction(recovering), both columns.
@pytest.mark.parametrize(
    ("phase", "recovering", "action"),
    [
        (PREPARING, True, Action.ROLLBACK),
        (PREPARING, False, Action.PREPARE),
        (COMMITTING, True, Action.COMMIT),
        (COMMITTING, False, Action.COMMIT),
        (COMMITTED, True, Action.INITSTATE),
        (COMMITTED, False, Action.PREPARE),
    ],
)
def test_next_action_table(phase, recovering, action):
    assert CheckPointState(3, phase).next_action(recovering) is action


def test_committed_while_recovering_is_the_same_object():
    state = CheckPointState(2, COMMITTED)
    assert state.next_state(True) is state


def test_initial_state_of_a_fresh_topology_rolls_to_prepare_zero():
    fresh = CheckPointState(-1, COMMITTED)
    assert fresh.next_action(True) is Action.INITSTATE
    assert fresh.next_state(False) == CheckPointState(0, PREPARING)
    assert fresh.next_state(False).next_action(False) is Action.PREPARE


def test_equality_is_txid_and_phase():
    assert CheckPointState(1, COMMITTED) == CheckPointState(1, COMMITTED)
    assert CheckPointState(1, COMMITTED) != CheckPointState(2, COMMITTED)
    assert CheckPointState(1, COMMITTED) != CheckPointState(1, PREPARING)
    assert len({CheckPointState(1, COMMITTED), CheckPointState(1, COMMITTED)}) == 1


def test_states_are_immutable():
    state = CheckPointState(1, COMMITTED)
    with pytest.raises(AttributeError):
        state.txid = 2  # type: ignore[misc]


def test_str_names_phase_and_txid():
    assert str(CheckPointState(7, COMMITTING)) == "COMMITTING(7)"


def test_action_and_phase_values_are_storms_names():
    assert [a.value for a in Action] == ["PREPARE", "COMMIT", "ROLLBACK", "INITSTATE"]
    assert {p.value for p in TxPhase} == {"COMMITTED", "COMMITTING", "PREPARING"}


@pytest.mark.parametrize(
    "state",
    [
        CheckPointState(-1, COMMITTED),
        CheckPointState(0, PREPARING),
        CheckPointState(12, COMMITTING),
    ],
)
def test_to_value_from_value_round_trip(state):
    value = state.to_value()
    assert value == [state.txid, state.phase.value]
    assert CheckPointState.from_value(value) == state
    assert CheckPointState.from_value(tuple(value)) == state


@pytest.mark.parametrize(
    "bad",
    [
        None,
        5,
        "COMMITTED",
        [],
        [1],
        [1, "COMMITTED", "extra"],
        [1, "DONE"],
        [1, None],
        ["one", "COMMITTED"],
        [None, "COMMITTED"],
        [1.5, "COMMITTED"],
        [True, "COMMITTED"],
        {"txid": 1, "phase": "COMMITTED"},
    ],
)
def test_bad_saved_values_raise_checkpoint_error(bad):
    with pytest.raises(CheckpointError, match="is not \\[txid, phase\\]"):
        CheckPointState.from_value(bad)
