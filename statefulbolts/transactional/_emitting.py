"""The emitters' partition metas: what each emission replays or starts, and what is stored.

Emitter tasks run in Spark and touch no store: the driver tells each attempt's emitters what to
do (an ``EmitOrder``) and keeps what they return. This module is that bookkeeping, per kind of
spout (docs/protocol/transactional.md), over one namespace per partition,
``$transactional/<id>/partition-<p>``, keyed by txid:

**Partitioned** (exact replays). For each partition ``p`` below the txid's partition count
(taken when the txid was first started, so a replay never reads a partition added later):

1. a meta stored for (p, txid): replay exactly that batch (a stored ``None`` emits nothing);
2. otherwise, a meta stored for a later txid: store ``None`` for (p, txid), emit nothing;
3. otherwise emit a new batch from p's latest earlier meta, and store its meta at once, when
   the emit job returns, before the batch is processed anywhere.

**Opaque** (replays may differ). For each partition the emitters see now:

1. a meta stored for (p, txid) is left from a commit that failed half way: delete it;
2. continue from the meta the latest *uncommitted* earlier emission of p returned (kept here, in
   memory), else from p's latest stored meta (the last committed);
3. keep the result in memory; it is stored for (p, txid) only when txid commits.

The opaque partitions that ever stored a meta are counted in ``$transactional/<id>/partitions``
(written before the metas of a commit), so that a restarted driver, which keeps nothing in
memory, continues each of them from its last committed meta rather than from the beginning.

A failed attempt forgets the kept metas of its txid and every later one (they emit again, in
order). After the commit of t, every partition's metas below t are deleted (t's stays: it is
where t+1 starts).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from providers import KeyValueState
from statefulbolts.namespaces import (
    PARTITION_INDEX,
    partition_index_namespace,
    partition_namespace,
    transactional_prefix,
)
from statefulbolts.transactional._task import (
    EmitKind,
    EmitOrder,
    EmitResult,
    PartitionEmit,
    SpoutKind,
)
from statefulbolts.transactional._txstate import RotatingTransactionalState, TransactionalStateError

__all__ = ["PLAIN", "OPAQUE", "PARTITIONED", "PARTITION_INDEX", "EmitterMetas"]

PLAIN, PARTITIONED, OPAQUE = SpoutKind.PLAIN, SpoutKind.PARTITIONED, SpoutKind.OPAQUE
INDEX_KEY = "count"

StateFor = Callable[[str], KeyValueState]


class EmitterMetas:
    """The metas of every partition of one transactional spout (see the module docstring)."""

    def __init__(self, kind: str, transactional_id: str, state_for: StateFor) -> None:
        self.kind = SpoutKind(kind)  # a ValueError naming the kinds, for any other
        self._prefix = transactional_prefix(transactional_id)
        self._state_for = state_for
        self._stores: dict[int, RotatingTransactionalState] = {}
        # Opaque: txid -> partition -> the meta its live emission returned (not stored yet).
        self._kept: dict[int, dict[int, Any]] = {}
        # Opaque: how many partitions have stored metas (a restart opens all of them).
        self._index: KeyValueState | None = None
        self._indexed = 0
        if kind == OPAQUE:
            self._index = state_for(partition_index_namespace(self._prefix))
            self._indexed = _count(self._index.get(INDEX_KEY, 0), self._index)
            for p in range(self._indexed):
                self.store(p)

    def store(self, partition: int) -> RotatingTransactionalState:
        """The stored metas of one partition (its namespace is opened on first use)."""
        found = self._stores.get(partition)
        if found is None:
            state = self._state_for(partition_namespace(self._prefix, partition))
            found = self._stores[partition] = RotatingTransactionalState(
                state, strict=False, prefix="", first_txid=1
            )
        return found

    def known_partitions(self) -> list[int]:
        """Partitions with a store opened or a kept meta, ascending."""
        kept = {p for metas in self._kept.values() for p in metas}
        return sorted(set(self._stores) | kept)

    # ---------------------------------------------------------------- before an emission
    def order(self, txid: int, coordinator_meta: Any, committed: int | None) -> EmitOrder:
        """What every emitter task of an attempt of ``txid`` is to emit."""
        if self.kind == PARTITIONED:
            n = int(coordinator_meta or 0)
            parts = {p: self._partitioned(p, txid) for p in range(n)}
            return EmitOrder(self.kind, coordinator_meta, committed, parts)
        if self.kind == OPAQUE:
            parts = {p: self._opaque_last(p, txid) for p in self._opaque_partitions(txid)}
            return EmitOrder(self.kind, coordinator_meta, committed, parts)
        return EmitOrder(self.kind, coordinator_meta, committed)

    def _partitioned(self, p: int, txid: int) -> PartitionEmit:
        store = self.store(p)
        if txid in store:
            return PartitionEmit(EmitKind.REPLAY, store.get(txid))
        if any(t > txid for t in store.txids()):
            store.override(txid, None)
            return PartitionEmit(EmitKind.SKIP, None)
        return PartitionEmit(EmitKind.NEW, store.latest_before(txid))

    def _opaque_partitions(self, txid: int) -> list[int]:
        # Every partition seen so far; emitters also start any newer ones from None.
        seen = set(self.known_partitions())
        for t, metas in self._kept.items():
            if t < txid:
                seen.update(metas)
        return sorted(seen)

    def _opaque_last(self, p: int, txid: int) -> Any:
        store = self.store(p)
        store.remove(txid)  # left behind by a commit that failed half way
        for t in sorted(self._kept, reverse=True):
            if t < txid and self._kept[t].get(p) is not None:
                return self._kept[t][p]
        return store.latest_before(txid)

    # ---------------------------------------------------------------- after an emission
    def emitted(self, txid: int, results: Iterable[EmitResult]) -> None:
        """An attempt of ``txid`` emitted: store (partitioned) or keep (opaque) its metas."""
        metas: dict[int, Any] = {}
        for result in results:
            metas.update(result.metas)
        if self.kind == PARTITIONED:
            for p, meta in sorted(metas.items()):
                self.store(p).override(txid, meta)
        elif self.kind == OPAQUE:
            self._kept[txid] = metas

    def failed_from(self, txid: int) -> None:
        """``txid`` and every later txid will emit again: forget what their emissions kept."""
        for t in [t for t in self._kept if t >= txid]:
            del self._kept[t]

    def committed(self, txid: int) -> None:
        """``txid`` committed: store its opaque metas; drop every partition's metas below it."""
        if self.kind == PLAIN:
            return
        if self.kind == OPAQUE:
            metas = self._kept.pop(txid, {})
            self._index_partitions(max(metas, default=-1) + 1)
            for p, meta in sorted(metas.items()):
                self.store(p).override(txid, meta)
        for p in self.known_partitions():
            self.store(p).cleanup_before(txid)

    def _index_partitions(self, count: int) -> None:
        index = self._index
        if index is None or count <= self._indexed:
            return
        try:
            index.put(INDEX_KEY, count)
            index.commit()
        except BaseException:
            index.rollback()
            raise
        self._indexed = count

    def describe(self) -> dict[int, dict[int, Any]]:
        """Per partition, the stored metas by txid (for status tools)."""
        return {p: {t: self.store(p).get(t) for t in self.store(p).txids()} for p in self._stores}


def _count(value: Any, index: KeyValueState) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    where = getattr(index, "namespace", PARTITION_INDEX)
    msg = f"{where!r}: key {INDEX_KEY!r} holds {value!r}, expected a partition count (an int >= 0)"
    raise TransactionalStateError(msg)
