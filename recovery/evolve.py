"""Starting on stored state of another shape: rescale, rename, migrate, or refuse, never orphan.

A topology's committed state is only right for the layout that wrote it (see
``statefulbolts.state.ComponentShape``). Before a topology starts, ``evolve`` compares the
shape stored with its state (``<prefix>$shape``) with the shape the topology asks for
(``Wanted``), and brings the stored state to it or refuses:

1. Read the record and list what the store holds under the prefix. No record but stored
   namespaces: state committed before the record existed (*legacy*, laid out by
   ``hash % parallelism``): its shape is read off the namespaces.
2. Finish an operation a crash interrupted: one whose swap had begun is completed from its
   staging copies (``statefulbolts.state`` ``swap``); one still staging is discarded (its
   sources are intact) and planned again.
3. Plan, per component (``plan_evolution``): renamed (``topology.state.renames``), rescaled
   (parallelism, key groups), re-laid out (legacy to key groups, another grouping), migrated
   (``state_version``), added, or orphaned (stored, but in no component of the topology).
   Refused, naming the component, what is stored, what was asked and the fix: another
   serializer, a lower state version, a higher one without a migration hook, an orphan (unless
   ``topology.state.allow.orphaned``), any change under ``topology.state.evolve = refuse``, a
   new parallelism for a windowed bolt whose windows are open (see "Windows" below).
4. A checkpointed topology's stored tasks are checked against its checkpoint
   (``checkpoint.check_stored_txids``): a store that lost committed state stops the start. If
   state must move, a transaction left half-way is settled first, as recovery would (ROLLBACK of
   PREPARING(t), COMMIT of COMMITTING(t), without user hooks), so that every task holds the
   same committed txid ``T``.
5. Move: record the operation (phase ``staging``), stage every component's new namespaces,
   record phase ``swapping`` with everything the swap needs, swap, and write the new shape.
   Staging refuses an entry a layout cannot place (a key outside its task's key groups: the
   bolt does not key its state by its grouped fields) before anything is swapped. A
   component's timers (``<component>-<task>/$timers``) are staged and swapped with its state,
   each to the task its key now goes to (``_move_timers``).
6. Give new components (and the new tasks of a data-free rescale) namespaces committed at
   ``T``, so the lost-store check of their first task finds what it expects; the same for
   the timers and windows of a component whose code became a ``TimerBolt`` or a windowed
   bolt (nothing of theirs was stored yet).

A transactional topology (``checkpointed`` False) has no checkpoint to settle: its committers'
maps store a txid beside each value and move as they are.

Windows: a windowed bolt's task keeps its open windows in a framework record beside its state
(``statefulbolts.namespaces.window_namespace``, ``T/$window/<component>-<task>``), checked and
settled with the tasks in step 4. They follow their component: renamed with it, task for task
(staged and swapped as in step 5), and dropped with it (``recovery.offline.drop``). They do
not split: a task's windows hold the tuples of every key it was sent, under one trigger and
one watermark, so moving part of them to another task would change which tuples meet in a
window. A new parallelism is therefore refused while any of the component's windows holds a
tuple (``statefulbolts.windowing.holds_window_tuples``); with every window closed, the windows
of tasks it no longer has are dropped, and step 6 gives its new tasks windows committed at
``T``.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from checkpoint import TX_STATE_KEY, CheckPointState, TxPhase, check_stored_txids
from providers import KeyValueState, StateFactory, StateLostError, get_provider
from recovery.faults import KillPoint
from statefulbolts.errors import StateEvolutionError
from statefulbolts.listeners import NO_FAULTS, FaultListener
from statefulbolts.namespaces import (
    TaskNamespace,
    record_namespace,
    timers_namespace,
    transactional_id_of,
    window_namespace,
    window_prefix,
)
from statefulbolts.state import (
    ComponentShape,
    LayoutError,
    LayoutRule,
    Partitioning,
    StoredShape,
    empty,
    open_image,
    read_shape,
    serializers_of,
    shape_namespace,
    stage,
    swap,
    write_shape,
)
from statefulbolts.streams import GroupingKind
from statefulbolts.timers import (
    TimeDomain,
    stored_watermark,
    timer_of_entry,
    timer_records,
    uses_timers,
)
from statefulbolts.topology import CHECKPOINT_COMPONENT_ID, CHECKPOINT_STREAM_ID
from statefulbolts.windowing import WindowedBoltExecutor, holds_window_tuples

__all__ = [
    "Change",
    "EvolutionPlan",
    "EvolutionReport",
    "Wanted",
    "evolve",
    "partitioning_of",
    "plan_evolution",
    "wanted_shapes",
]

log = logging.getLogger(__name__)

STAGING = "evolve"  # staging namespaces: <prefix>$evolve/<component>-<task>[/<map>]
RECORD_KEY = "$record"  # an OpaqueMap's record in a transactional map (see transactional)
_GLOBALISH = frozenset({GroupingKind.GLOBAL})


# --------------------------------------------------------------------------- what is wanted
def partitioning_of(spec: Any) -> tuple[Partitioning, int]:
    """How a component's state is spread over its tasks, from its data inputs' groupings.

    Returns ``(partitioning, key arity)``; the arity (grouped fields per key) is 0 unless keyed.
    """
    groupings = [i.grouping for i in spec.inputs if i.source.stream_id != CHECKPOINT_STREAM_ID]
    kinds = {g.kind for g in groupings}
    if groupings and kinds == {GroupingKind.FIELDS}:
        arities = {len(g.fields) for g in groupings}
        if len(arities) == 1:
            return Partitioning.KEYED, arities.pop()
        return Partitioning.PER_TASK, 0
    if groupings and kinds <= _GLOBALISH:
        return Partitioning.GLOBAL, 0
    if groupings and kinds == {GroupingKind.ALL}:
        return Partitioning.REPLICATED, 0
    return Partitioning.PER_TASK, 0


@dataclass(frozen=True)
class Wanted:
    """The shape a topology asks for, per stateful component, and the bolts (their hooks)."""

    shapes: Mapping[str, ComponentShape]
    bolts: Mapping[str, Any] = field(default_factory=dict)


def wanted_shapes(
    components: Mapping[str, Any],
    stateful: Iterable[str],
    key_groups: Mapping[str, int],
    conf: Mapping[str, Any],
) -> Wanted:
    """The ``Wanted`` of a topology: its ``stateful`` components as they are declared."""
    serializers = serializers_of(conf)
    shapes: dict[str, ComponentShape] = {}
    bolts: dict[str, Any] = {}
    for cid in sorted(stateful):
        spec = components[cid]
        partitioning, arity = partitioning_of(spec)
        version = getattr(spec.obj, "state_version", 1)
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            msg = f"component {cid!r}: state_version must be an int of 1 or more, got {version!r}"
            raise StateEvolutionError(msg)
        shapes[cid] = ComponentShape(
            parallelism=spec.parallelism,
            partitioning=partitioning,
            key_groups=key_groups[cid] if partitioning is Partitioning.KEYED else None,
            key_arity=arity,
            serializers=serializers,
            state_version=version,
        )
        if spec.obj is not None:
            bolts[cid] = spec.obj
    return Wanted(shapes, bolts)


# --------------------------------------------------------------------------- the plan
@dataclass(frozen=True)
class Change:
    """One wanted component against what is stored for it."""

    component: str
    stored_as: str | None  # None: nothing stored (a new component)
    old: ComponentShape | None
    new: ComponentShape
    reasons: tuple[str, ...] = ()
    moves: bool = False

    def describe(self) -> str:
        """``count: parallelism 2 -> 3`` and the like, for logs and the command line."""
        if self.old is None:
            return f"{self.component}: new, {self.new.describe()}"
        if not self.reasons:
            return f"{self.component}: unchanged, {self.new.describe()}"
        return f"{self.component}: " + "; ".join(self.reasons)


@dataclass
class EvolutionPlan:
    """What ``evolve`` will do (or why it refuses)."""

    prefix: str
    label: str
    stored: StoredShape | None
    legacy: bool
    changes: list[Change]
    orphans: dict[str, ComponentShape]
    refusals: list[str]
    found: dict[str, list[TaskNamespace]]
    # A checkpointed topology's stored windows, per component (prefix ``window_prefix``).
    windows: dict[str, list[TaskNamespace]] = field(default_factory=dict)
    # component -> its tasks that hold timers (``<component>-<task>/$timers``)
    timers: dict[str, list[TaskNamespace]] = field(default_factory=dict)

    @property
    def moves(self) -> list[Change]:
        """The changes whose stored state must move."""
        return [c for c in self.changes if c.moves]

    def describe(self) -> list[str]:
        """One line per component, then the orphans and refusals."""
        lines = [c.describe() for c in self.changes]
        lines += [
            f"{cid}: stored, not in the topology ({s.describe()})"
            for cid, s in self.orphans.items()
        ]
        return lines


def _label(prefix: str) -> str:
    transactional_id = transactional_id_of(prefix)
    if transactional_id is not None:
        return f"transactional id {transactional_id!r}"
    return f"topology {prefix[:-1]!r}"


def _list(conf: Mapping[str, Any], prefix: str) -> list[str] | None:
    return get_provider(conf).namespaces(conf, prefix)


def _found(names: Iterable[str], prefix: str, checkpointed: bool) -> dict[str, list[TaskNamespace]]:
    """The task namespaces stored, per component; a task's timers count for the task."""
    found: dict[str, set[TaskNamespace]] = {}
    timers = _timer_tasks(names, prefix) if checkpointed else {}
    for name in names:
        ns = TaskNamespace.parse(prefix, name)
        if ns is None or (ns.map is None) != checkpointed:
            continue
        found.setdefault(ns.component, set()).add(ns)
    for cid, nss in timers.items():
        found.setdefault(cid, set()).update(nss)
    return {cid: sorted(nss) for cid, nss in found.items()}


