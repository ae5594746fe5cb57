"""Typed job actions and emit orders: enums that still read, compare and serialise as strings.

``checkpoint.Action`` and ``statefulbolts.transactional.BatchAction`` are what a protocol passes
as ``JobSpec.action`` and ``TransactionInfo.action``; ``SpoutKind``, ``EmitKind`` and
``PartitionEmit`` make up a transactional ``EmitOrder``. Unknown values are errors.
"""

from __future__ import annotations

import json

import pytest

from checkpoint import Action
from checkpoint.status import RECOVERY_ACTIONS
from providers import StateFactory
from recovery import RecoveryTracker
from statefulbolts.runtime import JobSpec, Stats, TransactionInfo, job_labels
from statefulbolts.transactional import BatchAction
from statefulbolts.transactional._emitting import PARTITIONED, EmitterMetas
from statefulbolts.transactional._phase import BatchPhase
from statefulbolts.transactional._task import (
    EmitKind,
    EmitOrder,
    PartitionEmit,
    SpoutKind,
    _partition_order,
)


@pytest.mark.parametrize("action", [*Action, *BatchAction])
def test_an_action_is_the_string_of_its_value(action):
    assert action == action.value
    assert f"{action}" == str(action) == action.value
    assert json.dumps({"action": action}) == json.dumps({"action": action.value})
    assert type(action)(action.value) is action


@pytest.mark.parametrize(
    ("make", "bad", "message"),
    [
        (Action, "commit", "unknown checkpoint action 'commit': not one of PREPARE, COMMIT, "),
        (BatchAction, "BATCH", "unknown batch action 'BATCH': not one of EMIT, PROCESS, "),
        (SpoutKind, "exact", "unknown kind of transactional spout 'exact': not one of plain, "),
        (EmitKind, None, "unknown partition emission None: not one of replay, new, skip"),
    ],
)
def test_an_unknown_value_is_a_value_error_naming_it_and_the_allowed_ones(make, bad, message):
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(")) as info:
        make(bad)
    for member in make:
        assert member.value in str(info.value)


def test_each_batch_phase_that_runs_a_job_has_its_batch_action():
    jobs = {p: p.job.label for p in (BatchPhase.EMITTING, BatchPhase.PROCESSING)}
    jobs[BatchPhase.COMMITTING] = BatchPhase.COMMITTING.job.label
    assert jobs == {
        BatchPhase.EMITTING: BatchAction.EMIT,
        BatchPhase.PROCESSING: BatchAction.PROCESS,
        BatchPhase.COMMITTING: BatchAction.COMMIT,
    }
    assert all(type(a) is BatchAction for a in jobs.values())


@pytest.mark.parametrize("action", [Action.COMMIT, BatchAction.EMIT_PROCESS])
def test_the_engine_labels_a_job_by_its_enum_action_as_by_its_name(action):
    def labels(name):
        return job_labels("wc", JobSpec(None, None, [], 3, "9 tuples", action=name, attempt=1))

    as_enum, as_str = labels(action), labels(action.value)
    assert as_enum == as_str
    assert as_enum.group == f"wc/{action.value}/txid=3/attempt=1"


def test_transaction_info_gives_its_action_as_a_plain_string():
    info = TransactionInfo(4, BatchAction.COMMIT, 10, 0.5, True, 10)
    assert info.action == "COMMIT"
    row = info.as_dict()
    assert row["action"] == "COMMIT" and type(row["action"]) is str
    assert TransactionInfo(5, None, 1, 0.1, True).as_dict()["action"] is None


def test_stats_count_enum_actions_under_their_names():
    stats = Stats()
    stats.record(TransactionInfo(0, Action.PREPARE, 3, 0.1, True, 3))
    stats.record(TransactionInfo(0, Action.COMMIT, 0, 0.1, True))
    stats.record(TransactionInfo(1, "COMMIT", 0, 0.1, True))
    stats.record(TransactionInfo(2, None, 2, 0.1, True, 2))
    assert dict(stats.outcomes) == {("PREPARE", True): 1, ("COMMIT", True): 2, ("BATCH", True): 1}
    assert sorted(stats.durations) == ["BATCH", "COMMIT", "PREPARE"]


def test_the_supervisor_reads_recovery_actions_from_event_strings():
    tracker = RecoveryTracker(RECOVERY_ACTIONS)
    assert not tracker.add({"action": "ROLLBACK", "txid": 3, "ok": True, "seconds": 0.25})
    assert tracker.add({"action": "INITSTATE", "txid": 2, "ok": True, "seconds": 0.25})
    assert tracker.actions == ["ROLLBACK(3)", "INITSTATE(2)"]
    assert tracker.seconds == 0.5
    tracker.add({"action": "COMMIT", "txid": 3, "ok": True})
    assert tracker.progressed


def test_a_partitioned_order_holds_a_partition_emit_per_partition():
    metas = EmitterMetas(PARTITIONED, "actions", lambda ns: StateFactory.get_system_state(ns, {}))
    assert metas.kind is SpoutKind.PARTITIONED
    order = metas.order(1, 2, None)
    assert order.kind is SpoutKind.PARTITIONED
    assert order.partitions == {
        0: PartitionEmit(EmitKind.NEW, None),
        1: PartitionEmit(EmitKind.NEW, None),
    }
    assert all(type(p) is PartitionEmit for p in order.partitions.values())


def test_a_partition_missing_from_a_partitioned_order_is_an_error_not_a_new_batch():
    order = EmitOrder(SpoutKind.PARTITIONED, 3, None, {0: PartitionEmit(EmitKind.SKIP, None)})
    assert _partition_order(order, 0) == PartitionEmit(EmitKind.SKIP, None)
    with pytest.raises(ValueError, match=r"no entry for partition 2 \(it orders \[0\]\)"):
        _partition_order(order, 2)


def test_an_order_with_an_unknown_emission_is_refused():
    order = EmitOrder(SpoutKind.PARTITIONED, 1, None, {0: ("again", None)})
    with pytest.raises(ValueError, match="unknown partition emission 'again'"):
        _partition_order(order, 0)
