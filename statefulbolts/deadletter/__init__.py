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

No pyspark here: this package is the records, the store and the rules; the drivers use them.
"""

from statefulbolts.deadletter._outcome import Verdict, poison_limit_error, summary
from statefulbolts.deadletter._record import (
    DEAD,
    REPLAY,
    BatchOrigin,
    DeadLetter,
    FailedTuple,
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
    "DEAD",
    "REPLAY",
    "BatchOrigin",
    "DeadLetter",
    "DeadLetterStore",
    "FailedTuple",
    "PoisonTracker",
    "ReplayPoller",
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
