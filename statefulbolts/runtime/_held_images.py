"""A worker's side of image shipping: the images this Python worker keeps between tasks.

PySpark reuses a Python worker for many tasks, and the in-memory provider's store is a class
attribute, so the image a task leaves in the store is still there for the next task of the same
namespace that this worker runs. ``_images`` says what a job carries instead of the image
(a ``ShippedImage``); this module decides, per namespace, what a starting task does with it:

1. Forget what this worker knew of the namespace: until the task ends cleanly its image may
   hold anything (a task that raises, or that a protocol fails, leaves its writes behind).
2. If this worker has a record of the image (from the last task here that ended cleanly), the
   record's token is the job's, and the provider's mark (``image_version``) is the one recorded
   (nothing touched the image since), the image is at the recorded version, plus the change log
   that task returned if it returned one. That log is version + 1 only if the driver recorded
   a log with exactly its digest as version + 1 (the job succeeded, and no other attempt of the
   task won with a different log); if not, the image is lost.
3. An image at a version the job's descriptor covers (between its snapshot and its version) is
   kept and catches up by replaying the deltas after it; a current one is used as it is.
   Anything else (no record, another token, a moved mark, a log the driver did not record, a
   version the descriptor does not cover) installs the snapshot and replays every delta.
4. When the task ends cleanly, record for each namespace: the token, the version it started
   at, the digest of the change log it returns (``None`` if none) and the provider's mark.

Whole images (bytes; a provider without ``image_version``) are installed as they come.
"""

from __future__ import annotations

import collections
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from statefulbolts.runtime._images import Delta, ShippedImage, digest
from statefulbolts.runtime._worker import broadcast_value

if TYPE_CHECKING:
    from providers import DriverOwnedStateProvider

__all__ = ["Held", "catch_up", "finish_images", "install_images", "loads"]


class Held(NamedTuple):
    """What this worker knows of its image of one namespace (after a task ended cleanly)."""

    token: str
    version: int  # the version the task started from
    digest: bytes | None  # the change log the task returned, if any
    mark: Any  # the provider's ``image_version`` when the task ended


# namespace -> what the last clean task here left; a module global lives as long as the worker.
_held: dict[str, Held] = {}
# How each shipped image was installed in this worker: "current", "caught-up", "snapshot".
_loads: collections.Counter[str] = collections.Counter()


def loads() -> dict[str, int]:
    """How this worker installed the images of its tasks so far (for tests and measurement)."""
    return dict(_loads)


def catch_up(held: Held | None, shipped: ShippedImage, mark: Any) -> tuple[Delta, ...] | None:
    """The deltas that bring a kept image to ``shipped.version``; ``None``: take the snapshot.

    Example:
        >>> deltas = (Delta(2, b"a", "log 2"), Delta(3, b"b", "log 3"))
        >>> shipped = ShippedImage("t", 3, 1, None, "snapshot", deltas)
        >>> catch_up(Held("t", 3, None, 7), shipped, 7)
        ()
        >>> catch_up(Held("t", 1, b"a", 7), shipped, 7)  # its own log became version 2
        (Delta(version=3, digest=b'b', changes='log 3'),)
        >>> catch_up(Held("t", 1, b"x", 7), shipped, 7) is None  # the driver applied another
        True
        >>> catch_up(Held("t", 3, None, 8), shipped, 7) is None  # the image changed since
        True
    """
    if held is None or held.token != shipped.token or mark is None or held.mark != mark:
        return None
    version = held.version
    if held.digest is not None:
        if shipped.digest_of(version + 1) != held.digest:
            return None
        version += 1
    if not shipped.base <= version <= shipped.version:
        return None
    return shipped.deltas[version - shipped.base :]


def install_images(
    provider: DriverOwnedStateProvider, root: str, shipped: Mapping[str, bytes | ShippedImage]
) -> None:
    """Before a task under ``root`` runs: make each shipped namespace's image current here."""
    images: dict[str, bytes] = {}
    keep: list[str] = []
    replay: list[tuple[str, tuple[Delta, ...]]] = []
    for ns, item in shipped.items():
        held = _held.pop(ns, None)  # step 1: unknown until the task ends cleanly
        if isinstance(item, bytes):
            images[ns] = item
            continue
        deltas = catch_up(held, item, provider.image_version(ns))
        if deltas is None:
            images[ns] = _read(item.snapshot)
            deltas = item.deltas
            _loads["snapshot"] += 1
        else:
            keep.append(ns)
            _loads["caught-up" if deltas else "current"] += 1
        if deltas:
            replay.append((ns, deltas))
    if keep:
        provider.begin_task(root, images, keep=keep)
    else:
        provider.begin_task(root, images)
    for ns, deltas in replay:
        for delta in deltas:
            provider.apply_changes(ns, _read(delta.changes))


def finish_images(
    provider: DriverOwnedStateProvider,
    shipped: Mapping[str, bytes | ShippedImage],
    changes: Mapping[str, bytes],
) -> None:
    """After a task ended cleanly, returning ``changes``: remember what its images are."""
    for ns, item in shipped.items():
        if isinstance(item, bytes):
            continue
        mark = provider.image_version(ns)
        if mark is None:
            continue
        log = changes.get(ns)
        _held[ns] = Held(item.token, item.version, None if log is None else digest(log), mark)


def _read(ref: Any) -> bytes:
    """A broadcast's value, not kept by the broadcast; bytes that travelled inline as they are.

    PySpark's ``Broadcast`` keeps the value it loaded for as long as the JVM keeps the
    broadcast registered in this worker; the image made from a snapshot is all we need.
    """
    if isinstance(ref, bytes):
        return ref
    value = broadcast_value(ref)
    if getattr(ref, "_path", None) is not None:  # read from a file: it can be read again
        vars(ref).pop("_value", None)
    assert isinstance(value, bytes)  # noqa: S101 - ImageShipper broadcasts bytes
    return value
