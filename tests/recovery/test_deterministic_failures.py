"""A failure no retry can change stops the topology at once, and says so once.

``recovery.gate.classify`` decides on the error's type: a ``TopologyError`` or ``ConfigError`` in
a task, and under ``topology.deadletter.policy`` "stop" a value that does not pickle or a tuple
that failed ``topology.deadletter.after.failures`` transactions, stop the topology at its first
chance, with ``topology.max.transaction.retries`` to spare; the message the error carries has
one "topology ... stopped:" prefix, and the driver logs no second copy of it. Messages name the
failing task by its index, never by Storm's global task id.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
import topologies as topo
import tx_topologies as tx

from providers import StateBackendError, StateLostError
from recovery.gate import Failure, classify
from statefulbolts import (
    BasicBolt,
    Fields,
    LocalCluster,
    MemoryTransactionalSpout,
    TopologyFailedError,
    TransactionalTopologyBuilder,
)
from statefulbolts.errors import ConfigError, TopologyError, UnshippableValueError

TIMEOUT = 120
RETRIES = {"topology.max.transaction.retries": 5, "topology.state.checkpoint.interval.ms": 50}


class _Facts:
    """A task error's ``is_a``, as ``TaskError`` answers it."""

    def __init__(self, kind: type[BaseException]) -> None:
        self.kind = kind

    def is_a(self, *classes: type[BaseException]) -> bool:
        return issubclass(self.kind, classes)


@pytest.mark.parametrize(
    ("kind", "stop_policy", "repeated", "failure"),
    [
        (ValueError, False, False, Failure.TRANSIENT),
        (ValueError, True, False, Failure.TRANSIENT),  # maybe flaky: not known yet
        (ValueError, True, True, Failure.DETERMINISTIC),  # the same tuple, every time
        (ValueError, False, True, Failure.TRANSIENT),  # isolate: the dead letters decide
        (UnshippableValueError, True, False, Failure.DETERMINISTIC),
        (UnshippableValueError, False, False, Failure.TRANSIENT),  # dead-lettered instead
        (TopologyError, False, False, Failure.DETERMINISTIC),
        (ConfigError, False, False, Failure.DETERMINISTIC),
        (StateBackendError, True, True, Failure.OUTAGE),
        (StateLostError, False, False, Failure.FATAL),
    ],
)
def test_the_error_s_type_decides_what_a_failure_is(
    kind: type[BaseException], stop_policy: bool, repeated: bool, failure: Failure
) -> None:
    assert classify(_Facts(kind), stop_policy=stop_policy, repeated=repeated) is failure
    assert classify(None, stop_policy=stop_policy, repeated=repeated) is Failure.TRANSIENT


def _failed(handle: Any) -> list[tuple[str | None, int]]:
    return [(t["action"], t["txid"]) for t in handle.metrics()["transactions"] if not t["ok"]]


def _stopped(cluster: LocalCluster, name: str, conf: dict[str, Any], topology: Any) -> Any:
    handle = cluster.submit_topology(name, {**RETRIES, **conf}, topology)
    try:
        with pytest.raises(TopologyFailedError) as caught:
            handle.await_idle(TIMEOUT)
        return caught.value, _failed(handle)
    finally:
        handle.kill()


def test_a_wiring_error_in_a_task_stops_at_its_first_failure(
    caplog: pytest.LogCaptureFixture,
) -> None:
    name = topo.new_key("stray")
    topology = topo.through(name, 5, topo.StrayStreamEmitter())
    assert topology.task_ids("middle") != (0,)  # messages name task index 0, not this id
    with LocalCluster(engine="inline") as cluster, caplog.at_level(logging.WARNING):
        err, failed = _stopped(cluster, name, {}, topology)
    message = str(err)
    assert failed == [("PREPARE", 0)]  # once: 5 retries were allowed
    assert (err.component, err.task, err.txid) == ("middle", 0, 0)
    assert message.startswith(f"topology {name!r} stopped: PREPARE(0) failed in component ")
    assert "'middle' task 0: " in message and "TopologyError" in message
    assert message.count("stopped:") == 1 and "times in a row" not in message
    # The driver's own log does not say it again: whoever waits on the topology gets the error.
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert not [r for r in caplog.records if "stopped:" in r.getMessage()]


class _Misconfigured(BasicBolt):
    """Raises the ``ConfigError`` a bolt's own config check would raise."""

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        msg = "words.min.length must be an int, got 'three'"
        raise ConfigError(msg)

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "word", "n"))


def test_a_config_error_in_a_transactional_batch_stops_at_its_first_attempt(tmp_path: Any) -> None:
    tid = topo.new_key("misconfigured")
    spout = MemoryTransactionalSpout({0: [["cat"]], 1: [["dog"]]}, ["word"], 2)
    b = TransactionalTopologyBuilder(tid, "spout", spout, 2)
    b.set_bolt("ones", _Misconfigured(), 2).shuffle_grouping("spout")
    b.set_committer_bolt("commit", tx.CountCommitter(tx.Log(tmp_path)), 2).fields_grouping(
        "ones", ["word"]
    )
    with LocalCluster(engine="inline") as cluster:
        err, failed = _stopped(cluster, tid, {}, b.build_topology())
    assert len(failed) == 1, failed
    assert err.component == "ones" and err.task in (0, 1)
    assert "ConfigError: words.min.length must be an int" in str(err)
    assert str(err).count("stopped:") == 1


def test_under_policy_stop_a_tuple_failing_every_time_stops_once_it_is_known() -> None:
    name = topo.new_key("stop-known")
    topology = topo.direct_into(
        name, 10, topo.Poison(3), grouping=lambda d: d.global_grouping("src"), burst=10
    )
    conf = {"topology.deadletter.policy": "stop", "topology.deadletter.after.failures": 3}
    with LocalCluster(engine="inline") as cluster:
        err, failed = _stopped(cluster, name, conf, topology)
    # Three failed transactions on the same spout tuple (after.failures), not 1 + 5 retries.
    assert failed == [("PREPARE", 0)] * 3
    message = str(err)
    assert "(it failed 3 transactions on the same tuple, and topology.deadletter.policy is " in (
        message
    )
    assert (err.component, err.task) == ("sink", 0) and "'sink' task 0: " in message
    assert message.count("stopped:") == 1 and "times in a row" not in message


def test_a_failure_that_may_pass_is_still_retried_to_the_budget() -> None:
    # Under "stop", a tuple not yet known to fail every time (after.failures 50) is retried
    # until the retry budget runs out, as before.
    name = topo.new_key("retried")
    topology = topo.direct_into(name, 10, topo.Poison(3), parallelism=1, burst=10)
    conf = {
        "topology.deadletter.policy": "stop",
        "topology.deadletter.after.failures": 50,
        "topology.max.transaction.retries": 2,
    }
    with LocalCluster(engine="inline") as cluster:
        err, failed = _stopped(cluster, name, conf, topology)
    assert failed == [("PREPARE", 0)] * 3
    assert "failed 3 times in a row (topology.max.transaction.retries = 2)" in str(err)
    assert str(err).count("stopped:") == 1
