"""Rates, task rows, capacity and the Host check of a real word count run on local Spark.

One run serves the module. Its ``on_transaction`` callback runs on the driver thread inside a
step, so at each COMMIT the counters are exactly those of the transactions committed so far:
there a test ``LiveFigures`` over the runner's own ``Stats`` takes its samples, on a
``ManualClock`` moved by hand (1 s per commit, then 20 s), and the rates it shows at the end
are checked against the counters each sample saw, exactly.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import topologies as topo
from outage_topologies import burst_wordcount
from ui_browser import dump_dom
from ui_topologies import scrape, snapshot, value, wait_for

from examples.wordcount import expected_counts
from statefulbolts import LocalCluster
from statefulbolts.clock import ManualClock
from statefulbolts.ui import DashboardServer
from statefulbolts.ui._live import LiveFigures

pytestmark = pytest.mark.spark

SENTENCES, BURST = 200, 20  # one burst per transaction: COMMIT(0) .. COMMIT(9)
MAX_PENDING = 50
KINDS = {"sentences": "spout", "split": "bolt", "count": "stateful bolt"}


class _Sampler:
    """Takes the test's samples at each COMMIT, on the driver thread (see the module)."""

    def __init__(self) -> None:
        self.clock = ManualClock()
        self.live: LiveFigures | None = None
        self.stats: Any = None
        self.seen: dict[float, dict[tuple[str, int], dict[str, float]]] = {}
        self._ready = threading.Event()

    def attach(self, stats: Any) -> None:
        self.stats = stats
        self.live = LiveFigures(stats, KINDS, self.clock)
        self._ready.set()

    def __call__(self, info: Any) -> None:
        if info.action != "COMMIT" or not info.ok:
            return
        assert self._ready.wait(60), "the test never attached the runner's stats"
        assert self.live is not None
        self.clock.advance(1000 if info.txid < 5 else 20_000)
        self.live.sample()
        self.seen[self.clock.now_ms() / 1000] = self.stats.task_counters()


@pytest.fixture(scope="module")
def run(spark: Any) -> Iterator[dict[str, Any]]:
    cluster = LocalCluster(spark=spark)
    sampler = _Sampler()
    name = topo.new_key("ui-live")
    conf = {
        "topology.ui.port": 0,
        "topology.state.checkpoint.interval.ms": 100,
        "topology.max.spout.pending": MAX_PENDING,
    }
    topology = burst_wordcount(SENTENCES, BURST)
    handle = cluster.submit_topology(name, conf, topology, on_transaction=sampler)
    try:
        sampler.attach(handle.runner.stats)
        handle.await_idle(120)
        yield {
            "handle": handle,
            "url": handle.ui_url,
            "sampler": sampler,
            "topology": topology,
            "final": handle.runner.stats.task_counters(),
        }
    finally:
        cluster.shutdown()


def test_rates_and_capacity_are_the_counters_growth_over_each_window(run: Any) -> None:
    sampler, final = run["sampler"], run["final"]
    assert sorted(sampler.seen) == [1, 2, 3, 4, 5, 25, 45, 65, 85, 105]
    view = sampler.live.view()  # at 105 s: the last sample's moment
    # The minute is based on the sample at 45 s (COMMIT(6)); ten minutes on the first (1 s).
    assert view["spans"] == {"1m": 60.0, "10m": 104.0}
    bases = {"1m": sampler.seen[45], "10m": sampler.seen[1]}
    checked = 0
    for cid, component in view["components"].items():
        for task in component["tasks"]:
            now = final[(cid, task["index"])]
            for window, base in bases.items():
                then = base[(cid, task["index"])]
                span = view["spans"][window]
                for counter in ("emitted", "acked", "failed", "executed"):
                    growth = now.get(counter, 0) - then.get(counter, 0)
                    assert task["rates"][window][counter] == round(growth / span, 4)
                if "seconds" in now:
                    busy = now["seconds"] - then["seconds"]
                    assert task["capacity"][window] == round(busy / span, 6)
                    assert 0 <= task["capacity"][window] < 1
                checked += 1
    assert checked == 2 * 5  # five tasks (1 + 2 + 2), two windows
    # COMMIT(6) had seen seven bursts of the ten: three in the last minute, a tuple a second.
    assert view["components"]["split"]["rates"]["1m"]["executed"] == 3 * BURST / 60
    assert view["components"]["split"]["rates"]["10m"]["executed"] == round(9 * BURST / 104, 4)
    # The topology's trees: the spout's acks, every one of them acked by now.
    assert view["total"]["10m"]["acked"] == round(
        (SENTENCES - sampler.seen[1][("sentences", 0)]["acked"]) / 104, 4
    )


