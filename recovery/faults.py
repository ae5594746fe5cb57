"""Chaos testing: deterministic fault injection, configured by ``topology.faults``.

``FaultPlan`` is a ``statefulbolts.listeners.FaultListener``: the runners' base
(``statefulbolts.protocol_runner.ProtocolRunner``) makes one from ``topology.faults`` when the
run was given no listener of its own, and a run without faults holds ``NO_FAULTS`` and never
calls into this module. The points it acts at (``KillPoint``, ``TaskPoint``) are the listener's.

Real failures, not simulated return values: a crash is ``os._exit`` of the Python worker (Spark
sees the worker die and retries the task), an error is an exception raised from the bolt's task,
a driver kill is ``os._exit`` of the driver process at a named point of the checkpoint protocol.

``topology.faults`` is a dict (or its JSON)::

    {
      "tasks": [
        {"component": "count", "task": 0, "at_tuple": 5, "kind": "crash", "attempts": "first"},
        {"component": "split", "task": 1, "at_tuple": 0, "kind": "raise", "attempts": "every",
         "txid": 3},
        {"component": "count", "task": 1, "at": "prepared", "kind": "crash", "txid": 2}
      ],
      "driver": {"point": "after-committing-saved", "txid": 2, "once_file": "/tmp/killed-once"}
    }

Task faults fire when the task has executed ``at_tuple`` data tuples (0: before the first), or,
with ``"at": "prepared"``, right after a stateful task's state prepared its transaction (the
attempt's writes reached the store but its output never reaches Spark, as when an executor dies
after a task finished), or with ``"at": "committed"`` right after it committed one; in
transaction ``txid`` if given (else any); on the first Spark attempt of the task only
(``"first"``: Spark's retry then succeeds) or on every attempt (``"every"``: a poison tuple).
A ``"hold"`` fault (it needs ``"marker"``, a path) neither crashes nor raises: the task creates
the marker file and waits until ``<marker>.release`` exists (at most ``HOLD_LIMIT_SECONDS``),
then goes on. A test that must act while a given job runs (kill a worker machine in the middle
of PREPARE(t), not in the gap between two jobs) waits for the marker, acts, then releases it:
no timing luck.
A task fault that could never fire (in a spout's task, which takes no input tuple, a transactional
topology's emitter included; in a component or task the topology does not have) refuses the run
(``on_topology``).
A fault that needs a Spark worker (a crash, or one on the first attempt only) in a task step the
driver runs itself (a commit done in the driver, a small transaction's stateless head) refuses
the run (``on_driver_tasks``), naming the setting that moves the step to the executors: faults
never move it themselves.
Driver kill points (``KillPoint``) name where in the protocol the driver dies. With
``once_file``, the kill fires only if it can create that file (``O_EXCL``), so a driver restarted
with the same config (``statefulbolts run --supervise``) does not die again at the same point:
after-prepare and mid-commit would otherwise re-fire forever, because recovery runs PREPARE(t)
again (after a rollback) or COMMIT(t) again (rolling forward).
"""

from __future__ import annotations

import enum
import json
import logging
import os
import time
import uuid
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from statefulbolts.errors import ConfigError
from statefulbolts.listeners import KillPoint, TaskPoint
from statefulbolts.tuples import Tuple

log = logging.getLogger(__name__)

FAULTS_KEY = "topology.faults"
KILLED_EXIT_CODE = 137
# The longest a "hold" fault waits for its release file.
HOLD_LIMIT_SECONDS = 300.0


class InjectedFault(RuntimeError):  # noqa: N818 - it is the fault itself, not an error report
    """What a ``"raise"`` task fault raises."""


class FaultKind(enum.Enum):
    """What a task fault does when it fires."""

    CRASH = "crash"  # ``os._exit`` of the Python worker: Spark sees it die, retries the task
    RAISE = "raise"  # ``InjectedFault`` raised from the task, as the bolt's own exception
    HOLD = "hold"  # make ``marker``, wait for ``<marker>.release``, go on


class Attempts(enum.Enum):
    """Which of a task's Spark attempts a task fault fires on."""

    FIRST = "first"  # the first only: Spark's retry then succeeds
    EVERY = "every"  # every one: a poison tuple


