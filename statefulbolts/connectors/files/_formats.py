r"""The file formats ``FileSink`` writes: JSON lines, CSV, and Parquet when pyarrow is there.

A format does three things: ``stage`` turns a row (a mapping of column to value) into what the
sink bolt keeps in its state until the transaction commits (so a value the format cannot hold
fails the tuple that carries it, in the PREPARE); ``write`` writes staged rows to an open
binary file; ``read`` gives a written file's rows back, for readers and tests.

=========== ============= =========================================================
format      staged form   a part file
=========== ============= =========================================================
``jsonl``   the line      one compact JSON object per line, UTF-8, ``\n`` after each
``csv``     the row       a header (the columns), then one row per record (RFC 4180)
``parquet`` the row       one table, its columns' types inferred by pyarrow
=========== ============= =========================================================

Columns: ``columns`` (the sink's argument) fixes them and their order; without it a part's
columns are its rows' keys in the order they first appear. A CSV cell is the value's text
(``None`` an empty cell); CSV and Parquet take ``None``, bools, ints, floats and strings (and
Parquet bytes).

Example:
    >>> import io
    >>> fmt = format_named("csv")
    >>> rows = [{"word": "storm", "count": 3}, {"word": "a,b", "count": 1}]
    >>> staged = [fmt.stage(row) for row in rows]
    >>> out = io.BytesIO()
    >>> fmt.write(out, staged, None)
    >>> out.getvalue()
    b'word,count\r\nstorm,3\r\n"a,b",1\r\n'
    >>> fmt.read(io.BytesIO(out.getvalue()))
    [{'word': 'storm', 'count': '3'}, {'word': 'a,b', 'count': '1'}]
    >>> format_named("jsonl").stage({"word": "storm"})
    b'{"word":"storm"}'
"""

from __future__ import annotations

import csv
import io
import itertools
import json
from collections.abc import Mapping, Sequence
from typing import IO, Any, ClassVar

__all__ = ["FORMATS", "INSTALL_PARQUET", "FileFormat", "format_named"]

INSTALL_PARQUET = "pip install 'statefulbolts[parquet]'"
_SCALARS = (type(None), bool, int, float, str)
# One encoder for every JSON line: ``json.dumps`` with arguments makes a new one per call.
_JSON = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode


class FileFormat:
    """One format: its name, its files' extension, and ``stage`` / ``write`` / ``read``."""

    name: ClassVar[str]
    extension: ClassVar[str]

    def check(self) -> None:
        """Refuse a format whose library is missing (``ImportError`` with the install command)."""

    def stage(self, row: Mapping[str, Any]) -> Any:
        """The staged form of ``row`` (msgpack-able).

        Raises:
            TypeError, ValueError: a value the format cannot hold (the message says which).
        """
        raise NotImplementedError

    def stage_many(self, rows: Sequence[Mapping[str, Any]]) -> list[Any]:
        """``stage`` of each row, in order; a format does it with a loop in C where it can.

        Raises:
            TypeError, ValueError: a value the format cannot hold.
        """
        return [self.stage(row) for row in rows]

    def write(self, out: IO[bytes], staged: Sequence[Any], columns: Sequence[str] | None) -> None:
        """Write ``staged`` rows to ``out``, in order."""
        raise NotImplementedError

    def read(self, source: IO[bytes]) -> list[dict[str, Any]]:
        """The rows of a file this format wrote."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"<file format {self.name!r}>"


def _columns(staged: Sequence[Mapping[str, Any]], columns: Sequence[str] | None) -> list[str]:
    """``columns``, else the rows' keys in the order they first appear."""
    if columns is not None:
        return list(columns)
    seen: dict[str, None] = {}
    for row in staged:
        seen.update(dict.fromkeys(row))
    return list(seen)


def _scalar_rows(
    rows: Sequence[Mapping[str, Any]], allowed: tuple[type, ...], what: str
) -> list[dict[str, Any]]:
    """``_scalar_row`` of each row, checked at once when it can be.

    At once: every name is a str and every value's type is one of ``allowed`` exactly; else
    (a subclass, a value the format refuses) row by row, which names the value.
    """
    names = set(itertools.chain.from_iterable(rows))
    kinds = set(map(type, itertools.chain.from_iterable(row.values() for row in rows)))
    if all(type(n) is str for n in names) and kinds <= set(allowed):
        return [dict(row) for row in rows]
    return [_scalar_row(row, allowed, what) for row in rows]


