"""The in-memory provider: Storm's ``InMemoryKeyValueState`` with the same contract as Redis.

Layout per namespace, held in ``_Image`` (the in-memory twin of Redis' ``ns`` / ``ns$prepare`` /
``ns$txid``): a committed map with its txid, and a prepared *delta* (tombstones as ``None``) with
its txid. A state object layers its own pending writes on top (``providers._layered``: scalars
under str keys stay Python objects until a prepare). Keys and values are stored encoded (msgpack),
so a value that could not go to Redis cannot go here either, and a caller mutating an object after
``put`` cannot change a snapshot.

Differences from Storm, deliberate (docs/guarantees.md): ``commit(txid)`` of the txid already
committed is a no-op instead of an error (Storm loops forever on a retried COMMIT); ``rollback``
never aliases the committed map; a new state object on a namespace sees its committed data and any
pending prepare (Storm's is empty); state is not durable across a driver restart.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from typing import Any

import msgpack

from providers._base import DriverOwnedStateProvider, merge_layers, under
from providers._config import parse_provider_config
from providers._layered import LayeredKeyValueState
from providers._resolve import resolve_serializers
from providers._ttl import is_expired
from providers.errors import StateTransactionError

__all__ = ["InMemoryKeyValueState", "InMemoryKeyValueStateProvider"]

_Delta = dict[bytes, bytes | None]

# Marks of image changes (``image_version``), unique in the process: an image dropped and made
# anew never repeats a mark its predecessor had.
_marks = itertools.count(1)


class _Image:
    """What the store keeps for one namespace."""

    __slots__ = (
        "changes",
        "committed",
        "committed_time",
        "committed_txid",
        "expiry",
        "mark",
        "prepared",
        "prepared_expiry",
        "prepared_time",
        "prepared_txid",
        "rollbacks",
        "tracking",
    )

    def __init__(self) -> None:
        self.committed: dict[bytes, bytes] = {}
        self.committed_txid: int | None = None
        self.prepared: _Delta | None = None
        self.prepared_txid: int | None = None
        # Time to live (``providers._ttl``): the committed keys' expiries (only keys that have
        # one), the timestamp of the last committed transaction that had one; the prepared
        # transaction's timestamp (the commit's cleanup judges at it) and the expiry of every
        # value its delta writes (``None``: no expiry).
        self.expiry: dict[bytes, int] = {}
        self.committed_time: int | None = None
        self.prepared_time: int | None = None
        self.prepared_expiry: int | None = None
        # How many rollbacks this image had: a state may prepare only if none happened since it
        # last looked (as the Redis provider's fence). Not shipped: a task's image is its own.
        self.rollbacks = 0
        # What states did to this image since the last take_changes. Only a shipped image (task
        # side, installed by import_image) records: nobody takes the changes of a driver-side
        # image, so a long-lived driver state (the checkpoint spout's) would grow a log forever.
        self.changes: list[list[Any]] = []
        self.tracking = False
        self.mark = next(_marks)  # a new one at every change of the content (``changed``)

    def has_record(self) -> bool:
        """Whether a state of this namespace ever prepared, committed or rolled back."""
        return (
            self.committed_txid is not None or self.prepared_txid is not None or self.rollbacks > 0
        )

    def record(self, op: list[Any]) -> None:
        if self.tracking:
            self.changes.append(op)

    def changed(self) -> None:
        self.mark = next(_marks)

    def dump(self) -> bytes:
        return msgpack.packb(
            [
                self.committed_txid,
                self.committed,
                self.prepared_txid,
                self.prepared,
                self.expiry,
                self.committed_time,
                self.prepared_time,
                self.prepared_expiry,
            ],
            use_bin_type=True,
        )

    @classmethod
    def load(cls, blob: bytes) -> _Image:
        image = cls()
        fields = msgpack.unpackb(blob, raw=False)
        c_txid, committed, p_txid, prepared = fields[:4]
        image.committed_txid, image.committed = c_txid, committed
        image.prepared_txid, image.prepared = p_txid, prepared
        if len(fields) > 4:  # an image dumped before TTL has none of these
            image.expiry, image.committed_time = fields[4], fields[5]
            image.prepared_time, image.prepared_expiry = fields[6], fields[7]
        return image

    def expired(self, ekey: bytes, now: int | None) -> bool:
        """Whether committed ``ekey`` has expired at ``now``."""
        return is_expired(self.expiry.get(ekey), now) if self.expiry else False

    # The mutating steps, shared by live states and by replaying changes on the driver.
    def do_prepare(
        self, txid: int, writes: _Delta, time: int | None = None, expiry: int | None = None
    ) -> None:
        self.changed()
        if self.prepared is not None and self.prepared_txid == txid:
            self.prepared.update(writes)
        else:
            self.prepared = dict(writes)
        self.prepared_txid = txid
        self.prepared_time, self.prepared_expiry = time, expiry

    def do_commit(self, txid: int) -> None:
        self.changed()
        self._apply(self.prepared or {}, self.prepared_expiry)
        self._drop_expired(self.prepared_time)
        if self.prepared_time is not None:
            self.committed_time = self.prepared_time
        self.committed_txid = txid
        self.prepared, self.prepared_txid = None, None
        self.prepared_time, self.prepared_expiry = None, None

    def _apply(self, writes: _Delta, expiry: int | None) -> None:
        """Write a delta into the committed map; a written key's expiry becomes ``expiry``."""
        committed, expiries = self.committed, self.expiry
        if expiry is None and not expiries and None not in writes.values():
            # No deletion, and no expiry to set or drop: the whole delta in one C call.
            committed.update(writes)  # type: ignore[arg-type]  # no None in it
            return
        for key, value in writes.items():
            if value is None:
                committed.pop(key, None)
            else:
                committed[key] = value
            if value is not None and expiry is not None:
                expiries[key] = expiry
            elif expiries:
                expiries.pop(key, None)

    def _drop_expired(self, now: int | None) -> None:
        """The commit's cleanup: forget every committed key expired at ``now``."""
        if now is None or not self.expiry:
            return
        gone = [key for key, at in self.expiry.items() if at <= now]
        for key in gone:
            del self.expiry[key]
            self.committed.pop(key, None)

    def commit_op(self, namespace: str, txid: int) -> list[Any] | None:
        """The change ``commit(txid)`` makes (``None``: already committed), or why it cannot."""
        if self.prepared_txid == txid:
            return ["commit", txid]
        if self.prepared_txid is None and self.committed_txid == txid:
            return None  # a retried COMMIT of what is already committed
        msg = (
            f"state {namespace!r}: cannot commit txid {txid}; prepared txid is "
            f"{self.prepared_txid}, committed txid is {self.committed_txid}"
        )
        raise StateTransactionError(msg)

    def do_commit_writes(self, writes: _Delta) -> None:
        self.changed()
        self._apply(writes, None)  # a commit without txid writes without TTL
        if self.committed_txid is None:
            self.committed_txid = -1

    def do_rollback(self) -> None:
        self.changed()
        self.prepared, self.prepared_txid = None, None
        self.prepared_time, self.prepared_expiry = None, None
        self.rollbacks += 1

    def replay(self, ops: list[list[Any]]) -> None:
        for op in ops:
            kind = op[0]
            if kind == "prepare":
                self.do_prepare(*op[1:5])
            elif kind == "commit":
                self.do_commit(op[1])
            elif kind == "commit_writes":
                self.do_commit_writes(op[1])
            elif kind == "rollback":
                self.do_rollback()
            else:
                msg = f"unknown in-memory state change {kind!r}"
                raise StateTransactionError(msg)


