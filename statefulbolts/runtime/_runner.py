"""The life of one submitted topology on the driver, whatever its protocol.

A runner owns a thread that calls its protocol's ``_step`` until the topology is killed or
fails: a step does a bit of work (call spouts, start a job, settle one that ended) and says
whether it made progress; a step that made none waits a little. The first error a step raises
stops the loop and is kept, and ``await_idle`` raises it in the caller's thread. Subclasses
(``CheckpointRunner``, ``TransactionalRunner``) say what a step is, when the topology is idle,
and what ``status``, ``metrics`` and ``read_state`` show.

A runner given a lease (``HeldLease``: one driver per topology, ``recovery.lease``) puts its
epoch in the config every state is made with (``providers.FENCE_EPOCH_KEY``), keeps it renewed
while it runs and releases it when its loop ends. A lease taken over by another driver stops
the loop, and whatever error the stop surfaces, the runner reports the take-over
(``DriverFencedError``): after it, the store refuses every write of this driver.

``observe`` is for readers on other threads (the dashboard, Prometheus): it copies every figure
into an ``Observation`` without waiting for the driver loop longer than ``_OBSERVE_WAIT``. The
protocol's own view (its phase, committed txid, pending tuple trees) needs the loop's lock; when
a step holds it longer (a driver-side state call waiting out a backend outage), the last view
is shown again, marked ``stale``.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

from providers import FENCE_EPOCH_KEY, Lease, LeaseLostError
from statefulbolts.clock import Clock
from statefulbolts.config import TopologyConfig, validate_config
from statefulbolts.errors import DriverFencedError, TopologyError, TopologyFailedError
from statefulbolts.namespaces import RECORD_MARK
from statefulbolts.runtime._stats import Stats, StatsSnapshot, TransactionInfo, format_traceback

__all__ = [
    "BackendFigures",
    "HeldLease",
    "Observation",
    "Progress",
    "TopologyRunner",
]

log = logging.getLogger(__name__)
# How long ``observe`` waits for the driver loop's lock before showing the last view again.
_OBSERVE_WAIT = 0.25


class BackendFigures(Protocol):
    """What a protocol's failure gate counts of its state backend, for dashboards and metrics."""

    @property
    def backend_errors(self) -> int:
        """State backend errors seen so far."""

    @property
    def outage_seconds(self) -> float:
        """Seconds of state backend outage so far, the one under way included."""

    @property
    def backend_down(self) -> bool:
        """Whether an outage is under way."""


class HeldLease(Protocol):
    """The lease a driver holds on its topology (``recovery.lease.DriverLease``)."""

    @property
    def epoch(self) -> int:
        """The fencing token every write of this driver carries."""

    def keep(self, on_lost: Callable[[BaseException], None]) -> None:
        """Renew the lease until released; call ``on_lost`` once if another driver took it."""

    def release(self) -> None:
        """Stop renewing and end the lease, if it is still this driver's."""

    def taken_over(self) -> Lease | None:
        """The lease as the store holds it now, if another driver took it over."""


class Progress(NamedTuple):
    """Where a protocol is: a phase to show, the last committed txid, the pending tuple trees."""

    phase: str
    committed_txid: int | None
    pending_trees: int | None


@dataclass(frozen=True)
class Observation:
    """Everything a dashboard or a metrics scrape shows of a runner, copied at one moment.

    ``state`` is ``running``, ``idle``, ``failed`` (stopped by an error) or ``stopped``
    (killed); ``stale`` says the protocol's view (``status``, ``progress``) is the last one
    taken because the driver loop was busy.
    """

    name: str
    kind: str
    state: str
    started_at: float
    at: float
    status: dict[str, Any]
    progress: Progress
    stale: bool
    components: dict[str, dict[str, float]]
    stats: StatsSnapshot
    backend_errors: int
    outage_seconds: float
    backend_down: bool
    spout_lags: dict[str, int]
    error: str | None
    # Per partitioned spout: each partition's lag, and the gaps its readers jumped.
    partition_lags: dict[str, dict[str, int]] = field(default_factory=dict)
    spout_gaps: dict[str, int] = field(default_factory=dict)


