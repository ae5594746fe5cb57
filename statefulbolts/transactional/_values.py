"""``TransactionalValue`` and ``OpaqueValue``: a stored value and the txid that last wrote it.

A committer makes its writes exactly-once by storing, next to each value, the txid of the batch
that wrote it (docs/protocol/transactional.md). When a txid commits again (a replay), the stored
txid says what to do:

- A transactional spout replays the *identical* batch. A value that txid t already wrote holds
  t's contribution, so a replay of t skips it: ``TransactionalValue(txid, value)``.
- An opaque spout may replay a *different* batch. The value keeps, next to what t made of it
  (``curr``), what it was before t (``prev``), so a replay of t starts again from ``prev``:
  ``OpaqueValue(txid, curr, prev)``.

The rules, for batch t applying an update ``f`` to what is stored (``apply``):

================  ==========================  ===============================
stored txid       ``TransactionalValue``      ``OpaqueValue``
================  ==========================  ===============================
nothing stored    ``(t, f(None))``            ``(t, f(None), None)``
below t           ``(t, f(value))``           ``(t, f(curr), curr)``
equal to t        unchanged (skipped)         ``(t, f(prev), prev)``
above t           ``(t, f(value))`` (§6)      ``StateTransactionError``
================  ==========================  ===============================

(``TransactionalMap`` refuses a stored txid above t too: see ``statefulbolts.transactional._maps``.)

A txid is an ``int`` or a ``TransactionAttempt``, whose ``transaction_id`` is used. Comparing a
whole attempt with a stored txid never matches, so every replay would count twice (the early
storm-starter bug of §7); ``txid_of`` is the one place that turns either into the int.

Both types are frozen and have a plain, msgpack-able stored form, ``[txid, value]`` and
``[txid, curr, prev]``; ``from_plain`` reads it back and names what it found when it is not one.
"""

from __future__ import annotations

import reprlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from providers.errors import StateSerializationError, StateTransactionError
from statefulbolts.transactional._attempt import TransactionAttempt

__all__ = ["OpaqueValue", "TransactionalValue", "Txid", "Updater", "txid_of"]

# What callers may pass where a txid is expected.
Txid = int | TransactionAttempt
# An update: the old value (None when nothing is stored) -> the new value.
Updater = Callable[[Any], Any]

# Stored values can be large (a whole aggregate): error messages show a bounded repr.
_repr = reprlib.Repr()
_repr.maxstring = _repr.maxother = 80
_short = _repr.repr


def _kind(obj: Any) -> str:
    return type(obj).__qualname__


def txid_of(txid: Txid) -> int:
    """The transaction id of ``txid``: the int itself, or an attempt's ``transaction_id``.

    Raises:
        TypeError: ``txid`` is neither an ``int`` (``bool`` excluded) nor a
            ``TransactionAttempt``.

    Example:
        >>> txid_of(4), txid_of(TransactionAttempt(4, 9))
        (4, 4)
    """
    if isinstance(txid, TransactionAttempt):
        return txid.transaction_id
    if isinstance(txid, bool) or not isinstance(txid, int):
        msg = f"a txid must be an int or a TransactionAttempt; got {_short(txid)} ({_kind(txid)})"
        raise TypeError(msg)
    return txid


def _stored_txid(form: str, plain: Any, txid: Any) -> int:
    """Validate the txid read back from a stored form."""
    if isinstance(txid, bool) or not isinstance(txid, int):
        msg = (
            f"a stored {form} must start with an int txid; found txid {_short(txid)} "
            f"({_kind(txid)}) in {_short(plain)}"
        )
        raise StateSerializationError(msg)
    return txid


def _stored_items(form: str, plain: Any, size: int, other: str) -> list[Any]:
    """Check that ``plain`` is a list or tuple of ``size`` items; ``other``: the other form."""
    if not isinstance(plain, list | tuple):
        msg = f"a stored {form} must be a list; found {_short(plain)} ({_kind(plain)})"
        raise StateSerializationError(msg)
    if len(plain) != size:
        hint = f" (is it {other}?)" if len(plain) in (2, 3) else ""
        msg = f"a stored {form} has {size} items; found {len(plain)}: {_short(plain)}{hint}"
        raise StateSerializationError(msg)
    return list(plain)


_TRANSACTIONAL_FORM = "transactional value [txid, value]"
_OPAQUE_FORM = "opaque value [txid, curr, prev]"


