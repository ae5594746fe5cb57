"""Ingest against spout parallelism on a standalone cluster: partitioned spout against driver spout.

    python bench/ingest.py                    # 400k lines, 1, 2, 4 spout tasks, 2 rounds
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

The 16-executor projection, on paper, from costs measured here: partitioned runs at each
``--parallelisms`` spout tasks, each with a small and a large ``topology.max.spout.pending``
(records per task per transaction, ``B``). Over the span from the first PREPARE's start to the
last job's end, ``span = T * a(p) + N * b / min(p, 2)`` (``T`` transactions, ``N`` lines, the
tasks sharing two worker cores): the two budgets give ``a(p)``, the seconds a transaction costs
beside its records (the driver's coordination: assign, schedule the job, collect the positions,
save, commit; and Spark's job and task launch), and ``b``, an executor core's seconds per record
(read and count), taken at ``p`` = 1 (one task alone on a core). ``a(p) = a0 + a1 * p`` by least
squares over the parallelisms. With ``E`` executors, one spout task each, a transaction of ``B``
records per task takes ``a0 + a1 * E + B * b``, so::

    throughput(E) = E * B / (a0 + a1 * E + B * b)

The driver spout's ceiling is the driver's: every tuple is emitted there, so it is one over the
driver's CPU seconds per tuple, measured in the ``driver`` runs, whatever ``E`` is.
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


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_once(
    cluster: LocalCluster,
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
    cpu, started = _cpu(), time.perf_counter()
    wall_started = time.time()
    handle = cluster.submit_topology(
        f"ingest-{kind}-{parallelism}-{time.time_ns()}",
        conf,
        builder.create_topology(),
        on_transaction=infos.append,
    )
    handle.await_idle(600)
    wall, cpu = time.perf_counter() - started, _cpu() - cpu
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
        "driver_cpu_s": round(cpu, 3),
        "exact": counted == lines,
        "counted": counted,
    }


def _progress(tag: str, run: dict[str, Any]) -> None:
    print(
        f"{tag} {run['spout']:<11} p={run['parallelism']} B={run['pending']:>7,}: "
        f"{run['wall_s']:6.2f}s {run['tuples_per_sec']:>9,} lines/s, "
        f"{run['transactions']} PREPAREs, driver CPU {run['driver_cpu_s']:.2f}s"
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
            with LocalCluster(spark=spark) as cluster:
                for kind in KINDS:
                    for p in (1, max(args.parallelisms)):  # every Python worker up
                        run_once(cluster, kind, warm, len(warm) * warm_each, p, args.pending, args)
                print("warmed up", file=sys.stderr, flush=True)
                plan = [(kind, p) for p in args.parallelisms for kind in KINDS]
                for r in range(args.rounds):
                    tag = f"[round {r + 1}/{args.rounds}]"
                    for kind, p in plan if r % 2 == 0 else plan[::-1]:
                        run = {"round": r} | run_once(
                            cluster, kind, files, lines, p, args.pending, args
                        )
                        rows[(kind, p)].append(run)
                        _progress(tag, run)
                        if not run["exact"]:
                            wrong.append(f"{tag} {kind} p={p}: counted {run['counted']}")
                for p in args.parallelisms:
                    for pending in (args.small_pending, args.pending):
                        run = run_once(cluster, "partitioned", files, lines, p, pending, args)
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
        "model": model(calibration, rows, lines, args),
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


def model(
    calibration: list[dict[str, Any]],
    rows: dict[tuple[str, int], list[dict[str, Any]]],
    lines: int,
    args: argparse.Namespace,
) -> dict[str, Any]:
    """The 16-executor projection and its inputs (see the module docstring)."""
    cost: dict[int, float] = {}
    per_record: dict[int, float] = {}
    for p in sorted({r["parallelism"] for r in calibration}):
        mine = sorted(
            (r for r in calibration if r["parallelism"] == p), key=lambda r: -r["transactions"]
        )
        small, large = mine[0], mine[-1]
        extra = small["transactions"] - large["transactions"]
        a = (small["span_s"] - large["span_s"]) / extra if extra > 0 else 0.0
        cost[p] = a
        per_record[p] = min(p, WORKER_CORES) * (large["span_s"] - large["transactions"] * a) / lines
    # a(p) = a0 + a1 * p, least squares over the parallelisms measured.
    ps = sorted(cost)
    mean_p, mean_a = statistics.mean(ps), statistics.mean(cost[p] for p in ps)
    spread = sum((p - mean_p) ** 2 for p in ps)
    a1 = sum((p - mean_p) * (cost[p] - mean_a) for p in ps) / spread if spread else 0.0
    a0 = mean_a - a1 * mean_p
    b = per_record[1]
    executors, budget = args.executors, args.pending
    tx = a0 + a1 * executors + budget * b
    projected = executors * budget / tx
    driver_runs = [r for (kind, _), runs in rows.items() if kind == "driver" for r in runs]
    cpu_per_tuple = statistics.median(r["driver_cpu_s"] / lines for r in driver_runs)
    return {
        "a_per_transaction_s": {str(p): round(v, 4) for p, v in cost.items()},
        "a0_s": round(a0, 4),
        "a1_s_per_task": round(a1, 4),
        "b_s_per_record": {str(p): round(v * 1e6, 3) for p, v in per_record.items()},
        "b_unit": "microseconds per record per executor core (b at p=2 shows sharing)",
        "executors": executors,
        "records_per_task_per_transaction": budget,
        "transaction_s": round(tx, 3),
        "partitioned_tuples_per_sec": round(projected),
        "driver_share_of_transaction": round((a0 + a1 * executors) / tx, 3),
        "driver_spout_cpu_us_per_tuple": round(cpu_per_tuple * 1e6, 3),
        "driver_spout_ceiling_tuples_per_sec": round(1 / cpu_per_tuple) if cpu_per_tuple else None,
        "formula": "E * B / (a0 + a1 * E + B * b)",
    }


def describe_model(m: dict[str, Any]) -> str:
    """The projection and its inputs, for a person."""
    e, budget = m["executors"], m["records_per_task_per_transaction"]
    return "\n".join(
        [
            f"model: throughput(E) = {m['formula']}; measured: "
            + ", ".join(f"a({p}) = {a * 1000:.1f} ms" for p, a in m["a_per_transaction_s"].items())
            + f" per transaction -> a0 = {m['a0_s'] * 1000:.1f} ms, a1 = "
            f"{m['a1_s_per_task'] * 1000:.1f} ms per spout task (least squares); b = "
            f"{m['b_s_per_record']['1']:.2f} us per record per core at p=1 ("
            + ", ".join(f"p={p}: {v:.2f}" for p, v in m["b_s_per_record"].items() if p != "1")
            + ")",
            f"E = {e} executors, B = {budget:,} records per task per transaction: a transaction "
            f"takes {m['transaction_s']:.3f} s ({m['driver_share_of_transaction']:.0%} of it the "
            f"per-transaction cost) -> {m['partitioned_tuples_per_sec']:,} tuples/s partitioned",
            f"driver spout: {m['driver_spout_cpu_us_per_tuple']:.2f} us of driver CPU per tuple "
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
        f"median of {result['rounds']} rounds, bars min-max, ×: / 1 task same round\n"
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
    parser.add_argument("--records", type=int, default=400_000, help="lines in all")
    parser.add_argument("--files", type=int, default=8, help="files (partitions)")
    parser.add_argument("--parallelisms", type=_ints, default=[1, 2, 4], help="spout tasks")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument(
        "--pending", type=int, default=100_000, help="topology.max.spout.pending (B)"
    )
    parser.add_argument(
        "--small-pending", type=int, default=10_000, help="the calibration's small B"
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
