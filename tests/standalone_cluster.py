"""A real Spark standalone cluster on 127.0.0.1, and drivers run as child processes, for tests.

``start_standalone`` starts a master and workers from pyspark's ``spark-class``, all on
127.0.0.1 (``SPARK_LOCAL_IP``, ``--host``, web UIs on free loopback ports, the master's REST
server off), each JVM in its own session, and kills every process of the cluster at the end.
``DriverProcess`` runs a driver (``tests/cluster_driver.py``, or any command such as
``spark-submit``) in its own session and reads the JSON lines it prints.

Processes are found by a scan of ``/proc`` (no psutil): a JVM started by a worker is its child,
and a child is reparented once its parent dies, so every tree is read before anything in it is
killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from redis_fixtures import free_port

LOOPBACK = "127.0.0.1"
TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"


# ------------------------------------------------------------------------------ /proc helpers


def _parents() -> dict[int, int]:
    """``{pid: parent pid}`` for every process visible in ``/proc``."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue  # gone meanwhile
        # "pid (comm) state ppid ...": comm may hold spaces and parentheses.
        parents[int(entry)] = int(stat.rpartition(")")[2].split()[1])
    return parents


def process_tree(root: int) -> list[int]:
    """``root`` and all its descendants, parents before children."""
    children: dict[int, list[int]] = {}
    for pid, ppid in _parents().items():
        children.setdefault(ppid, []).append(pid)
    tree, todo = [], [root]
    while todo:
        pid = todo.pop(0)
        tree.append(pid)
        todo.extend(sorted(children.get(pid, [])))
    return tree


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state != "Z"


def kill_tree(root: int) -> list[int]:
    """SIGKILL ``root``'s whole tree (read first, then killed) and its process group."""
    tree = process_tree(root)
    for pid in tree:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(root, signal.SIGKILL)  # started with start_new_session: pgid == pid
    return tree


# ------------------------------------------------------------------------------ the cluster


@dataclass
class Daemon:
    """One ``spark-class`` JVM (master or worker) in its own session."""

    name: str
    process: subprocess.Popen[bytes]
    webui_port: int
    log: Path

    def executor_pids(self) -> list[int]:
        return [p for p in process_tree(self.process.pid) if EXECUTOR_CLASS in cmdline(p)]

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""


@dataclass
class Standalone:
    master: Daemon
    url: str
    workers: list[Daemon] = field(default_factory=list)

    def state(self) -> dict[str, Any]:
        """The master's JSON (``/json/``): workers, apps, status."""
        address = f"http://{LOOPBACK}:{self.master.webui_port}/json/"
        with urllib.request.urlopen(address, timeout=5) as reply:  # noqa: S310 - loopback http
            return json.loads(reply.read())

    def alive_workers(self) -> int:
        try:
            return int(self.state()["aliveworkers"])
        except (OSError, ValueError, KeyError):
            return -1

    def logs(self) -> str:
        return "\n".join(f"--- {d.name}\n{d.tail()}" for d in [self.master, *self.workers])


def spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def spark_env(tmp: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this process's environment) with Spark's on loopback under ``tmp``."""
    env = dict(os.environ if base is None else base)
    env.update(
        SPARK_HOME=str(spark_home()),
        SPARK_LOCAL_IP=LOOPBACK,
        SPARK_LOCAL_DIRS=str(tmp / "local"),
        SPARK_LOG_DIR=str(tmp / "logs"),
        SPARK_DAEMON_MEMORY="512m",
        # The REST submission server would listen on a fixed port (6066); nothing needs it.
        SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
    )
    return env


def _start(
    name: str, args: list[str], env: dict[str, str], tmp: Path, webui: int, cwd: Path | None
) -> Daemon:
    log = tmp / f"{name}.log"
    spark_class = spark_home() / "bin" / "spark-class"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(spark_class), *args],
            env=env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Daemon(name, process, webui, log)


def _wait(what: str, cond: Any, timeout: float, cluster: Standalone) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not within {timeout} s\n{cluster.logs()}")
        for daemon in [cluster.master, *cluster.workers]:
            if daemon.process.poll() is not None:
                pytest.fail(f"{daemon.name} exited ({daemon.process.returncode})\n{daemon.tail()}")
        time.sleep(0.25)


def _master_alive(cluster: Standalone) -> bool:
    try:
        return bool(cluster.state()["status"] == "ALIVE")
    except (OSError, ValueError, KeyError):
        return False


@contextlib.contextmanager
def start_standalone(
    tmp: Path,
    *,
    workers: int = 2,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    java_options: str | None = None,
) -> Iterator[Standalone]:
    """A master and ``workers`` workers (1 core, 1 GiB each) on 127.0.0.1; all killed after.

    ``env`` is the daemons' environment before Spark's settings (default: this process's);
    their executors inherit it. ``cwd`` is their working directory (default: this one's).
    ``java_options`` go to the master's and workers' JVMs (``SPARK_DAEMON_JAVA_OPTS``).
    """
    (tmp / "local").mkdir(exist_ok=True)
    base = spark_env(tmp, env)
    if java_options:
        base["SPARK_DAEMON_JAVA_OPTS"] = java_options
    port, webui = free_port(), free_port()
    master = _start(
        "master",
        [
            "org.apache.spark.deploy.master.Master",
            "--host", LOOPBACK,
            "--port", str(port),
            "--webui-port", str(webui),
        ],
        base, tmp, webui, cwd,
    )  # fmt: skip
    cluster = Standalone(master, f"spark://{LOOPBACK}:{port}")
    try:
        _wait("the master", lambda: _master_alive(cluster), 120, cluster)
        for i in range(workers):
            workdir = tmp / f"worker-{i}"
            workdir.mkdir()
            worker_webui = free_port()
            args = [
                "org.apache.spark.deploy.worker.Worker", cluster.url,
                "--host", LOOPBACK,
                "--cores", "1",
                "--memory", "1g",
                "--work-dir", str(workdir),
                "--webui-port", str(worker_webui),
            ]  # fmt: skip
            worker_env = {**base, "SPARK_WORKER_DIR": str(workdir)}
            cluster.workers.append(_start(f"worker-{i}", args, worker_env, tmp, worker_webui, cwd))
        _wait(
            f"{workers} registered workers",
            lambda: cluster.alive_workers() == workers,
            120,
            cluster,
        )
        yield cluster
    finally:
        for daemon in [*cluster.workers, master]:
            kill_tree(daemon.process.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                daemon.process.wait(timeout=10)


# ------------------------------------------------------------------------------ drivers


UNPARSABLE = "unparsable"


def _event(text: str) -> dict[str, Any]:
    """The JSON event ``text`` holds, or an ``UNPARSABLE`` event carrying the line."""
    try:
        event = json.loads(text)
    except json.JSONDecodeError:
        return {"event": UNPARSABLE, "line": text}
    return event if isinstance(event, dict) else {"event": UNPARSABLE, "line": text}


class DriverProcess:
    """A driver in its own session; the JSON lines of its stdout read by a thread.

    By default ``tests/cluster_driver.py`` with ``args``, run by this Python with this checkout
    and ``tests/`` on its path; ``command`` replaces the whole command line (``args`` ignored),
    ``env`` updates its environment (a ``None`` value removes a variable).
    """

    def __init__(
        self,
        args: Sequence[str],
        log: Path,
        *,
        command: Sequence[str] | None = None,
        env: Mapping[str, str | None] | None = None,
        cwd: Path = ROOT,
    ) -> None:
        full_env = dict(os.environ)
        full_env.update(
            SPARK_LOCAL_IP=LOOPBACK,
            PYTHONPATH=os.pathsep.join([str(ROOT), str(TESTS)]),
            PYSPARK_PYTHON=sys.executable,
            PYSPARK_DRIVER_PYTHON=sys.executable,
        )
        for key, value in (env or {}).items():
            if value is None:
                full_env.pop(key, None)
            else:
                full_env[key] = value
        self.log = log
        self._stderr = log.open("wb")
        self.process = subprocess.Popen(
            list(command or [sys.executable, str(TESTS / "cluster_driver.py"), *args]),
            env=full_env,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            start_new_session=True,
        )
        self.started = time.time()
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self.text: list[str] = []  # stdout lines that are not JSON (spark-submit merges stderr)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        """Queue each JSON line; one that does not parse is queued as an ``UNPARSABLE`` event.

        The reader must outlive any line: it once died on two events printed on one line, and
        the test then said the driver had said nothing.
        """
        assert self.process.stdout is not None
        try:
            for raw in self.process.stdout:
                text = raw.decode(errors="replace").strip()
                if text.startswith("{"):
                    self.lines.put(_event(text))
                else:
                    self.text.append(text)
        finally:
            self.lines.put(None)

    def next_event(self, deadline: float) -> dict[str, Any]:
        """The next JSON line; fails the test on timeout or when the driver exited."""
        try:
            line = self.lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            pytest.fail(f"the driver said nothing in time; it said {self.seen[-5:]}\n{self.tail()}")
        if line is None:
            pytest.fail(
                f"the driver exited ({self.process.wait()}) after {self.seen[-5:]}\n{self.tail()}"
            )
        self.seen.append(line)
        return line

    def until(self, event: str, deadline: float) -> dict[str, Any]:
        """Read lines until one with ``event``; an ``error`` line fails the test."""
        while True:
            line = self.next_event(deadline)
            if line.get("event") == event:
                return line
            if line.get("event") == UNPARSABLE:
                pytest.fail(
                    f"the driver printed a line that is not one JSON event: {line['line']!r}\n"
                    f"{self.tail()}"
                )
            assert line.get("event") != "error", f"{line}\n{self.tail()}"

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-4000:] if self.log.exists() else ""

    def stop(self) -> None:
        """Stop the driver, then SIGKILL what is left of its process group (its Spark JVM).

        Its group, not its tree: once the driver is reaped its pid may be reused, while a process
        group id is not reused as long as any member lives.
        """
        if self.process.poll() is None:
            self.process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=30)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        self._stderr.close()
