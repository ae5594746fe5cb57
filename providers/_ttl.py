"""State time-to-live: what a key's expiry is, and the one rule that says it has passed.

A state with a TTL gives every key it writes an *expiry*, in milliseconds: the transaction's
timestamp plus the TTL. Expiry is judged against the transaction's timestamp too, never against
the clock at the read, so a transaction replayed after a failure reads and expires exactly the
keys its first attempt did. The checkpoint protocol fixes that timestamp when it starts a
transaction and hands it to every task (``KeyValueState.set_transaction_time``).

Rules, the same in every provider:

1. A key written (``put``) by a transaction of timestamp ``T`` under a TTL of ``ttl`` ms
   expires at ``T + ttl``; written without a TTL, it never expires (a write clears an expiry).
2. With ``TtlRefresh.READ_WRITE``, a ``get`` (or ``get_many``) that finds the key alive in the
   store counts as a write of the same value: its expiry moves to ``T + ttl``. Iteration does
   not refresh (walking the whole state would rewrite all of it).
3. A key whose expiry is at or before the timestamp the state judges at is gone: no read
   returns it, iteration skips it.
4. ``commit(t)`` deletes from the store the keys expired at ``t``'s own timestamp (stored with
   ``t``'s prepare), so the state stays bounded; a rollback leaves expiries as committed.

Example:
    >>> ttl = StateTtl(60_000)
    >>> ttl.expiry(1_000)
    61000
    >>> is_expired(61_000, 60_999), is_expired(61_000, 61_000), is_expired(None, 10**12)
    (False, True, False)
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["StateTtl", "TtlRefresh", "is_expired"]


class TtlRefresh(enum.StrEnum):
    """What moves a key's expiry (``topology.state.ttl.refresh``)."""

    WRITE = "write"
    READ_WRITE = "read_write"


@dataclass(frozen=True)
class StateTtl:
    """A time-to-live for the keys a state writes: ``ttl_ms`` after the last write (or read).

    Example:
        >>> StateTtl(1500, TtlRefresh.READ_WRITE).refreshes_on_read
        True
    """

    ttl_ms: int
    refresh: TtlRefresh = TtlRefresh.WRITE

    def __post_init__(self) -> None:
        ttl = self.ttl_ms
        if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl <= 0:
            msg = f"a state TTL is a whole number of milliseconds above 0, got {ttl!r}"
            raise ValueError(msg)
        if not isinstance(self.refresh, TtlRefresh):
            allowed = [r.value for r in TtlRefresh]
            msg = f"a state TTL refreshes on {allowed}, got {self.refresh!r}"
            raise ValueError(msg)

    @property
    def refreshes_on_read(self) -> bool:
        """Whether a read moves the expiry as a write does."""
        return self.refresh is TtlRefresh.READ_WRITE

    def expiry(self, now_ms: int) -> int:
        """The expiry of a key written at ``now_ms``."""
        return now_ms + self.ttl_ms


def is_expired(expiry_ms: int | float | None, now_ms: int | float | None) -> bool:
    """Whether a key of expiry ``expiry_ms`` is gone at ``now_ms`` (``None``: never / unjudged)."""
    return expiry_ms is not None and now_ms is not None and expiry_ms <= now_ms
