r"""``DirectorySpout``: the lines of the files of a directory, read on the executors.

Each file directly in the directory is a partition (its name); a line is a record of one field;
the position is a byte offset, after the last full line read. A line is full once its newline
is written: a writer that appends whole lines may keep appending while the topology runs, and
a last line still without its newline waits for it. New files are picked up at the next
transaction (the driver lists the directory before each PREPARE). Files whose name starts with
``.`` are left out (a writer can write ``.name`` and rename it when done).

A transaction reads no further than each file's size when the driver listed it (``ends``): a
line appended after that waits for the next transaction, even in a Spark task that runs again
after the append (a retry, or a rerun after its executor was lost), so every attempt of a task
reads the same lines. A file is appended to, never rewritten in place: a position is a byte
offset into it.

Every process that runs a spout task must see the directory at the same path: on one machine
any directory does; on a cluster, a shared file system.

Example:
    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "a.txt").write_text("the cow\njumped\nover")
    >>> spout = DirectorySpout(str(folder))
    >>> spout.partitions({})
    ['a.txt']
    >>> spout.open_reader({}, None, "a.txt", None).read(10)
    PartitionBatch(records=[['the cow'], ['jumped']], position=15, stream='default')
    >>> spout.ends({}, ["a.txt"])
    {'a.txt': 19}
    >>> spout.open_reader({}, None, "a.txt", None, end=10).read(10)
    PartitionBatch(records=[['the cow']], position=8, stream='default')
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

from statefulbolts.components import OutputFieldsDeclarer
from statefulbolts.context import TopologyContext
from statefulbolts.errors import TopologyError
from statefulbolts.partitioned import PartitionBatch, PartitionedSpout, PartitionReader
from statefulbolts.tuples import Fields

__all__ = ["DirectorySpout"]


class DirectorySpout(PartitionedSpout):
    """The lines of the files of ``directory``, each file a partition (see the module docstring).

    Args:
        directory: the directory whose files are read (not its subdirectories).
        field: the name of the tuples' one field.
        encoding: how the files' bytes are decoded.
    """

    def __init__(self, directory: str, field: str = "line", encoding: str = "utf-8") -> None:
        self.directory = directory
        self.field = field
        self.encoding = encoding

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """One field, ``field``."""
        declarer.declare(Fields(self.field))

    def partitions(self, conf: Mapping[str, Any]) -> list[str]:
        """The names of the directory's files, sorted; hidden ones (``.name``) left out.

        Raises:
            TopologyError: the directory cannot be listed.
        """
        try:
            with os.scandir(self.directory) as entries:
                return sorted(e.name for e in entries if e.is_file() and not e.name.startswith("."))
        except OSError as exc:
            msg = f"DirectorySpout cannot list {self.directory!r}: {exc}; create it or fix the path"
            raise TopologyError(msg) from exc

    def ends(self, conf: Mapping[str, Any], partitions: Sequence[str]) -> dict[str, int]:
        """Each file's size now (0 for a file removed since the listing)."""
        sizes: dict[str, int] = {}
        for partition in partitions:
            try:
                sizes[partition] = os.stat(os.path.join(self.directory, partition)).st_size
            except FileNotFoundError:
                sizes[partition] = 0  # removed: its reader reads nothing either
        return sizes

    def has_more(self, conf: Mapping[str, Any], partition: str, position: Any) -> bool:
        """Whether the file is longer than ``position`` (it may end in a partial line)."""
        try:
            size = os.stat(os.path.join(self.directory, partition)).st_size
        except FileNotFoundError:
            return False  # removed: nothing more to read
        return size > (position or 0)

    def open_reader(
        self,
        conf: Mapping[str, Any],
        context: TopologyContext,
        partition: str,
        position: Any,
        end: int | None = None,
    ) -> PartitionReader:
        """A reader of the file ``partition`` from byte ``position`` (``None``: 0).

        ``end``: the byte no line read may go past (``ends``); ``None``: the file's end.
        """
        offset = 0 if position is None else position
        for what, value in (("position", offset), ("end", 0 if end is None else end)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                msg = (
                    f"DirectorySpout {what} of {partition!r} is {value!r}, expected a byte "
                    "offset (an int >= 0)"
                )
                raise TopologyError(msg)
        path = os.path.join(self.directory, partition)
        return _LineReader(path, offset, end, self.encoding)


class _LineReader(PartitionReader):
    """Full lines of one file from a byte offset, up to an end (``None``: the file's)."""

    def __init__(self, path: str, offset: int, end: int | None, encoding: str) -> None:
        self.path, self.offset, self.end, self.encoding = path, offset, end, encoding

    def read(self, max_records: int) -> PartitionBatch:
        """Up to ``max_records`` full lines, each without its line ending (LF or CRLF).

        A line whose newline lies at or past the end is not read: it was not whole when the
        driver listed the file.
        """
        records: list[list[str]] = []
        offset = self.offset
        end = self.end
        if max_records <= 0:
            return PartitionBatch(records, offset)
        encoding = self.encoding
        try:
            f = open(self.path, "rb")  # noqa: SIM115 - closed below, after a seek
        except FileNotFoundError:
            return PartitionBatch(records, offset)  # removed since the listing: it stays put
        with f:
            f.seek(offset)
            for line in f:
                if not line.endswith(b"\n"):
                    break  # not written whole yet
                if end is not None and offset + len(line) > end:
                    break  # appended after the listing: the next transaction's
                offset += len(line)
                records.append([line.rstrip(b"\r\n").decode(encoding)])
                if len(records) >= max_records:
                    break
        return PartitionBatch(records, offset)
