"""``TransactionAttempt``: one emission of a transaction's batch."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["TransactionAttempt"]


@dataclass(frozen=True, slots=True)
class TransactionAttempt:
    """A transaction id and the attempt that emitted this copy of its batch.

    The txid (``transaction_id``) stays the same when a batch is replayed; each emission gets a
    new ``attempt_id``, so tuples of two emissions of one txid never mix. Every tuple of a
    transactional topology carries its attempt as its first value.

    Equality compares both ids; the hash uses the txid only, as Storm's does (attempts of one
    txid land in the same bucket of a dict keyed by attempt).

    Example:
        >>> a = TransactionAttempt(3, 7)
        >>> str(a), a == TransactionAttempt(3, 7), a == TransactionAttempt(3, 8)
        ('3:7', True, False)
        >>> hash(a) == hash(TransactionAttempt(3, 8))
        True
    """

    transaction_id: int
    attempt_id: int

    def __hash__(self) -> int:
        return hash(self.transaction_id)

    def __str__(self) -> str:
        return f"{self.transaction_id}:{self.attempt_id}"
