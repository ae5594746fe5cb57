"""Old import paths that still work: the one warning a moved module gives when imported.

A module that moved leaves a small module at its old path that re-exports the new one's names
and calls ``warn_moved`` once, as it is imported (a module body runs once per process). The
warning is a ``DeprecationWarning`` that names the new path, pointed at the line that imported
the old one; run as a script (``python -m <old path>``) it is pointed at the old module itself,
which Python's default filters show on stderr. ``MOVED`` lists them all, old path to new.

Example:
    >>> MOVED["statefulbolts.directory_spout"]
    'statefulbolts.connectors.files'
"""

from __future__ import annotations

import warnings

__all__ = ["MOVED", "warn_moved"]

# Issue 32: the sources went to statefulbolts.connectors.
MOVED = {
    "statefulbolts.directory_spout": "statefulbolts.connectors.files",
    "statefulbolts.redis_stream": "statefulbolts.connectors.redis",
    "statefulbolts.redis_stream_partitioned": "statefulbolts.connectors.redis",
    "statefulbolts.transactional._redis_streams": "statefulbolts.connectors.redis",
}


def warn_moved(old: str, module_name: str) -> None:
    """Warn that module ``old`` moved to ``MOVED[old]``; call it from the old module's body.

    Args:
        old: the old module's dotted path.
        module_name: the old module's ``__name__`` (``"__main__"`` when it runs as a script).
    """
    new = MOVED[old]
    as_script = module_name == "__main__"
    # From here: 1 is this function, 2 the old module, 3 the line that imported it (the warnings
    # module skips the import machinery's own frames).
    warnings.warn(
        f"{old} has moved to {new}; import from {new} instead (the old path will be removed)",
        DeprecationWarning,
        stacklevel=2 if as_script else 3,
    )
