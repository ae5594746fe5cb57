"""Dead letters of a checkpointed topology, on the driver: isolate a poison spout tuple, replay.

``CheckpointDeadLetters`` is the checkpoint runner's one object for poison tuples
(``statefulbolts.deadletter`` holds the records, the store and the rules). The runner calls it:

- ``open_source``, after the spouts opened and before the checkpoint spout recovers (whose
  manifest may name replays that committed): it opens the replay source ``$deadletter``;
- ``load``, after the checkpoint spout opened, before any spout runs: it reads the store, acks
  every record's spout message at its spout (a driver killed between writing a record and the
  spout's ack, or before a spout's batched ack reached its source, would otherwise get the
  tuple delivered again) and queues the records asked for replay. A store that cannot be
  read fails the start at once, as the checkpoint spout's does;
- ``isolate``, when a job failed (see its steps);
- ``committed``, when a transaction committed; ``poll`` on every loop step (it reads the store's
  change counter at most every ``topology.deadletter.replay.poll.secs``).

A replay goes out from ``$deadletter``, a framework spout task (``SpoutTasks.add_source``): the
record's spout tuple is emitted as its spout task would emit it (same routes, stream, values),
as a new tracked root whose message id is the record's id. Its ack (the transaction that
carried it committed) deletes the record; its fail queues it again; a transaction that fails on
it again counts against it, and it is dead-lettered again (``DeadLetter.again``: attempts
added). A transaction's manifest names it as ``$deadletter`` task 0, so a driver killed after
that transaction committed deletes the record on restart instead of replaying it twice.
"""

from __future__ import annotations

import collections
import functools
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from checkpoint._ledger import RootLedger
from checkpoint._spouts import SpoutTask, SpoutTasks
from statefulbolts.clock import Clock
from statefulbolts.deadletter import (
    BackendCalls,
    DeadLetter,
    DeadLetters,
    DeadLetterStore,
    LetterState,
    ReplayPoller,
    SpoutOrigin,
    Verdict,
    spout_record_id,
    why_not_poison,
)
from statefulbolts.errors import TopologyError
from statefulbolts.listeners import NO_FAULTS, FaultListener
from statefulbolts.runtime import (
    ExecutionPlan,
    Stats,
    TaskError,
    TopologyConfig,
    TupleBatch,
    shown_values,
)

__all__ = ["REPLAY_SOURCE", "CheckpointDeadLetters"]

log = logging.getLogger(__name__)

REPLAY_SOURCE = "$deadletter"
# A replayed spout tuple's values are stored whole, up to this many msgpack bytes.
_SPOUT_VALUES_CAP = 1 << 20


