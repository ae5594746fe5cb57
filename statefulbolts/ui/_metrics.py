"""Prometheus metrics of one topology, read from its runner at scrape time.

``TopologyCollector`` is a custom ``prometheus_client`` collector: every scrape takes one
``Observation`` of the runner and turns it into metric families, so nothing on the driver's hot
paths knows about Prometheus. Every metric has a ``topology`` label:

==================================================  =========  ===============================
metric                                              type       labels, meaning
==================================================  =========  ===============================
``statefulbolts_transactions_total``                counter    ``action``, ``outcome`` (ok,
                                                               failed): jobs recorded
``statefulbolts_transaction_duration_seconds``      histogram  ``action``: job durations
``statefulbolts_tuples_emitted_total``              counter    ``component``
``statefulbolts_tuples_acked_total``                counter    ``component``
``statefulbolts_tuples_failed_total``               counter    ``component``
``statefulbolts_tuples_replayed_total``             counter    ``component`` (a spout's
                                                               re-emits of failed ids)
``statefulbolts_tuples_executed_total``             counter    ``component`` (bolts)
``statefulbolts_tuples_dead_lettered_total``        counter    ``component``: poison tuples it
                                                               raised on, taken out this run
``statefulbolts_execute_seconds_total``             counter    ``component``: task time
``statefulbolts_reported_errors_total``             counter    ``component`` (its errors)
``statefulbolts_recoveries_total``                  counter    ``kind``: ROLLBACK, INITSTATE,
                                                               COMMIT (rolled forward), RETRY
``statefulbolts_pending_tuple_trees``               gauge      spout tuples not yet acked
``statefulbolts_committed_txid``                    gauge      last committed txid
``statefulbolts_state_backend_errors_total``        counter    state backend errors seen
``statefulbolts_state_backend_outage_seconds_total`` counter   time the backend was down
``statefulbolts_state_backend_down``                gauge      1 during an outage
``statefulbolts_dead_letters``                      gauge      dead-letter records held
``statefulbolts_spout_lag``                         gauge      ``component``: entries its
                                                               source holds not yet acked
``statefulbolts_spout_partition_lag``               gauge      ``component``, ``partition``:
                                                               a partitioned spout's records
                                                               after its committed position
``statefulbolts_spout_gaps_total``                  counter    ``component``: jumps past
                                                               records its source lost
``statefulbolts_topology_up``                       gauge      ``state``: 1 for the current
``statefulbolts_task_tuples_emitted_total``         counter    ``component``, ``task`` (its
                                                               Storm task id); also
                                                               ``_acked``, ``_failed``,
                                                               ``_executed``
``statefulbolts_task_busy_seconds_total``           counter    ``component``, ``task``: the
                                                               task's job time (its rate is
                                                               the task's capacity)
``statefulbolts_spout_pending_tuple_trees``         gauge      ``component``, ``task``: the
                                                               spout task's live trees
``statefulbolts_max_spout_pending``                 gauge      the limit per spout task
``statefulbolts_checkpoint_size_bytes``             gauge      ``component``: state change
                                                               bytes of its last checkpoint
``statefulbolts_state_keys``                        gauge      ``component``: committed keys
                                                               of its tasks' state at the last
                                                               count (a committer's: its maps)
``statefulbolts_<metric>_total``                    counter    ``component``: a metric its
                                                               tasks registered
                                                               (``statefulbolts.metrics``),
                                                               e.g. a sink's
                                                               ``sink_records_published``
==================================================  =========  ===============================

A gauge with nothing to say is left out (no committed txid yet, no tuple trees in a
transactional topology, no spout that knows its lag, no ``topology.max.spout.pending``, no
checkpoint size from a provider that is not driver-owned, no key count before the first commit
or from a provider that cannot count its keys). Rates and capacity are Prometheus'
to compute: ``rate(statefulbolts_task_tuples_executed_total[1m])``, and
``rate(statefulbolts_task_busy_seconds_total[1m])`` for the capacity the dashboard shows.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from statefulbolts.metrics import METRIC_PREFIX

if TYPE_CHECKING:
    from statefulbolts.runtime import Observation, StateKeys, StateWrite, TaskCounters

__all__ = ["STATES", "TopologyCollector"]

STATES = ("running", "idle", "failed", "stopped")
_TUPLES = ("emitted", "acked", "failed", "replayed", "executed")
_TASK_TUPLES = ("emitted", "acked", "failed", "executed")


def _bound(value: float) -> str:
    return "+Inf" if math.isinf(value) else repr(value)


class TopologyCollector(Collector):
    """Metric families of one topology, from ``observe()`` at each scrape.

    Args:
        observe: returns a fresh ``Observation`` (``TopologyRunner.observe``).
        components: every component id, so each has its series from the first scrape on.
        tasks: returns the figures per task (``Stats.task_counters``); none without it.
        sizes: returns the checkpoint sizes (``Stats.checkpoint_sizes``); none without it.
        state_keys: returns the state sizes (``Stats.key_counts``); none without it.
        max_spout_pending: ``topology.max.spout.pending`` (``None``: unset).
    """

    def __init__(
        self,
        observe: Callable[[], Observation],
        components: Sequence[str],
        *,
        tasks: Callable[[], TaskCounters] | None = None,
        sizes: Callable[[], Mapping[str, Sequence[StateWrite]]] | None = None,
        state_keys: Callable[[], Mapping[str, Sequence[StateKeys]]] | None = None,
        max_spout_pending: int | None = None,
    ) -> None:
        self._observe = observe
        self._components = list(components)
        self._tasks = tasks
        self._sizes = sizes
        self._state_keys = state_keys
        self._max_spout_pending = max_spout_pending

    def describe(self) -> list[Metric]:
        """Nothing up front: the families depend on the run (the registry need not ask)."""
        return []

    def collect(self) -> Iterator[Metric]:
        """Every family, from one observation."""
        obs = self._observe()
        name = obs.name
        yield from self._transactions(obs, name)
        yield from self._components_families(obs, name)
        yield from self._protocol(obs, name)
        yield from self._backend(obs, name)
        yield from self._task_families(name)
        yield from self._sizes_family(name)
        yield from self._state_keys_family(name)

    def _task_families(self, name: str) -> Iterator[Metric]:
        if self._tasks is None:
            return
        tasks = sorted(self._tasks().items())
        labels = ["topology", "component", "task"]
        for what in _TASK_TUPLES:
            family = CounterMetricFamily(
                f"statefulbolts_task_tuples_{what}",
                f"Tuples {what} per task (its Storm task id).",
                labels=labels,
            )
            for (cid, _), row in tasks:
                family.add_metric([name, cid, str(int(row.get("task", -1)))], row.get(what, 0))
            yield family
        busy = CounterMetricFamily(
            "statefulbolts_task_busy_seconds",
            "Seconds the task's jobs ran; its rate is the task's capacity (busy share of time).",
            labels=labels,
        )
        pending = GaugeMetricFamily(
            "statefulbolts_spout_pending_tuple_trees",
            "A spout task's tuple trees not yet acked (topology.max.spout.pending bounds it).",
            labels=labels,
        )
        for (cid, _), row in tasks:
            task = str(int(row.get("task", -1)))
            if "seconds" in row:
                busy.add_metric([name, cid, task], row["seconds"])
            if "pending" in row:
                pending.add_metric([name, cid, task], row["pending"])
        yield busy
        yield pending
        if self._max_spout_pending is not None:
            yield _gauge(
                "statefulbolts_max_spout_pending",
                "topology.max.spout.pending: tuple trees (or txids) in flight per spout task.",
                name,
                self._max_spout_pending,
            )

    def _sizes_family(self, name: str) -> Iterator[Metric]:
        if self._sizes is None:
            return
        family = GaugeMetricFamily(
            "statefulbolts_checkpoint_size_bytes",
            "Bytes of state changes the component's tasks wrote in its last checkpoint.",
            labels=["topology", "component"],
        )
        for cid, kept in sorted(self._sizes().items()):
            if kept:
                family.add_metric([name, cid], kept[-1].size)
        yield family

    def _state_keys_family(self, name: str) -> Iterator[Metric]:
        if self._state_keys is None:
            return
        family = GaugeMetricFamily(
            "statefulbolts_state_keys",
            "Committed keys of the component's state (all its tasks), at the last count.",
            labels=["topology", "component"],
        )
        for cid, kept in sorted(self._state_keys().items()):
            if kept and kept[-1].keys is not None:
                family.add_metric([name, cid], kept[-1].keys)
        yield family

    def _transactions(self, obs: Observation, name: str) -> Iterator[Metric]:
        stats = obs.stats
        done = CounterMetricFamily(
            "statefulbolts_transactions",
            "Transactions (Spark jobs of the protocol) recorded, by action and outcome.",
            labels=["topology", "action", "outcome"],
        )
        for (action, ok), n in sorted(stats.outcomes.items()):
            done.add_metric([name, action, "ok" if ok else "failed"], n)
        yield done
        durations = HistogramMetricFamily(
            "statefulbolts_transaction_duration_seconds",
            "Seconds each transaction took, from its job's start to its end, by action.",
            labels=["topology", "action"],
        )
        for action, histogram in sorted(stats.durations.items()):
            buckets = [(_bound(b), n) for b, n in histogram.cumulative()]
            durations.add_metric([name, action], buckets, histogram.sum)
        yield durations
        recoveries = CounterMetricFamily(
            "statefulbolts_recoveries",
            "Recovery steps: recovery transactions by action, and failed transactions (RETRY).",
            labels=["topology", "kind"],
        )
        for kind, n in sorted(stats.recovery_counts.items()):
            recoveries.add_metric([name, kind], n)
        yield recoveries

    def _components_families(self, obs: Observation, name: str) -> Iterator[Metric]:
        counters = obs.components
        ids = self._components + sorted(set(counters) - set(self._components))
        for what in _TUPLES:
            family = CounterMetricFamily(
                f"statefulbolts_tuples_{what}",
                f"Tuples {what} per component.",
                labels=["topology", "component"],
            )
            for cid in ids:
                family.add_metric([name, cid], counters.get(cid, {}).get(what, 0))
            yield family
        seconds = CounterMetricFamily(
            "statefulbolts_execute_seconds",
            "Seconds the component's tasks ran (divide by executed tuples for the latency).",
            labels=["topology", "component"],
        )
        errors = CounterMetricFamily(
            "statefulbolts_reported_errors",
            "Errors in the component: report_error calls, task attempts that failed though "
            "Spark's retry survived them, and transactions that failed in it.",
            labels=["topology", "component"],
        )
        dead = CounterMetricFamily(
            "statefulbolts_tuples_dead_lettered",
            "Poison tuples the component raised on, taken out of the topology as dead letters.",
            labels=["topology", "component"],
        )
        for cid in ids:
            seconds.add_metric([name, cid], counters.get(cid, {}).get("seconds", 0.0))
            errors.add_metric([name, cid], counters.get(cid, {}).get("errors", 0))
            dead.add_metric([name, cid], counters.get(cid, {}).get("dead_lettered", 0))
        yield seconds
        yield errors
        yield dead
        yield from _registered(counters, name)
        lag = GaugeMetricFamily(
            "statefulbolts_spout_lag",
            "Entries a spout's source holds that the topology has not acked yet.",
            labels=["topology", "component"],
        )
        for cid, value in sorted(obs.spout_lags.items()):
            lag.add_metric([name, cid], value)
        yield lag
        if obs.partition_lags:
            parts = GaugeMetricFamily(
                "statefulbolts_spout_partition_lag",
                "Records of a partition after the partitioned spout's committed position.",
                labels=["topology", "component", "partition"],
            )
            for cid, lags in sorted(obs.partition_lags.items()):
                for partition, value in sorted(lags.items()):
                    parts.add_metric([name, cid, partition], value)
            yield parts
        if obs.spout_gaps:
            gaps = CounterMetricFamily(
                "statefulbolts_spout_gaps",
                "Jumps a partitioned spout's readers made past records their source lost.",
                labels=["topology", "component"],
            )
            for cid, value in sorted(obs.spout_gaps.items()):
                gaps.add_metric([name, cid], value)
            yield gaps

    def _protocol(self, obs: Observation, name: str) -> Iterator[Metric]:
        up = GaugeMetricFamily(
            "statefulbolts_topology_up",
            "1 for the topology's current state (running, idle, failed, stopped).",
            labels=["topology", "state"],
        )
        for state in STATES:
            up.add_metric([name, state], 1 if obs.state == state else 0)
        yield up
        progress = obs.progress
        if progress.pending_trees is not None:
            yield _gauge(
                "statefulbolts_pending_tuple_trees",
                "Spout tuples whose trees are not acked yet (live roots).",
                name,
                progress.pending_trees,
            )
        if progress.committed_txid is not None:
            yield _gauge(
                "statefulbolts_committed_txid",
                "The last transaction id committed.",
                name,
                progress.committed_txid,
            )
        dead = obs.status.get("dead_letters")
        if isinstance(dead, dict):
            yield _gauge(
                "statefulbolts_dead_letters",
                "Dead-letter records the topology's store holds (statefulbolts deadletter list).",
                name,
                int(dead.get("held") or 0),
            )

    def _backend(self, obs: Observation, name: str) -> Iterator[Metric]:
        errors = CounterMetricFamily(
            "statefulbolts_state_backend_errors",
            "State backend errors the driver met (in a job, or in its own state calls).",
            labels=["topology"],
        )
        errors.add_metric([name], obs.backend_errors)
        yield errors
        outage = CounterMetricFamily(
            "statefulbolts_state_backend_outage_seconds",
            "Seconds the state backend was down, from a first failure to the success after.",
            labels=["topology"],
        )
        outage.add_metric([name], obs.outage_seconds)
        yield outage
        yield _gauge(
            "statefulbolts_state_backend_down",
            "1 while the state backend is down.",
            name,
            1 if obs.backend_down else 0,
        )


def _registered(counters: Mapping[str, Mapping[str, float]], name: str) -> Iterator[Metric]:
    """A counter family per metric the components' tasks registered (``metric.<name>``)."""
    found: dict[str, list[tuple[str, float]]] = {}
    for cid, row in sorted(counters.items()):
        for key, value in row.items():
            if key.startswith(METRIC_PREFIX):
                found.setdefault(key.removeprefix(METRIC_PREFIX), []).append((cid, value))
    for metric, values in sorted(found.items()):
        family = CounterMetricFamily(
            f"statefulbolts_{metric}",
            f"{metric}: counted by the component's tasks (statefulbolts.metrics).",
            labels=["topology", "component"],
        )
        for cid, value in values:
            family.add_metric([name, cid], value)
        yield family


def _gauge(metric: str, doc: str, name: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(metric, doc, labels=["topology"])
    family.add_metric([name], value)
    return family
