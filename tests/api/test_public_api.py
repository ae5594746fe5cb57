"""Each package's ``__init__`` exports a sorted, complete ``__all__``; importing is Spark-free."""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGES = [
    "statefulbolts",
    "checkpoint",
    "providers",
    "recovery",
    "statefulbolts.transactional",
    "statefulbolts.ui",
    "statefulbolts.state",
    "statefulbolts.deadletter",
    "statefulbolts.windowing",
    "statefulbolts.timers",
    "statefulbolts.connectors",
    "statefulbolts.connectors.files",
    "statefulbolts.connectors.redis",
    "statefulbolts.connectors.kafka",
    "statefulbolts.connectors.postgres",
    "statefulbolts.connectors.sinks",
    "providers.redis",
]
# Names a package resolves lazily through its module ``__getattr__`` (they import the runtime,
# or redis-py, which is optional).
LAZY = {
    "statefulbolts": {"LocalCluster", "StormSubmitter", "TopologyHandle"},
    "statefulbolts.transactional": {
        "OpaqueRedisStreamsTransactionalSpout",
        "RedisBackingMap",
        "RedisStreamsTransactionalSpout",
        "load_streams",
    },
}
NOT_EXPORTED_SOURCES = {"__future__", "typing"}


def _init_file(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.origin is not None, package
    return Path(spec.origin)


def public_names(package: str) -> set[str]:
    """Every public name an ``__init__`` binds at top level (``if`` blocks included)."""
    tree = ast.parse(_init_file(package).read_text(encoding="utf-8"))
    names: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.ImportFrom) and node.module not in NOT_EXPORTED_SOURCES:
                names.update(a.asname or a.name for a in node.names)
            elif isinstance(node, ast.Import):
                names.update((a.asname or a.name).split(".")[0] for a in node.names)
            elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Assign):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
            elif isinstance(node, ast.If | ast.Try):
                visit(node.body)
                visit(node.orelse)

    visit(tree.body)
    return {n for n in names if not n.startswith("_")}


def sort_key(name: str) -> tuple[int, str]:
    """Ruff's / isort's order for ``__all__``: CONSTANTS, then Classes, then functions."""
    if name.isupper():
        return (0, name)
    if name[:1].isupper():
        return (1, name)
    return (2, name)


@pytest.mark.parametrize("package", PACKAGES)
def test_all_is_sorted_and_has_no_duplicates(package):
    exported = importlib.import_module(package).__all__
    assert list(exported) == sorted(exported, key=sort_key)
    assert len(set(exported)) == len(exported)


@pytest.mark.parametrize("package", PACKAGES)
def test_all_is_complete(package):
    exported = set(importlib.import_module(package).__all__)
    defined = public_names(package) | LAZY.get(package, set())
    assert defined - exported == set(), "public but not in __all__"
    assert exported - defined == set(), "in __all__ but not bound in the __init__"


@pytest.mark.parametrize("package", PACKAGES)
def test_every_listed_name_resolves(package):
    module = importlib.import_module(package)
    eager = [n for n in module.__all__ if n not in LAZY.get(package, set())]
    missing = [n for n in eager if getattr(module, n, None) is None]
    assert missing == []


def test_lazy_runtime_names_resolve():
    # In a child process: resolving them imports the runtime, which may load pyspark.
    code = (
        "import statefulbolts\n"
        "from statefulbolts._cluster import LocalCluster, TopologyHandle\n"
        "from statefulbolts.submitter import StormSubmitter\n"
        "assert statefulbolts.LocalCluster is LocalCluster\n"
        "assert statefulbolts.StormSubmitter is StormSubmitter\n"
        "assert statefulbolts.TopologyHandle is TopologyHandle\n"
        "print('ok')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120
    )
    assert result.stdout.strip() == "ok", result.stderr


def test_lazy_transactional_names_resolve():
    import statefulbolts.transactional as transactional
    from statefulbolts.connectors import RedisStreamsTransactionalSpout
    from statefulbolts.transactional._redis_map import RedisBackingMap

    assert transactional.RedisBackingMap is RedisBackingMap
    assert transactional.RedisStreamsTransactionalSpout is RedisStreamsTransactionalSpout
    with pytest.raises(AttributeError, match="has no attribute 'Nope'"):
        transactional.Nope  # noqa: B018


def test_unknown_attribute_raises_attribute_error():
    import statefulbolts

    with pytest.raises(AttributeError, match="module 'statefulbolts' has no attribute 'Nope'"):
        statefulbolts.Nope  # noqa: B018


@pytest.mark.parametrize(
    "statement",
    [
        "import statefulbolts",
        "import checkpoint",
        "import providers",
        "import statefulbolts.testing",
        "import statefulbolts.transactional",
        "import recovery",
        "import statefulbolts.ui",
        "import statefulbolts.state",
        "import statefulbolts.windowing",
        "import statefulbolts.connectors",
    ],
)
def test_importing_does_not_load_pyspark(statement):
    code = (
        "import sys\n"
        f"{statement}\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"
