"""The wheel's packages, and the two folders it renames (the rest is in ``pyproject.toml``).

The repository keeps ``examples/`` and ``extlib/`` at its top (``python -m examples.wordcount``,
a drop-in ``extlib/`` beside the code); a wheel must not put a generic top-level ``examples``
into site-packages, nor leave out the SQLite provider that the state tour names. So the wheel
carries them under the framework's packages:

- ``examples/`` as ``statefulbolts.examples`` (``python -m statefulbolts.examples.wordcount``);
  the examples import each other relatively, so both names work.
- ``extlib/`` as ``providers/extlib/``, the bundled extlib folder that ``providers._extlib``
  searches after the user's folders: ``sqlite_state.SqliteKeyValueStateProvider`` resolves
  after ``pip install``, and an installed module still always wins over it.

Every package and data folder is found (``find_namespace_packages``: a folder of data files
such as ``ui/static`` is a package to setuptools), so a new one needs no edit here.

Three modules are C, each optional: without a C compiler and Python's headers the install goes
on without them, and the same work runs in Python.

- ``statefulbolts/runtime/_native/_rowloop.c``: the inner loop that feeds a per-tuple bolt its
  rows (``_rows.feed_rows``).
- ``statefulbolts/runtime/_native/_basicemit.c``: a ``BasicBolt``'s emit of one ``str``
  (``_collector._TaskBasicCollector``).
- ``providers/_native/_fresh.c``: a layered state's ``get`` and ``put`` of a ``str`` key in its
  fresh layer (``providers._layered``).
"""

from setuptools import Extension, find_namespace_packages, setup

FRAMEWORK = ("statefulbolts", "providers", "checkpoint", "recovery")
RENAMED = {"examples": "statefulbolts.examples", "extlib": "providers.extlib"}


def _found(folder: str) -> list[str]:
    return find_namespace_packages(include=[folder, f"{folder}.*"], exclude=["*__pycache__*"])


def _packages() -> list[str]:
    found = [name for folder in FRAMEWORK for name in _found(folder)]
    for folder, package in RENAMED.items():
        found += [package + name[len(folder) :] for name in _found(folder)]
    return sorted(found)


NATIVE = "statefulbolts/runtime/_native"
ROWLOOP = Extension(
    "statefulbolts.runtime._native._rowloop",
    [f"{NATIVE}/_rowloop.c"],
    depends=[f"{NATIVE}/_slots.h"],
    optional=True,
)
# Included from the repository's top (``providers/_native/_forward.h``): the two compiled
# methods share how they hand a call on.
FORWARD = "providers/_native/_forward.h"
BASICEMIT = Extension(
    "statefulbolts.runtime._native._basicemit",
    [f"{NATIVE}/_basicemit.c"],
    include_dirs=["."],
    depends=[f"{NATIVE}/_slots.h", FORWARD],
    optional=True,
)
FRESH = Extension(
    "providers._native._fresh",
    ["providers/_native/_fresh.c"],
    depends=[FORWARD],
    optional=True,
)

setup(
    packages=_packages(),
    package_dir={package: folder for folder, package in RENAMED.items()},
    ext_modules=[ROWLOOP, BASICEMIT, FRESH],
)
