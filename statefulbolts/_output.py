"""Lines printed whole: what the command line (and a driver application) prints, across threads.

``print(text)`` writes the text and its newline in two writes. A topology reports each
transaction from its driver thread while the main thread prints too, so two events printed
at once could share a line (``{...}{...}``), and a reader that parses one JSON event per line
failed on it. ``print_line`` writes a line in one call, under one lock for the process.

Example:
    >>> print_event({"event": "transaction", "txid": 3})
    {"event": "transaction", "txid": 3}
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Mapping
from typing import Any, TextIO

__all__ = ["print_event", "print_line"]

_LOCK = threading.Lock()


def print_line(text: str, file: TextIO | None = None) -> None:
    """Write ``text`` and a newline to ``file`` (default: ``sys.stdout``) in one write."""
    stream = sys.stdout if file is None else file
    with _LOCK:
        stream.write(text + "\n")
        stream.flush()


def print_event(event: Mapping[str, Any], file: TextIO | None = None) -> None:
    """Write ``event`` as one JSON line (``print_line``)."""
    print_line(json.dumps(event), file)
