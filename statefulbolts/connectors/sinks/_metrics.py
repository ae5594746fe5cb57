"""What a sink bolt counts, per task, for the dashboard and Prometheus (``statefulbolts.metrics``).

=================================  ==========================================================
metric (``statefulbolts_<name>``)  counts
=================================  ==========================================================
``sink_records_staged``            records staged in PREPAREs (exactly-once bolts)
``sink_records_published``         records made visible (published, or written at once)
``sink_publishes``                 publish steps that wrote (one per lane and COMMIT)
``sink_publishes_replayed``        publish steps that found the marker there (a replayed COMMIT)
``sink_publish_seconds``           seconds spent in publish steps that wrote
=================================  ==========================================================

Counts are per task attempt: a task that fails sends none back (its retry counts again), so a
replayed transaction's staged records count once per PREPARE that ran to its end.
"""

from __future__ import annotations

from typing import Any

from statefulbolts.metrics import CountMetric

__all__ = ["SINK_METRICS", "SinkMetrics"]

SINK_METRICS = (
    "sink_records_staged",
    "sink_records_published",
    "sink_publishes",
    "sink_publishes_replayed",
    "sink_publish_seconds",
)


class SinkMetrics:
    """A sink task's counters, registered with its context (see the module docstring)."""

    def __init__(self) -> None:
        self.counters = {name: CountMetric() for name in SINK_METRICS}

    @classmethod
    def registered(cls, context: Any) -> SinkMetrics:
        """New counters, registered with ``context`` when it takes metrics."""
        metrics = cls()
        register = getattr(context, "register_metric", None)
        if callable(register):
            for name, metric in metrics.counters.items():
                register(name, metric)
        return metrics

    def staged(self, records: int) -> None:
        """A PREPARE staged ``records``."""
        self.counters["sink_records_staged"].incr(records)

    def published(self, records: int, seconds: float) -> None:
        """A publish step (or an at-least-once write) made ``records`` visible."""
        self.counters["sink_records_published"].incr(records)
        self.counters["sink_publishes"].incr()
        self.counters["sink_publish_seconds"].incr(seconds)

    def replayed(self) -> None:
        """A publish step found its lane's marker already there: nothing written."""
        self.counters["sink_publishes_replayed"].incr()
