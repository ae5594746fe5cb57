"""Extlib folders: where a provider or serializer that is not installed is found.

A dotted name (``topology.state.provider``, a serializer field) is imported by one rule
(``load_module``):

1. Its top-level module comes from the normal import system when that finds it (site-packages,
   the project, the user's ``sys.path``), or from ``sys.modules`` when it is imported already.
2. Only when it does not, is that one module (or package) looked up in the extlib folders and
   loaded from the first that has it, under its own name; a package's submodules then come
   from the same folder, through its ``__path__``.

No extlib folder is ever put on ``sys.path``: the folders act as if they were at its end, for
the named module only. So a file in one can never stand in for an installed module
(``extlib/redis.py`` is not imported, and a provider in extlib that imports ``redis`` gets
redis-py), and a module there that imports a sibling file does not find it: a provider of
several files is a package (a folder with ``__init__.py``). A file that an installed module of
the same name hides is named, with the installed one, in a warning once per process.

The folders, most specific first (``extlib_dirs``): ``topology.state.extlib.dir`` and
``STATEFULBOLTS_EXTLIB`` (each may list several, separated by ``os.pathsep``), ``./extlib`` in
the working directory, the project's own ``extlib/`` (in a checkout of the repository), the
bundled one (``providers/extlib/``: the wheel's copy of ``extlib/``, so that a ``pip install``
finds the SQLite provider by the same name), and the folders handed to this process with
``add_extlib_dirs`` (a Spark executor's copies of the driver's folders, as zips).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import logging
import os
import pkgutil
import sys
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

__all__ = [
    "EXTLIB_DIR_KEY",
    "EXTLIB_ENV",
    "add_extlib_dirs",
    "extlib_dirs",
    "extlib_origin",
    "import_by_rule",
    "load_module",
]

log = logging.getLogger(__name__)

EXTLIB_DIR_KEY = "topology.state.extlib.dir"
EXTLIB_ENV = "STATEFULBOLTS_EXTLIB"
_PROJECT_EXTLIB = Path(__file__).resolve().parent.parent / "extlib"
# Where the wheel puts extlib/ (setup.py); absent in a checkout, where _PROJECT_EXTLIB is it.
_BUNDLED_EXTLIB = Path(__file__).resolve().parent / "extlib"

# Loading a module from an extlib folder is ours, not the import system's: one at a time.
_lock = threading.RLock()
_added: list[Path] = []
_scanned: set[Path] = set()
# The modules this process loaded from an extlib folder: name -> where from.
_from_extlib: dict[str, str] = {}


def add_extlib_dirs(dirs: Iterable[str | os.PathLike[str]]) -> None:
    """Look in ``dirs`` too (folders, or zips of one), after the others, in this process.

    A Spark executor is handed the driver's extlib folders as zips this way.
    """
    with _lock:
        for raw in dirs:
            path = Path(raw)
            if path not in _added:
                _added.append(path)


def extlib_dirs(conf: Mapping[str, Any] | None = None) -> list[Path]:
    """The extlib folders, most specific first (see the module docstring); each once."""
    found: list[Path] = []
    for raw in ((conf or {}).get(EXTLIB_DIR_KEY), os.environ.get(EXTLIB_ENV)):
        if raw:
            found.extend(Path(p).resolve() for p in str(raw).split(os.pathsep) if p)
    for candidate in (Path.cwd() / "extlib", _PROJECT_EXTLIB, _BUNDLED_EXTLIB):
        if candidate.is_dir():
            found.append(candidate.resolve())
    with _lock:
        found.extend(_added)
    unique: list[Path] = []
    for path in found:
        if path not in unique:
            unique.append(path)
    return unique


def _installed_spec(top: str) -> importlib.machinery.ModuleSpec | None:
    """The normal import system's spec of top-level module ``top``; ``None`` if not found.

    A bare namespace package (a folder without ``__init__.py`` somewhere on ``sys.path``) does
    not count: Python itself takes one only when no regular module of the name exists on the
    whole path, and the extlib folders come after the path.
    """
    if top in _from_extlib:
        return None
    module = sys.modules.get(top)
    if module is not None:
        return getattr(module, "__spec__", None) or importlib.machinery.ModuleSpec(top, None)
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return None
    if spec is None or (spec.origin is None and spec.submodule_search_locations is not None):
        return None
    return spec


def _extlib_spec(top: str, dirs: Iterable[Path]) -> importlib.machinery.ModuleSpec | None:
    """The spec of ``top`` in the first extlib folder that has it as a module or package."""
    spec = importlib.machinery.PathFinder.find_spec(top, [str(d) for d in dirs])
    if spec is None or spec.loader is None:  # not there, or only a namespace portion
        return None
    return spec


def _where(spec: importlib.machinery.ModuleSpec) -> str:
    """A module's file, or its package's folder, for people."""
    if spec.submodule_search_locations:
        return str(list(spec.submodule_search_locations)[0])
    return str(spec.origin or spec.name)


def extlib_origin(name: str, conf: Mapping[str, Any] | None = None) -> str | None:
    """Where ``load_module`` would take top-level module ``name`` from out of an extlib folder.

    ``None`` when the normal import system finds it (or it is imported already), or when no
    extlib folder has it.
    """
    top = name.partition(".")[0]
    if top in _from_extlib:
        return _from_extlib[top]
    if _installed_spec(top) is not None:
        return None
    spec = _extlib_spec(top, extlib_dirs(conf))
    return None if spec is None else _where(spec)


def _warn_shadowed(dirs: Iterable[Path]) -> None:
    """Warn, once per folder and process, about each module there an installed one hides."""
    for folder in dirs:
        if folder in _scanned:
            continue
        _scanned.add(folder)
        for info in pkgutil.iter_modules([str(folder)]):
            installed = _installed_spec(info.name)
            if installed is None:
                continue
            found = info.module_finder.find_spec(info.name)  # type: ignore[call-arg]
            mine = _where(found) if found is not None else str(folder / info.name)
            if mine == _where(installed):
                continue  # the folder is on sys.path as well: it is the same file
            log.warning(
                "%s in an extlib folder is not used: module %r is installed at %s, and an "
                "installed module always wins over extlib; rename the file if it is meant "
                "to be loaded",
                mine,
                info.name,
                _where(installed),
            )


def _load_from(top: str, spec: importlib.machinery.ModuleSpec) -> ModuleType:
    """Execute extlib module ``top`` and register it under its name."""
    module = importlib.util.module_from_spec(spec)
    sys.modules[top] = module
    try:
        assert spec.loader is not None  # noqa: S101 - _extlib_spec returns loadable specs only
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(top, None)
        raise
    _from_extlib[top] = _where(spec)
    log.info("loaded module %s from extlib: %s", top, _from_extlib[top])
    return module


def import_by_rule(name: str, dirs: Iterable[Path]) -> ModuleType:
    """Import module ``name``, its top-level module looked up in ``dirs`` only if not installed.

    Raises:
        ImportError: neither the normal import system nor any of ``dirs`` has it, or
            importing it failed.
    """
    dirs = list(dirs)
    top = name.partition(".")[0]
    with _lock:
        _warn_shadowed(dirs)
        if top not in sys.modules and _installed_spec(top) is None:
            spec = _extlib_spec(top, dirs)
            if spec is not None:
                _load_from(top, spec)
    return importlib.import_module(name)


def load_module(name: str, conf: Mapping[str, Any] | None = None) -> ModuleType:
    """Import module ``name`` by the extlib rule, with the folders of ``conf`` (``extlib_dirs``).

    Example:
        >>> load_module("json.decoder").__name__
        'json.decoder'

    Raises:
        ImportError: the module is neither installed nor in an extlib folder, or importing it
            failed.
    """
    return import_by_rule(name, extlib_dirs(conf))
