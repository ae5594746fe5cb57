"""The live dashboard in a real headless Chromium, its JSON endpoints, and its lifecycle.

Chromium loads only the dashboard's 127.0.0.1 URL (``ui_browser``). The page is read back as
the DOM its script built (``--dump-dom``), parsed with ``html.parser``: the picture's boxes,
the component table and the transaction rows carry ``data-*`` attributes with their ids.
"""

from __future__ import annotations

import json
import socket
import threading
import uuid
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import topologies as topo
from outage_topologies import burst_wordcount
from ui_browser import dump_dom, png_size, screenshot
from ui_topologies import get, snapshot, wait_for

from examples.transactional_global_count import DATA, BatchCount, UpdateGlobalCount
from examples.wordcount import expected_counts
from statefulbolts import (
    ConfigError,
    MemoryTransactionalSpout,
    TransactionalTopologyBuilder,
)
from statefulbolts.cli import _child_command, _parser

pytestmark = pytest.mark.spark

UI = {"topology.ui.port": 0, "topology.state.checkpoint.interval.ms": 100}
TIMEOUT = 120


class _Elements(HTMLParser):
    """Every element's tag and attributes, the text inside each ``tr``, and by ``id``."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[tuple[str, dict[str, str]]] = []
        self.rows: list[tuple[dict[str, str], list[str]]] = []
        self.text: dict[str, str] = {}
        self._row: list[str] | None = None
        self._id: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        self.elements.append((tag, values))
        self._id = values.get("id")
        if tag == "tr":
            self._row = []
            self.rows.append((values, self._row))

    def handle_endtag(self, tag: str) -> None:
        self._id = None
        if tag == "tr":
            self._row = None

    def handle_data(self, data: str) -> None:
        if self._id is not None:
            self.text[self._id] = self.text.get(self._id, "") + data
        if self._row is not None and data.strip():
            self._row.append(data.strip())


def _parse(dom: str) -> _Elements:
    parser = _Elements()
    parser.feed(dom)
    return parser


def _boxes(page: _Elements) -> dict[str, str]:
    """The picture's boxes: component id -> parallelism."""
    return {
        a["data-component"]: a["data-parallelism"]
        for tag, a in page.elements
        if tag == "g" and "data-component" in a
    }


def _component_rows(page: _Elements) -> dict[str, tuple[str, list[str]]]:
    return {
        a["data-component"]: (a["data-parallelism"], cells)
        for a, cells in page.rows
        if "data-component" in a
    }


def _task_rows(page: _Elements) -> dict[str, list[int]]:
    """The task rows the component table shows: component id -> its task ids, in order."""
    found: dict[str, list[int]] = {}
    for a, _ in page.rows:
        if "data-task-of" in a:
            found.setdefault(a["data-task-of"], []).append(int(a["data-task"]))
    return found


def _element(page: _Elements, element_id: str) -> dict[str, str]:
    [attrs] = [a for _, a in page.elements if a.get("id") == element_id]
    return attrs


def _transaction_rows(page: _Elements) -> list[tuple[str, str, str]]:
    return [
        (a["data-txid"], a["data-action"], a["data-outcome"])
        for a, _ in page.rows
        if "data-action" in a and "data-kind" not in a
    ]