class InMemoryKeyValueState(LayeredKeyValueState):
    """A ``KeyValueState`` kept in this process.

    Example:
        >>> state = InMemoryKeyValueState("demo/counter-0")
        >>> state.put("a", 1)
        >>> state.prepare_commit(0)
        >>> state.commit(0)
        >>> state.put("a", 2)
        >>> state.rollback()
        >>> state.get("a")
        1
    """

    def __init__(
        self,
        namespace: str,
        image: _Image | None = None,
        key_serializer: Any | None = None,
        value_serializer: Any | None = None,
    ) -> None:
        super().__init__(namespace, key_serializer, value_serializer)
        self._image = image if image is not None else _Image()
        self._rollbacks = self._image.rollbacks

    def __repr__(self) -> str:
        return (
            f"InMemoryKeyValueState(namespace={self.namespace!r}, "
            f"committed_txid={self._image.committed_txid}, "
            f"prepared_txid={self._image.prepared_txid})"
        )

    @property
    def location(self) -> str:
        """``memory``: this process's store (the driver's, for the life of the run)."""
        return "memory"

    @property
    def committed_txid(self) -> int | None:
        """The txid of the last commit, or ``None`` when nothing was committed."""
        return self._image.committed_txid

    @property
    def prepared_txid(self) -> int | None:
        """The txid of the pending prepare, or ``None``."""
        return self._image.prepared_txid

    def _stored(self, ekey: bytes) -> bytes | None:
        image, now = self._image, self._now
        prepared = image.prepared
        if prepared is not None and ekey in prepared:
            return None if is_expired(image.prepared_expiry, now) else prepared[ekey]
        return None if image.expired(ekey, now) else image.committed.get(ekey)

    def _stored_many(self, ekeys: list[bytes]) -> list[bytes | None]:
        """``_stored`` of each key: with nothing prepared and nothing expiring, in one C loop."""
        image = self._image
        if not image.prepared and not image.expiry:
            return list(map(image.committed.get, ekeys))
        return [self._stored(ekey) for ekey in ekeys]

    def _live_encoded(self) -> Iterator[tuple[bytes, bytes]]:
        """Pending writes first, then the prepared delta, then committed; each key once.

        The layers as they are at the start; keys expired at the transaction's timestamp are
        skipped.
        """
        self._flush()
        image, now = self._image, self._now
        prepared = list((image.prepared or {}).items())
        if is_expired(image.prepared_expiry, now):
            prepared = [(ekey, None) for ekey, _ in prepared]  # gone, and hiding what is below
        committed = [(k, v) for k, v in image.committed.items() if not image.expired(k, now)]
        layers = (list(self._pending.items()), prepared, committed)
        yield from merge_layers(layers)

    def prepare_commit(self, txid: int) -> None:
        """Move pending writes into the prepared delta of ``txid``.

        Re-preparing the same txid adds the newer writes (newer wins). Preparing a newer txid
        while one is prepared, a txid at or below the committed one, or anything after another
        state object rolled the namespace back since this one was made, is an error.
        """
        image = self._image
        if image.rollbacks != self._rollbacks:
            msg = (
                f"state {self.namespace!r}: cannot prepare txid {txid}: the namespace was rolled "
                f"back since this state was loaded; a task attempt that outlived its transaction "
                f"must not write"
            )
            raise StateTransactionError(msg)
        if image.prepared_txid is not None and txid != image.prepared_txid:
            msg = (
                f"state {self.namespace!r}: cannot prepare txid {txid} while txid "
                f"{image.prepared_txid} is prepared and not committed"
            )
            raise StateTransactionError(msg)
        if image.committed_txid is not None and txid <= image.committed_txid:
            msg = (
                f"state {self.namespace!r}: cannot prepare txid {txid}; txid "
                f"{image.committed_txid} is already committed"
            )
            raise StateTransactionError(msg)
        self._flush()
        writes, self._pending = self._pending, {}
        expiry = self._write_expiry()
        image.do_prepare(txid, writes, self._now, expiry)
        image.record(["prepare", txid, writes, self._now, expiry])

    def commit(self, txid: int | None = None) -> None:
        """Commit the prepared delta of ``txid``; the txid already committed is a no-op.

        Without ``txid``, commit the pending writes at once (the checkpoint spout's save).
        """
        image = self._image
        if txid is None:
            self._flush()
            writes, self._pending = self._pending, {}
            image.do_commit_writes(writes)
            image.record(["commit_writes", writes])
            return
        op = image.commit_op(self.namespace, txid)
        if op is not None:
            image.do_commit(txid)
            image.record(op)

    # -- the stored image (see KeyValueState)
    def stored_txids(self) -> tuple[int | None, int | None]:
        """``(committed txid, prepared txid)`` of the image."""
        return self._image.committed_txid, self._image.prepared_txid

    def scan_committed(self) -> Iterator[tuple[bytes, bytes]]:
        """The image's committed map (a snapshot of its items: the map itself may change)."""
        yield from list(self._image.committed.items())

    def scan_prepared(self) -> Iterator[tuple[bytes, bytes | None]]:
        """The image's prepared delta, tombstones as ``None``."""
        yield from list((self._image.prepared or {}).items())

    def get_committed(self, key: Any, default: Any = None) -> Any:
        """The committed value of ``key``, whatever is prepared or pending (unless expired)."""
        ekey = self._encode_key(key)
        payload = None if self._image.expired(ekey, self._now) else self._image.committed.get(ekey)
        return default if payload is None else self._values.deserialize(payload)

    def scan_expiries(self) -> Iterator[tuple[bytes, int]]:
        """The committed keys' expiries (a snapshot)."""
        yield from list(self._image.expiry.items())

    def committed_time(self) -> int | None:
        """The timestamp of the last committed transaction that had one."""
        return self._image.committed_time

    def replace_stored(
        self,
        committed_txid: int | None,
        committed: Iterable[tuple[bytes, bytes]],
        prepared_txid: int | None,
        prepared: Mapping[bytes, bytes | None],
        *,
        expiries: Iterable[tuple[bytes, int]] = (),
        committed_time: int | None = None,
    ) -> None:
        """Replace the image: committed map, prepared delta, txids; rollbacks back to zero.

        ``expiries`` are the committed keys' (a key not in ``committed`` is skipped);
        ``committed_time`` the last committed transaction's timestamp.

        The image object stays the one the provider's store holds (a state made from it sees
        the new content), so this is the driver-side store's content from now on.
        """
        if prepared and prepared_txid is None:
            msg = f"state {self.namespace!r}: a prepared delta needs a prepared txid"
            raise StateTransactionError(msg)
        new_committed = dict(committed)
        image = self._image
        image.changed()
        image.committed, image.committed_txid = new_committed, committed_txid
        image.expiry = {k: int(at) for k, at in expiries if k in new_committed}
        image.committed_time = committed_time
        image.prepared = None if prepared_txid is None else dict(prepared)
        image.prepared_txid = prepared_txid
        image.prepared_time, image.prepared_expiry = None, None
        image.rollbacks = 0
        self._rollbacks = 0
        self._pending, self._fresh = {}, {}

    def supersede_prepared(self, txid: int) -> None:
        """Drop the image's prepared delta of ``txid`` (see ``State``).

        In a task the image is that task's own copy, and its changes reach the driver only if
        the whole transaction succeeds, so dropping the delta at once is safe here.
        """
        if self._image.prepared_txid == txid:
            self._drop_prepared()

    def rollback(self) -> None:
        """Drop pending writes and the prepared delta."""
        self._pending, self._fresh = {}, {}
        self._drop_prepared()

    def _drop_prepared(self) -> None:
        image = self._image
        image.do_rollback()
        image.record(["rollback"])
        self._rollbacks = image.rollbacks  # its own rollback: this state stays current


