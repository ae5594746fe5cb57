"""Ingest against spout parallelism on a standalone cluster: partitioned spout against driver spout.

    python bench/ingest.py                    # 800k lines, 1, 2, 4 spout tasks, 2 rounds
    python bench/ingest.py --json > out.json  # the figures as one JSON document on stdout
    python bench/ingest.py --replot docs/bench/ingest.json   # redraw, run nothing

The bench starts a Spark standalone master and two workers (one core, 1 GiB each) on
127.0.0.1 with ``tests/standalone_cluster.py``'s ``start_standalone`` (imported from there by
path: the tests and the bench start the cluster the same way), and this process is the driver.
The topology is ``lines -> count``: ``count`` is a no-op stateful bolt (it counts what it gets,
acks each tuple, puts its count in its state once per transaction), taking ``lines`` by
``--grouping`` (default ``local_or_shuffle``: spout task i feeds count task i, so a partitioned
spout's read and the count are one chained stage on the executor). ``count`` has as many tasks
as the spout. The same lines, ``--files`` files, are read by

- ``partitioned``: a ``DirectorySpout``, read inside each PREPARE job on the executors;
- ``driver``: a plain ``Spout`` that emits every line from the driver (its tasks share the
  lines out), the baseline;

at each ``--parallelisms`` spout tasks, in ``--rounds`` rounds whose order alternates, after a
warm-up run of each kind. Throughput is lines over the wall time from submit to the last
commit; the counts are checked in every run (a wrong one makes the exit status 1). Each figure
is also a ratio to the 1-task run of its kind in the same round (the machine is shared: ratios
within a round are the figures to trust).

The 16-executor projection, on paper, from costs measured here: partitioned runs of
``--calibration-records`` lines at each ``--parallelisms`` spout tasks, each with a small and a
large ``topology.max.spout.pending`` (records per task per transaction, ``B``). Over the span
from the first PREPARE's start to the last job's end, ``span = T * a(p) + N * b / min(p, 2)``
(``T`` transactions, ``N`` lines, the tasks sharing two worker cores), so the two budgets give

- ``a(p)``: what a transaction costs beside its records, in wall seconds: the driver's
  coordination (list and assign the partitions, start the job, collect the positions, save,
  commit), Spark's job and task launch, each task's fixed cost (the topology, the state);
- ``c(p)``: the driver's CPU seconds per transaction (its Python process and its JVM, from
  ``/proc``, the JVM's JIT compiler threads left out: a warm-up cost): the part that is serial
  in the driver, ``c0 + c1 * p`` by least squares;
- ``b``: an executor core's seconds per record (read and count), from ``p`` = 1 (one task
  alone on a core).

With ``E`` executors, one spout task each, the tasks' fixed costs run side by side, as the one
task's did at ``p`` = 1, and the driver pays ``c1`` more for each further task, so a
transaction of ``B`` records per task takes ``a(1) + c1 * (E - 1) + B * b``::

    throughput(E) = E * B / (a(1) + c1 * (E - 1) + B * b)

The driver spout's ceiling is the driver's: every tuple is emitted there, so it is one over the
driver's CPU seconds (Python and JVM) per tuple in the ``driver`` runs, whatever ``E`` is. The
model leaves out what one machine cannot show: the network between executors (the count is
chained to the read, so no tuple crosses it) and a shared file system's reads.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
sys.path.insert(0, str(ROOT))

from bench.driver_cpu import Count, Lines, write_corpus  # noqa: E402
from statefulbolts import DirectorySpout, LocalCluster, TopologyBuilder  # noqa: E402

KINDS = ("partitioned", "driver")
WORKER_CORES = 2  # two workers of one core: p tasks run min(p, 2) at a time
LOOPBACK = "127.0.0.1"


def _cpu(jvm: int) -> tuple[float, float]:
    """CPU seconds (user + system) so far of this process and of the driver's JVM ``jvm``.

    The JVM's without its JIT compiler threads: they compile what runs hot, a cost that fades
    as the JVM warms up, and under a load it is most of the JVM's CPU in a short run.
    """
    usage = resource.getrusage(resource.RUSAGE_SELF)
    jvm_cpu = _stat_cpu(Path(f"/proc/{jvm}/stat"))
    for thread in Path(f"/proc/{jvm}/task").iterdir():
        try:
            if "CompilerThre" in (thread / "comm").read_text():
                jvm_cpu -= _stat_cpu(thread / "stat")
        except OSError:
            continue  # the thread ended meanwhile
    return usage.ru_utime + usage.ru_stime, jvm_cpu


def _stat_cpu(path: Path) -> float:
    """utime + stime of a ``/proc`` ``stat`` file, in seconds."""
    fields = path.read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def driver_jvm(spark: Any) -> int:
    """The pid of the driver's JVM: the process PySpark launched for its gateway."""
    pid = int(spark.sparkContext._gateway.proc.pid)
    comm = Path(f"/proc/{pid}/comm").read_text().strip()
    if comm != "java":
        msg = f"the driver's gateway process {pid} is {comm!r}, not a JVM; cannot measure it"
        raise RuntimeError(msg)
    return pid


