"""``/metrics`` scraped during real Spark runs and parsed with prometheus_client's parser.

Each run serves its dashboard (``topology.ui.port`` 0: a free 127.0.0.1 port). A scrape taken
from the ``on_transaction`` callback runs while the driver loop is inside a step, so it sees the
run exactly at that transaction: the counts there, and at the end, are the ones the run's
outcome fixes (one burst of sentences per transaction, a job that fails once, a Redis stream
of known length, a Redis server stopped and started again).
"""

from __future__ import annotations

import collections
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
import topologies as topo
from outage_topologies import burst_wordcount, redis_conf
from ui_topologies import scrape, scrape_until, snapshot, value

from examples.corpus import sentence
from examples.transactional_global_count import DATA, GLOBAL_KEY, BatchCount, UpdateGlobalCount
from examples.wordcount import SplitSentence, WordCount, expected_counts
from statefulbolts import (
    Fields,
    MemoryTransactionalSpout,
    TopologyBuilder,
    TransactionalTopologyBuilder,
)
from statefulbolts.clock import ManualClock
from statefulbolts.connectors import RedisStreamSpout, load_stream

pytestmark = pytest.mark.spark

UI = {"topology.ui.port": 0, "topology.state.checkpoint.interval.ms": 100}
TIMEOUT = 120
SENTENCES, BURST = 200, 20  # one burst per transaction: PREPARE(0) .. PREPARE(9)


class Url:
    """The dashboard URL, handed from the test thread to the driver's callback.

    The callback may run before ``submit_topology`` returns the handle: it waits for the URL.
    """

    def __init__(self) -> None:
        self._url = ""
        self._ready = threading.Event()

    def set(self, url: str | None) -> None:
        assert url is not None
        self._url = url
        self._ready.set()

    def get(self) -> str:
        assert self._ready.wait(60), "the test never handed the URL over"
        return self._url


def _recorded(handle: Any) -> collections.Counter[tuple[str, str]]:
    """(action, outcome) of every transaction the runner recorded."""
    return collections.Counter(
        (t["action"] or "BATCH", "ok" if t["ok"] else "failed")
        for t in handle.metrics()["transactions"]
    )


def _transactions(samples: dict[Any, float]) -> dict[tuple[str, str], float]:
    return {
        (dict(labels)["action"], dict(labels)["outcome"]): v
        for (name, labels), v in samples.items()
        if name == "statefulbolts_transactions_total"
    }


def _histogram_counts(samples: dict[Any, float]) -> dict[str, float]:
    return {
        dict(labels)["action"]: v
        for (name, labels), v in samples.items()
        if name == "statefulbolts_transaction_duration_seconds_count"
    }


def _assert_histogram_matches(samples: dict[Any, float]) -> None:
    """Per action: buckets rise to +Inf, which is the count, which is the transactions total."""
    per_action = collections.Counter[str]()
    for (action, _), n in _transactions(samples).items():
        per_action[action] += int(n)
    assert _histogram_counts(samples) == dict(per_action)
    for action, count in per_action.items():
        buckets = sorted(
            (float(dict(labels)["le"]), v)
            for (name, labels), v in samples.items()
            if name == "statefulbolts_transaction_duration_seconds_bucket"
            and dict(labels)["action"] == action
        )
        assert [v for _, v in buckets] == sorted(v for _, v in buckets)
        assert buckets[-1] == (float("inf"), count)


def _tuples(samples: dict[Any, float], component: str) -> dict[str, float | None]:
    return {
        what: value(samples, f"statefulbolts_tuples_{what}_total", component=component)
        for what in ("emitted", "acked", "failed", "replayed", "executed")
    }


# ----------------------------------------------------------------------- the checkpoint protocol