def test_wordcount_page_in_chromium(cluster: Any, tmp_path: Path) -> None:
    name = topo.new_key("ui-page")
    sentences, burst = 120, 20
    topology = burst_wordcount(sentences, burst)
    handle = cluster.submit_topology(name, {**UI, "topology.max.spout.pending": 40}, topology)
    try:
        handle.await_idle(TIMEOUT)
        url = handle.ui_url
        assert url is not None and url.startswith("http://127.0.0.1:")
        # The last commit's key count comes at most one topology.state.size.interval.ms late.
        last = sentences // burst - 1
        wait_for(
            lambda: (
                (snapshot(url)["history"]["state_keys"].get("count") or [[0, -1]])[-1][1] == last
            ),
            TIMEOUT,
            "the state size after the last commit",
        )
        page = _parse(dump_dom(url))
        shot = screenshot(url, tmp_path / "dashboard.png")
        graph = json.loads(get(url + "api/topology"))
        live = snapshot(url)
        status = handle.status()
    finally:
        handle.kill()

    # The picture: a box per component with its parallelism, and the groupings on the edges.
    assert _boxes(page) == {"$checkpointspout": "1", "sentences": "1", "split": "2", "count": "2"}
    assert [(e["source"], e["target"], e["label"]) for e in graph["edges"]] == [
        ("$checkpointspout", "split", "$checkpoint"),
        ("sentences", "split", "shuffle"),
        ("split", "count", "fields(word)"),
    ]
    assert [(n["id"], n["kind"], n["parallelism"]) for n in graph["nodes"]] == [
        ("$checkpointspout", "checkpoint spout", 1),
        ("sentences", "spout", 1),
        ("split", "bolt", 2),
        ("count", "stateful bolt", 2),
    ]
    # The component table, with the counts of the run.
    rows = _component_rows(page)
    words = sum(expected_counts(sentences).values())
    assert {cid: p for cid, (p, _) in rows.items()} == _boxes(page)
    assert rows["split"][1][:7] == [
        "split",
        "bolt",
        "2",
        f"{sentences:,}",
        f"{words:,}",
        f"{sentences:,}",
        "0",
    ]
    assert rows["sentences"][1][:7] == [
        "sentences",
        "spout",
        "1",
        "0",
        f"{sentences:,}",
        f"{sentences:,}",
        "0",
    ]
    # A committed transaction: the last COMMIT, whose txid the status shows committed.
    assert status["checkpoint"] == f"COMMITTED({last})"
    transactions = _transaction_rows(page)
    assert transactions[0] == (str(last), "COMMIT", "ok")
    assert transactions.count((str(last), "PREPARE", "ok")) == 1
    # Where the recent PREPAREs' time went: each phase named (docs/protocol/engine.md).
    breakdown = page.text["tx-breakdown"]
    assert breakdown.startswith("where a PREPARE's time went (mean of the last "), breakdown
    parts = ("waited ", "build ", "driver head ", "engine ", "Spark ", "tasks: setup ", "execute ")
    for part in (*parts, "settle "):
        assert part in breakdown, breakdown
    # Its PREPAREs were cut when their first task asked (``topology.input.cut``, the default).
    assert "of it before the cut " in breakdown and "the cut " in breakdown, breakdown
    # The JSON the page drew from.
    assert (live["topology"], live["kind"], live["state"]) == (name, "checkpoint", "idle")
    assert (live["committed_txid"], live["committed"], live["pending_trees"]) == (last, last + 1, 0)
    assert live["transactions"][0]["action"] == "COMMIT" and live["transactions"][0]["ok"]
    assert live["errors"] == [] and live["failed_transactions"] == 0
    assert live["spark_ui"] is None  # the test session runs without the Spark UI
    texts = [t for _, cells in page.rows for t in cells]
    assert texts  # the tables were filled by the script, not left as the static page
    assert png_size(shot) == (1400, 1000)

    # Rates: the topology's tuples emitted per second, and per component in its row.
    assert page.text["throughput"].endswith("/s") and page.text["throughput"] != "0/s"
    assert page.text["throughput-sub"].startswith("trees acked ")
    # The row's last figure: tuples executed per second over the last minute.
    assert rows["count"][1][-1] != "–" and float(rows["count"][1][-1].replace(",", "")) > 0
    # Task rows: the components with more than one task open into theirs, with their ids.
    assert _task_rows(page) == {
        "split": list(topology.task_ids("split")),
        "count": list(topology.task_ids("count")),
    }
    # Capacity, per component and per task: a number in each bolt's row, every task's too.
    capacities = [float(a["data-capacity"]) for tag, a in page.elements if "data-capacity" in a]
    assert len(capacities) == 2 + 4 and all(0 <= c < 1 for c in capacities)
    # Pending trees against topology.max.spout.pending (one spout task).
    assert page.text["pending"] == "0 / 40"
    # The charts, drawn by uPlot from the history the snapshot holds.
    durations = _element(page, "chart-durations")
    assert int(durations["data-points"]) == len(live["history"]["durations"])
    assert durations["data-series"] == "INITSTATE,PREPARE,COMMIT"
    keys = _element(page, "chart-keys")
    distinct = len(expected_counts(sentences))
    assert keys["data-series"] == "count"
    assert keys["data-last"] == f"count={distinct}" and distinct > 0
    assert live["history"]["state_keys"]["count"][-1][1:] == [last, distinct]
    assert page.text["keys-note"] == f"count: {distinct:,} keys"
    sizes = _element(page, "chart-sizes")
    assert sizes["data-series"] == "count"
    assert int(sizes["data-points"]) == len(live["history"]["checkpoint_sizes"]["count"])
    assert sum(1 for tag, a in page.elements if tag == "canvas") == 3
    assert any("uplot" in a.get("class", "").split() for _, a in page.elements)


