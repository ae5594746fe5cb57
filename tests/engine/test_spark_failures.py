"""End to end on local Spark: crashes, failed and lost tuples, limits, and wiring errors."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import pytest
import topologies as topo

from statefulbolts import Bolt, Fields, TopologyBuilder, TopologyFailedError

pytestmark = pytest.mark.spark

CONF = {"topology.state.checkpoint.interval.ms": 100}
TIMEOUT = 60


def _once(n: int) -> collections.Counter[int]:
    return collections.Counter(range(n))


# ------------------------------------------------------------------------- crashes and retries


@pytest.mark.parametrize("mode", ["crash", "raise"])
def test_first_attempt_fault_is_retried_by_spark_and_counts_stay_exact(
    cluster: Any, tmp_path: Path, mode: str
) -> None:
    """A Python worker dying (``os._exit``) or a bolt raising in attempt 0 of its Spark task."""
    n, target = 60, 37
    log = tmp_path / "fault.log"
    name = topo.new_key(f"fault-{mode}")
    bolt = topo.FirstAttemptFault(target, str(log), mode)
    handle = cluster.submit_topology(name, CONF, topo.relay_into(name, n, bolt))
    try:
        handle.await_idle(TIMEOUT)
        state = handle.read_state("sink")
        txs = topo.transactions(handle)
        metrics = handle.metrics()
    finally:
        handle.kill()

    assert state == dict.fromkeys(range(n), 1)
    # The failed attempt is an error that happened: counted once, in its component, and named.
    assert metrics["components"]["sink"]["errors"] == 1
    [error] = metrics["errors"]
    assert error.startswith("component 'sink' task ")
    cause = (
        "Python worker exited unexpectedly"
        if mode == "crash"
        else f"{topo.__name__}.FirstAttemptFault raised RuntimeError: first-attempt fault on 37"
    )
    assert cause in error
    assert error.endswith("(a failed attempt: Spark ran the task again, and it succeeded)")
    # The fault hit attempt 0 and Spark's retry (attempt 1) went through: nothing else saw it.
    lines = log.read_text(encoding="utf-8").split("\n")[:-1]
    assert [line.split()[0] for line in lines] == ["0", "1"], lines
    if mode == "crash":
        assert lines[0].split()[1] != lines[1].split()[1]  # a new Python worker
    # Spark's task retry hid the fault: no transaction failed, no tuple was replayed.
    assert all(ok for _, _, ok in txs), txs
    rec = topo.record(name)
    assert rec.emits == _once(n)
    assert rec.acks == _once(n)
    assert rec.fails == collections.Counter()


def test_job_failing_for_good_rolls_back_and_replays_exactly(cluster: Any, tmp_path: Path) -> None:
    """Every Spark attempt of PREPARE(1) raises: ROLLBACK(1), INITSTATE(0), PREPARE(1) again."""
    n, burst, target = 40, 20, 30
    failures = topo.task_max_failures(cluster.spark)
    log = tmp_path / "job.log"
    name = topo.new_key("job-fails")
    bolt = topo.FailJobOnce(target, str(log), failures)
    topology = topo.direct_into(name, n, bolt, burst=burst, grouping=topo.by_value)
    handle = cluster.submit_topology(name, CONF, topology)
    try:
        handle.await_idle(TIMEOUT)
        state = handle.read_state("sink")
        txs = topo.transactions(handle)
        counters = handle.metrics()["components"]["sink"]
    finally:
        handle.kill()

    assert state == dict.fromkeys(range(n), 1)
    assert counters["errors"] == 1  # the failed PREPARE(1), once (not its attempts again)
    assert txs == [
        ("INITSTATE", -1, True),
        ("PREPARE", 0, True),
        ("COMMIT", 0, True),
        ("PREPARE", 1, False),
        ("ROLLBACK", 1, True),
        ("INITSTATE", 0, True),
        ("PREPARE", 1, True),
        ("COMMIT", 1, True),
    ]
    # Attempts 0..F-1 of the failed job, then attempt 0 of the retried transaction.
    attempts = log.read_text(encoding="utf-8").split()
    assert attempts == [str(a) for a in range(failures)] + ["0"]
    # The rolled-back burst was failed once and replayed once; everything acked once.
    rec = topo.record(name)
    second = collections.Counter(range(burst, n))
    assert rec.fails == second
    assert rec.emits == _once(n) + second
    assert rec.acks == _once(n)
    assert [topo.image(name, "sink", t) for t in range(2)] == [(1, None), (1, None)]


# ----------------------------------------------------------------------- failed and lost tuples


def test_failed_tuples_are_replayed_and_counted_once(cluster: Any) -> None:
    n, targets = 50, (5, 17, 33)
    name = topo.new_key("fail-once")
    # Fields grouping: the replay meets the task that holds the "already failed" marker.
    topology = topo.direct_into(name, n, topo.FailFirstDelivery(targets), grouping=topo.by_value)
    handle = cluster.submit_topology(name, CONF, topology)
    try:
        handle.await_idle(TIMEOUT)
        state = handle.read_state("sink")
        metrics = handle.metrics()
    finally:
        handle.kill()

    assert state == {**dict.fromkeys(range(n), 1), **{f"failed|{v}": 1 for v in targets}}
    rec = topo.record(name)
    assert rec.fails == collections.Counter(targets)
    assert rec.acks == _once(n)
    assert rec.emits == _once(n) + collections.Counter(targets)
    comps = metrics["components"]
    assert (comps["src"]["emitted"], comps["src"]["acked"], comps["src"]["failed"]) == (
        n + len(targets),
        n,
        len(targets),
    )
    sink = comps["sink"]
    assert (sink["executed"], sink["acked"], sink["failed"]) == (n + len(targets), n, len(targets))
    assert all(t["ok"] for t in metrics["transactions"])


@pytest.mark.parametrize(
    ("bolt", "target", "marked"),
    [
        # Never acked: the tree stays open.
        (topo.IgnoreFirstDelivery, 7, {"ignored|7": 1}),
        # Acked twice: as with Storm's XOR, a second ack does not complete a tree (the tuple's
        # id is XORed an odd number of times). The first delivery was counted too.
        (topo.AckTwiceFirstDelivery, 11, {11: 2, "twice|11": 1}),
    ],
    ids=["unacked", "acked-twice"],
)
def test_an_open_tree_times_out_and_is_replayed(
    cluster: Any, bolt: Any, target: int, marked: dict[Any, int]
) -> None:
    n = 30
    conf = {**CONF, "topology.message.timeout.secs": 1}
    name = topo.new_key("timeout")
    topology = topo.direct_into(name, n, bolt(target), grouping=topo.by_value)
    handle = cluster.submit_topology(name, conf, topology)
    try:
        handle.await_idle(TIMEOUT)
        state = handle.read_state("sink")
    finally:
        handle.kill()

    assert state == {**dict.fromkeys(range(n), 1), **marked}
    rec = topo.record(name)
    assert rec.fails == collections.Counter([target])
    assert rec.acks == _once(n)
    assert rec.emits == _once(n) + collections.Counter([target])


# ----------------------------------------------------------------------------- giving up


def test_poison_tuple_stops_topology_and_keeps_committed_state(cluster: Any) -> None:
    n, burst, poison = 40, 20, 25
    # The "stop" policy (the default isolates the tuple instead), with retries to spare.
    conf = {**CONF, "topology.max.transaction.retries": 5, "topology.deadletter.policy": "stop"}
    name = topo.new_key("poison")
    topology = topo.direct_into(
        name,
        n,
        topo.Poison(poison),
        burst=burst,
        grouping=lambda declarer: declarer.global_grouping("src"),
    )
    assert topology.task_ids("sink")[0] != 0  # its global id: messages name the index, 0
    handle = cluster.submit_topology(name, conf, topology)
    try:
        with pytest.raises(TopologyFailedError) as caught:
            handle.await_idle(TIMEOUT)
        state = handle.read_state("sink")
        txs = topo.transactions(handle)
    finally:
        handle.kill()

    err = caught.value
    message = str(err)
    assert (err.component, err.task, err.txid) == ("sink", 0, 1)
    for part in ("'sink' task 0", "PREPARE(1)", "RuntimeError", "poison value 25"):
        assert part in message, (part, message)
    # Stopped once the same tuple failed topology.deadletter.after.failures (2) PREPARE(1)s:
    # every retry would fail it again, so the budget of 5 retries is not spent.
    assert [tx for tx in txs if not tx[2]] == [("PREPARE", 1, False)] * 2
    assert "it failed 2 transactions on the same tuple" in message
    assert "times in a row" not in message
    # The first burst stays committed at txid 0, untouched by the failed attempts.
    assert state == dict.fromkeys(range(burst), 1)
    assert [topo.image(name, "sink", t) for t in range(2)] == [(0, None), (0, None)]
    rec = topo.record(name)
    assert rec.acks == _once(burst)


# ------------------------------------------------------------------------------------- limits


def test_ackers_off_still_commits_checkpoints(cluster: Any) -> None:
    n = 50
    conf = {**CONF, "topology.acker.executors": 0}
    name = topo.new_key("no-ackers")
    handle = cluster.submit_topology(name, conf, topo.direct_into(name, n, topo.Tally()))
    try:
        handle.await_idle(TIMEOUT)
        state = handle.read_state("sink")
        txs = topo.transactions(handle)
    finally:
        handle.kill()

    assert state == dict.fromkeys(range(n), 1)
    commits = [txid for action, txid, ok in txs if action == "COMMIT" and ok]
    assert commits and commits == list(range(len(commits)))
    assert all(ok for _, _, ok in txs), txs
    last = commits[-1]
    assert [topo.image(name, "sink", t) for t in range(2)] == [(last, None), (last, None)]
    # Untracked: the spout's ack comes at emit, once per tuple.
    rec = topo.record(name)
    assert rec.acks == _once(n)
    assert rec.fails == collections.Counter()


def test_ackers_off_metrics_count_spout_acks(cluster: Any) -> None:
    """With tracking off the spout's ``ack`` runs at emit; its ``acked`` metric counts it."""
    n = 20
    conf = {**CONF, "topology.acker.executors": 0}
    name = topo.new_key("no-ackers-metrics")
    handle = cluster.submit_topology(name, conf, topo.direct_into(name, n, topo.Tally()))
    try:
        handle.await_idle(TIMEOUT)
        src = handle.metrics()["components"]["src"]
    finally:
        handle.kill()
    assert topo.record(name).acks == _once(n)
    assert (src.get("emitted"), src.get("acked"), src.get("failed", 0)) == (n, n, 0), src


