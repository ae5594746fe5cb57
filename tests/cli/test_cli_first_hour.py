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
import platform
import re
import signal
import subprocess
import sys
import textwrap
import time
import tomllib
import urllib.request
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

import pytest
from standalone_cluster import DriverProcess
from test_cli import make_state, redis_conf, write_transactional_progress

from checkpoint import CheckPointState, TxPhase
from examples.wordcount import expected_counts
from statefulbolts import cli
from statefulbolts._load import EXAMPLE_SPEC, load_topology
from statefulbolts.errors import ConfigError, TopologyError
from statefulbolts.topology import StormTopology

ROOT = Path(__file__).resolve().parents[2]

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


def test_the_hinted_example_loads_and_a_function_with_arguments_is_one_line(
    script: Path, tmp_path: Path
) -> None:
    assert isinstance(load_topology(EXAMPLE_SPEC), StormTopology)
    done = statefulbolts(
        script, "run", "examples.wordcount:build", cwd=tmp_path, blocked=["pyspark"]
    )
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "error: examples.wordcount:build takes arguments (sentences, parallelism=2, start=0); "
        "expected a StormTopology, a TransactionalTopology or their builder, or a function of no "
        f"arguments returning one (e.g. {EXAMPLE_SPEC})"
    ]


@pytest.mark.parametrize(
    ("spec", "what"),
    [
        ("examples.wordcount:WordCount", " returned WordCount"),
        ("statefulbolts.namespaces:RECORD_MARK", " is a value of type builtins.str"),
        ("examples.wordcount:nothing", ": module 'examples.wordcount' has no attribute 'nothing'"),
    ],
)
def test_an_attribute_that_makes_no_topology_is_named_with_what_was_expected(
    spec: str, what: str
) -> None:
    with pytest.raises(TopologyError) as caught:
        load_topology(spec)
    expected = "expected a StormTopology, a TransactionalTopology or their builder"
    assert str(caught.value).startswith(f"{spec}{what}; {expected}")


def test_a_topology_object_or_a_builder_is_taken_as_it_is(tmp_path: Path, monkeypatch) -> None:
    write_module(
        tmp_path,
        "ready_made",
        """\
        from examples.wordcount import SentenceSpout, build
        from statefulbolts import TopologyBuilder

        TOPOLOGY = build(10)
        BUILDER = TopologyBuilder()
        BUILDER.set_spout("sentences", SentenceSpout(10), 1)
        """,
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert sorted(load_topology("ready_made:TOPOLOGY").bolts) == ["count", "split"]
    built = load_topology("ready_made:BUILDER")
    assert isinstance(built, StormTopology) and not built.bolts and "sentences" in built.spouts


# --------------------------------------------------------------------------- --version
def test_version_comes_from_the_package_metadata(script: Path, tmp_path: Path) -> None:
    done = statefulbolts(script, "--version", cwd=tmp_path, blocked=["pyspark"])
    assert done.returncode == 0, done.stderr
    assert done.stdout == (
        f"statefulbolts {metadata.version('statefulbolts')} (pyspark "
        f"{metadata.version('pyspark')}, Python {platform.python_version()})\n"
    )


def test_version_falls_back_to_the_source_tree(monkeypatch, tmp_path: Path) -> None:
    def no_metadata(name: str) -> str:
        raise metadata.PackageNotFoundError(name)

    monkeypatch.setattr(metadata, "version", no_metadata)
    with (ROOT / "pyproject.toml").open("rb") as f:
        assert cli.package_version() == tomllib.load(f)["project"]["version"]
    other = tmp_path / "pyproject.toml"
    other.write_text('[project]\nname = "something-else"\nversion = "9"\n', encoding="utf-8")
    assert cli._source_version(other) == "unknown"
    assert cli._source_version(tmp_path / "missing.toml") == "unknown"


# --------------------------------------------------------------------------- before Spark
# pyspark is made unimportable: a check that ran after Spark started would never be reached.
REDIS = "providers.redis.RedisKeyValueStateProvider"


@pytest.mark.parametrize(
    ("conf", "error"),
    [
        (
            {"topology.max.spout.pending": -5},
            "error: invalid topology config: topology.max.spout.pending: Input should be "
            "greater than or equal to 0 (got -5)",
        ),
        (
            {"topology.driver.head": "sometimes"},
            "error: invalid topology config: topology.driver.head: Input should be 'auto', "
            "'always' or 'never' (got 'sometimes')",
        ),
        (
            {
                "topology.state.provider": REDIS,
                "topology.state.provider.config": {"jedisPoolConfig": {"port": 70000}},
            },
            "error: topology.state.provider.config: field 'jedisPoolConfig.port': Input should "
            "be less than or equal to 65535 (got 70000)",
        ),
        (
            {
                "topology.state.provider": "sqlite_state.SqliteKeyValueStateProvider",
                "topology.state.extlib.dir": str(ROOT / "extlib"),
                "topology.state.provider.config": {"path": "x.sqlite3", "timeout": "soon"},
            },
            "error: topology.state.provider.config: field 'timeout' must be milliseconds "
            "(an int >= 0)",
        ),
        (
            {"topology.state.provider.config": {"valueClass": "no.such.Class"}},
            "error: valueClass 'no.such.Class': module 'no.such' could not be imported",
        ),
    ],
    ids=["topology-key", "driver-head", "redis-config", "sqlite-config", "value-class"],
)
def test_a_bad_config_value_is_refused_before_spark_starts(
    script: Path, tmp_path: Path, conf: dict[str, object], error: str
) -> None:
    path = write_conf(tmp_path, conf)
    done = statefulbolts(
        script, "run", EXAMPLE_SPEC, "--conf", str(path), cwd=tmp_path, blocked=["pyspark"]
    )
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.splitlines()) == 1, done.stderr
    assert done.stderr.startswith(error), done.stderr
    assert done.stdout == ""


