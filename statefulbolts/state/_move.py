"""Export a topology's committed state to a file, and import it into any provider.

What moves is everything a restart reads, exactly as stored: every namespace under the
topology's prefix (``T/`` or ``$transactional/<id>/``) with its committed map and txid, its
prepared delta and txid, and its state TTL (each committed key's expiry and the last committed
transaction's timestamp), so an imported key expires exactly when it would have. So the
checkpoint spout's saved txid and phase (and the manifest of the transaction it was deciding)
travel with the task states, and a topology stopped in COMMITTING
rolls that transaction forward after the move as it would have before.

``import_state`` steps:
    1. Read the whole file and check it (``read_info``): a damaged, truncated or foreign file
       raises ``StateFileError`` before anything is written. Foreign includes a header whose
       prefix is not its scope's and any namespace the scope does not own (``_format``).
    2. Check the scope: the file's topology (or transactional id) must be the one the caller
       names; a file of another one is refused, naming both.
    3. Check the target: its serializers must be the file's (a bolt's values are stored in their
       bytes), and no namespace of the scope may hold state, unless ``overwrite``.
    4. Read the file again and replace each namespace's stored image in one step per namespace
       (``KeyValueState.replace_stored``), each checked again to be the scope's before it is
       written; with ``overwrite``, the scope's namespaces that the file does not have are
       emptied, so the target holds exactly what the file holds.

Export and import are offline operations: stop the topology first. An export whose namespace's
txids change while it is read (a running topology) stops with an error.

Example:
    >>> import os, tempfile
    >>> from providers.memory import InMemoryKeyValueStateProvider as Memory
    >>> state = Memory().new_state("doc-move/count-0", {})
    >>> state.put("storm", 3)
    >>> state.prepare_commit(1)
    >>> state.commit(1)
    >>> path = os.path.join(tempfile.mkdtemp(), "doc-move.sbstate")
    >>> export_state({}, path, topology="doc-move").namespaces[0].committed
    1
    >>> Memory.drop("doc-move/")
    >>> import_state({}, path, topology="doc-move").info.entries
    1
    >>> Memory().new_state("doc-move/count-0", {}).get("storm")
    3
    >>> Memory.drop("doc-move/")
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from providers import SERIALIZER_FIELDS, STATE_PROVIDER_CONFIG_KEY, provider_name
from statefulbolts.errors import (
    StateFileError,
    StateNotFoundError,
    StateOverwriteError,
    StateToolError,
)
from statefulbolts.state._format import StateFileInfo, StateFileReader, StateFileWriter
from statefulbolts.state._scope import Scope, image_state, listed, serializer_fields

__all__ = ["ImportResult", "export_state", "import_state", "read_info"]

_SHOWN = 5


@dataclass(frozen=True)
class ImportResult:
    """What an import wrote: the file's content, and what it replaced or emptied."""

    info: StateFileInfo
    location: str
    replaced: list[str] = field(default_factory=list)
    emptied: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return {
            **self.info.as_dict(),
            "location": self.location,
            "replaced": self.replaced,
            "emptied": self.emptied,
        }


def export_state(
    conf: Mapping[str, Any],
    path: str | os.PathLike[str],
    *,
    topology: str | None = None,
    transactional_id: str | None = None,
) -> StateFileInfo:
    """Write every namespace of a topology (or a transactional id) to the state file ``path``.

    Reads the provider ``conf`` names and changes nothing in it. The file is written beside
    ``path`` and renamed over it once complete, so ``path`` is never a partial file. With the
    in-memory provider, call it in the process that ran the topology (its state lives there).

    Returns:
        What the file holds (the same as ``read_info(path)``).

    Raises:
        StateNotFoundError: the provider holds nothing under the topology's prefix.
        StateToolError: a bad argument, a provider the tool cannot read, or a namespace that
            changed while it was read (the topology is running).
        StateBackendError: the store failed.
    """
    scope = Scope.of(topology, transactional_id)
    names = [n for n in listed(conf, scope.prefix) if scope.owns(n)]
    if not names:
        msg = f"nothing of {scope.describe()} is stored in {provider_name(conf)}"
        raise StateNotFoundError(msg)
    target = Path(path)
    partial = target.with_name(target.name + ".partial")
    try:
        with partial.open("wb") as stream:
            info = _write(conf, scope, names, stream)
            stream.flush()
            os.fsync(stream.fileno())
        partial.replace(target)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return info


def _write(conf: Mapping[str, Any], scope: Scope, names: list[str], stream: Any) -> StateFileInfo:
    states = [image_state(conf, name) for name in names]
    header = {
        "scope": scope.kind,
        "name": scope.name,
        "prefix": scope.prefix,
        "provider": provider_name(conf),
        "location": states[0].location,
        "created_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "serializers": serializer_fields(conf),
    }
    writer = StateFileWriter(stream, header)
    for name, state in zip(names, states, strict=True):
        before = state.stored_txids()
        writer.namespace(
            name,
            *before,
            state.scan_prepared(),
            state.scan_committed(),
            state.scan_expiries(),
            state.committed_time(),
        )
        after = state.stored_txids()
        if after != before:
            msg = (
                f"namespace {name!r} changed while it was exported (committed, prepared txids "
                f"{before} -> {after}): stop the topology, then export again"
            )
            raise StateToolError(msg)
    return writer.close()


