"""The dashboard's web server: a Starlette app run by uvicorn on a daemon thread of the driver.

Routes:

- ``/``: the page (``static/index.html``, with its script and style under ``/static/``). It
  fetches ``/api/topology`` once and polls ``/api/snapshot`` every second.
- ``/api/topology``: the picture's nodes and edges (``topology_graph``).
- ``/api/snapshot``: the live figures (``snapshot``).
- ``/metrics``: Prometheus' text format (``TopologyCollector``, in a registry of its own).

Every route answers only requests whose ``Host`` names the dashboard (``_hosts``: loopback
names, the configured host); the others get 400. Bound beyond loopback (``0.0.0.0``), the
server says so in one warning: the page shows errors and tracebacks, with no login.

A sampler thread records the runner's per-task counters every ``SAMPLE_SECONDS`` (stamped
with the runner's clock, or the one given: ``LiveFigures``), so the rates of the last minute
and ten minutes are there when the page opens.

``DashboardServer.start`` binds the socket itself before the thread starts, so a port in use
fails in the caller's thread with an error naming it, and port 0 (a free port) is known at once
(``url``). Every endpoint is a plain function, run by Starlette on its worker threads: reading
the runner never blocks the event loop. ``stop`` asks uvicorn to exit, waits for the thread and
closes the socket.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import uvicorn
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from statefulbolts.clock import Clock
from statefulbolts.errors import ConfigError
from statefulbolts.ui._graph import topology_graph
from statefulbolts.ui._hosts import HostCheck, allowed_hosts, exposure_warning
from statefulbolts.ui._live import LiveFigures, backpressure
from statefulbolts.ui._metrics import TopologyCollector
from statefulbolts.ui._snapshot import snapshot

if TYPE_CHECKING:
    from statefulbolts.runtime import Observation, TopologyRunner
    from statefulbolts.topology import StormTopology
    from statefulbolts.transactional import TransactionalTopology

__all__ = ["SAMPLE_SECONDS", "STATIC_DIR", "DashboardServer"]

log = logging.getLogger(__name__)

STATIC_DIR = Path(__file__).with_name("static")
# How long ``start`` waits for uvicorn to serve, and ``stop`` for it to end.
_START_TIMEOUT = 30.0
_STOP_TIMEOUT = 15.0
# How often the sampler records the counters (the shortest window's step: 60 s / 60).
SAMPLE_SECONDS = 1.0


class DashboardServer:
    """The live dashboard and ``/metrics`` of one running topology.

    Args:
        runner: the topology's ``TopologyRunner`` (``handle.runner``).
        topology: the topology it runs, for the picture.
        host: the address to listen on (default loopback only).
        port: the port; 0 picks a free one.
        spark_ui: the Spark UI's URL, linked from the page (``None``: the UI is disabled).
        clock: the clock of the rates (default: the runner's).

    Example:
        >>> server = DashboardServer(handle.runner, topology, port=0)  # doctest: +SKIP
        >>> server.start()  # doctest: +SKIP
        'http://127.0.0.1:40117/'
        >>> server.stop()  # doctest: +SKIP
    """

    def __init__(
        self,
        runner: TopologyRunner,
        topology: StormTopology | TransactionalTopology,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        spark_ui: str | None = None,
        clock: Clock | None = None,
    ) -> None:
        self._runner = runner
        self._host, self._port = host, port
        self._spark_ui = spark_ui
        self._graph = topology_graph(topology)
        nodes = self._graph["nodes"]
        kinds = {n["id"]: n["kind"] for n in nodes}
        self._spout_tasks = sum(n["parallelism"] for n in nodes if n["kind"] == "spout")
        self._clock = clock or runner.clock
        self.live = LiveFigures(runner.stats, kinds, self._clock)
        self._registry = CollectorRegistry(auto_describe=False)
        # The checkpoint spout is the protocol's: it counts nothing of its own.
        components = [n["id"] for n in nodes if n["kind"] != "checkpoint spout"]
        collector = TopologyCollector(
            runner.observe,
            components,
            tasks=runner.stats.task_counters,
            sizes=runner.stats.checkpoint_sizes,
            state_keys=runner.stats.key_counts,
            max_spout_pending=runner.tc.max_spout_pending,
        )
        self._registry.register(collector)
        self._allowed: frozenset[str] = allowed_hosts(host, host)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._sampler: threading.Thread | None = None
        self._stopping = threading.Event()
        self._socket: socket.socket | None = None
        self.url: str | None = None

    @property
    def running(self) -> bool:
        """Whether the server thread is alive."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def allowed_hosts(self) -> frozenset[str]:
        """The ``Host`` names the server answers (``_hosts``), known once it listens."""
        return self._allowed

    def app(self) -> Starlette:
        """The Starlette application (also usable with Starlette's ``TestClient``)."""
        return Starlette(
            routes=[
                Route("/", self._index),
                Route("/api/topology", self._topology),
                Route("/api/snapshot", self._snapshot),
                Route("/metrics", self._metrics),
                Mount("/static", StaticFiles(directory=STATIC_DIR), name="static"),
            ],
            middleware=[
                Middleware(HostCheck, allowed=self._allowed, topology=self._runner.name)
            ],
        )

    def pressure(self, obs: Observation) -> dict[str, Any]:
        """The protocol's work in flight against its limit (``backpressure``)."""
        active = obs.status.get("active") if obs.kind == "transactional" else None
        return backpressure(
            obs.kind,
            obs.progress.pending_trees,
            len(active) if isinstance(active, dict) else 0,
            self._runner.tc.max_spout_pending,
            self._spout_tasks,
        )

    # ----------------------------------------------------------------- endpoints
    def _index(self, request: Request) -> Response:
        return FileResponse(STATIC_DIR / "index.html", media_type="text/html")

    def _topology(self, request: Request) -> Response:
        return JSONResponse({"topology": self._runner.name, **self._graph})

    def _snapshot(self, request: Request) -> Response:
        obs = self._runner.observe()
        body = snapshot(
            obs,
            self._graph["nodes"],
            self._spark_ui,
            live=self.live.view(),
            pressure=self.pressure(obs),
            sizes=self._runner.stats.checkpoint_sizes(),
            state_keys=self._runner.stats.key_counts(),
        )
        return JSONResponse(body, headers={"Cache-Control": "no-store"})

    def _metrics(self, request: Request) -> Response:
        return Response(generate_latest(self._registry), media_type=CONTENT_TYPE_LATEST)

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> str:
        """Listen and serve on a daemon thread; the URL (logged too).

        Raises:
            ConfigError: the address cannot be listened on (a port in use, a bad host).
            RuntimeError: uvicorn did not start serving.
        """
        if self._thread is not None:
            msg = f"the dashboard of topology {self._runner.name!r} was already started"
            raise RuntimeError(msg)
        sock = self._bind()
        host, port = sock.getsockname()[:2]
        self._allowed = allowed_hosts(self._host, host)
        config = uvicorn.Config(
            self.app(),
            log_config=None,  # a library does not configure logging
            log_level="warning",
            access_log=False,
            lifespan="off",
            ws="none",
            http="h11",
            loop="asyncio",
            timeout_graceful_shutdown=2,
        )
        self._server = server = uvicorn.Server(config)
        self._socket = sock
        name = f"sb-ui-{self._runner.name}"
        self._thread = threading.Thread(
            target=server.run, kwargs={"sockets": [sock]}, name=name, daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + _START_TIMEOUT
        while not server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                msg = f"the dashboard server of topology {self._runner.name!r} did not start"
                raise RuntimeError(msg)
            time.sleep(0.01)
        shown = f"[{host}]" if ":" in host else host
        self.url = f"http://{shown}:{port}/"
        log.info("dashboard of topology %r at %s", self._runner.name, self.url)
        warning = exposure_warning(self._runner.name, self._host, host, port)
        if warning is not None:
            log.warning("%s", warning)
        # The base sample, taken before the URL is handed out: a run that ends before the
        # sampler's first step still has rates (from here), not 0/s against its own end.
        self.live.sample()
        self._sampler = threading.Thread(
            target=self._sample, name=f"sb-ui-rates-{self._runner.name}", daemon=True
        )
        self._sampler.start()
        return self.url

    def _sample(self) -> None:
        """Record the counters every ``SAMPLE_SECONDS`` until ``stop``."""
        while not self._stopping.wait(SAMPLE_SECONDS):
            self.live.sample()

    def _bind(self) -> socket.socket:
        try:
            infos = socket.getaddrinfo(self._host, self._port, type=socket.SOCK_STREAM)
            family, _, _, _, address = infos[0]
            sock = socket.socket(family, socket.SOCK_STREAM)
        except OSError as exc:
            msg = f"topology.ui.host {self._host!r} cannot be listened on: {exc}"
            raise ConfigError(msg) from exc
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(address)
            sock.listen(64)
        except OSError as exc:
            sock.close()
            msg = (
                f"the dashboard cannot listen on {self._host}:{self._port} "
                f"(topology.ui.host / topology.ui.port): {exc}"
            )
            raise ConfigError(msg) from exc
        return sock

    def stop(self) -> None:
        """Stop serving, wait for the thread, close the socket (idempotent)."""
        server, thread, sock = self._server, self._thread, self._socket
        self._stopping.set()
        if self._sampler is not None and self._sampler is not threading.current_thread():
            self._sampler.join(_STOP_TIMEOUT)
        if server is not None:
            server.should_exit = True
        if thread is not None and thread is not threading.current_thread():
            thread.join(_STOP_TIMEOUT)
            if thread.is_alive():
                log.warning("the dashboard server thread %s did not end", thread.name)
        if sock is not None:
            sock.close()
        self._socket = None
