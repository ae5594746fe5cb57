"""Running it: ``evolve`` reads, finishes or discards, plans, checks, moves and gives."""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from recovery.evolve._give import give_namespaces
from recovery.evolve._move import move_component
from recovery.evolve._operation import (
    Operation,
    OperationPhase,
    discard_staging,
    finish_swap,
    shape_state,
)
from recovery.evolve._plan import label_of, stored_names
from recovery.evolve._progress import StoredProgress
from recovery.evolve._shape import plan_evolution
from recovery.evolve._timers import give_timers
from recovery.evolve._wanted import Wanted
from recovery.evolve._windows import give_windows
from statefulbolts.errors import StateEvolutionError
from statefulbolts.listeners import NO_FAULTS, FaultListener, KillPoint
from statefulbolts.state import LayoutError, StoredShape, read_shape, write_shape

__all__ = ["EvolutionReport", "evolve"]

log = logging.getLogger(__name__)


@dataclass
class EvolutionReport:
    """What ``evolve`` did."""

    label: str
    lines: list[str]
    moved: dict[str, int] = field(default_factory=dict)  # component -> entries written
    seconds: float = 0.0
    resumed: bool = False

    @property
    def changed(self) -> bool:
        """Whether any stored state moved."""
        return bool(self.moved) or self.resumed


def evolve(
    conf: Mapping[str, Any],
    prefix: str,
    wanted: Wanted,
    *,
    progress: StoredProgress,
    renames: Mapping[str, str] | None = None,
    mode: str = "auto",
    allow_orphaned: bool = False,
    faults: FaultListener = NO_FAULTS,
    command: str | None = None,
) -> EvolutionReport:
    """Bring the stored state under ``prefix`` to ``wanted`` (steps 1 to 6 of the package).

    ``progress`` is the protocol's that stored it (``StoredProgress``). ``command`` is what a
    person runs to do it offline, for the refusal under ``mode`` "refuse".

    Raises:
        StateEvolutionError: the state cannot take the shape, or ``mode`` is "refuse" and it
            would have to change; nothing was changed.
        StateLostError: the store lost committed state (``StoredProgress.check_and_settle``).
    """
    started = time.perf_counter()
    label = label_of(prefix)
    shape = shape_state(conf, prefix)
    stored = read_shape(shape)
    resumed = False
    if stored is not None and stored.operation is not None:
        under_way = Operation.from_value(stored.operation, label)
        if under_way.phase.finishes:
            log.warning("%s: finishing a change of its stored state a crash interrupted", label)
            stored = finish_swap(conf, prefix, under_way, progress.system, faults)
            resumed = True
        else:
            log.warning("%s: discarding the staging of a change a crash interrupted", label)
            discard_staging(conf, prefix, progress.system)
            stored = StoredShape(stored.components, None)
            write_shape(shape, stored)
    plan = plan_evolution(
        conf,
        prefix,
        wanted,
        progress=progress,
        renames=renames,
        allow_orphaned=allow_orphaned,
        stored=stored,
        listed=stored_names(conf, prefix),
    )
    if plan.refusals:
        raise StateEvolutionError("; ".join(plan.refusals))
    moves = plan.moves
    if moves and mode == "refuse":
        what = "; ".join(c.describe() for c in moves)
        how = command or "statefulbolts state evolve"
        msg = (
            f"{label}: the stored state must change to start this topology ({what}), and "
            f"topology.state.evolve is 'refuse'. Change it offline with: {how} (or set "
            "topology.state.evolve to 'auto')"
        )
        raise StateEvolutionError(msg)
    txid = progress.check_and_settle(
        conf, prefix, label, plan.stored_namespaces(), settle=bool(moves)
    )
    final = StoredShape({**{c.component: c.new for c in plan.changes}, **plan.orphans}, None)
    report = EvolutionReport(label, plan.describe(), resumed=resumed)
    if moves:
        shape_now = plan.stored or StoredShape({}, None)
        staging = Operation(OperationPhase.STAGING)
        write_shape(shape, StoredShape(shape_now.components, staging.to_value()))
        pairs: list[tuple[str, str]] = []
        drop: list[str] = []
        try:
            for change in moves:
                bolt = wanted.bolts.get(change.component)
                got_pairs, got_drop, entries = move_component(
                    conf, plan, change, bolt, progress, txid
                )
                pairs += got_pairs
                drop += got_drop
                report.moved[change.component] = entries
        except LayoutError as exc:
            discard_staging(conf, prefix, progress.system)
            write_shape(shape, StoredShape(shape_now.components, None))
            raise StateEvolutionError(str(exc)) from exc
        swapping = Operation.swapping(txid, pairs, drop, final)
        write_shape(shape, StoredShape(shape_now.components, swapping.to_value()))
        faults.on_driver(KillPoint.EVOLVE_STAGED, 0)
        finish_swap(conf, prefix, swapping, progress.system, faults)
    if txid is not None:
        give_namespaces(conf, plan, txid)
        if progress.task_records:
            give_windows(conf, plan, wanted, txid)
            give_timers(conf, plan, wanted, txid)
    if final != plan.stored or plan.legacy:
        write_shape(shape, final)
    report.seconds = time.perf_counter() - started
    for line in report.lines:
        log.info("%s: %s", label, line)
    return report
