"""The driver's parts, each on its own, without Spark: pacing, the ledger, spout tasks, stats."""

from __future__ import annotations

from typing import Any

from checkpoint._ledger import RootLedger
from checkpoint._spouts import SpoutTasks
from statefulbolts import Fields, ManualClock, Spout, TopologyBuilder
from statefulbolts.runtime import ExecutionPlan, JobResult, Stats, TransactionInfo
from statefulbolts.runtime._stats import RETRY
from statefulbolts.testing import RecordingStatefulBolt
from statefulbolts.transactional._pacing import Pacing

# ---------------------------------------------------------------------------------- Pacing


class _Coordinator:
    def __init__(self) -> None:
        self.ready = True
        self.asked = 0

    def is_ready(self) -> bool:
        self.asked += 1
        return self.ready

    def initialize_transaction(self, txid: int, prev: Any) -> Any:
        return ("meta", txid, prev)

    def close(self) -> None:
        self.closed = True


def _pacing() -> tuple[Pacing, _Coordinator, ManualClock, list[bool]]:
    inner, clock, busy = _Coordinator(), ManualClock(1000.0), [False]
    return Pacing(inner, clock, lambda: busy[0]), inner, clock, busy


def test_pacing_passes_the_coordinator_through_while_batches_carry_data() -> None:
    pacing, inner, _, _ = _pacing()
    pacing.committed(empty=False, interval_ms=100)
    assert [pacing.is_ready() for _ in range(3)] == [True, True, True]
    assert inner.asked == 3
    assert pacing.initialize_transaction(4, "prev") == ("meta", 4, "prev")
    inner.ready = False
    assert pacing.is_ready() is False


def test_pacing_after_an_empty_batch_waits_an_interval_then_probes_one_txid() -> None:
    pacing, inner, clock, busy = _pacing()
    pacing.committed(empty=True, interval_ms=100)
    assert pacing.quiet
    assert pacing.is_ready() is False  # the interval has not passed
    assert inner.asked == 0  # not even asked
    clock.advance(100)
    busy[0] = True
    assert pacing.is_ready() is False  # a txid is still active
    busy[0] = False
    assert pacing.is_ready() is True  # the probe
    assert pacing.is_ready() is False  # one txid at a time while quiet
    pacing.committed(empty=False, interval_ms=100)  # the probe found data
    assert not pacing.quiet
    assert [pacing.is_ready(), pacing.is_ready()] == [True, True]


def test_pacing_closes_the_coordinator() -> None:
    pacing, inner, _, _ = _pacing()
    pacing.close()
    assert inner.closed


# ------------------------------------------------------------------------------ RootLedger


class _Spouts:
    def __init__(self) -> None:
        self.acked: list[tuple[int, list[Any]]] = []
        self.failed: list[tuple[int, Any]] = []

    def ack_messages(self, index: int, message_ids: list[Any]) -> None:
        self.acked.append((index, message_ids))

    def fail_message(self, index: int, message_id: Any) -> None:
        self.failed.append((index, message_id))

    def describe(self, index: int) -> str:
        return f"spout task {index}"


def _ledger(**kw: Any) -> tuple[RootLedger, _Spouts, list[int]]:
    ledger, spouts = RootLedger(timeout_secs=30, **kw), _Spouts()
    ledger.attach(spouts)
    roots = []
    for index, message_id in [(0, "a"), (0, "b"), (1, "c")]:
        root = ledger.new_root()
        ledger.live[root] = (index, message_id)
        roots.append(root)
    return ledger, spouts, roots


def test_ledger_root_ids_count_up_from_one() -> None:
    _, _, roots = _ledger()
    assert roots == [1, 2, 3]


def test_ledger_acks_a_transactions_roots_only_when_it_commits() -> None:
    ledger, spouts, roots = _ledger()
    complete, failed = ledger.settle(roots, JobResult(), ok=True)
    assert (complete, failed) == (roots, 0)
    ledger.await_commit(7, complete)
    assert ledger.awaiting == 3
    assert ledger.awaiting_messages(7) == {0: ["a", "b"], 1: ["c"]}
    assert spouts.acked == []
    ledger.committed(7)
    assert spouts.acked == [(0, ["a", "b"]), (1, ["c"])]
    assert (ledger.live, ledger.awaiting) == ({}, 0)


