"""A throwaway redis-server for the benchmark: free 127.0.0.1 port, no persistence, temp dir.

server = start_redis()
...  # point topology.state.provider.config at 127.0.0.1:server.port
print(server.command_count())
server.stop()
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"


def redis_conf(port: int) -> dict[str, Any]:
    """The topology config of the Redis provider on ``127.0.0.1:port`` (the bench's server)."""
    # A generous timeout: emptying a seeded state deletes a hash of millions of fields at once.
    pool = {"host": HOST, "port": port, "timeout": 60_000}
    return {
        "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
        "topology.state.provider.config": json.dumps({"jedisPoolConfig": pool}),
    }


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


class RedisProcess:
    """One ``redis-server`` child process and a client to ask it for its stats."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, workdir: Any) -> None:
        import redis

        self.process = process
        self.port = port
        self._workdir = workdir
        self._client = redis.Redis(host=HOST, port=port, socket_connect_timeout=1)
        self._info_calls = 0

    def ping(self) -> bool:
        """Whether the server answers."""
        import redis

        try:
            return bool(self._client.ping())
        except redis.exceptions.ConnectionError:
            return False
        finally:
            self._info_calls += 1

    def command_count(self) -> int:
        """Commands the server processed, not counting this handle's own PING / INFO calls.

        ``total_commands_processed`` includes the ``INFO`` being answered, so every call made
        through this handle (this one included) is subtracted.
        """
        stats = self._client.info("stats")
        self._info_calls += 1
        return int(stats["total_commands_processed"]) - self._info_calls

    def stop(self) -> None:
        """Stop the server and remove its directory."""
        self._client.close()
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        self._workdir.cleanup()


def start_redis(timeout: float = 10.0) -> RedisProcess:
    """Start ``redis-server`` on a free loopback port and wait until it answers PING."""
    exe = shutil.which("redis-server")
    if exe is None:
        msg = "redis-server is not on PATH: apt-get install -y redis-server"
        raise RuntimeError(msg)
    workdir = tempfile.TemporaryDirectory(prefix="statefulbolts-bench-redis-")
    log = Path(workdir.name) / "redis.log"
    port = _free_port()
    args = [
        exe,
        "--port", str(port),
        "--bind", HOST,
        "--save", "",
        "--appendonly", "no",
        "--dir", workdir.name,
        "--daemonize", "no",
        "--logfile", str(log),
    ]  # fmt: skip
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    server = RedisProcess(process, port, workdir)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        if server.ping():
            return server
        time.sleep(0.05)
    tail = log.read_text(errors="replace")[-2000:] if log.exists() else ""
    server.stop()
    msg = f"redis-server did not answer PING on {HOST}:{port}:\n{tail}"
    raise RuntimeError(msg)