class TopologyRunner(ABC):
    """Runs one topology on a SparkContext until killed or failed."""

    # What the protocol is called on dashboards: "checkpoint" or "transactional".
    kind = ""

    def __init__(
        self,
        name: str,
        conf: Mapping[str, Any] | None,
        *,
        clock: Clock | None = None,
        on_transaction: Callable[[TransactionInfo], None] | None = None,
        lease: HeldLease | None = None,
    ) -> None:
        if (
            not isinstance(name, str)
            or not name
            or "/" in name
            or name in (".", "..")
            or name.startswith(RECORD_MARK)
        ):
            msg = (
                "topology name must be a non-empty string without '/', not '.' or '..', and "
                f"not starting with {RECORD_MARK!r} (the framework's records), got {name!r}"
            )
            raise TopologyError(msg)
        self.name = name
        self.tc: TopologyConfig = validate_config(conf)
        self.conf: dict[str, Any] = {**dict(conf or {}), "topology.name": name}
        if self.tc.extlib_dir:
            self.conf["topology.state.extlib.dir"] = self.tc.extlib_dir
        # One driver per topology: every state this driver and its tasks make carries the
        # lease's epoch, and the store refuses it once another driver took over.
        self.lease = lease
        if lease is not None:
            self.conf[FENCE_EPOCH_KEY] = lease.epoch
        self._lost: BaseException | None = None
        self.clock = clock or Clock()
        self.stats = Stats(on_transaction=on_transaction)
        self.error: BaseException | None = None
        self.started_at = time.time()
        self._view: tuple[dict[str, Any], Progress] = ({}, Progress("starting", None, None))
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._idle = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._main, name=f"sb-{name}", daemon=True)

    # ----------------------------------------------------------------- what a protocol says
    @abstractmethod
    def _open(self) -> None:
        """Open what the topology needs before its loop starts; close it again on failure."""

    @abstractmethod
    def _step(self) -> bool:
        """One step of the loop (holding the lock); whether it made progress."""

    @abstractmethod
    def _wait_a_little(self) -> None:
        """Wait briefly after a step that made no progress (for a job, or for time to pass)."""

    @abstractmethod
    def _shutdown(self) -> None:
        """After the loop: wait for running jobs, close spouts, release Spark resources."""

    @abstractmethod
    def status(self) -> dict[str, Any]:
        """A snapshot of where the topology is."""

    @abstractmethod
    def read_state(self, component_id: str) -> dict[Any, Any]:
        """The committed state a component keeps, merged over its tasks (nothing prepared)."""

    @abstractmethod
    def _progress(self) -> Progress:
        """The protocol's phase, committed txid and pending trees (holding the lock)."""

    def _failure_gate(self) -> BackendFigures | None:
        """The protocol's failure gate (its state backend figures), if it keeps one."""
        return None

    def spout_lags(self) -> dict[str, int]:
        """Per spout component, what its source holds not yet acked (none by default)."""
        return {}

    def partition_lags(self) -> dict[str, dict[str, int]]:
        """Per partitioned spout, per partition, the records not yet read (none by default)."""
        return {}

    def spout_gaps(self) -> dict[str, int]:
        """Per partitioned spout, the gaps its readers jumped (none by default)."""
        return {}

    def observe(self, last: int | None = 200) -> Observation:
        """A copy of every figure for a reader on another thread (the ``last`` transactions).

        With the driver loop's lock (the usual case) the copy is of one moment between two
        steps: the protocol's view, the counters and the records agree. Without it (``stale``)
        the counters and records are read as they are, the protocol's view is the last one.
        """
        stale = not self._lock.acquire(timeout=_OBSERVE_WAIT)
        if stale:
            status, progress = self._view
            components, stats = self._counters(), self.stats.snapshot(last)
        else:
            try:
                status, progress = self._view = (self.status(), self._progress())
                components, stats = self._counters(), self.stats.snapshot(last)
            finally:
                self._lock.release()
        gate = self._failure_gate()
        if self.error is not None:
            state = "failed"
        elif self.done:
            state = "stopped"
        else:
            state = "idle" if self._idle.is_set() else "running"
        return Observation(
            name=self.name,
            kind=self.kind,
            state=state,
            started_at=self.started_at,
            at=time.time(),
            status=dict(status),
            progress=progress,
            stale=stale,
            components=components,
            stats=stats,
            backend_errors=gate.backend_errors if gate is not None else 0,
            outage_seconds=gate.outage_seconds if gate is not None else 0.0,
            backend_down=gate.backend_down if gate is not None else False,
            spout_lags=self.spout_lags(),
            error=str(self.error) if self.error is not None else None,
            partition_lags=self.partition_lags(),
            spout_gaps=self.spout_gaps(),
        )

    def metrics(self) -> dict[str, Any]:
        """Per component counters and per transaction figures.

        ``state_keys``: each stateful component's committed keys at the last count (``None``:
        the provider cannot count them); a component not counted yet is left out.
        """
        with self._lock:
            return {
                "components": self._counters(),
                "transactions": [t.as_dict() for t in self.stats.transactions],
                "errors": list(self.stats.errors),
                "status": self.status(),
                "state_keys": {
                    cid: kept[-1].keys for cid, kept in self.stats.key_counts().items() if kept
                },
            }

    def _counters(self) -> dict[str, dict[str, float]]:
        """The counters per component (a protocol may add its own); safe from any thread."""
        return {k: dict(v) for k, v in list(self.stats.components.items())}

    # ----------------------------------------------------------------- lifecycle
    def start(self) -> None:
        """Open the topology and start the driver loop in a thread.

        The lease (if any) is kept renewed from now on and released when the loop ends, or
        at once if opening fails.
        """
        lease = self.lease
        if lease is not None:
            lease.keep(self._lease_lost)
        try:
            self._open()
        except BaseException as exc:
            if lease is not None:
                fenced = self._fenced(exc)
                lease.release()
                if fenced is not None:
                    raise fenced from exc
            raise
        self._thread.start()

    def _lease_lost(self, exc: BaseException) -> None:
        """From the renewal thread: another driver took the lease over; stop the loop."""
        self._lost = exc
        self._stop.set()

    def _fenced(self, exc: BaseException | None) -> DriverFencedError | None:
        """The take-over error to report instead of ``exc``, if another driver took over.

        Whatever error a take-over surfaces first (a refused write in the driver or in a
        task, a renewal that found the lease gone), the cause to report is the take-over.
        """
        lease = self.lease
        if lease is None:
            return None
        now = lease.taken_over()
        if now is None:
            lost = self._lost
            if not isinstance(lost, LeaseLostError) or lost.lease is None:
                return None  # not taken over (a lease record gone with the store is lost state)
            now = lost.lease
        by = f": {now.describe()}"
        msg = (
            f"topology {self.name!r}: this driver (lease epoch {lease.epoch}) was taken over by "
            f"another driver{by}; it stopped, and the store refuses its writes from now on. "
            "The other driver keeps the topology's state; nothing needs cleaning up"
        )
        return DriverFencedError(msg, cause=str(exc or self._lost), fatal=True)

    def kill(self, timeout: float | None = 60) -> None:
        """Stop the loop after the running job, close the spouts."""
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    @property
    def done(self) -> bool:
        """Whether the loop has ended (killed or failed)."""
        return self._done.is_set()

    def await_idle(self, timeout: float | None = None) -> None:
        """Block until the topology is idle; raise its error if it failed."""
        if not self.wait_idle(timeout):
            msg = f"topology {self.name!r} not idle after {timeout} s: {self.status()}"
            raise TimeoutError(msg)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Whether the topology is idle within ``timeout`` seconds; its error if it failed.

        Raises:
            TopologyFailedError: (or the error it stopped with) it failed, or was killed first.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            if self.error is not None:
                raise self.error
            left = 0.05 if deadline is None else min(0.05, deadline - time.monotonic())
            if self._idle.wait(max(left, 0.0)):
                with self._lock:
                    if self._idle.is_set():
                        return True
            if self.done:
                if self.error is not None:
                    raise self.error
                msg = f"topology {self.name!r} was killed before it became idle"
                raise TopologyFailedError(msg)
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def _set_idle(self, idle: bool) -> None:
        if idle:
            self._idle.set()
        else:
            self._idle.clear()

    def _main(self) -> None:
        try:
            while not self._stop.is_set():
                with self._lock:
                    progressed = self._step()
                if not progressed:
                    self._wait_a_little()
                else:
                    self._after_progress()
            lost = self._lost
            if lost is not None:
                msg = f"topology {self.name!r} stopped: {lost}"
                raise TopologyFailedError(msg, cause=str(lost), fatal=True) from lost
        except BaseException as exc:  # noqa: BLE001 - kept and re-raised to the caller
            fenced = self._fenced(exc)
            if fenced is not None:
                fenced.__cause__ = exc
                exc = fenced
            # Not an error line: the error goes to whoever waits on the topology (``await_idle``
            # raises it, ``error`` holds it, the dashboard shows it), and is told there once.
            log.info("topology %r ended with %s: %s", self.name, type(exc).__name__, exc)
            self.stats.log_error("fatal", str(exc), traceback=format_traceback(exc))
            self.error = exc
        finally:
            try:
                self._shutdown()
            finally:
                if self.lease is not None:
                    self.lease.release()
                self._done.set()

    def _after_progress(self) -> None:  # noqa: B027 - an optional hook
        """Called after a step that made progress (a hook for pacing; nothing by default)."""
