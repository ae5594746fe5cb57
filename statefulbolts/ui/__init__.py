"""The live dashboard and Prometheus metrics of a running topology, served by its driver.

Turn it on with ``topology.ui.port`` (0: a free port) in the topology's config, or
``statefulbolts run ... --ui [PORT]``; ``handle.ui_url`` (and the log, and the command line) say
where it is. The page shows the topology as a picture; per component, and per task when
expanded, counters, latency, capacity (busy time / wall time) and tuples per second over the
last minute or ten; pending tuple trees against ``topology.max.spout.pending``; charts of the
transactions' durations, of each stateful component's size (its committed keys) and of the
state change bytes per checkpoint; the transaction timeline, the current
phase, recoveries, recent errors with their tracebacks and a link to the Spark UI. It refreshes
every second; ``/metrics`` serves the same figures to Prometheus. It answers only requests
whose ``Host`` is a loopback name or ``topology.ui.host``, warns once when it listens beyond
loopback, and stops when the topology is killed.

Needs the ``ui`` extra: ``pip install 'statefulbolts[ui]'`` (Starlette, uvicorn,
prometheus_client).

Example:
    >>> conf = {"topology.ui.port": 0}
    >>> handle = cluster.submit_topology("wc", conf, topology)  # doctest: +SKIP
    >>> handle.ui_url  # doctest: +SKIP
    'http://127.0.0.1:40117/'
"""

from __future__ import annotations

from statefulbolts.ui._deps import INSTALL
from statefulbolts.ui._graph import topology_graph
from statefulbolts.ui._metrics import TopologyCollector
from statefulbolts.ui._server import DashboardServer

__all__ = ["INSTALL", "DashboardServer", "TopologyCollector", "topology_graph"]