@dataclass(frozen=True)
class TaskFault:
    """One fault in one task (its task index); the strings of ``topology.faults`` as enums.

    Example:
        >>> fault = TaskFault("count", 0, kind="raise", attempts="every", at="prepared")
        >>> fault.kind, fault.attempts, fault.at
        (<FaultKind.RAISE: 'raise'>, <Attempts.EVERY: 'every'>, <TaskPoint.PREPARED: 'prepared'>)
    """

    component: str
    task: int
    at_tuple: int = 0
    kind: FaultKind = FaultKind.CRASH
    attempts: Attempts = Attempts.FIRST
    txid: int | None = None
    at: TaskPoint = TaskPoint.TUPLE  # TUPLE: before tuple at_tuple; else after the state did
    marker: str | None = None  # HOLD: the file made on arrival; it waits for <marker>.release

    def __post_init__(self) -> None:
        # The config's strings (or the enums themselves); a wrong one is a ValueError.
        try:
            kind, attempts, at = FaultKind(self.kind), Attempts(self.attempts), TaskPoint(self.at)
        except ValueError:
            kind = None
        if kind is None or (kind is FaultKind.HOLD) != isinstance(self.marker, str):
            msg = (
                f"kind must be {_values(FaultKind)} (hold, and only hold, with a marker path), "
                f"attempts {_values(Attempts)} and at {_values(TaskPoint)}, got {self}"
            )
            raise ValueError(msg)
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "attempts", attempts)
        object.__setattr__(self, "at", at)

    def matches(
        self,
        component: str,
        task: int,
        txid: int,
        attempt: int,
        n: int,
        at: TaskPoint = TaskPoint.TUPLE,
    ) -> bool:
        """Whether this fault fires at ``at`` (for TUPLE: the n-th tuple) of this attempt."""
        return (
            self.component == component
            and self.task == task
            and self.at is at
            and (at is not TaskPoint.TUPLE or self.at_tuple == n)
            and (self.txid is None or self.txid == txid)
            and (self.attempts is Attempts.EVERY or attempt == 0)
        )

    @property
    def needs_a_worker(self) -> bool:
        """A crash, or a fault on the first attempt only: meaningless in a task the driver runs.

        A crash is ``os._exit`` of the Python worker (in the driver, the driver's end), and a
        first-attempt fault expects Spark to run the task again (in the driver, every retry of
        the transaction is a first attempt).
        """
        return self.kind is FaultKind.CRASH or self.attempts is Attempts.FIRST


