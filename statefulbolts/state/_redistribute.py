"""Move one component's committed state between namespaces: a rescale, a rename, a migration.

A *redistribution* reads every committed entry of a component's source namespaces and writes
each to the target task a routing rule gives it, for any provider whose states expose their
stored image (``providers.KeyValueState``, "The stored image"). It runs in two steps, so that a
crash anywhere leaves something a restart can finish:

1. **Stage** (``stage``): stream every source entry (constant memory: entries wait in a spill
   file per target on local disk), route it, and write each target's whole image into its
   *staging* namespace (``<prefix>$evolve/...``) in one ``replace_stored``. The sources are
   not touched: a crash here loses nothing, and the stage is simply done again.
2. **Swap** (``swap``, ``empty``): replace each target namespace by its staging namespace,
   empty the namespaces that are no longer used, then the staging ones. Every step is a
   whole-namespace replace from an intact staging copy, so a crash here is finished by doing
   the swap again.

Which step is under way is the caller's to record (``recovery.evolve`` keeps it in the stored
shape). Entries move as the store holds them (the serializers' bytes), unless a migration
hook rewrites them (``Transform``).

State TTL moves with the entries: a key's expiry (``KeyValueState.scan_expiries``, an
absolute time in ms) goes to the target its key goes to, so a moved key expires exactly when it
would have where it was, and each target keeps the sources' last committed transaction's
timestamp (``committed_time``, the latest of them), at which offline readers judge expiry. A
per-key migration hook's entry keeps the expiry of the key it was made from; a whole-state
hook's entry the expiry its key had, if any (the component's expiries are then held in memory).

A routing rule may refuse an entry it cannot place (``LayoutError``): a key that is not in the
task its source's layout says it should be, two sources holding the same key. Refusals happen
while staging, before any target is written.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO

import msgpack

from providers import (
    KeyValueState,
    MsgpackKeySerializer,
    MsgpackSerializer,
    Serializer,
    StateFactory,
    encode_value,
    resolve_serializers,
)
from statefulbolts.errors import StateToolError
from statefulbolts.state._shape import serializers_of

__all__ = [
    "EntryCheck",
    "EntryRule",
    "LayoutError",
    "Stage",
    "Transform",
    "WholeTransform",
    "empty",
    "open_image",
    "stage",
    "swap",
]

# How many entries a spill file buffers before it writes.
_SPILL_BATCH = 4096


class LayoutError(StateToolError):
    """An entry cannot be placed by the layout asked for; the message says which and why."""


# (source task, decoded key) -> the target tasks of the entry (none: dropped); source task -1:
# the entry came out of a whole-state migration, from no task in particular.
EntryRule = Callable[[int, Any], Sequence[int]]
# (source task, decoded key as stored) -> None, or raise LayoutError: the key is not where the
# source's layout says it must be.
EntryCheck = Callable[[int, Any], None]
# (decoded key, decoded value) -> the new (key, value), or None to drop the entry.
Transform = Callable[[Any, Any], "tuple[Any, Any] | None"]
# every (key, value) of the component -> the new entries.
WholeTransform = Callable[[Iterator[tuple[Any, Any]]], Iterable[tuple[Any, Any]]]


def open_image(conf: Mapping[str, Any], namespace: str, system: bool) -> KeyValueState:
    """A state of ``namespace`` that exposes its stored image.

    Raises:
        StateToolError: the provider's states are not ``KeyValueState`` s with a stored image.
    """
    state = (
        StateFactory.get_system_state(namespace, conf)
        if system
        else StateFactory.get_state(namespace, conf)
    )
    if not isinstance(state, KeyValueState) or not state.supports_stored_image:
        kind = f"{type(state).__module__}.{type(state).__qualname__}"
        msg = (
            f"{kind} does not expose its stored image (providers.KeyValueState, 'The stored "
            f"image'), so the state of {namespace!r} cannot be moved; implement stored_txids, "
            "scan_committed, scan_prepared, decode_key, decode_value, get_committed and "
            "replace_stored in the provider"
        )
        raise StateToolError(msg)
    return state


@dataclass
class Stage:
    """What ``stage`` wrote: entries per target task, and the staging namespaces."""

    entries: dict[int, int]
    staging: dict[int, str]

    @property
    def total(self) -> int:
        """Entries written over all targets."""
        return sum(self.entries.values())


class _Spill:
    """One target's entries on local disk, as a msgpack stream of ``[key bytes, payload]``."""

    def __init__(self, directory: str, task: int, kind: str = "entries") -> None:
        self.path = os.path.join(directory, f"target-{task}-{kind}.msgpack")
        self._file: BinaryIO = open(self.path, "wb")  # noqa: SIM115 - closed in close()
        self._packer = msgpack.Packer(use_bin_type=True)
        self._buffer: list[bytes] = []
        self.count = 0

    def add(self, ekey: bytes, payload: bytes) -> None:
        self._buffer.append(self._packer.pack([ekey, payload]))
        self.count += 1
        if len(self._buffer) >= _SPILL_BATCH:
            self._file.write(b"".join(self._buffer))
            self._buffer = []

    def close(self) -> None:
        if self._buffer:
            self._file.write(b"".join(self._buffer))
            self._buffer = []
        self._file.close()

    def read(self) -> Iterator[tuple[bytes, bytes]]:
        with open(self.path, "rb") as f:
            for ekey, payload in msgpack.Unpacker(f, raw=False, use_list=False):
                yield bytes(ekey), bytes(payload)