def test_max_spout_pending_caps_live_tuples_per_spout_task(cluster: Any) -> None:
    n, cap = 48, 8
    conf = {**CONF, "topology.max.spout.pending": cap}
    name = topo.new_key("max-pending")
    topology = topo.direct_into(name, n, topo.Tally(), spouts=2)
    handle = cluster.submit_topology(name, conf, topology)
    try:
        handle.await_idle(TIMEOUT)
        state = handle.read_state("sink")
    finally:
        handle.kill()

    assert state == dict.fromkeys(range(n), 1)
    rec = topo.record(name)
    assert rec.max_live == {0: cap, 1: cap}
    assert rec.acks == _once(n)
    assert rec.fails == collections.Counter()


# ------------------------------------------------------------------------------ wiring errors


def test_unanchored_emit_in_stateful_topology_names_component(cluster: Any) -> None:
    conf = {**CONF, "topology.max.transaction.retries": 1}
    name = topo.new_key("unanchored")
    handle = cluster.submit_topology(name, conf, topo.through(name, 5, topo.UnanchoredEmitter()))
    try:
        with pytest.raises(TopologyFailedError) as caught:
            handle.await_idle(TIMEOUT)
    finally:
        handle.kill()
    message = str(caught.value)
    assert caught.value.component == "middle"
    assert "'middle'" in message
    assert "UnanchoredEmitError" in message
    assert "anchor" in message


