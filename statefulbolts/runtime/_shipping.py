"""What the driver ships to executors it does not share a machine with, and how it is packed.

On a non-local master the executors' Python needs PySpark and the third-party dependencies
(installed there, or an archived virtualenv, or an image), nothing of this project and nothing
of the user's own code. The driver sends the rest as zips that Spark puts on each executor's
``sys.path`` (``SparkContext.addPyFile``):

1. The framework, always: ``statefulbolts``, ``providers``, ``checkpoint``, ``recovery``
   (``FRAMEWORK_PACKAGES``), wherever they are installed on the driver, so that executors run
   exactly the driver's version.
2. Every other module the topology's pickle names (``referenced_modules``: the modules of the
   spout and bolt classes, their base classes, functions and objects they keep, and the
   module of ``topology.state.provider``) whose top-level package or module is **user code**:
   a ``.py`` file or a package outside the standard library and site-packages (``placement``),
   and not a module of an extlib folder (the engine ships those folders beside the tasks).
   The whole top-level package goes (``a`` for ``a.b.c``), so relative imports and sibling
   modules work; and so does the user code that shipped code imports (its ``import``
   statements are read), since executors import it when they load the shipped module.
   ``examples`` is shipped like this when the topology comes from it.
3. Not shipped: modules in site-packages or the standard library (the executors' environment
   provides them), and ``__main__``: cloudpickle pickles the classes and functions of the
   running script (``python my_topology.py``, the file given to ``spark-submit``, a notebook)
   **by value**, with their code, so executors need no file for them. What such a class
   imports from other user modules is pickled by reference and is shipped by rule 2.
   Extension modules (``.so``) outside site-packages cannot run from a zip; they are left
   out with a warning and must be installed on the executors.

Each zip is built once per version, named by a digest of its files' paths, sizes and mtimes,
in one temporary directory per process that is removed when the process exits (or, when it was
killed, by the next process that makes one: ``sweep_zip_dirs``); the engine adds
each zip once per Spark application. A module edited while an application runs is shipped again
under a new name, but Python workers that already imported the old one keep it: a changed
topology module needs a new application.

Everything here is plain Python (no Spark): the engine calls it and does the ``addPyFile``.
"""

from __future__ import annotations

import ast
import atexit
import enum
import hashlib
import importlib.util
import logging
import os
import pickletools
import shutil
import site
import sys
import sysconfig
import tempfile
import threading
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from providers import extlib_origin

__all__ = [
    "FRAMEWORK_PACKAGES",
    "Placement",
    "Source",
    "build_zip",
    "code_to_ship",
    "folder_source",
    "imported_modules",
    "placement",
    "referenced_modules",
    "source_of",
    "sources",
    "sweep_zip_dirs",
    "zip_dir",
]

log = logging.getLogger(__name__)

FRAMEWORK_PACKAGES = ("checkpoint", "providers", "recovery", "statefulbolts")
# Not the framework, but shipped whenever the topology refers to it, wherever it is installed.
_OURS_WHEN_USED = frozenset({"examples"})
_STRING_OPS = frozenset(
    {
        "SHORT_BINUNICODE",
        "BINUNICODE",
        "BINUNICODE8",
        "UNICODE",
        "SHORT_BINSTRING",
        "BINSTRING",
        "STRING",
    }
)
_GET_OPS = frozenset({"GET", "BINGET", "LONG_BINGET"})
_PUT_OPS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_SILENT_OPS = frozenset({"PROTO", "FRAME", "STOP", "MEMOIZE", *_PUT_OPS})
_ZIP_DIR: list[Path] = []
_ZIP_LOCK = threading.Lock()
_ZIP_DIR_PREFIX = "statefulbolts-ship-"


class Placement(enum.Enum):
    """Where executors get a top-level module from."""

    FRAMEWORK = "framework"  # this project: always shipped
    SHIP = "ship"  # user code outside site-packages: shipped
    INSTALLED = "installed"  # site-packages or the standard library: the executors' own
    BY_VALUE = "by value"  # __main__: cloudpickle carries its classes and functions
    UNAVAILABLE = "unavailable"  # not found, or not Python source: cannot be shipped


@dataclass(frozen=True)
class Source:
    """A top-level module or package to ship: its name and its files as ``(arcname, path)``."""

    name: str
    files: tuple[tuple[str, Path], ...]

    def digest(self) -> str:
        """A digest of every file's name, path, size and mtime: a new one for any edit."""
        h = hashlib.sha256()
        for arcname, path in self.files:
            stat = path.stat()
            h.update(f"{arcname}\0{path}\0{stat.st_size}\0{stat.st_mtime_ns}\n".encode())
        return h.hexdigest()[:16]


