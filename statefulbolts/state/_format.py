r"""The state export file: versioned, framed, checksummed, written and read as a stream.

Layout (version 2)::

    magic         8 bytes   89 53 42 53 0d 0a 1a 0a    ("\x89SBS\r\n\x1a\n")
    record ...    length (4 bytes, big endian), CRC-32 of the body (4 bytes), body

Each body is one msgpack array whose first item names the record:

=================================================  ==========================================
record                                             meaning
=================================================  ==========================================
``["header", {format, version, scope, name,        first; ``prefix`` is what every namespace
prefix, provider, location, created_at,            starts with; ``serializers`` the source
serializers}]``                                    config's key / value serializer fields
``["namespace", name, committed txid, prepared     opens a namespace (txids ``int`` or nil); the
txid, committed time]``                            last committed transaction's timestamp (ms
                                                   or nil), at which state TTL is judged
``["prepared", [[key, payload or nil], ...]]``     its prepared delta, nil a deletion (0 or more)
``["committed", [[key, payload], ...]]``           its committed map (0 or more, after prepared)
``["expiries", [[key, expiry ms], ...]]``          when its committed keys expire (state TTL;
                                                   0 or more, after committed; a key without
                                                   one never expires)
``["end", name, committed count, prepared count,   closes it
expiries count]``
``["trailer", {records, namespaces, entries,       last; ``records`` counts those before it,
sha256}]``                                         ``sha256`` hashes every byte before it
=================================================  ==========================================

Version 1 (before state TTL) has no committed time, no ``expiries`` records and an ``end``
without the expiries count; it is still read, as a state whose keys never expire.

Keys and payloads are the bytes the store holds (the serializers' output, see
``providers.KeyValueState``), so the file is exact whatever the values are, and any provider
with the same serializers reads them back. A record holds about a megabyte of entries, so
writing and reading take constant memory whatever the state's size, except a namespace's
prepared delta (one transaction's writes), which an import holds while it writes the namespace.

Integrity: the CRC of each record finds a damaged record and says where; the trailer finds a
truncated file, a record lost or repeated whole, and anything after it. ``read_info`` checks all
of it without writing anything; an import runs it first.

Scope: the reader trusts no name in the file. The header's ``scope`` and ``name`` must name a
topology or a transactional id (``Scope.named``), its ``prefix`` must be exactly theirs (``T/``
or ``$transactional/<id>/``), and every namespace must be one the scope owns (``Scope.owns``:
the prefix, then names with no empty, ``.`` or ``..`` part). A file that disagrees is damaged
or foreign (``StateFileError``), whatever its checksums say: they prove the bytes are the ones
written, not who wrote them.
"""

from __future__ import annotations

import hashlib
import struct
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, BinaryIO

import msgpack

from statefulbolts.errors import StateFileError, StateToolError
from statefulbolts.state._scope import Scope

__all__ = [
    "FORMAT",
    "MAGIC",
    "VERSION",
    "NamespaceBlock",
    "NamespaceInfo",
    "StateFileInfo",
    "StateFileReader",
    "StateFileWriter",
]

MAGIC = b"\x89SBS\r\n\x1a\n"
FORMAT = "statefulbolts-state"
VERSION = 2
# Every version this reader reads: 1 wrote no expiries.
_READS = (1, 2)
_HEAD = struct.Struct(">II")
# A record's body, at most: far above what the writer makes (about _CHUNK_BYTES), so a damaged
# length field is caught before the reader tries to allocate it.
_MAX_BODY = 256 << 20
_CHUNK_BYTES = 1 << 20
_CHUNK_ENTRIES = 10_000
_HEADER_FIELDS = ("scope", "name", "prefix", "provider", "location", "created_at")


@dataclass(frozen=True)
class NamespaceInfo:
    """One namespace of a state file: its txids and how many entries each layer holds."""

    name: str
    committed_txid: int | None
    prepared_txid: int | None
    committed: int
    prepared: int
    expiries: int = 0
    committed_time: int | None = None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class StateFileInfo:
    """What a state file holds: its header, its namespaces, its size and digest."""

    header: dict[str, Any]
    namespaces: list[NamespaceInfo] = field(default_factory=list)
    records: int = 0
    entries: int = 0
    size: int = 0
    sha256: str = ""

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return {
            "header": self.header,
            "namespaces": [n.as_dict() for n in self.namespaces],
            "records": self.records,
            "entries": self.entries,
            "bytes": self.size,
            "sha256": self.sha256,
        }


