"""``python -m statefulbolts.connectors.redis load|info``: fill a Redis stream, or inspect it.

``load --url URL --stream NAME [--field F] [FILE ...]`` adds the lines of the files (``-``:
stdin) as entries ``{F: line}``; ``info --url URL --stream NAME`` prints the stream's length and,
per consumer group, its pending count, as JSON.
"""

import sys

from statefulbolts.connectors.redis._streams import main

if __name__ == "__main__":
    sys.exit(main())
