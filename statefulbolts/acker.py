"""Storm's XOR acking, accounted where a tuple is delivered; and ``RotatingMap``.

A spout tuple is the root of a tree; the tree is complete when every tuple in it was acked
exactly once and none was failed. Storm checks that with XOR: every tuple sent to a task has a
random 64-bit id, XORed into its root once when it is made (through its anchor's ack value) and
once when it is acked, so a root's XOR is zero exactly when every tuple was acked once.

Here the XOR of a tuple's creation is made by the task the tuple is delivered to, not by the
task that emitted it. Inside a transaction's Spark job every emitted tuple reaches its task (a
lost task is recomputed; a failed job fails the whole transaction), so the receiver accounts
the creation as surely as the sender would, and both XORs of a tuple happen in one task. A
tuple acked exactly once then cancels inside its task, and a task reports only the roots of
tuples that were not (``DeliveryLedger``). Nothing about a tuple is computed while it is emitted,
and a transaction in which every tuple was acked moves no ack ledger at all.

Ids are derived from (txid, component, task, delivery order), not drawn at random, so a Spark
re-execution of a task reproduces them.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
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
    """A per-(transaction, task) base from which a task numbers the tuples delivered to it."""
    return mix64(
        mix64(mix64(txid + 0x9E3779B97F4A7C15) ^ component_index) ^ (task_index << 20) ^ salt
    )


def tuple_id(number: int) -> int:
    """The XOR id of the tuple a task numbered ``number``: 64 spread bits, never 0."""
    return mix64(number) or 1


_NUMBER = operator.attrgetter("_edge")

# What a task was given: (number of the first tuple, each tuple's first root (0: untracked),
# {position: further roots} or None).
_Delivery = tuple[int, Sequence[int], Mapping[int, Sequence[int]] | None]


class DeliveryLedger:
    """One task's XOR account of the tuples delivered to it, settled when the task ends.

    The task numbers what it is given, 0, 1, 2, ... in delivery order (the number is kept in
    the tuple as its edge id; small ints, cheap to make and compare), and a tuple's XOR id is
    ``tuple_id(base + number)``, ``base`` coming from ``id_base(txid, component, task)``.
    Delivery XORs the id into each of the tuple's roots and an ack XORs it again, but neither
    happens while the task runs: ``ack`` only keeps the tuple. ``settle`` first checks, in C,
    that the tuples acked are the tuples delivered, each once; then every root's XOR is zero
    and nothing is reported, which is how a task usually ends. Otherwise it does the XORs and
    reports, per root, what is left. ``compact`` forgets, along the way, a prefix of tuples
    acked in order, each once: their XORs have cancelled already.

    A bolt that takes its input as column batches acks a batch as a whole: ``ack_run`` keeps
    the batch's first number and its roots column, no tuple. A run that continues the settled
    prefix, with no other run waiting, is settled at once: one step for the whole batch. (A
    tuple acked on its own is not in the way: if it is one of the run's, acked twice, its
    second XOR still shows when the task settles.)

    Example:
        >>> ledger = DeliveryLedger(base=100)
        >>> ledger.deliver([7, 7, 9])
        0
        >>> class T:  # a delivered tuple: its number, first root and further roots
        ...     def __init__(self, n, root): self._edge, self._root, self._more = n, root, None
        >>> for t in (T(0, 7), T(2, 9)): ledger.ack(t)
        >>> left, exact = ledger.settle()
        >>> (list(left), left[7] == tuple_id(101), exact)
        ([7], True, False)
    """

    def __init__(self, base: int) -> None:
        self._base = base
        self._next = 0
        # Tuples 0 .. _settled - 1 were acked exactly once, in order, and are forgotten.
        self._settled = 0
        self._compacting = True
        self._deliveries: list[_Delivery] = []
        self.acked: list[Any] = []
        # Batches acked whole (``ack_run``) and not settled yet: (first number, roots column).
        self._runs: list[tuple[int, Sequence[int]]] = []
        # Every executed tuple is acked: ``ack`` is the list's own append, with no frame.
        self.ack: Callable[[Any], None] = self.acked.append
        self.ack_many: Callable[[Sequence[Any]], None] = self.acked.extend

    @property
    def delivered(self) -> int:
        """How many tuples were numbered."""
        return self._next

    @property
    def settled(self) -> int:
        """How many tuples ``compact`` found acked once, in order, and forgot."""
        return self._settled

    def deliver(self, roots: Sequence[int], more: Mapping[int, Sequence[int]] | None = None) -> int:
        """Number ``len(roots)`` tuples, the next in delivery order; return the first number."""
        first = self._next
        self._next = first + len(roots)
        self._deliveries.append((first, roots, more))
        return first

    @property
    def acked_in_runs(self) -> int:
        """How many tuples ``ack_run`` acked that are not settled yet."""
        return sum(len(roots) for _first, roots in self._runs)

    def ack_run(self, first: int, roots: Sequence[int]) -> None:
        """Ack the ``len(roots)`` tuples numbered ``first``, ``first + 1``, ..., at once.

        ``roots`` are their first roots, as delivered (a tuple of several trees is acked one by
        one, through ``ack``). The usual case, a batch right after the settled prefix with no
        other run waiting, settles here: the tuples' XORs cancel, and nothing is kept. Tuples
        acked one by one may wait meanwhile (a stateful task's checkpoint tuple, acked before
        the batches its commit releases): ``settle`` reckons them alone.
        """
        if first == self._settled and not self._runs:
            self._settled = first + len(roots)
            return
        self._runs.append((first, roots))

    def compact(self) -> None:
        """Forget the acks so far if they are the next tuples in order, each acked once.

        A task calls this between chunks of its input: a bolt that acks as it goes (every
        ``BasicBolt``) then holds one chunk of tuples, not all of them. After one failed try it
        stops trying, so a bolt that acks out of order pays for one check, not one per chunk.
        """
        acked = self.acked
        if not ((acked or self._runs) and self._compacting):
            return
        start = self._settled
        if start + len(acked) + self.acked_in_runs <= self._next:
            numbers = self._numbers()
            if numbers == list(range(start, start + len(numbers))):
                self._settled = start + len(numbers)
                acked.clear()
                self._runs.clear()
                return
        self._compacting = False

    def settle(self) -> tuple[dict[int, int], bool]:
        """``({root: XOR left}, every tuple acked exactly once)``; roots left at 0 are omitted."""
        numbers, start = self._numbers(), self._settled
        if len(numbers) == self._next - start:
            numbers.sort()  # in order already, or a few runs (acks held until a checkpoint)
            if numbers == list(range(start, self._next)):
                return {}, True
        return self._reckon(), False

    def _numbers(self) -> list[int]:
        try:
            numbers = list(map(_NUMBER, self.acked))
        except AttributeError as exc:
            msg = f"ack() takes a Tuple this task was given, got {exc}"
            raise TypeError(msg) from exc
        for first, roots in self._runs:
            numbers.extend(range(first, first + len(roots)))
        return numbers

    def forget(self) -> None:
        """Drop the acked tuples and what was delivered (after ``settle``)."""
        self.acked.clear()
        self._runs.clear()
        self._deliveries.clear()

    def _reckon(self) -> dict[int, int]:
        ledger: dict[int, int] = {}
        get = ledger.get
        base, settled = self._base, self._settled
        for first, roots, more in self._deliveries:
            for i, root in enumerate(roots):
                if root and first + i >= settled:  # a settled tuple's two XORs cancelled
                    x = tuple_id(base + first + i)
                    ledger[root] = get(root, 0) ^ x
                    if more is not None and i in more:
                        for r in more[i]:
                            ledger[r] = get(r, 0) ^ x
        for t in self.acked:
            root = t._root
            if root:
                x = tuple_id(base + t._edge)
                ledger[root] = get(root, 0) ^ x
                for r, _ in t._more or ():
                    ledger[r] = get(r, 0) ^ x
        for first, roots in self._runs:
            for i, root in enumerate(roots):
                if root:
                    x = tuple_id(base + first + i)
                    ledger[root] = get(root, 0) ^ x
        return {root: x for root, x in ledger.items() if x}


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