def read_info(path: str | os.PathLike[str]) -> StateFileInfo:
    """Read and check a whole state file; returns its header, namespaces and counts.

    Writes nothing and needs no provider.

    Raises:
        StateFileError: the file is damaged, truncated, of another format or version.
        OSError: the file cannot be read.
    """
    with Path(path).open("rb") as stream:
        reader = StateFileReader(stream, str(path))
        reader.header()
        for _ in reader.namespaces():
            pass
    assert reader.info is not None  # noqa: S101 - set when the trailer was checked
    return reader.info


def import_state(
    conf: Mapping[str, Any],
    path: str | os.PathLike[str],
    *,
    topology: str | None = None,
    transactional_id: str | None = None,
    overwrite: bool = False,
) -> ImportResult:
    """Write the state file ``path`` into the provider ``conf`` names (see the module steps).

    Args:
        conf: the target's config (``topology.state.provider`` and its config); its key and
            value serializer fields must equal the source's, which the file records.
        path: a file ``export_state`` wrote.
        topology: the topology the file must hold; or
        transactional_id: the transactional id it must hold (name exactly one). Nothing
            outside that scope is ever written.
        overwrite: replace what the target holds of the scope (the topology's namespaces);
            without it, an import into a target holding any refuses.

    Raises:
        StateFileError: the file is damaged, truncated, foreign (a prefix or a namespace that
            is not its scope's), of another format or version; nothing was written.
        StateOverwriteError: the target already holds state of the topology; nothing was
            written.
        StateToolError: the file holds another topology or transactional id than the one
            named (nothing was written), the serializers differ, or a provider the tool
            cannot write.
        StateBackendError: the store failed (the namespaces written before it stay written).
    """
    scope = Scope.of(topology, transactional_id)
    info = read_info(path)
    header = info.header
    held = Scope.named(header["scope"], header["name"])  # read_info checked it
    if held != scope:
        msg = (
            f"state file {str(path)!r} holds the state of {held.describe()}, and the import "
            f"names {scope.describe()}; nothing was imported. A file imports into the scope it "
            f"was exported from: name {held.describe()} ({_flag(held)})"
        )
        raise StateToolError(msg)
    in_file = [n.name for n in info.namespaces]
    _check_serializers(conf, scope, header, in_file)
    present = [n for n in listed(conf, scope.prefix) if scope.owns(n)]
    holding = [n for n in sorted(set(in_file) | set(present)) if _holds_state(conf, n)]
    if holding and not overwrite:
        shown = ", ".join(holding[:_SHOWN]) + (", ..." if len(holding) > _SHOWN else "")
        msg = (
            f"{provider_name(conf)} already holds state of {scope.describe()} in "
            f"{len(holding)} namespace(s): {shown}; nothing was imported. Import into an "
            "empty target, or overwrite it with the file's state (--overwrite)"
        )
        raise StateOverwriteError(msg)
    location = ""
    with Path(path).open("rb") as stream:
        reader = StateFileReader(stream, str(path))
        if reader.header() != header:
            msg = f"state file {str(path)!r} changed while it was imported; import it again"
            raise StateFileError(msg)
        for block in reader.namespaces():
            if not scope.owns(block.name):  # the reader refused it already; never written
                msg = f"state file {str(path)!r}: {block.name!r} is not of {scope.describe()}"
                raise StateFileError(msg)
            state = image_state(conf, block.name)
            state.replace_stored(
                block.committed_txid,
                block.committed,
                block.prepared_txid,
                block.prepared,
                expiries=block.expiries,
                committed_time=block.committed_time,
            )
            location = location or state.location
    if reader.info is None or reader.info.sha256 != info.sha256:
        msg = f"state file {str(path)!r} changed while it was imported; import it again"
        raise StateFileError(msg)
    emptied = [n for n in present if n not in set(in_file)] if overwrite else []
    for name in emptied:
        image_state(conf, name).replace_stored(None, (), None, {})
    return ImportResult(info, location, [n for n in holding if n in set(in_file)], emptied)


def _flag(scope: Scope) -> str:
    """The command-line option that names ``scope``."""
    return f"--topology {scope.name}" if scope.kind == "topology" else f"--id {scope.name}"


def _holds_state(conf: Mapping[str, Any], namespace: str) -> bool:
    """Whether the namespace has a txid, a committed key or a prepared entry."""
    state = image_state(conf, namespace)
    if state.stored_txids() != (None, None):
        return True
    return next(iter(state.scan_committed()), None) is not None or (
        next(iter(state.scan_prepared()), None) is not None
    )


def _check_serializers(
    conf: Mapping[str, Any], scope: Scope, header: Mapping[str, Any], names: list[str]
) -> None:
    """A bolt's values are the source serializers' bytes: the target must decode them alike."""
    if all(scope.is_system(n) for n in names):
        return  # only framework records, always plain msgpack
    source, target = header["serializers"], serializer_fields(conf)
    if source != target:
        msg = (
            f"the file's bolt states were written with serializer fields {source or 'none'} "
            f"and the target config has {target or 'none'}; the values would not read back. "
            f"Set the same {', '.join(SERIALIZER_FIELDS)} in the target's "
            f"{STATE_PROVIDER_CONFIG_KEY}"
        )
        raise StateToolError(msg)
