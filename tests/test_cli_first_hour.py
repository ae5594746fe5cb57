"""The command line a newcomer meets first, run as a user runs it: the installed script.

Each test starts ``statefulbolts`` in a child process the way pip's console script does (a
script in its own folder, so that folder, not the current directory, is first on
``sys.path``), from a directory of the test's own, with this checkout on ``PYTHONPATH``.
Optional dependencies are made missing, and Spark made unstartable, by a ``sitecustomize``
that refuses to import the named modules (``blocked``), never by uninstalling anything.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

# What pip writes for ``[project.scripts] statefulbolts = "statefulbolts.cli:main"``.
CONSOLE_SCRIPT = """\
import sys
from statefulbolts.cli import main
if __name__ == "__main__":
    sys.exit(main())
"""

# Loaded by ``site`` at start: every module named in $BLOCKED_IMPORTS (and its submodules)
# fails to import as a missing module does.
SITECUSTOMIZE = """\
import os
import sys

_BLOCKED = tuple(n for n in os.environ.get("BLOCKED_IMPORTS", "").split(",") if n)


class _Blocker:
    def find_spec(self, name, path=None, target=None):
        if any(name == b or name.startswith(b + ".") for b in _BLOCKED):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None


sys.meta_path.insert(0, _Blocker())
"""


@pytest.fixture(scope="module")
def script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The ``statefulbolts`` console script, in a ``bin`` folder of its own."""
    bin_dir = tmp_path_factory.mktemp("bin")
    (bin_dir / "statefulbolts").write_text(CONSOLE_SCRIPT, encoding="utf-8")
    (bin_dir / "sitecustomize_dir").mkdir()
    (bin_dir / "sitecustomize_dir" / "sitecustomize.py").write_text(SITECUSTOMIZE, "utf-8")
    return bin_dir / "statefulbolts"


def statefulbolts(
    script: Path,
    *args: str,
    cwd: Path,
    blocked: Sequence[str] = (),
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """Run ``statefulbolts ARGS`` from ``cwd``, the modules ``blocked`` made missing."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYSPARK_", "SPARK_"))}
    paths = [str(script.parent / "sitecustomize_dir")] if blocked else []
    env["PYTHONPATH"] = os.pathsep.join([*paths, str(ROOT)])
    env["BLOCKED_IMPORTS"] = ",".join(blocked)
    return subprocess.run(
        [sys.executable, str(script), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def write_module(folder: Path, name: str, source: str) -> None:
    (folder / f"{name}.py").write_text(textwrap.dedent(source), encoding="utf-8")


def write_conf(folder: Path, conf: dict[str, object], name: str = "conf.json") -> Path:
    path = folder / name
    path.write_text(json.dumps(conf), encoding="utf-8")
    return path


MY_TOPOLOGY = """\
    from examples.wordcount import build


    def topology():
        return build(40)
"""


# --------------------------------------------------------------------------- loading topologies
def test_a_topology_module_in_the_current_directory_is_found(script: Path, tmp_path: Path) -> None:
    write_module(tmp_path, "my_topology", MY_TOPOLOGY)
    conf = write_conf(tmp_path, {})
    done = statefulbolts(
        script, "checkpoint", "status", "--conf", str(conf), "--topology", "mine",
        "--topology-module", "my_topology:topology", "--json",
        cwd=tmp_path, blocked=["pyspark"],
    )  # fmt: skip
    assert done.returncode == 1, done.stderr  # found the module; nothing stored in memory
    status = json.loads(done.stdout)
    assert [t["namespace"] for t in status["tasks"]] == ["mine/count-0", "mine/count-1"]
