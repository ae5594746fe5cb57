"""Merging what a job's tasks sent back: the acker's reduce, then one ``JobResult``.

After a job's last stage every record goes to an acker partition (``topology.acker.executors``
of them, or the driver when that is unset): XOR values are combined per root, and only roots
whose XOR is not zero are kept (a root no task reported had every tuple of its tree acked
exactly once). Fails, task reports and tuples bound for components outside the job are
gathered as they come. The driver merges the partitions' results into one ``JobResult``.

No pyspark here: ``reduce_acks`` runs inside Spark's Python workers.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from statefulbolts.runtime._records import Aborted, AckLedger, Fails, JobResult, TupleBatch

__all__ = ["merge_results", "reduce_acks"]


def reduce_acks(items: Iterable[Any]) -> list[JobResult]:
    """The acker: one ``JobResult`` from every ``(key, records)`` item of one partition."""
    acks: dict[int, int] | None = None
    result = JobResult()
    for _key, records in items:
        for r in records:
            kind = type(r)
            if kind is AckLedger:
                # The biggest ledger so far is the base (unpickled here, so ours to change);
                # the smaller one is merged into it.
                part = r.acks
                if acks is None:
                    acks = part
                    continue
                if len(part) > len(acks):
                    acks, part = part, acks
                for root, x in part.items():
                    acks[root] = acks.get(root, 0) ^ x
            elif kind is Fails:
                result.fails.update(r.roots)
            elif kind is TupleBatch:
                result.outputs.append(r)
            elif kind is Aborted:
                result.aborted = True
            else:
                result.reports.append(r)
    if acks:
        result.acks = {root: x for root, x in acks.items() if x}
    return [result]


def merge_results(parts: Sequence[JobResult]) -> JobResult:
    """One result from the acker partitions' results (roots never span two partitions)."""
    if len(parts) == 1:
        return parts[0]
    merged = JobResult()
    for part in parts:
        merged.acks.update(part.acks)
        merged.fails.update(part.fails)
        merged.reports.extend(part.reports)
        merged.outputs.extend(part.outputs)
        merged.aborted = merged.aborted or part.aborted
        merged.retried.extend(part.retried)
    return merged
