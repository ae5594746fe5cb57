"""Getting a SparkSession that suits the runtime, bound to loopback for local masters.

``build_session`` makes one for a master; ``application_session`` takes the one of an
application that ``spark-submit`` launched.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import os
import re
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from statefulbolts.errors import ConfigError

log = logging.getLogger(__name__)

LOOPBACK = "127.0.0.1"
_LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})
_LOCAL = re.compile(r"^local(\[(?P<n>\*|\d+)(,(?P<f>\d+))?\])?$")


def is_local(master: str) -> bool:
    """Whether ``master`` runs everything in this machine's driver JVM (``local``, ``local[N]``)."""
    return bool(_LOCAL.match(master.strip()))


def is_loopback_master(master: str) -> bool:
    """Whether ``master`` is a standalone master (``spark://h:p[,h:p]``) on this machine only."""
    url = master.strip()
    if not url.startswith("spark://"):
        return False
    hosts = [part.rpartition(":")[0] or part for part in url[len("spark://") :].split(",")]
    return bool(hosts) and all(h.strip("[]") in _LOOPBACK_HOSTS for h in hosts)


def with_task_retries(master: str, max_failures: int) -> str:
    """``local[N]`` retries nothing; make it ``local[N,F]`` as a cluster would retry F times."""
    m = _LOCAL.match(master.strip())
    if not m or m.group("f") is not None:
        return master
    return f"local[{m.group('n') or 1},{max_failures}]"


def task_attempts(sc: Any) -> int:
    """How many attempts Spark gives a task of ``sc`` (``local[N,F]``: F; ``local[N]``: 1).

    Example:
        >>> class Context:
        ...     master = "local[2,4]"
        >>> task_attempts(Context())
        4
    """
    m = _LOCAL.match(str(sc.master).strip())
    if m:
        return int(m.group("f") or 1)
    return int(sc.getConf().get("spark.task.maxFailures", "4"))


