"""Dead letters of a transactional topology, on the driver: leave a poison tuple out of its txid.

``TransactionalDeadLetters`` is the transactional runner's one object for poison tuples. The
tuple taken out is the emitted batch tuple the failing tuple came from (its lineage,
``statefulbolts.transactional._lineage``); its txid's batch is then emitted without it,
and so is every later replay of that txid, after a driver restart too (the removal is stored
with the txid's ``BatchChange`` before the replay). The runner calls it:

- ``open`` with the coordinator's ``currtx`` and the txids it holds metas for: it finishes
  what committed txids took in (their replayed records are deleted), and queues the records
  asked for replay;
- ``adjust`` before every emission of a txid: the order gets the txid's removals and, for a
  txid emitted for the first time, the queued replays (stored first: every replay of that
  txid takes the same ones in);
- ``isolate`` when a job failed; ``emitted`` when an emission reported what it left out (the
  values go into the record: the failing tuple seen downstream is not the emitted one);
  ``committed`` when a txid committed; ``poll`` on every loop step.

Only the processing phase's failures are isolated, and only for a partitioned or plain
transactional spout: a commit-phase failure may come after committers wrote the txid (leaving
a tuple out then would not take it out of what they wrote), and an opaque spout may emit a
different batch when it replays a txid, so a place names no particular tuple.
"""

from __future__ import annotations

import collections
import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from providers import KeyValueState
from statefulbolts.clock import Clock
from statefulbolts.deadletter import (
    BackendCalls,
    BatchOrigin,
    DeadLetter,
    DeadLetters,
    DeadLetterStore,
    LetterState,
    ReplayPoller,
    Slot,
    Verdict,
    batch_record_id,
    why_not_poison,
)
from statefulbolts.listeners import NO_FAULTS, FaultListener
from statefulbolts.namespaces import transactional_prefix
from statefulbolts.runtime import Stats, TaskError, TopologyConfig
from statefulbolts.transactional._emitting import OPAQUE, PLAIN
from statefulbolts.transactional._lineage import (
    BATCHES_NAMESPACE,
    REPLAYED,
    BatchChange,
    BatchChanges,
    lineage,
    place_of,
)
from statefulbolts.transactional._task import EmitOrder, EmitResult, SpoutKind

__all__ = ["TransactionalDeadLetters"]

log = logging.getLogger(__name__)

_NO_LINEAGE = (
    "the failing tuple has no single source in the batch: it was emitted from finish_batch, "
    "or by a bolt that aggregates several inputs"
)
# Dead letters one new txid takes in, at most: a replay of many rides on several batches.
_REPLAYS_PER_TXID = 1000


