"""The Python file ``spark-submit`` runs for ``statefulbolts run`` (it needs a file, not a command).

::

    LAUNCHER=$(python -m statefulbolts.launcher --path)
    spark-submit [SPARK OPTIONS] "$LAUNCHER" run MODULE:ATTR [--conf FILE] [--json] ...

Everything after the file is ``statefulbolts``'s own command line; ``run`` then uses the
session ``spark-submit`` set up (its master, not ``--master``). ``--path`` prints this file's
path and does nothing else.

Run as a script, Python puts the script's folder first on ``sys.path``: this package's own
folder, whose modules (``errors``, ``topology``, ...) must not be importable as top-level
modules. The launcher puts the current directory there instead, as ``python -m`` does, so
``run my_topology:build`` finds ``my_topology.py`` where ``spark-submit`` was started, and adds
the folder this package lives in at the end, so a checkout that is not installed still works.
"""

from __future__ import annotations

import os
import sys

__all__ = ["main"]

HERE = os.path.dirname(os.path.abspath(__file__))


def main(argv: list[str] | None = None) -> int:
    """Print this file's path (``--path``), or run the ``statefulbolts`` command line."""
    args = sys.argv[1:] if argv is None else argv
    if args == ["--path"]:
        print(os.path.abspath(__file__))
        return 0
    if sys.path and sys.path[0] and os.path.abspath(sys.path[0]) == HERE:
        sys.path[0] = os.getcwd()
    parent = os.path.dirname(HERE)
    if parent not in sys.path:
        sys.path.append(parent)
    from statefulbolts.cli import main as cli_main

    return cli_main(args)


if __name__ == "__main__":
    sys.exit(main())
