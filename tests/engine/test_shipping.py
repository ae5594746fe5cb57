"""What the driver ships to executors of a non-local master, and how it packs it (``_shipping``).

Plain Python, no Spark (one test checks that a local master ships nothing). User code lives in
a temporary folder put on ``sys.path`` for the test; the checks that executors can import what
is shipped, and that a script's classes travel by value, run in child Pythons that cannot see
that folder, as an executor cannot.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import json
import logging
import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest
from pyspark import cloudpickle

from examples.wordcount import build
from statefulbolts.runtime._shipping import (
    FRAMEWORK_PACKAGES,
    Placement,
    build_zip,
    code_to_ship,
    folder_source,
    imported_modules,
    placement,
    referenced_modules,
    source_of,
    sweep_zip_dirs,
)

FRAMEWORK = list(FRAMEWORK_PACKAGES)
ROOT = Path(__file__).resolve().parents[2]

BOLTS = """
from statefulbolts import BasicBolt, Fields

import myhelpers


class Shout(BasicBolt):
    def execute(self, tuple, collector):
        collector.emit([myhelpers.shout(tuple.get_value(0))])

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("line"))
"""
HELPERS = """
def shout(text):
    return text.upper() + "!"
"""


@pytest.fixture
def user_code(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """``mypkg`` (a package whose bolt imports ``myhelpers``) and ``myhelpers.py``, importable."""
    folder = tmp_path / "usercode"
    (folder / "mypkg" / "__pycache__").mkdir(parents=True)
    (folder / "mypkg" / "__init__.py").write_text('"""A user package."""\n')
    (folder / "mypkg" / "bolts.py").write_text(BOLTS)
    (folder / "mypkg" / "__pycache__" / "bolts.cpython-311.pyc").write_bytes(b"not shipped")
    (folder / "mypkg" / "notes.txt").write_text("not Python: not shipped")
    (folder / "myhelpers.py").write_text(HELPERS)
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    for name in ("mypkg", "mypkg.bolts", "myhelpers"):
        sys.modules.pop(name, None)


def user_topology() -> Any:
    from examples.wordcount import SentenceSpout
    from statefulbolts import TopologyBuilder

    bolts = importlib.import_module("mypkg.bolts")
    builder = TopologyBuilder()
    builder.set_spout("sentences", SentenceSpout(3))
    builder.set_bolt("shout", bolts.Shout(), 2).shuffle_grouping("sentences")
    return builder.create_topology()


def test_the_word_count_ships_the_framework_and_examples() -> None:
    blob = cloudpickle.dumps(build(10))
    assert {"examples.wordcount", "statefulbolts.topology"} <= referenced_modules(blob)
    assert code_to_ship(blob) == [*FRAMEWORK, "examples"]


def test_where_executors_get_each_module_from() -> None:
    assert placement("statefulbolts.runtime._engine") is Placement.FRAMEWORK
    assert placement("providers.redis") is Placement.FRAMEWORK
    assert placement("examples.wordcount") is Placement.SHIP  # outside site-packages here
    assert placement("redis.client") is Placement.INSTALLED  # site-packages
    assert placement("pyspark") is Placement.INSTALLED
    assert placement("json") is Placement.INSTALLED  # standard library
    assert placement("_socket") is Placement.INSTALLED  # built in
    assert placement("__main__") is Placement.BY_VALUE
    assert placement("no_such_module_anywhere") is Placement.UNAVAILABLE


def test_user_code_outside_site_packages_is_shipped_with_what_it_imports(user_code: Path) -> None:
    blob = cloudpickle.dumps(user_topology())
    # The pickle names mypkg.bolts (the bolt's class); myhelpers only through its import.
    assert "mypkg.bolts" in referenced_modules(blob)
    assert "myhelpers" not in referenced_modules(blob)
    assert imported_modules(source_of("mypkg")) == {"statefulbolts", "myhelpers"}
    assert code_to_ship(blob) == [*FRAMEWORK, "examples", "myhelpers", "mypkg"]
    # So is the module of the state provider named in the config.
    conf = {"topology.state.provider": "myhelpers.SomeProvider"}
    assert "myhelpers" in code_to_ship(cloudpickle.dumps(build(1)), conf)


def test_a_package_is_zipped_whole_without_caches_and_a_module_as_its_file(
    user_code: Path, tmp_path: Path
) -> None:
    package, module = source_of("mypkg"), source_of("myhelpers")
    assert [name for name, _ in package.files] == ["mypkg/__init__.py", "mypkg/bolts.py"]
    assert [name for name, _ in module.files] == ["myhelpers.py"]
    out = tmp_path / "zips"
    out.mkdir()
    zips = [build_zip(package, out), build_zip(module, out)]
    assert [z.name.rsplit("-", 1)[0] for z in zips] == ["mypkg", "myhelpers"]
    assert zipfile.ZipFile(zips[0]).namelist() == ["mypkg/__init__.py", "mypkg/bolts.py"]
    assert zipfile.ZipFile(zips[1]).namelist() == ["myhelpers.py"]
    assert sorted(p.name for p in out.iterdir()) == sorted(z.name for z in zips)  # no leftovers

    # A Python that sees only the zips (as an executor does) imports the bolt from them.
    probe = (
        "import sys, json; sys.path[:0] = sys.argv[1:]\n"
        "import mypkg.bolts, myhelpers\n"
        "print(json.dumps([mypkg.bolts.__file__, myhelpers.shout('hi')]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe, *map(str, zips)],
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    where, shouted = json.loads(result.stdout)
    assert where == f"{zips[0]}/mypkg/bolts.py"
    assert shouted == "HI!"


def test_a_zip_is_built_once_per_version(user_code: Path, tmp_path: Path) -> None:
    out = tmp_path / "zips"
    out.mkdir()
    first = build_zip(source_of("mypkg"), out)
    stamp = first.stat().st_mtime_ns, first.stat().st_ino
    again = build_zip(source_of("mypkg"), out)
    assert again == first
    assert (again.stat().st_mtime_ns, again.stat().st_ino) == stamp  # reused, not rewritten

    bolts = user_code / "mypkg" / "bolts.py"
    bolts.write_text(BOLTS + "\n# edited\n")
    later = bolts.stat().st_mtime_ns + 5_000_000_000
    os.utime(bolts, ns=(later, later))
    edited = build_zip(source_of("mypkg"), out)
    assert edited != first
    assert b"# edited" in zipfile.ZipFile(edited).read("mypkg/bolts.py")
    assert sorted(p.name for p in out.iterdir()) == sorted([first.name, edited.name])


def test_an_extension_module_outside_site_packages_cannot_be_shipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    (tmp_path / f"fastpath{suffix}").write_bytes(b"\x7fELF not really")
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    assert placement("fastpath") is Placement.UNAVAILABLE
    with pytest.raises(LookupError, match="'fastpath' .* is not Python source"):
        source_of("fastpath")


def test_an_extlib_folder_is_zipped_at_the_root(tmp_path: Path) -> None:
    folder = tmp_path / "extlib"
    (folder / "pkg").mkdir(parents=True)
    (folder / "myprovider.py").write_text("X = 1\n")
    (folder / "pkg" / "__init__.py").write_text("")
    source = folder_source("extlib", folder)
    assert [name for name, _ in source.files] == ["myprovider.py", "pkg/__init__.py"]


SCRIPT = '''
import json, sys
from pyspark import cloudpickle
from statefulbolts import BasicBolt, Fields, TopologyBuilder
from statefulbolts.runtime._shipping import code_to_ship
from examples.wordcount import SentenceSpout
import myhelpers


class ScriptBolt(BasicBolt):
    """Defined in the script: pickled by value, with its code."""

    def execute(self, tuple, collector):
        collector.emit([myhelpers.shout(tuple.get_value(0))])

    def declare_output_fields(self, declarer):
        declarer.declare(Fields("line"))


builder = TopologyBuilder()
builder.set_spout("sentences", SentenceSpout(3))
builder.set_bolt("script", ScriptBolt()).shuffle_grouping("sentences")
blob = cloudpickle.dumps(builder.create_topology())
open(sys.argv[1], "wb").write(blob)
print(json.dumps(code_to_ship(blob)))
'''

LOAD = """
import pickle, sys
sys.path[:0] = sys.argv[2:]
topology = pickle.loads(open(sys.argv[1], "rb").read())
bolt = topology.component("script").obj
print(type(bolt).__module__, type(bolt).__qualname__)

