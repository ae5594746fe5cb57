"""Where one active txid stands on the driver: ``BatchPhase``, with its job in a table.

A batch goes QUEUED -> EMITTING -> PROCESSING -> PROCESSED -> COMMITTING (with one attempt's
emitters fused into its processing job, EMITTING is skipped). Three phases run a job; each
job has a name in ``TransactionInfo.phases`` (``emit``) and an action (``BatchAction.EMIT``),
the ``JobSpec.action`` and ``TransactionInfo.action`` of its job, shown in logs, metrics and
Spark. Asking for the job of a phase that runs none is an error, never a guess.

``BatchAction`` is a ``str``: ``info.action == "COMMIT"`` holds, and it formats and serialises
as its value. The fused job's action is ``EMIT+PROCESS``.

Example:
    >>> BatchPhase.PROCESSING.job
    BatchJob(timing='process', label=<BatchAction.PROCESS: 'PROCESS'>)
    >>> BatchPhase("committing").job.label == "COMMIT", f"{BatchAction.EMIT_PROCESS}"
    (True, 'EMIT+PROCESS')
    >>> BatchPhase.QUEUED.job
    Traceback (most recent call last):
    ...
    ValueError: a batch in phase 'queued' runs no job (only emitting, processing, committing do)
    >>> BatchPhase("EMIT")
    Traceback (most recent call last):
    ...
    ValueError: 'EMIT' is not a valid BatchPhase
    >>> BatchAction("emit")
    Traceback (most recent call last):
    ...
    ValueError: unknown batch action 'emit': not one of EMIT, PROCESS, EMIT+PROCESS, COMMIT
"""

from __future__ import annotations

import enum
from typing import NamedTuple

__all__ = ["BatchAction", "BatchJob", "BatchPhase"]


class BatchAction(enum.StrEnum):
    """The action of a batch's job: its ``JobSpec.action`` and ``TransactionInfo.action``."""

    EMIT = "EMIT"
    PROCESS = "PROCESS"
    EMIT_PROCESS = "EMIT+PROCESS"  # one job for both (``TransactionalJobs.emit_and_process``)
    COMMIT = "COMMIT"

    @classmethod
    def _missing_(cls, value: object) -> BatchAction:
        allowed = ", ".join(a.value for a in cls)
        msg = f"unknown batch action {value!r}: not one of {allowed}"
        raise ValueError(msg)


class BatchJob(NamedTuple):
    """The job a phase runs: its key in ``TransactionInfo.phases`` and its action (label)."""

    timing: str
    label: BatchAction


class BatchPhase(enum.Enum):
    """One active txid's phase on the driver (its ``.value`` is what status shows)."""

    QUEUED = "queued"
    EMITTING = "emitting"
    PROCESSING = "processing"
    PROCESSED = "processed"
    COMMITTING = "committing"

    @property
    def job(self) -> BatchJob:
        """The job this phase runs.

        Raises:
            ValueError: the phase runs no job (QUEUED, PROCESSED).
        """
        job = _JOBS.get(self)
        if job is None:
            running = ", ".join(p.value for p in _JOBS)
            msg = f"a batch in phase {self.value!r} runs no job (only {running} do)"
            raise ValueError(msg)
        return job


_JOBS = {
    BatchPhase.EMITTING: BatchJob("emit", BatchAction.EMIT),
    BatchPhase.PROCESSING: BatchJob("process", BatchAction.PROCESS),
    BatchPhase.COMMITTING: BatchJob("commit", BatchAction.COMMIT),
}
