"""A component's timers when its state moves: each timer goes where its key's state goes.

A ``TimerBolt`` task keeps its timers beside its state (``<component>-<task>/$timers``,
``statefulbolts.timers``), prepared and committed with it: they are checked and settled with
the task (step 4), staged and swapped with its state (``move_timers``), and a component whose
code became a ``TimerBolt`` gets them committed at ``T`` (``give_timers``, step 6).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from recovery.evolve._give import give_empty
from recovery.evolve._operation import staging_namespace
from recovery.evolve._plan import Change, EvolutionPlan
from recovery.evolve._wanted import Wanted
from statefulbolts.namespaces import TaskNamespace, timers_namespace
from statefulbolts.state import LayoutError, LayoutRule, open_image, stage
from statefulbolts.timers import (
    TimeDomain,
    stored_watermark,
    timer_of_entry,
    timer_records,
    uses_timers,
)

__all__ = ["give_timers", "move_timers", "timer_tasks"]


def timer_tasks(names: Iterable[str], prefix: str) -> dict[str, list[TaskNamespace]]:
    """The tasks whose timers are stored, per component."""
    found: dict[str, list[TaskNamespace]] = {}
    for name in names:
        ns = TaskNamespace.parse(prefix, name)
        if (
            ns is not None
            and ns.map is not None
            and timers_namespace(str(ns.with_map(None))) == name
        ):
            found.setdefault(ns.component, []).append(ns.with_map(None))
    return {cid: sorted(nss) for cid, nss in found.items()}


def move_timers(
    conf: Mapping[str, Any],
    plan: EvolutionPlan,
    change: Change,
    rule: LayoutRule,
    txid: int | None,
) -> tuple[list[tuple[str, str]], list[str]]:
    """Stage one component's timers as its state moves: ``(swap pairs, namespaces to drop)``.

    Each timer ``[domain, at, key]`` goes where the state of ``key`` goes (the same rule:
    its key group's owner, for a keyed component), refused alike when its key is not where the
    old layout would have put it. Every new task gets a timers namespace committed at ``txid``,
    empty or not, since its first INITSTATE checks it as it checks the task's state. Each gets:

    - per domain, the bound ``next:*`` of the timers it now holds: the earliest of them, the
      tightest bound that stays no later than every merged timer (the old bounds may be
      lower, after deletions, and only cost a scan);
    - the watermark: the minimum over the old tasks (none if one of them has none). A key's
      event-time timers fired up to its old task's watermark; under a higher one taken from
      another task, its timers between the two would fire at the next transaction, before the
      input that was to advance them, and its records would turn late. Under the minimum no
      timer fires early, and nothing that fired fires again (it was deleted when it fired).
    """
    assert change.stored_as is not None and change.old is not None  # noqa: S101
    label = f"timers of component {change.component!r} of {plan.label}"
    old_tasks = {ns.task for ns in plan.timers.get(change.stored_as, [])}
    old_tasks.update(range(change.old.parallelism))
    sources = [
        (t, timers_namespace(str(TaskNamespace(plan.prefix, change.stored_as, t))))
        for t in sorted(old_tasks)
    ]
    watermarks = [stored_watermark(open_image(conf, ns, True)) for _, ns in sources]
    known = [w for w in watermarks if w is not None]
    watermark = min(known) if known and len(known) == len(watermarks) else None
    finals = [plan.task(change, t) for t in range(change.new.parallelism)]
    targets = {ns.task: timers_namespace(staging_namespace(plan.prefix, ns)) for ns in finals}
    bounds: dict[int, dict[TimeDomain, Any]] = {t: {} for t in targets}

    def route(source: int, stored_key: Any) -> Sequence[int]:
        timer = timer_of_entry(stored_key)
        assert timer is not None  # noqa: S101 - the records are skipped
        domain, at, key = timer
        tasks = rule(source, key)
        for task in tasks:
            if task in bounds and at < bounds[task].get(domain, math.inf):
                bounds[task][domain] = at
        return tasks

    def check(source: int, stored_key: Any) -> None:
        timer = timer_of_entry(stored_key)
        assert timer is not None  # noqa: S101 - the records are skipped
        try:
            rule.check(source, timer[2])
        except LayoutError as exc:
            msg = f"a {timer[0].value}-time timer at {timer[1]} ms: {exc}"
            raise LayoutError(msg) from exc

    stage(
        conf,
        system=True,
        sources=sources,
        targets=targets,
        rule=route,
        committed_txid=txid,
        check=check,
        skip=lambda stored_key: timer_of_entry(stored_key) is None,
        extra=lambda: {t: timer_records(bounds[t], watermark) for t in targets},
        label=label,
    )
    pairs = [(targets[ns.task], timers_namespace(str(ns))) for ns in finals]
    keep = {final for _, final in pairs}
    drop = [ns for _, ns in sources if ns not in keep]
    return pairs, drop


def give_timers(conf: Mapping[str, Any], plan: EvolutionPlan, wanted: Wanted, txid: int) -> None:
    """Step 6 for timers: a ``TimerBolt`` none of whose tasks has timers stored gets them.

    A new component, or a stored one whose code became a ``TimerBolt``: each task gets a
    timers namespace committed at ``txid``, which its first INITSTATE checks as it checks the
    task's state. A component that already had timers got its new tasks' from the move
    (``move_timers``); one of its tasks that lost them is the lost-store check's to report.
    """
    for change in plan.changes:
        if not uses_timers(wanted.bolts.get(change.component)):
            continue
        if plan.timers.get(change.stored_as or ""):
            continue
        tasks = range(change.new.parallelism)
        give_empty(conf, [timers_namespace(str(plan.task(change, t))) for t in tasks], txid)