# --------------------------------------------------------------------------- missing extras
@pytest.mark.parametrize(
    ("args", "conf", "blocked", "error"),
    [
        (
            ["--ui"],
            {},
            "uvicorn",
            "error: --ui: the dashboard needs Starlette, uvicorn and prometheus_client: "
            "pip install 'statefulbolts[ui]' (No module named 'uvicorn')",
        ),
        (
            [],
            {"topology.ui.port": 0},
            "prometheus_client",
            "error: topology.ui.port: the dashboard needs Starlette, uvicorn and "
            "prometheus_client: pip install 'statefulbolts[ui]' (No module named "
            "'prometheus_client')",
        ),
        (
            [],
            {"topology.state.provider": REDIS},
            "redis",
            f"error: state provider {REDIS!r}: the Redis state provider needs redis-py: "
            "pip install 'statefulbolts[redis]' (No module named 'redis')",
        ),
    ],
    ids=["ui-flag", "ui-key", "redis"],
)
def test_a_missing_extra_is_one_line_with_the_install_command_before_spark_starts(
    script: Path,
    tmp_path: Path,
    args: list[str],
    conf: dict[str, object],
    blocked: str,
    error: str,
) -> None:
    path = write_conf(tmp_path, conf)
    done = statefulbolts(
        script, "run", EXAMPLE_SPEC, "--conf", str(path), *args,
        cwd=tmp_path, blocked=[blocked, "pyspark"],
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == [error]


# --------------------------------------------------------------------------- a real run
TYPO = "topology.max.spout.pendin"


@pytest.fixture(scope="module")
def word_count_run(
    script: Path, tmp_path_factory: pytest.TempPathFactory
) -> subprocess.CompletedProcess[str]:
    """``statefulbolts run my_topology:topology`` on local Spark, its config with a typo."""
    folder = tmp_path_factory.mktemp("user")
    write_module(folder, "my_topology", MY_TOPOLOGY)
    conf = write_conf(folder, {TYPO: 50})
    return statefulbolts(
        script, "run", "my_topology:topology", "--conf", str(conf), "--name", "wc-first",
        cwd=folder, timeout=600,
    )  # fmt: skip


@pytest.mark.spark
def test_each_warning_is_shown_once(word_count_run: subprocess.CompletedProcess[str]) -> None:
    assert word_count_run.returncode == 0, word_count_run.stderr
    warned = [line for line in word_count_run.stderr.splitlines() if TYPO in line]
    assert warned == [
        f"warning: unknown config key {TYPO!r}; did you mean 'topology.max.spout.pending'?"
    ]
    assert "topology 'wc-first' idle after" in word_count_run.stdout


# What Spark and Hadoop printed on every start before Spark's log was quieted.
SPARK_NOISE = (
    "Using Spark's default log4j profile",
    "Setting default log level",
    "To adjust logging level use sc.setLogLevel",
    "NativeCodeLoader",
)
# Printed by the JVM itself (Spark's launcher always adds jdk.incubator.vector): no log setting
# reaches it.
JVM_NOTICE = "WARNING: Using incubator modules:"


@pytest.mark.spark
def test_spark_says_nothing_by_default(word_count_run: subprocess.CompletedProcess[str]) -> None:
    assert word_count_run.returncode == 0, word_count_run.stderr
    lines = [line for line in word_count_run.stderr.splitlines() if line.strip()]
    assert not [line for line in lines if any(noise in line for noise in SPARK_NOISE)]
    assert [line for line in lines if not line.startswith(JVM_NOTICE)] == [
        f"warning: unknown config key {TYPO!r}; did you mean 'topology.max.spout.pending'?"
    ]


# A word count whose ``flaky`` bolt raises once, in its task's first Spark attempt only.
FLAKY_TOPOLOGY = """\
    from examples.wordcount import SentenceSpout, SplitSentence, WordCount
    from statefulbolts import BasicBolt, Fields, TopologyBuilder
    from statefulbolts.runtime import task_attempt


    class Flaky(BasicBolt):
        def execute(self, tuple, collector):
            if task_attempt() == 0:
                raise RuntimeError("the network blinked")
            collector.emit([tuple.get_value(0)])

        def declare_output_fields(self, declarer):
            declarer.declare(Fields("sentence"))


    def topology():
        builder = TopologyBuilder()
        builder.set_spout("sentences", SentenceSpout(20), 1)
        builder.set_bolt("flaky", Flaky(), 1).shuffle_grouping("sentences")
        builder.set_bolt("split", SplitSentence(), 1).shuffle_grouping("flaky")
        builder.set_bolt("count", WordCount(), 1).fields_grouping("split", Fields("word"))
        return builder.create_topology()
"""


@pytest.mark.spark
def test_an_error_sparks_retry_survives_is_one_line_and_counted(
    script: Path, tmp_path: Path
) -> None:
    """Not Spark's fifty ``ERROR Executor`` lines with a base64 blob, and ``errors 0``."""
    write_module(tmp_path, "flaky", FLAKY_TOPOLOGY)
    done = statefulbolts(script, "run", "flaky:topology", cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr
    lines = [line for line in done.stderr.splitlines() if not line.startswith(JVM_NOTICE)]
    assert len(lines) == 1, done.stderr
    assert re.fullmatch(
        r"WARNING checkpoint\.runner: txid 0: component 'flaky' task \d+: flaky\.Flaky raised "
        # Spark's retry, or the driver's of a head task it ran itself (``topology.driver.head``).
        r"RuntimeError: the network blinked \(a failed attempt: (Spark|the driver) ran the task "
        r"again(, as Spark would)?, and it succeeded\)",
        lines[0],
    ), lines[0]
    assert "  flaky: executed 20, emitted 20, acked 20, failed 0, replayed 0, errors 1" in (
        done.stdout.splitlines()
    )


@pytest.fixture(scope="module")
def idle_ui_run(
    script: Path, tmp_path_factory: pytest.TempPathFactory
) -> subprocess.CompletedProcess[str]:
    """``statefulbolts run tiny:TOPOLOGY --ui --exit-when-idle --json --spark-log info``.

    One driver (one Spark start) for two tests that read different streams of it: the log flag's
    (stderr, where Spark logs) and the exit-when-idle one's (the JSON events on stdout).
    """
    folder = tmp_path_factory.mktemp("idle-ui")
    write_module(folder, "tiny", "from examples.wordcount import build\n\nTOPOLOGY = build(5)\n")
    return statefulbolts(
        script, "run", "tiny:TOPOLOGY", "--ui", "--exit-when-idle", "--json",
        "--spark-log", "info", cwd=folder, timeout=600,
    )  # fmt: skip


@pytest.mark.spark
def test_spark_log_flag_shows_sparks_own_lines(
    idle_ui_run: subprocess.CompletedProcess[str],
) -> None:
    done = idle_ui_run
    assert done.returncode == 0, done.stderr
    assert " INFO SparkContext: Running Spark version " in done.stderr
    assert "Setting default log level" not in done.stderr


def test_the_driver_jvm_starts_with_our_log_config_unless_the_user_has_one(monkeypatch) -> None:
    from statefulbolts.runtime._spark import LOG4J2_CONFIG, spark_log_level, with_log_options

    ours = f"-Dlog4j2.configurationFile={LOG4J2_CONFIG} -Dstatefulbolts.spark.log=ERROR"
    assert with_log_options(None, "ERROR") == ours
    assert with_log_options("-XX:TieredStopAtLevel=1", "ERROR") == (
        f"{ours} -XX:TieredStopAtLevel=1"
    )
    # Below ERROR, Spark's own lines about failed task attempts show too.
    assert with_log_options(None, "WARN") == (
        f"-Dlog4j2.configurationFile={LOG4J2_CONFIG} -Dstatefulbolts.spark.log=WARN "
        "-Dstatefulbolts.spark.taskErrors=NEUTRAL"
    )
    theirs = "-Dlog4j2.configurationFile=/etc/spark/log4j2.properties"
    assert with_log_options(theirs, "WARN") == theirs
    monkeypatch.delenv("STATEFULBOLTS_SPARK_LOG_LEVEL", raising=False)
    assert spark_log_level() == "ERROR"
    monkeypatch.setenv("STATEFULBOLTS_SPARK_LOG_LEVEL", "loud")
    with pytest.raises(ConfigError, match="STATEFULBOLTS_SPARK_LOG_LEVEL='loud' is not a Spark"):
        spark_log_level()


# --------------------------------------------------------------------------- the dashboard
@pytest.mark.spark
def test_the_dashboard_stays_up_after_idle_until_ctrl_c(script: Path, tmp_path: Path) -> None:
    write_module(tmp_path, "tiny", "from examples.wordcount import build\n\nTOPOLOGY = build(5)\n")
    command = [sys.executable, str(script), "run", "tiny:TOPOLOGY", "--ui", "--json"]
    driver = DriverProcess([], tmp_path / "run.log", command=command, cwd=tmp_path)
    try:
        url = driver.until("dashboard", time.monotonic() + 300)["url"]
        assert driver.until("idle", time.monotonic() + 300)["url"] == url
        # Idle, and still serving: the topology's figures, and the page.
        with urllib.request.urlopen(f"{url}api/snapshot", timeout=30) as answer:
            snapshot = json.load(answer)
        with urllib.request.urlopen(url, timeout=30) as answer:
            assert answer.status == 200
        assert driver.process.poll() is None
        driver.process.send_signal(signal.SIGINT)
        done = driver.until("done", time.monotonic() + 120)
        assert driver.process.wait(timeout=120) == 0, driver.tail()
    finally:
        driver.stop()
    assert snapshot["topology"] == "tiny"
    assert done["components"]["count"]["executed"] == sum(expected_counts(5).values())
    with pytest.raises(OSError):  # the dashboard went with the topology
        urllib.request.urlopen(url, timeout=5)


@pytest.mark.spark
def test_exit_when_idle_exits_with_the_dashboard(
    idle_ui_run: subprocess.CompletedProcess[str],
) -> None:
    done = idle_ui_run
    assert done.returncode == 0, done.stderr
    events = [json.loads(line)["event"] for line in done.stdout.splitlines()]
    assert events[0] == "dashboard" and events[-1] == "done" and "idle" not in events


# --------------------------------------------------------------------------- what a store holds
def list_cli(capsys, *args: str) -> tuple[int, str, str]:
    code = cli.main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.redis
def test_checkpoint_list_names_the_topologies_with_their_last_committed_txid(
    redis_db, tmp_path: Path, capsys
) -> None:
    conf = redis_conf(redis_db)
    make_state(conf, "wc/$checkpointspout-0", saved=CheckPointState(3, TxPhase.COMMITTING))
    make_state(conf, "wc/count-0", committed=2, prepared=3)
    make_state(conf, "a/b/$checkpointspout-0", saved=CheckPointState(5, TxPhase.COMMITTED))
    make_state(conf, "fresh/count-1", committed=0)  # no checkpoint saved yet
    write_transactional_progress(conf, "words")  # not a checkpointed topology
    path = write_conf(tmp_path, conf)

    code, out, _ = list_cli(capsys, "checkpoint", "list", "--conf", str(path))
    assert code == 0
    assert out.splitlines() == [
        f"3 checkpointed topologies in {REDIS}",
        "  a/b: last committed txid 5 (checkpoint COMMITTED(5))",
        "  fresh: last committed txid none (checkpoint nothing saved)",
        "  wc: last committed txid 2 (checkpoint COMMITTING(3))",
    ]
    code, out, _ = list_cli(capsys, "checkpoint", "list", "--conf", str(path), "--json")
    assert code == 0
    assert json.loads(out)["topologies"] == [
        {"topology": "a/b", "checkpoint": "COMMITTED(5)", "committed_txid": 5},
        {"topology": "fresh", "checkpoint": None, "committed_txid": None},
        {"topology": "wc", "checkpoint": "COMMITTING(3)", "committed_txid": 2},
    ]

    code, out, err = list_cli(
        capsys, "checkpoint", "status", "--conf", str(path), "--topology", "w"
    )
    assert code == 1
    assert err.splitlines() == [
        "note: nothing stored for topology 'w'; stored: a/b, fresh, wc; did you mean 'wc'?"
    ]


@pytest.mark.redis
def test_transactional_list_and_status_name_the_stored_ids(
    redis_db, tmp_path: Path, capsys
) -> None:
    conf = redis_conf(redis_db)
    write_transactional_progress(conf, "top-n-words-1732")
    write_transactional_progress(conf, "words-2")
    make_state(conf, "wc/count-0", committed=2)  # a checkpointed topology: not listed
    path = write_conf(tmp_path, conf)

    code, out, _ = list_cli(capsys, "transactional", "list", "--conf", str(path))
    assert code == 0
    assert out.splitlines() == [
        f"2 transactional ids in {REDIS}",
        "  top-n-words-1732: last committed txid 2",
        "  words-2: last committed txid 2",
    ]
    code, out, _ = list_cli(capsys, "transactional", "list", "--conf", str(path), "--json")
    assert json.loads(out)["transactional_ids"] == [
        {"transactional_id": "top-n-words-1732", "committed_txid": 2},
        {"transactional_id": "words-2", "committed_txid": 2},
    ]

    code, out, err = list_cli(
        capsys, "transactional", "status", "--conf", str(path), "--id", "top-n-words"
    )
    assert code == 1
    assert "  next txid to commit: 1 (last committed: none)" in out.splitlines()
    assert err.splitlines() == [
        "note: nothing stored for transactional id 'top-n-words'; stored: top-n-words-1732, "
        "words-2; did you mean 'top-n-words-1732'?"
    ]


def test_list_with_a_provider_that_cannot_list_says_so(tmp_path: Path, capsys) -> None:
    (tmp_path / "examples_unlisting.py").write_text(
        "from providers import StateProvider\n\n\n"
        "class Provider(StateProvider):\n"
        "    def new_state(self, namespace, conf, context=None):\n"
        "        raise NotImplementedError\n",
        encoding="utf-8",
    )
    conf = {"topology.state.provider": "examples_unlisting.Provider",
            "topology.state.extlib.dir": str(tmp_path)}  # fmt: skip
    path = write_conf(tmp_path, conf)
    code, _, err = list_cli(capsys, "transactional", "list", "--conf", str(path))
    assert code == 1
    assert err == (
        "error: the state provider examples_unlisting.Provider cannot list its namespaces, so "
        "not its transactional ids\n"
    )


# --------------------------------------------------------------------------- the examples
@pytest.mark.spark
def test_the_examples_say_their_topology_and_transactional_id_first(spark, capsys) -> None:
    from examples import transactional_words, wordcount

    assert wordcount.main(["--sentences", "20", "--name", "wc-named"], spark=spark) == 0
    assert capsys.readouterr().out.splitlines()[0] == "topology: wc-named"

    assert transactional_words.main([], spark=spark) == 0
    first, second = capsys.readouterr().out.splitlines()[:2]
    assert first == "topology: top-n-words"
    assert re.fullmatch(r"transactional id: top-n-words-\d+", second), second

    # Its transactional id is fixed: run it in a process of its own, so its progress does not
    # stay in this process's in-memory store for the tests that run it after this one.
    run = subprocess.run(
        [sys.executable, "-m", "examples.transactional_global_count", "--master", "local[1]"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[:2] == [
        "topology: global-count",
        "transactional id: global-count",
    ]