@dataclass(frozen=True, slots=True)
class TransactionalValue:
    """A value and the txid that last wrote it; a replay of that txid is skipped.

    Right for transactional spouts, whose replays are identical batches.

    Example:
        >>> def add(n):
        ...     return lambda old: (old or 0) + n
        >>> v = TransactionalValue.apply(TransactionalValue(3, 10), 4, add(5))
        >>> v
        TransactionalValue(txid=4, value=15)
        >>> TransactionalValue.apply(v, 4, add(5)) is v  # a replay of 4: skipped
        True
        >>> TransactionalValue.apply(v, 5, add(2))
        TransactionalValue(txid=5, value=17)
        >>> TransactionalValue.apply(None, 1, add(2)).to_plain()
        [1, 2]
        >>> TransactionalValue.from_plain([4, 15])
        TransactionalValue(txid=4, value=15)
    """

    txid: int
    value: Any

    def __post_init__(self) -> None:
        txid_of(self.txid)

    @classmethod
    def apply(
        cls, stored: TransactionalValue | None, txid: Txid, updater: Updater
    ) -> TransactionalValue:
        """The value after batch ``txid`` applies ``updater`` to ``stored`` (None: nothing).

        Returns ``stored`` itself when it was written by ``txid`` (a replay: skipped), so
        ``result is stored`` tells that nothing needs writing.
        """
        t = txid_of(txid)
        if stored is None:
            return cls(t, updater(None))
        if stored.txid == t:
            return stored
        return cls(t, updater(stored.value))

    def to_plain(self) -> list[Any]:
        """The stored form, ``[txid, value]``."""
        return [self.txid, self.value]

    @classmethod
    def from_plain(cls, plain: Any) -> TransactionalValue:
        """Read the stored form back.

        Raises:
            StateSerializationError: ``plain`` is not ``[txid, value]`` with an int txid; the
                message shows what was found.
        """
        txid, value = _stored_items(_TRANSACTIONAL_FORM, plain, 2, "an " + _OPAQUE_FORM)
        return cls(_stored_txid(_TRANSACTIONAL_FORM, plain, txid), value)


@dataclass(frozen=True, slots=True)
class OpaqueValue:
    """A value (``curr``), the value before its txid (``prev``), and that txid.

    Right for opaque spouts, whose replay of a txid may be a different batch: the replay starts
    again from ``prev``. Reads outside a commit use ``curr``.

    Example:
        >>> def add(n):
        ...     return lambda old: (old or 0) + n
        >>> v = OpaqueValue.apply(OpaqueValue(3, 10, 7), 4, add(5))
        >>> v
        OpaqueValue(txid=4, curr=15, prev=10)
        >>> v = OpaqueValue.apply(v, 4, add(3))  # batch 4 failed; its different replay adds 3
        >>> v
        OpaqueValue(txid=4, curr=13, prev=10)
        >>> OpaqueValue.apply(v, 5, add(2)).to_plain()
        [5, 15, 13]
        >>> OpaqueValue.apply(v, 3, add(1))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        providers.errors.StateTransactionError: an opaque value written by txid 4 cannot ...
    """

    txid: int
    curr: Any
    prev: Any = None

    def __post_init__(self) -> None:
        txid_of(self.txid)

    @classmethod
    def apply(cls, stored: OpaqueValue | None, txid: Txid, updater: Updater) -> OpaqueValue:
        """The value after batch ``txid`` applies ``updater`` to ``stored`` (None: nothing).

        Raises:
            StateTransactionError: ``stored`` was written by a txid above ``txid``: the state is
                ahead of the stream (another topology with the same transactional id, or a
                store restored from a later copy).
        """
        t = txid_of(txid)
        if stored is None:
            return cls(t, updater(None), None)
        if stored.txid < t:
            return cls(t, updater(stored.curr), stored.curr)
        if stored.txid == t:
            return cls(t, updater(stored.prev), stored.prev)
        msg = (
            f"an opaque value written by txid {stored.txid} cannot take txid {t}: "
            "the state is ahead of the stream"
        )
        raise StateTransactionError(msg)

    def to_plain(self) -> list[Any]:
        """The stored form, ``[txid, curr, prev]``."""
        return [self.txid, self.curr, self.prev]

    @classmethod
    def from_plain(cls, plain: Any) -> OpaqueValue:
        """Read the stored form back.

        Raises:
            StateSerializationError: ``plain`` is not ``[txid, curr, prev]`` with an int txid;
                the message shows what was found.
        """
        txid, curr, prev = _stored_items(_OPAQUE_FORM, plain, 3, "a " + _TRANSACTIONAL_FORM)
        return cls(_stored_txid(_OPAQUE_FORM, plain, txid), curr, prev)
