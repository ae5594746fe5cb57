"""Poison tuples: isolated as dead letters instead of stopping the topology.

A bolt that raises on one input every time used to stop its topology: the transaction failed,
was rolled back and replayed, and failed again until ``topology.max.transaction.retries`` ran
out, and a restart replayed the same tuple. With ``topology.deadletter.policy`` "isolate" (the
default) the driver learns from the task's error which tuple it was executing, counts the
transactions each such tuple failed (``PoisonTracker``), and at
``topology.deadletter.after.failures`` writes a dead letter (``DeadLetter``) to the topology's
``DeadLetterStore`` and takes the tuple's origin out: the root spout tuple (acked at its spout,
never replayed) or the emitted batch tuple (left out of every replay of its txid); the rest of
the transaction is replayed and commits. "stop" keeps the old behaviour.

Records are read, replayed into a running (or the next) topology, and purged with
``statefulbolts deadletter list | show | replay | purge``, or from Python through
``DeadLetterStore``.

This package is the one home of what both protocols share, one module per role:

- ``_record``: the record (``DeadLetter``), its origins and the kinds it names, as enums
  (``Scope``, ``LetterState``, ``OriginKind``, ``Slot``);
- ``_store``: where records are kept (``DeadLetterStore``) and how a running driver watches
  them for replays (``ReplayPoller``);
- ``_tracker``: the judgement, when a failing tuple is poison (``PoisonTracker``,
  ``why_not_poison``);
- ``_policy``: what a driver does with one (``DeadLetters``: judge, record, book; its
  ``Verdict``), the base of each protocol's own: ``checkpoint._deadletters`` takes a spout
  tuple out, ``statefulbolts.transactional._deadletters`` an emitted batch tuple (its lineage:
  ``statefulbolts.transactional._lineage``).

No pyspark here, and no protocol: the drivers use these.
"""

from statefulbolts.deadletter._policy import (
    BackendCalls,
    DeadLetters,
    Judged,
    Verdict,
    poison_limit_error,
    summary,
)
from statefulbolts.deadletter._record import (
    BatchOrigin,
    DeadLetter,
    FailedTuple,
    LetterState,
    OriginKind,
    Scope,
    Slot,
    SpoutOrigin,
    batch_record_id,
    spout_record_id,
)
from statefulbolts.deadletter._store import (
    CHANGES_KEY,
    DeadLetterStore,
    ReplayPoller,
    deadletter_namespace,
)
from statefulbolts.deadletter._tracker import PoisonTracker, Suspect, why_not_poison

__all__ = [
    "CHANGES_KEY",
    "BackendCalls",
    "BatchOrigin",
    "DeadLetter",
    "DeadLetterStore",
    "DeadLetters",
    "FailedTuple",
    "Judged",
    "LetterState",
    "OriginKind",
    "PoisonTracker",
    "ReplayPoller",
    "Scope",
    "Slot",
    "SpoutOrigin",
    "Suspect",
    "Verdict",
    "batch_record_id",
    "deadletter_namespace",
    "poison_limit_error",
    "spout_record_id",
    "summary",
    "why_not_poison",
]