def _stray_bolt(cluster: Any) -> tuple[TopologyFailedError, int]:
    """Run a bolt that emits on an undeclared stream; return the error and its task's global id."""
    conf = {**CONF, "topology.max.transaction.retries": 1}
    name = topo.new_key("stray-bolt")
    topology = topo.through(name, 5, topo.StrayStreamEmitter())
    handle = cluster.submit_topology(name, conf, topology)
    try:
        with pytest.raises(TopologyFailedError) as caught:
            handle.await_idle(TIMEOUT)
    finally:
        handle.kill()
    return caught.value, topology.task_ids("middle")[0]


def _stray_spout(cluster: Any) -> tuple[TopologyFailedError, int]:
    """Run a spout that emits on an undeclared stream; return the error and the spout's task id."""
    name = topo.new_key("stray-spout")
    builder = TopologyBuilder()
    builder.set_spout("src", topo.ValueSpout(name, [1, 2, 3], emit_stream="nowhere"))
    builder.set_bolt("sink", topo.Tally()).shuffle_grouping("src")
    topology = builder.create_topology()
    handle = cluster.submit_topology(name, CONF, topology)
    try:
        with pytest.raises(TopologyFailedError) as caught:
            handle.await_idle(TIMEOUT)
    finally:
        handle.kill()
    return caught.value, topology.task_ids("src")[0]