def test_wordcount_metrics_during_and_after_the_run(cluster: Any) -> None:
    name = topo.new_key("ui-wc")
    during: list[dict[Any, float]] = []
    url = Url()

    def on_transaction(info: Any) -> None:
        if info.action == "COMMIT" and info.txid == 3:
            during.append(scrape(url.get()))  # the driver waits in this step: mid-run, exactly

    topology = burst_wordcount(SENTENCES, BURST)
    handle = cluster.submit_topology(name, UI, topology, on_transaction=on_transaction)
    try:
        url.set(handle.ui_url)
        handle.await_idle(TIMEOUT)
        after = scrape(handle.ui_url)
        recorded = _recorded(handle)
        status = handle.status()
        counts = handle.read_state("count")
    finally:
        handle.kill()

    expected = expected_counts(SENTENCES)
    words = sum(expected.values())
    assert counts == dict(expected)

    # Mid-run, at COMMIT(3): four bursts committed and acked, the topology running.
    [mid] = during
    assert _transactions(mid) == {
        ("INITSTATE", "ok"): 1,
        ("PREPARE", "ok"): 4,
        ("COMMIT", "ok"): 4,
    }
    assert _tuples(mid, "sentences")["acked"] == 4 * BURST
    assert value(mid, "statefulbolts_topology_up", state="running") == 1
    _assert_histogram_matches(mid)

    # At the end: everything the run recorded, exact.
    transactions = _transactions(after)
    assert transactions == {k: float(v) for k, v in recorded.items()}
    assert transactions == {
        ("INITSTATE", "ok"): 1,
        ("PREPARE", "ok"): SENTENCES // BURST,
        ("COMMIT", "ok"): SENTENCES // BURST,
    }
    _assert_histogram_matches(after)
    last = SENTENCES // BURST - 1
    assert status["checkpoint"] == f"COMMITTED({last})"
    assert value(after, "statefulbolts_committed_txid") == last
    assert value(after, "statefulbolts_pending_tuple_trees") == 0
    assert value(after, "statefulbolts_topology_up", state="idle") == 1
    assert _tuples(after, "sentences") == {
        "emitted": SENTENCES,
        "acked": SENTENCES,
        "failed": 0,
        "replayed": 0,
        "executed": 0,
    }
    assert _tuples(after, "split") == {
        "emitted": words,
        "acked": SENTENCES,
        "failed": 0,
        "replayed": 0,
        "executed": SENTENCES,
    }
    assert _tuples(after, "count")["executed"] == words
    assert value(after, "statefulbolts_recoveries_total", kind="INITSTATE") == 1
    assert value(after, "statefulbolts_state_backend_errors_total") == 0
    assert value(after, "statefulbolts_state_backend_outage_seconds_total") == 0
    assert value(after, "statefulbolts_state_backend_down") == 0


def test_failed_job_shows_failures_replays_recoveries_and_the_traceback(
    cluster: Any, tmp_path: Path
) -> None:
    """Every Spark attempt of PREPARE(1) raises: ROLLBACK(1), INITSTATE(0), PREPARE(1) again."""
    n, burst, target = 40, 20, 30
    attempts = int(cluster.spark.sparkContext.master.rstrip("]").rsplit(",", 1)[1])
    name = topo.new_key("ui-fail")
    bolt = topo.FailJobOnce(target, str(tmp_path / "job.log"), attempts)
    topology = topo.direct_into(name, n, bolt, burst=burst, grouping=topo.by_value)
    handle = cluster.submit_topology(name, UI, topology)
    try:
        handle.await_idle(TIMEOUT)
        samples = scrape(handle.ui_url)
        page = snapshot(handle.ui_url)
        state = handle.read_state("sink")
    finally:
        handle.kill()

    assert state == dict.fromkeys(range(n), 1)
    assert _transactions(samples) == {
        ("INITSTATE", "ok"): 2,
        ("PREPARE", "ok"): 2,
        ("PREPARE", "failed"): 1,
        ("ROLLBACK", "ok"): 1,
        ("COMMIT", "ok"): 2,
    }
    _assert_histogram_matches(samples)
    # The rolled-back burst (20 tuples) was failed once at the spout and emitted again once.
    assert _tuples(samples, "src") == {
        "emitted": n + burst,
        "acked": n,
        "failed": burst,
        "replayed": burst,
        "executed": 0,
    }
    assert {
        kind: value(samples, "statefulbolts_recoveries_total", kind=kind)
        for kind in ("INITSTATE", "ROLLBACK", "RETRY")
    } == {"INITSTATE": 2, "ROLLBACK": 1, "RETRY": 1}
    assert value(samples, "statefulbolts_committed_txid") == 1

    # The page's JSON: the failure with the worker's traceback, and the recoveries in order.
    [error] = page["errors"]
    assert (error["kind"], error["component"], error["txid"]) == ("failed", "sink", 1)
    assert f"job-failing fault on {target}" in error["text"]
    trace = error["traceback"]
    assert trace.startswith("Traceback (most recent call last):")
    assert "topologies.py" in trace and "in execute" in trace
    assert f"RuntimeError: job-failing fault on {target}" in trace
    assert "statefulbolts-task-error" not in trace
    assert [(r["kind"], r["txid"], r["ok"]) for r in reversed(page["recoveries"])] == [
        ("INITSTATE", -1, True),
        ("RETRY", 1, False),
        ("ROLLBACK", 1, True),
        ("INITSTATE", 0, True),
    ]
    src = next(c for c in page["components"] if c["id"] == "src")
    assert (src["failed"], src["replayed"]) == (burst, burst)


