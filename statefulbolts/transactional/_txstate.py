"""``RotatingTransactionalState``: a metadata value per txid, kept in a ``KeyValueState``.

A transactional topology must be able to rebuild the batch of any txid that has not yet been
committed. Whoever decides what a batch holds (the coordinator for the whole batch, a
partitioned emitter for one partition) therefore stores a small *meta* per txid the first time
that txid is started, and reads it back on every replay. This module is that store.

Layout in the namespace of the ``KeyValueState`` it is given::

    <prefix><txid>   ->  [meta]        e.g. "meta/7" -> [10]

Each meta is wrapped in a one-element list because ``None`` is a meaningful meta (an opaque
coordinator's, or "nothing for this partition in this txid") while a state cannot hold ``None``
as a value: the wrapper tells "stored ``None``" from "absent". Keys of the namespace that do not
have the form ``<prefix><decimal txid>`` belong to someone else and are left alone, so several
stores (different prefixes) and other keys (the coordinator's ``currtx``) may share a namespace.
Metas go through msgpack, so a tuple meta reads back as a list.

Order rules, for a txid that has no meta yet (``get_or_init``):

============  ===========================================  ======================================
mode          a later txid has a meta                      no later txid has a meta
============  ===========================================  ======================================
strict        ``TransactionalStateError``                  allowed if txid-1 has a meta, or
                                                           nothing is stored and txid is
                                                           ``first_txid``; otherwise the error
non-strict    store ``None``, initializer not called       allowed
============  ===========================================  ======================================

The coordinator uses strict mode: batches are defined in txid order, each from the previous
one's meta, so a gap or an out-of-order definition is a bug worth stopping for. Partitioned
emitters use non-strict mode: a partition that joins later, or a task that first sees a
partition at txid 20, must not define txids the topology has already moved past.

Every write is committed at once with ``commit()`` (no txid), so what ``get_or_init`` returns is
durable before the batch it defines is emitted. A store assumes it is the only writer of its
keys while it lives; it reads the namespace once, when it is made.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from providers import KeyValueState
from statefulbolts.errors import StatefulBoltsError

__all__ = ["MetaInitializer", "RotatingTransactionalState", "TransactionalStateError"]

log = logging.getLogger(__name__)

MetaInitializer = Callable[[int, Any], Any]
"""``(txid, prev_meta) -> meta``: defines the meta of a txid that has none yet."""

_ABSENT: Any = object()


class TransactionalStateError(StatefulBoltsError, RuntimeError):
    """Per-txid metadata asked for out of order, or stored data that is not ours."""


class RotatingTransactionalState:
    """The metas of a run's txids, in strict or non-strict order (Storm's name).

    Args:
        state: the ``KeyValueState`` that holds the metas (its namespace names the owner, e.g.
            ``$transactional/<id>/coordinator``).
        strict: whether a new meta must follow the previous txid's (see the module docstring).
        prefix: put before the decimal txid to make a key; give stores sharing a namespace
            different prefixes.
        first_txid: the one txid strict mode lets start an empty store.

    Raises:
        TransactionalStateError: a stored value under one of this store's keys is not a
            wrapped meta.

    Example:
        >>> from providers.memory import InMemoryKeyValueState
        >>> metas = RotatingTransactionalState(InMemoryKeyValueState("doc/meta"), strict=True)
        >>> metas.get_or_init(1, lambda txid, prev: 10), metas.get_or_init(2, lambda t, p: p + 1)
        (10, 11)
        >>> metas.get_or_init(1, lambda txid, prev: 99)  # stored: the initializer is not called
        10
        >>> metas.cleanup_before(2)
        >>> metas.txids(), 1 in metas, metas.get(1, "absent")
        ([2], False, 'absent')
    """

    def __init__(
        self,
        state: KeyValueState,
        *,
        strict: bool,
        prefix: str = "meta/",
        first_txid: int = 1,
    ) -> None:
        self._state = state
        self._strict = strict
        self._prefix = prefix
        self._first_txid = first_txid
        # The stored metas, read once: this store is the only writer of its keys.
        self._metas: dict[int, Any] = dict(self._load())

    def __repr__(self) -> str:
        mode = "strict" if self._strict else "non-strict"
        return (
            f"RotatingTransactionalState({self.namespace!r}, prefix={self._prefix!r}, {mode}, "
            f"txids={self.txids()})"
        )

    @property
    def namespace(self) -> str:
        """The namespace of the state the metas live in."""
        return str(getattr(self._state, "namespace", "?"))

    @property
    def strict(self) -> bool:
        """Whether new metas must come in txid order."""
        return self._strict

    # -- reading
    def __contains__(self, txid: object) -> bool:
        return txid in self._metas

    def get(self, txid: int, default: Any = None) -> Any:
        """The meta stored for ``txid`` (``None`` may be a stored meta), or ``default``."""
        return self._metas.get(txid, default)

    def txids(self) -> list[int]:
        """The txids that have a stored meta, ascending."""
        return sorted(self._metas)

    def latest_before(self, txid: int, default: Any = None) -> Any:
        """The meta of the highest stored txid below ``txid``, or ``default`` if there is none."""
        below = self._highest_below(txid)
        return default if below is None else self._metas[below]

    # -- writing
    def get_or_init(self, txid: int, initializer: MetaInitializer) -> Any:
        """The meta of ``txid``; if it has none, define it now and store it before returning.

        A new meta is ``initializer(txid, prev)``, where ``prev`` is the meta of the highest
        stored txid below ``txid`` (in strict mode, txid-1's) or ``None``. In non-strict mode,
        when a later txid already has a meta, ``None`` is stored and returned instead, without
        calling the initializer. Whatever the initializer raises propagates, and nothing is
        stored.

        Raises:
            TransactionalStateError: strict mode, and ``txid`` may not get a meta now (the
                message names the txid and the stored txids).
        """
        if txid in self._metas:
            return self._metas[txid]
        later = [t for t in self._metas if t > txid]
        if self._strict:
            self._check_strict_order(txid, later)
        if later:
            meta = None
        else:
            below = self._highest_below(txid)
            meta = initializer(txid, None if below is None else self._metas[below])
        self._write(puts={txid: meta})
        return meta

    def override(self, txid: int, meta: Any) -> None:
        """Store ``meta`` for ``txid`` whatever was there, with no order check."""
        self._write(puts={txid: meta})

    def remove(self, txid: int) -> None:
        """Delete the meta of ``txid``, if it has one."""
        if txid in self._metas:
            self._write(deletes=[txid])

    def cleanup_before(self, txid: int, *, also_put: Mapping[str, Any] | None = None) -> None:
        """Delete every meta below ``txid`` (``txid``'s own is kept), in one atomic write.

        Args:
            txid: the lowest txid whose meta survives.
            also_put: other keys of the namespace to set in the same atomic write (the
                coordinator's ``currtx``); they must not look like this store's keys.

        Raises:
            TransactionalStateError: a key of ``also_put`` has the form of a meta key.
        """
        extra = dict(also_put or {})
        for key in extra:
            if self._txid_of(key) is not None:
                msg = (
                    f"meta store {self.namespace!r}: also_put key {key!r} has the form of a meta "
                    f"key (prefix {self._prefix!r} + txid); give other data another key"
                )
                raise TransactionalStateError(msg)
        self._write(deletes=[t for t in self._metas if t < txid], other_puts=extra)

    def key(self, txid: int) -> str:
        """The state key ``txid``'s meta is stored under."""
        return f"{self._prefix}{txid:d}"

    # -- inside
    def _key(self, txid: int) -> str:
        return self.key(txid)

    def _txid_of(self, key: Any) -> int | None:
        """The txid a key stands for, or ``None`` when the key is not one of this store's."""
        if not isinstance(key, str) or not key.startswith(self._prefix):
            return None
        digits = key[len(self._prefix) :]
        # Only the canonical form this store writes: "meta/07" or "meta/+7" are someone else's.
        if not digits.isdecimal() or not digits.isascii() or str(int(digits)) != digits:
            return None
        return int(digits)

    def _load(self) -> Iterator[tuple[int, Any]]:
        for key, value in self._state:
            txid = self._txid_of(key)
            if txid is None:
                continue
            if not isinstance(value, list) or len(value) != 1:
                msg = (
                    f"meta store {self.namespace!r}: key {key!r} holds {value!r}, expected a "
                    f"one-element list [meta]; the namespace holds data that is not this store's"
                )
                raise TransactionalStateError(msg)
            yield txid, value[0]

    def _highest_below(self, txid: int) -> int | None:
        # A linear scan: only active and not yet cleaned-up txids are stored, a handful.
        return max((t for t in self._metas if t < txid), default=None)

    def _check_strict_order(self, txid: int, later: list[int]) -> None:
        below = self._highest_below(txid)
        if later:
            problem = f"later txids {sorted(later)} already have one"
        elif below is None and txid != self._first_txid:
            problem = f"nothing is stored and only txid {self._first_txid} may start the store"
        elif below is not None and below != txid - 1:
            problem = f"txid {txid - 1} has none (the highest stored below it is {below})"
        else:
            return
        msg = (
            f"meta store {self.namespace!r} (strict order): txid {txid} cannot get a new meta: "
            f"{problem}; stored txids: {self.txids()}"
        )
        raise TransactionalStateError(msg)

    def _write(
        self,
        *,
        puts: Mapping[int, Any] | None = None,
        deletes: list[int] | None = None,
        other_puts: Mapping[str, Any] | None = None,
    ) -> None:
        """Apply the writes with one ``commit()``; update the cache only once it succeeded."""
        puts = puts or {}
        deletes = deletes or []
        state = self._state
        try:
            for txid, meta in puts.items():
                state.put(self._key(txid), [meta])
            for txid in deletes:
                state.delete(self._key(txid))
            for key, value in (other_puts or {}).items():
                state.put(key, value)
            state.commit()
        except BaseException:
            # Writes left pending in the state object would ride along with the next commit,
            # behind the cache's back; drop them so the cache and the store stay equal.
            state.rollback()
            raise
        for txid in deletes:
            del self._metas[txid]
        self._metas.update(puts)
        log.debug(
            "meta store %s: stored txids %s, deleted txids %s",
            self.namespace,
            sorted(puts),
            sorted(deletes),
        )
