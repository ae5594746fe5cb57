"""Moved to ``statefulbolts.connectors.redis``; this old path warns once and resolves its names.

The names are looked up in the connector when first used (a module ``__getattr__``), as the
package's lazy names are: the transactional protocol sits below the connectors and imports none.
"""

from importlib import import_module
from typing import Any

from statefulbolts._moved import MOVED, warn_moved

_NAMES = frozenset(
    {
        "OpaqueRedisStreamsTransactionalSpout",
        "RedisStreamsTransactionalSpout",
        "close_connections",
        "load_streams",
    }
)

_OLD = "statefulbolts.transactional._redis_streams"

warn_moved(_OLD, __name__)


def __getattr__(name: str) -> Any:
    if name not in _NAMES:
        msg = f"module {_OLD!r} has no attribute {name!r}"
        raise AttributeError(msg)
    return getattr(import_module(MOVED[_OLD]), name)
