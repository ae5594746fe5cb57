"""Extlib folders never shadow installed modules: in a fresh process, in the CLI, on Spark.

An extlib folder here holds a provider module that imports an installed package, beside files
named like installed modules (``redis.py``, ``msgpack.py``, ``json.py``) that write a marker
file (and ``msgpack.py`` raises) if they are ever imported. The provider must load, with the
installed packages, and no marker may appear. The checks that matter run in a fresh Python
(a subprocess, or Spark's workers): in this process ``redis`` is most likely imported already,
and an import of it would prove nothing.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import uuid
import zipfile
from pathlib import Path
from typing import Any

import pytest
import redis

from checkpoint import CheckPointState, TxPhase
from providers import (
    STATE_PROVIDER_CONFIG_KEY,
    STATE_PROVIDER_KEY,
    ProviderNotFoundError,
    StateFactory,
    extlib_origin,
    get_provider,
    load_module,
    load_object,
)
from statefulbolts.runtime._shipping import build_zip, folder_source

ROOT = Path(__file__).resolve().parents[2]
EXTLIB_KEY = "topology.state.extlib.dir"
TX_STATE_KEY = "__state"

SHADOW = """
import pathlib
pathlib.Path({marker!r}).write_text("extlib {name}.py was imported")
"""
RAISING_SHADOW = (
    SHADOW
    + """
