"""The manifest of a ``FileSink`` directory: which part files are committed, per lane.

A part file is *committed* when a manifest entry lists it; a reader lists parts through the
manifest (``read_committed_parts``), never by listing the directory, so a part file that a
publish renamed into place but did not commit (it died before its entry) is not seen. The
manifest is the sink's marker: a lane's marker is the highest txid among its entries.

Layout of a sink's directory (``<lane>``: ``<topology>.<component>.<task>of<parallelism>``)::

    part-<lane>-<txid, 10 digits>.<ext>         a batch's records (committed when listed)
    .part-<lane>-<txid>.<random>.tmp            being written; never read
    part-write-<ns>-<random>.<ext>              a write() of AtLeastOnceSinkBolt
    _manifest/
        <lane>/<txid, 20 digits>.json           one entry per publish that wrote
        <lane>/<txid, 20 digits>.compact.json   the entries up to txid, folded into one
        <lane>/.<txid>.<random>.tmp             an entry being written
        _writes/<ns>-<random>.json              one entry per write()

An entry (JSON): ``{"version": 1, "lane": ..., "txid": t, "epoch": e or null,
"marker_before": m or null, "parts": [{"name", "txid", "records", "bytes"}, ...]}``. It is
written to a temporary name, flushed to disk, and *linked* to its final name: a link, unlike a
rename, never replaces a file, so an entry is written once, by the first publish of its txid
to get there, and a stale publisher racing a newer one cannot overwrite the newer one's epoch.

Compaction: once a lane holds ``compact_every`` entries, the next publish folds them into one
``.compact.json`` (every part they list, the last one's txid and epoch), linked into place the
same way, and then deletes what it folded. A reader takes the newest compaction and the
entries above it; a part listed twice (an entry a crash left beside its compaction, or two
publishes of one batch racing) is one part: a part's name is its lane and batch txid, and its
content is that batch's records, which are fixed once the transaction is COMMITTING.

Example:
    >>> import os, tempfile
    >>> root = tempfile.mkdtemp()
    >>> entry = ManifestEntry("wc.publish.0of1", 4, 2, None, (Part("part-a", 4, 3, 30),))
    >>> write_entry(root, entry)
    True
    >>> write_entry(root, entry)  # a second publish of txid 4: the first stays
    False
    >>> last_entry(root, "wc.publish.0of1").txid
    4
    >>> [(os.path.basename(p.path), p.lane, p.txid) for p in committed_parts(root)]
    [('part-a', 'wc.publish.0of1', 4)]
"""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import NamedTuple

__all__ = [
    "MANIFEST_DIR",
    "WRITES_DIR",
    "CommittedPart",
    "ManifestEntry",
    "ManifestError",
    "Part",
    "committed_parts",
    "fsync_dir",
    "last_entry",
    "lanes",
    "part_name",
    "write_entry",
    "write_record_entry",
]

MANIFEST_DIR = "_manifest"
WRITES_DIR = "_writes"
_VERSION = 1
_ENTRY = re.compile(r"(\d{20})\.json")
_COMPACT = re.compile(r"(\d{20})\.compact\.json")
_WRITE = re.compile(r"\d{20}-[0-9a-f]{12}\.json")
# A reader racing a compaction may find an entry gone between listing and opening it: it lists
# again (the compaction was linked before anything was deleted).
_READ_TRIES = 5


class ManifestError(ValueError):
    """A manifest file that is not one the sink wrote (the message names it)."""


class Part(NamedTuple):
    """A part file an entry lists: its name in the directory, batch txid, records, bytes."""

    name: str
    txid: int
    records: int
    bytes: int


