"""Where one active txid stands on the driver: ``BatchPhase``, with its job in a table.

A batch goes QUEUED -> EMITTING -> PROCESSING -> PROCESSED -> COMMITTING (with one attempt's
emitters fused into its processing job, EMITTING is skipped). Three phases run a job; each
job has a name in ``TransactionInfo.phases`` (``emit``) and a label in logs, metrics and Spark
(``EMIT``). Asking for the job of a phase that runs none is an error, never a guess.

Example:
    >>> BatchPhase.PROCESSING.job
    BatchJob(timing='process', label='PROCESS')
    >>> BatchPhase("committing").job.label
    'COMMIT'
    >>> BatchPhase.QUEUED.job
    Traceback (most recent call last):
    ...
    ValueError: a batch in phase 'queued' runs no job (only emitting, processing, committing do)
    >>> BatchPhase("EMIT")
    Traceback (most recent call last):
    ...
    ValueError: 'EMIT' is not a valid BatchPhase
"""

from __future__ import annotations

import enum
from typing import NamedTuple

__all__ = ["BatchJob", "BatchPhase"]


class BatchJob(NamedTuple):
    """The job a phase runs: its key in ``TransactionInfo.phases`` and its label."""

    timing: str
    label: str


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
    BatchPhase.EMITTING: BatchJob("emit", "EMIT"),
    BatchPhase.PROCESSING: BatchJob("process", "PROCESS"),
    BatchPhase.COMMITTING: BatchJob("commit", "COMMIT"),
}