def _is_txid(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool))


def _is_time(value: Any) -> bool:
    """A timestamp in ms, as stored: an int."""
    return isinstance(value, int) and not isinstance(value, bool)


class StateFileWriter:
    r"""Writes a state file to a binary stream, one namespace at a time.

    Example:
        >>> import io
        >>> out = io.BytesIO()
        >>> writer = StateFileWriter(out, {"scope": "topology", "name": "wc", "prefix": "wc/",
        ...     "provider": "p", "location": "l", "created_at": "2025-01-01T00:00:00Z"})
        >>> writer.namespace("wc/count-0", 3, None, [], [(b"k", b"v")]).committed
        1
        >>> info = writer.close()
        >>> (info.records, info.entries, out.getvalue()[:4])
        (4, 1, b'\x89SBS')
    """

    def __init__(self, stream: BinaryIO, header: dict[str, Any]) -> None:
        self._stream = stream
        self._sha = hashlib.sha256()
        self._size = 0
        self._records = 0
        self._entries = 0
        rest = {k: v for k, v in header.items() if k not in ("format", "version")}
        self._header = {"format": FORMAT, "version": VERSION, **rest}
        self._namespaces: list[NamespaceInfo] = []
        self._write(MAGIC)
        self._record(["header", self._header])

    def _write(self, data: bytes) -> None:
        self._stream.write(data)
        self._sha.update(data)
        self._size += len(data)

    def _frame(self, body: bytes) -> bytes:
        return _HEAD.pack(len(body), zlib.crc32(body)) + body

    def _record(self, record: list[Any]) -> None:
        self._write(self._frame(msgpack.packb(record, use_bin_type=True)))
        self._records += 1

    def _chunks(
        self, tag: str, namespace: str, entries: Iterable[tuple[Any, Any]], tombstones: bool
    ) -> int:
        """Write ``entries`` as ``tag`` records of about ``_CHUNK_BYTES``; returns how many."""
        chunk: list[list[Any]] = []
        size = count = 0
        for key, payload in entries:
            if tag == "expiries":
                fits = isinstance(key, bytes) and _is_time(payload)
            else:
                fits = isinstance(key, bytes) and (
                    isinstance(payload, bytes) or (tombstones and payload is None)
                )
            if not fits:
                msg = (
                    f"namespace {namespace!r}: the provider gave {type(key).__name__} key "
                    f"{key!r} with a {type(payload).__name__} payload in its {tag} layer; "
                    "the stored image must be bytes (see providers.KeyValueState)"
                )
                raise StateToolError(msg)
            chunk.append([key, payload])
            size += len(key) + (len(payload) if isinstance(payload, bytes) else 0) + 8
            count += 1
            if size >= _CHUNK_BYTES or len(chunk) >= _CHUNK_ENTRIES:
                self._record([tag, chunk])
                chunk, size = [], 0
        if chunk:
            self._record([tag, chunk])
        return count

    def namespace(
        self,
        name: str,
        committed_txid: int | None,
        prepared_txid: int | None,
        prepared: Iterable[tuple[bytes, bytes | None]],
        committed: Iterable[tuple[bytes, bytes]],
        expiries: Iterable[tuple[bytes, int]] = (),
        committed_time: int | None = None,
    ) -> NamespaceInfo:
        """Write one namespace: its txids, its prepared delta, its committed map, its expiries.

        ``expiries`` and ``committed_time`` are the state TTL's (``scan_expiries``,
        ``committed_time``), read after the committed map.
        """
        self._record(["namespace", name, committed_txid, prepared_txid, committed_time])
        n_prepared = self._chunks("prepared", name, prepared, tombstones=True)
        n_committed = self._chunks("committed", name, committed, tombstones=False)
        n_expiries = self._chunks("expiries", name, expiries, tombstones=False)
        self._record(["end", name, n_committed, n_prepared, n_expiries])
        info = NamespaceInfo(
            name, committed_txid, prepared_txid, n_committed, n_prepared, n_expiries, committed_time
        )
        self._namespaces.append(info)
        self._entries += n_committed + n_prepared
        return info

    def close(self) -> StateFileInfo:
        """Write the trailer; returns what the file holds. The stream stays open."""
        digest = self._sha.hexdigest()
        trailer = {
            "records": self._records,
            "namespaces": len(self._namespaces),
            "entries": self._entries,
            "sha256": digest,
        }
        body = self._frame(msgpack.packb(["trailer", trailer], use_bin_type=True))
        self._stream.write(body)
        return StateFileInfo(
            dict(self._header),
            list(self._namespaces),
            self._records,
            self._entries,
            self._size + len(body),
            digest,
        )