def run_once(
    cluster: LocalCluster,
    jvm: int,
    kind: str,
    files: list[str],
    lines: int,
    parallelism: int,
    pending: int,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """One topology run: its wall, span, transactions and driver CPU; the count checked."""
    builder = TopologyBuilder()
    folder = str(Path(files[0]).parent)
    spout = DirectorySpout(folder) if kind == "partitioned" else Lines(files)
    builder.set_spout("lines", spout, parallelism)
    declarer = builder.set_bolt("count", Count(), parallelism)
    getattr(declarer, f"{args.grouping}_grouping")("lines")
    conf = {
        "topology.max.spout.pending": pending,
        "topology.state.checkpoint.interval.ms": args.interval,
    }
    infos: list[Any] = []
    (cpu, jvm_cpu), started = _cpu(jvm), time.perf_counter()
    wall_started = time.time()
    handle = cluster.submit_topology(
        f"ingest-{kind}-{parallelism}-{time.time_ns()}",
        conf,
        builder.create_topology(),
        on_transaction=infos.append,
    )
    handle.await_idle(600)
    wall = time.perf_counter() - started
    cpu_after, jvm_after = _cpu(jvm)
    cpu, jvm_cpu = cpu_after - cpu, jvm_after - jvm_cpu
    counted = sum(handle.read_state("count").values())
    handle.kill()
    prepares = [i for i in infos if str(i.action) == "PREPARE" and i.ok]
    first = min((i.at - i.seconds for i in prepares), default=wall_started)
    span = max((i.at for i in infos), default=wall_started + wall) - first
    return {
        "spout": kind,
        "parallelism": parallelism,
        "pending": pending,
        "wall_s": round(wall, 3),
        "span_s": round(span, 3),
        "tuples_per_sec": round(lines / wall),
        "transactions": len(prepares),
        "prepare_s": round(sum(i.seconds for i in prepares), 3),
        "driver_cpu_s": round(cpu, 3),  # the driver's Python process
        "driver_jvm_cpu_s": round(jvm_cpu, 3),
        "exact": counted == lines,
        "counted": counted,
    }


def _progress(tag: str, run: dict[str, Any]) -> None:
    print(
        f"{tag} {run['spout']:<11} p={run['parallelism']} B={run['pending']:>7,}: "
        f"{run['wall_s']:6.2f}s {run['tuples_per_sec']:>9,} lines/s, "
        f"{run['transactions']} PREPAREs, driver CPU {run['driver_cpu_s']:.2f}s + JVM "
        f"{run['driver_jvm_cpu_s']:.2f}s"
        f"{'' if run['exact'] else ' WRONG COUNT ' + str(run['counted'])}",
        file=sys.stderr,
        flush=True,
    )


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Start the cluster, warm up, run the sweep and the calibration; the figures."""
    sys.path.insert(0, str(TESTS))
    from standalone_cluster import start_standalone

    from statefulbolts.runtime import build_session

    base = Path(tempfile.mkdtemp(prefix="ingest-"))
    files = write_corpus(base / "corpus", args.records, args.files)
    lines = len(files) * (args.records // args.files)
    warm_each = max(1, args.records // 10 // args.files)
    warm = write_corpus(base / "warm", warm_each * args.files, args.files)
    calib = write_corpus(base / "calibration", args.calibration_records, args.files)
    calib_lines = len(calib) * (args.calibration_records // args.files)
    spark_conf = {
        "spark.driver.host": LOOPBACK,
        "spark.driver.bindAddress": LOOPBACK,
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.executorEnv.PYTHONPATH": str(ROOT),
        "spark.executorEnv.SPARK_LOCAL_IP": LOOPBACK,
        "spark.pyspark.python": sys.executable,
        "spark.executor.memory": "512m",
    }
    rows: dict[tuple[str, int], list[dict[str, Any]]] = collections.defaultdict(list)
    calibration: list[dict[str, Any]] = []
    wrong: list[str] = []
    load_before = os.getloadavg()
    started = time.perf_counter()
    (base / "cluster").mkdir()
    with start_standalone(base / "cluster", workers=2) as standalone:
        cluster_s = time.perf_counter() - started
        spark = build_session(standalone.url, "statefulbolts-bench-ingest", spark_conf)
        try:
            jvm = driver_jvm(spark)
            with LocalCluster(spark=spark) as cluster:

                def once(kind: str, files: list[str], n: int, p: int, pending: int) -> Any:
                    return run_once(cluster, jvm, kind, files, n, p, pending, args)

                for kind in KINDS:
                    for p in (1, max(args.parallelisms)):  # every Python worker up
                        once(kind, warm, len(warm) * warm_each, p, args.pending)
                print("warmed up", file=sys.stderr, flush=True)
                plan = [(kind, p) for p in args.parallelisms for kind in KINDS]
                for r in range(args.rounds):
                    tag = f"[round {r + 1}/{args.rounds}]"
                    for kind, p in plan if r % 2 == 0 else plan[::-1]:
                        run = {"round": r} | once(kind, files, lines, p, args.pending)
                        rows[(kind, p)].append(run)
                        _progress(tag, run)
                        if not run["exact"]:
                            wrong.append(f"{tag} {kind} p={p}: counted {run['counted']}")
                for p in args.parallelisms:
                    for pending in (args.small_pending, args.pending):
                        run = once("partitioned", calib, calib_lines, p, pending)
                        calibration.append(run)
                        _progress("[calibration]", run)
                        if not run["exact"]:
                            wrong.append(f"[calibration] p={p} B={pending}")
        finally:
            spark.stop()
    load_after = os.getloadavg()
    return {
        "lines": lines,
        "files": args.files,
        "grouping": args.grouping,
        "interval_ms": args.interval,
        "max_spout_pending": args.pending,
        "rounds": args.rounds,
        "cluster": "standalone master + 2 workers (1 core, 1 GiB each) on 127.0.0.1",
        "load_avg_1m_before_after": [round(load_before[0], 2), round(load_after[0], 2)],
        "cluster_start_s": round(cluster_s, 1),
        "bench_s": round(time.perf_counter() - started, 1),
        "runs": [_summary(kind, p, runs) for (kind, p), runs in sorted(rows.items())],
        "calibration": calibration,
        "calibration_lines": calib_lines,
        "model": model(calibration, rows, lines, calib_lines, args),
        "wrong": wrong,
        "exact": not wrong,
    }


def _summary(kind: str, p: int, runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median over rounds, and the ratio to the 1-task run of the same kind and round."""
    tps = [r["tuples_per_sec"] for r in runs]
    return {
        "spout": kind,
        "parallelism": p,
        "tuples_per_sec": round(statistics.median(tps)),
        "tuples_per_sec_min": min(tps),
        "tuples_per_sec_max": max(tps),
        "exact": all(r["exact"] for r in runs),
        "per_round": runs,
    }


def _ratios(result: dict[str, Any]) -> None:
    """Each run's ratio to its kind's 1-task run in the same round; the median per row."""
    one = {
        (row["spout"], r["round"]): r["tuples_per_sec"]
        for row in result["runs"]
        if row["parallelism"] == 1
        for r in row["per_round"]
    }
    for row in result["runs"]:
        ratios = [
            round(r["tuples_per_sec"] / one[(row["spout"], r["round"])], 3)
            for r in row["per_round"]
            if (row["spout"], r["round"]) in one
        ]
        row["ratio_to_1_task_per_round"] = ratios
        row["ratio_to_1_task"] = round(statistics.median(ratios), 3) if ratios else None


def _line(points: dict[int, float]) -> tuple[float, float]:
    """``(intercept, slope)`` of the least-squares line through ``{x: y}``."""
    xs = sorted(points)
    mean_x, mean_y = statistics.mean(xs), statistics.mean(points[x] for x in xs)
    spread = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (points[x] - mean_y) for x in xs) / spread if spread else 0.0
    return mean_y - slope * mean_x, slope