def loopback_settings(user_conf: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Spark settings that keep a local run on 127.0.0.1, unless the user set them."""
    user_conf = user_conf or {}
    os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
    wanted = {
        "spark.driver.host": LOOPBACK,
        "spark.driver.bindAddress": LOOPBACK,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
    }
    return {k: v for k, v in wanted.items() if k not in user_conf}


# The driver JVM of a local master mostly moves pickled bytes between the Python workers, which
# do the real work. Its C2 JIT compiler, busy for tens of seconds after start, took most of a
# core from them (on 2 cores the word count bench ran 1.5x slower); C1 alone compiles cheaply
# and is fast enough for moving bytes. The executors of a standalone cluster on this machine (a
# loopback master) share its cores with the driver too: there C1 took the latency bench's p50
# at 1,000 tuples/s from 98 to 62 ms in runs of 10 s, where C2's compiling after start weighs
# most; over 20 s the two were within noise (docs/benchmarks.md).
LOCAL_JVM_OPTIONS = "-XX:TieredStopAtLevel=1"


# Spark's own log (its JVM's log4j): quiet unless asked. ``statefulbolts run --spark-log LEVEL``
# sets this variable; the driver JVM starts with our log4j2 config at that level (Spark's default
# profile prints four lines of its own on every start) and the running context gets it too. At
# the default level the config also leaves out Spark's lines about failed task attempts, which
# the framework reports itself (``_retried``, ``log4j2.properties``).
SPARK_LOG_ENV = "STATEFULBOLTS_SPARK_LOG_LEVEL"
DEFAULT_SPARK_LOG_LEVEL = "ERROR"
SPARK_LOG_LEVELS = ("ALL", "TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF")
LOG4J2_CONFIG = os.path.join(os.path.dirname(os.path.abspath(__file__)), "log4j2.properties")
_DRIVER_JAVA_OPTIONS = "spark.driver.extraJavaOptions"


def spark_log_level() -> str:
    """The level of Spark's own log: ``$STATEFULBOLTS_SPARK_LOG_LEVEL``, else ``ERROR``.

    Raises:
        ConfigError: the variable names no log4j level.
    """
    level = os.environ.get(SPARK_LOG_ENV, DEFAULT_SPARK_LOG_LEVEL).strip().upper()
    if level not in SPARK_LOG_LEVELS:
        msg = (
            f"{SPARK_LOG_ENV}={os.environ[SPARK_LOG_ENV]!r} is not a Spark log level; use one "
            f"of {', '.join(SPARK_LOG_LEVELS)}"
        )
        raise ConfigError(msg)
    return level


# The levels at which Spark's own lines about a failed task attempt, which the framework reports
# itself, are left out (``log4j2.properties``); a more verbose level shows them.
_QUIET_TASK_ERRORS = ("ERROR", "FATAL", "OFF")


def with_log_options(java_options: str | None, level: str) -> str | None:
    """``java_options`` with our log4j2 config at ``level`` in front.

    Left as they are when they name a log4j2 config of their own, or when this package's file
    is missing (Spark then logs as it would). Below ``ERROR`` (``WARN``, ``INFO``, ...) Spark's
    lines about failed task attempts show too (``-Dstatefulbolts.spark.taskErrors=NEUTRAL``).
    """
    if "log4j2.configurationFile" in (java_options or "") or not os.path.isfile(LOG4J2_CONFIG):
        return java_options
    path = f'"{LOG4J2_CONFIG}"' if any(c.isspace() for c in LOG4J2_CONFIG) else LOG4J2_CONFIG
    ours = f"-Dlog4j2.configurationFile={path} -Dstatefulbolts.spark.log={level}"
    if level not in _QUIET_TASK_ERRORS:
        ours += " -Dstatefulbolts.spark.taskErrors=NEUTRAL"
    return f"{ours} {java_options}" if java_options else ours


def local_jvm_settings(
    user_conf: Mapping[str, Any] | None = None, *, executors: bool = False
) -> dict[str, str]:
    """JVM options for JVMs on this machine, unless set: the driver's, and ``executors``'.

    A local master's driver is also its executor; a loopback standalone master's executors run
    here too.
    """
    user_conf = user_conf or {}
    keys = ["spark.driver.extraJavaOptions"]
    if executors:
        keys.append("spark.executor.extraJavaOptions")
    return {key: LOCAL_JVM_OPTIONS for key in keys if key not in user_conf}


# Python workers talk to their JVM over a socket per task. Over TCP each small task paid about
# 50 ms in the Nagle / delayed-ACK stall between the JVM's writes and the worker's reads (an empty
# one-partition job took 80 ms, against 12 ms for the same job without Python); a Unix domain
# socket has no such stall (30 ms) and no network address at all. PySpark has it from 4.1.
UDS_KEY = "spark.python.unix.domain.socket.enabled"


# PySpark's daemon prints a BrokenPipeError traceback for each idle worker whose socket the JVM
# closed while the SparkContext stopped; ours ends them quietly (see ``_daemon``). Local masters
# only: there the tracebacks land on the driver's stderr, and the workers import what the driver
# imports; a cluster's executors start their daemon before any shipped zip is on their path.
DAEMON_KEY = "spark.python.daemon.module"
DAEMON_MODULE = "statefulbolts.runtime._daemon"


def python_daemon_settings(user_conf: Mapping[str, Any] | None = None) -> dict[str, str]:
    """The worker daemon for masters on this machine (``DAEMON_MODULE``), unless the user chose."""
    return {} if DAEMON_KEY in (user_conf or {}) else {DAEMON_KEY: DAEMON_MODULE}


def python_worker_settings(user_conf: Mapping[str, Any] | None = None) -> dict[str, str]:
    """Python worker transport for masters on this machine, unless the user chose one."""
    import socket

    from pyspark import __version__ as pyspark_version

    if UDS_KEY in (user_conf or {}) or not hasattr(socket, "AF_UNIX"):
        return {}
    major, minor = (int(part) for part in re.findall(r"\d+", pyspark_version)[:2])
    if (major, minor) < (4, 1):
        return {}
    return {UDS_KEY: "true"}


def _session_settings(
    master: str, spark_conf: Mapping[str, Any], task_max_failures: int
) -> dict[str, str]:
    """What the runtime sets for ``master`` before a SparkContext starts (``spark_conf`` wins).

    Local and loopback standalone masters: loopback binding, the Python worker transport and
    the C1 JIT for the JVMs on this machine (``LOCAL_JVM_OPTIONS``). Local masters only: the
    quiet worker daemon, and executors that import what the driver can
    (``spark.executorEnv.PYTHONPATH`` from ``sys.path``). Other masters:
    ``spark.task.maxFailures``; their executors get this project from ``_shipping``.
    """
    settings: dict[str, str] = {}
    if is_local(master) or is_loopback_master(master):
        settings.update(loopback_settings(spark_conf))
        settings.update(python_worker_settings(spark_conf))
        settings.update(local_jvm_settings(spark_conf, executors=is_loopback_master(master)))
    if is_local(master):
        settings.update(python_daemon_settings(spark_conf))
        if "spark.executorEnv.PYTHONPATH" not in spark_conf:
            # Local workers run on this machine: let them import what the driver can.
            paths = [p for p in sys.path if p and os.path.isdir(p)]
            settings["spark.executorEnv.PYTHONPATH"] = os.pathsep.join(paths)
    elif "spark.task.maxFailures" not in spark_conf:
        settings["spark.task.maxFailures"] = str(task_max_failures)
    return settings


def build_session(
    master: str = "local[2]",
    app_name: str = "statefulbolts",
    spark_conf: Mapping[str, Any] | None = None,
    task_max_failures: int = 4,
) -> Any:
    """Create (or get) a SparkSession for ``master``.

    Local masters, and standalone masters on 127.0.0.1 / localhost, get loopback binding (unless
    ``spark_conf`` says otherwise): a driver that talks to executors on this machine only has no
    reason to listen on any other interface; their Python workers talk to the JVM over Unix
    domain sockets where PySpark supports them (``UDS_KEY``), and their JVMs (the driver's, and a
    loopback master's executors) get ``LOCAL_JVM_OPTIONS`` (C1 JIT only) unless ``spark_conf``
    sets their ``extraJavaOptions``. Local masters' workers run through a daemon whose workers
    end quietly when the JVM stops first (``DAEMON_MODULE``). Other masters keep Spark's
    defaults, except that ``spark.task.maxFailures`` is ``task_max_failures`` unless
    ``spark_conf`` sets it. The driver JVM of every master logs at ``spark_log_level()`` from
    its start (``LOG4J2_CONFIG``), unless ``spark.driver.extraJavaOptions`` names a log4j2
    config.
    """
    from pyspark.sql import SparkSession

    spark_conf = dict(spark_conf or {})
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name)
    settings = _session_settings(master, spark_conf, task_max_failures)
    if is_local(master):
        master = with_task_retries(master, task_max_failures)
    options = {**settings, **spark_conf}
    java = with_log_options(options.get(_DRIVER_JAVA_OPTIONS), spark_log_level())
    if java is not None:
        options[_DRIVER_JAVA_OPTIONS] = java
    for key, value in options.items():
        builder = builder.config(key, str(value))
    return _started(builder.master(master))


def under_spark_submit() -> bool:
    """Whether this Python process was started by ``spark-submit`` (its JVM is already up).

    ``spark-submit`` runs a Python application as a child of its JVM and tells it where that
    JVM's gateway listens (``PYSPARK_GATEWAY_PORT``); PySpark then uses that JVM, and the
    master and settings given to ``spark-submit``.
    """
    return "PYSPARK_GATEWAY_PORT" in os.environ


def application_session(task_max_failures: int = 4) -> Any:
    """The SparkSession of this application, as ``spark-submit`` (or a notebook) set it up.

    A running session (this thread's active one, or the process's) is returned as it is.
    Otherwise, under ``spark-submit``, one is created from the configuration it gave
    (``--master``, ``--conf``, ``--name``), never overriding it: the runtime adds only what
    ``build_session`` would add for that master and that is not set already (loopback binding
    for local masters, ``spark.task.maxFailures``). So a local master's UI is off unless
    ``--conf spark.ui.enabled=true``: its JVM, started by ``spark-submit``, binds the UI to
    every interface unless ``SPARK_LOCAL_IP`` was set for it. A local master's workers run this
    Python unless ``PYSPARK_PYTHON`` says otherwise; other masters' executors run
    ``spark.pyspark.python`` / ``PYSPARK_PYTHON`` (Spark's default: ``python3``).

    Raises:
        ConfigError: no session runs and this process was not started by ``spark-submit``.
    """
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    if SparkContext._active_spark_context is not None:
        return SparkSession.builder.getOrCreate()  # the process's session, on its context
    if not under_spark_submit():
        msg = (
            "no Spark application to submit to: StormSubmitter runs inside an application "
            "launched with spark-submit (spark-submit --master URL app.py), or where a "
            "SparkSession is running; to run a topology from a plain Python process use "
            "LocalCluster(master)"
        )
        raise ConfigError(msg)
    SparkContext._ensure_initialized()  # connect to spark-submit's JVM, whose conf we read
    given = dict(SparkConf().getAll())
    master = given.get("spark.master")
    if not master:
        msg = "spark-submit gave no master (spark.master): pass --master URL to spark-submit"
        raise ConfigError(msg)
    if is_local(master):  # workers on this machine: this Python, unless told otherwise
        os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = SparkSession.builder
    if "spark.app.name" not in given:
        builder = builder.appName("statefulbolts")
    for key, value in _session_settings(master, given, task_max_failures).items():
        builder = builder.config(key, value)
    return _started(builder)


def _started(builder: Any) -> Any:
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(spark_log_level())
    log.info("Spark session on %s", session.sparkContext.master)
    return session


def task_attempt() -> int:
    """The attempt number of the task running this code (0 outside a task).

    A Spark task's is Spark's; a task the driver runs itself (a job's head, ``_inline``) has
    the attempt the driver gives it (``driver_attempt``), counted as Spark counts.
    """
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return _DRIVER_ATTEMPT.get() if ctx is None else ctx.attemptNumber()


# The attempt of the task this thread runs in the driver (``driver_attempt``).
_DRIVER_ATTEMPT: contextvars.ContextVar[int] = contextvars.ContextVar("attempt", default=0)


@contextlib.contextmanager
def driver_attempt(attempt: int) -> Iterator[None]:
    """Run a task in the driver as its attempt ``attempt`` (0 first), as ``task_attempt`` says."""
    token = _DRIVER_ATTEMPT.set(attempt)
    try:
        yield
    finally:
        _DRIVER_ATTEMPT.reset(token)
