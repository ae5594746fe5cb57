"""The plan: each wanted component against what is stored for it (``Change``, ``EvolutionPlan``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from providers import get_provider
from statefulbolts.namespaces import TaskNamespace, timers_namespace, transactional_id_of
from statefulbolts.state import ComponentShape, StoredShape

__all__ = ["Change", "EvolutionPlan", "label_of", "stored_names"]


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
    # A protocol's stored windows, per component (prefix ``window_prefix``): see ``_windows``.
    windows: dict[str, list[TaskNamespace]] = field(default_factory=dict)
    # component -> its tasks that hold timers (``<component>-<task>/$timers``): see ``_timers``.
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

    def task(self, change: Change, task: int) -> TaskNamespace:
        """Task ``task`` of ``change``'s component, under its wanted id."""
        return TaskNamespace(self.prefix, change.component, task)

    def stored_namespaces(self) -> list[str]:
        """Every stored task's namespace, its timers' and its windows' (step 4 checks them).

        The tasks are the stored shape's, or, with no shape recorded (legacy), the store's.
        """
        names: list[str] = []
        shapes = self.stored.components if self.stored is not None else None
        if shapes is None:
            names = [str(ns) for nss in self.found.values() for ns in nss]
        else:
            for cid, shape in shapes.items():
                names.extend(
                    str(TaskNamespace(self.prefix, cid, t)) for t in range(shape.parallelism)
                )
        # A task's timers are prepared and committed with its state: checked and settled with it.
        names.extend(timers_namespace(str(ns)) for nss in self.timers.values() for ns in nss)
        names.extend(str(ns) for nss in self.windows.values() for ns in nss)
        return names


def label_of(prefix: str) -> str:
    """``topology 'wc'`` or ``transactional id 'words'``: the stored state's name in messages."""
    transactional_id = transactional_id_of(prefix)
    if transactional_id is not None:
        return f"transactional id {transactional_id!r}"
    return f"topology {prefix[:-1]!r}"


def stored_names(conf: Mapping[str, Any], prefix: str) -> list[str] | None:
    """The namespaces the provider holds under ``prefix`` (``None``: it cannot list)."""
    return get_provider(conf).namespaces(conf, prefix)
