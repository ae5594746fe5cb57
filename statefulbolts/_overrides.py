"""Checking, when a component is declared, that its overridden methods can be called as ours are.

The framework calls a component's methods with the parameters of the base class it subclasses:
a ``BasicBolt``'s ``prepare(conf, context)``, a ``Bolt``'s and a ``StatefulBolt``'s
``prepare(conf, context, collector)``, a ``Spout``'s ``open(conf, context, collector)``. A
method written for another base (a ``BasicBolt`` given a ``Bolt``'s ``prepare``) used to fail
only when a task first called it, on an executor, once per Spark attempt and transaction retry.
``check_overrides`` finds it when the topology is declared: for each public method a framework
class defines and the user's class overrides, the override must accept the positional arguments
the framework's definition requires (``inspect.signature(...).bind``). Extra parameters with
defaults, ``*args`` and ``**kwargs`` are fine. So::

    class Split(BasicBolt):
        def prepare(self, conf, context, collector): ...

    builder.set_bolt("split", Split())

raises ``TopologyError: bolt 'split': my_topology.Split.prepare takes (conf, context,
collector), but the framework calls statefulbolts.BasicBolt.prepare with (conf, context):
missing a required argument: 'collector'. Give it BasicBolt.prepare's parameters``.
"""

from __future__ import annotations

import inspect
import sys
from typing import Any

from statefulbolts.errors import TopologyError

__all__ = ["check_overrides"]

# The framework's own packages: a class defined in one of them is one of ours.
_FRAMEWORK = ("statefulbolts", "checkpoint", "providers", "recovery")


def _is_framework(cls: type) -> bool:
    module = cls.__module__ or ""
    return any(module == p or module.startswith(f"{p}.") for p in _FRAMEWORK)


def _public_name(cls: type) -> str:
    """``statefulbolts.BasicBolt`` for a class the package exports, else ``module.qualname``."""
    package = sys.modules.get("statefulbolts")  # imported: it is what declared the component
    if getattr(package, cls.__name__, None) is cls:
        return f"statefulbolts.{cls.__name__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def _parameters(signature: inspect.Signature) -> str:
    """The parameters after ``self``, as a call spells them (``conf, context, n=1, *args``)."""
    stars: dict[inspect._ParameterKind, str] = {
        inspect.Parameter.VAR_POSITIONAL: "*",
        inspect.Parameter.VAR_KEYWORD: "**",
    }
    shown = []
    for param in list(signature.parameters.values())[1:]:
        default = "" if param.default is param.empty else f"={param.default!r}"
        shown.append(f"{stars.get(param.kind, '')}{param.name}{default}")
    return f"({', '.join(shown)})"


def _required_positional(signature: inspect.Signature) -> int:
    """How many positional arguments a call must pass (``self`` included)."""
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return sum(
        1 for p in signature.parameters.values() if p.kind in kinds and p.default is p.empty
    )


def _signature(function: Any) -> inspect.Signature | None:
    try:
        return inspect.signature(function)
    except (TypeError, ValueError):
        return None  # no signature to read (a builtin, a C extension): calling it tells


def check_overrides(kind: str, component_id: str, obj: object) -> None:
    """Refuse ``obj`` if a method it overrides cannot be called as the framework calls it.

    ``kind`` is "spout" or "bolt", for the message. Only plain functions are compared: a
    framework method overridden by a static or class method, or by something that is not a
    function, is left to the runtime.

    Raises:
        TopologyError: naming the component, the user's class and method, the parameters it
            takes, the framework's definition and the parameters that definition is called
            with, and why they do not fit.
    """
    cls = type(obj)
    if _is_framework(cls):
        return
    for name in sorted(_framework_methods(cls)):
        override_owner = next(c for c in cls.__mro__ if name in vars(c))
        if _is_framework(override_owner):
            continue  # not overridden
        override = vars(override_owner)[name]
        base_owner = next(c for c in cls.__mro__ if name in vars(c) and _is_framework(c))
        base = vars(base_owner)[name]
        if not (inspect.isfunction(override) and inspect.isfunction(base)):
            continue
        given, expected = _signature(override), _signature(base)
        if given is None or expected is None:
            continue
        try:
            given.bind(*[None] * _required_positional(expected))
        except TypeError as exc:
            where = f"{override_owner.__module__}.{override_owner.__qualname__}.{name}"
            base_name = _public_name(base_owner)
            msg = (
                f"{kind} {component_id!r}: {where} takes {_parameters(given)}, but the framework "
                f"calls {base_name}.{name} with {_parameters(expected)}: {exc}. Give it "
                f"{base_owner.__name__}.{name}'s parameters"
            )
            raise TopologyError(msg) from None


def _framework_methods(cls: type) -> set[str]:
    """The public methods the framework classes among ``cls``'s bases define."""
    names: set[str] = set()
    for base in cls.__mro__:
        if base is object or not _is_framework(base):
            continue
        names.update(n for n, v in vars(base).items() if not n.startswith("_") and callable(v))
    return names
