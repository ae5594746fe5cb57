"""The benchmarks run end to end, small, and report what their docstrings promise.

Their figures are not asserted (speed belongs to the benchmark, not to tests); their shape and
their exactness are. Each runs as its script (``python bench/NAME.py ...``): it builds and stops
its own SparkSession. The ones that need no server of the tests' run one after the other in one
interpreter (``shared_benches``), so Spark's JVM starts once for them, and so do the two on the
test's Kafka broker (``kafka_benches``); the step timer (no Spark) runs in one of its own.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.spark

ROOT = Path(__file__).resolve().parents[2]

# The benches that need no server of the tests', in one interpreter: each test's command line.
SHARED = {
    "test_wordcount_bench_reports_exact_runs_and_their_ratios": [
        "bench/wordcount.py", "--words", "20000", "--repeat", "2", "--max-spout-pending", "500",
        "--interval", "100", "--json",
    ],
    "test_transactional_bench_reports_both_shapes_exact_with_their_ratios": [
        "bench/transactional.py", "--words", "20000", "--take", "300", "--provider", "memory",
        "--json",
    ],
    "test_scale_bench_sweeps_state_and_parallelism_exactly_and_draws_its_plots": [
        "bench/scale.py", "--words", "20000", "--sizes", "1000,5000", "--parallelisms", "1,2",
        "--rounds", "1", "--plots", "{folder}", "--json",
    ],
    # A 1 s warm-up (the bench's is 5 s at 2,000/s): its figures are not asserted, their shape is.
    "test_latency_bench_reports_percentiles_the_stage_breakdown_and_its_floor": [
        "bench/latency.py", "--rates", "500", "--seconds", "3", "--baseline-repeat", "3",
        "--warm-seconds", "1", "--json",
    ],
    "test_soak_bench_counts_exactly_and_samples_rss_into_a_plot": [
        "bench/soak.py", "--minutes", "0.1", "--rate", "500", "--vocab", "20000",
        "--sample-secs", "0.5", "--out", "{folder}", "--json",
    ],
    "test_soak_ttl_keeps_the_key_count_flat_with_a_ttl_and_growing_without": [
        "bench/soak_ttl.py", "--minutes", "0.17", "--rate", "200", "--ttl", "3",
        "--sample-secs", "0.5", "--providers", "memory", "--out", "{folder}", "--json",
    ],
}  # fmt: skip

# Runs each script as ``python SCRIPT ARGS`` would (``runpy``, as ``__main__``, its folder first
# on ``sys.path``), its stdout and stderr to files of its own; then undoes what it left in the
# process: its Spark (a script that did not stop its session would hand it, with its settings,
# to the next), the in-memory provider's store, the environment, ``sys.path``, the root logger.
_RUNNER = """
import contextlib, json, logging, os, runpy, sys, traceback

for script, argv, out, err in json.loads(sys.argv[1]):
    environ, root, path = dict(os.environ), logging.getLogger(), list(sys.path)
    handlers, level = list(root.handlers), root.level
    with open(out, "w") as o, open(err, "w") as e:
        with contextlib.redirect_stdout(o), contextlib.redirect_stderr(e):
            sys.argv, sys.path[0] = [script, *argv], os.path.dirname(os.path.abspath(script))
            try:
                runpy.run_path(script, run_name="__main__")
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
            except BaseException:
                traceback.print_exc()
                code = 1
    if "pyspark" in sys.modules:
        from pyspark import SparkContext

        if SparkContext._active_spark_context is not None:
            SparkContext._active_spark_context.stop()
    memory = sys.modules.get("providers.memory")
    if memory is not None:
        memory.InMemoryKeyValueStateProvider._store.clear()
    os.environ.clear()
    os.environ.update(environ)
    root.handlers[:], root.level = handlers, level
    sys.path[:] = path
    print(json.dumps({"script": script, "exit": code}), flush=True)
