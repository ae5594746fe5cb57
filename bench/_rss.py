"""Peak resident memory of the benchmark's processes, sampled by a thread (``psutil``).

    sampler = RssSampler()          # about 5 samples a second
    sampler.start()
    ...                             # one run
    peaks = sampler.stop()          # {"driver_mb": ..., "python_workers_mb": [...], ...}

The processes, found by walking this process's descendants at every sample (Spark starts and
ends Python workers as it likes):

- ``driver``: this process (the driver program, the checkpoint spout, the in-memory provider's
  store);
- ``jvm``: Spark's JVM, a ``java`` child (driver and, on a local master, executor);
- ``python_daemon``: the Python worker daemon, a Python child of the JVM (``pyspark.daemon`` or
  this project's ``statefulbolts.runtime._daemon``);
- ``python_workers``: the Python processes running tasks: the daemon's forks (or, without the
  daemon, ``pyspark.worker`` children of the JVM), each with its own peak;
- ``redis``: a ``redis-server`` child (the benchmark's own server), when there is one.

RSS counts shared pages in every process that maps them: a forked worker shares its daemon's
pages until it writes them, so the workers' sum overstates what they take together. A reused
worker keeps what it allocated in earlier tasks (CPython rarely hands memory back), so its peak
in a run may come from the run before; ``*_start_mb`` is what each had when sampling began,
and ``driver_growth_mb`` / ``python_worker_growth_mb`` how far the driver / the most growing
worker rose above what it had when sampling began (or when it first appeared).
"""

from __future__ import annotations

import threading
from typing import Any

import psutil

MB = 2**20
_WORKER_MARKERS = ("pyspark.daemon", "pyspark.worker", "statefulbolts.runtime._daemon")


class RssSampler:
    """Samples the RSS of this process and its Spark / Redis descendants every ``interval`` s."""

    def __init__(self, interval: float = 0.2) -> None:
        self.interval = interval
        self._me = psutil.Process()
        self._roles: dict[int, str] = {}  # pid -> role, decided once per process
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reset()

    def _reset(self) -> None:
        self.samples = 0
        self._peak: dict[str, int] = {}
        self._start: dict[str, int] = {}
        self._workers: dict[int, int] = {}  # pid -> peak RSS
        self._workers_first: dict[int, int] = {}  # pid -> RSS when first seen
        self._workers_total = 0

    def _role(self, proc: psutil.Process) -> str | None:
        role = self._roles.get(proc.pid)
        if role is None:
            role = self._roles[proc.pid] = role_of(proc)
        return role

    def sample(self) -> None:
        """Take one sample of every process (also called by the thread)."""
        seen: dict[str, int] = {"driver": self._me.memory_info().rss}
        workers_total = 0
        try:
            # Parents come before their children in psutil's recursive walk.
            children = self._me.children(recursive=True)
        except psutil.Error:
            children = []
        for proc in children:
            try:
                role = self._role(proc)
                if role in (None, "other"):
                    continue
                rss = proc.memory_info().rss
            except psutil.Error:  # ended between the walk and the read
                continue
            if role == "python_workers":
                self._workers[proc.pid] = max(self._workers.get(proc.pid, 0), rss)
                self._workers_first.setdefault(proc.pid, rss)
                workers_total += rss
            else:
                seen[role] = seen.get(role, 0) + rss
        seen["python_workers"] = workers_total
        self._workers_total = max(self._workers_total, workers_total)
        for role, rss in seen.items():
            self._start.setdefault(role, rss)
            self._peak[role] = max(self._peak.get(role, 0), rss)
        self.samples += 1

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def start(self) -> None:
        """Forget earlier peaks, take a first sample, and sample in the background."""
        self._reset()
        self.sample()
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="rss-sampler", daemon=True)
        self._thread.start()

    def stop(self) -> dict[str, Any]:
        """Stop sampling; the peaks in MB (see the module docstring)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        self.sample()
        out: dict[str, Any] = {}
        for role in ("driver", "jvm", "python_daemon", "redis"):
            if role in self._peak:
                out[f"{role}_mb"] = _mb(self._peak[role])
                out[f"{role}_start_mb"] = _mb(self._start[role])
        peaks = sorted(self._workers.values(), reverse=True)
        out["python_workers_mb"] = [_mb(p) for p in peaks]
        out["python_worker_max_mb"] = _mb(peaks[0]) if peaks else 0.0
        out["python_workers_sum_mb"] = _mb(self._workers_total)
        growth = [peak - self._workers_first[pid] for pid, peak in self._workers.items()]
        out["python_worker_growth_mb"] = _mb(max(growth, default=0))
        out["driver_growth_mb"] = _mb(self._peak["driver"] - self._start["driver"])
        out["samples"] = self.samples
        return out


def role_of(proc: psutil.Process) -> str:
    """What a descendant of the bench is (see the module docstring); "other" if none of those.

    Raises:
        psutil.Error: the process ended while being looked at.
    """
    name = proc.name()
    if name.startswith("java"):
        return "jvm"
    if "redis-server" in name:
        return "redis"
    if any(m in (cmdline := " ".join(proc.cmdline())) for m in _WORKER_MARKERS):
        # The daemon is the JVM's child; its forks (the workers) share its command line.
        parent = proc.parent()
        of_jvm = parent is not None and parent.name().startswith("java")
        return "python_daemon" if of_jvm and "daemon" in cmdline else "python_workers"
    return "other"


def _mb(rss: int) -> float:
    return round(rss / MB, 1)