def referenced_modules(blob: bytes) -> set[str]:
    """Every module a pickle refers to by name (classes and functions pickled by reference).

    Reads the pickle's opcodes without loading it: ``GLOBAL`` / ``INST`` name ``module name``;
    ``STACK_GLOBAL`` takes the two strings pushed before it (directly or from the memo); a
    module object that cloudpickle pickled by reference (``subimport('name')``) is the string
    pushed after that function.

    Example:
        >>> import pickle, collections
        >>> sorted(referenced_modules(pickle.dumps(collections.OrderedDict)))
        ['collections']
    """
    found: set[str] = set()
    memo: dict[int, Any] = {}
    recent: list[Any] = [None, None]  # the last two values pushed
    subimport = False
    for op, arg, _pos in pickletools.genops(blob):
        name = op.name
        if name in _SILENT_OPS:
            if name == "MEMOIZE":
                memo[len(memo)] = recent[-1]
            elif name in _PUT_OPS and isinstance(arg, int):
                memo[arg] = recent[-1]
            continue
        value: Any = None
        if name in _STRING_OPS:
            value = arg.decode("latin-1") if isinstance(arg, bytes) else arg
        elif name in _GET_OPS and isinstance(arg, int):
            value = memo.get(arg)
        elif name in ("GLOBAL", "INST"):
            found.add(str(arg).split(" ", 1)[0])
        if subimport and isinstance(value, str):
            found.add(value)
        subimport = False
        if name == "STACK_GLOBAL":
            module, attr = recent[-2], recent[-1]
            if isinstance(module, str):
                found.add(module)
                subimport = attr == "subimport" and module.endswith("cloudpickle")
        recent = [recent[-1], value]
    return found


def _installed_roots() -> list[Path]:
    """The standard library and every site-packages directory of this interpreter."""
    paths = sysconfig.get_paths()
    roots = [paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths]
    roots += site.getsitepackages() if hasattr(site, "getsitepackages") else []
    user_site = site.getusersitepackages() if hasattr(site, "getusersitepackages") else None
    if isinstance(user_site, str):
        roots.append(user_site)
    return [Path(r).resolve() for r in roots if r]


def _is_installed(path: Path) -> bool:
    resolved = path.resolve()
    if {"site-packages", "dist-packages"} & set(resolved.parts):
        return True
    return any(resolved.is_relative_to(root) for root in _installed_roots())


def placement(module: str) -> Placement:
    """Where executors get the top-level package or module of ``module`` from.

    Example:
        >>> placement("statefulbolts.topology")
        <Placement.FRAMEWORK: 'framework'>
        >>> placement("json"), placement("__main__")
        (<Placement.INSTALLED: 'installed'>, <Placement.BY_VALUE: 'by value'>)
    """
    top = module.split(".", 1)[0]
    if top in FRAMEWORK_PACKAGES:
        return Placement.FRAMEWORK
    if top == "__main__":
        return Placement.BY_VALUE
    if top in sys.builtin_module_names or top in sys.stdlib_module_names:
        return Placement.INSTALLED
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        return Placement.UNAVAILABLE
    if spec is None:
        return Placement.UNAVAILABLE
    locations = _locations(spec)
    if not locations:  # built-in or frozen
        return Placement.INSTALLED
    if top not in _OURS_WHEN_USED and all(_is_installed(p) for p in locations):
        return Placement.INSTALLED
    if spec.origin and not spec.submodule_search_locations and not spec.origin.endswith(".py"):
        return Placement.UNAVAILABLE  # an extension module or bytecode only
    return Placement.SHIP


def _locations(spec: Any) -> list[Path]:
    if spec.submodule_search_locations:
        return [Path(p) for p in spec.submodule_search_locations]
    if spec.origin and spec.origin not in ("built-in", "frozen") and spec.has_location:
        return [Path(spec.origin)]
    return []


def source_of(top: str) -> Source:
    """The files of top-level package or module ``top``: its ``.py`` files, no caches.

    A package's files are zipped under ``top/``, a single module as ``top.py``.

    Raises:
        LookupError: ``top`` cannot be found, or is not Python source.
    """
    spec = importlib.util.find_spec(top)
    if spec is None:
        msg = f"cannot ship module {top!r} to the executors: it is not importable here"
        raise LookupError(msg)
    if spec.submodule_search_locations:
        files: list[tuple[str, Path]] = []
        for location in spec.submodule_search_locations:
            folder = Path(location)
            for path in sorted(folder.rglob("*.py")):
                if "__pycache__" not in path.parts:
                    files.append((f"{top}/{path.relative_to(folder).as_posix()}", path))
        return Source(top, tuple(files))
    if spec.origin and spec.origin.endswith(".py"):
        return Source(top, ((f"{top}.py", Path(spec.origin)),))
    msg = (
        f"cannot ship module {top!r} ({spec.origin}) to the executors: it is not Python "
        "source; install it in the executors' environment"
    )
    raise LookupError(msg)


