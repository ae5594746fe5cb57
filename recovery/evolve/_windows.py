"""A windowed bolt's open windows when its component changes: follow it, never split.

A windowed bolt's task keeps its open windows in a framework record beside its state
(``statefulbolts.namespaces.window_namespace``, ``T/$window/<component>-<task>``), checked and
settled with the tasks (step 4). They follow their component: renamed with it, task for task
(staged and swapped with its state), and dropped with it (``statefulbolts.offline.drop``). They
do not split: a task's windows hold the tuples of every key it was sent, under one trigger and
one watermark, so moving part of them to another task would change which tuples meet in a
window. A new parallelism is therefore refused while any of the component's windows holds a
tuple (``statefulbolts.windowing.holds_window_tuples``); with every window closed, the windows
of tasks it no longer has are dropped, and its new tasks get windows committed at ``T``
(step 6).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from recovery.evolve._give import give_empty
from recovery.evolve._operation import staging_prefix
from recovery.evolve._plan import Change, EvolutionPlan
from recovery.evolve._wanted import Wanted
from statefulbolts.namespaces import TaskNamespace, window_namespace, window_prefix
from statefulbolts.state import open_image, stage
from statefulbolts.windowing import WindowedBoltExecutor, holds_window_tuples

__all__ = ["found_windows", "give_windows", "move_windows", "window_refusals"]


def found_windows(names: Iterable[str], prefix: str) -> dict[str, list[TaskNamespace]]:
    """The stored windows' namespaces under ``prefix``, per component."""
    below = window_prefix(prefix)
    found: dict[str, list[TaskNamespace]] = {}
    for name in names:
        ns = TaskNamespace.parse(below, name)
        if ns is not None and ns.map is None:
            found.setdefault(ns.component, []).append(ns)
    return {cid: sorted(nss) for cid, nss in found.items()}


def _holds_windows(conf: Mapping[str, Any], namespace: str) -> bool:
    """Whether a windows' namespace holds open windows (a tuple), or a prepared delta."""
    state = open_image(conf, namespace, True)
    if state.stored_txids()[1] is not None:
        return True
    return holds_window_tuples(state.decode_key(ekey) for ekey, _ in state.scan_committed())


def window_refusals(
    conf: Mapping[str, Any],
    changes: Sequence[Change],
    windows: Mapping[str, Sequence[TaskNamespace]],
    label: str,
) -> list[str]:
    """A new parallelism for a component whose windows hold a tuple (module docstring)."""
    refusals: list[str] = []
    for change in changes:
        old, stored_as = change.old, change.stored_as
        if old is None or stored_as is None or old.parallelism == change.new.parallelism:
            continue
        held = [str(ns) for ns in windows.get(stored_as, ()) if _holds_windows(conf, str(ns))]
        if not held:
            continue
        refusals.append(
            f"component {change.component!r} of {label}: its windows are open (stored in "
            f"{', '.join(held)}), and parallelism {old.parallelism} -> "
            f"{change.new.parallelism} was asked. A windowed bolt task's windows hold the "
            "tuples of every key it was sent, under one trigger and watermark: they cannot be "
            "split or merged between tasks without changing which tuples meet in a window. "
            f"Keep parallelism {old.parallelism} for {change.component!r}; or, to start it "
            "over without its open windows (their tuples are lost) and without its state, "
            f"stop the topology and run: statefulbolts state drop --component {stored_as}"
        )
    return refusals


def _same_task(source_task: int, key: Any) -> Sequence[int]:
    return (source_task,)


def move_windows(
    conf: Mapping[str, Any], plan: EvolutionPlan, change: Change, txid: int | None
) -> tuple[list[tuple[str, str]], list[str]]:
    """Stage a moving component's windows: ``(swap pairs, namespaces to drop)``.

    Renamed: each task's windows are staged under the new id, the same task. The windows of a
    task the component no longer has are dropped (the plan refused unless they hold no tuple).
    """
    assert change.stored_as is not None  # noqa: S101 - only stored components move
    pairs: list[tuple[str, str]] = []
    drop: list[str] = []
    label = f"component {change.component!r} of {plan.label}"
    for ns in plan.windows.get(change.stored_as, []):
        source = str(ns)
        if ns.task >= change.new.parallelism:
            drop.append(source)
            continue
        if change.stored_as == change.component:
            continue
        target = TaskNamespace(plan.prefix, change.component, ns.task)
        staging = window_namespace(target.with_prefix(staging_prefix(plan.prefix)))
        stage(
            conf,
            system=True,
            sources=[(ns.task, source)],
            targets={ns.task: staging},
            rule=_same_task,
            committed_txid=txid,
            decode_keys=False,
            label=f"the windows of {label}",
        )
        pairs.append((staging, window_namespace(target)))
        drop.append(source)
    return pairs, drop


def give_windows(conf: Mapping[str, Any], plan: EvolutionPlan, wanted: Wanted, txid: int) -> None:
    """Step 6 for windows: a windowed component's new tasks get windows committed at ``txid``.

    New tasks (of a new component, or beyond the old parallelism), or every task of a stored
    component whose code became a windowed bolt (none of its tasks has windows stored). A task
    that had windows and lost them is the lost-store check's to report, not this step's to
    paper over.
    """
    for change in plan.changes:
        stored = plan.windows.get(change.stored_as or "")
        windowed = isinstance(wanted.bolts.get(change.component), WindowedBoltExecutor)
        if not windowed and not stored:
            continue
        first_new = 0 if change.old is None or not stored else change.old.parallelism
        tasks = range(first_new, change.new.parallelism)
        give_empty(conf, [window_namespace(plan.task(change, t)) for t in tasks], txid)