class _ReplaySpout:
    """The ``$deadletter`` source: emits queued replays, deletes a record once it committed."""

    def __init__(self, owner: CheckpointDeadLetters) -> None:
        self._owner = owner
        self.queued: collections.OrderedDict[str, DeadLetter] = collections.OrderedDict()
        self.flying: dict[str, DeadLetter] = {}
        self.again: set[str] = set()  # dead-lettered again: their ack must not delete them
        self.task: SpoutTask | None = None

    def open(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        """Nothing to open."""

    def activate(self) -> None:
        """Nothing to activate."""

    def deactivate(self) -> None:
        """Nothing to deactivate."""

    def close(self) -> None:
        """Nothing to close."""

    def next_tuple(self) -> None:
        """Emit the next queued replay, as its spout task would."""
        if not self.queued:
            return
        record_id, record = self.queued.popitem(last=False)
        self.flying[record_id] = record
        try:
            self._owner.emit_replay(record)
        except TopologyError as exc:  # the spout's streams changed since it was recorded
            self.flying.pop(record_id, None)
            self._owner.keep(record, str(exc))

    def ack(self, record_id: Any) -> None:
        """The transaction that carried the replay committed: delete the record."""
        self.flying.pop(record_id, None)
        self.queued.pop(record_id, None)
        if record_id in self.again:
            self.again.discard(record_id)
            return
        self._owner.replayed(str(record_id))

    def fail(self, record_id: Any) -> None:
        """The replay's transaction failed or rolled back: emit it again."""
        record = self.flying.pop(record_id, None)
        if record is not None and record_id not in self.again:
            self.queued[record_id] = record
        self.again.discard(record_id)

    def knows(self, record_id: str) -> bool:
        """Whether ``record_id`` is queued or in flight."""
        return record_id in self.queued or record_id in self.flying


class CheckpointDeadLetters(DeadLetters):
    """Poison spout tuples of one checkpointed topology (see the module docstring)."""

    def __init__(
        self,
        name: str,
        tc: TopologyConfig,
        conf: Mapping[str, Any],
        plan: ExecutionPlan,
        spouts: SpoutTasks,
        ledger: RootLedger,
        stats: Stats,
        failures: BackendCalls,
        clock: Clock,
        faults: FaultListener = NO_FAULTS,
        now: Callable[[], float] = time.time,
    ) -> None:
        store = DeadLetterStore(conf, topology=name)
        super().__init__(
            name, tc, store, stats.add, failures, faults, now=now, task_id=plan.task_id
        )
        self._plan, self._spouts, self._ledger = plan, spouts, ledger
        self._clock, self._now = clock, now
        self._source: _ReplaySpout | None = None
        self._poller = ReplayPoller(self.store, clock, tc.deadletter_replay_poll_secs)

    # ----------------------------------------------------------------- opening
    def open_source(self) -> None:
        """Open ``$deadletter``, the source replays go out from (if there is a user spout)."""
        if self._spouts.tasks:
            self._source = _ReplaySpout(self)
            self._source.task = self._spouts.add_source(REPLAY_SOURCE, self._source)

    def load(self) -> None:
        """Read the store, ack the records' spout messages, queue the replays asked for."""
        records = self._poller.load()
        self._remember(records)
        acked = 0
        for record in records:
            origin = record.origin
            if isinstance(origin, SpoutOrigin):
                st = self._spouts.user_task(origin.component, origin.task)
                if st is not None:
                    st.spout.ack(origin.message_id)
                    acked += 1
        if acked:
            log.info("acked the spout messages of %d dead letters at their spouts", acked)
        self._queue(records)

    def _queue(self, records: Sequence[DeadLetter]) -> None:
        """Queue the records asked for replay that are not queued or in flight already."""
        source = self._source
        if source is None:
            return
        for record in records:
            if record.state is not LetterState.REPLAY or source.knows(record.id):
                continue
            origin = record.origin
            spout = (
                self._spouts.user_task(origin.component, origin.task)
                if isinstance(origin, SpoutOrigin)
                else None
            )
            if spout is None or not record.replayable:
                self.keep(record, "no values to replay" if spout else "no such spout task")
                continue
            source.queued[record.id] = record

    def keep(self, record: DeadLetter, why: str) -> None:
        """``record`` cannot be replayed: it stays, held again (``"dead"``), and says why."""
        log.warning("dead letter %s cannot be replayed (%s); it stays", record.id, why)
        kept = functools.partial(self.store.put, replace(record, state=LetterState.DEAD))
        self._failures.with_backend(f"keeping dead letter {record.id}", kept)

    # ----------------------------------------------------------------- replays
    def poll(self) -> None:
        """At most every poll interval: one read of the change counter; on a change, reread."""
        records = self._poller.poll()
        if records is not None:
            self._remember(records)
            self._queue(records)

    def emit_replay(self, record: DeadLetter) -> None:
        """Emit ``record``'s spout tuple as its spout task would (called by ``$deadletter``)."""
        origin = record.origin
        source = self._source
        assert isinstance(origin, SpoutOrigin) and source is not None  # noqa: S101 - queued so
        assert source.task is not None and origin.values is not None  # noqa: S101
        spout = self._spouts.user_task(origin.component, origin.task)
        assert spout is not None  # noqa: S101 - _queue checked it
        log.info("replaying dead letter %s (%s)", record.id, origin.describe())
        self._spouts.emit_as(spout, source.task, origin.values, record.id, origin.stream)

    def replayed(self, record_id: str) -> None:
        """A replay committed: delete its record."""
        deleted = self._failures.with_backend(
            f"deleting replayed dead letter {record_id}", lambda: self.store.delete([record_id])
        )
        self.held -= len(deleted)
        for shown in list(self.last):
            if shown["id"] == record_id:
                self.last.remove(shown)

    # ----------------------------------------------------------------- a failed job
    def isolate(
        self,
        txid: int,
        roots: Sequence[int],
        records: Sequence[TupleBatch],
        error: TaskError | None,
        traceback: str | None,
    ) -> Verdict:
        """A job failed: dead-letter the spout tuple it failed on, if that is poison.

        Steps, each before the next, so a driver killed anywhere leaves one record at most and
        the tuple never counted (``KillPoint``s ``deadletter-*``):

        1. Find the suspect: the failing tuple's root, by its spout task and message id (a
           framework error, a tuple of no tree or of several, is not the tuple's fault).
        2. Count the failed transaction against it; at ``topology.deadletter.after.failures``
           (at once if the store holds its record) it is poison. Above ``topology.deadletter.max``
           records, the topology stops instead.
        3. Write its record, committed (``deadletter-decided`` before, ``deadletter-recorded``
           after).
        4. Ack its spout message at its spout (``deadletter-excluded`` after): it is never
           replayed into the same failure. The caller then fails the job's other roots, which
           are replayed as usual, and the next PREPARE commits them.

        Returns:
            Whether the tuple was dead-lettered, or (when it could not be) why.
        """
        if error is None:
            return Verdict(False)
        failing = error.failing
        root = failing.root if failing is not None else None
        why = why_not_poison(error.types, root, failing.trees if failing else 0, "spout tuple")
        if failing is None and error.raised_in is not None and why is not None:
            why = (
                "a timer is not dead-lettered: it stays registered, and fires again once the "
                "topology runs fixed code"
            )
        if why is not None or failing is None:
            return self._not_blamed(why)
        live = self._ledger.live.get(failing.root)
        if live is None or failing.root not in roots:
            return self._not_blamed("its spout tuple is no longer pending (timed out, or failed)")
        index, message_id = live
        st = self._spouts.tasks[index]
        source = self._source
        replay = source is not None and st is source.task
        if replay:
            record_id = str(message_id)
        else:
            record_id = spout_record_id(self._name, st.name, st.task, message_id)
        if not self.isolating:
            return self._repeats(record_id, error)
        judged = self._judge(record_id, error, txid)
        if judged is None:
            return Verdict(False)
        if replay and judged.held is not None:
            origin = judged.held.origin
        else:
            origin = self._origin(st, message_id, failing.root, records)
        record = self._record(
            self._letter(error, origin, judged, txid, record_id, traceback), judged, txid
        )
        if replay and source is not None:
            source.again.add(record_id)
        self._ledger.ack([failing.root])
        self._booked(record, judged, txid, failing.text, "transaction")
        return Verdict(True)

    def _origin(
        self, st: SpoutTask, message_id: Any, root: int, records: Sequence[TupleBatch]
    ) -> SpoutOrigin:
        """The spout tuple of ``root`` as the job carried it: its stream and values."""
        plan = self._plan
        for batch in records:
            if batch.src != st.comp or batch.src_task != st.task:
                continue
            try:
                i = batch.roots.index(root)
            except ValueError:
                continue
            value = batch.column()[i]
            values = [value] if plan.widths[batch.src][batch.stream] == 1 else list(value)
            packed, text = shown_values(values, _SPOUT_VALUES_CAP)
            kept = values if packed is not None else None
            stream = plan.streams[batch.src][batch.stream]
            return SpoutOrigin(st.name, st.task, message_id, stream, kept, text)
        return SpoutOrigin(st.name, st.task, message_id, "", None, "(not found in the job)")

    def committed(self) -> None:
        """A transaction committed: suspects start counting again."""
        self.tracker.committed()

    # ----------------------------------------------------------------- reading
    def status(self) -> dict[str, Any]:
        """What ``status()`` and dashboards show: policy, records held, counts, the last few."""
        source = self._source
        return self._status(0 if source is None else len(source.queued) + len(source.flying))

