"""The shape of the imports: packages meet through public modules, and no file imports in a circle.

Every ``import`` statement counts, ``TYPE_CHECKING`` blocks and function bodies included: a circle
that only type checkers see still ties the files together for a reader.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("statefulbolts", "providers", "checkpoint", "recovery", "extlib")


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join(parts)] = path
    return found


MODULES = _modules()


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules an import statement names (``from a import b`` may name module ``a.b``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        base = module.split(".")
        if MODULES[module].name != "__init__.py":
            base = base[:-1]
        base = base[: len(base) - (node.level - 1)]
        target = ".".join([*base, node.module] if node.module else base)
    else:
        target = node.module or ""
    return [target] + [f"{target}.{a.name}" for a in node.names if f"{target}.{a.name}" in MODULES]


def _known(target: str) -> str | None:
    """The project module ``target`` resolves to (its nearest package), or None if not ours."""
    while target and target not in MODULES:
        target = target.rpartition(".")[0]
    return target or None


def _edges() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for module, path in MODULES.items():
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for target in _targets(module, node):
                    known = _known(target)
                    if known is not None and known != module:
                        deps.add(known)
        edges[module] = deps
    return edges


EDGES = _edges()


def _private_across(module: str, target: str) -> bool:
    if module.split(".")[0] == target.split(".")[0]:
        return False
    return any(part.startswith("_") for part in target.split(".")[1:])


def test_packages_import_each_other_through_public_modules_only():
    private = sorted(
        f"{module} -> {target}"
        for module, targets in EDGES.items()
        for target in targets
        if _private_across(module, target)
    )
    assert private == []


def test_no_file_imports_in_a_circle():
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(EDGES.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in sorted(EDGES):
        if v not in index:
            visit(v)
    assert circles == []


def test_the_rule_sees_what_it_should():
    # The walker itself: a known public cross-package import and a known in-package private one.
    assert "providers" in EDGES["checkpoint.runner"]
    assert "statefulbolts.runtime._task" in EDGES["statefulbolts.runtime._spark_engine"]
    assert not _private_across("statefulbolts.runtime._spark_engine", "statefulbolts.runtime._task")
    assert _private_across("checkpoint.task", "statefulbolts.runtime._task")
    assert not _private_across("checkpoint.spout", "statefulbolts.config")


@pytest.mark.parametrize("package", ["providers", "recovery"])
def test_layering_api_packages_never_import_the_runtime(package):
    # Only the runtime and the CLI know Spark; these packages stay testable without it.
    offenders = sorted(
        f"{m} -> {t}"
        for m, targets in EDGES.items()
        if m.split(".")[0] == package
        for t in targets
        if t.startswith(("statefulbolts.runtime", "statefulbolts.cli"))
    )
    assert offenders == []


ENGINE = "statefulbolts.runtime"
PROTOCOLS = ("checkpoint", "statefulbolts.transactional")
# What sits above the engine: the protocols, recovery, the dashboard and the wiring.
ABOVE_THE_ENGINE = (*PROTOCOLS, "recovery", "statefulbolts.ui", "statefulbolts._cluster")
# The one module that wires the protocols to the engine, and the runners it picks from.
WIRING = "statefulbolts._cluster"
RUNNERS = ("checkpoint.runner", "statefulbolts.transactional.runner")


def _in(module: str, package: str) -> bool:
    return module == package or module.startswith(f"{package}.")


def test_the_engine_never_imports_a_protocol_or_what_sits_above_it():
    offenders = sorted(
        f"{m} -> {t}"
        for m, targets in EDGES.items()
        if _in(m, ENGINE)
        for t in targets
        if any(_in(t, above) for above in ABOVE_THE_ENGINE)
    )
    assert offenders == []


def test_only_the_engine_imports_its_private_modules():
    # Protocols (and everyone else) use the engine's face, ``statefulbolts.runtime.__all__``.
    offenders = sorted(
        f"{m} -> {t}"
        for m, targets in EDGES.items()
        if not _in(m, ENGINE)
        for t in targets
        if _in(t, ENGINE) and t != ENGINE
    )
    assert offenders == []


def test_each_protocol_lives_in_one_package_and_imports_no_other():
    offenders = sorted(
        f"{m} -> {t}"
        for m, targets in EDGES.items()
        for own in PROTOCOLS
        if _in(m, own)
        for t in targets
        for other in PROTOCOLS
        if other != own and _in(t, other) and not _in(t, own)
    )
    assert offenders == []


def test_only_the_wiring_module_picks_a_runner():
    users = sorted(m for m, targets in EDGES.items() for t in targets if t in RUNNERS)
    assert users == [WIRING, WIRING]


@pytest.mark.parametrize("statement", ["import checkpoint", "import statefulbolts.transactional"])
def test_a_protocols_face_does_not_load_the_engine(statement):
    # The task side of a protocol runs in Spark workers: importing it costs no engine.
    code = f"import sys\n{statement}\nprint('{ENGINE}' in sys.modules)\n"
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "False"


CONNECTORS = "statefulbolts.connectors"
# What sits below the connectors: they implement the protocols' spout interfaces, as user code does.
BELOW_THE_CONNECTORS = (*PROTOCOLS, ENGINE, "recovery", "providers")


def test_connectors_sit_above_the_protocols():
    # Nothing below imports a connector; a connector uses a protocol's face, never its modules.
    below = sorted(
        f"{m} -> {t}"
        for m, targets in EDGES.items()
        if any(_in(m, low) for low in BELOW_THE_CONNECTORS)
        for t in targets
        if _in(t, CONNECTORS)
    )
    assert below == []
    reaching = sorted(
        f"{m} -> {t}"
        for m, targets in EDGES.items()
        if _in(m, CONNECTORS)
        for t in targets
        if any(_in(t, p) and t != p for p in PROTOCOLS)
    )
    assert reaching == []
    assert "statefulbolts.transactional" in EDGES["statefulbolts.connectors.redis._transactional"]
