"""What the page shows, as JSON: one ``Observation`` of a runner, shaped for drawing.

``snapshot`` is the body of ``/api/snapshot``; the page polls it and redraws. Lists come newest
first and are cut to what a page shows (``SHOWN``); counts cover the whole run. Every number is
finite (Starlette's JSON refuses NaN).

Given the dashboard's ``LiveFigures`` view, each component row also carries its ``tasks``
(one row each), its ``rates`` and ``capacity`` per window, and the body the topology's
``rates``, its ``backpressure`` and its ``history``, oldest first, for the charts: the last
``HISTORY`` transactions' durations, each stateful component's state size (``state_keys``:
``[at, txid, committed keys]``, keys ``null`` when the provider cannot count them) and its
checkpoint sizes (``checkpoint_sizes``: ``[at, txid, bytes]`` of state changes the tasks sent
back, known for a driver-owned provider only).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from statefulbolts.metrics import METRIC_PREFIX

if TYPE_CHECKING:
    from statefulbolts.runtime import Observation, StateKeys, StateWrite, TransactionInfo

__all__ = ["HISTORY", "SHOWN", "snapshot"]

# Transactions, errors and recoveries sent to the page, newest first.
SHOWN = 60
# Points of each history chart sent to the page, oldest first.
HISTORY = 200

_COUNTERS = ("executed", "emitted", "acked", "failed", "replayed", "errors", "dead_lettered")


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _component_rows(
    obs: Observation, nodes: Sequence[dict[str, Any]], live: Mapping[str, Any] | None
) -> list[dict[str, Any]]:
    """One row per component of the picture (counters 0 until it ran), then any other."""
    counters = obs.components
    per_component = live["components"] if live is not None else {}
    windows = list(live["windows"]) if live is not None else []
    rows = []
    known = [n["id"] for n in nodes]
    for cid in known + sorted(set(counters) - set(known)):
        row = counters.get(cid, {})
        node = next((n for n in nodes if n["id"] == cid), {})
        executed = row.get("executed", 0)
        seconds = row.get("seconds", 0.0)
        figures = per_component.get(cid, {})
        rows.append(
            {
                "id": cid,
                "kind": node.get("kind", ""),
                "parallelism": node.get("parallelism"),
                **{k: int(row.get(k, 0)) for k in _COUNTERS},
                "seconds": round(seconds, 6),
                # Mean task time per executed tuple (Storm's execute latency).
                "latency_ms": _finite(1000.0 * seconds / executed) if executed else None,
                "lag": obs.spout_lags.get(cid),
                # Metrics its tasks registered (``statefulbolts.metrics``): a sink's records.
                "metrics": {
                    k.removeprefix(METRIC_PREFIX): v
                    for k, v in sorted(row.items())
                    if k.startswith(METRIC_PREFIX)
                },
                "rates": figures.get("rates", dict.fromkeys(windows)),
                "capacity": figures.get("capacity", dict.fromkeys(windows)),
                "tasks": figures.get("tasks", []),
            }
        )
    return rows


def snapshot(
    obs: Observation,
    nodes: Sequence[dict[str, Any]],
    spark_ui: str | None,
    *,
    live: Mapping[str, Any] | None = None,
    pressure: Mapping[str, Any] | None = None,
    sizes: Mapping[str, Sequence[StateWrite]] | None = None,
    state_keys: Mapping[str, Sequence[StateKeys]] | None = None,
) -> dict[str, Any]:
    """The page's view of ``obs``; ``nodes`` are the picture's (``topology_graph``).

    Args:
        obs: the runner's observation.
        nodes: the picture's nodes.
        spark_ui: the Spark UI's URL, or ``None``.
        live: ``LiveFigures.view()``: rates, tasks and capacity.
        pressure: ``backpressure(...)``.
        sizes: ``Stats.checkpoint_sizes()``.
        state_keys: ``Stats.key_counts()``.
    """
    stats = obs.stats
    outcomes = [
        {"action": action, "outcome": "ok" if ok else "failed", "count": n}
        for (action, ok), n in sorted(stats.outcomes.items())
    ]
    transactions = [t.as_dict() for t in reversed(stats.transactions[-SHOWN:])]
    committed = sum(n for (action, ok), n in stats.outcomes.items() if action == "COMMIT" and ok)
    return {
        "topology": obs.name,
        "kind": obs.kind,
        "state": obs.state,
        "stale": obs.stale,
        "started_at": obs.started_at,
        "at": obs.at,
        "uptime_seconds": round(max(0.0, obs.at - obs.started_at), 3),
        "phase": obs.progress.phase,
        "committed_txid": obs.progress.committed_txid,
        "pending_trees": obs.progress.pending_trees,
        "status": obs.status,
        "spark_ui": spark_ui,
        "components": _component_rows(obs, nodes, live),
        "transactions": transactions,
        "outcomes": outcomes,
        "committed": committed,
        "failed_transactions": sum(n for (_, ok), n in stats.outcomes.items() if not ok),
        "errors": [e.as_dict() for e in reversed(stats.errors[-SHOWN:])],
        "recoveries": [r.as_dict() for r in reversed(stats.recoveries[-SHOWN:])],
        "recovery_counts": dict(sorted(stats.recovery_counts.items())),
        "backend": {
            "errors": obs.backend_errors,
            "outage_seconds": round(obs.outage_seconds, 3),
            "down": obs.backend_down,
        },
        "spout_lag": dict(sorted(obs.spout_lags.items())),
        # A partitioned spout's lag per partition, and the gaps its readers jumped.
        "partition_lag": {cid: dict(p) for cid, p in sorted(obs.partition_lags.items())},
        "spout_gaps": dict(sorted(obs.spout_gaps.items())),
        "dead_letters": _dead_letters(obs),
        "error": obs.error,
        "rates": _rates(live),
        "backpressure": dict(pressure) if pressure is not None else None,
        "history": {
            "durations": [_duration(t) for t in stats.transactions[-HISTORY:]],
            "state_keys": {
                cid: [[k.at, k.txid, k.keys] for k in list(kept)[-HISTORY:]]
                for cid, kept in sorted((state_keys or {}).items())
            },
            "checkpoint_sizes": {
                cid: [[w.at, w.txid, w.size] for w in list(kept)[-HISTORY:]]
                for cid, kept in sorted((sizes or {}).items())
            },
        },
    }


def _rates(live: Mapping[str, Any] | None) -> dict[str, Any]:
    """The windows (seconds), the seconds each covers so far, the totals per second."""
    if live is None:
        return {"windows": {}, "spans": {}, "total": {}}
    return {"windows": live["windows"], "spans": live["spans"], "total": live["total"]}


def _duration(t: TransactionInfo) -> dict[str, Any]:
    """One transaction as a point of the duration chart."""
    return {
        "at": t.at,
        "txid": t.txid,
        "action": t.action or "BATCH",
        "seconds": round(t.seconds, 6),
        "ok": t.ok,
        "phases": {k: round(v, 6) for k, v in t.phases.items()},
    }


def _dead_letters(obs: Observation) -> dict[str, Any]:
    """The policy, the records held, the per-component counts and the last few records."""
    found = obs.status.get("dead_letters") or {}
    return {
        "policy": found.get("policy"),
        "held": int(found.get("held") or 0),
        "dead_lettered": dict(sorted((found.get("dead_lettered") or {}).items())),
        "replaying": int(found.get("replaying") or 0),
        "last": list(found.get("last") or []),
    }