"""


@dataclass
class BenchRun:
    """One bench's run: its exit status, what it printed, its folder (for ``{folder}``)."""

    exit: int
    stdout: str
    stderr: str
    folder: Path

    def report(self) -> dict[str, Any]:
        """Its ``--json`` report; the run must have exited 0."""
        assert self.exit == 0, self.stderr[-2000:]
        report: dict[str, Any] = json.loads(self.stdout)
        return report


def run_benches(
    commands: dict[str, list[str]],
    request: pytest.FixtureRequest,
    tmp_path_factory: pytest.TempPathFactory,
    **fill: str,
) -> dict[str, BenchRun]:
    """The selected tests' commands, run one after the other in one interpreter (``_RUNNER``).

    Spark's JVM starts once for all of them: a start is some 4 s on an idle two-core machine,
    about 10 s on a busy one, and a bench's own session in a warm JVM takes under a second.
    ``{folder}`` in a command is a new folder of its run, ``{NAME}`` is ``fill[NAME]``.
    """
    selected = {getattr(item, "originalname", None) for item in request.session.items}
    runs, folders = [], {}
    for name in [n for n in commands if n in selected]:
        run = tmp_path_factory.mktemp("bench")
        folder = folders[name] = run / "files"
        folder.mkdir()
        argv = [arg.format(folder=folder, **fill) for arg in commands[name]]
        runs.append([argv[0], argv[1:], str(run / "stdout"), str(run / "stderr")])
    done = subprocess.run(
        [sys.executable, "-c", _RUNNER, json.dumps(runs)],
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        capture_output=True,
        text=True,
        timeout=600 * max(len(runs), 1),
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]  # the runner itself failed
    exits = [json.loads(line)["exit"] for line in done.stdout.splitlines()]
    assert len(exits) == len(runs), done.stdout
    return {
        name: BenchRun(code, Path(out).read_text(), Path(err).read_text(), folders[name])
        for name, code, (_, _, out, err) in zip(folders, exits, runs, strict=True)
    }


@pytest.fixture(scope="module")
def shared_benches(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, BenchRun]:
    """The runs of ``SHARED``, in one interpreter."""
    return run_benches(SHARED, request, tmp_path_factory)


@pytest.fixture
def bench(request: pytest.FixtureRequest, shared_benches: dict[str, BenchRun]) -> BenchRun:
    """This test's run of ``SHARED``."""
    return shared_benches[request.node.originalname]


# The benches against the test's Kafka broker, in one interpreter of their own.
WITH_KAFKA = {
    "test_sink_bench_checks_every_run_s_output_and_reports_its_ratios_and_latency": [
        "bench/sinks.py", "--quick", "--bootstrap", "{bootstrap}", "--plots", "{folder}",
        "--json",
    ],
    "test_kafka_bench_counts_exactly_from_the_topic_and_from_files": [
        "bench/kafka.py", "--bootstrap", "{bootstrap}", "--words", "20000", "--rounds", "1",
        "--peers-python", "", "--no-ingest", "--json",
    ],
}  # fmt: skip


@pytest.fixture(scope="module")
def kafka_benches(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, kafka_broker: Any
) -> dict[str, BenchRun]:
    """The runs of ``WITH_KAFKA``, in one interpreter."""
    return run_benches(WITH_KAFKA, request, tmp_path_factory, bootstrap=kafka_broker.bootstrap)


@pytest.fixture
def kafka_bench(request: pytest.FixtureRequest, kafka_benches: dict[str, BenchRun]) -> BenchRun:
    """This test's run of ``WITH_KAFKA``."""
    return kafka_benches[request.node.originalname]