# ----------------------------------------------------------------- the transactional protocol


def test_transactional_global_count_metrics(cluster: Any) -> None:
    tid = f"ui-gc-{uuid.uuid4().hex[:8]}"
    spout = MemoryTransactionalSpout(DATA, ["word"], 3)
    builder = TransactionalTopologyBuilder(tid, "spout", spout, 3)
    builder.set_bolt("partial", BatchCount(), 5).none_grouping("spout")
    builder.set_bolt("sum", UpdateGlobalCount()).global_grouping("partial")
    during: list[dict[Any, float]] = []
    url = Url()

    def on_transaction(info: Any) -> None:
        if info.action == "COMMIT" and info.txid == 1:
            during.append(scrape(url.get()))

    conf = {**UI, "topology.max.spout.pending": 3}
    handle = cluster.submit_topology(
        tid, conf, builder.build_topology(), on_transaction=on_transaction
    )
    try:
        url.set(handle.ui_url)
        handle.await_idle(TIMEOUT)
        after = scrape(handle.ui_url)
        total = handle.read_state("sum")
        page = snapshot(handle.ui_url)
    finally:
        handle.kill()

    words = sum(len(rows) for rows in DATA.values())
    assert total == {GLOBAL_KEY: words}
    [mid] = during
    assert _transactions(mid) == {("COMMIT", "ok"): 1}
    assert value(mid, "statefulbolts_topology_up", state="running") == 1

    # An idle transactional topology still starts an empty txid now and then, to see whether
    # data came: every figure is compared within one scrape (one moment of the driver loop).
    commits = _transactions(after)[("COMMIT", "ok")]
    assert set(_transactions(after)) == {("COMMIT", "ok")}
    assert commits >= 4  # three batches with data, then at least one empty one
    _assert_histogram_matches(after)
    assert value(after, "statefulbolts_committed_txid") == commits  # txids count from 1
    assert page["committed_txid"] == page["committed"]
    assert page["status"]["current_txid"] == page["committed_txid"] + 1
    # Tuple trees are the checkpoint protocol's: a transactional topology has no such gauge.
    assert value(after, "statefulbolts_pending_tuple_trees") is None
    assert _tuples(after, "spout")["emitted"] == words
    assert _tuples(after, "partial")["executed"] == words
    # Every batch, empty or not, gets one partial count from each of the 5 partial tasks.
    assert _tuples(after, "sum")["executed"] == 5 * commits
    # The committer's size: its one task's map holds the one global key (counted after the
    # first commit; the processing bolt keeps no state and has no size).
    assert value(after, "statefulbolts_state_keys", component="sum") == 1
    assert value(after, "statefulbolts_state_keys", component="partial") is None
    assert {n for _, _, n in page["history"]["state_keys"]["sum"]} == {1}


# ------------------------------------------------------------------------ Redis stream spout lag


@pytest.mark.redis
def test_redis_stream_spout_lag_drops_to_zero(cluster: Any, redis_db: Any) -> None:
    n = 60
    name = topo.new_key("ui-lag")
    stream = f"{name}-sentences"
    load_stream(redis_db.url, stream, [sentence(i) for i in range(n)])
    builder = TopologyBuilder()
    builder.set_spout("sentences", RedisStreamSpout(stream, redis_url=redis_db.url, batch=25))
    builder.set_bolt("split", SplitSentence(), 2).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(), 2).fields_grouping("split", Fields("word"))
    first: list[float | None] = []
    url = Url()

    def on_transaction(info: Any) -> None:
        # INITSTATE(-1) ends before any commit: nothing is acknowledged in the group yet.
        if info.action == "INITSTATE" and not first:
            lag = value(scrape(url.get()), "statefulbolts_spout_lag", component="sentences")
            first.append(lag)

    topology = builder.create_topology()
    handle = cluster.submit_topology(name, UI, topology, on_transaction=on_transaction)
    try:
        url.set(handle.ui_url)
        handle.await_idle(TIMEOUT)
        # The spout sends its XACKs on its next call after the commit; the lag follows.
        after = scrape_until(
            handle.ui_url,
            lambda s: value(s, "statefulbolts_spout_lag", component="sentences") == 0,
            "the spout lag to reach 0",
        )
        counts = handle.read_state("count")
    finally:
        handle.kill()

    assert first == [n]
    assert counts == dict(expected_counts(n))
    assert _tuples(after, "sentences")["acked"] == n
    client = redis_db.client()
    assert client.xpending(stream, name)["pending"] == 0