class _ExpirySpill(_Spill):
    """One target's key expiries on local disk: ``[key bytes, expiry ms]``."""

    def __init__(self, directory: str, task: int) -> None:
        super().__init__(directory, task, "expiries")

    def add_expiry(self, ekey: bytes, at_ms: int) -> None:
        self._buffer.append(self._packer.pack([ekey, int(at_ms)]))
        self.count += 1
        if len(self._buffer) >= _SPILL_BATCH:
            self._file.write(b"".join(self._buffer))
            self._buffer = []

    def read_expiries(self) -> Iterator[tuple[bytes, int]]:
        with open(self.path, "rb") as f:
            for ekey, at_ms in msgpack.Unpacker(f, raw=False, use_list=False):
                yield bytes(ekey), int(at_ms)


def _latest_time(states: Sequence[tuple[int, KeyValueState]]) -> int | None:
    """The latest ``committed_time`` of the sources (``None``: none has one)."""
    times = [t for _, state in states if (t := state.committed_time()) is not None]
    return max(times) if times else None


def _serializers(conf: Mapping[str, Any], system: bool) -> tuple[Serializer, Serializer]:
    if system:
        return MsgpackKeySerializer(), MsgpackSerializer()
    return resolve_serializers(dict(serializers_of(conf)), conf)


