"""A data job's input cut when its first task asks (``topology.input.cut``, ``runtime._late``).

The server and the task's side of it alone (no Spark), then on local Spark: the tuples a spout
emits after a PREPARE was submitted, and before its first task started, go with that PREPARE
when the cut is ``task-start`` and with the next one when it is ``submit``.
"""

from __future__ import annotations

import pickle
import queue
import socket
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import topologies as topo

from statefulbolts import Fields, Spout, TopologyBuilder
from statefulbolts.runtime import SparkEngine
from statefulbolts.runtime._late import InputServer, LateInputError, LateInputs, fetch

TIMEOUT = 60


# ------------------------------------------------------------------------- the server alone


@pytest.fixture
def server() -> Iterator[InputServer]:
    s = InputServer("127.0.0.1")
    yield s
    s.close()


def test_each_slot_gets_its_bytes_and_the_feed_is_made_once(server: InputServer) -> None:
    made: list[int] = []

    def make() -> list[bytes]:
        made.append(1)
        return [b"slot zero", b"", b"slot two" * 10_000]

    key = server.register(make)
    got = [fetch(server.address, server.token, key, slot) for slot in (2, 0, 1, 0)]
    assert got == [b"slot two" * 10_000, b"slot zero", b"", b"slot zero"]
    assert made == [1]  # a retried task asks again and gets the same bytes, made once


def test_tasks_asking_at_once_wait_for_the_one_making_the_feed(server: InputServer) -> None:
    release = threading.Event()

    def make() -> list[bytes]:
        release.wait(TIMEOUT)
        return [b"a", b"b", b"c"]

    key = server.register(make)
    results: dict[int, bytes] = {}

    def ask(slot: int) -> None:
        results[slot] = fetch(server.address, server.token, key, slot)

    threads = [threading.Thread(target=ask, args=(s,)) for s in range(3)]
    for t in threads:
        t.start()
    release.set()
    for t in threads:
        t.join(TIMEOUT)
    assert results == {0: b"a", 1: b"b", 2: b"c"}


def test_the_makers_error_reaches_every_task_and_the_engine(server: InputServer) -> None:
    def make() -> list[bytes]:
        msg = "spout 'src' emitted a value that does not pickle"
        raise ValueError(msg)

    key = server.register(make)
    for slot in (0, 1):
        with pytest.raises(LateInputError, match="ValueError: spout 'src' emitted a value"):
            fetch(server.address, server.token, key, slot)
    error = server.error(key)
    assert isinstance(error, ValueError)


def test_a_wrong_token_or_an_ended_job_gets_no_input(server: InputServer) -> None:
    key = server.register(lambda: [b"secret"])
    with pytest.raises(LateInputError, match="closed the connection"):
        fetch(server.address, b"x" * 16, key, 0)
    server.drop(key)
    with pytest.raises(LateInputError, match=f"no input for job {key}"):
        fetch(server.address, server.token, key, 0)


def test_a_closed_server_is_named_with_its_address() -> None:
    s = InputServer("127.0.0.1")
    address = s.address
    s.close()
    with pytest.raises(LateInputError, match=f"driver at 127.0.0.1:{address[1]}"):
        fetch(address, s.token, 1, 0)


def test_late_inputs_wait_for_the_cut_or_its_refusal() -> None:
    late = LateInputs()
    assert not late.wanted and not late.asked.done()
    taker = threading.Thread(target=lambda: late.give([["r"], []]))
    taker.start()
    assert late.result(TIMEOUT) == [["r"], []]
    taker.join()
    assert late.wanted and late.asked.done() and late.given

    refused = LateInputs()
    refused.refuse(RuntimeError("the topology stopped"))
    with pytest.raises(RuntimeError, match="the topology stopped"):
        refused.result(TIMEOUT)


def test_a_server_never_answers_a_stranger_that_sends_nothing(server: InputServer) -> None:
    """A half-open connection holds one handler, not the server: others are still served."""
    stranger = socket.create_connection(server.address)
    try:
        key = server.register(lambda: [pickle.dumps("ok")])
        assert pickle.loads(fetch(server.address, server.token, key, 0)) == "ok"  # noqa: S301
    finally:
        stranger.close()


# ------------------------------------------------------------------------- on local Spark

# The spout runs in the driver: the test feeds it through this queue.
_FEED: queue.Queue[int] = queue.Queue()
_EMITTED: list[int] = []


class QueueSpout(Spout):
    """Emits what the test puts in ``_FEED``, its value as message id."""

    def open(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        self.collector = collector

    def next_tuple(self) -> None:
        try:
            value = _FEED.get_nowait()
        except queue.Empty:
            return
        self.collector.emit([value], message_id=value)
        _EMITTED.append(value)

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("value"))


def _prepares(handle: Any) -> list[int]:
    txs = handle.metrics()["transactions"]
    return [t["tuples"] for t in txs if t["action"] == "PREPARE" and t["ok"]]


@pytest.mark.spark
@pytest.mark.parametrize(("cut", "first_prepare"), [("task-start", 8), ("submit", 5)])
def test_tuples_emitted_while_spark_schedules_go_with_a_late_cut(
    cluster: Any, monkeypatch: pytest.MonkeyPatch, cut: str, first_prepare: int
) -> None:
    """The first PREPARE's job is held before Spark runs it; three tuples arrive meanwhile."""
    _EMITTED.clear()
    while not _FEED.empty():
        _FEED.get_nowait()
    for v in range(5):
        _FEED.put(v)
    entered, gate = threading.Event(), threading.Event()
    run = SparkEngine.run

    def held(self: SparkEngine, spec: Any) -> Any:
        if spec.action == "PREPARE" and not entered.is_set():
            entered.set()
            gate.wait(TIMEOUT)
        return run(self, spec)

    monkeypatch.setattr(SparkEngine, "run", held)
    builder = TopologyBuilder()
    builder.set_spout("src", QueueSpout())
    builder.set_bolt("sink", topo.Tally(), 2).fields_grouping("src", Fields("value"))
    name = topo.new_key(f"late-{cut}")
    conf = {"topology.state.checkpoint.interval.ms": 100, "topology.input.cut": cut}
    handle = cluster.submit_topology(name, conf, builder.create_topology())
    try:
        assert entered.wait(TIMEOUT)  # PREPARE(0) submitted with 5 tuples buffered
        for v in range(5, 8):
            _FEED.put(v)
        for _ in range(TIMEOUT * 100):  # the runner gathers while the job runs
            if len(_EMITTED) == 8:
                break
            threading.Event().wait(0.01)
        assert len(_EMITTED) == 8
        gate.set()
        handle.await_idle(TIMEOUT)
        prepares = _prepares(handle)
        state = handle.read_state("sink")
    finally:
        gate.set()
        handle.kill()
    assert prepares[0] == first_prepare
    assert sum(prepares) == 8
    assert state == dict.fromkeys(range(8), 1)
