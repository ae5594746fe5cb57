"""Starting on stored state of another shape: rescale, rename, migrate, or refuse, never orphan.

A topology's committed state is only right for the layout that wrote it (see
``statefulbolts.state.ComponentShape``). Before a topology starts, ``evolve`` compares the
shape stored with its state (``<prefix>$shape``) with the shape the topology asks for
(``Wanted``), and brings the stored state to it or refuses:

1. Read the record and list what the store holds under the prefix. No record but stored
   namespaces: state committed before the record existed (*legacy*, laid out by
   ``hash % parallelism``): its shape is read off the namespaces.
2. Finish an operation a crash interrupted (``_operation``): one whose swap had begun is
   completed from its staging copies (``statefulbolts.state`` ``swap``); one still staging is
   discarded (its sources are intact) and planned again.
3. Plan, per component (``plan_evolution``): renamed (``topology.state.renames``), rescaled
   (parallelism, key groups), re-laid out (legacy to key groups, another grouping), migrated
   (``state_version``), added, or orphaned (stored, but in no component of the topology).
   Refused, naming the component, what is stored, what was asked and the fix: another
   serializer, a lower state version, a higher one without a migration hook (or one the
   protocol cannot migrate), an orphan (unless ``topology.state.allow.orphaned``), any change
   under ``topology.state.evolve = refuse``, a new parallelism for a windowed bolt whose
   windows are open (``_windows``).
4. The stored tasks are checked against the protocol's record of its progress, and, if state
   must move, a transaction left half-way is settled first, as the protocol's recovery would
   (``StoredProgress.check_and_settle``): a store that lost committed state stops the start,
   and every task then holds the same committed txid ``T``.
5. Move: record the operation (phase ``staging``), stage every component's new namespaces
   (``_move``), record phase ``swapping`` with everything the swap needs, swap, and write the
   new shape. Staging refuses an entry a layout cannot place (a key outside its task's key
   groups: the bolt does not key its state by its grouped fields) before anything is swapped.
   A component's timers and windows, when its protocol keeps them, are staged and swapped with
   its state (``_timers``, ``_windows``).
6. Give new components (and the new tasks of a data-free rescale) namespaces committed at
   ``T``, so the lost-store check of their first task finds what it expects; the same for
   the timers and windows of a component whose code became a ``TimerBolt`` or a windowed
   bolt (nothing of theirs was stored yet).

``evolve`` knows no protocol: how a protocol lays out its tasks' state and records its progress
is its own, and its driver passes it in (``StoredProgress``, ``_progress``; implemented by
``checkpoint.progress`` and ``statefulbolts.transactional.progress``). The modules, one concern
each: ``_wanted`` (what a topology asks for), ``_plan`` (the plan's types), ``_shape`` (step 3),
``_rename``, ``_windows``, ``_timers``, ``_move`` (step 5's staging), ``_operation`` (the
record of a change under way, its phases, the swap), ``_give`` (step 6), ``_evolve`` (the
steps in order).
"""

from recovery.evolve._evolve import EvolutionReport, evolve
from recovery.evolve._operation import OperationPhase
from recovery.evolve._plan import Change, EvolutionPlan
from recovery.evolve._progress import StagedRecords, StoredProgress
from recovery.evolve._shape import plan_evolution
from recovery.evolve._wanted import Wanted, partitioning_of, wanted_shapes

__all__ = [
    "Change",
    "EvolutionPlan",
    "EvolutionReport",
    "OperationPhase",
    "StagedRecords",
    "StoredProgress",
    "Wanted",
    "evolve",
    "partitioning_of",
    "plan_evolution",
    "wanted_shapes",
]
