"""Step 3, planning: each wanted component's shape against the stored one; no writes.

Per component: renamed (``_rename``), rescaled (parallelism, key groups), re-laid out (legacy to
key groups, another grouping), migrated (``state_version``), added, or orphaned (stored, but in
no component of the topology). A refusal names the component, what is stored, what was asked
and the fix.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from recovery.evolve._operation import shape_state
from recovery.evolve._plan import Change, EvolutionPlan, label_of, stored_names
from recovery.evolve._progress import StoredProgress
from recovery.evolve._rename import renames_of
from recovery.evolve._timers import timer_tasks
from recovery.evolve._wanted import Wanted, bolt_name, overrides
from recovery.evolve._windows import found_windows, window_refusals
from statefulbolts.namespaces import TaskNamespace
from statefulbolts.state import ComponentShape, Partitioning, StoredShape, read_shape

__all__ = ["plan_evolution"]


def plan_evolution(
    conf: Mapping[str, Any],
    prefix: str,
    wanted: Wanted,
    *,
    progress: StoredProgress,
    renames: Mapping[str, str] | None = None,
    allow_orphaned: bool = False,
    stored: StoredShape | None = None,
    listed: list[str] | None = None,
) -> EvolutionPlan:
    """Compare the stored shape with ``wanted`` (step 3 of ``recovery.evolve``); no writes.

    ``progress`` is the protocol's (``StoredProgress``). ``stored`` and ``listed`` (what the
    provider holds under ``prefix``) are read from the store when not given.
    """
    label = label_of(prefix)
    if stored is None:
        stored = read_shape(shape_state(conf, prefix))
    names = (stored_names(conf, prefix) if listed is None else listed) or []
    found = _found(names, prefix, progress)
    windows = found_windows(names, prefix) if progress.task_records else {}
    timers = timer_tasks(names, prefix) if progress.task_records else {}
    legacy = stored is None
    if stored is not None:
        shapes = dict(stored.components)
    else:
        shapes = {}
        for cid, nss in found.items():
            tasks = 1 + max(ns.task for ns in nss)
            want = wanted.shapes.get(cid) or wanted.shapes.get((renames or {}).get(cid, ""))
            if progress.per_map and want is not None:
                # A task that never wrote has no map: the tasks found may be fewer.
                tasks = max(tasks, want.parallelism)
            shapes[cid] = _legacy_shape(tasks, want)
    renamed = renames_of(renames, shapes, wanted.shapes, label)
    refusals = list(renamed.refusals)
    changes: list[Change] = []
    for cid, want in sorted(wanted.shapes.items()):
        stored_as = cid if cid in shapes else renamed.stored_as.get(cid)
        if stored_as is None:
            changes.append(Change(cid, None, None, want))
            continue
        change, refused = _compare(
            cid, stored_as, shapes[stored_as], want, wanted.bolts.get(cid), progress, label
        )
        changes.append(change)
        refusals.extend(refused)
    refusals.extend(window_refusals(conf, changes, windows, label))
    used = {c.stored_as for c in changes if c.stored_as is not None}
    orphans = {cid: s for cid, s in sorted(shapes.items()) if cid not in used}
    if orphans and not allow_orphaned:
        for cid, s in orphans.items():
            refusals.append(
                f"{label}: state of component {cid!r} is stored ({s.describe()}), and the "
                f"topology has no such stateful component. If it was renamed, map it: "
                f'topology.state.renames {{"{cid}": "<new id>"}} (or statefulbolts state '
                f"rename); to delete it: statefulbolts state drop --component {cid}; to start "
                "anyway and keep it stored: topology.state.allow.orphaned true"
            )
    return EvolutionPlan(
        prefix, label, stored, legacy, changes, orphans, refusals, found, windows, timers
    )


def _found(
    names: Iterable[str], prefix: str, progress: StoredProgress
) -> dict[str, list[TaskNamespace]]:
    """The task namespaces stored, per component; a task's timers count for the task."""
    found: dict[str, set[TaskNamespace]] = {}
    timers = timer_tasks(names, prefix) if progress.task_records else {}
    for name in names:
        ns = TaskNamespace.parse(prefix, name)
        if ns is None or (ns.map is not None) != progress.per_map:
            continue
        found.setdefault(ns.component, set()).add(ns)
    for cid, nss in timers.items():
        found.setdefault(cid, set()).update(nss)
    return {cid: sorted(nss) for cid, nss in found.items()}