class InMemoryKeyValueStateProvider(DriverOwnedStateProvider):
    """Default provider. Every namespace lives in this process's store.

    On the driver the store is the truth for the run; a task gets the image of its namespace
    shipped in and its changes shipped back (see ``DriverOwnedStateProvider``).
    """

    _store: dict[str, _Image] = {}
    _lock = threading.Lock()
    # Task side: prefixes whose namespaces record their changes, new ones included.
    _tasks: set[str] = set()

    def _image(self, namespace: str) -> _Image:
        with self._lock:
            image = self._store.get(namespace)
            if image is None:
                image = self._store[namespace] = _Image()
                image.tracking = any(under(namespace, root) for root in self._tasks)
            return image

    def new_state(
        self, namespace: str, conf: Mapping[str, Any], context: Any | None = None
    ) -> InMemoryKeyValueState:
        """Return a state over the stored image of ``namespace``.

        ``keyClass`` / ``valueClass`` / ``*SerializerClass`` in the provider config apply here as
        they do for Redis.
        """
        keys, values = resolve_serializers(parse_provider_config(conf), conf)
        return InMemoryKeyValueState(namespace, self._image(namespace), keys, values)

    def check_config(self, conf: Mapping[str, Any]) -> None:
        """Validate the provider config and its serializer classes (``new_state`` checks)."""
        resolve_serializers(parse_provider_config(conf), conf)

    def namespaces(self, conf: Mapping[str, Any], prefix: str = "") -> list[str]:
        """The namespaces of this process's store starting with ``prefix`` that hold state.

        Only this process's: on the driver that is every namespace of the run; in a task, the
        images shipped to it.
        """
        with self._lock:
            return sorted(
                name
                for name, image in self._store.items()
                if name.startswith(prefix) and image.has_record()
            )

    def committed_key_counts(
        self, conf: Mapping[str, Any], namespaces: Sequence[str]
    ) -> dict[str, int]:
        """The size of each namespace's committed map in this process's store (0: none).

        On the driver, the run's truth: the tasks' commits have been applied to it.
        """
        with self._lock:
            found = {ns: self._store.get(ns) for ns in namespaces}
        return {ns: 0 if image is None else len(image.committed) for ns, image in found.items()}

    def export_image(self, namespace: str) -> bytes:
        """Serialize the image of ``namespace``."""
        return self._image(namespace).dump()

    def import_image(self, namespace: str, image: bytes) -> None:
        """Replace this process's image of ``namespace`` by a shipped one, recording changes."""
        loaded = _Image.load(image)
        loaded.tracking = True
        with self._lock:
            self._store[namespace] = loaded

    def take_changes(self, namespace: str) -> bytes | None:
        """Return and clear the change log of ``namespace`` (``None`` if nothing changed).

        Only an image installed by ``import_image`` keeps a log; a driver-side image has none.
        """
        image = self._image(namespace)
        if not image.changes:
            return None
        ops, image.changes = image.changes, []
        return msgpack.packb(ops, use_bin_type=True)

    def apply_changes(self, namespace: str, changes: bytes) -> None:
        """Replay a task's change log onto this process's image.

        On the driver, a finished task's log; in a task, before its states are made, a log the
        driver applied since the image this process kept (a replay is never recorded as the
        task's own change).
        """
        image = self._image(namespace)
        image.replay(msgpack.unpackb(changes, raw=False))
        image.changes.clear()

    def commit_changes(self, namespace: str, txid: int) -> bytes | None:
        """The change log of ``commit(txid)`` on the driver's image of ``namespace``."""
        op = self._image(namespace).commit_op(namespace, txid)
        return None if op is None else msgpack.packb([op], use_bin_type=True)

    def image_version(self, namespace: str) -> int:
        """The mark of this process's image of ``namespace`` (0: none); see the base class."""
        with self._lock:
            image = self._store.get(namespace)
            return 0 if image is None else image.mark

    def begin_task(
        self, root: str, images: Mapping[str, bytes], keep: Collection[str] = ()
    ) -> None:
        """Task side: forget what an earlier task left under ``root``, install ``images``.

        Images named in ``keep`` stay (unless ``images`` has them too). Until ``end_task``,
        every namespace under ``root`` records its changes, including one the task creates (a
        committer's first map).
        """
        with self._lock:
            for name in [n for n in self._store if under(n, root)]:
                if name in keep and name not in images:
                    kept = self._store[name]
                    kept.tracking, kept.changes = True, []
                else:
                    del self._store[name]
            self._tasks.add(root)
        for namespace, image in images.items():
            self.import_image(namespace, image)

    def end_task(self, root: str, shipped: Iterable[str] = ()) -> dict[str, bytes]:
        """Task side: the change logs of every namespace under ``root`` (and stop tracking)."""
        with self._lock:
            self._tasks.discard(root)
            names = [n for n in self._store if under(n, root)]
        taken = {ns: self.take_changes(ns) for ns in names}
        return {ns: changes for ns, changes in taken.items() if changes is not None}

    @classmethod
    def drop(cls, prefix: str = "") -> None:
        """Forget every namespace starting with ``prefix`` (all of them by default)."""
        with cls._lock:
            for name in [n for n in cls._store if n.startswith(prefix)]:
                del cls._store[name]
