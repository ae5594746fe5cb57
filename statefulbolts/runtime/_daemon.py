"""PySpark's worker daemon, with workers that end quietly when the JVM has already gone.

When a SparkContext stops, the JVM closes the sockets of its idle Python workers and then stops
their daemon. A reused worker waiting for its next task wakes up to a closed socket, and the
final flush of what it would have said fails with ``BrokenPipeError``; PySpark's daemon prints
that traceback to the driver's stderr, so a clean run ended with two or three tracebacks.
Nobody is left to read what such a worker would say, so this daemon ends it without one.

Runtimes on this machine select it with ``spark.python.daemon.module`` (see ``_spark``); it runs
PySpark's own daemon loop otherwise unchanged. No import of this package's runtime: the daemon
forks workers, and must stay small.
"""

from __future__ import annotations

from typing import Any

import pyspark.daemon as _pyspark_daemon

_worker = _pyspark_daemon.worker


def worker(sock: Any, authenticated: bool) -> int:
    """PySpark's ``worker``; a socket the JVM already closed ends it with exit code 1."""
    try:
        code: int = _worker(sock, authenticated)
    except (BrokenPipeError, ConnectionResetError):
        return 1  # non-zero: the daemon's loop ends this worker process without a retry
    return code


_pyspark_daemon.worker = worker

if __name__ == "__main__":
    _pyspark_daemon.manager()