def _scalar_row(row: Mapping[str, Any], allowed: tuple[type, ...], what: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for column, value in row.items():
        if not isinstance(column, str):
            msg = f"column names are str, got {column!r:.40}"
            raise TypeError(msg)
        if not isinstance(value, allowed):
            msg = f"column {column!r}: {what} cannot hold a {type(value).__name__} ({value!r:.60})"
            raise TypeError(msg)
        out[column] = value
    return out


class JsonLines(FileFormat):
    """One compact JSON object per line (``.jsonl``)."""

    name, extension = "jsonl", "jsonl"

    def stage(self, row: Mapping[str, Any]) -> bytes:
        """The row's JSON line, without its newline."""
        return _JSON(dict(row)).encode()

    def stage_many(self, rows: Sequence[Mapping[str, Any]]) -> list[Any]:
        """Each row's JSON line, one encoder for all."""
        return list(map(str.encode, map(_JSON, map(dict, rows))))

    def write(self, out: IO[bytes], staged: Sequence[Any], columns: Sequence[str] | None) -> None:
        """Each line and a newline (``columns`` is not used: each line names its own)."""
        for line in staged:
            out.write(line)
            out.write(b"\n")

    def read(self, source: IO[bytes]) -> list[dict[str, Any]]:
        """Each line's object."""
        return [json.loads(line) for line in source if line.strip()]


class Csv(FileFormat):
    """A header, then a row per record (``.csv``, RFC 4180 quoting, UTF-8)."""

    name, extension = "csv", "csv"

    def stage(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """The row, its values checked to be scalars CSV holds as text."""
        return _scalar_row(row, _SCALARS, "CSV")

    def stage_many(self, rows: Sequence[Mapping[str, Any]]) -> list[Any]:
        """The rows, their values checked together."""
        return _scalar_rows(rows, _SCALARS, "CSV")

    def write(self, out: IO[bytes], staged: Sequence[Any], columns: Sequence[str] | None) -> None:
        """The header and the rows; a column a row lacks is an empty cell."""
        names = _columns(staged, columns)
        text = io.TextIOWrapper(out, encoding="utf-8", newline="", write_through=True)
        try:
            writer = csv.writer(text)
            writer.writerow(names)
            for row in staged:
                writer.writerow(["" if row.get(c) is None else row[c] for c in names])
        finally:
            text.detach()  # the caller closes (and fsyncs) the file

    def read(self, source: IO[bytes]) -> list[dict[str, Any]]:
        """The rows as mappings of column to text."""
        text = io.TextIOWrapper(source, encoding="utf-8", newline="")
        try:
            return [dict(row) for row in csv.DictReader(text)]
        finally:
            text.detach()


class Parquet(FileFormat):
    """One Parquet table per part (``.parquet``); needs pyarrow (the ``parquet`` extra)."""

    name, extension = "parquet", "parquet"

    def check(self) -> None:
        """``ImportError`` naming the extra when pyarrow is not installed."""
        _pyarrow()

    def stage(self, row: Mapping[str, Any]) -> dict[str, Any]:
        """The row, its values checked to be scalars (bytes too)."""
        return _scalar_row(row, (*_SCALARS, bytes), "Parquet")

    def stage_many(self, rows: Sequence[Mapping[str, Any]]) -> list[Any]:
        """The rows, their values checked together."""
        return _scalar_rows(rows, (*_SCALARS, bytes), "Parquet")

    def write(self, out: IO[bytes], staged: Sequence[Any], columns: Sequence[str] | None) -> None:
        """One table of the rows, each column's type inferred from its values."""
        pa, pq = _pyarrow()
        names = _columns(staged, columns)
        table = pa.table({c: [row.get(c) for row in staged] for c in names})
        pq.write_table(table, out)

    def read(self, source: IO[bytes]) -> list[dict[str, Any]]:
        """The table's rows."""
        _, pq = _pyarrow()
        rows: list[dict[str, Any]] = pq.read_table(source).to_pylist()
        return rows


def _pyarrow() -> tuple[Any, Any]:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError as exc:
        msg = f"FileSink format 'parquet' needs pyarrow: {INSTALL_PARQUET}"
        raise ImportError(msg) from exc
    return pyarrow, pyarrow.parquet


FORMATS: dict[str, type[FileFormat]] = {f.name: f for f in (JsonLines, Csv, Parquet)}


def format_named(name: str) -> FileFormat:
    """The format called ``name`` (``jsonl``, ``csv``, ``parquet``).

    Raises:
        ValueError: an unknown name (the known ones listed).
        ImportError: its library is missing (with the install command).
    """
    kind = FORMATS.get(name)
    if kind is None:
        msg = f"FileSink: format {name!r} is not one of {sorted(FORMATS)}"
        raise ValueError(msg)
    made = kind()
    made.check()
    return made
