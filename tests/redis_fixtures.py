"""A real redis-server for tests: started on a free loopback port, stopped at the end.

``redis_server`` (session) is one shared server; ``redis_db`` (function) is the same server with
its data flushed before the test; ``redis_server_factory`` starts extra servers a test needs for
itself (append-only durability, a cluster node) and stops them after the test.

The session server keeps no snapshot (``--save ''``) and no append-only file unless
``STATEFULBOLTS_REDIS_APPENDONLY=yes``. Without ``redis-server`` on PATH the tests that need it
fail under CI (``CI=true``) and are skipped elsewhere, both with a message saying how to get it.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

__all__ = [
    "RedisServer",
    "redis_db",
    "redis_server",
    "redis_server_factory",
    "single_node_cluster",
]

_MISSING = (
    "redis-server is not on PATH. Run the test command from the README, which installs it "
    "(apt-get install -y redis-server), or install redis-server yourself."
)


def free_port() -> int:
    """A 127.0.0.1 port that was free a moment ago; nothing listens on it once this returns."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """One ``redis-server`` process bound to 127.0.0.1 in its own directory."""

    host = "127.0.0.1"

    def __init__(
        self, workdir: Path, *, appendonly: bool = False, extra_args: tuple[str, ...] = ()
    ) -> None:
        self.workdir = workdir
        self.appendonly = appendonly
        self.extra_args = extra_args
        self.port = 0
        self.process: subprocess.Popen[bytes] | None = None
        self._clients: list[Any] = []

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:<port>/0``."""
        return f"redis://{self.host}:{self.port}/0"

    def __repr__(self) -> str:
        return f"RedisServer({self.host}:{self.port}, appendonly={self.appendonly})"

    def start(self, port: int | None = None) -> RedisServer:
        """Start (or restart on the same port, keeping the directory) and wait for PING."""
        exe = shutil.which("redis-server")
        if exe is None:
            raise RuntimeError(_MISSING)
        for _attempt in range(3):
            self.port = port or free_port()
            args = [
                exe,
                "--port", str(self.port),
                "--bind", self.host,
                "--save", "",
                "--appendonly", "yes" if self.appendonly else "no",
                "--dir", str(self.workdir),
                "--daemonize", "no",
                "--logfile", str(self.workdir / f"redis-{self.port}.log"),
                *self.extra_args,
            ]  # fmt: skip
            self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            if self._wait_ready():
                return self
            self._kill()
            if port is not None:
                break
        log = self.workdir / f"redis-{self.port}.log"
        tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
        msg = f"redis-server did not answer PING on {self.host}:{self.port}:\n{tail}"
        raise RuntimeError(msg)

    def _wait_ready(self, timeout: float = 10.0) -> bool:
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        deadline = time.monotonic() + timeout
        # No client-side retries: this loop is the retry, at its own pace.
        probe = redis.Redis(
            host=self.host, port=self.port, socket_connect_timeout=0.5, retry=Retry(NoBackoff(), 0)
        )
        try:
            while time.monotonic() < deadline:
                if self.process is None or self.process.poll() is not None:
                    return False
                try:
                    if probe.ping():
                        return True
                except (redis.exceptions.ResponseError, redis.exceptions.AuthenticationError):
                    return True  # it answered, if only to ask for a password
                except redis.exceptions.RedisError:
                    pass
                time.sleep(0.02)
            return False
        finally:
            probe.close()

    def client(self, **kwargs: Any) -> Any:
        """A new ``redis.Redis`` on this server (closed when the server stops)."""
        import redis

        client = redis.Redis(host=self.host, port=self.port, **kwargs)
        self._clients.append(client)
        return client

    def _kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)
        if self.process is not None and self.process.stderr is not None:
            self.process.stderr.close()
        self.process = None

    def stop(self) -> None:
        """Stop the server (SIGTERM: with appendonly the data is on disk) and close clients."""
        for client in self._clients:
            client.close()
        self._clients.clear()
        self._kill()


def _require_redis_server() -> None:
    if shutil.which("redis-server") is None:
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(_MISSING, pytrace=False)
        pytest.skip(_MISSING)


@pytest.fixture(scope="session")
def redis_server() -> Iterator[RedisServer]:
    """The session's redis-server on a free 127.0.0.1 port."""
    _require_redis_server()
    appendonly = os.environ.get("STATEFULBOLTS_REDIS_APPENDONLY", "no").lower() in ("1", "yes")
    with tempfile.TemporaryDirectory(prefix="statefulbolts-redis-") as tmp:
        server = RedisServer(Path(tmp), appendonly=appendonly).start()
        try:
            yield server
        finally:
            server.stop()


@pytest.fixture
def redis_db(redis_server: RedisServer) -> Iterator[RedisServer]:
    """The session server with every database flushed before the test."""
    client = redis_server.client()
    client.flushall()
    client.close()
    yield redis_server


@pytest.fixture
def redis_server_factory(tmp_path: Path) -> Iterator[Any]:
    """Start extra servers for one test: ``factory(appendonly=False, extra_args=())``."""
    _require_redis_server()
    started: list[RedisServer] = []

    def factory(*, appendonly: bool = False, extra_args: tuple[str, ...] = ()) -> RedisServer:
        workdir = tmp_path / f"redis-{len(started)}"
        workdir.mkdir()
        server = RedisServer(workdir, appendonly=appendonly, extra_args=extra_args)
        started.append(server)
        return server.start()

    yield factory
    for server in started:
        server.stop()


def single_node_cluster(factory: Any) -> RedisServer:
    """A redis-server in cluster mode serving every slot alone, started by ``factory``.

    ``factory`` is the ``redis_server_factory`` fixture; the node is up (``cluster_state:ok``)
    when this returns.
    """
    # An explicit bus port: the default (port + 10000) can be taken or above 65535.
    node: RedisServer = factory(
        extra_args=(
            "--cluster-enabled",
            "yes",
            "--cluster-config-file",
            "nodes.conf",
            "--cluster-port",
            str(free_port()),
        )
    )
    admin = node.client()
    admin.execute_command("CLUSTER", "ADDSLOTSRANGE", "0", "16383")
    deadline = time.monotonic() + 10
    while admin.cluster("info")["cluster_state"] != "ok":
        if time.monotonic() > deadline:
            msg = f"the single-node cluster on {node.host}:{node.port} did not come up in 10 s"
            raise RuntimeError(msg)
        time.sleep(0.05)
    return node
