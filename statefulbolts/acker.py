"""Storm's XOR acking: deterministic 64-bit ids, the XOR ledger and ``RotatingMap``.

A spout tuple is the root of a tree. Every edge of the tree (one emitted tuple sent to one task)
has a non-zero id that fits a signed 64-bit integer. The root's value starts as the XOR of its
first edges; creating an edge XORs its id into the anchor's ack value, acking a tuple XORs in its
own id and that ack value. Each id then appears exactly twice, so the root's value is zero exactly
when every tuple in the tree was acked.

Ids made in tasks are derived from (txid, component, task, emit sequence) rather than drawn at
random, so a Spark re-execution of a task reproduces the same ids. The driver's (spout roots and
their first edges) are random, as in Storm: it makes each one once.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_MASK = (1 << 64) - 1


def mix64(x: int) -> int:
    """splitmix64's finalizer: a bijection on 64-bit ints that spreads bits."""
    x &= _MASK
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK
    return x ^ (x >> 31)


def id_base(txid: int, component_index: int, task_index: int, salt: int = 0) -> int:
    """A per-(transaction, task) base from which ``IdSequence`` draws ids."""
    return mix64(
        mix64(mix64(txid + 0x9E3779B97F4A7C15) ^ component_index) ^ (task_index << 20) ^ salt
    )


class IdSequence:
    """Deterministic, non-zero 63-bit ids: ``mix64(base + n) >> 1`` for n = 1, 2, ...

    63 bits so that every id fits the signed 64-bit arrays batches carry ids in.
    """

    __slots__ = ("_base", "_n")

    def __init__(self, base: int) -> None:
        self._base = base
        self._n = 0

    def next(self) -> int:
        """The next id (never 0)."""
        self._n += 1
        value = mix64(self._base + self._n) >> 1
        return value or 1


class RotatingMap(Generic[K, V]):
    """A map whose entries expire after ``num_buckets`` rotations without a ``put``.

    ``put`` goes to the newest bucket; ``rotate`` drops the oldest bucket, calls ``expire`` on each
    dropped entry and returns them. Not thread-safe (like Storm's).

    Example:
        >>> expired = []
        >>> m = RotatingMap(2, lambda k, v: expired.append(k))
        >>> m.put("a", 1)
        >>> _ = m.rotate(); "a" in m
        True
        >>> _ = m.rotate(); expired
        ['a']
    """

    def __init__(self, num_buckets: int = 3, expire: Callable[[K, V], Any] | None = None) -> None:
        if num_buckets < 2:
            msg = f"num_buckets must be >= 2, got {num_buckets}"
            raise ValueError(msg)
        self._buckets: list[dict[K, V]] = [{} for _ in range(num_buckets)]
        self._expire = expire

    def put(self, key: K, value: V) -> None:
        """Insert or refresh ``key`` in the newest bucket."""
        head = self._buckets[0]
        for bucket in self._buckets[1:]:
            bucket.pop(key, None)
        head[key] = value

    def get(self, key: K, default: V | None = None) -> V | None:
        """The value of ``key``, newest bucket first."""
        for bucket in self._buckets:
            if key in bucket:
                return bucket[key]
        return default

    def __contains__(self, key: object) -> bool:
        return any(key in b for b in self._buckets)

    def remove(self, key: K) -> V | None:
        """Remove ``key`` and return its value, or ``None``."""
        for bucket in self._buckets:
            if key in bucket:
                return bucket.pop(key)
        return None

    def __len__(self) -> int:
        return sum(len(b) for b in self._buckets)

    def keys(self) -> Iterator[K]:
        """Every key, newest first."""
        for bucket in self._buckets:
            yield from bucket

    def rotate(self) -> dict[K, V]:
        """Drop the oldest bucket, expire its entries and return them."""
        dead = self._buckets.pop()
        self._buckets.insert(0, {})
        if self._expire is not None:
            for key, value in dead.items():
                self._expire(key, value)
        return dead
