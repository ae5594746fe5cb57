"""The wheel a user installs: what it carries, and that it runs on its own, away from the repo.

The wheel is built from a copy of the repository (``pip wheel --no-build-isolation``, with the
test extra's setuptools, offline) and installed with ``--no-deps`` into a target folder. Every
run of it then happens in ANOTHER folder, in a Python whose ``sys.path`` holds that target and
the test virtualenv's site-packages as a plain folder: that venv's ``.pth`` files are not run,
so the editable install of the repository (a finder that ``.pth`` installs) cannot leak in, and
each run checks the ``__file__`` of what it imported.
"""

from __future__ import annotations

import email
import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
import zipfile
from dataclasses import dataclass
from email.message import Message
from pathlib import Path

import pytest

from examples.wordcount import expected_counts

pytestmark = [pytest.mark.slow, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]
FRAMEWORK = ("statefulbolts", "providers", "checkpoint", "recovery")
# Not part of a build: left out of the copy the wheel is built from.
_NOT_BUILT = {".git", "tests", "docs", "bench", "build", "dist", "site"}
_NEVER = ("__pycache__", "*.egg-info", ".venv*", ".*_cache", "*.pyc", "*.so")
SENTENCES = 300


@dataclass(frozen=True)
class Installed:
    """A wheel, installed into ``target``, and how to run Python with only it on the path."""

    wheel: Path
    target: Path
    python: Path  # an interpreter whose sys.path is target + the test venv's deps
    elsewhere: Path  # a folder that is not the repository: the working directory of each run
    env: dict[str, str]

    def run(self, *args: str | Path, timeout: float = 600) -> subprocess.CompletedProcess[str]:
        """Run the isolated Python in ``elsewhere``; fail with its output if it fails."""
        result = subprocess.run(
            [str(self.python), *map(str, args)],
            cwd=self.elsewhere,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert result.returncode == 0, (
            f"{args} exited {result.returncode}\n"
            f"stdout:\n{result.stdout[-3000:]}\nstderr:\n{result.stderr[-5000:]}"
        )
        return result


def _source_copy(dest: Path) -> Path:
    """The repository without what a build does not read (a build writes into its source)."""

    def ignore(folder: str, names: list[str]) -> set[str]:
        skipped = set(shutil.ignore_patterns(*_NEVER)(folder, names))
        if Path(folder) == ROOT:
            skipped |= _NOT_BUILT & set(names)
        return skipped

    shutil.copytree(ROOT, dest, ignore=ignore)
    return dest


def _build_wheel(tmp: Path) -> Path:
    import setuptools

    if int(setuptools.__version__.split(".")[0]) < 77:
        pytest.fail(
            f"the build needs setuptools>=77 (the test extra), this venv has "
            f"{setuptools.__version__}: pip install -e '.[test]' (scripts/test does)",
            pytrace=False,
        )
    source = _source_copy(tmp / "source")
    dist = tmp / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
        + ["--wheel-dir", str(dist), str(source)],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    (wheel,) = dist.glob("statefulbolts-*.whl")
    return wheel


def _isolated_python(folder: Path) -> Path:
    """A venv without pip whose only additions are the test venv's site-packages, as folders.

    A folder named in a ``.pth`` file joins ``sys.path`` without its own ``.pth`` files being
    run: the deps (pyspark, pydantic, ...) are there, the repository's editable finder is not.
    """
    venv.EnvBuilder(with_pip=False, symlinks=True).create(folder)
    python = folder / "bin" / "python"
    probe = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site_packages = subprocess.run(
        [str(python), "-c", probe], check=True, capture_output=True, text=True
    ).stdout.strip()
    deps = dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
    Path(site_packages, "test_venv_deps.pth").write_text("\n".join(deps) + "\n")
    return python


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    tmp = tmp_path_factory.mktemp("packaging")
    wheel = _build_wheel(tmp)
    target = tmp / "target"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target)]
        + [str(wheel)],
        check=True,
        capture_output=True,
        text=True,
        timeout=600,
    )
    elsewhere = tmp / "elsewhere"
    elsewhere.mkdir()
    env = {
        k: v
        for k, v in os.environ.items()
        # The tests' own path (the repository), and the Python Spark's workers ran for them.
        if k not in {"PYTHONPATH", "PYTHONHOME", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"}
        and not k.startswith("STATEFULBOLTS_")
    }
    env["PYTHONPATH"] = str(target)
    return Installed(wheel, target, _isolated_python(tmp / "venv"), elsewhere, env)


def _metadata(wheel: Path) -> Message:
    with zipfile.ZipFile(wheel) as zf:
        (name,) = [n for n in zf.namelist() if n.endswith(".dist-info/METADATA")]
        return email.message_from_bytes(zf.read(name))


def test_the_wheel_carries_the_packages_the_provider_the_confs_and_the_static_files(
    installed: Installed,
) -> None:
    with zipfile.ZipFile(installed.wheel) as zf:
        names = set(zf.namelist())
    tops = {n.split("/")[0] for n in names}
    assert tops == {*FRAMEWORK, "statefulbolts-0.1.0.dist-info"}  # no top-level examples
    for package in FRAMEWORK:
        assert f"{package}/py.typed" in names
    assert "providers/extlib/sqlite_state.py" in names
    assert "providers/extlib/README.md" in names

    def as_shipped(folder: str, pattern: str, package: str) -> set[str]:
        found = (ROOT / folder).glob(pattern)
        return {f"{package}/{p.relative_to(ROOT / folder)}" for p in found if p.is_file()}

    examples = as_shipped("examples", "*.py", "statefulbolts/examples")
    confs = as_shipped("examples", "conf/*.json", "statefulbolts/examples")
    static = as_shipped("statefulbolts/ui/static", "**/*", "statefulbolts/ui/static")
    assert "statefulbolts/examples/wordcount.py" in examples
    assert "statefulbolts/examples/conf/sqlite.json" in confs
    assert "statefulbolts/ui/static/index.html" in static
    assert examples | confs | static <= names
    assert "statefulbolts-0.1.0.dist-info/licenses/LICENSE" in names
    assert not any("__pycache__" in n or n.endswith(".pyc") for n in names)


def test_the_metadata_names_the_licence_the_urls_and_the_pyspark_range(
    installed: Installed,
) -> None:
    meta = _metadata(installed.wheel)
    assert meta["License-Expression"] == "Apache-2.0"
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
    assert set(urls) == {"Homepage", "Documentation", "Source", "Issues"}
    assert urls["Source"] == "https://github.com/statefulbolts/statefulbolts"
    assert meta["Author"]
    assert "Typing :: Typed" in meta.get_all("Classifier")
    assert meta["Keywords"]
    requires = meta.get_all("Requires-Dist")
    assert "pyspark<5,>=3.5" in requires
    assert 'mkdocs-material>=9.5; extra == "docs"' in requires
    assert 'mkdocs-material>=9.5; extra == "test"' in requires

    shown = installed.run("-m", "pip", "show", "--verbose", "statefulbolts").stdout
    assert f"Location: {installed.target}" in shown
    assert "License-Expression: Apache-2.0" in shown
    assert "Home-page: https://github.com/statefulbolts/statefulbolts" in shown
    assert "Source, https://github.com/statefulbolts/statefulbolts" in shown


_PROBE = """
import importlib.util, json, sys
import checkpoint, providers, recovery, statefulbolts, statefulbolts.examples.wordcount
import statefulbolts.ui._server as server
from providers import extlib_origin
print(json.dumps({
    "files": [m.__file__ for m in (checkpoint, providers, recovery, statefulbolts,
                                   statefulbolts.examples.wordcount)],
    "static": str(server.STATIC_DIR),
    "examples": importlib.util.find_spec("examples") is not None,
    "sqlite_state": extlib_origin("sqlite_state"),
    "editable": sorted(n for n in sys.modules if "editable" in n),
}))
"""


def test_only_the_installed_files_are_imported_and_no_top_level_examples(
    installed: Installed,
) -> None:
    probe = json.loads(installed.run("-c", _PROBE).stdout)
    target = str(installed.target) + os.sep
    assert all(f.startswith(target) for f in probe["files"]), probe["files"]
    assert probe["static"] == str(installed.target / "statefulbolts/ui/static")
    assert probe["examples"] is False
    assert probe["editable"] == []
    assert probe["sqlite_state"] == str(installed.target / "providers/extlib/sqlite_state.py")


def test_the_word_count_and_the_sqlite_state_tour_run_from_the_wheel(installed: Installed) -> None:
    usage = installed.run("-m", "statefulbolts.examples.wordcount", "--help").stdout
    assert usage.startswith("usage: python -m statefulbolts.examples.wordcount ")
    conf = installed.target / "statefulbolts/examples/conf/sqlite.json"
    out = installed.run(
        "-m", "statefulbolts.examples.wordcount", "--sentences", SENTENCES, "--json", "--conf", conf
    ).stdout
    report = json.loads(out[out.index("{") :])  # the one JSON document --json prints
    assert report["exact"] is True
    assert report["sentences"] == SENTENCES
    assert report["state"]["provider"] == "sqlite_state.SqliteKeyValueStateProvider"
    assert (installed.elsewhere / "wordcount.sqlite3").is_file()  # the conf's relative path

    cli = installed.target / "bin" / "statefulbolts"
    dump = installed.run(
        cli, "state", "dump", "--conf", conf, "--topology", "wordcount", "--component", "count"
    ).stdout
    rows = [json.loads(line) for line in dump.splitlines()]
    assert {r["key"]: r["value"] for r in rows} == dict(expected_counts(SENTENCES))
    assert {r["task"] for r in rows} == {0, 1}


_DASHBOARD = """
import json, sys, urllib.request
from statefulbolts import LocalCluster
from statefulbolts.examples.wordcount import build

def get(url):
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.status, response.read().decode()

with LocalCluster("local[2]") as cluster:
    handle = cluster.submit_topology("wc-ui", {"topology.ui.port": 0}, build(200, 2))
    url = handle.ui_url
    pages = {p: get(url + p) for p in ("", "static/dashboard.js", "static/dashboard.css",
                                       "api/topology", "metrics")}
    handle.await_idle(600)
    pages["api/snapshot"] = get(url + "api/snapshot")
    handle.kill()
print(json.dumps(pages))
"""


def test_the_dashboard_serves_its_installed_page(installed: Installed) -> None:
    pages = json.loads(installed.run("-c", _DASHBOARD).stdout.strip().splitlines()[-1])
    assert {p: status for p, (status, _) in pages.items()} == dict.fromkeys(pages, 200)
    static = ROOT / "statefulbolts/ui/static"
    assert pages[""][1] == (static / "index.html").read_text(encoding="utf-8")
    assert pages["static/dashboard.js"][1] == (static / "dashboard.js").read_text(encoding="utf-8")
    assert json.loads(pages["api/topology"][1])["topology"] == "wc-ui"
    assert "statefulbolts_transactions" in pages["metrics"][1]
    assert "wc-ui" in pages["metrics"][1]
    assert json.loads(pages["api/snapshot"][1])
