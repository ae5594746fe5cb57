"""Shipping a driver-owned provider's images to the tasks: what changed, not the whole state.

The in-memory provider keeps state on the driver; every stateful task of a job needs its
namespace's image. Shipping each image whole with every job made a transaction cost as much as
the state is large. But Spark's Python workers are long-lived processes (PySpark reuses them),
so a worker can keep the image it had and catch up on what the driver applied since
(``_held_images`` is the worker's side). The driver's side, ``ImageShipper``, keeps per
namespace a *line*:

- a random **token**, new whenever the driver cannot vouch that its image only moved by the
  change logs it recorded (a fresh shipper: a driver restart; a change from anything else: a
  driver-side state, the state tool, ``drop``);
- a **version**, one more for every task change log the driver applies (``apply_changes``),
  each kept as a **delta**: its version, a digest of the log's bytes, the log as a Spark
  broadcast;
- a **snapshot**: the whole image at version ``base``, as a broadcast, made the first time the
  namespace ships and again when the deltas since outgrow it (more bytes than the snapshot, or
  more than ``max_deltas`` of them).

A job carries per namespace only a ``ShippedImage`` descriptor: the token, the version, the
snapshot's version and broadcast, and the deltas since, with their digests. No image bytes:
PySpark sends a task the broadcasts its closure refers to as file paths, and a worker reads one
only when its code asks for ``.value`` (``pyspark.core.broadcast.Broadcast``: built on a
worker from ``path``, unpickled lazily), so a worker whose copy is current reads nothing, one a
few versions behind reads those deltas, and only one with no usable copy reads the snapshot.
(On a cluster the executor's JVM still fetches each broadcast the tasks refer to once per
executor: one snapshot per namespace per refresh, not one image per job.)

A small line travels inline: while its snapshot and deltas weigh at most ``inline_bytes``
together (64 KiB by default), they are bytes in the descriptor, pickled with the job, and no
broadcast is made. A Spark broadcast costs the driver several py4j calls to make and again to
destroy (some 8 ms each on 2 busy cores): three of them per transaction were a third of the
driver's own time in a PREPARE of the latency bench (issue 36). When a small line's new deltas
would not fit what its inline snapshot leaves of the budget, the image is exported again (a
snapshot that fits inline is cheaper to make than a broadcast), so a state just under the
budget does not broadcast every delta. Past the budget, the snapshot is a broadcast, and so is
each new delta that does not fit, so a large state still travels by reference.

On a local master (``local``, ``local[N]``) the driver and every Python worker share this
machine's files, so a large snapshot or delta goes as a file instead (``_local_files``): the
job carries its path, and a worker reads it as it would a broadcast's file.

Broadcasts and files a refresh or a new token replaces are destroyed at the next ``ship``, one
job later: jobs that carry images run one at a time, so no job that could read them is still
running.

A provider without ``image_version`` (or returning ``None`` for a namespace) ships that image
whole with each job, as before.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

from statefulbolts.runtime._local_files import LocalFile, LocalFiles

if TYPE_CHECKING:
    from providers import DriverOwnedStateProvider

__all__ = ["Delta", "ImageShipper", "ShippedImage", "digest"]

# A line's snapshot is made again when it has more deltas than this.
MAX_DELTAS = 256
# A line's snapshot and deltas travel inline, not as broadcasts, up to this many bytes.
INLINE_BYTES = 64 * 1024


def digest(changes: bytes) -> bytes:
    """The digest of a change log: how a worker tells whether the driver applied its own log."""
    return hashlib.blake2b(changes, digest_size=16).digest()


class Delta(NamedTuple):
    """The change log that made ``version`` of a namespace's image, and its digest."""

    version: int
    digest: bytes
    changes: Any  # a broadcast of the log's bytes, or the bytes themselves (inline)


