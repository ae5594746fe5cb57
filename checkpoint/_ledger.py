"""The driver's ledger of live spout tuples: roots, their timeouts, roots awaiting a commit.

Every tracked spout tuple is the root of a tree and has a root id. The ledger keeps, per live
root, which spout task emitted it and its message id, until the tuple is settled: acked at its
spout once the transaction that carried it committed (Storm's deferred ack), failed at once when
its tree failed or its transaction rolled back, or failed when it stays incomplete for
``topology.message.timeout.secs`` (a ``RotatingMap`` of two buckets, rotated every timeout: an
incomplete root fails after one to two timeouts, as Storm's spout pending map does).

Root ids count up from 1. Storm draws them at random because many executors make them; here one
driver thread does, so a count is unique for the run, and small ints are cheaper to make, ship
and look up than 63-bit ones. A root id never outlives its driver: a restarted one counts from 1
again.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from statefulbolts.acker import RotatingMap
from statefulbolts.runtime import JobResult

__all__ = ["Root", "RootLedger", "SpoutCalls"]

log = logging.getLogger(__name__)

# A live spout tuple: (index of its spout task, message id). A plain tuple, so the garbage
# collector stops tracking it (an int and a plain message id inside): the driver may hold a
# million of them, and full collections walked them all.
Root = tuple[int, Any]


class SpoutCalls(Protocol):
    """Where the ledger's decisions reach the spouts (``SpoutTasks`` is one)."""

    def ack_messages(self, index: int, message_ids: list[Any]) -> None:
        """Call ``ack`` on spout task ``index`` for each message id."""

    def fail_message(self, index: int, message_id: Any) -> None:
        """Call ``fail`` on spout task ``index``."""

    def describe(self, index: int) -> str:
        """The spout task, for a log line."""


def group_by_task(live: Iterable[Root | None]) -> dict[int, list[Any]]:
    """The message ids of ``live`` roots per spout task index (``None`` entries skipped)."""
    per_task: dict[int, list[Any]] = {}
    for r in live:
        if r is not None:
            ids = per_task.get(r[0])
            if ids is None:
                ids = per_task[r[0]] = []
            ids.append(r[1])
    return per_task


