"""What ``statefulbolts run`` prints on stdout, until the reader of a pipe goes away.

``statefulbolts run ... --json | head -1``: ``head`` exits after its line, and the next write
raises ``BrokenPipeError``, from the driver thread that reports each transaction or from the
main thread. A Unix tool dies of the ``SIGPIPE`` there, quietly, and its shell reports status
141; Python turns the signal into the exception, which stopped the topology with a traceback.
``Stdout`` catches it instead: it marks stdout closed (``closed``, which ``run`` waits on) and
points it at ``/dev/null``, so nothing printed later, nor the interpreter's last flush, fails;
``run`` then stops the topology after its running transaction and exits with
``SIGPIPE_EXIT_CODE``, as the tool would have.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable

__all__ = ["SIGPIPE_EXIT_CODE", "Stdout"]

# What a shell reports for a command a closed pipe stopped: 128 + SIGPIPE.
SIGPIPE_EXIT_CODE = 128 + signal.SIGPIPE


class Stdout:
    """Writes to ``sys.stdout`` that stop quietly once its reader has gone (any thread)."""

    def __init__(self) -> None:
        self.closed = threading.Event()
        self._lock = threading.Lock()

    def write(self, printing: Callable[[], None]) -> None:
        """Call ``printing`` (which writes to stdout) unless stdout was closed; note if it is."""
        if self.closed.is_set():
            return
        try:
            printing()
        except BrokenPipeError:
            self.close()

    def close(self) -> None:
        """The reader is gone: what is written from now on goes to ``/dev/null``."""
        with self._lock:
            if self.closed.is_set():
                return
            devnull = os.open(os.devnull, os.O_WRONLY)
            try:
                os.dup2(devnull, sys.stdout.fileno())
            finally:
                os.close(devnull)
            self.closed.set()