class ShippedImage(NamedTuple):
    """What a job carries for one namespace of a driver-owned provider: no image bytes.

    The image at ``version`` is the ``snapshot`` (the image at version ``base``) with the
    ``deltas`` (versions ``base + 1`` to ``version``, in order) replayed on it; ``base_digest``
    is the digest of the change log that made version ``base``, if the driver recorded one.
    Versions only compare within one ``token``.
    """

    token: str
    version: int
    base: int
    base_digest: bytes | None
    snapshot: Any  # ``export_image`` at ``base``: a broadcast, or the bytes (inline)
    deltas: tuple[Delta, ...]

    def digest_of(self, version: int) -> bytes | None:
        """The digest of the change log that made ``version``; ``None`` if not carried."""
        if version == self.base:
            return self.base_digest
        if self.base < version <= self.version:
            return self.deltas[version - self.base - 1].digest
        return None


@dataclass
class _Line:
    """The driver's record of one namespace since its token was drawn."""

    token: str
    mark: Any  # the provider's ``image_version`` when the line last saw the image
    version: int = 0
    base: int = 0
    base_digest: bytes | None = None
    snapshot: Any = None
    snapshot_bytes: int = 0
    deltas: list[Delta] = field(default_factory=list)
    delta_bytes: int = 0
    shipped: int = 0  # deltas already shipped (inline or broadcast); the rest are new
    inline: int = 0  # bytes of the snapshot and deltas that travel inline

    def broadcasts(self) -> list[Any]:
        out = [d.changes for d in self.deltas if not isinstance(d.changes, bytes)]
        if self.snapshot is None or isinstance(self.snapshot, bytes):
            return out
        return [self.snapshot, *out]