@dataclass(frozen=True)
class FaultPlan:
    """Every fault of a run; shipped to the tasks with each job."""

    tasks: tuple[TaskFault, ...] = ()
    driver_point: KillPoint | None = None
    driver_txid: int | None = None
    driver_pid: int | None = None
    once_file: str | None = None

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any]) -> FaultPlan | None:
        """Read ``topology.faults``; ``None`` when absent."""
        raw = conf.get(FAULTS_KEY)
        if raw is None:
            return None
        try:
            data = json.loads(raw) if isinstance(raw, str) else dict(raw)
            tasks = tuple(TaskFault(**t) for t in data.get("tasks", ()))
            driver = data.get("driver") or {}
            point = KillPoint(driver["point"]) if driver.get("point") else None
            txid = driver.get("txid")
            once_file = driver.get("once_file")
            if once_file is not None and not isinstance(once_file, str):
                msg = f"driver once_file must be a path string, got {once_file!r}"
                raise ValueError(msg)
        except (TypeError, ValueError, KeyError) as exc:
            allowed = [p.value for p in KillPoint]
            msg = (
                f"{FAULTS_KEY}: {exc}; expected {{'tasks': [{{component, task, at_tuple, at, kind, "
                f"attempts, txid, marker}}], 'driver': {{'point': one of {allowed}, 'txid': int, "
                f"'once_file': path}}}}"
            )
            raise ConfigError(msg) from exc
        return cls(tasks, point, txid, os.getpid(), once_file)

    @property
    def task_components(self) -> frozenset[str]:
        """The components whose tasks this plan injects faults into."""
        return frozenset(fault.component for fault in self.tasks)

    def on_topology(self, bolts: Mapping[str, int], spouts: Collection[str]) -> None:
        """Refuse a task fault that could never fire in this topology, before anything runs.

        ``bolts`` maps each bolt to its number of tasks. A task fault fires in a bolt's task
        (before an input tuple, or after its state prepared or committed): one that names a
        spout (whose tasks take no input, a transactional topology's emitters included), a
        component the topology does not have, or a task index it does not have, would let
        a chaos run pass without its fault.

        Raises:
            ConfigError: naming the fault's component and task, and why it cannot fire.
        """
        for fault in self.tasks:
            name, task = fault.component, fault.task
            if name in spouts:
                why = (
                    f"{name!r} is a spout: its tasks take no input tuple (nor do a "
                    "transactional topology's emitter tasks), and a task fault fires in a "
                    "bolt's task, before its at_tuple-th input tuple or after its state "
                    "prepared or committed"
                )
            elif name not in bolts:
                why = f"the topology has no component {name!r}; its bolts: {sorted(bolts)}"
            elif not 0 <= task < bolts[name]:
                why = f"{name!r} has {bolts[name]} tasks, 0 to {bolts[name] - 1}"
            else:
                continue
            msg = (
                f"{FAULTS_KEY}: the fault in {name!r} task {task} could never fire: {why}; "
                "name a bolt of the topology and one of its tasks"
            )
            raise ConfigError(msg)

    def on_driver_tasks(
        self,
        components: Collection[str],
        points: Collection[TaskPoint],
        setting: str,
        away: str = "executors",
    ) -> None:
        """Refuse the run when a fault of the driver's tasks needs a Spark worker.

        Raises:
            ConfigError: naming the components, and ``setting`` with the value ``away``,
                which moves their tasks to the executors.
        """
        needing = sorted(
            {
                fault.component
                for fault in self.tasks
                if fault.component in components and fault.at in points and fault.needs_a_worker
            }
        )
        if needing:
            where = "|".join(sorted(p.value for p in points))
            msg = (
                f"{FAULTS_KEY} crashes, or fails on the first attempt only, tasks of {needing} "
                f"(at {where}), which the driver runs itself under {setting}: such a fault needs "
                f"a Spark worker and Spark's task retry; set {setting} to {away!r} for this run"
            )
            raise ConfigError(msg)

    # ---------------------------------------------------------------- task side
    def tuple_target(
        self,
        execute: Callable[[Tuple], None],
        component: str,
        task: int,
        txid: int,
        attempt: int,
    ) -> Callable[[Tuple], None]:
        """``execute`` behind ``on_tuple``: told the task's n-th data tuple before it runs.

        ``execute`` itself when no fault of this plan can fire in this task and txid.
        """
        if not any(
            fault.component == component and fault.task == task and fault.at is TaskPoint.TUPLE
            for fault in self.tasks
        ):
            return execute
        executed = 0

        def target(tuple_: Tuple) -> None:
            nonlocal executed
            n, executed = executed, executed + 1
            self.on_tuple(component, task, txid, attempt, n)  # an injected "raise" is the bolt's
            execute(tuple_)

        return target

    def on_tuple(self, component: str, task: int, txid: int, attempt: int, n: int) -> None:
        """Called in the task before it executes its n-th data tuple (and once with n = 0)."""
        for fault in self.tasks:
            if fault.matches(component, task, txid, attempt, n):
                self._fire(fault, f"at tuple {n}", txid)

    def on_task_prepared(self, component: str, task: int, txid: int, attempt: int) -> None:
        """Called in a stateful task right after its state prepared ``txid``."""
        for fault in self.tasks:
            if fault.matches(component, task, txid, attempt, 0, TaskPoint.PREPARED):
                self._fire(fault, "after its state prepared", txid)

    @staticmethod
    def _fire(fault: TaskFault, where: str, txid: int) -> None:
        kind = fault.kind.value
        log.warning("injected %s in %s task %s %s", kind, fault.component, fault.task, where)
        if fault.kind is FaultKind.CRASH:
            os._exit(1)
        if fault.kind is FaultKind.HOLD:
            _hold(fault.marker or "", f"{fault.component} task {fault.task} {where}, txid {txid}")
            return
        msg = f"injected fault in {fault.component} task {fault.task} {where} (txid {txid})"
        raise InjectedFault(msg)

    def on_task_committed(self, component: str, task: int, txid: int) -> None:
        """Called in a task right after its state committed ``txid``: the mid-commit kill.

        Also fires the task faults with ``"at": "committed"`` (on any attempt: a COMMIT is told
        no attempt; a ``"hold"`` released once lets a retry by).
        """
        for fault in self.tasks:
            if fault.matches(component, task, txid, 0, 0, TaskPoint.COMMITTED):
                self._fire(fault, "after its state committed", txid)
        if (
            self.driver_point is KillPoint.MID_COMMIT
            and self.driver_pid is not None
            and (self.driver_txid is None or self.driver_txid == txid)
            and self._claim_once()
        ):
            import signal

            log.warning("killing the driver (pid %s) mid-commit of txid %s", self.driver_pid, txid)
            os.kill(self.driver_pid, signal.SIGKILL)

    # ---------------------------------------------------------------- driver side
    def on_driver(self, point: KillPoint, txid: int) -> None:
        """Called by the driver at each kill point; exits the process when it matches."""
        if (
            self.driver_point is point
            and (self.driver_txid is None or self.driver_txid == txid)
            and self._claim_once()
        ):
            log.warning("injected driver kill at %s (txid %s)", point.value, txid)
            logging.shutdown()
            os._exit(KILLED_EXIT_CODE)

    def _claim_once(self) -> bool:
        """Whether the driver kill may fire: always without ``once_file``, else only once ever.

        The marker is created atomically (``O_EXCL``), so of two tasks racing to kill the driver
        mid-commit exactly one does, and a restarted driver finds the marker and carries on.
        """
        if self.once_file is None:
            return True
        try:
            fd = os.open(self.once_file, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        os.close(fd)
        return True


def _values(kind: type[enum.Enum]) -> str:
    return "|".join(member.value for member in kind)


def _hold(marker: str, where: str) -> None:
    """Make ``marker`` and wait for ``<marker>.release`` (a ``"hold"`` fault).

    The marker appears whole (written aside, then renamed): whoever waits for it may read it
    the moment it exists.
    """
    aside = f"{marker}.{uuid.uuid4().hex[:12]}.tmp"  # two holds on one marker never share it
    with open(aside, "w", encoding="utf-8") as f:
        f.write(f"{os.getpid()} {where}\n")
    os.replace(aside, marker)
    release = f"{marker}.release"
    deadline = time.monotonic() + HOLD_LIMIT_SECONDS
    while not os.path.exists(release):
        if time.monotonic() > deadline:
            msg = f"injected hold in {where}: {release} did not appear in {HOLD_LIMIT_SECONDS} s"
            raise InjectedFault(msg)
        time.sleep(0.02)
