"""The dashboard's state size: committed keys per component, charted, in JSON and in /metrics.

Topologies run on the inline engine (no Spark), with their dashboard; the page is rendered
by a real headless Chromium (``ui_browser``). A provider that cannot count its keys shows the
size as unknown, in words, and never as a line at zero.
"""

from __future__ import annotations

import json
import uuid
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from ui_browser import dump_dom
from ui_topologies import scrape, snapshot, value, wait_for

from examples.wordcount import build as build_wordcount
from examples.wordcount import expected_counts
from providers import STATE_PROVIDER_CONFIG_KEY, STATE_PROVIDER_KEY, InMemoryKeyValueStateProvider
from statefulbolts import LocalCluster

UI = {"topology.ui.port": 0, "topology.state.checkpoint.interval.ms": 1}
TIMEOUT = 60

# The SQLite provider with its key count taken away: an extlib provider that cannot count.
COUNTLESS = '''
"""The SQLite provider, without committed_key_counts."""
from providers import StateProvider, load_module

_sqlite = load_module("sqlite_state")


class Provider(_sqlite.SqliteKeyValueStateProvider):
    """Keeps states in SQLite and cannot count them."""

    committed_key_counts = StateProvider.committed_key_counts
'''


class _Ids(HTMLParser):
    """Each element with an ``id``: its attributes and its text."""

    def __init__(self) -> None:
        super().__init__()
        self.attrs: dict[str, dict[str, str]] = {}
        self.text: dict[str, str] = {}
        self._open: list[str | None] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        if "id" in values:
            self.attrs[values["id"]] = values
        self._open.append(values.get("id"))

    def handle_endtag(self, tag: str) -> None:
        if self._open:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        for element in self._open:
            if element is not None:
                self.text[element] = self.text.get(element, "") + data


def _page(url: str) -> _Ids:
    page = _Ids()
    page.feed(dump_dom(url))
    return page


def _last_counted(url: str, component: str, txid: int) -> dict[str, Any]:
    """The snapshot once the count after ``txid`` is in (the loop may take it an interval late)."""

    def check() -> dict[str, Any] | None:
        live = snapshot(url)
        points = live["history"]["state_keys"].get(component) or []
        return live if points and points[-1][1] == txid else None

    found: dict[str, Any] = wait_for(check, TIMEOUT, f"the count of {component} after {txid}")
    return found


def _committed(handle: Any) -> int:
    return int(handle.status()["checkpoint"].removeprefix("COMMITTED(").removesuffix(")"))


def test_the_page_charts_each_components_committed_keys() -> None:
    name = f"ui-keys-{uuid.uuid4().hex[:8]}"
    words = len(expected_counts(60))
    with LocalCluster(engine="inline") as cluster:
        handle = cluster.submit_topology(name, UI, build_wordcount(60))
        try:
            handle.await_idle(TIMEOUT)
            url = handle.ui_url
            assert url is not None
            live = _last_counted(url, "count", _committed(handle))
            samples = scrape(url)
            page = _page(url)
            metrics = handle.metrics()
        finally:
            handle.kill()
            InMemoryKeyValueStateProvider.drop(f"{name}/")
    points = live["history"]["state_keys"]["count"]
    assert list(live["history"]["state_keys"]) == ["count"]
    assert points[-1][2] == words
    assert all(isinstance(n, int) for _, _, n in points)
    assert value(samples, "statefulbolts_state_keys", component="count") == words
    assert metrics["state_keys"] == {"count": words}
    # The chart: one series per stateful component, its last value the count; no "unknown".
    chart = page.attrs["chart-keys"]
    assert chart["data-series"] == "count"
    assert chart["data-last"] == f"count={words}"
    assert int(chart["data-points"]) == len(points)
    assert "hidden" not in chart and chart["data-unknown"] == ""
    assert "hidden" in page.attrs["no-keys"]
    assert page.text["keys-note"] == f"count: {words:,} keys"


def test_a_provider_that_cannot_count_shows_the_size_as_unknown(tmp_path: Path) -> None:
    extlib = tmp_path / "extlib"
    extlib.mkdir()
    (extlib / "countless_sqlite.py").write_text(COUNTLESS)
    conf = {
        **UI,
        STATE_PROVIDER_KEY: "countless_sqlite.Provider",
        STATE_PROVIDER_CONFIG_KEY: json.dumps({"path": str(tmp_path / "state.sqlite3")}),
        "topology.state.extlib.dir": str(extlib),
    }
    name = f"ui-unknown-{uuid.uuid4().hex[:8]}"
    with LocalCluster(engine="inline") as cluster:
        handle = cluster.submit_topology(name, conf, build_wordcount(20))
        try:
            handle.await_idle(TIMEOUT)
            url = handle.ui_url
            assert url is not None
            live = _last_counted(url, "count", _committed(handle))
            counts = handle.read_state("count")
            samples = scrape(url)
            page = _page(url)
        finally:
            handle.kill()
    assert counts == dict(expected_counts(20))  # the state is there; only its size is unknown
    assert {n for _, _, n in live["history"]["state_keys"]["count"]} == {None}
    assert value(samples, "statefulbolts_state_keys", component="count") is None
    chart = page.attrs["chart-keys"]
    assert "hidden" in chart and chart["data-unknown"] == "count"
    assert "hidden" not in page.attrs["no-keys"]
    assert page.text["no-keys"].startswith("State size unknown for count: the state provider")
    assert page.text["keys-note"] == "count: unknown"