def test_bolt_emit_on_undeclared_stream_names_stream(cluster: Any) -> None:
    err, _ = _stray_bolt(cluster)
    message = str(err)
    assert err.component == "middle"
    assert "'nowhere'" in message
    assert "bolt 'middle'" in message


def test_spout_emit_on_undeclared_stream_names_stream(cluster: Any) -> None:
    err, _ = _stray_spout(cluster)
    message = str(err)
    assert err.component == "src"
    assert "'nowhere'" in message
    assert "spout 'src'" in message


def test_bolt_error_names_one_task_index(cluster: Any) -> None:
    """The cause names the same task index as the summary and ``err.task``, as the docs do."""
    err, task_id = _stray_bolt(cluster)
    message = str(err)
    assert task_id != 0  # Storm's global id, which no message shows
    assert err.task == 0
    assert "component 'middle' task 0:" in message, message
    assert "bolt 'middle' task 0 emitted on undeclared stream" in message, message
    assert f"task {task_id}" not in message, message


def test_spout_error_names_its_task_index(cluster: Any) -> None:
    """A spout task is named by its task index, as bolt tasks are (and as ``open`` errors are)."""
    err, task_id = _stray_spout(cluster)
    assert task_id != 0
    assert err.task == 0
    assert "spout 'src' task 0 " in str(err), str(err)
    assert f"task {task_id}" not in str(err), str(err)


class _ReportsOddValues(Bolt):
    """Relays every value; for an odd one it raises, catches and reports the error first."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        self.collector = collector

    def execute(self, tuple: Any) -> None:  # noqa: A002
        value = tuple.get_value(0)
        if value % 2:
            try:
                _check_even(value)
            except ValueError as exc:
                self.collector.report_error(exc)
        self.collector.emit([value], anchors=[tuple])
        self.collector.ack(tuple)

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("value"))


def _check_even(value: int) -> None:
    if value % 2:
        msg = f"{value} is odd"
        raise ValueError(msg)


def test_a_reported_error_that_was_raised_keeps_its_traceback_for_the_dashboard(
    cluster: Any,
) -> None:
    n = 10
    name = topo.new_key("reported")
    handle = cluster.submit_topology(name, CONF, topo.through(name, n, _ReportsOddValues()))
    try:
        handle.await_idle(TIMEOUT)
        reported = [e for e in handle.runner.stats.error_log if e.kind == "reported"]
        counters = handle.metrics()["components"]["middle"]
    finally:
        handle.kill()
    # Reporting fails nothing: every value went through, each odd one reported once.
    assert counters["errors"] == n // 2
    assert sorted(e.text.split(": ", 1)[-1] for e in reported) == sorted(
        f"ValueError: {v} is odd" for v in range(1, n, 2)
    )
    for e in reported:
        assert e.component == "middle" and e.traceback is not None
        assert "in _check_even" in e.traceback and "raise ValueError(msg)" in e.traceback