# --------------------------------------------------------------------- a state backend outage


@pytest.mark.redis
def test_state_backend_outage_is_counted(cluster: Any, redis_server_factory: Any) -> None:
    """Redis stops right after COMMIT(1) and comes back a little later; the run ends exact."""
    server = redis_server_factory(appendonly=True)
    name = topo.new_key("ui-outage")
    stopped = []

    def on_transaction(info: Any) -> None:
        if info.action == "COMMIT" and info.txid == 1 and info.ok and not stopped:
            server.stop()  # the driver's next state call (saving PREPARING(2)) fails
            stopped.append(time.monotonic())

    conf = redis_conf(
        server.port,
        **{
            "topology.ui.port": 0,
            "topology.max.transaction.retries": 1,
            "topology.state.backend.timeout.secs": 120,
        },
    )
    handle = cluster.submit_topology(
        name, conf, burst_wordcount(SENTENCES, BURST), on_transaction=on_transaction
    )
    try:
        # While it is down: the driver waits inside a step, the scrape still answers.
        down = scrape_until(
            handle.ui_url,
            lambda s: value(s, "statefulbolts_state_backend_down") == 1,
            "the outage to show",
        )
        page = snapshot(handle.ui_url)
        server.start(port=server.port)
        handle.await_idle(TIMEOUT)
        after = scrape(handle.ui_url)
        counts = handle.read_state("count")
    finally:
        handle.kill()

    assert counts == dict(expected_counts(SENTENCES))
    assert page["backend"]["down"] is True and page["stale"] is True
    errors_down = value(down, "statefulbolts_state_backend_errors_total")
    outage_down = value(down, "statefulbolts_state_backend_outage_seconds_total")
    assert errors_down is not None and errors_down >= 1
    assert outage_down is not None
    assert value(after, "statefulbolts_state_backend_down") == 0
    errors_after = value(after, "statefulbolts_state_backend_errors_total")
    outage_after = value(after, "statefulbolts_state_backend_outage_seconds_total")
    assert errors_after is not None and errors_after >= errors_down
    # The outage went on after the first scrape saw it, until a call succeeded after the restart.
    assert outage_after is not None and outage_after > outage_down
    # Waited out, not spent from the transaction retries: every transaction committed.
    assert _transactions(after)[("COMMIT", "ok")] == SENTENCES // BURST


# ------------------------------------------------------------------- without Spark: the figures


def test_failure_gate_counts_backend_errors_and_outage_time() -> None:
    import threading

    from providers import StateBackendError
    from recovery.gate import Failure, FailureGate
    from statefulbolts import validate_config

    clock = ManualClock()
    gate = FailureGate("t", validate_config({}), clock, threading.Event())
    calls = iter([StateBackendError("down"), StateBackendError("still down"), "ok"])

    def call() -> str:
        got = next(calls)
        if isinstance(got, Exception):
            raise got
        return got

    assert gate.with_backend("saving", call) == "ok"
    # Two failures, waited out by the clock: 0.25 s then 0.5 s (recovery.retry's backoff).
    assert (gate.backend_errors, gate.outage_seconds, gate.backend_down) == (2, 0.75, False)
    gate.failed("PREPARE(3)", 3, "StateBackendError: down", failure=Failure.OUTAGE)
    clock.advance(2000)
    assert (gate.backend_errors, gate.outage_seconds, gate.backend_down) == (3, 2.75, True)
    gate.succeeded()
    clock.advance(5000)
    assert (gate.backend_errors, gate.outage_seconds, gate.backend_down) == (3, 2.75, False)
