"""Step 6: new tasks get empty state committed at ``T``, so their first check finds it.

A protocol that checks every task against its record before it runs one (the checkpoint's
lost-store check) would take a new task's empty store for a lost one; ``check_and_settle``
returns the committed txid ``T`` the others hold, and each new task is given an empty image
committed at ``T``. A namespace that holds anything is left as it is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from recovery.evolve._plan import EvolutionPlan
from statefulbolts.state import open_image

__all__ = ["give_empty", "give_namespaces"]


def give_namespaces(conf: Mapping[str, Any], plan: EvolutionPlan, txid: int) -> None:
    """Every task of a new component gets a namespace committed at ``txid``."""
    for change in plan.changes:
        if change.stored_as is not None:
            continue
        tasks = range(change.new.parallelism)
        give_empty(conf, [str(plan.task(change, t)) for t in tasks], txid)


def give_empty(conf: Mapping[str, Any], namespaces: Iterable[str], txid: int) -> None:
    """Commit an empty image at ``txid`` in each of ``namespaces`` that holds nothing at all."""
    for ns in namespaces:
        state = open_image(conf, ns, True)
        if state.stored_txids() == (None, None):
            state.replace_stored(txid, (), None, {})