def test_ledger_commit_acks_by_the_kept_grouping_only_while_it_still_holds() -> None:
    # Kept as it was: the commit acks the very lists the manifest was given.
    ledger, spouts, roots = _ledger()
    ledger.await_commit(7, roots)
    grouped = ledger.awaiting_messages(7)
    ledger.committed(7)
    assert spouts.acked == [(0, ["a", "b"]), (1, ["c"])]
    assert spouts.acked[0][1] is grouped[0]
    # A root failed after the grouping: it is not acked as well.
    ledger, spouts, roots = _ledger()
    ledger.await_commit(7, roots)
    ledger.awaiting_messages(7)
    ledger.fail(roots[0])
    ledger.committed(7)
    assert (spouts.failed, spouts.acked) == ([(0, "a")], [(0, ["b"]), (1, ["c"])])
    # A root that joined after the grouping is acked too; nothing is kept past a rollback.
    ledger, spouts, roots = _ledger()
    ledger.await_commit(7, roots[:2])
    ledger.awaiting_messages(7)
    ledger.await_commit(7, roots[2:])
    ledger.committed(7)
    assert spouts.acked == [(0, ["a", "b"]), (1, ["c"])]
    ledger, spouts, roots = _ledger()
    ledger.await_commit(7, roots)
    ledger.awaiting_messages(7)
    ledger.discard_awaiting()
    ledger.committed(7)
    assert (len(spouts.failed), spouts.acked, ledger.live) == (3, [], {})


def test_ledger_fails_failed_roots_at_once_and_keeps_open_ones_until_their_timeout() -> None:
    ledger, spouts, roots = _ledger()
    result = JobResult(acks={roots[1]: 12345}, fails={roots[0]})
    complete, failed = ledger.settle(roots, result, ok=True)
    assert (complete, failed) == ([roots[2]], 1)
    assert spouts.failed == [(0, "a")]
    ledger.tick(0.0)
    ledger.tick(30_000.0)  # one rotation: an open root lives one to two timeouts
    assert spouts.failed == [(0, "a")]
    ledger.tick(60_000.0)
    assert spouts.failed == [(0, "a"), (0, "b")]
    assert list(ledger.live) == [roots[2]]


def test_ledger_fails_everything_of_a_failed_checkpoint_and_of_a_rollback() -> None:
    ledger, spouts, roots = _ledger()
    assert ledger.settle(roots[:1], JobResult(), ok=False) == ([], 1)
    ledger.await_commit(3, roots[1:])
    ledger.discard_awaiting()
    assert spouts.failed == [(0, "a"), (0, "b"), (1, "c")]
    assert (ledger.live, ledger.awaiting) == ({}, 0)


def test_ledger_without_timeouts_never_expires_a_root() -> None:
    ledger, spouts, roots = _ledger(timeouts=False)
    ledger.settle(roots, JobResult(acks={roots[0]: 1}), ok=True)
    for now in (0.0, 60_000.0, 120_000.0):
        ledger.tick(now)
    assert spouts.failed == []


# ------------------------------------------------------------------------------ SpoutTasks


class _Numbers(Spout):
    """Emits 0..n-1 with their own number as message id; keeps what it was told."""

    def __init__(self, n: int) -> None:
        self.n, self.next, self.acked, self.failed = n, 0, [], []

    def open(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def next_tuple(self) -> None:
        if self.next < self.n:
            self.collector.emit([self.next], message_id=self.next)
            self.next += 1

    def ack(self, message_id: Any) -> None:
        self.acked.append(message_id)

    def fail(self, message_id: Any) -> None:
        self.failed.append(message_id)
        self.next = min(self.next, message_id)  # replay from the failed one

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("n"))


def _spouts(n: int, max_pending: int | None) -> tuple[SpoutTasks, RootLedger, Stats]:
    builder = TopologyBuilder()
    builder.set_spout("numbers", _Numbers(n))
    builder.set_bolt("sink", RecordingStatefulBolt()).shuffle_grouping("numbers")
    topology = builder.create_topology()
    ledger, stats = RootLedger(timeout_secs=30), Stats()
    plan = ExecutionPlan(topology)
    spouts = SpoutTasks(
        topology,
        plan,
        "numbers-test",
        {},
        ledger,
        stats,
        tracking=True,
        max_pending=max_pending,
        skip=("$checkpointspout",),
    )
    spouts.open()
    return spouts, ledger, stats


