"""On a real Spark standalone cluster: a worker machine dies mid-run and nothing is lost.

The fixture starts a master and two one-core workers from pyspark's ``spark-class``, all on
127.0.0.1 (``SPARK_LOCAL_IP``, ``--host``, web UIs on free loopback ports, the master's REST
server off). The driver runs in a subprocess (``tests/cluster_driver.py``) because this test
session already holds a ``local[2]`` SparkSession. Mid-run the test kills one worker's whole
process tree at once: the worker JVM, its executor JVM (``CoarseGrainedExecutorBackend``) and
the executor's Python workers, as if the machine died. The word count must still finish on the
surviving worker with exact counts in Redis.

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
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from outage_topologies import counts_in_redis
from redis_fixtures import free_port

from examples.wordcount import expected_counts
from statefulbolts.runtime._spark import is_loopback_master

LOOPBACK = "127.0.0.1"
TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
EXECUTOR_CLASS = "org.apache.spark.executor.CoarseGrainedExecutorBackend"
SENTENCES = 4000
NAME = "wc-cluster"


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


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).resolve().parent


def _spark_env(tmp: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SPARK_HOME=str(_spark_home()),
        SPARK_LOCAL_IP=LOOPBACK,
        SPARK_LOCAL_DIRS=str(tmp / "local"),
        SPARK_LOG_DIR=str(tmp / "logs"),
        SPARK_DAEMON_MEMORY="512m",
        # The REST submission server would listen on a fixed port (6066); nothing needs it.
        SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
    )
    return env


def _start(name: str, args: list[str], env: dict[str, str], tmp: Path, webui: int) -> Daemon:
    log = tmp / f"{name}.log"
    spark_class = _spark_home() / "bin" / "spark-class"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [str(spark_class), *args],
            env=env,
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


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[Standalone]:
    """A master and two workers (1 core, 1 GiB each) on 127.0.0.1; every process killed after."""
    (tmp_path / "local").mkdir()
    env = _spark_env(tmp_path)
    port, webui = free_port(), free_port()
    master = _start(
        "master",
        [
            "org.apache.spark.deploy.master.Master",
            "--host", LOOPBACK,
            "--port", str(port),
            "--webui-port", str(webui),
        ],
        env, tmp_path, webui,
    )  # fmt: skip
    cluster = Standalone(master, f"spark://{LOOPBACK}:{port}")
    try:
        _wait("the master", lambda: _master_alive(cluster), 120, cluster)
        for i in range(2):
            workdir = tmp_path / f"worker-{i}"
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
            worker_env = {**env, "SPARK_WORKER_DIR": str(workdir)}
            cluster.workers.append(_start(f"worker-{i}", args, worker_env, tmp_path, worker_webui))
        _wait("two registered workers", lambda: cluster.alive_workers() == 2, 120, cluster)
        yield cluster
    finally:
        for daemon in [*cluster.workers, master]:
            kill_tree(daemon.process.pid)
            with contextlib.suppress(subprocess.TimeoutExpired):
                daemon.process.wait(timeout=10)


def _master_alive(cluster: Standalone) -> bool:
    try:
        return bool(cluster.state()["status"] == "ALIVE")
    except (OSError, ValueError, KeyError):
        return False


# ------------------------------------------------------------------------------ the driver


class DriverProcess:
    """``tests/cluster_driver.py`` in its own session; its JSON lines read by a thread."""

    def __init__(self, args: list[str], log: Path) -> None:
        env = dict(os.environ)
        env.update(
            SPARK_LOCAL_IP=LOOPBACK,
            PYTHONPATH=os.pathsep.join([str(ROOT), str(TESTS)]),
            PYSPARK_PYTHON=sys.executable,
            PYSPARK_DRIVER_PYTHON=sys.executable,
        )
        self.log = log
        self._stderr = log.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, str(TESTS / "cluster_driver.py"), *args],
            env=env,
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            start_new_session=True,
        )
        self.lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for raw in self.process.stdout:
            text = raw.decode(errors="replace").strip()
            if text.startswith("{"):
                self.lines.put(json.loads(text))
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


# ------------------------------------------------------------------------------ the test


def test_loopback_standalone_masters_are_recognised() -> None:
    assert is_loopback_master("spark://127.0.0.1:7077")
    assert is_loopback_master("spark://localhost:7077,127.0.0.1:7078")
    assert not is_loopback_master("spark://10.0.0.5:7077")
    assert not is_loopback_master("spark://127.0.0.1:7077,spark-2:7077")
    assert not is_loopback_master("yarn")
    assert not is_loopback_master("local[2]")


@pytest.mark.spark
@pytest.mark.redis
@pytest.mark.slow
def test_worker_machine_dies_mid_run_and_counts_stay_exact(
    standalone: Standalone, redis_db: Any, tmp_path: Path
) -> None:
    started, begun = time.monotonic(), time.time()
    driver = DriverProcess(
        [
            "--master", standalone.url,
            "--redis-port", str(redis_db.port),
            "--sentences", str(SENTENCES),
            "--name", NAME,
            "--pending", "300",
        ],
        tmp_path / "driver.log",
    )  # fmt: skip
    victim, survivor = standalone.workers
    try:
        deadline = time.monotonic() + 180
        ready = driver.next_event(deadline)
        assert ready["event"] == "ready", ready
        assert ready["executors"] == 2, ready
        assert (ready["driver_host"], ready["bind_address"]) == (LOOPBACK, LOOPBACK)

        # Let a few transactions commit, so both executors hold Python workers and shuffle data.
        commits_before = 0
        while commits_before < 3:
            event = driver.next_event(deadline)
            assert event["event"] == "tx", event
            if event["action"] == "COMMIT" and event["ok"]:
                commits_before += 1
        executors = victim.executor_pids()
        assert len(executors) == 1, (executors, victim.tail())
        assert len(survivor.executor_pids()) == 1, survivor.tail()
        time.sleep(0.3)  # into the next transaction's job
        killed_at = time.time()
        killed = kill_tree(victim.process.pid)
        assert executors[0] in killed

        done = None
        while done is None:
            event = driver.next_event(deadline)
            if event["event"] == "done":
                done = event
            assert event["event"] != "error", f"{event}\n{driver.tail()}"
        assert driver.process.wait(timeout=60) == 0, driver.tail()
        after = [e for e in driver.seen if e["event"] == "tx" and e["t"] > killed_at]
    finally:
        driver.stop()

    assert not alive(victim.process.pid)
    assert not any(alive(pid) for pid in killed)
    assert survivor.process.poll() is None
    assert standalone.alive_workers() == 1
    # The kill landed in a running job (jobs run back to back), and the run went on and committed.
    in_flight = [e for e in after if e["t"] - e["seconds"] <= killed_at]
    assert in_flight, after[:3]
    assert any(e["action"] == "COMMIT" and e["ok"] for e in after), after
    client = redis_db.client()
    assert counts_in_redis(client, NAME) == dict(expected_counts(SENTENCES))
    assert not client.keys(f"{NAME}/*$prepare")
    assert done["components"]["sentences"]["emitted"] >= SENTENCES
    assert done["executors"] == 1  # it finished on the surviving worker's executor alone
    # Spark saw the executor go (it was not idle: it had Python workers and shuffle output).
    assert "Lost executor" in driver.log.read_text(errors="replace"), driver.tail()
    print(
        f"cluster run: {time.monotonic() - started:.1f} s; driver ready after "
        f"{ready['t'] - begun:.1f} s, kill at {killed_at - begun:.1f} s, done at "
        f"{done['t'] - begun:.1f} s; {done['transactions']} transactions "
        f"({done['failed_transactions']} failed), {len(after)} after the kill; in flight at the "
        f"kill: {in_flight[0]['action']}({in_flight[0]['txid']}) of {in_flight[0]['seconds']:.2f} s"
    )