def _timer_tasks(names: Iterable[str], prefix: str) -> dict[str, list[TaskNamespace]]:
    """The tasks whose timers are stored, per component (checkpointed topologies only)."""
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


def _found_windows(names: Iterable[str], prefix: str) -> dict[str, list[TaskNamespace]]:
    """The stored windows' namespaces of a checkpointed topology, per component."""
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


def _window_refusals(
    conf: Mapping[str, Any],
    changes: Sequence[Change],
    windows: Mapping[str, Sequence[TaskNamespace]],
    label: str,
) -> list[str]:
    """A new parallelism for a component whose windows hold a tuple (module: "Windows")."""
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


def _overrides(bolt: Any, name: str) -> bool:
    """Whether ``bolt``'s class defines ``name`` itself (not the base class's default)."""
    from statefulbolts.components import StatefulBolt

    method = getattr(type(bolt), name, None)
    return method is not None and method is not getattr(StatefulBolt, name, None)


def _compare(
    component: str,
    stored_as: str,
    old: ComponentShape,
    new: ComponentShape,
    bolt: Any,
    checkpointed: bool,
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
                f"{_kind(bolt)} declares {new.state_version}, an older one: a bolt cannot read "
                "state written by a newer version of itself; deploy the newer bolt"
            )
        elif not checkpointed:
            refusals.append(
                f"{where}: state_version {old.state_version} -> {new.state_version}: migrating "
                "a committer's maps is not supported; keep state_version, or export, rewrite "
                "and import the maps (statefulbolts state export / import)"
            )
        elif not (_overrides(bolt, "migrate_state") or _overrides(bolt, "migrate_states")):
            refusals.append(
                f"{where}: its state is stored at state_version {old.state_version}, and "
                f"{_kind(bolt)} declares {new.state_version} without a migration: define "
                "migrate_state(key, value, from_version) (per key) or migrate_states(items, "
                f"from_version) (the whole state) on the bolt, or set state_version back to "
                f"{old.state_version}"
            )
        elif _overrides(bolt, "migrate_states") and new.partitioning not in (
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


def _kind(bolt: Any) -> str:
    if bolt is None:
        return "the bolt"
    return f"{type(bolt).__module__}.{type(bolt).__qualname__}"


def plan_evolution(
    conf: Mapping[str, Any],
    prefix: str,
    wanted: Wanted,
    *,
    checkpointed: bool,
    renames: Mapping[str, str] | None = None,
    allow_orphaned: bool = False,
    stored: StoredShape | None = None,
    listed: list[str] | None = None,
) -> EvolutionPlan:
    """Compare the stored shape with ``wanted`` (step 3 of the module docstring); no writes.

    ``stored`` and ``listed`` are read from the store when not given.
    """
    label = _label(prefix)
    if stored is None:
        stored = read_shape(StateFactory.get_system_state(shape_namespace(prefix), conf))  # type: ignore[arg-type]
    names = _list(conf, prefix) if listed is None else listed
    found = _found(names or [], prefix, checkpointed)
    windows = _found_windows(names or [], prefix) if checkpointed else {}
    timers = _timer_tasks(names or [], prefix) if checkpointed else {}
    legacy = stored is None
    if stored is not None:
        shapes = dict(stored.components)
    else:
        shapes = {}
        for cid, nss in found.items():
            tasks = 1 + max(ns.task for ns in nss)
            want = wanted.shapes.get(cid) or wanted.shapes.get((renames or {}).get(cid, ""))
            if not checkpointed and want is not None:
                # A committer task that never wrote has no map: the tasks found may be fewer.
                tasks = max(tasks, want.parallelism)
            shapes[cid] = _legacy_shape(tasks, want)
    # A mapping applies once the topology has the new id and no longer the old one: it may be
    # set ahead of the deploy that renames, and stays harmless after it.
    renamed = {
        old: new
        for old, new in (renames or {}).items()
        if old in shapes and new in wanted.shapes and old not in wanted.shapes
    }
    refusals: list[str] = []
    for old, new in renamed.items():
        if new in shapes:
            refusals.append(
                f"{label}: topology.state.renames maps {old!r} to {new!r}, but state of both is "
                f"stored; drop one first (statefulbolts state drop --component ...)"
            )
    by_new = {new: old for old, new in renamed.items() if new not in shapes}
    changes: list[Change] = []
    for cid, want in sorted(wanted.shapes.items()):
        stored_as = cid if cid in shapes else by_new.get(cid)
        if stored_as is None:
            changes.append(Change(cid, None, None, want))
            continue
        change, refused = _compare(
            cid, stored_as, shapes[stored_as], want, wanted.bolts.get(cid), checkpointed, label
        )
        changes.append(change)
        refusals.extend(refused)
    refusals.extend(_window_refusals(conf, changes, windows, label))
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


def _identity(key: Any) -> Any:
    return key


def _rule_for(change: Change, bolt: Any, maps: bool, label: str) -> LayoutRule:
    assert change.old is not None  # noqa: S101 - only stored components move
    grouping_key = (
        bolt.grouping_key if bolt is not None and _overrides(bolt, "grouping_key") else _identity
    )
    return LayoutRule(change.old, change.new, grouping_key, maps, label)


# --------------------------------------------------------------------------- the checkpoint
def _checkpoint_state(conf: Mapping[str, Any], prefix: str) -> KeyValueState:
    state = StateFactory.get_system_state(f"{prefix}{CHECKPOINT_COMPONENT_ID}-0", conf)
    assert isinstance(state, KeyValueState)  # noqa: S101 - every provider's state is one
    return state


def _stored_tasks(plan: EvolutionPlan) -> list[str]:
    """Every task namespace the stored shape (or, legacy, the store) has."""
    names: list[str] = []
    shapes = plan.stored.components if plan.stored is not None else None
    if shapes is None:
        names = [str(ns) for nss in plan.found.values() for ns in nss]
        names.extend(timers_namespace(str(ns)) for nss in plan.timers.values() for ns in nss)
        return names
    for cid, shape in shapes.items():
        names.extend(str(TaskNamespace(plan.prefix, cid, t)) for t in range(shape.parallelism))
    # A task's timers are prepared and committed with its state: checked and settled with it.
    names.extend(timers_namespace(str(ns)) for nss in plan.timers.values() for ns in nss)
    return names


def check_and_settle(conf: Mapping[str, Any], plan: EvolutionPlan, *, settle: bool) -> int | None:
    """Step 4: check every stored task against the checkpoint; settle it if ``settle``.

    Returns the committed txid ``T`` every task then holds (``None``: nothing committed).

    Raises:
        StateLostError: a task's store does not hold what the checkpoint says it must, or the
            checkpoint's own record is gone while tasks hold committed state.
    """
    cp_state = _checkpoint_state(conf, plan.prefix)
    saved = cp_state.get(TX_STATE_KEY)
    tasks = _stored_tasks(plan) + [str(ns) for nss in plan.windows.values() for ns in nss]
    states = {ns: StateFactory.get_system_state(ns, conf) for ns in tasks}
    if saved is None:
        for ns, state in states.items():
            if isinstance(state, KeyValueState) and state.supports_stored_image:
                committed, _ = state.stored_txids()
                if committed is not None and committed >= 0:
                    msg = (
                        f"{plan.label}: state {ns!r} in {state.location} holds committed txid "
                        f"{committed}, but the checkpoint's record "
                        f"({plan.prefix}{CHECKPOINT_COMPONENT_ID}-0) is gone: the store lost "
                        "part of the topology's state. The topology stops rather than start "
                        "over; restore the store, or delete the topology's state on purpose "
                        "(statefulbolts state drop)"
                    )
                    raise StateLostError(msg)
        return None
    cur = CheckPointState.from_value(saved)
    action = cur.next_action(True)
    for state in states.values():
        check_stored_txids(state, action, cur.txid)
    if not settle or cur.phase is TxPhase.COMMITTED:
        return cur.txid if cur.txid >= 0 else None
    if cur.phase is TxPhase.PREPARING:
        for state in states.values():
            state.rollback()
        settled = CheckPointState(cur.txid - 1, TxPhase.COMMITTED)
    else:
        for state in states.values():
            state.commit(cur.txid)
        settled = CheckPointState(cur.txid, TxPhase.COMMITTED)
    cp_state.put(TX_STATE_KEY, settled.to_value())
    cp_state.commit()
    log.info("%s: settled %s as %s before moving its state", plan.label, cur, settled)
    return settled.txid if settled.txid >= 0 else None


# --------------------------------------------------------------------------- running it
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


def _staging_prefix(prefix: str) -> str:
    """``<prefix>$evolve/``: where the staged copies of task namespaces are."""
    return f"{record_namespace(prefix, STAGING)}/"


def _staging(prefix: str, target: TaskNamespace) -> str:
    return str(target.with_prefix(_staging_prefix(prefix)))


def _maps_of(plan: EvolutionPlan, stored_as: str) -> list[str | None]:
    found = plan.found.get(stored_as, [])
    return sorted({ns.map for ns in found}, key=lambda m: m or "")


def _opaque_records(
    conf: Mapping[str, Any], sources: Sequence[tuple[int, str]], rule: LayoutRule, p: int
) -> Callable[[], Mapping[int, Iterable[tuple[Any, Any]]]]:
    """The record each new task of a transactional map gets (see ``OpaqueMap``).

    A record ``[t, keys]`` names the keys a commit attempt of ``t`` wrote; only the newest
    ``t`` can matter (older ones are committed). Each new task gets the keys of that ``t`` it
    now owns.
    """

    def records() -> Mapping[int, Iterable[tuple[Any, Any]]]:
        found: list[tuple[int, list[Any]]] = []
        for _, ns in sources:
            plain = open_image(conf, ns, True).get_committed(RECORD_KEY)
            if isinstance(plain, list | tuple) and len(plain) == 2 and isinstance(plain[1], list):
                found.append((int(plain[0]), list(plain[1])))
        if not found:
            return {}
        newest = max(t for t, _ in found)
        out: dict[int, list[Any]] = {task: [] for task in range(p)}
        for t, keys in found:
            if t != newest:
                continue
            for key in keys:
                for task in rule(-1, [key]):
                    out[task].append(key)
        return {task: [(RECORD_KEY, [newest, keys])] for task, keys in out.items()}

    return records


def _transform(bolt: Any, old_version: int) -> tuple[Any, Any]:
    if _overrides(bolt, "migrate_states"):
        return None, lambda items: bolt.migrate_states(items, old_version)
    if _overrides(bolt, "migrate_state"):
        return lambda key, value: bolt.migrate_state(key, value, old_version), None
    return None, None


def _move_component(
    conf: Mapping[str, Any],
    plan: EvolutionPlan,
    change: Change,
    bolt: Any,
    checkpointed: bool,
    txid: int | None,
) -> tuple[list[tuple[str, str]], list[str], int]:
    """Stage one component (every map of it): ``(swap pairs, namespaces to drop, entries)``."""
    assert change.stored_as is not None and change.old is not None  # noqa: S101
    system = not checkpointed
    label = f"component {change.component!r} of {plan.label}"
    rule = _rule_for(change, bolt, maps=not checkpointed, label=label)
    p = change.new.parallelism
    pairs: list[tuple[str, str]] = []
    drop: list[str] = []
    entries = 0
    version_change = change.old.state_version != change.new.state_version
    transform, whole = (
        _transform(bolt, change.old.state_version) if version_change else (None, None)
    )
    for map_name in _maps_of(plan, change.stored_as) or ([None] if checkpointed else []):
        old_nss = [ns for ns in plan.found.get(change.stored_as, []) if ns.map == map_name] or [
            TaskNamespace(plan.prefix, change.stored_as, t, map_name)
            for t in range(change.old.parallelism)
        ]
        sources = [(ns.task, str(ns)) for ns in old_nss]
        finals = [TaskNamespace(plan.prefix, change.component, t, map_name) for t in range(p)]
        targets = {ns.task: _staging(plan.prefix, ns) for ns in finals}
        committed = txid
        if not checkpointed:
            txids = [open_image(conf, ns, True).stored_txids()[0] for _, ns in sources]
            known = [t for t in txids if t is not None]
            committed = max(known) if known else None
        done = stage(
            conf,
            system=system,
            sources=sources,
            targets=targets,
            rule=rule,
            committed_txid=committed,
            check=rule.check,
            decode_keys=rule.decodes,
            unique=rule.unique,
            transform=transform,
            whole=whole,
            skip=(lambda key: key == RECORD_KEY) if not checkpointed else None,
            extra=None if checkpointed else _opaque_records(conf, sources, rule, p),
            label=label,
        )
        entries += done.total
        pairs.extend((targets[ns.task], str(ns)) for ns in finals)
        keep = {str(ns) for ns in finals}
        drop.extend(ns for _, ns in sources if ns not in keep)
    if checkpointed:
        window_pairs, window_drop = _move_windows(conf, plan, change, txid)
        pairs += window_pairs
        drop += window_drop
    if checkpointed and (change.stored_as in plan.timers or uses_timers(bolt)):
        timer_pairs, timer_drop = _move_timers(conf, plan, change, rule, txid)
        pairs += timer_pairs
        drop += timer_drop
    return pairs, drop, entries


def _same_task(source_task: int, key: Any) -> Sequence[int]:
    return (source_task,)


def _move_windows(
    conf: Mapping[str, Any], plan: EvolutionPlan, change: Change, txid: int | None
) -> tuple[list[tuple[str, str]], list[str]]:
    """Stage a moving component's windows (module: "Windows"): ``(swap pairs, to drop)``.

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
        staging = window_namespace(target.with_prefix(_staging_prefix(plan.prefix)))
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


def _move_timers(
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
    finals = [
        TaskNamespace(plan.prefix, change.component, t) for t in range(change.new.parallelism)
    ]
    targets = {ns.task: timers_namespace(_staging(plan.prefix, ns)) for ns in finals}
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


def _operation(
    phase: str,
    txid: int | None,
    pairs: Sequence[tuple[str, str]],
    drop: Sequence[str],
    final: StoredShape,
) -> dict[str, Any]:
    return {
        "phase": phase,
        "txid": txid,
        "pairs": [list(p) for p in pairs],
        "drop": list(drop),
        "final": final.to_value(),
        "started": time.time(),
    }


def _shape_state(conf: Mapping[str, Any], prefix: str) -> KeyValueState:
    state = StateFactory.get_system_state(shape_namespace(prefix), conf)
    assert isinstance(state, KeyValueState)  # noqa: S101
    return state


def _finish_swap(
    conf: Mapping[str, Any],
    prefix: str,
    operation: Mapping[str, Any],
    system: bool,
    faults: FaultListener,
) -> StoredShape:
    """Swap from the recorded operation's staging copies; write its final shape."""
    pairs = [(str(a), str(b)) for a, b in operation["pairs"]]
    for i, (staging_ns, target_ns) in enumerate(pairs):
        swap(conf, system=system, staging=staging_ns, target=target_ns)
        faults.on_driver(KillPoint.EVOLVE_MID_SWAP, i)
    empty(conf, system=system, namespaces=[str(ns) for ns in operation["drop"]])
    empty(conf, system=system, namespaces=[staging_ns for staging_ns, _ in pairs])
    final = StoredShape.from_value(operation["final"])
    write_shape(_shape_state(conf, prefix), final)
    return final


def _discard_staging(conf: Mapping[str, Any], prefix: str, system: bool) -> None:
    empty(conf, system=system, namespaces=_list(conf, _staging_prefix(prefix)) or [])


def evolve(
    conf: Mapping[str, Any],
    prefix: str,
    wanted: Wanted,
    *,
    checkpointed: bool,
    renames: Mapping[str, str] | None = None,
    mode: str = "auto",
    allow_orphaned: bool = False,
    faults: FaultListener = NO_FAULTS,
    command: str | None = None,
) -> EvolutionReport:
    """Bring the stored state under ``prefix`` to ``wanted`` (see the module docstring).

    ``command`` is what a person runs to do it offline, for the refusal under ``mode``
    "refuse".

    Raises:
        StateEvolutionError: the state cannot take the shape, or ``mode`` is "refuse" and it
            would have to change; nothing was changed.
        StateLostError: a checkpointed topology's store lost committed state.
    """
    started = time.perf_counter()
    system = not checkpointed
    label = _label(prefix)
    shape_state = _shape_state(conf, prefix)
    stored = read_shape(shape_state)
    resumed = False
    if stored is not None and stored.operation is not None:
        op = stored.operation
        if op.get("phase") == "swapping":
            log.warning("%s: finishing a change of its stored state a crash interrupted", label)
            stored = _finish_swap(conf, prefix, op, system, faults)
            resumed = True
        else:
            log.warning("%s: discarding the staging of a change a crash interrupted", label)
            _discard_staging(conf, prefix, system)
            stored = StoredShape(stored.components, None)
            write_shape(shape_state, stored)
    plan = plan_evolution(
        conf,
        prefix,
        wanted,
        checkpointed=checkpointed,
        renames=renames,
        allow_orphaned=allow_orphaned,
        stored=stored,
        listed=_list(conf, prefix),
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
    txid = check_and_settle(conf, plan, settle=bool(moves)) if checkpointed else None
    final = StoredShape({**{c.component: c.new for c in plan.changes}, **plan.orphans}, None)
    report = EvolutionReport(label, plan.describe(), resumed=resumed)
    if moves:
        shape_now = plan.stored or StoredShape({}, None)
        write_shape(shape_state, StoredShape(shape_now.components, {"phase": "staging"}))
        pairs: list[tuple[str, str]] = []
        drop: list[str] = []
        try:
            for change in moves:
                bolt = wanted.bolts.get(change.component)
                got_pairs, got_drop, entries = _move_component(
                    conf, plan, change, bolt, checkpointed, txid
                )
                pairs += got_pairs
                drop += got_drop
                report.moved[change.component] = entries
        except LayoutError as exc:
            _discard_staging(conf, prefix, system)
            write_shape(shape_state, StoredShape(shape_now.components, None))
            raise StateEvolutionError(str(exc)) from exc
        operation = _operation("swapping", txid, pairs, drop, final)
        write_shape(shape_state, StoredShape(shape_now.components, operation))
        faults.on_driver(KillPoint.EVOLVE_STAGED, 0)
        _finish_swap(conf, prefix, operation, system, faults)
    if checkpointed and txid is not None:
        _give_namespaces(conf, plan, txid)
        _give_windows(conf, plan, wanted, txid)
        _give_timers(conf, plan, wanted, txid)
    if final != plan.stored or plan.legacy:
        write_shape(shape_state, final)
    report.seconds = time.perf_counter() - started
    for line in report.lines:
        log.info("%s: %s", label, line)
    return report


def _give_namespaces(conf: Mapping[str, Any], plan: EvolutionPlan, txid: int) -> None:
    """Step 6: every task of a new component gets a namespace committed at ``txid``."""
    for change in plan.changes:
        if change.stored_as is not None:
            continue
        tasks = range(change.new.parallelism)
        _give_empty(conf, [str(_task(plan, change, t)) for t in tasks], txid)


def _give_windows(conf: Mapping[str, Any], plan: EvolutionPlan, wanted: Wanted, txid: int) -> None:
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
        _give_empty(conf, [window_namespace(_task(plan, change, t)) for t in tasks], txid)


def _give_timers(conf: Mapping[str, Any], plan: EvolutionPlan, wanted: Wanted, txid: int) -> None:
    """Step 6 for timers: a ``TimerBolt`` none of whose tasks has timers stored gets them.

    A new component, or a stored one whose code became a ``TimerBolt``: each task gets a
    timers namespace committed at ``txid``, which its first INITSTATE checks as it checks the
    task's state. A component that already had timers got its new tasks' from the move
    (``_move_timers``); one of its tasks that lost them is the lost-store check's to report.
    """
    for change in plan.changes:
        if not uses_timers(wanted.bolts.get(change.component)):
            continue
        if plan.timers.get(change.stored_as or ""):
            continue
        tasks = range(change.new.parallelism)
        _give_empty(conf, [timers_namespace(str(_task(plan, change, t))) for t in tasks], txid)


def _task(plan: EvolutionPlan, change: Change, task: int) -> TaskNamespace:
    return TaskNamespace(plan.prefix, change.component, task)


def _give_empty(conf: Mapping[str, Any], namespaces: Iterable[str], txid: int) -> None:
    """Commit an empty image at ``txid`` in each of ``namespaces`` that holds nothing at all."""
    for ns in namespaces:
        state = open_image(conf, ns, True)
        if state.stored_txids() == (None, None):
            state.replace_stored(txid, (), None, {})
