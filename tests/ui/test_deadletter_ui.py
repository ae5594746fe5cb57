"""Dead letters on the dashboard and on ``/metrics``, from a real run with a poison sentence.

The word count's count bolt raises on ``poison`` (``deadletter_topologies``); with the default
policy the sentence is dead-lettered and the run goes on. The page (rendered by headless
Chromium) shows the count per component and the record; ``/metrics`` has the counter per
component and the gauge of records held; ``/api/snapshot`` carries what the page drew.
"""

from __future__ import annotations

from typing import Any

import deadletter_topologies as dl
import pytest
import topologies as topo
from test_ui_dashboard import _component_rows, _parse
from ui_browser import dump_dom
from ui_topologies import scrape, snapshot, value

from statefulbolts.deadletter import DeadLetterStore

pytestmark = pytest.mark.spark

TIMEOUT = 120


def test_the_dashboard_and_metrics_show_the_dead_letter(cluster: Any) -> None:
    name = topo.new_key("dl-ui")
    lines = dl.sentences(40, [11])
    spout = topo.ValueSpout(name, lines, fields=("sentence",))
    conf = {"topology.ui.port": 0, "topology.state.checkpoint.interval.ms": 100}
    handle = cluster.submit_topology(name, conf, dl.wordcount(spout))
    try:
        handle.await_idle(TIMEOUT)
        url = handle.ui_url
        assert url is not None
        samples = scrape(url)
        live = snapshot(url)
        page = _parse(dump_dom(url))
    finally:
        handle.kill()
    [record] = DeadLetterStore({}, topology=name).records()

    assert value(samples, "statefulbolts_tuples_dead_lettered_total", component="count") == 1
    assert value(samples, "statefulbolts_tuples_dead_lettered_total", component="split") == 0
    assert value(samples, "statefulbolts_dead_letters") == 1

    dead = live["dead_letters"]
    assert (dead["policy"], dead["held"], dead["dead_lettered"]) == ("isolate", 1, {"count": 1})
    [shown] = dead["last"]
    assert (shown["id"], shown["component"], shown["values"]) == (record.id, "count", "['poison']")
    assert shown["error"] == "ValueError: cannot count 'poison'" and shown["attempts"] == 2
    assert [c["dead_lettered"] for c in live["components"] if c["id"] == "count"] == [1]

    # The page: the components table's dead-lettered column, the dead letters panel.
    rows = _component_rows(page)
    header = ["executed", "emitted", "acked", "failed", "replayed", "errors", "dead-lettered"]
    assert rows["count"][1][3 + header.index("dead-lettered")] == "1"
    assert rows["split"][1][3 + header.index("dead-lettered")] == "0"
    letters = [(a["data-letter"], cells) for a, cells in page.rows if "data-letter" in a]
    assert letters == [(record.id, [record.id, "count", str(record.task_index), "['poison']",
                                    "ValueError: cannot count 'poison'", "2"])]  # fmt: skip
    assert page.text["dead-held"] == "1 held · policy isolate"