def model(
    calibration: list[dict[str, Any]],
    rows: dict[tuple[str, int], list[dict[str, Any]]],
    lines: int,
    calib_lines: int,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """The 16-executor projection and its inputs (see the module docstring)."""
    cost: dict[int, float] = {}  # a(p): seconds per transaction beside its records
    driver: dict[int, float] = {}  # c(p): the driver's CPU seconds per transaction
    per_record: dict[int, float] = {}  # b(p): an executor core's seconds per record
    for p in sorted({r["parallelism"] for r in calibration}):
        mine = [r for r in calibration if r["parallelism"] == p]
        small = max(mine, key=lambda r: r["transactions"])
        large = min(mine, key=lambda r: r["transactions"])
        extra = small["transactions"] - large["transactions"]
        if extra <= 0:
            continue
        cost[p] = (small["span_s"] - large["span_s"]) / extra
        driver[p] = (_driver_cpu(small) - _driver_cpu(large)) / extra
        cores = min(p, WORKER_CORES)
        per_record[p] = cores * (large["span_s"] - large["transactions"] * cost[p]) / calib_lines
    c0, c1 = _line(driver)
    a, b = cost[1], per_record[1]
    executors, budget = args.executors, args.pending
    tx = a + c1 * (executors - 1) + budget * b
    driver_runs = [r for (kind, _), runs in rows.items() if kind == "driver" for r in runs]
    cpu_per_tuple = statistics.median(_driver_cpu(r) / lines for r in driver_runs)
    return {
        "a_per_transaction_ms": {str(p): round(v * 1000, 1) for p, v in cost.items()},
        "c_driver_cpu_per_transaction_ms": {str(p): round(v * 1000, 2) for p, v in driver.items()},
        "c0_ms": round(c0 * 1000, 2),
        "c1_ms_per_task": round(c1 * 1000, 3),
        "b_us_per_record": {str(p): round(v * 1e6, 3) for p, v in per_record.items()},
        "executors": executors,
        "records_per_task_per_transaction": budget,
        "transaction_s": round(tx, 3),
        "partitioned_tuples_per_sec": round(executors * budget / tx),
        "per_transaction_share": round((a + c1 * (executors - 1)) / tx, 3),
        "driver_spout_cpu_us_per_tuple": round(cpu_per_tuple * 1e6, 3),
        "driver_spout_ceiling_tuples_per_sec": round(1 / cpu_per_tuple) if cpu_per_tuple else None,
        "formula": "E * B / (a(1) + c1 * (E - 1) + B * b)",
    }


def _driver_cpu(run: dict[str, Any]) -> float:
    """The driver's CPU seconds in ``run``: its Python process and its JVM."""
    return float(run["driver_cpu_s"] + run["driver_jvm_cpu_s"])


def describe_model(m: dict[str, Any]) -> str:
    """The projection and its inputs, for a person."""
    e, budget = m["executors"], m["records_per_task_per_transaction"]

    def per_p(values: dict[str, float], unit: str) -> str:
        return ", ".join(f"p={p}: {v:g} {unit}" for p, v in values.items())

    return "\n".join(
        [
            f"model: throughput(E) = {m['formula']}",
            "  a(p), a transaction's cost beside its records: "
            + per_p(m["a_per_transaction_ms"], "ms"),
            f"  c(p), the driver's CPU (Python + JVM) per transaction: "
            f"{per_p(m['c_driver_cpu_per_transaction_ms'], 'ms')} -> c0 = {m['c0_ms']:g} ms, "
            f"c1 = {m['c1_ms_per_task']:g} ms per spout task (least squares)",
            f"  b(p), an executor core's time per record: {per_p(m['b_us_per_record'], 'us')}",
            f"  E = {e} executors, B = {budget:,} records per task per transaction: "
            f"{m['transaction_s']:.3f} s a transaction ({m['per_transaction_share']:.0%} of it "
            f"per-transaction cost) -> {m['partitioned_tuples_per_sec']:,} tuples/s partitioned",
            f"  driver spout: {m['driver_spout_cpu_us_per_tuple']:g} us of driver CPU per tuple "
            f"-> at most {m['driver_spout_ceiling_tuples_per_sec']:,} tuples/s whatever E is",
        ]
    )


def table(result: dict[str, Any]) -> str:
    """The figures for a person."""
    out = [
        f"{result['lines']:,} lines in {result['files']} files, {result['cluster']}, count by "
        f"{result['grouping']} grouping, B = {result['max_spout_pending']:,}, checkpoint every "
        f"{result['interval_ms']} ms; load {result['load_avg_1m_before_after']} (1 min, "
        "before / after)",
        f"median of {result['rounds']} rounds (min-max); x1: / the 1-task run of the same kind "
        "in the same round (median)",
        "",
        f"{'spout':<12} {'p':>2} {'lines/s':>9} {'min-max':>17} {'x1':>6} {'exact':>5}",
    ]
    for row in result["runs"]:
        ratio = row.get("ratio_to_1_task")
        out.append(
            f"{row['spout']:<12} {row['parallelism']:>2} {row['tuples_per_sec']:>9,} "
            f"{row['tuples_per_sec_min']:>8,}-{row['tuples_per_sec_max']:<8,} "
            f"{'' if ratio is None else f'{ratio:.2f}':>6} {'yes' if row['exact'] else 'NO':>5}"
        )
    out += ["", describe_model(result["model"])]
    out.append(f"bench: {result['bench_s']:.0f}s (cluster start {result['cluster_start_s']:.0f}s)")
    return "\n".join(out)


def plot(result: dict[str, Any], path: Path) -> None:
    """Lines per second against spout tasks, both kinds, ratios to the 1-task run marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    fig, ax = plt.subplots(figsize=(8, 5.2))
    colors = {"partitioned": "tab:blue", "driver": "tab:gray"}
    labels = {
        "partitioned": "partitioned spout (DirectorySpout, read on the executors)",
        "driver": "driver spout (every tuple emitted by the driver)",
    }
    for kind in KINDS:
        rows = sorted(
            (r for r in result["runs"] if r["spout"] == kind), key=lambda r: r["parallelism"]
        )
        if not rows:
            continue
        x = [r["parallelism"] for r in rows]
        y = [r["tuples_per_sec"] for r in rows]
        err = [
            [v - r["tuples_per_sec_min"] for v, r in zip(y, rows, strict=True)],
            [r["tuples_per_sec_max"] - v for v, r in zip(y, rows, strict=True)],
        ]
        ax.errorbar(x, y, yerr=err, marker="o", capsize=4, color=colors[kind], label=labels[kind])
        for xi, r in zip(x, rows, strict=True):
            if r.get("ratio_to_1_task") is not None:
                ax.annotate(
                    f"×{r['ratio_to_1_task']:.2f}",
                    (xi, r["tuples_per_sec"]),
                    textcoords="offset points",
                    xytext=(7, 6),
                    fontsize=8,
                    color=colors[kind],
                )
    ps = sorted({r["parallelism"] for r in result["runs"]})
    ax.set_xscale("log", base=2)
    ax.set_xticks(ps, [str(p) for p in ps])
    ax.minorticks_off()
    ax.set_xlim(min(ps) / 1.4, max(ps) * 1.4)
    ax.set_ylim(bottom=0)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_xlabel("spout tasks (count has as many; 2 workers of 1 core)")
    ax.set_ylabel("ingest (lines per second, submit to last commit)")
    ax.grid(True, alpha=0.3)
    m = result["model"]
    fig.suptitle("Ingest against spout parallelism, standalone cluster on 127.0.0.1", fontsize=12)
    ax.set_title(
        f"{result['lines']:,} lines, no-op stateful count by {result['grouping']} grouping, "
        f"median of {result['rounds']} rounds, bars min-max, ×: / 1 task same round, load "
        f"{result['load_avg_1m_before_after'][0]:g} (1 min, 2 cores)\n"
        f"projected, {m['executors']} executors: {m['partitioned_tuples_per_sec']:,} lines/s "
        f"partitioned; driver spout at most {m['driver_spout_ceiling_tuples_per_sec']:,}",
        fontsize=8,
    )
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=1)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    """Run (or redraw) the bench; exit status 1 when a count was wrong."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=800_000, help="lines in all")
    parser.add_argument("--files", type=int, default=8, help="files (partitions)")
    parser.add_argument("--parallelisms", type=_ints, default=[1, 2, 4], help="spout tasks")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--pending", type=int, default=100_000, help="topology.max.spout.pending (B)"
    )
    parser.add_argument(
        "--small-pending", type=int, default=5_000, help="the calibration's small B"
    )
    parser.add_argument(
        "--calibration-records", type=int, default=200_000, help="lines of each calibration run"
    )
    parser.add_argument("--interval", type=int, default=50, help="checkpoint interval, ms")
    parser.add_argument(
        "--grouping", choices=["local_or_shuffle", "shuffle"], default="local_or_shuffle"
    )
    parser.add_argument("--executors", type=int, default=16, help="the projection's E")
    parser.add_argument("--plots", default=str(ROOT / "docs" / "bench"), help="'' for none")
    parser.add_argument("--replot", help="a JSON this script wrote: draw it, run nothing")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = parser.parse_args(argv)
    if args.replot:
        result = json.loads(Path(args.replot).read_text())
    else:
        if 1 not in args.parallelisms:
            parser.error("--parallelisms must include 1: the ratios are to the 1-task run")
        result = measure(args)
        _ratios(result)
    if args.plots:
        folder = Path(args.plots)
        plot(result, folder / "ingest.png")
        if not args.replot:
            (folder / "ingest.json").write_text(json.dumps(result, indent=2) + "\n")
        print(f"plot: {folder / 'ingest.png'}", file=sys.stderr)
    print(json.dumps(result, indent=2) if args.json else table(result), flush=True)
    if not result["exact"]:
        print(f"WRONG results: {result['wrong']}", file=sys.stderr)
    return 0 if result["exact"] else 1


if __name__ == "__main__":
    sys.exit(main())
