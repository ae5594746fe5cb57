"""``FileSink``: a topology's records written to files of a directory exactly once.

``ExactlyOnceSinkBolt`` stages each transaction's records in its state and, when the
transaction commits, hands each lane's records (one lane per sink task, ``Lane``) to
``FileSink.publish``, which writes one *part file* per lane and committed txid, and then one
*manifest entry* listing them (``_manifest``: the layout, the entry, the compaction). The
entry is the marker: a part is committed when an entry lists it, and a lane's marker is its
highest entry's txid. An entry is made visible by one atomic step of the file system (a link
of a finished, fsynced file to its final name, which never replaces one), so the part files
and the marker become visible together, to readers that list parts through the manifest
(``read_committed_parts``, ``read_committed_records``), and a commit re-run after any crash
finds the entry there and writes nothing.

What a crash leaves, and what happens next (the publish steps are ``publish``'s docstring):

- killed while writing a part: a ``.part-...tmp`` file, which no reader lists and the next
  publish of the lane leaves beside its own (remove them when no topology writes);
- killed after renaming parts, before the entry: *orphan* parts, named as the next publish
  of the batch names them (``part-<lane>-<txid>.<ext>``); no reader lists them (no entry
  does), and the next publish replaces each with the same records and commits it;
- killed after the entry: everything committed; the COMMIT run again finds the marker and
  writes nothing.

Epoch: each entry stores the lease epoch of the driver that wrote it; a publish whose epoch is
below the lane's last entry's is refused (``SinkFencedError``). The epoch is compared before
the parts are written, not in the atomic step: a stale publisher may still write a part or an
entry after a newer one's, but only of a batch the newer one committed too (the same name,
the same records), so readers see each committed batch once.

Formats (``format``): ``"jsonl"`` (JSON lines), ``"csv"``, ``"parquet"`` (needs pyarrow,
``pip install 'statefulbolts[parquet]'``); ``_formats`` says what each writes. A record is a
row: a mapping of column to value from ``mapper(tuple)``, else the tuple's ``fields`` (all of
them by default) by name; ``columns`` fixes CSV and Parquet columns and their order.

Settings: ``path`` (else ``sink.files.path``), ``format`` (else ``sink.files.format``, else
``jsonl``). Every process that runs a sink task must see the directory at the same path (on a
cluster, a shared file system). ``check_config`` makes the directory and checks it is
writable, before Spark starts.

Faults: a file system error is an outage (``StateBackendError``: waited out as a state store's,
``topology.state.backend.timeout.secs``: a full disk, a mount away), except a directory the
sink may not write (``SinkConfigError``: the topology stops, naming it).

Example:
    >>> import tempfile
    >>> from statefulbolts.connectors.sinks import Lane, StagedBatch
    >>> from statefulbolts.testing import make_tuple
    >>> folder = tempfile.mkdtemp()
    >>> sink = FileSink(folder, format="jsonl")
    >>> sink.open({}, None)
    >>> lane = Lane("wc", "publish", 0, 1)
    >>> staged = [sink.stage(make_tuple(["storm", 3], fields=["word", "count"]))]
    >>> sink.publish(lane, 4, [StagedBatch(4, staged)], None)
    PublishResult(txid=4, published=(4,), records=1, marker_before=None)
    >>> sink.publish(lane, 4, [StagedBatch(4, staged)], None).published  # a replay
    ()
    >>> read_committed_records(folder)
    [{'word': 'storm', 'count': 3}]
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from providers import StateBackendError
from statefulbolts.connectors.files._formats import FileFormat, format_named
from statefulbolts.connectors.files._manifest import (
    MANIFEST_DIR,
    CommittedPart,
    ManifestEntry,
    ManifestError,
    Part,
    committed_parts,
    fsync_dir,
    lanes,
    last_entry,
    part_name,
    write_entry,
    write_record_entry,
)
from statefulbolts.connectors.sinks import (
    Lane,
    PublishResult,
    Sink,
    SinkConfigError,
    SinkFencedError,
    SinkMarkerError,
    SinkPublishError,
    SinkStageError,
    StagedBatch,
)

if TYPE_CHECKING:
    from statefulbolts.context import TopologyContext
    from statefulbolts.tuples import ColumnBatch, Tuple

__all__ = [
    "SINK_FORMAT_KEY",
    "SINK_PATH_KEY",
    "FileSink",
    "FileSinkConfig",
    "read_committed_parts",
    "read_committed_records",
    "read_part",
]

log = logging.getLogger(__name__)

SINK_PATH_KEY: Final = "sink.files.path"
SINK_FORMAT_KEY: Final = "sink.files.format"
DEFAULT_COMPACT_EVERY: Final = 100
_NAME = "FileSink"
# Errors of a directory the sink may not write: no wait makes them go away.
_REFUSED = frozenset({errno.EACCES, errno.EPERM, errno.EROFS})


class FileSinkConfig(BaseModel):
    """The ``sink.files.*`` keys ``FileSink`` reads; its arguments win over them."""

    model_config = ConfigDict(frozen=True, extra="ignore", strict=True, populate_by_name=False)

    path: str | None = Field(
        None,
        alias=SINK_PATH_KEY,
        min_length=1,
        description=(
            "`FileSink`: the directory its part files and `_manifest` go to, when no path is "
            "given as an argument; the same path in every process that runs a sink task."
        ),
    )
    format: Literal["jsonl", "csv", "parquet"] | None = Field(
        None,
        alias=SINK_FORMAT_KEY,
        description=(
            "`FileSink`: the part files' format when none is given as an argument: `jsonl`, "
            "`csv` or `parquet` (needs the `parquet` extra)."
        ),
        json_schema_extra={"shown_default": "`jsonl`"},
    )

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any] | None) -> FileSinkConfig:
        """This model's keys in ``conf``, validated.

        Raises:
            SinkConfigError: a key has the wrong type or value (named).
        """
        given = {}
        for field in cls.model_fields.values():
            key = str(field.alias)
            value = (conf or {}).get(key)
            if value is not None and value != "":
                given[key] = value
        try:
            return cls.model_validate(given)
        except ValidationError as exc:
            problems = []
            for err in exc.errors(include_url=False):
                key = str(err["loc"][0]) if err["loc"] else ""
                problems.append(f"config {key!r}: {err['msg']} (got {err['input']!r:.80})")
            raise SinkConfigError(f"{_NAME}: " + "; ".join(problems)) from None


class _Settings(NamedTuple):
    path: str
    format: FileFormat


class FileSink(Sink):
    """Records of a sink bolt's tuples, written to a directory's files exactly once.

    See the module docstring for the layout and the publish steps.

    Args:
        path: the directory (made if missing; else config ``sink.files.path``).
        format: ``"jsonl"``, ``"csv"`` or ``"parquet"`` (else ``sink.files.format``, else
            ``"jsonl"``).
        fields: the tuple fields a row takes, by name (``None``: all of them).
        mapper: a function of the tuple returning the row (a mapping of column to value), or
            ``None`` to write nothing; used instead of ``fields``. Module-level, so it pickles.
        columns: the columns of CSV and Parquet files, in order (``None``: each part's rows'
            keys, in the order they first appear).
        compact_every: fold a lane's manifest entries into one once it has this many (0:
            never).

    Raises:
        ImportError: ``format="parquet"`` without pyarrow (with the install command).
        ValueError: an unknown format, or arguments that do not fit together.
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        format: str | None = None,  # noqa: A002 - the word users know
        fields: Sequence[str] | None = None,
        mapper: Callable[[Tuple], Mapping[str, Any] | None] | None = None,
        columns: Sequence[str] | None = None,
        compact_every: int = DEFAULT_COMPACT_EVERY,
    ) -> None:
        if format is not None:
            format_named(format)  # an unknown name, or pyarrow missing, fails here
        if mapper is not None and not callable(mapper):
            msg = f"{_NAME}: mapper must be a function of the tuple, got {mapper!r}"
            raise ValueError(msg)
        if mapper is not None and fields is not None:
            msg = f"{_NAME}: give fields or a mapper, not both"
            raise ValueError(msg)
        if (
            isinstance(compact_every, bool)
            or not isinstance(compact_every, int)
            or (compact_every < 0)
        ):
            msg = f"{_NAME}: compact_every must be an int >= 0, got {compact_every!r}"
            raise ValueError(msg)
        self.path = None if path is None else os.fspath(path)
        self.format = format
        self.fields = None if fields is None else list(fields)
        self.mapper = mapper
        self.columns = None if columns is None else list(columns)
        self.compact_every = compact_every
        self._reset()

    def _reset(self) -> None:
        self._settings: _Settings | None = None
        self._for_conf: Mapping[str, Any] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {k: v for k, v in vars(self).items() if k not in ("_settings", "_for_conf")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        vars(self).update(state)
        self._reset()

    def __repr__(self) -> str:
        return f"FileSink({self.path!r}, format={self.format!r})"

    @property
    def name(self) -> str:
        """``files in '<path>'``."""
        path = self._settings.path if self._settings is not None else self.path
        return "files" if path is None else f"files in {path!r}"

    # ---------------------------------------------------------------- settings
    def settings(self, conf: Mapping[str, Any]) -> _Settings:
        """The arguments over the keys of ``conf`` (kept for that config).

        Raises:
            SinkConfigError: a key is wrong, or no directory is named.
        """
        if self._settings is not None and self._for_conf is conf:
            return self._settings
        config = FileSinkConfig.from_conf(conf)
        path = self.path or config.path
        if path is None:
            msg = f"{_NAME}: no directory: give the sink a path, or set {SINK_PATH_KEY!r}"
            raise SinkConfigError(msg)
        try:
            fmt = format_named(self.format or config.format or "jsonl")
        except ImportError as exc:
            msg = f"{_NAME}: config {SINK_FORMAT_KEY!r}: {exc}"
            raise SinkConfigError(msg) from exc
        settings = _Settings(os.path.abspath(path), fmt)
        self._settings, self._for_conf = settings, conf
        return settings

    def _current(self) -> _Settings:
        if self._settings is None:
            msg = f"{_NAME}: used before open(conf, context)"
            raise SinkPublishError(msg)
        return self._settings

    def open(self, conf: Mapping[str, Any], context: TopologyContext | None) -> None:
        """Resolve the settings for this task."""
        self.settings(conf)

    def check_config(self, conf: Mapping[str, Any]) -> None:
        """Make the directory and its manifest directory, and write and remove a file in each.

        Raises:
            SinkConfigError: a key is wrong, or the directory cannot be made or written.
        """
        settings = self.settings(conf)
        for directory in (settings.path, os.path.join(settings.path, MANIFEST_DIR)):
            probe = os.path.join(directory, f".statefulbolts-check-{uuid.uuid4().hex[:12]}.tmp")
            try:
                os.makedirs(directory, exist_ok=True)
                with open(probe, "wb") as f:
                    f.write(b"check")
                os.unlink(probe)
            except OSError as exc:
                msg = (
                    f"{_NAME}: directory {directory!r} cannot be written: {exc}; fix its "
                    f"permissions or give another path (argument, or {SINK_PATH_KEY!r})"
                )
                raise SinkConfigError(msg) from exc

    # ---------------------------------------------------------------- stage
    def stage(self, tuple_: Tuple) -> Any:
        """The tuple's row in the format's staged form (``None``: no row).

        Raises:
            SinkStageError: a named field is missing, the mapper returned no mapping, or the
                format cannot hold a value.
        """
        if self.mapper is not None:
            row = self.mapper(tuple_)
            if row is None:
                return None
            if not isinstance(row, Mapping):
                msg = f"{_NAME}: mapper returned {row!r:.100}, not a mapping or None"
                raise SinkStageError(msg)
        else:
            names = self.fields if self.fields is not None else list(tuple_.fields)
            row = {}
            for name in names:
                try:
                    row[name] = tuple_.get_value_by_field(name)
                except (KeyError, ValueError) as exc:
                    msg = (
                        f"{_NAME}: the tuple has no field {name!r} (its fields: "
                        f"{list(tuple_.fields)})"
                    )
                    raise SinkStageError(msg) from exc
        fmt = self._settings.format if self._settings is not None else self._format()
        try:
            return fmt.stage(row)
        except (TypeError, ValueError) as exc:
            msg = f"{_NAME}: format {fmt.name!r} cannot hold row {dict(row)!r:.120}: {exc}"
            raise SinkStageError(msg) from exc

    def stage_batch(self, batch: ColumnBatch) -> Sequence[Any]:
        """``stage`` of every tuple of ``batch``, from its columns (a mapper: tuple by tuple).

        The rows are made from the columns and staged by the format together
        (``FileFormat.stage_many``).
        """
        if self.mapper is not None or len(batch) == 0:
            return super().stage_batch(batch)
        names = self.fields if self.fields is not None else list(batch.fields)
        columns = [batch.column(name) for name in names]
        rows = [dict(zip(names, values, strict=True)) for values in zip(*columns, strict=True)]
        fmt = self._settings.format if self._settings is not None else self._format()
        return fmt.stage_many(rows)

    def _format(self) -> FileFormat:
        return format_named(self.format or "jsonl")

    # ---------------------------------------------------------------- the marker
    def published(self, lane: Lane) -> int | None:
        """The lane's marker: its last manifest entry's txid (``None``: none yet).

        Raises:
            SinkMarkerError: a manifest file that the sink did not write.
            StateBackendError: the file system failed (an outage).
        """
        entry = self._last(self._current().path, lane)
        return None if entry is None else entry.txid

    def _last(self, root: str, lane: Lane) -> ManifestEntry | None:
        with _file_errors(f"reading the manifest of lane {lane.name}", root):
            try:
                return last_entry(root, lane.qualified())
            except ManifestError as exc:
                msg = f"{_NAME}: {exc}"
                raise SinkMarkerError(msg) from exc

    def lane_markers(
        self, conf: Mapping[str, Any], topology: str, component: str
    ) -> dict[str, int | None]:
        """Every lane of ``component`` the manifest has entries of: lane -> marker."""
        root = self.settings(conf).path
        start = f"{topology}.{component}."
        out: dict[str, int | None] = {}
        for qualified in lanes(root):
            if not qualified.startswith(start):
                continue
            try:
                task, parallelism = Lane.parse_name(qualified.removeprefix(start))
            except ValueError:
                continue
            lane = Lane(topology, component, task, parallelism)
            entry = self._last(root, lane)
            out[lane.name] = None if entry is None else entry.txid
        return out

    # ---------------------------------------------------------------- publish
    def publish(
        self, lane: Lane, txid: int, batches: Sequence[StagedBatch], epoch: int | None
    ) -> PublishResult:
        """Write the lane's batches above its marker as part files, then commit them.

        1. **Read the marker**: the lane's last manifest entry: its txid ``m`` and epoch.
        2. **Fence**: its epoch above ``epoch`` refuses the publish (a newer driver wrote).
        3. **Decide**: the batches with ``m < batch.txid <= txid``; none, or ``m >= txid`` (a
           replayed COMMIT), ends the step: nothing written.
        4. **Write the parts**: per batch with records, a temporary file (``.part-...tmp``),
           written, flushed, fsynced, and renamed to the batch's part name (replacing an orphan
           of an earlier attempt: the same records); then the directory is fsynced.
        5. **Commit**: the manifest entry (txid, epoch, parts), written to a temporary file,
           fsynced, and linked to its name, the one atomic step: the parts and the marker
           become visible together. A publish that finds the entry there already (another
           attempt of the same commit got there first) wrote what that one committed.

        Raises:
            SinkFencedError: the lane's last entry has a newer epoch.
            SinkMarkerError: a manifest file the sink did not write.
            SinkConfigError: the directory may not be written.
            StateBackendError: the file system failed (an outage, waited out).
        """
        root = self._current().path
        before = self._last(root, lane)
        marker = None if before is None else before.txid
        stored = None if before is None else before.epoch
        if epoch is not None and stored is not None and stored > epoch:
            msg = (
                f"{_NAME}: lane {lane.name} of sink {lane.component!r}: epoch {epoch} is below "
                f"the stored {stored} (manifest of {root!r}): a newer driver published this "
                "lane, and this one publishes nothing"
            )
            raise SinkFencedError(msg)
        due = [b for b in batches if b.txid <= txid and (marker is None or b.txid > marker)]
        if not due or (marker is not None and marker >= txid):
            return PublishResult(txid, (), 0, marker)
        with _file_errors(f"publishing lane {lane.name} txid {txid}", root):
            parts = self._write_parts(root, lane, due)
            kept = epoch if stored is None or (epoch is not None and epoch > stored) else stored
            entry = ManifestEntry(lane.qualified(), txid, kept, marker, tuple(parts))
            if not self._commit(root, entry):
                return PublishResult(txid, (), 0, txid)
        records = sum(p.records for p in parts)
        return PublishResult(txid, tuple(b.txid for b in due), records, marker)

    def _write_parts(self, root: str, lane: Lane, due: Sequence[StagedBatch]) -> list[Part]:
        """Step 4: each batch's part file, in place under its name."""
        fmt = self._current().format
        parts = []
        os.makedirs(root, exist_ok=True)
        for batch in due:
            if not batch.records:
                continue
            name = part_name(lane.qualified(), batch.txid, fmt.extension)
            tmp = os.path.join(root, f".{name}.{uuid.uuid4().hex[:12]}.tmp")
            with open(tmp, "wb") as out:
                fmt.write(out, batch.records, self.columns)
                out.flush()
                os.fsync(out.fileno())
                size = out.tell()
            os.replace(tmp, os.path.join(root, name))
            parts.append(Part(name, batch.txid, len(batch.records), size))
        fsync_dir(root)
        return parts

    def _commit(self, root: str, entry: ManifestEntry) -> bool:
        """Step 5: the entry, linked into place; ``False`` when its txid had one already."""
        return write_entry(root, entry, self.compact_every)

    # ---------------------------------------------------------------- at-least-once
    def write(self, records: Sequence[Any]) -> None:
        """Write ``records`` now as one part file and commit it in the manifest's ``_writes``.

        Raises:
            StateBackendError: the file system failed (an outage).
        """
        if not records:
            return
        settings = self._current()
        root, fmt = settings.path, settings.format
        name = f"part-write-{uuid.uuid4().hex}.{fmt.extension}"
        with _file_errors("writing records", root):
            os.makedirs(root, exist_ok=True)
            tmp = os.path.join(root, f".{name}.tmp")
            with open(tmp, "wb") as out:
                fmt.write(out, records, self.columns)
                out.flush()
                os.fsync(out.fileno())
                size = out.tell()
            os.replace(tmp, os.path.join(root, name))
            fsync_dir(root)
            write_record_entry(root, [Part(name, -1, len(records), size)])


@contextlib.contextmanager
def _file_errors(step: str, root: str) -> Iterator[None]:
    """Raise an ``OSError`` in the block as an outage, or a refusal naming the directory."""
    try:
        yield
    except StateBackendError:
        raise
    except OSError as exc:
        if exc.errno in _REFUSED:
            msg = (
                f"{_NAME}: {step}: directory {root!r} may not be written: {exc}; fix its "
                f"permissions or give another path (argument, or {SINK_PATH_KEY!r})"
            )
            raise SinkConfigError(msg) from exc
        msg = (
            f"{_NAME}: {step} in {root!r}: the file system failed: {exc}; waited out as an "
            "outage (a full disk, a mount away)"
        )
        raise StateBackendError(msg) from exc


def read_committed_parts(path: str | os.PathLike[str]) -> list[CommittedPart]:
    """The committed part files of a ``FileSink`` directory, through its manifest.

    Per lane by txid, then the at-least-once writes in the order they were made. A part file
    no manifest entry lists (a publish that died before committing it) is left out.

    Raises:
        ManifestError: a manifest file that the sink did not write (named).
    """
    return committed_parts(os.fspath(path))


def read_committed_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The rows of every committed part of a ``FileSink`` directory, in part order."""
    return [row for part in read_committed_parts(path) for row in read_part(part.path)]


def read_part(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The rows of one part file, read by the format its extension names.

    Raises:
        ValueError: the extension is not a format's (``.jsonl``, ``.csv``, ``.parquet``).
    """
    fmt = format_named(os.path.splitext(os.fspath(path))[1].lstrip("."))
    with open(path, "rb") as f:
        return fmt.read(f)
