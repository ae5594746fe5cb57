"""What a running topology counts: per component, per transaction, the errors and recoveries.

The driver thread writes every figure here; a dashboard or a Prometheus scrape reads them from
another thread (``Stats.snapshot``, through ``TopologyRunner.observe``). Component counters are
plain dicts the hot paths add to without a lock (copying a dict is one step for the
interpreter, so a reader never sees half an update of one counter); the rarer records
(transactions, errors, recoveries) are appended under a small lock of their own, so a reader
can copy them even while the driver loop holds its lock for a long step.

What is kept:

- per component: executed, emitted, acked, failed, replayed (a spout re-emitting a message id
  it was told had failed), errors (``report_error`` calls, task attempts that failed though
  Spark's retry survived them, and transactions that failed in the component) and task
  seconds, and the sum of each metric its tasks registered (``statefulbolts.metrics``), as
  ``metric.<name>``;
- per task (``tasks``, keyed by component and task index): the same figures of its jobs, and
  its Storm task id; the spout tasks on the driver count theirs themselves and are read
  through ``task_sources`` (``task_counters`` merges both);
- per stateful component, its checkpoint sizes (``StateWrite``): the bytes of state changes
  its tasks sent back per transaction, when the provider is driver-owned (the others write
  from the tasks, and the driver never sees the bytes);
- per stateful component, its state size (``StateKeys``): the committed keys of its tasks'
  namespaces after a commit, counted by the provider at most once per
  ``topology.state.size.interval.ms`` (``StateKeyCounter``), ``None`` when it cannot count;
- per transaction: a ``TransactionInfo`` (the last ``_KEEP``), the count of each (action,
  outcome) since the start, and the durations per action as a histogram (``DurationHistogram``);
- errors: the text of each error counted per component (``errors``) and, in ``error_log``, the
  last ``_LOG`` errors of any kind with where they happened and, when the driver has it, the
  Python traceback (a task that failed its job: Spark hands the worker's traceback back; a
  ``report_error`` from a task carries the exception's own traceback when it had been raised,
  see ``ReportedError``);
- recoveries: every transaction the protocol ran to recover (``TransactionInfo.recovery``: the
  checkpoint spout's ROLLBACK, INITSTATE, or a COMMIT rolled forward) and every failed
  transaction (kind ``RETRY``: the protocol tries it again, unless it gives up).
"""

from __future__ import annotations

import bisect
import collections
import logging
import threading
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from statefulbolts.metrics import METRIC_PREFIX
from statefulbolts.runtime._plan import ExecutionPlan
from statefulbolts.runtime._records import JobResult, ReportedError

__all__ = [
    "DURATION_BUCKETS",
    "ChangeSink",
    "DurationHistogram",
    "ErrorRecord",
    "RecoveryRecord",
    "StateKeys",
    "StateWrite",
    "Stats",
    "StatsSnapshot",
    "TaskCounters",
    "TransactionInfo",
    "format_traceback",
    "worker_traceback",
]


class ChangeSink(Protocol):
    """Where the state changes a job's tasks report go on the driver."""

    def apply_changes(self, namespace: str, changes: bytes) -> None:
        """Apply one task's change log of ``namespace``."""


# Transactions kept for ``metrics()``; the oldest half goes when there are more.
_KEEP = 10_000
# Errors and recoveries kept with their details (counts are kept for all of them).
_LOG = 200
# Checkpoint sizes, and state sizes, kept per component (the newest).
_SIZES = 600
# Characters of one traceback kept.
_TRACEBACK_CHARS = 20_000
# Upper bounds (seconds) of the transaction duration histogram's buckets; +Inf is implied.
DURATION_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
# The kind of recovery a failed transaction is: the protocol tries it again.
RETRY = "RETRY"

_COUNTERS = ("executed", "emitted", "acked", "failed", "replayed", "errors")
# The figures of one task; a spout task on the driver adds ``pending`` (its live tuple trees).
_TASK_COUNTERS = ("executed", "emitted", "acked", "failed", "seconds")

# Per task, (component, task index) -> its figures (``_TASK_COUNTERS``, ``task``: its id).
TaskCounters = dict[tuple[str, int], dict[str, float]]
_PYTHON_TRACEBACK = "Traceback (most recent call last):"
_TASK_ERROR_MARK = " [statefulbolts-task-error "


