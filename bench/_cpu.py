"""CPU seconds the benchmark's processes spent in one run, by role (``psutil``).

    meter = CpuMeter(broker="tansu")
    meter.start()
    ...                             # one run
    spent = meter.stop()            # {"driver": 0.12, "jvm": 0.41, "python_workers": 2.2, ...}

The roles are ``bench._rss``'s (the driver, Spark's JVM, the Python daemon and its workers,
a ``redis-server`` child) plus the broker: a descendant whose process name starts with
``broker`` (Tansu, started by the bench). Each figure is user + system CPU time over the run:
what the process had at ``stop`` minus what it had at ``start`` (0 if it started during the
run). A process that ends during the run takes its CPU time with it, which undercounts: Spark
keeps its Python workers between jobs, so within one run of a topology they do not end.

CPU seconds do not depend on what else the machine runs the way wall seconds do: on a busy
machine they tell which system does more work for the same input when the wall-clock ratio is
noise.
"""

from __future__ import annotations

from typing import Any

import psutil

from bench._rss import role_of

ROLES = ("driver", "jvm", "python_daemon", "python_workers", "redis", "broker")


class CpuMeter:
    """The CPU seconds of this process and its descendants between ``start`` and ``stop``."""

    def __init__(self, broker: str = "tansu") -> None:
        self._me = psutil.Process()
        self._broker = broker
        self._roles: dict[int, str] = {}
        self._begin: dict[int, float] = {}

    def _role(self, proc: psutil.Process) -> str:
        role = self._roles.get(proc.pid)
        if role is None:
            role = "broker" if proc.name().startswith(self._broker) else role_of(proc)
            self._roles[proc.pid] = role
        return role

    def _read(self) -> dict[int, tuple[str, float]]:
        """pid -> (role, CPU seconds so far) of every process of a known role."""
        out: dict[int, tuple[str, float]] = {}
        procs = [self._me]
        try:
            procs += self._me.children(recursive=True)
        except psutil.Error:
            pass
        for proc in procs:
            try:
                role = "driver" if proc.pid == self._me.pid else self._role(proc)
                if role == "other":
                    continue
                times = proc.cpu_times()
            except psutil.Error:  # ended between the walk and the read
                continue
            out[proc.pid] = (role, times.user + times.system)
        return out

    def start(self) -> None:
        """Take the processes' CPU times now."""
        self._begin = {pid: cpu for pid, (_, cpu) in self._read().items()}

    def stop(self) -> dict[str, Any]:
        """CPU seconds per role since ``start``, and their ``total``."""
        spent = dict.fromkeys(ROLES, 0.0)
        for pid, (role, cpu) in self._read().items():
            spent[role] += cpu - self._begin.get(pid, 0.0)
        out = {role: round(s, 3) for role, s in spent.items() if s > 0 or role == "driver"}
        out["total"] = round(sum(spent.values()), 3)
        return out