class ManifestEntry(NamedTuple):
    """One publish of a lane (or a compaction of several): its txid, epoch and parts."""

    lane: str
    txid: int
    epoch: int | None
    marker_before: int | None
    parts: tuple[Part, ...]

    def as_json(self) -> bytes:
        """The entry's file content."""
        doc = {
            "version": _VERSION,
            "lane": self.lane,
            "txid": self.txid,
            "epoch": self.epoch,
            "marker_before": self.marker_before,
            "parts": [p._asdict() for p in self.parts],
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def from_json(cls, data: bytes, where: str) -> ManifestEntry:
        """An entry read back, validated.

        Raises:
            ManifestError: the file is not an entry of this version (names ``where``).
        """
        try:
            doc = json.loads(data)
            if doc["version"] != _VERSION:
                msg = f"version {doc['version']!r}, this sink reads {_VERSION}"
                raise ValueError(msg)
            parts = tuple(
                Part(str(p["name"]), int(p["txid"]), int(p["records"]), int(p["bytes"]))
                for p in doc["parts"]
            )
            return cls(
                str(doc["lane"]),
                int(doc["txid"]),
                None if doc["epoch"] is None else int(doc["epoch"]),
                None if doc["marker_before"] is None else int(doc["marker_before"]),
                parts,
            )
        except (ValueError, KeyError, TypeError) as exc:
            msg = (
                f"manifest file {where} is not a FileSink manifest entry ({exc}); it was "
                "written by something else: move it out of the sink's _manifest directory"
            )
            raise ManifestError(msg) from exc


class CommittedPart(NamedTuple):
    """A committed part file, as a reader gets it: its path, lane and batch txid (writes: -1)."""

    path: str
    lane: str
    txid: int
    records: int
    bytes: int


def part_name(lane: str, txid: int, extension: str) -> str:
    """The part file of ``lane``'s batch ``txid``: the same name for every publish of it.

    Example:
        >>> part_name("wc.publish.0of2", 7, "jsonl")
        'part-wc.publish.0of2-0000000007.jsonl'
    """
    return f"part-{lane}-{txid:010d}.{extension}"


def fsync_dir(path: str) -> None:
    """Flush a directory's entries (a rename or link in it) to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _link_new(directory: str, final: str, data: bytes) -> bool:
    """Write ``data`` to ``directory/final`` unless it exists: ``False`` when it did.

    A temporary file, flushed and fsynced, then ``os.link``: a link fails rather than replace
    an existing name, atomically, so of two writers of one name the first wins, whole.
    """
    tmp = os.path.join(directory, f".{final}.{uuid.uuid4().hex[:12]}.tmp")
    with open(tmp, "wb") as out:
        out.write(data)
        out.flush()
        os.fsync(out.fileno())
    try:
        os.link(tmp, os.path.join(directory, final))
    except FileExistsError:
        return False
    finally:
        os.unlink(tmp)
    fsync_dir(directory)
    return True


def _lane_dir(root: str, lane: str) -> str:
    return os.path.join(root, MANIFEST_DIR, lane)


def _listed(directory: str) -> tuple[list[int], list[int]]:
    """The txids of a lane directory's entries and compactions, each sorted."""
    try:
        names = os.listdir(directory)
    except FileNotFoundError:
        return [], []
    entries, compactions = [], []
    for name in names:
        if (m := _ENTRY.fullmatch(name)) is not None:
            entries.append(int(m[1]))
        elif (m := _COMPACT.fullmatch(name)) is not None:
            compactions.append(int(m[1]))
    return sorted(entries), sorted(compactions)


def _read(path: str) -> ManifestEntry:
    with open(path, "rb") as f:
        return ManifestEntry.from_json(f.read(), path)


def _entry_file(txid: int, *, compact: bool = False) -> str:
    return f"{txid:020d}.compact.json" if compact else f"{txid:020d}.json"


def last_entry(root: str, lane: str) -> ManifestEntry | None:
    """The lane's entry (or compaction) of the highest txid: its marker and epoch.

    Raises:
        ManifestError: that file is not an entry the sink wrote.
    """
    directory = _lane_dir(root, lane)
    for _ in range(_READ_TRIES):
        entries, compactions = _listed(directory)
        candidates = [(t, False) for t in entries] + [(t, True) for t in compactions]
        if not candidates:
            return None
        txid, compact = max(candidates)
        try:
            return _read(os.path.join(directory, _entry_file(txid, compact=compact)))
        except FileNotFoundError:
            continue  # folded by a compaction meanwhile: list again
    msg = f"the manifest of lane {lane} in {root} kept changing under {_READ_TRIES} readings"
    raise ManifestError(msg)


def write_entry(root: str, entry: ManifestEntry, compact_every: int = 0) -> bool:
    """Commit ``entry`` (its parts become visible): ``False`` when its txid had one already.

    With ``compact_every``, a lane holding that many entries is compacted afterwards.
    """
    directory = _lane_dir(root, entry.lane)
    os.makedirs(directory, exist_ok=True)
    written = _link_new(directory, _entry_file(entry.txid), entry.as_json())
    if written and compact_every:
        entries, _ = _listed(directory)
        if len(entries) >= compact_every:
            _compact(root, entry.lane)
    return written


def _compact(root: str, lane: str) -> None:
    """Fold the lane's entries into one compaction, linked into place, then delete them."""
    directory = _lane_dir(root, lane)
    folded = list(_lane_entries(root, lane))
    if not folded:
        return
    last = max(folded, key=lambda e: e.txid)
    parts = {p.name: p for e in sorted(folded, key=lambda e: e.txid) for p in e.parts}
    merged = last._replace(parts=tuple(sorted(parts.values(), key=lambda p: (p.txid, p.name))))
    _link_new(directory, _entry_file(last.txid, compact=True), merged.as_json())
    entries, compactions = _listed(directory)
    for txid in entries:
        if txid <= last.txid:
            _remove(os.path.join(directory, _entry_file(txid)))
    for txid in compactions:
        if txid < last.txid:
            _remove(os.path.join(directory, _entry_file(txid, compact=True)))
    fsync_dir(directory)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass  # another compaction of the lane took it


def _lane_entries(root: str, lane: str) -> Iterator[ManifestEntry]:
    """The newest compaction of the lane and every entry above it (read again on a race)."""
    directory = _lane_dir(root, lane)
    for _ in range(_READ_TRIES):
        entries, compactions = _listed(directory)
        base = compactions[-1] if compactions else -1
        names = [_entry_file(base, compact=True)] if compactions else []
        names += [_entry_file(t) for t in entries if t > base]
        try:
            found = [_read(os.path.join(directory, n)) for n in names]
        except FileNotFoundError:
            continue
        yield from found
        return
    msg = f"the manifest of lane {lane} in {root} kept changing under {_READ_TRIES} readings"
    raise ManifestError(msg)


def lanes(root: str) -> list[str]:
    """The lanes the manifest has entries of (``<topology>.<component>.<lane>``), sorted."""
    try:
        names = os.listdir(os.path.join(root, MANIFEST_DIR))
    except FileNotFoundError:
        return []
    return sorted(n for n in names if n != WRITES_DIR and not n.startswith("."))


def write_record_entry(root: str, parts: Sequence[Part]) -> None:
    """Commit the parts of an at-least-once ``write`` (no lane, no txid)."""
    directory = os.path.join(root, MANIFEST_DIR, WRITES_DIR)
    os.makedirs(directory, exist_ok=True)
    entry = ManifestEntry(WRITES_DIR, -1, None, None, tuple(parts))
    _link_new(directory, f"{time.time_ns():020d}-{uuid.uuid4().hex[:12]}.json", entry.as_json())


def committed_parts(root: str) -> list[CommittedPart]:
    """Every committed part of the directory ``root``: per lane by txid, then the writes.

    A part listed by two entries is listed once. Part files no entry lists (a publish that
    died before its entry; files of other programs) are not.

    Raises:
        ManifestError: a manifest file is not an entry the sink wrote.
    """
    out: list[CommittedPart] = []
    for lane in lanes(root):
        parts: dict[str, Part] = {}
        for entry in _lane_entries(root, lane):
            for part in entry.parts:
                parts.setdefault(part.name, part)
        for part in sorted(parts.values(), key=lambda p: (p.txid, p.name)):
            out.append(_committed(root, lane, part))
    writes = os.path.join(root, MANIFEST_DIR, WRITES_DIR)
    try:
        names = sorted(n for n in os.listdir(writes) if _WRITE.fullmatch(n))
    except FileNotFoundError:
        names = []
    for name in names:
        for part in _read(os.path.join(writes, name)).parts:
            out.append(_committed(root, WRITES_DIR, part))
    return out


def _committed(root: str, lane: str, part: Part) -> CommittedPart:
    return CommittedPart(os.path.join(root, part.name), lane, part.txid, part.records, part.bytes)