@dataclass
class TransactionInfo:
    """What one Spark job did; handed to ``on_transaction`` callbacks and kept in metrics.

    ``action`` is the job's ``JobSpec.action`` as its protocol gave it: a member of the
    protocol's ``StrEnum`` (``checkpoint.Action``, ``statefulbolts.transactional``'s
    ``BatchAction``), so ``info.action == "COMMIT"`` holds; ``None`` for a batch of a topology
    without stateful bolts (shown as ``BATCH``). ``as_dict`` gives it as a plain ``str``.
    """

    txid: int
    action: str | None
    tuples: int
    seconds: float
    ok: bool
    acked: int = 0
    failed: int = 0
    error: str | None = None
    # Seconds per job of a transactional batch ("emit", "process", "commit"); else empty.
    phases: dict[str, float] = field(default_factory=dict)
    # Whether the protocol ran it to recover (the checkpoint spout was recovering).
    recovery: bool = False
    # When it ended (Unix seconds); set when it is recorded.
    at: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict (the action a plain ``str``, not the protocol's enum)."""
        found = dict(self.__dict__)
        if self.action is not None:
            found["action"] = str(self.action)
        return found


@dataclass(frozen=True)
class ErrorRecord:
    """One error the topology met: where, what, and the traceback when the driver has one.

    ``kind`` is ``reported`` (a component's ``report_error``), ``failed`` (a transaction's job
    failed: a task raised, a worker died) or ``fatal`` (the error that stopped the topology).
    """

    at: float
    kind: str
    text: str
    component: str | None = None
    task: int | None = None
    txid: int | None = None
    traceback: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class StateWrite:
    """A checkpoint's size: the bytes of state changes a component's tasks sent back for a txid.

    Summed over the txid's jobs (a checkpoint's PREPARE and COMMIT; a batch's jobs), and known
    only for a driver-owned provider, whose changes travel back to the driver.
    """

    at: float
    txid: int
    component: str
    size: int

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class StateKeys:
    """A stateful component's size after the commit of ``txid``: its committed keys.

    The sum over its tasks' namespaces (a transactional committer's: every map of its tasks),
    as the provider counts them (``StateProvider.committed_key_counts``); ``None`` when the
    provider cannot count, which is not the same as an empty state.
    """

    at: float
    txid: int
    component: str
    keys: int | None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class RecoveryRecord:
    """One recovery step: a recovery transaction (its action), or a failed one to retry."""

    at: float
    kind: str
    txid: int
    ok: bool
    cause: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return dict(self.__dict__)


class DurationHistogram:
    """Counts of durations per bucket (``DURATION_BUCKETS``, then +Inf), their sum and count.

    Example:
        >>> h = DurationHistogram()
        >>> h.observe(0.2)
        >>> h.observe(7.0)
        >>> h.cumulative()[4:6], h.count, h.sum
        ([(0.25, 1), (0.5, 1)], 2, 7.2)
    """

    __slots__ = ("count", "sum", "_counts")

    def __init__(self) -> None:
        self._counts = [0] * (len(DURATION_BUCKETS) + 1)
        self.count = 0
        self.sum = 0.0

    def observe(self, seconds: float) -> None:
        """Count one duration."""
        self._counts[bisect.bisect_left(DURATION_BUCKETS, seconds)] += 1
        self.count += 1
        self.sum += seconds

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound, durations at most that long)`` per bucket, +Inf last."""
        out, running = [], 0
        for bound, n in zip((*DURATION_BUCKETS, float("inf")), self._counts, strict=True):
            running += n
            out.append((bound, running))
        return out

    def copy(self) -> DurationHistogram:
        """An independent copy."""
        other = DurationHistogram()
        other._counts = list(self._counts)
        other.count, other.sum = self.count, self.sum
        return other


@dataclass(frozen=True)
class StatsSnapshot:
    """A consistent copy of the records, for a reader on another thread."""

    transactions: list[TransactionInfo]
    outcomes: dict[tuple[str, bool], int]
    durations: dict[str, DurationHistogram]
    errors: list[ErrorRecord]
    recoveries: list[RecoveryRecord]
    recovery_counts: dict[str, int]


@dataclass
class Stats:
    """Counters per component, the last transactions, and every error seen."""

    components: dict[str, dict[str, float]] = field(default_factory=dict)
    transactions: list[TransactionInfo] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    on_transaction: Callable[[TransactionInfo], None] | None = None
    error_log: collections.deque[ErrorRecord] = field(
        default_factory=lambda: collections.deque(maxlen=_LOG)
    )
    recoveries: collections.deque[RecoveryRecord] = field(
        default_factory=lambda: collections.deque(maxlen=_LOG)
    )
    recovery_counts: collections.Counter[str] = field(default_factory=collections.Counter)
    # (action, ok) -> transactions recorded, since the start.
    outcomes: collections.Counter[tuple[str, bool]] = field(default_factory=collections.Counter)
    durations: dict[str, DurationHistogram] = field(default_factory=dict)
    # Per task of the jobs: see ``task_counters``.
    tasks: TaskCounters = field(default_factory=dict)
    # Who else counts per task (the spout tasks on the driver): called by ``task_counters``.
    task_sources: list[Callable[[], TaskCounters]] = field(default_factory=list)
    # Per component, its checkpoint sizes, oldest first.
    state_writes: dict[str, collections.deque[StateWrite]] = field(default_factory=dict)
    # Per stateful component, its state sizes, oldest first.
    state_keys: dict[str, collections.deque[StateKeys]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, component: str, **values: float) -> None:
        """Add to a component's counters."""
        row = self.components.get(component)
        if row is None:
            row = self.components.setdefault(component, dict.fromkeys(_COUNTERS, 0))
        for key, value in values.items():
            row[key] = row.get(key, 0) + value

    def error(
        self,
        component: str,
        text: str,
        *,
        task: int | None = None,
        txid: int | None = None,
        traceback: str | None = None,
    ) -> None:
        """Keep an error a component reported."""
        self.errors.append(text)
        self.add(component, errors=1)
        self.log_error(
            "reported", text, component=component, task=task, txid=txid, traceback=traceback
        )

    def log_error(
        self,
        kind: str,
        text: str,
        *,
        component: str | None = None,
        task: int | None = None,
        txid: int | None = None,
        traceback: str | None = None,
    ) -> None:
        """Keep an error's details in ``error_log`` (see ``ErrorRecord`` for ``kind``)."""
        if traceback is not None and len(traceback) > _TRACEBACK_CHARS:
            traceback = traceback[:_TRACEBACK_CHARS] + "\n... (cut)"
        record = ErrorRecord(time.time(), kind, text, component, task, txid, traceback)
        with self._lock:
            self.error_log.append(record)

    def record(
        self,
        info: TransactionInfo,
        *,
        component: str | None = None,
        task: int | None = None,
        traceback: str | None = None,
    ) -> None:
        """Keep one transaction's figures and tell the ``on_transaction`` callback.

        A failed transaction also goes to ``error_log``, with where it failed and the
        traceback when the caller has them; failed in a component (``component``), it is one
        of that component's errors too.
        """
        if not info.at:
            info.at = time.time()
        action = info.action or "BATCH"
        if not info.ok:
            text = f"{action}({info.txid}) failed: {info.error or 'no cause given'}"
            self.log_error(
                "failed", text, component=component, task=task, txid=info.txid, traceback=traceback
            )
            if component is not None:
                self.errors.append(text)
                self.add(component, errors=1)
        with self._lock:
            self.transactions.append(info)
            if len(self.transactions) > _KEEP:
                del self.transactions[: _KEEP // 2]
            self.outcomes[(action, info.ok)] += 1
            histogram = self.durations.get(action)
            if histogram is None:
                histogram = self.durations[action] = DurationHistogram()
            histogram.observe(info.seconds)
            if info.recovery or not info.ok:
                kind = action if info.recovery else RETRY
                recovery = RecoveryRecord(info.at, kind, info.txid, info.ok, info.error)
                self.recoveries.append(recovery)
                self.recovery_counts[kind] += 1
        if self.on_transaction is not None:
            self.on_transaction(info)

    def task_counters(self) -> TaskCounters:
        """A copy of the figures per task: the jobs' tasks, then the other sources' (any thread).

        Like the component counters, read without a lock: each task's dict is copied whole.
        """
        out = {key: dict(row) for key, row in list(self.tasks.items())}
        for source in list(self.task_sources):
            out.update(source())
        return out

    def checkpoint_sizes(self) -> dict[str, list[StateWrite]]:
        """A copy of the checkpoint sizes per component, oldest first (any thread)."""
        with self._lock:
            return {cid: list(sizes) for cid, sizes in self.state_writes.items()}

    def key_counts(self) -> dict[str, list[StateKeys]]:
        """A copy of the state sizes per component, oldest first (any thread)."""
        with self._lock:
            return {cid: list(kept) for cid, kept in self.state_keys.items()}

    def keys_counted(self, txid: int, counts: Mapping[str, int | None]) -> None:
        """Keep each component's committed keys after the commit of ``txid`` (``StateKeys``)."""
        at = time.time()
        with self._lock:
            for component, keys in counts.items():
                kept = self.state_keys.get(component)
                if kept is None:
                    kept = self.state_keys[component] = collections.deque(maxlen=_SIZES)
                kept.append(StateKeys(at, txid, component, keys))

    def state_written(self, txid: int, sizes: dict[str, int]) -> None:
        """Add the bytes of state changes each component's tasks sent back in a job of ``txid``.

        A txid's jobs add to one record per component (its checkpoint's size).
        """
        at = time.time()
        with self._lock:
            for component, size in sizes.items():
                kept = self.state_writes.get(component)
                if kept is None:
                    kept = self.state_writes[component] = collections.deque(maxlen=_SIZES)
                if kept and kept[-1].txid == txid:
                    size += kept.pop().size
                kept.append(StateWrite(at, txid, component, size))

    def snapshot(self, last: int | None = None) -> StatsSnapshot:
        """A copy of the records (only the ``last`` transactions, if given)."""
        with self._lock:
            txs = self.transactions if last is None else self.transactions[-last:] if last else []
            return StatsSnapshot(
                transactions=list(txs),
                outcomes=dict(self.outcomes),
                durations={k: h.copy() for k, h in self.durations.items()},
                errors=list(self.error_log),
                recoveries=list(self.recoveries),
                recovery_counts=dict(self.recovery_counts),
            )

    def take_reports(
        self,
        result: JobResult,
        plan: ExecutionPlan,
        txid: int,
        provider: ChangeSink | None,
        log: logging.Logger,
    ) -> list[ReportedError]:
        """Take in what a job's tasks reported; return their errors.

        Their state changes go to ``provider`` (a driver-owned provider, or the run's
        ``ImageShipper`` of one), their metrics to the counters; their errors are logged and
        kept, and so are those of the task attempts that failed and that Spark ran again
        (``JobResult.retried``), which are not returned.
        """
        names = plan.component_ids
        if provider is not None:
            written: dict[str, int] = {}
            for report in result.reports:
                for ns, changes in report.changes:
                    provider.apply_changes(ns, changes)
                    name = names[report.comp]
                    written[name] = written.get(name, 0) + len(changes)
            if written:
                self.state_written(txid, written)
        self.add_reports(result, names, plan.task_ids)
        errors = result.errors
        # Errors reported, then those of attempts Spark's retry survived (counted, not returned:
        # the job succeeded, and its protocol goes on as if they had not been).
        for e in [*errors, *result.retried]:
            text = f"component {names[e.comp]!r} task {e.task}: {e.text}"  # its index
            log.warning("txid %s: %s", txid, text)
            self.error(names[e.comp], text, task=e.task, txid=txid, traceback=e.traceback)
        return errors

    def add_reports(
        self,
        result: JobResult,
        names: list[str],
        task_ids: Sequence[Sequence[int]] | None = None,
    ) -> None:
        """Add every task report's metrics of a job (component names by plan index).

        With ``task_ids`` (the plan's, by component and task index) each task's own figures
        are added to ``tasks`` too.
        """
        for report in result.reports:
            m = report.metrics
            name = names[report.comp]
            self.add(
                name,
                executed=m.executed,
                emitted=m.emitted,
                acked=m.acked,
                failed=m.failed,
                seconds=m.seconds,
            )
            for metric, value in report.counted:  # registered metrics: ``metric.<name>``
                self.add(name, **{f"{METRIC_PREFIX}{metric}": value})
            if task_ids is None:
                continue
            key = (name, report.task)
            row = self.tasks.get(key)
            if row is None:
                row = dict.fromkeys(_TASK_COUNTERS, 0)
                row["task"] = task_ids[report.comp][report.task]
                row = self.tasks.setdefault(key, row)
            row["executed"] += m.executed
            row["emitted"] += m.emitted
            row["acked"] += m.acked
            row["failed"] += m.failed
            row["seconds"] += m.seconds


def worker_traceback(exc: BaseException) -> str | None:
    r"""The Python traceback a Spark worker sent back inside ``exc``'s text, if there is one.

    PySpark puts the worker's formatted traceback in the message of the exception the driver
    gets (after Java's own lines for a ``Py4JJavaError``). The Java stack frames that may follow
    (``\tat ...``) and the task error's encoded marker are left out.

    Example:
        >>> text = "boom:\nTraceback (most recent call last):\n  File x\nValueError: bad"
        >>> print(worker_traceback(RuntimeError(text + "\n\tat J")))
        Traceback (most recent call last):
          File x
        ValueError: bad
    """
    text = str(exc)
    start = text.find(_PYTHON_TRACEBACK)
    if start < 0:
        return _inline_traceback(exc)
    lines = []
    for line in text[start:].splitlines():
        if line.startswith("\tat ") or line.startswith("Caused by: "):
            break
        mark = line.find(_TASK_ERROR_MARK)
        lines.append(line[:mark] if mark >= 0 else line)
    return "\n".join(lines).rstrip()


def format_traceback(exc: BaseException) -> str:
    """``exc``'s traceback as Python prints it (with the exceptions it was raised from)."""
    return "".join(traceback.format_exception(exc)).rstrip()


def _inline_traceback(exc: BaseException) -> str | None:
    """The traceback of a task that ran in the driver (``Engine.run_here``): its own."""
    from statefulbolts.errors import TaskFailedError

    if not isinstance(exc, TaskFailedError) or exc.__traceback__ is None:
        return None
    text = format_traceback(exc)
    mark = text.find(_TASK_ERROR_MARK)
    return (text[:mark] if mark >= 0 else text).rstrip()