@dataclass
class NamespaceBlock:
    """One namespace as an import reads it: the delta in memory, the rest streamed.

    ``committed``, then ``expiries``, each read to its end (``expiries`` only after
    ``committed``: they follow it in the file); what is left unread the reader skips.
    """

    name: str
    committed_txid: int | None
    prepared_txid: int | None
    prepared: dict[bytes, bytes | None]
    committed: Iterator[tuple[bytes, bytes]]
    expiries: Iterator[tuple[bytes, int]]
    committed_time: int | None = None


class StateFileReader:
    """Reads and checks a state file from a binary stream, record by record.

    ``header()`` first, then ``namespaces()`` to its end (which checks the trailer). Every
    problem raises ``StateFileError`` naming the file, the record and its byte offset.
    """

    def __init__(self, stream: BinaryIO, name: str) -> None:
        self._stream = stream
        self._name = name
        self._sha = hashlib.sha256()
        self._offset = 0
        self._records = 0
        self._entries = 0
        self._seen: set[str] = set()
        self._ahead: list[Any] | None = None
        self._last_at = 0
        self._digest_before = self._sha.copy()
        self._closed: NamespaceInfo | None = None
        self._header: dict[str, Any] | None = None
        self._scope: Scope | None = None
        self._version = VERSION
        self.info: StateFileInfo | None = None

    # -- the frames
    def _fail(
        self, problem: str, at: int | None = None, number: int | None = None
    ) -> StateFileError:
        """The error for record ``number`` (default: the next one) starting at byte ``at``."""
        number = self._records + 1 if number is None else number
        where = "" if at is None else f" (record {number} at byte {at})"
        return StateFileError(f"state file {self._name!r}{where}: {problem}")

    def _read(self, n: int, what: str, at: int) -> bytes:
        data = self._stream.read(n)
        if len(data) != n:
            problem = (
                f"truncated: {what} needs {n} bytes, {len(data)} left; the file was cut short "
                "(an interrupted copy or export?)"
            )
            raise self._fail(problem, at)
        return data

    def _next(self) -> list[Any]:
        """The next record's body, CRC-checked and decoded; the SHA-256 follows every byte."""
        if self._ahead is not None:
            record, self._ahead = self._ahead, None
            return record
        at = self._offset
        head = self._stream.read(_HEAD.size)
        if not head:
            msg = "truncated: it ends without its trailer record"
            raise self._fail(msg, at)
        if len(head) != _HEAD.size:
            msg = f"truncated: a record header needs 8 bytes, {len(head)} left"
            raise self._fail(msg, at)
        length, crc = _HEAD.unpack(head)
        if length > _MAX_BODY:
            msg = f"corrupt: a record length of {length} bytes"
            raise self._fail(msg, at)
        body = self._read(length, "the record", at)
        if zlib.crc32(body) != crc:
            problem = (
                f"corrupt: checksum mismatch (stored CRC-32 {crc:#010x}, computed "
                f"{zlib.crc32(body):#010x})"
            )
            raise self._fail(problem, at)
        try:
            record = msgpack.unpackb(body, raw=False, strict_map_key=False)
        except (ValueError, msgpack.UnpackException) as exc:
            msg = f"corrupt: the record is not msgpack ({exc})"
            raise self._fail(msg, at) from exc
        if not isinstance(record, list) or not record or not isinstance(record[0], str):
            msg = f"corrupt: not a record: {_short(record)}"
            raise self._fail(msg, at)
        self._last_at = at
        self._digest_before = self._sha.copy()
        self._sha.update(head)
        self._sha.update(body)
        self._offset += len(head) + length
        self._records += 1
        return record

    def _bad(self, problem: str) -> StateFileError:
        """The error for the record just read."""
        return self._fail(problem, self._last_at, self._records)

    # -- the records
    def header(self) -> dict[str, Any]:
        """Read and check the magic and the header record; returns the header."""
        magic = self._stream.read(len(MAGIC))
        if magic != MAGIC:
            problem = (
                "not a statefulbolts state file (it does not start with the format's 8 magic "
                "bytes; it was not written by `statefulbolts state export`, or its start is "
                "damaged)"
            )
            raise self._fail(problem)
        self._sha.update(magic)
        self._offset = len(MAGIC)
        record = self._next()
        header = record[1] if len(record) == 2 and record[0] == "header" else None
        if not isinstance(header, dict) or header.get("format") != FORMAT:
            msg = f"corrupt: the first record is not a {FORMAT} header"
            raise self._bad(msg)
        version = header.get("version")
        if version not in _READS or isinstance(version, bool):
            newer = isinstance(version, int) and version > VERSION
            hint = "; a newer statefulbolts wrote it" if newer else ""
            reads = " and ".join(str(v) for v in _READS)
            msg = f"format version {version!r}, and this statefulbolts reads versions {reads}{hint}"
            raise self._bad(msg)
        self._version = version
        missing = [k for k in _HEADER_FIELDS if not isinstance(header.get(k), str)]
        if missing or not isinstance(header.get("serializers"), dict):
            msg = f"corrupt: the header lacks {', '.join(missing) or 'serializers'}"
            raise self._bad(msg)
        self._scope = self._scope_of(header)
        self._header = header
        return header

    def _scope_of(self, header: dict[str, Any]) -> Scope:
        """The header's scope, whose prefix must be the header's ``prefix``, exactly."""
        try:
            scope = Scope.named(header["scope"], header["name"])
        except StateToolError as exc:
            msg = f"foreign: the header names no scope a state can have: {exc}"
            raise self._bad(msg) from exc
        if header["prefix"] != scope.prefix:
            msg = (
                f"foreign: the header's prefix {header['prefix']!r} is not the one of its "
                f"{scope.describe()} ({scope.prefix!r}); the file was altered or not written by "
                "`statefulbolts state export`, so it is refused"
            )
            raise self._bad(msg)
        return scope

    @property
    def scope(self) -> Scope:
        """The topology or transactional id the file holds (after ``header()``)."""
        if self._scope is None:
            self.header()
        assert self._scope is not None  # noqa: S101 - header() set it
        return self._scope

    def namespaces(self) -> Iterator[NamespaceBlock]:
        """Every namespace in file order; after the last, the trailer is checked."""
        if self._header is None:
            self.header()
        infos: list[NamespaceInfo] = []
        while True:
            record = self._next()
            if record[0] == "trailer":
                self._trailer(record, infos)
                return
            block = self._open(record)
            yield block
            for _ in block.committed:  # what the caller left unread
                pass
            for _ in block.expiries:
                pass
            assert self._closed is not None  # noqa: S101 - set when the namespace ended
            infos.append(self._closed)

    def _open(self, record: list[Any]) -> NamespaceBlock:
        scope = self._scope
        assert scope is not None  # noqa: S101 - header() ran first
        size = 4 if self._version == 1 else 5
        if record[0] != "namespace" or len(record) != size:
            msg = f"corrupt: expected a namespace or the trailer, got {_short(record)}"
            raise self._bad(msg)
        name, committed_txid, prepared_txid = record[1:4]
        committed_time = record[4] if size == 5 else None
        if not isinstance(name, str) or not scope.owns(name):
            msg = (
                f"foreign: namespace {_short(name)} is not one of the header's "
                f"{scope.describe()} (its namespaces are {scope.prefix!r} followed by names "
                "with no empty, '.' or '..' part), so the file is refused"
            )
            raise self._bad(msg)
        if name in self._seen:
            msg = f"corrupt: namespace {name!r} is repeated"
            raise self._bad(msg)
        if not (_is_txid(committed_txid) and _is_txid(prepared_txid)):
            msg = f"corrupt: namespace {name!r} has txids {_short(record[2:4])}"
            raise self._bad(msg)
        if not (committed_time is None or _is_time(committed_time)):
            msg = f"corrupt: namespace {name!r} has committed time {_short(committed_time)}"
            raise self._bad(msg)
        self._seen.add(name)
        prepared: dict[bytes, bytes | None] = {}
        n_prepared = 0
        while True:
            record = self._next()
            if record[0] != "prepared":
                break
            for key, payload in self._entries_of(record, name, tombstones=True):
                prepared[key] = payload
                n_prepared += 1
        if n_prepared and prepared_txid is None:
            msg = f"corrupt: namespace {name!r} has a prepared delta but no txid"
            raise self._bad(msg)
        self._ahead = record
        counts = {"prepared": n_prepared}
        return NamespaceBlock(
            name,
            committed_txid,
            prepared_txid,
            prepared,
            self._committed(name, counts),
            self._expiries(name, committed_txid, prepared_txid, committed_time, counts),
            committed_time,
        )

    def _committed(self, name: str, counts: dict[str, int]) -> Iterator[tuple[bytes, bytes]]:
        n_committed = 0
        while True:
            record = self._next()
            if record[0] != "committed":
                break
            for key, payload in self._entries_of(record, name, tombstones=False):
                assert payload is not None  # noqa: S101 - checked by _entries_of
                n_committed += 1
                yield key, payload
        self._ahead = record
        counts["committed"] = n_committed

    def _expiries(
        self,
        name: str,
        committed_txid: int | None,
        prepared_txid: int | None,
        committed_time: int | None,
        counts: dict[str, int],
    ) -> Iterator[tuple[bytes, int]]:
        if "committed" not in counts:
            msg = f"namespace {name!r}: its expiries are read after its committed map"
            raise StateToolError(msg)
        n_expiries = 0
        while True:
            record = self._next()
            if record[0] != "expiries" or self._version == 1:
                break
            for key, at_ms in self._expiries_of(record, name):
                n_expiries += 1
                yield key, at_ms
        n_committed, n_prepared = counts["committed"], counts["prepared"]
        end = ["end", name, n_committed, n_prepared]
        if self._version > 1:
            end.append(n_expiries)
        if record != end:
            msg = f"corrupt: namespace {name!r} ends with {_short(record)}, expected {end!r}"
            raise self._bad(msg)
        self._entries += n_committed + n_prepared
        self._closed = NamespaceInfo(
            name,
            committed_txid,
            prepared_txid,
            n_committed,
            n_prepared,
            n_expiries,
            committed_time,
        )

    def _expiries_of(self, record: list[Any], name: str) -> Iterator[tuple[bytes, int]]:
        entries = record[1] if len(record) == 2 else None
        if not isinstance(entries, list):
            msg = f"corrupt: an expiries record of {name!r} holds no entry list"
            raise self._bad(msg)
        for entry in entries:
            if (
                not isinstance(entry, list)
                or len(entry) != 2
                or not isinstance(entry[0], bytes)
                or not _is_time(entry[1])
            ):
                msg = f"corrupt: an expiries entry of {name!r} is {_short(entry)}"
                raise self._bad(msg)
            yield entry[0], entry[1]

    def _entries_of(
        self, record: list[Any], name: str, tombstones: bool
    ) -> Iterator[tuple[bytes, bytes | None]]:
        entries = record[1] if len(record) == 2 else None
        if not isinstance(entries, list):
            msg = f"corrupt: a {record[0]} record of {name!r} holds no entry list"
            raise self._bad(msg)
        for entry in entries:
            if (
                not isinstance(entry, list)
                or len(entry) != 2
                or not isinstance(entry[0], bytes)
                or not (isinstance(entry[1], bytes) or (tombstones and entry[1] is None))
            ):
                msg = f"corrupt: a {record[0]} entry of {name!r} is {_short(entry)}"
                raise self._bad(msg)
            yield entry[0], entry[1]

    def _trailer(self, record: list[Any], infos: list[NamespaceInfo]) -> None:
        trailer = record[1] if len(record) == 2 and isinstance(record[1], dict) else {}
        digest = self._digest_before.hexdigest()
        want = {
            "records": self._records - 1,
            "namespaces": len(infos),
            "entries": self._entries,
            "sha256": digest,
        }
        got = {k: trailer.get(k) for k in want}
        if got != want:
            wrong = ", ".join(
                f"{k} {got[k]!r} (read {want[k]!r})" for k in want if got[k] != want[k]
            )
            msg = f"corrupt: the trailer does not match what precedes it: {wrong}"
            raise self._bad(msg)
        if self._stream.read(1):
            msg = f"corrupt: bytes follow the trailer at byte {self._offset}"
            raise self._fail(msg)
        assert self._header is not None  # noqa: S101 - header() ran first
        self.info = StateFileInfo(
            dict(self._header), infos, self._records - 1, self._entries, self._offset, digest
        )


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