class Out:
    def emit(self, values):
        print(values[0])

class Tuple:
    def get_value(self, i):
        return "by value"

bolt.execute(Tuple(), Out())
"""


def test_a_topology_defined_in_a_script_travels_by_value(user_code: Path, tmp_path: Path) -> None:
    """``python my_topology.py``: its classes are ``__main__``'s, and cloudpickle carries their
    code; only the user modules they use (``myhelpers``) are shipped as files."""
    script = user_code / "my_topology.py"
    script.write_text(SCRIPT)
    blob_path = tmp_path / "topology.pickle"
    # The repository's examples, as a user of a checkout reaches them: an install carries
    # them only as statefulbolts.examples.
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONPATH"}, "PYTHONPATH": str(ROOT)}
    made = subprocess.run(
        [sys.executable, str(script), str(blob_path)],
        cwd=user_code,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout) == [*FRAMEWORK, "examples", "myhelpers"]

    # Elsewhere, with the shipped zips and no script: the class comes back with its code.
    out = tmp_path / "zips"
    out.mkdir()
    zips = [str(build_zip(source_of(name), out)) for name in ("myhelpers", "examples")]
    loaded = subprocess.run(
        [sys.executable, "-c", LOAD, str(blob_path), *zips],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.splitlines() == ["__main__ ScriptBolt", "BY VALUE!"]


@pytest.mark.spark
def test_a_local_master_ships_nothing_but_extlib_and_not_on_the_path(
    spark: Any, tmp_path: Path
) -> None:
    from statefulbolts.runtime._spark_engine import SparkEngine as Engine

    engine = Engine(spark, build(3), "local-ship", {})
    try:
        includes = list(spark.sparkContext._python_includes)
        files = [Path(f).name for f in spark.sparkContext.listFiles]
    finally:
        engine.close()
    assert includes == []
    # The project's extlib/ goes as a plain file: tasks look in it, never through sys.path.
    assert engine._extlib and set(engine._extlib) <= set(files)
    assert all(name.startswith("extlib-") for name in engine._extlib)


def test_a_named_module_that_cannot_be_shipped_is_left_out_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    conf = {"topology.state.provider": "no_such_pkg.providers.Mine"}
    with caplog.at_level(logging.WARNING, logger="statefulbolts.runtime._shipping"):
        assert code_to_ship(cloudpickle.dumps(build(1)), conf) == [*FRAMEWORK, "examples"]
    assert caplog.messages == [
        "module no_such_pkg cannot be shipped to the executors (not found, or not Python "
        "source): install it in their environment"
    ]


def test_a_provider_from_an_extlib_folder_goes_with_the_folder_not_as_user_code(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "extlib_shipped_probe.py").write_text("class Provider:\n    pass\n")
    conf = {
        "topology.state.provider": "extlib_shipped_probe.Provider",
        "topology.state.extlib.dir": str(tmp_path),
    }
    with caplog.at_level(logging.WARNING, logger="statefulbolts.runtime._shipping"):
        assert code_to_ship(cloudpickle.dumps(build(1)), conf) == [*FRAMEWORK, "examples"]
    assert caplog.messages == []


# A child that makes its zip directory (under ``TMPDIR``), prints it, and ends as told: "kill"
# (``SIGKILL``: its ``atexit`` never runs) or "exit".
_ZIP_DIR_CHILD = """
import os, signal, sys
from statefulbolts.runtime._shipping import zip_dir
print(zip_dir(), flush=True)
if sys.argv[1] == "kill":
    os.kill(os.getpid(), signal.SIGKILL)
