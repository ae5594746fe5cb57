"""Load a topology named ``MODULE:FUNCTION``: what ``statefulbolts run`` and the state tool call.

Example:
    >>> topology = load_topology("examples.wordcount:topology")
    >>> sorted(topology.bolts)
    ['count', 'split']
"""

from __future__ import annotations

import importlib

from statefulbolts.errors import TopologyError
from statefulbolts.topology import StormTopology, TopologyBuilder
from statefulbolts.transactional import TransactionalTopology

__all__ = ["load_topology"]


def load_topology(spec: str) -> StormTopology | TransactionalTopology:
    """Import ``module:function`` and call it; it must return a topology or a builder."""
    module_name, sep, func_name = spec.partition(":")
    if not sep or not module_name or not func_name:
        msg = f"expected MODULE:FUNCTION (e.g. examples.wordcount:build), got {spec!r}"
        raise TopologyError(msg)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        msg = f"cannot import module {module_name!r} for {spec!r}: {exc}"
        raise TopologyError(msg) from exc
    func = getattr(module, func_name, None)
    if not callable(func):
        msg = f"{module_name!r} has no callable {func_name!r}"
        raise TopologyError(msg)
    made = func()
    if isinstance(made, TopologyBuilder):
        made = made.create_topology()
    if not isinstance(made, StormTopology | TransactionalTopology):
        msg = (
            f"{spec} returned {type(made).__name__}; expected a StormTopology, a "
            "TransactionalTopology or their builder"
        )
        raise TopologyError(msg)
    return made