def stage(
    conf: Mapping[str, Any],
    *,
    system: bool,
    sources: Sequence[tuple[int, str]],
    targets: Mapping[int, str],
    rule: EntryRule,
    committed_txid: int | None,
    check: EntryCheck | None = None,
    decode_keys: bool = True,
    unique: bool = False,
    transform: Transform | None = None,
    whole: WholeTransform | None = None,
    extra: Callable[[], Mapping[int, Iterable[tuple[Any, Any]]]] | None = None,
    skip: Callable[[Any], bool] | None = None,
    label: str = "",
) -> Stage:
    """Stage step 1 (see the module docstring): build every target's image in its staging space.

    ``sources`` are ``(task, namespace)`` pairs read in order; ``targets`` maps each target
    task to its staging namespace, every one of which is written (empty if nothing is routed
    there), with ``committed_txid``. ``check`` sees each entry's key as stored, ``rule`` routes
    it (after the migration hook, if any); ``decode_keys`` False hands both ``None`` for the key
    (a rule by source task only costs no decoding). With ``unique`` a key
    routed to one target twice is refused. ``transform`` rewrites each entry, ``whole`` the
    component's entries all together (a migration hook); ``skip`` leaves some keys to the
    caller, which ``extra`` then adds per target, already decoded (a transactional map's
    record). ``label`` names the component in messages. Each entry's expiry goes with it, and
    every target gets the sources' latest ``committed_time`` (see the module docstring).

    Raises:
        LayoutError: an entry cannot be placed (from ``rule``), or a key twice with ``unique``.
        StateToolError: a source holds a prepared delta (settle the checkpoint first), or the
            provider has no stored image.
        StateBackendError: the store failed; no target was written if it failed while reading.
    """
    keys_codec, values_codec = _serializers(conf, system)
    states = [(task, open_image(conf, ns, system)) for task, ns in sources]
    for (_, ns), (_, state) in zip(sources, states, strict=True):
        _, prepared = state.stored_txids()
        if prepared is not None:
            msg = (
                f"{label or ns}: namespace {ns!r} holds a prepared delta of txid {prepared}: "
                "its transaction must be committed or rolled back before the state is moved"
            )
            raise StateToolError(msg)
    rewrite = transform is not None or whole is not None
    committed_time = _latest_time(states)
    seen: dict[int, set[bytes]] = {task: set() for task in targets}
    with tempfile.TemporaryDirectory(prefix="statefulbolts-evolve-") as directory:
        spills = {task: _Spill(directory, task) for task in targets}
        expiring = {task: _ExpirySpill(directory, task) for task in targets}
        try:

            def put(task: int, ekey: bytes, payload: bytes, key: Any) -> None:
                if unique:
                    bucket = seen[task]
                    if ekey in bucket:
                        msg = (
                            f"{label}: key {key!r} is held by more than one task, and the new "
                            f"layout puts both in task {task}: the state cannot be merged"
                        )
                        raise LayoutError(msg)
                    bucket.add(ekey)
                spills[task].add(ekey, payload)

            def routed(source_task: int, key: Any) -> Sequence[int]:
                tasks = rule(source_task, key)
                for task in tasks:
                    if task not in spills:
                        msg = f"{label}: key {key!r} routed to task {task}, not a target"
                        raise LayoutError(msg)
                return tasks

            if not rewrite:
                for task, state in states:
                    for ekey, payload in state.scan_committed():
                        key = state.decode_key(ekey) if decode_keys or skip else None
                        if skip is not None and skip(key):
                            continue
                        if check is not None:
                            check(task, key)
                        for to in routed(task, key):
                            put(to, ekey, payload, key)
                    # An expiry follows its key (the same rule, so the same targets); one of a
                    # key no longer committed is dropped by replace_stored.
                    for ekey, at_ms in state.scan_expiries():
                        key = state.decode_key(ekey) if decode_keys or skip else None
                        if skip is not None and skip(key):
                            continue
                        for to in routed(task, key):
                            expiring[to].add_expiry(ekey, at_ms)
            else:
                expiries = {ekey: at for _, state in states for ekey, at in state.scan_expiries()}
                for task, key, value, source_ekey in _rewritten(
                    states, transform, whole, skip, check
                ):
                    ekey = keys_codec.serialize(key)
                    payload = encode_value(values_codec, label, key, value)
                    expiry = expiries.get(ekey if source_ekey is None else source_ekey)
                    for to in routed(task, key):
                        put(to, ekey, payload, key)
                        if expiry is not None:
                            expiring[to].add_expiry(ekey, expiry)
            if extra is not None:
                for task, entries in extra().items():
                    for key, value in entries:
                        put(task, keys_codec.serialize(key), values_codec.serialize(value), key)
        finally:
            for spill in [*spills.values(), *expiring.values()]:
                spill.close()
        for task, ns in targets.items():
            target = open_image(conf, ns, system)
            target.replace_stored(
                committed_txid,
                spills[task].read(),
                None,
                {},
                expiries=expiring[task].read_expiries(),
                committed_time=committed_time,
            )
        return Stage({task: spill.count for task, spill in spills.items()}, dict(targets))


def _rewritten(
    states: Sequence[tuple[int, KeyValueState]],
    transform: Transform | None,
    whole: WholeTransform | None,
    skip: Callable[[Any], bool] | None,
    check: EntryCheck | None,
) -> Iterator[tuple[int, Any, Any, bytes | None]]:
    """Decoded ``(source task, key, value, source key bytes)`` after the migration hook.

    From ``whole``: source task -1 and no source key (no entry comes from one in particular).
    """

    def entries() -> Iterator[tuple[int, Any, Any, bytes]]:
        for task, state in states:
            for ekey, payload in state.scan_committed():
                key = state.decode_key(ekey)
                if skip is not None and skip(key):
                    continue
                if check is not None:
                    check(task, key)
                yield task, key, state.decode_value(payload), ekey

    if whole is not None:
        for key, value in whole((k, v) for _, k, v, _ in entries()):
            yield -1, key, value, None
        return
    assert transform is not None  # noqa: S101 - the caller gave one of the two
    for task, key, value, ekey in entries():
        out = transform(key, value)
        if out is not None:
            yield task, out[0], out[1], ekey


def swap(conf: Mapping[str, Any], *, system: bool, staging: str, target: str) -> None:
    """Step 2, for one target: replace ``target`` by the image of ``staging``.

    The image includes the keys' expiries and the committed transaction's timestamp. Doing it
    again gives the same result, as long as ``staging`` is intact: empty the staging
    namespaces (``empty``) only after every target was swapped.
    """
    staged = open_image(conf, staging, system)
    committed_txid, _ = staged.stored_txids()
    open_image(conf, target, system).replace_stored(
        committed_txid,
        staged.scan_committed(),
        None,
        {},
        expiries=staged.scan_expiries(),
        committed_time=staged.committed_time(),
    )


def empty(conf: Mapping[str, Any], *, system: bool, namespaces: Iterable[str]) -> None:
    """Empty each namespace: it holds nothing, and the provider no longer lists it."""
    for ns in namespaces:
        open_image(conf, ns, system).replace_stored(None, (), None, {})