class RootLedger:
    """Live roots, their timeouts, and the roots each transaction waits to commit."""

    def __init__(self, *, timeout_secs: float, timeouts: bool = True) -> None:
        self.live: dict[int, Root] = {}
        self._next = itertools.count(1)
        self.new_root = self._next.__next__
        self._spouts: SpoutCalls | None = None
        self._timeouts: RotatingMap[int, Root] = RotatingMap(2, self._expire)
        self._awaiting: dict[int, list[int]] = {}
        # The grouping ``awaiting_messages`` made of a transaction's roots (the manifest's),
        # kept for its commit's acks: one pass over the roots where there were two.
        self._grouped: dict[int, dict[int, list[Any]]] = {}
        self._period_ms = timeout_secs * 1000.0
        self._timeouts_enabled = timeouts
        self._next_rotate = 0.0

    def reserve(self, n: int) -> int:
        """Hand out ``n`` consecutive root ids at once; return the first.

        For tuples made outside the driver (a partitioned spout's task numbers its tuples from
        the first id): none of them is live here, and no later root reuses them.
        """
        first = self.new_root()
        self._next = itertools.count(first + max(n, 1))
        self.new_root = self._next.__next__
        return first

    def attach(self, spouts: SpoutCalls) -> None:
        """Set where acks and fails go (the spout tasks, made after the ledger)."""
        self._spouts = spouts

    @property
    def awaiting(self) -> int:
        """How many roots wait for their transaction to commit."""
        return sum(len(v) for v in self._awaiting.values())

    # ---------------------------------------------------------------- settling a job
    def settle(self, roots: list[int], result: JobResult, ok: bool) -> tuple[list[int], int]:
        """Settle the roots a job carried: ``(complete roots, how many failed)``.

        A failed root, or any root of a job whose checkpoint failed (``ok`` false), fails at
        once; a root the tasks left open waits for its timeout; the rest are complete.
        """
        acks, fails = result.acks, result.fails
        if ok and not fails and not acks:
            return roots, 0  # the usual outcome: nothing left open, nothing failed
        complete: list[int] = []
        failed = 0
        live = self.live
        for root in roots:
            r = live.get(root)
            if r is None:
                continue
            if root in fails or not ok:
                self.fail(root)
                failed += 1
            elif not acks.get(root, 0):
                complete.append(root)
            else:
                self._timeouts.put(root, r)  # incomplete: it fails when the timeout runs out
        return complete, failed

    def await_commit(self, txid: int, roots: list[int]) -> None:
        """Hold the spout acks of ``roots`` until transaction ``txid`` commits."""
        if roots:
            self._awaiting.setdefault(txid, []).extend(roots)
            self._grouped.pop(txid, None)  # made before these roots joined

    def awaiting_messages(self, txid: int) -> dict[int, list[Any]]:
        """The message ids transaction ``txid`` carried, per spout task index.

        The grouping is kept for the commit of ``txid``, which acks by it (do not change it).
        """
        grouped = group_by_task(map(self.live.get, self._awaiting.get(txid, [])))
        self._grouped[txid] = grouped
        return grouped

    def committed(self, txid: int) -> None:
        """Transaction ``txid`` committed: ack its roots at their spouts.

        By the grouping ``awaiting_messages`` kept when every root is still live (root ids are
        never reused, so they were all live then and it holds them all); else grouped anew.
        """
        roots = self._awaiting.pop(txid, [])
        grouped = self._grouped.pop(txid, None)
        if grouped is None:  # no manifest was saved: group them now, as ``ack`` does
            self.ack(roots)
            return
        live = self.live
        before = len(live)
        popped = list(map(live.pop, roots, itertools.repeat(None)))
        if before - len(live) != len(roots):
            grouped = group_by_task(popped)
        self._ack_grouped(grouped)

    def discard_awaiting(self) -> None:
        """Every transaction awaiting its commit was rolled back: fail their roots."""
        self._grouped.clear()
        for txid in list(self._awaiting):
            for root in self._awaiting.pop(txid):
                self.fail(root)

    # ---------------------------------------------------------------- acks and fails
    def ack(self, roots: Sequence[int]) -> None:
        """Ack ``roots`` at their spouts (message ids per spout task, each task in one loop)."""
        self._ack_grouped(group_by_task(map(self.live.pop, roots, itertools.repeat(None))))

    def _ack_grouped(self, per_task: dict[int, list[Any]]) -> None:
        """Ack each spout task's message ids, one call per task."""
        assert self._spouts is not None  # noqa: S101 - attach() ran
        for index, ids in per_task.items():
            self._spouts.ack_messages(index, ids)

    def fail(self, root: int) -> None:
        """Fail one root at its spout, if it is still live."""
        r = self.live.pop(root, None)
        if r is not None:
            assert self._spouts is not None  # noqa: S101 - attach() ran
            self._timeouts.remove(root)
            self._spouts.fail_message(r[0], r[1])

    def fail_all(self, roots: Iterable[int]) -> None:
        """Fail each of ``roots`` (a job that failed as a whole)."""
        for root in roots:
            self.fail(root)

    # ---------------------------------------------------------------- timeouts
    def tick(self, now_ms: float) -> None:
        """Rotate the timeout buckets for the time passed; expired roots fail."""
        if not self._timeouts_enabled:
            return
        if self._next_rotate == 0.0:
            self._next_rotate = now_ms + self._period_ms
        while now_ms >= self._next_rotate:
            self._timeouts.rotate()
            self._next_rotate += self._period_ms

    def _expire(self, root: int, r: Root) -> None:
        if self.live.get(root) is r:
            assert self._spouts is not None  # noqa: S101 - attach() ran
            spout = self._spouts.describe(r[0])
            log.info("tuple %r of spout %s timed out; failing it", r[1], spout)
            self.fail(root)