def _legacy_shape(tasks: int, wanted: ComponentShape | None) -> ComponentShape:
    """The shape of state committed before shapes were recorded: read off its namespaces."""
    if wanted is None:
        return ComponentShape(tasks, Partitioning.PER_TASK)
    partitioning = wanted.partitioning
    if partitioning is Partitioning.KEYED:
        partitioning = Partitioning.LEGACY
    return ComponentShape(
        tasks,
        partitioning,
        key_groups=None,
        key_arity=wanted.key_arity,
        serializers=wanted.serializers,
        state_version=1,
    )


def _compare(
    component: str,
    stored_as: str,
    old: ComponentShape,
    new: ComponentShape,
    bolt: Any,
    progress: StoredProgress,
    label: str,
) -> tuple[Change, list[str]]:
    reasons: list[str] = []
    refusals: list[str] = []
    where = f"component {component!r} of {label}"
    if stored_as != component:
        reasons.append(f"renamed from {stored_as!r}")
    if old.serializers != new.serializers:
        was = {k: v for k, v in old.serializers if v}
        now = {k: v for k, v in new.serializers if v}
        refusals.append(
            f"{where}: its state was stored with serializers {was or 'msgpack (none set)'}, and "
            f"the provider config now asks for {now or 'msgpack (none set)'}: the stored bytes "
            "would not decode. Set topology.state.provider.config back, or move the state "
            "through statefulbolts state export / import with both configs"
        )
    if old.parallelism != new.parallelism:
        reasons.append(f"parallelism {old.parallelism} -> {new.parallelism}")
    if old.partitioning is Partitioning.LEGACY and new.partitioning is Partitioning.KEYED:
        reasons.append(
            f"layout: hash % {old.parallelism} (before key groups) -> {new.key_groups} key groups"
        )
    elif old.partitioning is not new.partitioning:
        reasons.append(f"partitioning {old.partitioning.value} -> {new.partitioning.value}")
    elif old.partitioning is Partitioning.KEYED and old.key_groups != new.key_groups:
        reasons.append(f"key groups {old.key_groups} -> {new.key_groups}")
    if old.key_arity != new.key_arity and new.partitioning is Partitioning.KEYED:
        reasons.append(f"keyed by {old.key_arity} -> {new.key_arity} fields")
    version_change = old.state_version != new.state_version
    if version_change:
        reasons.append(f"state version {old.state_version} -> {new.state_version}")
        if new.state_version < old.state_version:
            refusals.append(
                f"{where}: its state is stored at state_version {old.state_version}, and "
                f"{bolt_name(bolt)} declares {new.state_version}, an older one: a bolt cannot read "
                "state written by a newer version of itself; deploy the newer bolt"
            )
        elif progress.migration_refused is not None:
            refusals.append(
                f"{where}: state_version {old.state_version} -> {new.state_version}: "
                f"{progress.migration_refused}"
            )
        elif not (overrides(bolt, "migrate_state") or overrides(bolt, "migrate_states")):
            refusals.append(
                f"{where}: its state is stored at state_version {old.state_version}, and "
                f"{bolt_name(bolt)} declares {new.state_version} without a migration: define "
                "migrate_state(key, value, from_version) (per key) or migrate_states(items, "
                f"from_version) (the whole state) on the bolt, or set state_version back to "
                f"{old.state_version}"
            )
        elif overrides(bolt, "migrate_states") and new.partitioning not in (
            Partitioning.KEYED,
            Partitioning.GLOBAL,
        ):
            refusals.append(
                f"{where}: migrate_states rewrites the whole state at once, which can only be "
                f"handed back to tasks by key; this component's state is "
                f"{new.partitioning.value}: define migrate_state(key, value, from_version) instead"
            )
    single = old.parallelism == new.parallelism == 1
    moves = stored_as != component or version_change or (bool(reasons) and not single)
    return Change(component, stored_as, old, new, tuple(reasons), moves), refusals