raise RuntimeError("extlib {name}.py must never be imported: an installed {name} exists")
"""
)

# A provider in extlib that talks to Redis through redis-py, and says which redis it got.
REDIS_PROVIDER = '''
"""An extlib provider that imports redis-py."""
import pathlib

import redis

from providers.redis import RedisKeyValueStateProvider

pathlib.Path({seen!r}).write_text(redis.__file__)


class Provider(RedisKeyValueStateProvider):
    """The Redis provider, from an extlib folder."""
'''

# A provider in extlib for the in-memory store, logging where each process loaded it from and
# where msgpack resolves on that process's sys.path (not from sys.modules: a worker may have
# imported msgpack before, and only the path shows what a fresh import would get).
LOGGING_PROVIDER = '''
"""An extlib provider that logs every process that loads it."""
import importlib.machinery
import os

import msgpack

from providers import InMemoryKeyValueStateProvider

_on_path = importlib.machinery.PathFinder.find_spec("msgpack")
with open({log!r}, "a") as out:
    out.write(f"{{os.getpid()}}\\t{{__file__}}\\t{{_on_path.origin}}\\t{{msgpack.__file__}}\\n")


class Provider(InMemoryKeyValueStateProvider):
    """The in-memory provider, from an extlib folder."""
'''


def _unique(prefix: str) -> str:
    """A module name no process has imported yet (Spark's workers outlive a test)."""
    return f"{prefix}_{uuid.uuid4().hex[:10]}"


class Extlib:
    """A temporary extlib folder with shadowing files and a provider module."""

    def __init__(self, folder: Path, provider_source: str, **fields: str) -> None:
        self.folder = folder
        self.markers = folder.parent / "markers"
        self.markers.mkdir()
        folder.mkdir()
        for name in ("redis", "json"):
            marker = str(self.markers / name)
            (folder / f"{name}.py").write_text(SHADOW.format(marker=marker, name=name))
        marker = str(self.markers / "msgpack")
        (folder / "msgpack.py").write_text(RAISING_SHADOW.format(marker=marker, name="msgpack"))
        self.module = _unique("myprov")
        (folder / f"{self.module}.py").write_text(provider_source.format(**fields))

    @property
    def provider(self) -> str:
        return f"{self.module}.Provider"

    def imported_shadows(self) -> list[str]:
        return sorted(p.name for p in self.markers.iterdir())


def _fresh_python(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("STATEFULBOLTS_EXTLIB", None)
    return subprocess.run(
        args, cwd=cwd, env=env, capture_output=True, text=True, timeout=120, check=False
    )


def _redis_conf(port: int, provider: str) -> dict[str, Any]:
    return {
        STATE_PROVIDER_KEY: provider,
        STATE_PROVIDER_CONFIG_KEY: {"jedisPoolConfig": {"host": "127.0.0.1", "port": port}},
    }


GET_PROVIDER = """
import json, sys
from providers import get_provider
conf = json.loads(sys.argv[1])
provider = get_provider(conf)
state = provider.new_state("topo/count-0", conf)
state.put("cat", 3)
state.prepare_commit(1)
state.commit(1)
import redis
print(json.dumps({"class": type(provider).__module__ + "." + type(provider).__qualname__,
                  "redis": redis.__file__}))
"""


@pytest.mark.redis
def test_a_provider_in_the_configured_folder_gets_the_installed_redis(
    tmp_path: Path, redis_db: Any
) -> None:
    seen = tmp_path / "seen"
    ext = Extlib(tmp_path / "ext", REDIS_PROVIDER, seen=str(seen))
    conf = {**_redis_conf(redis_db.port, ext.provider), EXTLIB_KEY: str(ext.folder)}
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = _fresh_python([sys.executable, "-c", GET_PROVIDER, json.dumps(conf)], elsewhere)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out == {"class": ext.provider, "redis": redis.__file__}
    assert seen.read_text() == redis.__file__
    assert ext.imported_shadows() == []
    assert redis_db.client().hget("topo/count-0$txid", "commit") == b"1"


@pytest.mark.redis
def test_checkpoint_status_with_a_provider_in_dot_extlib_gets_the_installed_redis(
    tmp_path: Path, redis_db: Any
) -> None:
    seen = tmp_path / "seen"
    ext = Extlib(tmp_path / "extlib", REDIS_PROVIDER, seen=str(seen))
    # The state, written by the built-in provider: the extlib one must read the same keys.
    builtin = _redis_conf(redis_db.port, "providers.redis.RedisKeyValueStateProvider")
    saved = StateFactory.get_system_state("wc/$checkpointspout-0", builtin)
    saved.put(TX_STATE_KEY, CheckPointState(3, TxPhase.COMMITTED).to_value())
    saved.commit()
    conf_file = tmp_path / "conf.json"
    conf_file.write_text(json.dumps(_redis_conf(redis_db.port, ext.provider)))
    cli = Path(sys.executable).with_name("statefulbolts")
    done = _fresh_python(
        [str(cli), "checkpoint", "status", "--conf", str(conf_file), "--topology", "wc", "--json"],
        tmp_path,
    )
    assert done.returncode == 0, done.stderr
    status = json.loads(done.stdout)
    assert status["provider"] == ext.provider
    assert status["checkpoint"]["txid"] == 3
    assert seen.read_text() == redis.__file__
    assert ext.imported_shadows() == []


ZIPPED = """
import json, sys
from providers import add_extlib_dirs, get_provider
add_extlib_dirs([sys.argv[1]])
provider = get_provider({"topology.state.provider": sys.argv[2]})
import msgpack, redis
module = sys.modules[type(provider).__module__]
print(json.dumps({"module": module.__file__, "msgpack": msgpack.__file__,
                  "redis": redis.__file__}))
"""


def test_a_zipped_folder_as_an_executor_gets_it_never_shadows_either(tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    ext = Extlib(tmp_path / "ext", REDIS_PROVIDER, seen=str(seen))
    zipped = build_zip(folder_source("extlib", ext.folder), tmp_path, label="extlib")
    assert f"{ext.module}.py" in zipfile.ZipFile(zipped).namelist()
    done = _fresh_python([sys.executable, "-c", ZIPPED, str(zipped), ext.provider], tmp_path)
    assert done.returncode == 0, done.stderr
    import msgpack

    out = json.loads(done.stdout)
    assert out == {
        "module": f"{zipped}/{ext.module}.py",
        "msgpack": msgpack.__file__,
        "redis": redis.__file__,
    }
    assert ext.imported_shadows() == []


def test_a_shadowed_file_is_named_in_one_warning_with_the_installed_module(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ext = Extlib(tmp_path / "ext", LOGGING_PROVIDER, log=str(tmp_path / "loads"))
    conf = {STATE_PROVIDER_KEY: ext.provider, EXTLIB_KEY: str(ext.folder)}
    caplog.set_level(logging.WARNING, logger="providers._extlib")
    for _ in range(3):
        get_provider(conf)
    shadowed = {name: str(ext.folder / f"{name}.py") for name in ("json", "msgpack", "redis")}
    warnings = sorted(r.getMessage() for r in caplog.records if r.name == "providers._extlib")
    assert len(warnings) == 3
    for (name, mine), text in zip(sorted(shadowed.items()), warnings, strict=True):
        installed = Path(str(sys.modules[name].__file__)).parent  # each one is a package
        assert text.startswith(f"{mine} in an extlib folder is not used: module {name!r} ")
        assert f"is installed at {installed}" in text
    assert ext.imported_shadows() == []


def test_a_package_in_extlib_loads_with_its_submodules(tmp_path: Path) -> None:
    folder = tmp_path / "ext"
    package = _unique("mypkg")
    (folder / package).mkdir(parents=True)
    (folder / package / "__init__.py").write_text("from .impl import Thing\n")
    (folder / package / "impl.py").write_text("class Thing:\n    KIND = 'extlib'\n")
    conf = {EXTLIB_KEY: str(folder)}
    assert extlib_origin(f"{package}.impl", conf) == str(folder / package)
    thing = load_object(f"{package}.impl.Thing", what="keyClass", conf=conf)
    assert thing.KIND == "extlib"
    assert load_module(package, conf).Thing is thing
    assert extlib_origin(package, conf) == str(folder / package)


def test_an_installed_module_is_never_taken_from_extlib(tmp_path: Path) -> None:
    ext = Extlib(tmp_path / "ext", LOGGING_PROVIDER, log=str(tmp_path / "loads"))
    conf = {EXTLIB_KEY: str(ext.folder)}
    assert extlib_origin("json", conf) is None
    assert load_module("json.decoder", conf).__name__ == "json.decoder"
    assert ext.imported_shadows() == []


def test_an_extlib_module_does_not_see_its_sibling_files(tmp_path: Path) -> None:
    """Only the named module comes from extlib: a provider of several files is a package."""
    folder = tmp_path / "ext"
    folder.mkdir()
    helper, module = _unique("helper"), _unique("single")
    (folder / f"{helper}.py").write_text("X = 1\n")
    (folder / f"{module}.py").write_text(f"import {helper}\nclass P:\n    pass\n")
    with pytest.raises(ProviderNotFoundError, match=f"No module named '{helper}'"):
        load_object(f"{module}.P", what="state provider", conf={EXTLIB_KEY: str(folder)})
    assert module not in sys.modules


def test_a_missing_module_names_the_folders_looked_in(tmp_path: Path) -> None:
    conf = {STATE_PROVIDER_KEY: "nowhere_at_all.Provider", EXTLIB_KEY: str(tmp_path)}
    with pytest.raises(ProviderNotFoundError) as info:
        get_provider(conf)
    text = str(info.value)
    assert "state provider 'nowhere_at_all.Provider': module 'nowhere_at_all'" in text
    assert f"then in the extlib folders: {tmp_path}" in text


# --------------------------------------------------------------------------- on Spark


@pytest.mark.spark
@pytest.mark.parametrize("how", ["config key", "environment"])
def test_a_topology_on_spark_uses_an_extlib_provider_and_never_a_shadow(
    cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, how: str
) -> None:
    """The word count with an extlib provider; ``msgpack.py`` there raises if imported.

    Set through the environment after the shared session started, the folder is not known to
    the workers (their environment is the JVM's), so they can only get the provider from the
    zip the driver ships; through the config key they find the folder itself.
    """
    from examples.wordcount import build, expected_counts

    loads = tmp_path / "loads"
    ext = Extlib(tmp_path / "ext", LOGGING_PROVIDER, log=str(loads))
    conf: dict[str, Any] = {
        STATE_PROVIDER_KEY: ext.provider,
        "topology.state.checkpoint.interval.ms": 100,
    }
    if how == "config key":
        conf[EXTLIB_KEY] = str(ext.folder)
    else:
        monkeypatch.setenv("STATEFULBOLTS_EXTLIB", str(ext.folder))
    name = _unique("wc_extlib")
    handle = cluster.submit_topology(name, conf, build(40))
    try:
        handle.await_idle(120)
        counts = handle.read_state("count")
        failed = [t for t in handle.metrics()["transactions"] if not t["ok"]]
    finally:
        handle.kill()
    assert failed == []
    assert counts == dict(expected_counts(40))
    assert ext.imported_shadows() == []
    rows = [line.split("\t") for line in loads.read_text().splitlines()]
    import msgpack

    assert {on_path for _, _, on_path, _ in rows} == {msgpack.__file__}
    assert {imported for _, _, _, imported in rows} == {msgpack.__file__}
    workers = {(pid, file) for pid, file, _, _ in rows if int(pid) != os.getpid()}
    assert workers, f"no worker loaded the provider: {rows}"
    if how == "environment":
        assert all(f".zip/{ext.module}.py" in file for _, file in workers), workers
    else:
        assert {file for _, file in workers} == {str(ext.folder / f"{ext.module}.py")}