def test_transactional_page_in_chromium(cluster: Any) -> None:
    tid = f"ui-tx-{uuid.uuid4().hex[:8]}"
    builder = TransactionalTopologyBuilder(
        tid, "spout", MemoryTransactionalSpout(DATA, ["word"], 3), 3
    )
    builder.set_bolt("partial", BatchCount(), 5).none_grouping("spout")
    builder.set_bolt("sum", UpdateGlobalCount()).global_grouping("partial")
    conf = {**UI, "topology.max.spout.pending": 3}
    handle = cluster.submit_topology(tid, conf, builder.build_topology())
    try:
        handle.await_idle(TIMEOUT)
        page = _parse(dump_dom(handle.ui_url))
    finally:
        handle.kill()

    assert _boxes(page) == {"spout": "3", "partial": "5", "sum": "1"}
    kinds = {cid: cells[1] for cid, (_, cells) in _component_rows(page).items()}
    assert kinds == {"spout": "transactional spout", "partial": "bolt", "sum": "committer"}
    # Idle, it still probes with an empty txid now and then: the page agrees with itself.
    committed = page.text["committed-txid"]
    assert int(committed) >= 4  # three batches with data, then an empty one at least
    assert _transaction_rows(page)[0] == (committed, "COMMIT", "ok")
    assert page.text["kind"] == "transactional"


# ----------------------------------------------------------------------------- the lifecycle


def _connect(url: str) -> None:
    host, port = url.removeprefix("http://").rstrip("/").rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5):
        pass


def _server_threads(name: str) -> list[str]:
    return [t.name for t in threading.enumerate() if t.name == f"sb-ui-{name}"]


def test_the_server_stops_with_the_topology(cluster: Any) -> None:
    name = topo.new_key("ui-stop")
    before = {t.ident for t in threading.enumerate()}
    handle = cluster.submit_topology(name, UI, burst_wordcount(40, 20))
    url = handle.ui_url
    assert url is not None
    html = get(url).decode()
    assert "<title>statefulbolts dashboard</title>" in html
    assert get(url + "static/dashboard.js").startswith(b"// The statefulbolts dashboard")
    assert _server_threads(name) == [f"sb-ui-{name}"]
    handle.await_idle(TIMEOUT)
    handle.kill()

    assert handle.ui_url is None
    assert _server_threads(name) == []
    with pytest.raises(ConnectionRefusedError):
        _connect(url)
    # No thread the run started outlives it (uvicorn's, Starlette's workers, the driver's).
    wait_for(
        lambda: not [t for t in threading.enumerate() if t.ident not in before],
        30,
        "the run's threads to end",
    )


def test_a_port_in_use_is_a_config_error_and_nothing_keeps_running(cluster: Any) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        name = topo.new_key("ui-taken")
        conf = {**UI, "topology.ui.port": port}
        with pytest.raises(ConfigError, match=f"127.0.0.1:{port} .*topology.ui.port"):
            cluster.submit_topology(name, conf, burst_wordcount(40, 20))
    # The topology was stopped again: its name is free, no server thread is left.
    assert _server_threads(name) == []
    handle = cluster.submit_topology(
        name, {"topology.state.checkpoint.interval.ms": 100}, burst_wordcount(40, 20)
    )
    try:
        handle.await_idle(TIMEOUT)
        assert handle.ui_url is None
    finally:
        handle.kill()


def test_the_command_line_option() -> None:
    parse = _parser().parse_args
    assert parse(["run", "m:f"]).ui is None
    assert parse(["run", "m:f", "--ui"]).ui == 0
    assert parse(["run", "m:f", "--ui", "8765"]).ui == 8765
    child = _child_command(parse(["run", "m:f", "--ui", "8765", "--supervise"]))
    assert child[child.index("--ui") + 1] == "8765"
    with pytest.raises(SystemExit):
        parse(["run", "m:f", "--ui", "eighty"])
