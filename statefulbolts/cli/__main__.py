"""``python -m statefulbolts.cli``: the ``statefulbolts`` command, as the console script runs it."""

import sys

from statefulbolts.cli import main

if __name__ == "__main__":  # imported (by a walk over the package's modules), it runs nothing
    sys.exit(main())
