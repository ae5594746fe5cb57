"""Moved to ``statefulbolts.connectors.redis``; this old path warns once and re-exports it.

``python -m statefulbolts.redis_stream load|info`` still works (the warning goes to stderr);
``python -m statefulbolts.connectors.redis load|info`` is the new spelling.
"""

import sys

from statefulbolts._moved import warn_moved
from statefulbolts.connectors.redis import (
    DEFAULT_URL,
    GROUP_KEY,
    STREAM_KEY,
    URL_KEY,
    RedisStreamSpout,
    entry_values,
    load_stream,
    main,
    pending_count,
)

__all__ = [
    "DEFAULT_URL",
    "GROUP_KEY",
    "STREAM_KEY",
    "URL_KEY",
    "RedisStreamSpout",
    "entry_values",
    "load_stream",
    "main",
    "pending_count",
]

warn_moved("statefulbolts.redis_stream", __name__)

if __name__ == "__main__":
    sys.exit(main())
