"""On a real standalone cluster whose Python has the dependencies but not this project.

The executors' Python is a fresh virtualenv (``python -m venv``) whose only addition is a
``.pth`` line naming this checkout's ``.venv`` site-packages: a path line in a ``.pth`` file
adds that directory but does not run the ``.pth`` files inside it, so the editable install of
this project (a ``.pth`` and a finder there) stays inactive. The first test checks exactly that
in a child process. The master and two one-core workers (``tests/standalone_cluster.py``) run
in a temporary directory with no ``PYTHONPATH``; nothing of ``/work/main`` is on the executors'
path or under their working directory: they get the project only from what the driver ships.
All on 127.0.0.1 (``SPARK_LOCAL_IP``, ``--host``, the drivers bound to loopback, the master's
REST server off). One cluster serves the module; its applications run one after another.

- ``LocalCluster(master="spark://...")`` in a driver process (``tests/cluster_driver.py``):
  executors cannot import ``statefulbolts`` before the topology starts, import it from the
  shipped zip after, the Redis word count ends exact, and the driver's UI lists every job with
  its topology, action and txid.
- ``spark-submit tests/submit_app.py``: ``StormSubmitter`` on spark-submit's session, a bolt
  class defined in the application's ``__main__`` (carried by value), exact counts.
- ``spark-submit "$(python -m statefulbolts.launcher --path)" run my_wordcount:topology``: the
  command line under spark-submit, its ``--master`` ignored, with a topology module in the
  current folder that no executor can import (shipped as a file, with ``examples`` which it
  imports), exact counts.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import shipped_wordcount
from outage_topologies import counts_in_redis, redis_conf
from redis_fixtures import free_port
from standalone_cluster import (
    LOOPBACK,
    ROOT,
    TESTS,
    DriverProcess,
    Standalone,
    spark_home,
    start_standalone,
)

from examples.wordcount import expected_counts
from statefulbolts import launcher

pytestmark = [pytest.mark.spark, pytest.mark.redis, pytest.mark.slow]

SENTENCES = 600
# Short-lived JVMs: the C1 JIT alone and the serial collector start faster on 2 shared cores.
JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
SHIPPED_ZIP = re.compile(r".*/statefulbolts-[0-9a-f]{16}\.zip/statefulbolts/__init__\.py")
CHECK_PYTHON = """
import importlib.util, json, sys
print(json.dumps({
    "have": [m for m in sys.argv[1:] if importlib.util.find_spec(m) is not None],
    "path": sys.path,
}))
"""


@dataclass(frozen=True)
class BareEnv:
    """The executors' Python and the directory the cluster runs in."""

    python: str
    home: Path


@pytest.fixture(scope="module")
def bare(tmp_path_factory: pytest.TempPathFactory) -> BareEnv:
    """A virtualenv with this checkout's dependencies and without this project."""
    home = tmp_path_factory.mktemp("bare-cluster")
    venv = home / "venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120
    )
    python = venv / "bin" / "python"
    site_dir = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True, capture_output=True, text=True, timeout=60,
    ).stdout.strip()  # fmt: skip
    deps = sysconfig.get_paths()["purelib"]  # this checkout's .venv site-packages
    (Path(site_dir) / "checkout-deps.pth").write_text(deps + "\n")
    return BareEnv(str(python), home)


def _env_without_checkout() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


@pytest.fixture(scope="module")
def cluster(bare: BareEnv) -> Iterator[Standalone]:
    with start_standalone(
        bare.home, env=_env_without_checkout(), cwd=bare.home, java_options=JAVA_OPTIONS
    ) as standalone:
        yield standalone


def test_the_executors_python_has_the_dependencies_and_not_this_project(bare: BareEnv) -> None:
    wanted = ["pyspark", "py4j", "redis", "msgpack", "pydantic", "yaml"]
    ours = ["statefulbolts", "providers", "checkpoint", "recovery", "examples"]
    result = subprocess.run(
        [bare.python, "-c", CHECK_PYTHON, *wanted, *ours],
        cwd=bare.home, env=_env_without_checkout(), capture_output=True, text=True,
        timeout=60, check=True,
    )  # fmt: skip
    seen = json.loads(result.stdout)
    assert seen["have"] == wanted
    assert not _checkout_paths(seen["path"])