class ImageShipper:
    """The driver's side: descriptors for the jobs, change logs recorded as they are applied.

    One per topology run, over the run's SparkContext and its driver-owned provider. The
    protocol asks ``ship`` for a job's images and hands the tasks' change logs to
    ``apply_changes`` (instead of the provider's) once the job succeeded.
    """

    def __init__(
        self,
        sc: Any,
        provider: DriverOwnedStateProvider,
        *,
        max_deltas: int = MAX_DELTAS,
        inline_bytes: int = INLINE_BYTES,
        files: LocalFiles | None = None,
    ) -> None:
        self.provider = provider
        self._sc = sc
        # What carries a large snapshot or delta: Spark broadcasts, or files on a local master.
        self._share: Any = files if files is not None else sc
        self._max_deltas = max_deltas
        self._inline_bytes = inline_bytes
        self._lines: dict[str, _Line] = {}
        self._retired: list[Any] = []  # replaced during the last ship: destroyed at the next
        self._lock = threading.Lock()
        self._closed = False
        self.snapshots = 0  # how many snapshots were made (for tests and metrics)

    def ship(self, namespaces: Iterable[str]) -> dict[str, bytes | ShippedImage]:
        """What a job carries for ``namespaces``: descriptors, or whole images when unsure."""
        with self._lock:
            retired, self._retired = self._retired, []
            self._destroy(retired)
            return {ns: self._ship_one(ns) for ns in namespaces}

    def apply_changes(self, namespace: str, changes: bytes) -> None:
        """Apply a task's change log to the driver's image; record it as the next version.

        Recorded only if nothing but recorded logs changed the image since the line last saw
        it; otherwise the line is dropped, and the next ``ship`` draws a new token.
        """
        provider = self.provider
        with self._lock:
            line = self._lines.pop(namespace, None)
            before = provider.image_version(namespace)
            try:
                provider.apply_changes(namespace, changes)
            except BaseException:  # the image is in doubt: the next ship draws a new token
                if line is not None:
                    self._retired += line.broadcasts()
                raise
            if line is None or before is None or before != line.mark:
                if line is not None:
                    self._retired += line.broadcasts()
                return
            line.version += 1
            line.deltas.append(Delta(line.version, digest(changes), changes))
            line.delta_bytes += len(changes)
            line.mark = provider.image_version(namespace)
            self._lines[namespace] = line

    def close(self) -> None:
        """Destroy every broadcast made (when the run ends); later ships send whole images."""
        with self._lock:
            self._closed = True
            doomed = self._retired
            for line in self._lines.values():
                doomed += line.broadcasts()
            self._lines.clear()
            self._retired = []
            self._destroy(doomed)

    # ----------------------------------------------------------------- inside the lock
    def _ship_one(self, namespace: str) -> bytes | ShippedImage:
        provider = self.provider
        mark = provider.image_version(namespace)
        if mark is None or self._closed:
            return provider.export_image(namespace)
        line = self._lines.pop(namespace, None)
        if line is not None and line.mark != mark:  # changed by something else: a new token
            self._retired += line.broadcasts()
            line = None
        if line is None or line.snapshot is None or self._outgrown(line) or self._spills(line):
            image, mark = self._export(namespace, mark)
            if image is None:
                if line is not None:
                    self._retired += line.broadcasts()
                return provider.export_image(namespace)
            if line is not None and line.mark != mark:
                self._retired += line.broadcasts()
                line = None
            if line is None:
                line = _Line(secrets.token_hex(8), mark)
            self._rebase(line, image)
        self._lines[namespace] = line
        for i in range(line.shipped, len(line.deltas)):  # decided once, when first shipped
            d = line.deltas[i]
            if line.inline + len(d.changes) <= self._inline_bytes:
                line.inline += len(d.changes)
            else:
                line.deltas[i] = d._replace(changes=self._share.broadcast(d.changes))
        line.shipped = len(line.deltas)
        return ShippedImage(
            line.token, line.version, line.base, line.base_digest, line.snapshot, tuple(line.deltas)
        )

    def _outgrown(self, line: _Line) -> bool:
        return len(line.deltas) > self._max_deltas or line.delta_bytes > line.snapshot_bytes

    def _spills(self, line: _Line) -> bool:
        """Whether new deltas would be broadcast, though the image may still travel inline.

        A small line's inline snapshot leaves little of the budget to its deltas: a state of
        some 60 KiB made nearly every delta a broadcast (a py4j call to make it, another to
        destroy it, several ms of the driver's critical path each job). Exporting the small
        image again costs a fraction of that, and its deltas start from an empty budget. A line
        whose snapshot is already a broadcast (a large image) keeps broadcasting its deltas:
        exporting it each time would cost as much as the state is large.
        """
        if not isinstance(line.snapshot, bytes):
            return False
        new = sum(len(d.changes) for d in line.deltas[line.shipped :])
        return new > 0 and line.inline + new > self._inline_bytes

    def _export(self, namespace: str, mark: Any) -> tuple[bytes | None, Any]:
        """The image and the mark it is at: a mark read before and after an unchanged export.

        Exporting a namespace the driver never had makes its (empty) image, a change: one more
        export then settles. ``(None, None)`` if the image kept changing.
        """
        provider = self.provider
        for _ in range(3):
            image = provider.export_image(namespace)
            after = provider.image_version(namespace)
            if after == mark:
                return image, mark
            mark = after
        return None, None

    def _rebase(self, line: _Line, image: bytes) -> None:
        """Make ``image`` (at the line's version) its snapshot; retire what it replaces."""
        self._retired += line.broadcasts()
        if line.deltas:
            line.base_digest = line.deltas[-1].digest
        line.base, line.deltas, line.delta_bytes, line.shipped = line.version, [], 0, 0
        inline = len(image) <= self._inline_bytes
        line.snapshot = image if inline else self._share.broadcast(image)
        line.snapshot_bytes, line.inline = len(image), len(image) if inline else 0
        self.snapshots += 1

    def _destroy(self, broadcasts: list[Any]) -> None:
        stopped = self._sc is None or self._sc._jsc is None  # it took its broadcasts along
        for b in broadcasts:
            if isinstance(b, LocalFile) or not stopped:
                b.destroy(blocking=False)
