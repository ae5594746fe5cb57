"""Load a topology named ``MODULE:ATTR``: what ``statefulbolts run`` and the state tool call.

``ATTR`` is a topology (``StormTopology``, ``TransactionalTopology``), a builder of one, or a
function that takes no arguments and returns either. Anything else is refused with one line
saying what ``ATTR`` is and what was expected, before it is called.

Example:
    >>> topology = load_topology("examples.wordcount:topology")
    >>> sorted(topology.bolts)
    ['count', 'split']
    >>> load_topology("examples.wordcount:build")
    Traceback (most recent call last):
    ...
    statefulbolts.errors.TopologyError: examples.wordcount:build takes arguments (sentences, \
parallelism=2, start=0); expected a StormTopology, a TransactionalTopology or their builder, \
or a function of no arguments returning one (e.g. examples.wordcount:topology)
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from statefulbolts.errors import TopologyError
from statefulbolts.topology import StormTopology, TopologyBuilder
from statefulbolts.transactional import TransactionalTopology

__all__ = ["EXAMPLE_SPEC", "load_topology"]

# A spec that works, named in the refusals.
EXAMPLE_SPEC = "examples.wordcount:topology"
_EXPECTED_VALUE = "expected a StormTopology, a TransactionalTopology or their builder"
_EXPECTED = f"{_EXPECTED_VALUE}, or a function of no arguments returning one (e.g. {EXAMPLE_SPEC})"


def load_topology(spec: str) -> StormTopology | TransactionalTopology:
    """Import ``module:attr`` and make the topology it names.

    Raises:
        TopologyError: ``spec`` is not ``MODULE:ATTR``, the module cannot be imported, it has no
            ``attr``, or ``attr`` is neither a topology, a builder, nor a function callable
            with no arguments that returns one.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        msg = f"expected MODULE:ATTR (e.g. {EXAMPLE_SPEC}), got {spec!r}"
        raise TopologyError(msg)
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        msg = f"cannot import module {module_name!r} for {spec!r}: {exc}"
        raise TopologyError(msg) from exc
    try:
        found = getattr(module, attr)
    except AttributeError:
        msg = f"{spec}: module {module_name!r} has no attribute {attr!r}; {_EXPECTED}"
        raise TopologyError(msg) from None
    made = _topology_of(found)
    if made is None and callable(found):
        _check_no_arguments(spec, found)
        returned = found()
        made = _topology_of(returned)
        if made is None:
            msg = f"{spec} returned {type(returned).__name__}; {_EXPECTED_VALUE}"
            raise TopologyError(msg)
    if made is None:
        msg = f"{spec} is {_kind(found)}; {_EXPECTED}"
        raise TopologyError(msg)
    return made


def _topology_of(value: Any) -> StormTopology | TransactionalTopology | None:
    """``value`` as a topology when it is one or a builder of one, else ``None``."""
    if isinstance(value, TopologyBuilder):
        value = value.create_topology()
    if isinstance(value, StormTopology | TransactionalTopology):
        return value
    return None


def _check_no_arguments(spec: str, func: Any) -> None:
    try:
        signature = inspect.signature(func)
    except (TypeError, ValueError):
        return  # no signature to read (a builtin): calling it tells
    try:
        signature.bind()
    except TypeError:
        params = ", ".join(_parameter(p) for p in signature.parameters.values())
        msg = f"{spec} takes arguments ({params}); {_EXPECTED}"
        raise TopologyError(msg) from None


def _parameter(param: inspect.Parameter) -> str:
    """A parameter as the call would spell it (``sentences``, ``start=0``, ``*args``)."""
    stars: dict[inspect._ParameterKind, str] = {param.VAR_POSITIONAL: "*", param.VAR_KEYWORD: "**"}
    star = stars.get(param.kind, "")
    default = "" if param.default is param.empty else f"={param.default!r}"
    return f"{star}{param.name}{default}"


def _kind(value: Any) -> str:
    if value is None:
        return "None"
    return f"a value of type {type(value).__module__}.{type(value).__qualname__}"