def code_to_ship(blob: bytes, conf: Mapping[str, Any] | None = None) -> list[str]:
    """The top-level packages and modules to ship for a topology pickled as ``blob``.

    The framework first, then the user's code the pickle (or ``topology.state.provider``)
    names, sorted; modules executors cannot get are logged and left out.
    """
    named = {m.split(".", 1)[0] for m in referenced_modules(blob)}
    provider = (conf or {}).get("topology.state.provider")
    if isinstance(provider, str) and "." in provider:
        named.add(provider.replace(":", ".").split(".", 1)[0])
    todo, seen = set(named), set(named)
    user: set[str] = set()
    while todo:
        top = todo.pop()
        if extlib_origin(top, conf) is not None:
            continue  # it goes with its extlib folder, beside the tasks (the engine's part)
        where = placement(top)
        if where is Placement.SHIP:
            try:
                source = source_of(top)
            except LookupError as exc:
                log.warning("%s", exc)
                continue
            user.add(top)
            found = imported_modules(source) - seen
            todo |= found
            seen |= found
        elif where is Placement.UNAVAILABLE and top in named:
            # An import statement's module may be optional (inside try / TYPE_CHECKING): only
            # what the topology itself names is worth a warning.
            log.warning(
                "module %s cannot be shipped to the executors (not found, or not Python "
                "source): install it in their environment",
                top,
            )
    return [*FRAMEWORK_PACKAGES, *sorted(user)]


def imported_modules(source: Source) -> set[str]:
    """The top-level modules the files of ``source`` import (absolute imports only).

    A file that does not parse is skipped: the executors will report it when they import it.
    """
    found: set[str] = set()
    for _arcname, path in source.files:
        try:
            tree = ast.parse(path.read_bytes(), str(path))
        except (SyntaxError, ValueError, OSError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".", 1)[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".", 1)[0])
    return found - {source.name}


def zip_dir() -> Path:
    """One temporary directory per process for shipped zips, removed when the process exits.

    It is named after the process (``statefulbolts-ship-<pid>-<random>``): a process killed
    before it could remove it (a driver ended by ``SIGKILL``, as crash tests and chaos demos
    do) leaves it behind, and the next process to make one removes those of every process that
    is gone (``sweep_zip_dirs``).
    """
    with _ZIP_LOCK:
        if not _ZIP_DIR:
            base = Path(tempfile.gettempdir())
            sweep_zip_dirs(base)
            path = Path(tempfile.mkdtemp(prefix=f"{_ZIP_DIR_PREFIX}{os.getpid()}-", dir=base))
            atexit.register(shutil.rmtree, path, True)
            _ZIP_DIR.append(path)
        return _ZIP_DIR[0]


def sweep_zip_dirs(base: Path, alive: Callable[[int], bool] | None = None) -> list[Path]:
    """Remove the zip directories in ``base`` whose process is gone; the ones removed.

    A directory's process is the pid in its name; ``alive`` (default: signal 0 to it) says
    whether it still runs. This process's own, those of live processes, and directories named
    otherwise (made before names carried the pid) are left alone. A pid reused by a new process
    keeps its dead owner's directory until that process ends too.
    """
    alive = alive or _process_alive
    removed: list[Path] = []
    for path in base.glob(f"{_ZIP_DIR_PREFIX}*"):
        owner = _zip_dir_owner(path.name)
        if owner is None or owner == os.getpid() or alive(owner) or not path.is_dir():
            continue
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            removed.append(path)
    if removed:
        log.info("removed %d zip directories of ended processes in %s", len(removed), base)
    return removed


def _zip_dir_owner(name: str) -> int | None:
    """The pid in a zip directory's name (``statefulbolts-ship-<pid>-<random>``), or ``None``."""
    head, sep, _ = name[len(_ZIP_DIR_PREFIX) :].partition("-")
    return int(head) if sep and head.isdigit() else None


def _process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (another user's counts: it cannot be signalled)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def build_zip(source: Source, directory: Path, label: str | None = None) -> Path:
    """``source`` zipped as ``<label>-<digest>.zip`` in ``directory``; reused if it exists.

    ``label`` defaults to the source's name. The zip is written under a temporary name and
    renamed, so a zip of that name is always complete.
    """
    target = directory / f"{label or source.name}-{source.digest()}.zip"
    if target.exists():
        return target
    fd, name = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
    with os.fdopen(fd, "wb") as out, zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for arcname, path in source.files:
            zf.write(path, arcname)
    Path(name).replace(target)
    return target


def folder_source(name: str, folder: Path) -> Source:
    """Every ``.py`` file under ``folder`` at the zip's root (an extlib folder)."""
    files = [p for p in sorted(folder.rglob("*.py")) if "__pycache__" not in p.parts]
    return Source(name, tuple((p.relative_to(folder).as_posix(), p) for p in files))


def sources(names: Iterable[str]) -> list[Source]:
    """``source_of`` each name; one that cannot be shipped is logged and left out."""
    found: list[Source] = []
    for name in names:
        try:
            found.append(source_of(name))
        except LookupError as exc:
            log.warning("%s", exc)
    return found
