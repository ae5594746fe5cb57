"""What a running topology counts: per component, per transaction, and the errors it saw."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from providers import DriverOwnedStateProvider
from statefulbolts.runtime._plan import ExecutionPlan
from statefulbolts.runtime._records import JobResult, ReportedError

__all__ = ["Stats", "TransactionInfo"]

# Transactions kept for ``metrics()``; the oldest half goes when there are more.
_KEEP = 10_000


@dataclass
class TransactionInfo:
    """What one Spark job did; handed to ``on_transaction`` callbacks and kept in metrics."""

    txid: int
    action: str | None
    tuples: int
    seconds: float
    ok: bool
    acked: int = 0
    failed: int = 0
    error: str | None = None
    # Seconds per job of a transactional batch ("emit", "process", "commit"); else empty.
    phases: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return dict(self.__dict__)


@dataclass
class Stats:
    """Counters per component, the last transactions, and every error seen."""

    components: dict[str, dict[str, float]] = field(default_factory=dict)
    transactions: list[TransactionInfo] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    on_transaction: Callable[[TransactionInfo], None] | None = None

    def add(self, component: str, **values: float) -> None:
        """Add to a component's counters."""
        row = self.components.setdefault(
            component, {"executed": 0, "emitted": 0, "acked": 0, "failed": 0, "errors": 0}
        )
        for key, value in values.items():
            row[key] = row.get(key, 0) + value

    def error(self, component: str, text: str) -> None:
        """Keep an error against a component."""
        self.errors.append(text)
        self.add(component, errors=1)

    def record(self, info: TransactionInfo) -> None:
        """Keep one transaction's figures and tell the ``on_transaction`` callback."""
        self.transactions.append(info)
        if len(self.transactions) > _KEEP:
            del self.transactions[: _KEEP // 2]
        if self.on_transaction is not None:
            self.on_transaction(info)

    def take_reports(
        self,
        result: JobResult,
        plan: ExecutionPlan,
        txid: int,
        provider: DriverOwnedStateProvider | None,
        log: logging.Logger,
    ) -> list[ReportedError]:
        """Take in what a job's tasks reported; return their errors.

        Their state changes go to ``provider`` (a driver-owned one), their metrics to the
        counters; their errors are logged and kept.
        """
        names = plan.component_ids
        if provider is not None:
            for report in result.reports:
                for ns, changes in report.changes:
                    provider.apply_changes(ns, changes)
        self.add_reports(result, names)
        errors = result.errors
        for e in errors:
            text = f"component {names[e.comp]!r} task {plan.task_ids[e.comp][e.task]}: {e.text}"
            log.warning("txid %s: %s", txid, text)
            self.error(names[e.comp], text)
        return errors

    def add_reports(self, result: JobResult, names: list[str]) -> None:
        """Add every task report's metrics of a job (component names by plan index)."""
        for report in result.reports:
            m = report.metrics
            self.add(
                names[report.comp],
                executed=m.executed,
                emitted=m.emitted,
                acked=m.acked,
                failed=m.failed,
                seconds=m.seconds,
            )
