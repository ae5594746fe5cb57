"""The files connectors: ``DirectorySpout`` (lines of a directory's files) and ``FileSink``.

In parts, as the other systems' connectors:

- ``_spout``: ``DirectorySpout``, each file of a directory a partition, a line a record;
- ``_sink``: ``FileSink`` (one part file per lane and committed txid, renamed into place, and
  a manifest entry per publish, linked into place, that commits them), its config model
  (``sink.files.path``, ``sink.files.format``) and the readers ``read_committed_parts``,
  ``read_committed_records`` and ``read_part``;
- ``_manifest``: the manifest's layout, entries and compaction;
- ``_formats``: JSON lines, CSV and Parquet (pyarrow, the ``parquet`` extra).

This was one module, ``statefulbolts.connectors.files``; it is a package now that the sink
came, and every name it had is still here.

Example:
    >>> from statefulbolts.connectors.files import DirectorySpout, FileSink
    >>> FileSink("/data/counts", format="csv", columns=["word", "count"]).name
    "files in '/data/counts'"
"""

from statefulbolts.connectors.files._formats import INSTALL_PARQUET
from statefulbolts.connectors.files._manifest import CommittedPart, ManifestError
from statefulbolts.connectors.files._sink import (
    SINK_FORMAT_KEY,
    SINK_PATH_KEY,
    FileSink,
    FileSinkConfig,
    read_committed_parts,
    read_committed_records,
    read_part,
)
from statefulbolts.connectors.files._spout import DirectorySpout

__all__ = [
    "INSTALL_PARQUET",
    "SINK_FORMAT_KEY",
    "SINK_PATH_KEY",
    "CommittedPart",
    "DirectorySpout",
    "FileSink",
    "FileSinkConfig",
    "ManifestError",
    "read_committed_parts",
    "read_committed_records",
    "read_part",
]

# The public home of the classes: what repr, pickle and messages name (DirectorySpout's home
# before this was a package).
DirectorySpout.__module__ = __name__
FileSink.__module__ = __name__