def test_task_rows_add_up_to_the_components(run: Any) -> None:
    page = snapshot(run["url"])
    topology = run["topology"]
    words = sum(expected_counts(SENTENCES).values())
    rows = {c["id"]: c for c in page["components"]}
    for cid in ("sentences", "split", "count"):
        tasks = rows[cid]["tasks"]
        assert [t["task"] for t in tasks] == list(topology.task_ids(cid))
        assert [t["index"] for t in tasks] == list(range(len(tasks)))
        for counter in ("executed", "emitted", "acked", "failed"):
            assert sum(t[counter] for t in tasks) == rows[cid][counter], (cid, counter)
    assert sum(t["executed"] for t in rows["split"]["tasks"]) == SENTENCES
    assert sum(t["executed"] for t in rows["count"]["tasks"]) == words
    [spout] = rows["sentences"]["tasks"]
    assert (spout["emitted"], spout["acked"], spout["pending"]) == (SENTENCES, SENTENCES, 0)
    assert all(t["capacity"]["1m"] is not None for t in rows["count"]["tasks"])
    assert page["backpressure"] == {
        "what": "tuple trees",
        "pending": 0,
        "limit": MAX_PENDING,
        "fill": 0.0,
    }
    # Every checkpoint of the in-memory provider has its size; the durations are the run's.
    sizes = page["history"]["checkpoint_sizes"]
    assert list(sizes) == ["count"]
    assert [txid for _, txid, _ in sizes["count"]] == list(range(SENTENCES // BURST))
    assert all(size > 0 for _, _, size in sizes["count"])
    actions = [(d["txid"], d["action"]) for d in page["history"]["durations"]]
    assert actions[0] == (-1, "INITSTATE")
    assert actions[1:] == [(t, a) for t in range(SENTENCES // BURST) for a in ("PREPARE", "COMMIT")]


def test_metrics_carry_the_task_series(run: Any) -> None:
    samples = scrape(run["url"])
    final = run["final"]
    for (cid, _), row in final.items():
        task = str(row["task"])
        for counter in ("emitted", "acked", "failed", "executed"):
            name = f"statefulbolts_task_tuples_{counter}_total"
            assert value(samples, name, component=cid, task=task) == row.get(counter, 0)
        busy = value(samples, "statefulbolts_task_busy_seconds_total", component=cid, task=task)
        assert busy == row.get("seconds")
    spout_task = str(final[("sentences", 0)]["task"])
    pending = "statefulbolts_spout_pending_tuple_trees"
    assert value(samples, pending, component="sentences", task=spout_task) == 0
    assert value(samples, "statefulbolts_max_spout_pending") == MAX_PENDING
    sizes = run["handle"].runner.stats.checkpoint_sizes()["count"]
    size = value(samples, "statefulbolts_checkpoint_size_bytes", component="count")
    assert size == sizes[-1].size


def _request(url: str, host: str | None, path: str = "/api/snapshot") -> tuple[int, bytes]:
    address, port = url.removeprefix("http://").rstrip("/").rsplit(":", 1)
    conn = http.client.HTTPConnection(address, int(port), timeout=30)
    try:
        conn.putrequest("GET", path, skip_host=True)
        if host is not None:
            conn.putheader("Host", host)
        conn.endheaders()
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


@pytest.mark.parametrize("path", ["/", "/api/snapshot", "/api/topology", "/metrics"])
def test_a_foreign_host_header_gets_400_and_no_data(run: Any, path: str) -> None:
    url, name = run["url"], run["handle"].name
    port = url.rstrip("/").rsplit(":", 1)[1]
    for host in (f"evil.example:{port}", "evil.example", f"127.0.0.1.evil.example:{port}", None):
        status, body = _request(url, host, path)
        assert status == 400, (host, path)
        assert name.encode() not in body and b"Traceback" not in body
        # Without a Host, HTTP/1.1 itself (h11) refuses the request before the check does.
        assert host is None or b"does not answer to Host" in body
    for host in (f"127.0.0.1:{port}", f"localhost:{port}", "LOCALHOST", f"[::1]:{port}"):
        status, body = _request(url, host, path)
        assert status == 200, (host, path, body[:200])


def test_a_link_chooses_the_ten_minute_window(run: Any) -> None:
    dom = dump_dom(run["url"] + "?window=10m")
    assert 'data-window="10m" class="on"' in dom
    assert "rates and capacity over the last 10 min" in dom
    assert "Emitted <span class=\"window-name\">· 10 min</span>" in dom


def test_the_sampler_samples_without_a_reader_and_stops_with_the_server(run: Any) -> None:
    clock = ManualClock()
    server = DashboardServer(run["handle"].runner, run["topology"], port=0, clock=clock)
    before = {t.ident for t in threading.enumerate()}
    server.start()
    try:
        history = server.live.history
        wait_for(lambda: history.times("1m") == [0.0], 30, "the sampler's first sample")
        clock.advance(5000)
        wait_for(lambda: history.times("1m") == [0.0, 5.0], 30, "a sample 5 s later")
        assert history.times("10m") == [0.0]  # its step is 10 s
    finally:
        server.stop()
    # Its threads (uvicorn's, the sampler) are gone with it.
    left = [t.name for t in threading.enumerate() if t.ident not in before]
    assert left == [] and not server.running