def _checkout_paths(paths: list[str]) -> list[str]:
    """The entries of ``paths`` in this checkout, outside its ``.venv``."""
    venv = ROOT / ".venv"
    return [p for p in paths if Path(p).is_relative_to(ROOT) and not Path(p).is_relative_to(venv)]


def _spark_submit(cluster: Standalone, bare: BareEnv, *app: str) -> list[str]:
    """``spark-submit`` on the cluster, loopback only, executors on the bare Python."""
    settings = {
        "spark.driver.host": LOOPBACK,
        "spark.driver.bindAddress": LOOPBACK,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.executorEnv.SPARK_LOCAL_IP": LOOPBACK,
        "spark.pyspark.python": bare.python,
        "spark.pyspark.driver.python": sys.executable,
        "spark.executor.memory": "512m",
        "spark.executor.extraJavaOptions": JAVA_OPTIONS,
    }
    command = [str(spark_home() / "bin" / "spark-submit"), "--master", cluster.url]
    command += ["--driver-memory", "768m", "--driver-java-options", JAVA_OPTIONS]
    for key, value in settings.items():
        command += ["--conf", f"{key}={value}"]
    return [*command, *app]


def _submitted_env() -> dict[str, str | None]:
    """What a user's shell has: no PYTHONPATH to this checkout, no PySpark variables."""
    return {
        "PYTHONPATH": None,
        "PYSPARK_PYTHON": None,
        "PYSPARK_DRIVER_PYTHON": None,
        "SPARK_HOME": str(spark_home()),
    }


def _assert_views(views: list[dict[str, str]], bare: BareEnv, shipped: bool) -> None:
    assert views, "no executor answered"
    for view in views:
        assert view["python"] == bare.python
        assert not view["cwd"].startswith(str(ROOT)), view
        # PySpark's own zips are in the .venv's site-packages; nothing else of the checkout.
        assert not _checkout_paths(view["pythonpath"].split(os.pathsep)), view
        if shipped:
            assert SHIPPED_ZIP.fullmatch(view["statefulbolts"]), view
            assert not view["statefulbolts"].startswith(str(ROOT)), view
        else:
            assert view["statefulbolts"] == "ModuleNotFoundError: No module named 'statefulbolts'"


def _timing(what: str, driver: DriverProcess, done: dict[str, Any]) -> None:
    txs = [e for e in driver.seen if e.get("event") in ("tx", "transaction")]
    times = [e.get("t", e.get("at")) for e in driver.seen]
    first = min((t for t in times if t is not None), default=float("nan"))
    print(
        f"{what}: first line after {first - driver.started:.1f} s, done after "
        f"{time.time() - driver.started:.1f} s, {len(txs)} transactions"
    )


def _finish(driver: DriverProcess, timeout: float = 240) -> dict[str, Any]:
    try:
        done = driver.until("done", time.monotonic() + timeout)
        assert driver.process.wait(timeout=120) == 0, driver.tail()
    finally:
        driver.stop()
    return done