def test_spout_tasks_gather_within_max_spout_pending_and_hand_over_the_buffer() -> None:
    spouts, ledger, _ = _spouts(10, max_pending=4)
    assert spouts.gather() == 4  # then the task has four live tuples
    assert spouts.gather() == 0
    records, roots = spouts.take()
    assert spouts.buffered == 0
    assert [v for r in records for v in r.values] == [0, 1, 2, 3]
    assert [int(r) for record in records for r in record.roots] == roots == [1, 2, 3, 4]
    assert sorted(ledger.live.values()) == [(0, 0), (0, 1), (0, 2), (0, 3)]
    ledger.ack(roots[:2])
    spout = spouts.tasks[0].spout
    assert spout.acked == [0, 1]
    assert spouts.gather() == 2  # two places freed
    spouts.close()


def test_spout_tasks_count_a_failed_tuple_emitted_again_as_replayed() -> None:
    spouts, ledger, stats = _spouts(3, max_pending=None)
    assert spouts.gather() == 3
    _, roots = spouts.take()
    ledger.fail(roots[1])
    spout = spouts.tasks[0].spout
    assert spout.failed == [1]
    assert spouts.gather() == 2  # 1 and 2 again
    assert stats.components["numbers"]["replayed"] == 1
    assert spouts.emitted_per_component() == {"numbers": 5}
    spouts.close()


def test_spout_tasks_hold_the_first_transaction_while_the_spouts_produce() -> None:
    spouts, _, _ = _spouts(3, max_pending=None)
    assert spouts.still_filling(gathered=5, now_ms=0.0, interval_ms=100) is True
    assert spouts.still_filling(gathered=5, now_ms=100.0, interval_ms=100) is True
    assert spouts.still_filling(gathered=5, now_ms=101.0, interval_ms=100) is False
    assert spouts.still_filling(gathered=0, now_ms=50.0, interval_ms=100) is False
    spouts.close()


# ----------------------------------------------------------------------------------- Stats


def test_stats_keep_outcomes_durations_and_recoveries_per_action() -> None:
    told: list[TransactionInfo] = []
    stats = Stats(on_transaction=told.append)
    ok = TransactionInfo(1, "PREPARE", 10, 0.5, True, acked=10)
    failed = TransactionInfo(2, "PREPARE", 4, 0.25, False, failed=4, error="boom")
    recovered = TransactionInfo(2, "ROLLBACK", 0, 0.1, True, recovery=True)
    for info in (ok, failed, recovered):
        stats.record(info, component="count" if info is failed else None)
    assert told == [ok, failed, recovered]
    assert stats.outcomes == {("PREPARE", True): 1, ("PREPARE", False): 1, ("ROLLBACK", True): 1}
    assert {a: h.count for a, h in stats.durations.items()} == {"PREPARE": 2, "ROLLBACK": 1}
    assert dict(stats.recovery_counts) == {RETRY: 1, "ROLLBACK": 1}
    (error,) = stats.error_log
    assert (error.kind, error.text, error.component, error.txid) == (
        "failed",
        "PREPARE(2) failed: boom",
        "count",
        2,
    )
    assert all(info.at > 0 for info in told)


def test_stats_snapshot_copies_the_last_transactions_only() -> None:
    stats = Stats()
    for txid in range(1, 6):
        stats.record(TransactionInfo(txid, None, 1, 0.01, True))
    snap = stats.snapshot(last=2)
    assert [t.txid for t in snap.transactions] == [4, 5]
    assert snap.outcomes == {("BATCH", True): 5}
    stats.record(TransactionInfo(6, None, 1, 0.01, True))
    assert [t.txid for t in snap.transactions] == [4, 5]  # a copy
    assert stats.snapshot(last=0).transactions == []


def test_stats_add_counts_per_component_from_zero() -> None:
    stats = Stats()
    stats.add("split", executed=3, emitted=7)
    stats.add("split", executed=2)
    stats.error("split", "bad line", task=1, txid=4)
    row = stats.components["split"]
    assert (row["executed"], row["emitted"], row["errors"], row["failed"]) == (5, 7, 1, 0)
    assert stats.errors == ["bad line"]
    assert stats.error_log[-1].kind == "reported"
