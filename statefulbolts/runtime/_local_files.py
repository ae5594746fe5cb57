"""Large bytes between the driver and its Python workers as files, when they share a machine.

On a local master (``local``, ``local[N]``) the driver, Spark's JVM and every Python worker run
on this machine and see the same files. Bytes that would otherwise cross Spark can then go as a
file, and the job or the task's result carries only its path (``LocalFile``):

- **driver -> tasks**: a driver-owned image's large snapshot or delta (``_images``). A Spark
  broadcast of it also has the JVM read the file PySpark wrote, compress it and keep it as
  blocks: 25-60 ms for 7 MB, where writing the file takes a few.
- **task -> driver**: a task's large change log (``spill_changes``). As part of the task's
  result it is pickled into the JVM, kept there as a task result, fetched by the driver's JVM
  and served to the driver's Python again: for two sink tasks' 7 MB logs, 50-100 ms of the
  job and 100-120 ms of the JVM's CPU, against a few ms for the file.

The files go in PySpark's temporary folder (``SparkContext._temp_dir``), which the JVM deletes
when it exits; each has a prefix of its own run (``LocalFiles``), so the run can delete what is
left of its own (a task attempt that wrote a log and then failed) when it closes.
"""

from __future__ import annotations

import glob
import itertools
import os
import secrets
from collections.abc import Sequence
from typing import Any, NamedTuple

__all__ = ["SPILL_BYTES", "LocalFile", "LocalFiles", "spill_changes", "take_spilled"]

# A change log larger than this goes back to the driver as a file (on a local master).
SPILL_BYTES = 64 * 1024

_names = itertools.count()


class LocalFile(NamedTuple):
    """Bytes a job or a result refers to by a path on this machine (a broadcast's duck).

    ``value`` reads the file (a worker does, only when it needs the bytes), ``take`` reads it
    and deletes it, ``destroy`` deletes it.
    """

    path: str

    @property
    def value(self) -> bytes:
        with open(self.path, "rb") as f:
            return f.read()

    def take(self) -> bytes:
        data = self.value
        self.destroy()
        return data

    def destroy(self, blocking: bool = False) -> None:  # noqa: ARG002 - Broadcast's signature
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class LocalFiles:
    """Writes ``LocalFile``s into ``folder``, named ``<prefix>-<n>``.

    ``prefix`` is the run's own (a random one by default), so ``sweep`` deletes only its files.
    """

    def __init__(self, folder: str, prefix: str | None = None) -> None:
        self.folder = folder
        self.prefix = prefix or f"sb-{os.getpid()}-{secrets.token_hex(6)}"

    def __repr__(self) -> str:
        return f"LocalFiles({os.path.join(self.folder, self.prefix)}-*)"

    def broadcast(self, value: bytes) -> LocalFile:
        """``value`` in a new file (the name of ``SparkContext.broadcast``, which it stands for)."""
        path = os.path.join(self.folder, f"{self.prefix}-{os.getpid()}-{next(_names)}")
        with open(path, "wb") as f:
            f.write(value)
        return LocalFile(path)

    def sweep(self) -> None:
        """Delete every file of this run that is left."""
        for path in glob.glob(os.path.join(glob.escape(self.folder), f"{self.prefix}-*")):
            LocalFile(path).destroy()


def spill_changes(
    changes: Sequence[tuple[str, bytes]], files: LocalFiles | None
) -> tuple[tuple[str, Any], ...]:
    """A task's ``(namespace, change log)`` pairs, each log above ``SPILL_BYTES`` as a file."""
    if files is None:
        return tuple(changes)
    return tuple(
        (ns, files.broadcast(log) if len(log) > SPILL_BYTES else log) for ns, log in changes
    )


def take_spilled(reports: list[Any]) -> None:
    """Read back (and delete) the spilled change logs of ``reports`` (``TaskReport``s), in place."""
    for i, report in enumerate(reports):
        if any(isinstance(log, LocalFile) for _, log in report.changes):
            changes = tuple(
                (ns, log.take() if isinstance(log, LocalFile) else log)
                for ns, log in report.changes
            )
            reports[i] = report._replace(changes=changes)