def test_wordcount_bench_reports_exact_runs_and_their_ratios(bench: BenchRun) -> None:
    report = bench.report()
    assert report["words"] >= 20000
    runs = report["runs"]
    assert set(runs) == {"baseline", "same_shape", "memory"}
    assert report["vocab"] > 1000  # the Zipf corpus, not the examples' 94 words
    for run in runs.values():
        assert run["exact"] is True
        assert len(run["all_seconds"]) == 2
        assert run["seconds"] == min(run["all_seconds"])
        assert run["words_per_sec"] == round(report["words"] / run["seconds"])
    assert report["ratio_memory_vs_baseline"] == round(
        runs["memory"]["words_per_sec"] / runs["baseline"]["words_per_sec"], 3
    )
    assert report["ratio_memory_vs_same_shape"] == round(
        runs["memory"]["words_per_sec"] / runs["same_shape"]["words_per_sec"], 3
    )
    per_round = report["ratio_memory_vs_baseline_per_round"]
    assert len(per_round) == 2
    assert report["ratio_memory_vs_baseline_median_round"] == statistics.median(per_round)
    # Each round's ratio to that round's same-shape job, from the seconds both runs took.
    shape_rounds = report["ratio_memory_vs_same_shape_per_round"]
    assert report["ratio_memory_vs_same_shape_median_round"] == statistics.median(shape_rounds)
    pairs = zip(runs["same_shape"]["all_seconds"], runs["memory"]["all_seconds"], strict=True)
    assert shape_rounds == pytest.approx([shape / mine for shape, mine in pairs], rel=0.02)
    # 2,000 sentences at most 500 in flight: several transactions, each a median figure.
    memory = runs["memory"]
    assert memory["prepares"] >= 4
    assert 0 < memory["tuples_per_prepare_median"] <= 500
    assert len(memory["transaction_seconds_medians"]) == 2
    assert all(0 < s < memory["seconds"] for s in memory["transaction_seconds_medians"])


