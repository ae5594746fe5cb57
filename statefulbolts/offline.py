"""Changing a stopped topology's stored state: rescale, rename, drop, or match a topology.

What a start does by itself (``recovery.evolve``), done ahead, with no Spark: the command line's
``statefulbolts state shape | evolve | rescale | rename | drop``. Stop the topology first:
nothing here can tell whether a driver is running on the state.

Every function takes the scope as ``prefix`` (``T/`` for a checkpointed topology,
``$transactional/I/`` for a transactional id; ``statefulbolts.namespaces``) and returns an
``EvolutionReport`` (``drop``: the namespaces emptied). The prefix says which protocol stored
the state, and so whose ``recovery.StoredProgress`` the change goes through
(``checkpoint.progress``, ``statefulbolts.transactional.progress``): this module sits above
both protocols, with the command line.

Example:
    >>> from providers.memory import InMemoryKeyValueStateProvider as Memory
    >>> from statefulbolts.state import ComponentShape
    >>> keyed = ComponentShape(1, Partitioning.KEYED, key_groups=128, key_arity=1)
    >>> evolve({}, "doc-offline/", Wanted({"count": keyed})).lines
    ['count: new, parallelism 1, keyed by 1 field in 128 key groups, state version 1']
    >>> rescale({}, "doc-offline/", "count", 3).lines
    ['count: parallelism 1 -> 3']
    >>> drop({}, "doc-offline/")
    ['doc-offline/$shape']
    >>> Memory.drop("doc-offline/")
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from checkpoint.progress import CheckpointProgress
from providers import KeyValueState, StateFactory, get_provider
from recovery.evolve import EvolutionPlan, EvolutionReport, StoredProgress, Wanted, wanted_shapes
from recovery.evolve import evolve as evolve_through
from recovery.evolve import plan_evolution as plan_through
from statefulbolts.config import validate_config
from statefulbolts.errors import StateEvolutionError, StateNotFoundError, StateToolError
from statefulbolts.keygroups import component_key_groups
from statefulbolts.listeners import NO_FAULTS, FaultListener
from statefulbolts.namespaces import TaskNamespace, transactional_id_of, window_prefix
from statefulbolts.state import (
    Partitioning,
    StoredShape,
    empty,
    read_shape,
    shape_namespace,
    write_shape,
)
from statefulbolts.topology import StormTopology
from statefulbolts.transactional import TransactionalTopology
from statefulbolts.transactional.progress import TransactionalProgress

__all__ = [
    "drop",
    "evolve",
    "evolve_to_topology",
    "plan_evolution",
    "progress_of",
    "rename",
    "rescale",
    "stored_shape",
    "wanted_of",
]


def progress_of(prefix: str, checkpointed: bool | None = None) -> StoredProgress:
    """The stored progress of the protocol whose state is under ``prefix``.

    ``checkpointed`` says which protocol it is; by default the prefix does (a transactional
    id's is ``$transactional/<id>/``).
    """
    if checkpointed is None:
        checkpointed = transactional_id_of(prefix) is None
    return CheckpointProgress() if checkpointed else TransactionalProgress()


def evolve(
    conf: Mapping[str, Any],
    prefix: str,
    wanted: Wanted,
    *,
    checkpointed: bool | None = None,
    renames: Mapping[str, str] | None = None,
    mode: str = "auto",
    allow_orphaned: bool = False,
    faults: FaultListener = NO_FAULTS,
    command: str | None = None,
) -> EvolutionReport:
    """``recovery.evolve.evolve`` through the protocol's stored progress (``progress_of``)."""
    return evolve_through(
        conf,
        prefix,
        wanted,
        progress=progress_of(prefix, checkpointed),
        renames=renames,
        mode=mode,
        allow_orphaned=allow_orphaned,
        faults=faults,
        command=command,
    )


def plan_evolution(
    conf: Mapping[str, Any],
    prefix: str,
    wanted: Wanted,
    *,
    checkpointed: bool | None = None,
    renames: Mapping[str, str] | None = None,
    allow_orphaned: bool = False,
) -> EvolutionPlan:
    """``recovery.evolve.plan_evolution`` through the protocol's stored progress; no writes."""
    return plan_through(
        conf,
        prefix,
        wanted,
        progress=progress_of(prefix, checkpointed),
        renames=renames,
        allow_orphaned=allow_orphaned,
    )


def stored_shape(conf: Mapping[str, Any], prefix: str) -> StoredShape | None:
    """The shape recorded under ``prefix`` (``None``: none recorded)."""
    state = StateFactory.get_system_state(shape_namespace(prefix), conf)
    assert isinstance(state, KeyValueState)  # noqa: S101 - every provider's state is one
    return read_shape(state)


def _recorded(conf: Mapping[str, Any], prefix: str) -> StoredShape:
    shape = stored_shape(conf, prefix)
    if shape is None:
        msg = (
            f"no stored shape under {prefix!r}: the state was never started by this version (or "
            "there is none). Start the topology once, or run statefulbolts state evolve with "
            "--topology-module, which reads the layout off the topology"
        )
        raise StateNotFoundError(msg)
    return shape


def wanted_of(conf: Mapping[str, Any], topology: StormTopology | TransactionalTopology) -> Wanted:
    """The shape ``topology`` asks for, as its driver would compute it at start."""
    tc = validate_config(conf)
    if isinstance(topology, TransactionalTopology):
        components, stateful = topology.topology.components, topology.commit_phase
    else:
        components = topology.components
        stateful = frozenset(c for c, s in components.items() if s.is_stateful)
    groups = component_key_groups(components, tc.state_max_parallelism, stateful)
    return wanted_shapes(components, stateful, groups, conf)


def evolve_to_topology(
    conf: Mapping[str, Any],
    prefix: str,
    topology: StormTopology | TransactionalTopology,
    *,
    dry_run: bool = False,
) -> EvolutionReport:
    """Bring the stored state to ``topology``'s shape, as its next start would.

    The config's ``topology.state.renames`` and ``topology.state.allow.orphaned`` apply;
    ``topology.state.evolve`` does not (this is the command it names). With ``dry_run``, only
    the plan is returned (``EvolutionReport.moved`` empty), nothing is written.
    """
    tc = validate_config(conf)
    wanted = wanted_of(conf, topology)
    return _run(conf, prefix, wanted, tc.state_renames, tc.state_allow_orphaned, dry_run)


def _run(
    conf: Mapping[str, Any],
    prefix: str,
    wanted: Wanted,
    renames: Mapping[str, str],
    allow_orphaned: bool,
    dry_run: bool,
) -> EvolutionReport:
    if dry_run:
        plan = plan_evolution(conf, prefix, wanted, renames=renames, allow_orphaned=allow_orphaned)
        if plan.refusals:
            raise StateEvolutionError("; ".join(plan.refusals))
        return EvolutionReport(plan.label, plan.describe())
    return evolve(conf, prefix, wanted, renames=renames, allow_orphaned=allow_orphaned)


def rescale(
    conf: Mapping[str, Any],
    prefix: str,
    component: str,
    parallelism: int,
    *,
    dry_run: bool = False,
) -> EvolutionReport:
    """Redistribute ``component``'s committed state over ``parallelism`` tasks.

    Raises:
        StateNotFoundError: no shape is recorded, or none for ``component``.
        StateEvolutionError: the state cannot be redistributed (the message says why).
    """
    shape = _recorded(conf, prefix)
    if component not in shape.components:
        held = ", ".join(sorted(shape.components)) or "none"
        msg = f"no stored state of component {component!r} under {prefix!r}; stored: {held}"
        raise StateNotFoundError(msg)
    old = shape.components[component]
    if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
        msg = f"parallelism must be a positive int, got {parallelism!r}"
        raise StateEvolutionError(msg)
    if old.partitioning is Partitioning.KEYED and old.key_groups and parallelism > old.key_groups:
        msg = (
            f"component {component!r} keeps its state in {old.key_groups} key groups: at most "
            f"{old.key_groups} tasks (topology.state.max.parallelism fixes it when the topology "
            "starts)"
        )
        raise StateEvolutionError(msg)
    shapes = dict(shape.components)
    shapes[component] = old.with_parallelism(parallelism)
    return _run(conf, prefix, Wanted(shapes), {}, False, dry_run)


def rename(
    conf: Mapping[str, Any], prefix: str, old: str, new: str, *, dry_run: bool = False
) -> EvolutionReport:
    """Move ``old``'s stored state to component id ``new``.

    Raises:
        StateNotFoundError: no shape is recorded, or none for ``old``.
        StateEvolutionError: ``new`` is taken, or not a valid component id.
    """
    shape = _recorded(conf, prefix)
    if old not in shape.components:
        held = ", ".join(sorted(shape.components)) or "none"
        msg = f"no stored state of component {old!r} under {prefix!r}; stored: {held}"
        raise StateNotFoundError(msg)
    if not new or "/" in new or new.startswith(("$", "__")):
        msg = f"{new!r} is not a component id (non-empty, no '/', not starting with '$' or '__')"
        raise StateEvolutionError(msg)
    shapes = {(new if cid == old else cid): s for cid, s in shape.components.items()}
    return _run(conf, prefix, Wanted(shapes), {old: new}, False, dry_run)


def drop(conf: Mapping[str, Any], prefix: str, component: str | None = None) -> list[str]:
    """Delete ``component``'s stored state (every task, every map), or everything under ``prefix``.

    A windowed bolt's windows (``statefulbolts.namespaces.window_namespace``) go with it.
    Returns the namespaces emptied. The stored shape forgets the component (with no component
    named, the record goes too). A checkpointed topology dropped whole starts again from nothing.

    Raises:
        StateNotFoundError: nothing is stored for it.
    """
    listed = get_provider(conf).namespaces(conf, prefix)
    if listed is None:
        msg = f"the provider cannot list what it holds under {prefix!r}, so nothing was dropped"
        raise StateToolError(msg)
    system = progress_of(prefix).system
    if component is None:
        names = listed
    else:
        below = (prefix, window_prefix(prefix))
        names = [
            ns
            for ns in listed
            if any(
                (parsed := TaskNamespace.parse(where, ns)) is not None
                and parsed.component == component
                for where in below
            )
        ]
    if not names:
        what = prefix if component is None else f"component {component!r} under {prefix!r}"
        msg = f"nothing is stored for {what}"
        raise StateNotFoundError(msg)
    if component is not None:
        shape = stored_shape(conf, prefix)
        if shape is not None and component in shape.components:
            remaining = {c: s for c, s in shape.components.items() if c != component}
            state = StateFactory.get_system_state(shape_namespace(prefix), conf)
            assert isinstance(state, KeyValueState)  # noqa: S101
            write_shape(state, StoredShape(remaining, shape.operation))
    empty(conf, system=system, namespaces=names)
    return names