def test_local_cluster_on_a_standalone_master_ships_the_project(
    cluster: Standalone, bare: BareEnv, redis_db: Any, tmp_path: Path
) -> None:
    name = "wc-lc"
    driver = DriverProcess(
        [
            "--master", cluster.url,
            "--redis-port", str(redis_db.port),
            "--sentences", str(SENTENCES),
            "--name", name,
            "--pending", "300",
            "--executor-python", bare.python,
            "--probe",
            "--ui-port", str(free_port()),
            "--java-options", JAVA_OPTIONS,
        ],
        tmp_path / "driver.log",
    )  # fmt: skip
    try:
        ready = driver.until("ready", time.monotonic() + 180)
    except BaseException:
        driver.stop()
        raise
    done = _finish(driver)
    assert ready["executors"] == 2
    _assert_views(ready["views"], bare, shipped=False)
    _assert_views(done["views"], bare, shipped=True)
    client = redis_db.client()
    assert counts_in_redis(client, name) == dict(expected_counts(SENTENCES))
    assert not client.keys(f"{name}/*$prepare")
    assert done["failed_transactions"] == 0

    # Spark's UI reads like the protocol: every topology job is "<name>/<ACTION>/txid=<n>";
    # every transaction is one but the COMMITs, which the driver does itself (no pre_commit).
    jobs = [j for j in done["jobs"] if j["jobGroup"] != "probe"]
    assert done["commits"] >= 2
    assert len(jobs) >= done["transactions"] - done["commits"]
    actions = set()
    for job in jobs:
        found = re.fullmatch(rf"{name}/([A-Z]+)/txid=(-?\d+)", job["jobGroup"] or "")
        assert found is not None, job
        action, txid = found.groups()
        actions.add(action)
        assert job["description"].startswith(f"{name}: {action} txid={txid}"), job
        assert sorted(job["jobTags"]) == [f"$topology/{name}", name]  # its group's, its own
        assert job["status"] == "SUCCEEDED", job
    assert {"INITSTATE", "PREPARE"} <= actions and "COMMIT" not in actions
    _timing("LocalCluster on spark://", driver, done)


def test_spark_submit_with_storm_submitter(
    cluster: Standalone, bare: BareEnv, redis_db: Any, tmp_path: Path
) -> None:
    name = "wc-submit"
    command = _spark_submit(
        cluster, bare, str(TESTS / "submit_app.py"),
        "--redis-port", str(redis_db.port), "--sentences", str(SENTENCES), "--name", name,
    )  # fmt: skip
    driver = DriverProcess(
        [], tmp_path / "submit.log", command=command, env=_submitted_env(), cwd=tmp_path
    )
    try:
        ready = driver.until("ready", time.monotonic() + 180)
    except BaseException:
        driver.stop()
        raise
    done = _finish(driver)
    # spark-submit's session: its master and application name, not ours.
    assert (ready["main"], ready["master"], ready["app_name"]) == (
        "__main__",
        cluster.url,
        "submit_app.py",
    )
    assert ready["executor_python"] == bare.python
    _assert_views(ready["views"], bare, shipped=True)
    assert done["outcome"] == {name: "idle"}
    assert counts_in_redis(redis_db.client(), name) == dict(expected_counts(SENTENCES))
    words = sum(expected_counts(SENTENCES).values())
    assert done["components"]["split"]["emitted"] == words  # AppSplit, from __main__, ran
    _timing("spark-submit with StormSubmitter", driver, done)


def test_statefulbolts_run_under_spark_submit_ships_a_module_from_the_current_folder(
    cluster: Standalone, bare: BareEnv, redis_db: Any, tmp_path: Path
) -> None:
    name = "wc-run"
    app = tmp_path / "app"
    app.mkdir()
    shutil.copy(Path(shipped_wordcount.__file__), app / "my_wordcount.py")
    (app / "redis.json").write_text(json.dumps(redis_conf(redis_db.port)))
    found = subprocess.run(
        [sys.executable, "-m", "statefulbolts.launcher", "--path"],
        cwd=app, capture_output=True, text=True, check=True, timeout=60,
    )  # fmt: skip
    assert found.stdout.strip() == launcher.__file__
    command = _spark_submit(
        cluster, bare, found.stdout.strip(),
        "run", "my_wordcount:topology", "--conf", "redis.json", "--name", name, "--json",
        "--master", "local[1]", "--timeout", "240",
    )  # fmt: skip
    driver = DriverProcess([], tmp_path / "run.log", command=command, env=_submitted_env(), cwd=app)
    done = _finish(driver)
    expected = shipped_wordcount_counts()
    assert counts_in_redis(redis_db.client(), name) == expected
    assert done["topology"] == name
    assert done["components"]["count"]["executed"] == sum(expected.values())
    # spark-submit sends the application's stderr to its own stdout.
    warning = f"--master local[1] ignored: spark-submit runs this application on {cluster.url}"
    assert f"WARNING statefulbolts.submitter: {warning}" in driver.text
    _timing("statefulbolts run under spark-submit", driver, done)


def shipped_wordcount_counts() -> dict[str, int]:
    return dict(expected_counts(shipped_wordcount.SENTENCES))
