"""``StormSubmitter``: topologies inside an application launched with ``spark-submit``.

Storm's ``StormSubmitter.submitTopology`` hands a topology to a running cluster. Here the
cluster is the one ``spark-submit`` started the application on: ``submit_topology`` runs the
topology on the application's own SparkSession, with the master, resources and settings given
to ``spark-submit`` (nothing is overridden; a local master still gets loopback binding), and
returns at once with the topology's handle, as ``LocalCluster.submit_topology`` does. On a
non-local master the framework and the topology's own modules are shipped to the executors
(see ``statefulbolts.runtime._shipping``).

How the application's main waits, and how it is stopped:

- ``StormSubmitter.wait()`` blocks until every submitted topology has been killed
  (``handle.kill()`` or ``StormSubmitter.kill_topology(name)`` from another thread) or has
  failed: Storm's topologies run until they are killed. ``wait(until_idle=True)`` also
  returns once every topology is idle (its spouts emit nothing more, nothing is pending, the
  last checkpoint committed), for topologies over a finite input.
- SIGTERM or SIGINT (Ctrl-C) while ``wait`` runs kills every topology after its running
  transaction and ends the wait: what was committed stays committed, tuples not yet
  committed were never acked (a replaying spout sends them again in the next run). Send it
  to the Python driver process, ``spark-submit``'s child in client mode. A SIGTERM to
  ``spark-submit`` itself stops its JVM, and the SparkContext with it, under the running
  transaction: that one fails and is recovered by the next run, as after a driver crash.
- ``wait`` kills whatever still runs before it returns (or raises), and returns each
  topology's outcome.

``statefulbolts run`` uses the same session when it runs under ``spark-submit`` (launched
through ``statefulbolts.launcher``), ignoring its ``--master``.

Example (``wordcount_app.py``, run with ``spark-submit --master spark://host:7077
wordcount_app.py``)::

    from examples.wordcount import build
    from statefulbolts import StormSubmitter

    handle = StormSubmitter.submit_topology("wc", {"topology.max.spout.pending": 500}, build(2000))
    StormSubmitter.wait(until_idle=True)   # {'wc': 'idle'}
    print(handle.metrics()["components"]["count"])
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, ClassVar

from statefulbolts._cluster import LocalCluster, TopologyHandle
from statefulbolts.config import validate_config
from statefulbolts.errors import ConfigError, TopologyError
from statefulbolts.runtime import TransactionInfo, application_session, under_spark_submit
from statefulbolts.topology import StormTopology
from statefulbolts.transactional import TransactionalTopology

__all__ = ["StormSubmitter", "check_supervise", "cluster_for_run"]

log = logging.getLogger(__name__)

IDLE, KILLED, TERMINATED = "idle", "killed", "terminated"
_POLL_SECONDS = 0.2


class StormSubmitter:
    """Submits topologies to the Spark application this process runs in (Storm's name).

    Example:
        >>> handle = StormSubmitter.submit_topology("wc", conf, topology)  # doctest: +SKIP
        >>> StormSubmitter.wait(until_idle=True)  # doctest: +SKIP
        {'wc': 'idle'}
    """

    _cluster: ClassVar[LocalCluster | None] = None
    _handles: ClassVar[dict[str, TopologyHandle]] = {}
    _lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def submit_topology(
        cls,
        name: str,
        conf: Mapping[str, Any] | None,
        topology: StormTopology | TransactionalTopology,
        *,
        on_transaction: Callable[[TransactionInfo], None] | None = None,
    ) -> TopologyHandle:
        """Start ``topology`` as ``name`` on the application's SparkSession; returns its handle.

        The session is the one ``spark-submit`` configured (or the active one). A new session
        gets ``topology.spark.task.max.failures`` from the first topology's ``conf`` as
        ``spark.task.maxFailures`` unless ``spark-submit`` set it.

        Raises:
            ConfigError: a bad ``conf`` key, or no master (not under ``spark-submit``).
            TopologyError: the wiring is wrong, or ``name`` is already running.
        """
        settings = validate_config(conf)
        with cls._lock:
            cluster = cls._cluster
            if cluster is None or cluster.spark.sparkContext._jsc is None:
                spark = application_session(settings.task_max_failures)
                cluster = cls._cluster = LocalCluster(spark=spark)
                cls._handles = {}
            handle = cluster.submit_topology(name, conf, topology, on_transaction=on_transaction)
            cls._handles[name] = handle
        log.info("topology %s submitted to %s", name, cluster.spark.sparkContext.master)
        return handle

    @classmethod
    def kill_topology(cls, name: str) -> None:
        """Kill the submitted topology ``name`` after its running transaction."""
        with cls._lock:
            handle = cls._handles.get(name)
        if handle is None:
            msg = f"no topology named {name!r} was submitted; submitted: {sorted(cls._handles)}"
            raise TopologyError(msg)
        handle.kill()

    @classmethod
    def wait(cls, timeout: float | None = None, *, until_idle: bool = False) -> dict[str, str]:
        """Block until every submitted topology is killed or failed (or idle, if asked).

        SIGTERM and SIGINT kill every topology and end the wait (handled while ``wait`` runs,
        when it runs in the main thread). Every topology is killed before ``wait`` returns or
        raises.

        Returns:
            Each topology's outcome: ``"idle"`` (``until_idle``), ``"killed"``, or
            ``"terminated"`` (stopped by SIGTERM / SIGINT).

        Raises:
            TopologyFailedError: (or the error it stopped with) a topology failed; the others
                were killed.
            TimeoutError: ``timeout`` seconds passed first; every topology was killed.
        """
        with cls._lock:
            handles = dict(cls._handles)
        stop = threading.Event()
        restore = _on_signals(stop)
        try:
            return _wait_for(handles, stop, timeout, until_idle)
        finally:
            restore()
            for handle in handles.values():
                handle.kill()
            with cls._lock:
                for name in handles:
                    cls._handles.pop(name, None)


def _wait_for(
    handles: Mapping[str, TopologyHandle],
    stop: threading.Event,
    timeout: float | None,
    until_idle: bool,
) -> dict[str, str]:
    deadline = None if timeout is None else time.monotonic() + timeout
    outcome: dict[str, str] = {}
    pending = dict(handles)
    while pending:
        for name, handle in list(pending.items()):
            if handle.error is not None:
                raise handle.error
            if handle.runner.done:
                outcome[name] = KILLED
            elif until_idle and _is_idle(handle):
                outcome[name] = IDLE
            else:
                continue
            del pending[name]
        if not pending:
            break
        if stop.wait(_POLL_SECONDS):
            log.warning("signal received: killing %s", ", ".join(sorted(pending)))
            outcome.update(dict.fromkeys(pending, TERMINATED))
            break
        if deadline is not None and time.monotonic() > deadline:
            msg = f"topologies {sorted(pending)} still running after {timeout} s"
            raise TimeoutError(msg)
    return outcome


def _is_idle(handle: TopologyHandle) -> bool:
    try:
        handle.await_idle(_POLL_SECONDS)
    except TimeoutError:
        return False
    return True


def _on_signals(stop: threading.Event) -> Callable[[], None]:
    """Make SIGTERM and SIGINT set ``stop``; returns what puts the old handlers back."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}

    def handler(signum: int, frame: Any) -> None:
        stop.set()

    for sig in previous:
        signal.signal(sig, handler)

    def restore() -> None:
        for sig, old in previous.items():
            signal.signal(sig, old)

    return restore


def cluster_for_run(master: str | None, engine: str | None = None) -> LocalCluster:
    """The cluster ``statefulbolts run`` runs on.

    Under ``spark-submit``: the application's session (``--master`` is ignored, with a warning
    when it differs from ``spark-submit``'s). Otherwise a ``LocalCluster`` for ``master``
    (default ``local[2]``). ``engine="inline"`` runs the jobs in this process, without Spark.

    Raises:
        ConfigError: ``engine="inline"`` with a ``master`` or under ``spark-submit``.
    """
    if engine == "inline":
        if master is not None or under_spark_submit():
            where = f"--master {master}" if master is not None else "spark-submit"
            msg = f"--engine inline runs without Spark: it takes no {where}; drop one of the two"
            raise ConfigError(msg)
        return LocalCluster(engine="inline")
    if not under_spark_submit():
        return LocalCluster(master or "local[2]")
    cluster = LocalCluster(spark=application_session())
    actual = cluster.spark.sparkContext.master
    if master is not None and master != actual:
        log.warning("--master %s ignored: spark-submit runs this application on %s", master, actual)
    return cluster


def check_supervise() -> None:
    """Refuse ``statefulbolts run --supervise`` under ``spark-submit``.

    The supervised children would share ``spark-submit``'s one JVM, where a crashed child's
    SparkContext outlives it and its restart cannot create another.

    Raises:
        ConfigError: under ``spark-submit``.
    """
    if under_spark_submit():
        msg = (
            "--supervise cannot restart a driver inside spark-submit (one JVM, one "
            "SparkContext); use spark-submit's own --supervise (cluster deploy mode on a "
            "standalone master) or your cluster manager's restarts"
        )
        raise ConfigError(msg)