"""


def _child_zip_dir(tmp_path: Path, how: str) -> tuple[Path, int]:
    env = {**os.environ, "TMPDIR": str(tmp_path), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", _ZIP_DIR_CHILD, how],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return Path(done.stdout.strip()), done.returncode


def test_a_killed_process_s_zip_directory_goes_when_the_next_one_is_made(tmp_path: Path) -> None:
    killed, code = _child_zip_dir(tmp_path, "kill")
    assert code == -9 and killed.parent == tmp_path
    assert killed.is_dir()  # left behind: nothing ran at its exit
    assert killed.name.startswith("statefulbolts-ship-")
    ended, code = _child_zip_dir(tmp_path, "exit")
    assert code == 0 and ended != killed
    # The second process removed the first's, and its own at its exit.
    assert not killed.exists() and not ended.exists()
    assert list(tmp_path.iterdir()) == []


def test_the_sweep_leaves_live_processes_and_unknown_names_alone(tmp_path: Path) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    try:
        names = {
            "dead": f"statefulbolts-ship-{ended.pid}-a1b2",
            "live": f"statefulbolts-ship-{sleeper.pid}-c3d4",
            "mine": f"statefulbolts-ship-{os.getpid()}-e5f6",
            "old": "statefulbolts-ship-q7r8s9t0",  # named before names carried the pid
            "other": f"unrelated-{ended.pid}-x",
        }
        for name in names.values():
            (tmp_path / name).mkdir()
            (tmp_path / name / "framework-0123.zip").write_bytes(b"zip")
        removed = sweep_zip_dirs(tmp_path)
        assert removed == [tmp_path / names["dead"]]
        left = sorted(p.name for p in tmp_path.iterdir())
        assert left == sorted(n for k, n in names.items() if k != "dead")
        # ``alive`` decides: told every process is gone, it still keeps this process's own.
        removed = sweep_zip_dirs(tmp_path, alive=lambda pid: False)
        assert removed == [tmp_path / names["live"]]
    finally:
        sleeper.kill()
        sleeper.wait()
