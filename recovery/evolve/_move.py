"""Step 5, staging: a component's stored state copied to its new layout, every map of it.

Rescaled, re-laid out, renamed or migrated alike, with its windows and timers when the
protocol keeps them (``_windows``, ``_timers``). Each entry goes where the component's
``LayoutRule`` sends it (``statefulbolts.state``), read through the bolt's ``grouping_key`` when
it defines one, and through its ``migrate_state`` / ``migrate_states`` hook when its
``state_version`` changed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from recovery.evolve._operation import staging_namespace
from recovery.evolve._plan import Change, EvolutionPlan
from recovery.evolve._progress import StoredProgress
from recovery.evolve._timers import move_timers
from recovery.evolve._wanted import overrides
from recovery.evolve._windows import move_windows
from statefulbolts.namespaces import TaskNamespace
from statefulbolts.state import LayoutRule, stage
from statefulbolts.timers import uses_timers

__all__ = ["move_component"]


def _identity(key: Any) -> Any:
    return key


def _rule_for(change: Change, bolt: Any, maps: bool, label: str) -> LayoutRule:
    assert change.old is not None  # noqa: S101 - only stored components move
    grouping_key = (
        bolt.grouping_key if bolt is not None and overrides(bolt, "grouping_key") else _identity
    )
    return LayoutRule(change.old, change.new, grouping_key, maps, label)


def _transform(bolt: Any, old_version: int) -> tuple[Any, Any]:
    """The bolt's migration hook: ``(per entry, whole state)``, one of them or neither."""
    if overrides(bolt, "migrate_states"):
        return None, lambda items: bolt.migrate_states(items, old_version)
    if overrides(bolt, "migrate_state"):
        return lambda key, value: bolt.migrate_state(key, value, old_version), None
    return None, None


def _maps_of(plan: EvolutionPlan, stored_as: str) -> list[str | None]:
    found = plan.found.get(stored_as, [])
    return sorted({ns.map for ns in found}, key=lambda m: m or "")


def move_component(
    conf: Mapping[str, Any],
    plan: EvolutionPlan,
    change: Change,
    bolt: Any,
    progress: StoredProgress,
    txid: int | None,
) -> tuple[list[tuple[str, str]], list[str], int]:
    """Stage one component (every map of it): ``(swap pairs, namespaces to drop, entries)``.

    ``txid`` is the committed txid the protocol settled at (``check_and_settle``).
    """
    assert change.stored_as is not None and change.old is not None  # noqa: S101
    label = f"component {change.component!r} of {plan.label}"
    rule = _rule_for(change, bolt, maps=progress.per_map, label=label)
    p = change.new.parallelism
    pairs: list[tuple[str, str]] = []
    drop: list[str] = []
    entries = 0
    version_change = change.old.state_version != change.new.state_version
    transform, whole = (
        _transform(bolt, change.old.state_version) if version_change else (None, None)
    )
    # A task's own namespace, or (per map) each map stored; a map never written moves nothing.
    maps = _maps_of(plan, change.stored_as) or ([] if progress.per_map else [None])
    for map_name in maps:
        old_nss = [ns for ns in plan.found.get(change.stored_as, []) if ns.map == map_name] or [
            TaskNamespace(plan.prefix, change.stored_as, t, map_name)
            for t in range(change.old.parallelism)
        ]
        sources = [(ns.task, str(ns)) for ns in old_nss]
        finals = [TaskNamespace(plan.prefix, change.component, t, map_name) for t in range(p)]
        targets = {ns.task: staging_namespace(plan.prefix, ns) for ns in finals}
        records = progress.records(conf, sources, rule, p)
        done = stage(
            conf,
            system=progress.system,
            sources=sources,
            targets=targets,
            rule=rule,
            committed_txid=progress.staged_txid(conf, [ns for _, ns in sources], txid),
            check=rule.check,
            decode_keys=rule.decodes,
            unique=rule.unique,
            transform=transform,
            whole=whole,
            skip=records.skip,
            extra=records.extra,
            label=label,
        )
        entries += done.total
        pairs.extend((targets[ns.task], str(ns)) for ns in finals)
        keep = {str(ns) for ns in finals}
        drop.extend(ns for _, ns in sources if ns not in keep)
    if progress.task_records:
        window_pairs, window_drop = move_windows(conf, plan, change, txid)
        pairs += window_pairs
        drop += window_drop
        if change.stored_as in plan.timers or uses_timers(bolt):
            timer_pairs, timer_drop = move_timers(conf, plan, change, rule, txid)
            pairs += timer_pairs
            drop += timer_drop
    return pairs, drop, entries