class TransactionalDeadLetters(DeadLetters):
    """Poison batch tuples of one transactional topology (see the module docstring)."""

    def __init__(
        self,
        name: str,
        transactional_id: str,
        tc: TopologyConfig,
        conf: Mapping[str, Any],
        state_for: Callable[[str], KeyValueState],
        stats: Stats,
        failures: BackendCalls,
        clock: Clock,
        task_id: Callable[[str, int], int],
        faults: FaultListener = NO_FAULTS,
        now: Callable[[], float] = time.time,
    ) -> None:
        store = DeadLetterStore(conf, transactional_id=transactional_id, state_for=state_for)
        super().__init__(
            name, tc, store, stats.add, failures, faults, now=now, task_id=task_id
        )
        self._tid, self._state_for, self._clock, self._now = transactional_id, state_for, clock, now
        self._kind: SpoutKind = PLAIN
        self._changes: BatchChanges | None = None
        self._batches: dict[int, BatchChange] = {}
        self._decided = 0  # txids up to this one may have been emitted: their batch is fixed
        self._queue: collections.OrderedDict[str, DeadLetter] = collections.OrderedDict()
        self._joined: set[str] = set()  # records a txid not yet committed takes in
        self._poller = ReplayPoller(self.store, clock, tc.deadletter_replay_poll_secs)

    # ----------------------------------------------------------------- opening
    def open(self, kind: SpoutKind, currtx: int, started: Iterable[int]) -> None:
        """Finish committed txids' replays, learn the batches decided, queue the replays.

        A store that cannot be read fails the start at once, as the coordinator's does.
        """
        self._kind = kind
        namespace = transactional_prefix(self._tid) + BATCHES_NAMESPACE
        changes = self._changes = BatchChanges(self._state_for(namespace))
        self._batches = changes.all()
        for txid in [t for t in self._batches if t < currtx]:
            self._finish(txid)
        self._decided = max([currtx - 1, *started])
        self._joined = {r for c in self._batches.values() for r, _s, _v in c.replayed}
        records = self._poller.load()
        self._remember(records)
        self._enqueue(records)

    def _enqueue(self, records: list[DeadLetter]) -> None:
        for record in records:
            asked = record.state is LetterState.REPLAY
            if not asked or record.id in self._joined or record.id in self._queue:
                continue
            if not isinstance(record.origin, BatchOrigin) or not record.replayable:
                log.warning(
                    "dead letter %s cannot be replayed (its emitted values are not known); "
                    "it stays",
                    record.id,
                )
                kept = functools.partial(self.store.put, replace(record, state=LetterState.DEAD))
                self._failures.with_backend(f"keeping dead letter {record.id}", kept)
                continue
            self._queue[record.id] = record

    def poll(self) -> None:
        """At most every poll interval: one read of the change counter; on a change, reread."""
        records = self._poller.poll()
        if records is not None:
            self._remember(records)
            self._enqueue(records)

    # ----------------------------------------------------------------- emissions
    def adjust(self, txid: int, order: EmitOrder) -> EmitOrder:
        """``order`` with ``txid``'s removals and replays (a new txid takes the queued ones)."""
        change = self._batches.get(txid)
        if change is None and txid > self._decided and self._queue:
            taken = list(self._queue.values())[:_REPLAYS_PER_TXID]
            replayed = []
            for record in taken:
                origin = record.origin
                assert isinstance(origin, BatchOrigin) and origin.stream is not None  # noqa: S101
                replayed.append((record.id, origin.stream, list(origin.values or [])))
            change = BatchChange((), tuple(replayed))
            self._store_change(txid, change, f"storing the dead letters txid {txid} replays")
            for record in taken:
                del self._queue[record.id]
                self._joined.add(record.id)
            log.info("txid %s replays %d dead letter(s)", txid, len(taken))
        self._decided = max(self._decided, txid)
        if change is None:
            return order
        return replace(order, removed=frozenset(change.removed), replayed=change.replayed)

    def _store_change(self, txid: int, change: BatchChange, what: str) -> None:
        changes = self._changes
        assert changes is not None  # noqa: S101 - opened
        self._failures.with_backend(what, lambda: changes.put(txid, change))
        self._batches[txid] = change

    def emitted(self, txid: int, results: Iterable[EmitResult]) -> None:
        """An emission of ``txid`` left tuples out: keep their stream and values in the records."""
        for result in results:
            for place, (stream, values) in result.dropped.items():
                record_id = self._record_id(txid, place)
                read = functools.partial(self.store.get, record_id)
                record = self._failures.with_backend("reading a dead letter", read)
                origin = record.origin if record is not None else None
                if record is None or not isinstance(origin, BatchOrigin) or origin.stream:
                    continue  # not a record of this emission, or it knows what was left out
                known = replace(record, origin=replace(origin, stream=stream, values=values))
                write = functools.partial(self.store.put, known)
                self._failures.with_backend(f"keeping the values of dead letter {record_id}", write)

    def committed(self, txid: int) -> None:
        """``txid`` committed: its replayed records are done; suspects count afresh."""
        self._finish(txid)
        self.tracker.committed()

    def _finish(self, txid: int) -> None:
        """``txid`` committed: delete the records it replayed (unless it dead-lettered them)."""
        change = self._batches.pop(txid, None)
        if change is None:
            return
        done = [
            record_id
            for k, (record_id, _stream, _values) in enumerate(change.replayed)
            if lineage(REPLAYED, k) not in change.removed
        ]
        if done:
            deleted = self._failures.with_backend(
                f"deleting the dead letters txid {txid} replayed", lambda: self.store.delete(done)
            )
            self.held -= len(deleted)
            self._joined.difference_update(done)
            gone = set(done)
            for shown in [s for s in self.last if s["id"] in gone]:
                self.last.remove(shown)
        changes = self._changes
        assert changes is not None  # noqa: S101
        what = f"dropping txid {txid}'s batch change"
        self._failures.with_backend(what, lambda: changes.drop([txid]))

    def _record_id(self, txid: int, place: int) -> str:
        slot, index = place_of(place)
        if slot == REPLAYED:
            change = self._batches.get(txid)
            if change is not None and index < len(change.replayed):
                return change.replayed[index][0]
        return batch_record_id(self._tid, txid, self._slot, slot, index)

    @property
    def _slot(self) -> Slot:
        """The slot an emitted tuple's place names: a partition, or a plain spout's task."""
        return Slot.PARTITION if self._kind != PLAIN else Slot.EMITTER_TASK

    # ----------------------------------------------------------------- a failed attempt
    def isolate(
        self, txid: int, processing: bool, error: TaskError | None, traceback: str | None
    ) -> Verdict:
        """An attempt of ``txid`` failed: leave the emitted tuple it failed on out, if poison.

        Steps, each before the next (``KillPoint``s ``deadletter-*``):

        1. Find the suspect: the failing tuple's lineage, in the processing phase of a spout
           whose replays are identical.
        2. Count the failed attempt against it; at ``topology.deadletter.after.failures`` (at
           once if the store holds its record) it is poison; above ``topology.deadletter.max``
           records the topology stops instead.
        3. Write its record, committed (``deadletter-decided`` before, ``deadletter-recorded``
           after).
        4. Store the removal with ``txid``'s batch change (``deadletter-excluded`` after).
           The caller fails the attempt as usual: ``txid`` is emitted again, without it.
        """
        if error is None:
            return Verdict(False)
        failing = error.failing
        root = failing.root if failing is not None else None
        trees = failing.trees if failing is not None else 0
        why = why_not_poison(error.types, root, trees, "emitted batch tuple", _NO_LINEAGE)
        if why is None and not processing:
            why = (
                f"txid {txid} failed in its commit phase, where committers may already have "
                "written it: leaving a tuple out now would not take it out of what they wrote"
            )
        if why is None and self._kind == OPAQUE:
            why = (
                "an opaque spout may emit a different batch when it replays a txid, so the "
                "tuple cannot be left out of its replays"
            )
        if why is not None or failing is None:
            return self._not_blamed(why)
        place = failing.root
        record_id = self._record_id(txid, place)
        if not self.isolating:
            return self._repeats(record_id, error)
        judged = self._judge(record_id, error, txid)
        if judged is None:
            return Verdict(False)
        slot, index = place_of(place)
        slot_name = Slot.REPLAYED if slot == REPLAYED else self._slot
        origin = BatchOrigin(txid, slot_name, slot if slot != REPLAYED else 0, index)
        letter = self._letter(error, origin, judged, txid, record_id, traceback)
        record = self._record(letter, judged, txid)
        change = self._batches.get(txid) or BatchChange()
        if place not in change.removed:
            change = change._replace(removed=(*change.removed, place))
            self._store_change(txid, change, f"storing what txid {txid} leaves out")
        self._booked(record, judged, txid, failing.text, "attempt")
        return Verdict(True)

    # ----------------------------------------------------------------- reading
    def status(self) -> dict[str, Any]:
        """What ``status()`` and dashboards show: policy, records held, counts, the last few."""
        return self._status(len(self._queue) + len(self._joined))