def run_steps_bench(script: str, *args: str) -> tuple[dict[str, Any], list[str]]:
    """A one-task bench (``count_steps``, ``split_steps``) run small: its report, its table."""
    result = subprocess.run(
        [sys.executable, f"bench/{script}", "--rounds", "2", *args, "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    lines = result.stdout.splitlines()
    report: dict[str, Any] = json.loads(lines[-1])
    assert len(report["loads"]) == 2
    assert all(len(v) == 2 and min(v) > 0 for v in report["seconds"].values())
    return report, lines[1:-1]


def test_count_steps_bench_times_every_step_every_way_and_checks_the_counts() -> None:
    report, table = run_steps_bench(
        "count_steps.py", "--words", "3000", "--vocab", "200", "--reference", "--python"
    )
    assert report["words"] == 3000
    steps = ["ack", "value", "state", "emit", "batch"]
    names = [*steps, *(f"{s}_ref" for s in steps[:-1]), *(f"{s}_py" for s in steps[:-1])]
    assert set(report["seconds"]) == set(names)
    # The table: one line per step, each with its seconds and what it adds per word.
    assert [line.split()[0] for line in table] == names


def test_split_steps_bench_times_the_split_each_way_and_checks_the_words() -> None:
    report, table = run_steps_bench("split_steps.py", "--sentences", "300", "--python")
    assert report["words"] == 3000
    assert set(report["seconds"]) == {"tuple", "batch", "tuple_py"}
    assert [line.split()[0] for line in table] == ["tuple", "batch", "tuple_py"]
    assert table[1].endswith("1.00x batch")


def test_python_only_runs_the_python_twins_and_puts_the_compiled_parts_back() -> None:
    from bench._native import python_only
    from providers._layered import COMPILED, LayeredKeyValueState
    from statefulbolts.runtime import _rows
    from statefulbolts.runtime._collector import COMPILED_EMIT, _TaskBasicCollector

    assert COMPILED and COMPILED_EMIT and _rows.COMPILED  # built by the test command
    compiled = (LayeredKeyValueState.get, LayeredKeyValueState.put, _TaskBasicCollector.emit)
    with python_only():
        assert not _rows.COMPILED
        assert LayeredKeyValueState.get is LayeredKeyValueState._get
        assert LayeredKeyValueState.put is LayeredKeyValueState._put
        assert _TaskBasicCollector.emit is _TaskBasicCollector._emit
    assert _rows.COMPILED
    assert (LayeredKeyValueState.get, LayeredKeyValueState.put, _TaskBasicCollector.emit) == (
        compiled
    )
    assert {"get", "put"}.isdisjoint(vars(LayeredKeyValueState))
    assert "emit" not in vars(_TaskBasicCollector)


def test_transactional_bench_reports_both_shapes_exact_with_their_ratios(bench: BenchRun) -> None:
    report = bench.report()
    runs = report["runs"]
    assert set(runs) == {
        "baseline",
        "memory-pending1",
        "memory-pending4",
        "combine-memory-pending1",
        "combine-memory-pending4",
    }
    assert all(run["exact"] is True for run in runs.values())
    for name in ("memory-pending1", "combine-memory-pending4"):
        # 20k words are ~2100 sentences: over 4 partitions of 300 a batch, two batches at least
        assert runs[name]["batches"] >= 2
        assert set(runs[name]["phase_seconds"]) >= {"process", "commit"}
    base = runs["baseline"]["words_per_sec"]
    assert report["ratios"]["combine-memory-pending1_vs_baseline"] == round(
        runs["combine-memory-pending1"]["words_per_sec"] / base, 3
    )
    assert report["combine-memory_pending4_vs_pending1"] == round(
        runs["combine-memory-pending4"]["words_per_sec"]
        / runs["combine-memory-pending1"]["words_per_sec"],
        3,
    )
    # CPU seconds by process role: every configuration's driver, JVM and Python workers did
    # work, and each round's total is set against that round's baseline.
    cpu = report["cpu"]
    assert set(cpu) == set(runs)
    for name, entry in cpu.items():
        spent = entry["median_seconds"]
        assert spent["driver"] > 0 and spent["jvm"] > 0 and spent["python_workers"] > 0
        assert spent["total"] >= spent["driver"] + spent["jvm"] + spent["python_workers"] - 0.003
        if name == "baseline":
            assert "cpu_vs_baseline" not in entry
        else:
            assert len(entry["cpu_vs_baseline"]) == 1 and entry["cpu_vs_baseline"][0] > 0


def test_scale_bench_sweeps_state_and_parallelism_exactly_and_draws_its_plots(
    bench: BenchRun,
) -> None:
    report, tmp_path = bench.report(), bench.folder
    assert report["exact"] is True and report["wrong"] == []
    runs = report["runs"]
    # Every provider at every state size (2 tasks per bolt), and every parallelism (first size).
    sizes = {(r["provider"], r["state_keys"]) for r in runs if r["parallelism"] == 2}
    assert sizes == {(p, n) for p in ("memory", "redis") for n in (1000, 5000)}
    assert {(r["provider"], r["parallelism"]) for r in runs} >= {("memory", 1), ("redis", 1)}
    for run in runs:
        assert run["exact"] is True
        assert 0 < run["ratio_same_shape"]
        assert run["peak_rss"]["driver_mb"] > 0 and run["peak_rss"]["python_worker_max_mb"] > 0
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert pngs == [
        "scale-rss-vs-state.png",
        "scale-throughput-vs-parallelism.png",
        "scale-throughput-vs-state.png",
    ]
    assert all((tmp_path / name).stat().st_size > 10_000 for name in pngs)


def test_latency_bench_reports_percentiles_the_stage_breakdown_and_its_floor(
    bench: BenchRun,
) -> None:
    report = bench.report()
    assert report["interval_ms"] == 100
    assert report["baseline_ms"]["one_stage"] > 0 and report["baseline_ms"]["two_stage"] > 0
    (run,) = report["runs"]
    assert run["emitted"] == run["acked"] == 1500 and run["failed_calls"] == 0
    # Whether 500/s is sustained depends on the machine and what else runs on it: the verdict
    # must follow from the figures it is made of (up to their rounding).
    achieved, acked = run["achieved_per_sec"], run["acked_per_sec"]
    kept_up = run["planned_tuples"] == run["emitted"] and achieved >= 485 and acked >= 450
    assert run["sustained"] is kept_up or min(abs(achieved - 485), abs(acked - 450)) < 0.1
    latency = run["latency_ms"]
    assert 0 < latency["p50"] <= latency["p90"] <= latency["p99"] <= latency["max"]
    stages = run["stages_ms"]
    assert {"buffer", "prepare", "to_commit"} <= set(stages)
    assert 0.9 < sum(s["share"] for s in stages.values() if isinstance(s, dict)) < 1.1


def test_soak_bench_counts_exactly_and_samples_rss_into_a_plot(bench: BenchRun) -> None:
    report, tmp_path = bench.report(), bench.folder
    assert report["exact"] is True and report["mismatched"] == []
    # The paced spout stops at the deadline: on a busy machine it may emit fewer than the
    # 0.1 min x 500/s it plans, and every one it emitted must be acked and counted. Six
    # seconds give twelve samples: enough for the growth figures and the plot.
    assert 0 < report["emitted"] == report["acked"] <= 3000
    words = report["emitted"] * report["words_per_tuple"]
    assert report["words_counted"] == report["words_expected"] == words
    assert report["growth"]
    assert {p.name for p in tmp_path.iterdir()} >= {"soak.csv", "soak.json", "soak.png"}
    assert (tmp_path / "soak.png").stat().st_size > 10_000


@pytest.mark.kafka
def test_sink_bench_checks_every_run_s_output_and_reports_its_ratios_and_latency(
    kafka_bench: BenchRun,
) -> None:
    report, tmp_path = kafka_bench.report(), kafka_bench.folder
    throughput = report["throughput"]
    assert throughput["wrong"] == [] and throughput["vocab"] > 1000  # the Zipf corpus
    (row,) = throughput["rounds"]
    assert row["load_avg_1m"] >= 0 and "quix" not in row  # --quick runs no peer
    eo, alo = row["exactly_once"], row["at_least_once"]
    for run in (eo, alo):
        # Read back read_committed: one update per input word, each word's counts 1, 2, ... n.
        assert run["exact"] is True and run["every_update_once"] is True
        assert run["output_records"] == throughput["words"]
        assert run["output_words"] == throughput["vocab"]
        assert run["prepares"] >= 1 and run["publish_steps"] >= 1
        # The CPU its processes spent: the driver, Spark's JVM and the Python workers all work
        # (the broker was given, not started: it is not the bench's to count).
        cpu = run["cpu_s"]
        assert cpu["driver"] > 0 and cpu["jvm"] > 0 and cpu["python_workers"] > 0
        assert "broker" not in cpu
        assert cpu["total"] == pytest.approx(sum(v for k, v in cpu.items() if k != "total"), 0.01)
    assert eo["commits"] >= 1 and eo["commit_s_median"] > 0
    assert row["ratios"] == {
        "exactly_once_vs_at_least_once": round(alo["seconds"] / eo["seconds"], 3),
        "cpu_exactly_once_vs_at_least_once": round(
            alo["cpu_s"]["total"] / eo["cpu_s"]["total"], 3
        ),
    }
    goal = throughput["goals"]["exactly_once_vs_at_least_once"]
    assert (goal["target"], goal["rounds"]) == (0.8, 1)
    assert goal["met"] is (row["ratios"]["exactly_once_vs_at_least_once"] >= 0.8)
    runs = report["latency"]["runs"]
    assert {(r["sink"], r["rate"], r["interval_ms"]) for r in runs} == {
        ("exactly_once", 200, 200),
        ("at_least_once", 200, 200),
    }
    for run in runs:
        assert run["exact"] is True and run["all_seen"] is True
        assert run["seen"] == run["paced_records"] == 200
        latency = run["latency_ms"]
        assert 0 < latency["p50"] <= latency["p90"] <= latency["p99"] <= latency["max"]
        assert len(run["quantiles_ms"]) == 201 and len(run["load_avg_1m"]) == 2
        # The verdict follows from the figures it is made of.
        growth = run["p50_last_third_ms"] / max(run["p50_first_third_ms"], 1.0)
        kept_up = run["sent_per_sec"] >= 190 and run["visible_per_sec"] >= 180 and growth < 1.5
        assert run["sustained"] is kept_up
    assert (tmp_path / "sinks-latency.png").stat().st_size > 10_000


@pytest.mark.kafka
def test_kafka_bench_counts_exactly_from_the_topic_and_from_files(kafka_bench: BenchRun) -> None:
    report = kafka_bench.report()
    wordcount = report["wordcount"]
    assert wordcount["wrong"] == [] and wordcount["words"] == 20000
    assert [r["round"] for r in wordcount["rounds"]] == [1]
    for row in wordcount["rounds"]:
        assert row["files"]["exact"] is True and row["kafka"]["exact"] is True
        assert row["files"]["prepares"] >= 1 and row["kafka"]["prepares"] >= 1
        assert row["ratios"] == {
            "kafka_vs_files": round(row["files"]["seconds"] / row["kafka"]["seconds"], 3)
        }
    assert set(wordcount["ratios_median"]) == {"kafka_vs_files"}


def test_soak_ttl_keeps_the_key_count_flat_with_a_ttl_and_growing_without(bench: BenchRun) -> None:
    """The soak with expiring keys, tiny: bounded with a TTL, not without.

    Two runs of 10 s each on the in-memory provider: 200 new keys a second under a 3 s TTL,
    then without one. What it asserts are the figures it prints: with the TTL the committed
    key count levels off near ``rate x ttl`` while without it every key emitted stays; the
    driver's RSS (where the in-memory state lives) does not grow with the TTL.
    """
    report, tmp_path = bench.report(), bench.folder
    assert report["exact"] is True and report["expected_plateau_keys"] == 600
    ttl, none = report["providers"]["memory"]["ttl"], report["providers"]["memory"]["none"]
    # Without a TTL every key emitted is in the state at the end, and the count kept rising.
    assert none["final_keys"] == none["emitted"] == none["acked"] > 1000
    assert none["keys"]["growth"] > 0.5 * none["emitted"]
    assert none["keys"]["slope_second_half_per_min"] > 0.5 * 200 * 60
    # With one, as many keys went in, but the count levelled off at the keys of the last TTL
    # (a loaded machine lets a commit lag, hence the slack), and did not keep rising.
    assert ttl["emitted"] > 1000
    plateau = report["expected_plateau_keys"]
    assert ttl["final_keys"] <= 2 * plateau and ttl["keys"]["last"] <= 2 * plateau
    # Its peak stayed well below what went in (half on an idle machine; a busy one delays the
    # commits that expire keys, so the bound leaves room).
    assert ttl["keys"]["peak"] < 0.75 * ttl["emitted"]
    assert (
        ttl["keys"]["slope_second_half_per_min"] < 0.1 * none["keys"]["slope_second_half_per_min"]
    )
    assert ttl["driver_rss_mb"]["growth"] < 5
    ratios = report["ratios_none_vs_ttl"]["memory"]
    assert ratios["final_keys"] == round(none["final_keys"] / ttl["final_keys"], 2) > 2
    assert ratios["state_memory"] == "driver_rss_mb"
    saved = json.loads((tmp_path / "soak_ttl.json").read_text())
    assert len(saved["providers"]["memory"]["ttl"]["samples"]) >= 10
    assert (tmp_path / "soak_ttl.png").stat().st_size > 10_000
