"""PySpark's worker daemon, with workers that start fast and end quietly.

**Ending quietly.** When a SparkContext stops, the JVM closes the sockets of its idle Python
workers and then stops their daemon. A reused worker waiting for its next task wakes up to a
closed socket, and the final flush of what it would have said fails with ``BrokenPipeError``;
PySpark's daemon prints that traceback to the driver's stderr, so a clean run ended with two or
three tracebacks. Nobody is left to read what such a worker would say, so this daemon ends it
without one.

**Starting fast.** Spark puts its own archives first on a worker's path: ``pyspark.zip``, py4j's
zip and the ``spark-core`` jar (40 MB, 6,000 entries, no Python in it). With Python 3.10 and
later that is slow twice over. ``importlib.invalidate_caches()``, which PySpark's worker calls
when it adds its files folder to the path, makes each zip importer read its archive's directory
again: the jar twice, ``pyspark.zip`` once per package imported from it, about 140 ms. PySpark
4 makes that call at a worker's first task; PySpark 3.5 at every task (63-67 ms of each). And a
zip holds no compiled modules, so every new worker compiled ``pyspark.worker`` and its imports
from source. Where the same pyspark is installed as plain files (the pip package, whose own
folder holds these archives), the daemon takes them off its path before it imports pyspark
(``use_installed_packages``); its workers, forked from it, import the installed files instead.
A job on new workers took about 300 ms, now 65-72 ms.

Runtimes on this machine select it with ``spark.python.daemon.module`` (see ``_spark``); it runs
PySpark's own daemon loop otherwise unchanged. It imports nothing of this package's runtime: the
daemon forks workers, and must stay small.
"""

from __future__ import annotations

import os
import sys
import zipfile
from collections.abc import Sequence
from typing import Any


def _installed(name: str, path: Sequence[str]) -> bool:
    """Whether a folder on ``path`` holds package or module ``name`` as plain files."""
    for entry in path:
        if entry and not os.path.isfile(entry):
            base = os.path.join(entry, name)
            if os.path.isfile(os.path.join(base, "__init__.py")) or os.path.isfile(base + ".py"):
                return True
    return False


def _python_in(archive: str) -> set[str] | None:
    """The top-level Python packages and modules in ``archive``; ``None``: it cannot be read.

    Sources and compiled modules both count: an archive of ``.pyc`` files holds Python too.
    """
    try:
        with zipfile.ZipFile(archive) as zipped:
            names = zipped.namelist()
    except (OSError, zipfile.BadZipFile):
        return None
    return {
        name.split("/", 1)[0].removesuffix(".pyc").removesuffix(".py")
        for name in names
        if name.endswith((".py", ".pyc"))
    }


def redundant_archives(path: Sequence[str]) -> list[str]:
    """The archives on ``path`` that an installed pyspark carries, and whose Python is installed.

    Only archives inside the folder of the pyspark installed on ``path`` (the same installation,
    so the same version), and only when every package in them is installed as plain files too
    (py4j is the pip package's dependency; the jar has no Python).
    """
    homes = [
        os.path.join(entry, "pyspark") + os.sep
        for entry in path
        if entry and os.path.isfile(os.path.join(entry, "pyspark", "__init__.py"))
    ]
    found: list[str] = []
    for entry in path:
        if not any(entry.startswith(home) for home in homes) or not os.path.isfile(entry):
            continue
        packages = _python_in(entry)
        if packages is not None and all(_installed(name, path) for name in packages):
            found.append(entry)
    return found


def use_installed_packages() -> list[str]:
    """Take ``redundant_archives`` off ``sys.path`` and forget their importers; those taken."""
    dropped = redundant_archives(sys.path)
    if dropped:
        sys.path[:] = [entry for entry in sys.path if entry not in dropped]
        for key in list(sys.path_importer_cache):
            if any(key == archive or key.startswith(archive + os.sep) for archive in dropped):
                del sys.path_importer_cache[key]
    return dropped


use_installed_packages()  # before pyspark is imported: the daemon and its workers use the files

import pyspark.daemon as _pyspark_daemon  # noqa: E402 - after the path is set

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
