"""What the page shows, as JSON: one ``Observation`` of a runner, shaped for drawing.

``snapshot`` is the body of ``/api/snapshot``; the page polls it and redraws. Lists come newest
first and are cut to what a page shows (``SHOWN``); counts cover the whole run. Every number is
finite (Starlette's JSON refuses NaN).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from statefulbolts.runtime import Observation

__all__ = ["SHOWN", "snapshot"]

# Transactions, errors and recoveries sent to the page, newest first.
SHOWN = 60

_COUNTERS = ("executed", "emitted", "acked", "failed", "replayed", "errors", "dead_lettered")


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _component_rows(obs: Observation, nodes: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per component of the picture (counters 0 until it ran), then any other."""
    counters = obs.components
    rows = []
    known = [n["id"] for n in nodes]
    for cid in known + sorted(set(counters) - set(known)):
        row = counters.get(cid, {})
        node = next((n for n in nodes if n["id"] == cid), {})
        executed = row.get("executed", 0)
        seconds = row.get("seconds", 0.0)
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
            }
        )
    return rows


def snapshot(
    obs: Observation, nodes: Sequence[dict[str, Any]], spark_ui: str | None
) -> dict[str, Any]:
    """The page's view of ``obs``; ``nodes`` are the picture's (``topology_graph``)."""
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
        "components": _component_rows(obs, nodes),
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
        "dead_letters": _dead_letters(obs),
        "error": obs.error,
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
