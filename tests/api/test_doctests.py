"""Every example in a docstring of the packages runs and shows what it says.

The docstrings are the first documentation people read; an example that no longer runs is a
bug. Modules are found by walking the packages, so a new module's examples are checked without
listing it here.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

from statefulbolts._moved import MOVED

PACKAGES = ("statefulbolts", "providers", "checkpoint", "recovery")


def _modules() -> list[str]:
    names: list[str] = []
    for package in PACKAGES:
        module = importlib.import_module(package)
        names.append(package)
        paths = getattr(module, "__path__", None)
        if paths is not None:
            names += [m.name for m in pkgutil.walk_packages(paths, package + ".")]
    # An old path of a moved module warns when imported (tests/api/test_moved.py checks it).
    return sorted(set(names) - set(MOVED))


MODULES = _modules()


def test_the_walk_finds_the_packages_modules() -> None:
    assert "statefulbolts.transactional._values" in MODULES
    assert "providers.redis._state" in MODULES
    assert "recovery.retry" in MODULES


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name: str) -> None:
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS, verbose=False, report=True)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"


def test_extlib_template_examples_run() -> None:
    """``extlib/`` is a folder of modules, not a package: its template provider is checked too."""
    from providers import load_module

    module = load_module("sqlite_state")
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


def test_the_examples_are_many() -> None:
    """Guards the walk itself: the documented modules keep their examples."""
    attempted = sum(
        doctest.testmod(importlib.import_module(n), optionflags=doctest.ELLIPSIS).attempted
        for n in MODULES
    )
    assert attempted >= 200
