"""Word count throughput against state size and parallelism, memory and Redis, one Spark session.

    python bench/scale.py                      # 1M words; 10k, 100k, 1M keys; 1, 2, 4 tasks
    python bench/scale.py --words 100000 --max-keys 100000 --rounds 1   # a quick look
    python bench/scale.py --max-keys 10000000  # adds 10M keys (memory: see "Memory" below)
    python bench/scale.py --json > scale.json  # the figures as JSON on stdout
    python bench/scale.py --replot scale.json  # redraw the plots from a saved JSON, no runs
    python bench/scale.py --pending 2000       # 2,000 sentences a transaction: many of them

``bench/wordcount.py``'s stateful word count (Zipf corpus, ``--vocab`` words; the count bolt
emits ``(word, count)`` to a sink unless ``--no-emit``) runs, in alternating rounds, over:

- state sizes: ``--sizes`` filler keys committed before the run (``bench/_state.py``), those up
  to ``--max-keys``, at ``--parallelism`` tasks per bolt, so that each run's transactions touch
  the corpus's words on top of a big state;
- parallelism: ``--parallelisms`` tasks per bolt, over the smallest state size;

each with the in-memory and the Redis provider (``--providers``). Every round first (or, in
every other round, last) runs the plain PySpark baselines at each parallelism: ``same_shape``
(split, partition by word, count and emit per occurrence, no map-side combine) and
``reduceByKey``; each framework figure is also given as a ratio to the ``same_shape`` run of
its own round at the same parallelism, and the configurations run in reverse order every other
round, so a slow spell of a shared machine does not land on one of them only. Figures are the
median over rounds (with min and max). Every run checks its result: the baselines' counts, and
the framework's whole state (the words' counts exact, every filler key there and unchanged); a
wrong one makes the exit status 1.

Memory: a sampler thread (``bench/_rss.py``, ~5 Hz) records the peak RSS of the driver (this
process), Spark's JVM, each Python worker and the Redis server during each run (seeding and
checking included), reported per configuration (the max over rounds). From the smallest
and the largest sizes measured, the JSON extrapolates each process's peak linearly to 10M keys
(a rough guide: a reused process's peak also holds what earlier runs left in it).

Output: a progress line per run on stderr, a table at the end (``--json``: one JSON document
instead), and PNG plots in ``--plots`` (default ``docs/bench``; ``''``: none), with the JSON
behind them (``scale.json``): throughput against state size, throughput against parallelism,
and peak RSS against state size.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._redis import redis_conf  # noqa: E402
from bench._rss import RssSampler  # noqa: E402
from bench.wordcount import (  # noqa: E402
    baseline,
    corpus_for,
    describe_check,
    framework,
    same_shape,
)
from examples.corpus import words  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SIZES = "10000,100000,1000000,10000000"
ESTIMATE_AT = 10_000_000
RSS_ROLES = (
    "driver_mb",
    "driver_growth_mb",
    "python_worker_max_mb",
    "python_worker_growth_mb",
    "python_workers_sum_mb",
    "jvm_mb",
    "redis_mb",
)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def configurations(args: argparse.Namespace) -> list[tuple[int, int, str]]:
    """``(keys, parallelism, provider)`` of every framework run of a round, in its order."""
    sizes = [k for k in args.sizes if k <= args.max_keys]
    points = [(keys, args.parallelism) for keys in sizes]
    points += [(sizes[0], p) for p in args.parallelisms if p != args.parallelism]
    return [(keys, p, provider) for keys, p in points for provider in args.providers]


def source() -> str:
    """Which code ran: the git commit of this checkout (``+changes`` if edited), or its path."""
    try:
        rev = subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "-C", str(ROOT), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return str(ROOT)
    return f"{rev}+changes" if dirty else rev


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """Run every round; the figures as one JSON-ready dict."""
    from bench._redis import start_redis
    from statefulbolts.runtime import build_session

    spark_conf = {"spark.driver.memory": args.driver_memory} if args.driver_memory else {}
    session_started = time.perf_counter()
    spark = build_session(args.master, app_name="statefulbolts-bench-scale", spark_conf=spark_conf)
    sc = spark.sparkContext
    corpus = corpus_for(args.words, args.vocab, args.seed)
    expected = dict(collections.Counter(w for text in corpus for w in words(text)))
    total = sum(expected.values())
    base_conf: dict[str, Any] = {"topology.state.checkpoint.interval.ms": args.interval}
    if args.pending:
        base_conf["topology.max.spout.pending"] = args.pending
    server = start_redis() if "redis" in args.providers else None
    confs = {"memory": base_conf}
    if server is not None:
        confs["redis"] = base_conf | redis_conf(server.port)
    plan = configurations(args)
    parallelisms = sorted({p for _, p, _ in plan})
    sampler = RssSampler()
    rows: dict[tuple[str, int, int], list[dict[str, Any]]] = collections.defaultdict(list)
    bases: dict[tuple[str, int], list[dict[str, Any]]] = collections.defaultdict(list)
    wrong: list[str] = []
    started = time.perf_counter()
    try:
        _warm_up(spark, sc, corpus, total, parallelisms, confs, args)
        warm_s = time.perf_counter() - started
        for r in range(args.rounds):
            tag = f"[round {r + 1}/{args.rounds}]"
            same: dict[int, float] = {}  # same_shape words/s of this round, per parallelism

            def run_baselines(r: int = r, tag: str = tag, same: dict[int, float] = same) -> None:
                for (label, p), res in _baselines(sc, corpus, parallelisms, sampler, args).items():
                    run = _figures(r, res["seconds"], total, res["counts"] == expected, res["rss"])
                    bases[(label, p)].append(run)
                    if label == "same_shape":
                        same[p] = run["words_per_sec"]
                    if not run["exact"]:
                        wrong.append(f"{tag} {label} p={p}")
                    _progress(f"{tag} {label:<11} p={p}", run)

            order = plan if r % 2 == 0 else plan[::-1]
            if r % 2 == 0:
                run_baselines()
            for keys, p, provider in order:
                name = f"scale-{provider}-{keys}-p{p}-r{r}"
                sampler.start()
                res = framework(
                    spark,
                    corpus,
                    p,
                    confs[provider],
                    name,
                    False,
                    expected=expected,
                    emit=args.emit,
                    state_keys=keys,
                    redis=server if provider == "redis" else None,
                )
                rss = sampler.stop()
                run = _figures(r, res["seconds"], total, res["exact"], rss)
                run["ratio_same_shape_round"] = None  # filled once the round's baseline ran
                for key in (
                    "transactions",
                    "seed_seconds",
                    "prepares",
                    "prepare_seconds_each",
                    "commit_seconds_each",
                    "prepare_seconds",
                    "commit_seconds",
                    "redis_commands_per_transaction",
                ):
                    if key in res:
                        run[key] = res[key]
                rows[(provider, keys, p)].append(run)
                if not res["exact"]:
                    wrong.append(f"{tag} {describe_check(name, res)}")
                    print(describe_check(name, res), file=sys.stderr, flush=True)
                _progress(f"{tag} {provider:<11} p={p} keys={keys:>10,}", run)
            if r % 2 == 1:
                run_baselines()
            for (_provider, _keys, p), runs in rows.items():
                for run in runs:
                    if run["round"] == r:
                        run["ratio_same_shape_round"] = round(run["words_per_sec"] / same[p], 3)
        sweep_s = time.perf_counter() - started
    finally:
        if server is not None:
            server.stop()
        spark.stop()
    return {
        "source": source(),
        "words": total,
        "sentences": len(corpus),
        "vocab": args.vocab,
        "distinct_words": len(expected),
        "master": sc.master,
        "interval_ms": args.interval,
        "max_spout_pending": args.pending,
        "emit": args.emit,
        "rounds": args.rounds,
        "parallelism": args.parallelism,
        "session_start_s": round(started - session_started, 1),
        "warm_up_s": round(warm_s, 1),
        "sweep_s": round(sweep_s, 1),
        "baselines": [_summary({"kind": k, "parallelism": p}, v) for (k, p), v in bases.items()],
        "runs": [
            _summary({"provider": prov, "state_keys": keys, "parallelism": p}, v)
            for (prov, keys, p), v in rows.items()
        ],
        "wrong": wrong,
        "exact": not wrong,
    }


def _baselines(
    sc: Any, corpus: list[str], parallelisms: list[int], sampler: RssSampler, args: Any
) -> dict[tuple[str, int], dict[str, Any]]:
    """One run of each plain PySpark baseline at each parallelism, with its peak RSS."""
    out = {}
    for p in parallelisms:
        for label in ("same_shape", "reduceByKey"):
            sampler.start()
            if label == "same_shape":
                res = same_shape(sc, corpus, p, args.emit)
            else:
                res = baseline(sc, corpus, p)
            out[(label, p)] = res | {"rss": sampler.stop()}
    return out


def _warm_up(
    spark: Any,
    sc: Any,
    corpus: list[str],
    total: int,
    parallelisms: list[int],
    confs: dict[str, dict[str, Any]],
    args: argparse.Namespace,
) -> None:
    """Python workers and the JVM's JIT, on a fifth of the input (at most 200,000 words)."""
    warm = corpus[: len(corpus) * min(args.words // 5, 200_000) // max(total, 1)]
    warm_expected = dict(collections.Counter(w for text in warm for w in words(text)))
    for p in parallelisms:
        baseline(sc, warm, p)
        same_shape(sc, warm, p, args.emit)
    for provider, conf in confs.items():
        res = framework(
            spark,
            warm,
            args.parallelism,
            conf,
            f"scale-warmup-{provider}",
            False,
            expected=warm_expected,
            emit=args.emit,
        )
        if not res["exact"]:
            raise SystemExit(describe_check(f"warm-up ({provider})", res))
    print("warmed up", file=sys.stderr, flush=True)


def _figures(
    r: int, seconds: float, total: int, exact: bool, rss: dict[str, Any]
) -> dict[str, Any]:
    return {
        "round": r,
        "seconds": round(seconds, 3),
        "words_per_sec": round(total / seconds),
        "exact": exact,
        "rss": rss,
    }


def _progress(label: str, run: dict[str, Any]) -> None:
    rss = run["rss"]
    extra = ""
    if "transactions" in run:
        extra = (
            f", {run['prepares']} PREPAREs of {run['prepare_seconds_each'] * 1000:.0f} ms, "
            f"COMMITs of {run['commit_seconds_each'] * 1000:.0f} ms"
            f", seeded in {run['seed_seconds']:.1f}s"
        )
    print(
        f"{label}: {run['seconds']:7.2f}s {run['words_per_sec']:>9,} words/s{extra}; peak RSS "
        f"driver {rss.get('driver_mb', 0):,.0f} MB, worker {rss['python_worker_max_mb']:,.0f} MB"
        f"{'' if run['exact'] else ' WRONG'}",
        file=sys.stderr,
        flush=True,
    )


def _summary(head: dict[str, Any], runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median, min and max over rounds; peak RSS per process the max over rounds."""
    wps = [r["words_per_sec"] for r in runs]
    out = head | {
        "words_per_sec": round(statistics.median(wps)),
        "words_per_sec_min": min(wps),
        "words_per_sec_max": max(wps),
        "exact": all(r["exact"] for r in runs),
    }
    ratios = [r["ratio_same_shape_round"] for r in runs if r.get("ratio_same_shape_round")]
    if ratios:
        out["ratio_same_shape"] = round(statistics.median(ratios), 3)
        out["ratio_same_shape_per_round"] = ratios
    for key in (
        "prepare_seconds_each",
        "commit_seconds_each",
        "seed_seconds",
        "redis_commands_per_transaction",
    ):
        if key in runs[0]:
            out[key] = round(statistics.median(r[key] for r in runs), 3)
    if "transactions" in runs[0]:
        out["transactions"] = [r["transactions"] for r in runs]
        out["prepares"] = [r["prepares"] for r in runs]
    peak: dict[str, Any] = {}
    for key in RSS_ROLES:
        values = [r["rss"][key] for r in runs if key in r["rss"]]
        if values:
            peak[key] = max(values)
    peak["python_workers_mb"] = max((r["rss"]["python_workers_mb"] for r in runs), key=len)
    peak["driver_start_mb"] = min(r["rss"].get("driver_start_mb", 0) for r in runs)
    out["peak_rss"] = peak
    out["per_round"] = runs
    return out


def estimate(result: dict[str, Any], at: int = ESTIMATE_AT) -> dict[str, Any]:
    """Peak RSS per provider and process at ``at`` keys, extrapolated from the sizes measured.

    For the driver and the largest worker: the peak at the largest size measured, plus the
    growth during a run (peak minus the RSS the run started with, which is what the run itself
    needed) per key between the smallest and the largest size, times the keys still to go. For
    the JVM and redis-server, the same on their peaks. Rough (a slope below zero counts as
    zero; below 1M keys the state is small beside the noise), but it says what to expect.
    """
    p = result["parallelism"]
    slopes = {
        "driver_mb": "driver_growth_mb",
        "python_worker_max_mb": "python_worker_growth_mb",
        "jvm_mb": "jvm_mb",
        "redis_mb": "redis_mb",
    }
    out: dict[str, Any] = {}
    for provider in sorted({r["provider"] for r in result["runs"]}):
        sized = sorted(
            (r["state_keys"], r["peak_rss"])
            for r in result["runs"]
            if r["provider"] == provider and r["parallelism"] == p
        )
        if len(sized) < 2 or sized[-1][0] >= at:
            continue
        (k0, rss0), (k1, rss1) = sized[0], sized[-1]
        guess: dict[str, Any] = {"from_sizes": [k0, k1]}
        for key, slope_key in slopes.items():
            if key == "redis_mb" and provider != "redis":
                continue
            if key in rss1 and slope_key in rss0 and slope_key in rss1:
                per_key = max(0.0, (rss1[slope_key] - rss0[slope_key]) / (k1 - k0))
                guess[key] = round(rss1[key] + per_key * (at - k1))
                guess[key.replace("_mb", "_bytes_per_key")] = round(per_key * 2**20)
        out[provider] = guess
    return {"keys": at, "estimate": out} if out else {}


def setup(result: dict[str, Any]) -> str:
    """What was run, in one line."""
    pending = result.get("max_spout_pending")
    return (
        f"{result['words']:,} words (Zipf, {result['vocab']:,}-word vocabulary), "
        f"{result['master']}, checkpoint every {result['interval_ms']} ms"
        + (f", max.spout.pending {pending:,}" if pending else "")
        + f", count bolt {'emitting (word, count) to a sink' if result['emit'] else 'not emitting'}"
    )


def table(result: dict[str, Any]) -> str:
    """The figures for a person: one line per configuration, baselines first."""
    lines = [
        setup(result),
        f"median of {result['rounds']} rounds (min-max); ratio: / same_shape at the same "
        "parallelism, same round (median); PREPs: PREPARE transactions (median), each "
        "taking ms/PRP, and its COMMIT ms/CMT (medians)",
        f"code: {result.get('source', 'unknown')}",
        "RSS: peak over the rounds, MB: driver, largest Python worker, all workers at once, "
        "JVM, redis-server; +drv / +wrk: how far the driver / a worker rose during the run",
        "",
        f"{'run':<12} {'keys':>10} {'p':>2} {'words/s':>9} {'min-max':>15} {'ratio':>6} "
        f"{'PREPs':>4} {'ms/PRP':>7} {'ms/CMT':>6} {'driver':>7} {'+drv':>5} {'worker':>7} "
        f"{'+wrk':>5} {'workers':>8} {'jvm':>6} {'redis':>6} {'exact':>5}",
    ]

    def line(name: str, keys: str, row: dict[str, Any]) -> str:
        rss = row["peak_rss"]
        redis_mb = f"{rss['redis_mb']:,.0f}" if name == "redis" and "redis_mb" in rss else ""
        prep = row.get("prepare_seconds_each")
        commit = row.get("commit_seconds_each")
        txs = row.get("prepares")
        ratio = row.get("ratio_same_shape")
        return (
            f"{name:<12} {keys:>10} {row['parallelism']:>2} {row['words_per_sec']:>9,} "
            f"{row['words_per_sec_min']:>7,}-{row['words_per_sec_max']:<7,} "
            f"{'' if ratio is None else f'{ratio:.3f}':>6} "
            f"{'' if txs is None else round(statistics.median(txs)):>4} "
            f"{'' if prep is None else f'{prep * 1000:.0f}':>7} "
            f"{'' if commit is None else f'{commit * 1000:.0f}':>6} "
            f"{rss.get('driver_mb', 0):>7,.0f} {rss.get('driver_growth_mb', 0):>5,.0f} "
            f"{rss.get('python_worker_max_mb', 0):>7,.0f} "
            f"{rss.get('python_worker_growth_mb', 0):>5,.0f} "
            f"{rss.get('python_workers_sum_mb', 0):>8,.0f} {rss.get('jvm_mb', 0):>6,.0f} "
            f"{redis_mb:>6} {'yes' if row['exact'] else 'NO':>5}"
        )

    for row in sorted(result["baselines"], key=lambda b: (b["kind"], b["parallelism"])):
        lines.append(line(row["kind"], "", row))
    for row in sorted(
        result["runs"], key=lambda r: (r["provider"], r["parallelism"], r["state_keys"])
    ):
        lines.append(line(row["provider"], f"{row['state_keys']:,}", row))
    est = result.get("rss_estimate", {})
    for provider, guess in est.get("estimate", {}).items():
        lines.append(
            f"{provider} at {est['keys']:,} keys, extrapolated: driver ~{guess.get('driver_mb')} "
            f"MB, largest worker ~{guess.get('python_worker_max_mb')} MB, JVM "
            f"~{guess.get('jvm_mb')} MB"
            + (f", redis ~{guess['redis_mb']} MB" if "redis_mb" in guess else "")
        )
    lines.append(
        f"sweep: {result['sweep_s']:.0f}s (warm-up {result['warm_up_s']:.0f}s included; "
        f"session start {result['session_start_s']:.0f}s before it)"
    )
    return "\n".join(lines)


def plot(result: dict[str, Any], folder: Path) -> list[Path]:
    """Throughput against state size and against parallelism, peak RSS against state size."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    folder.mkdir(parents=True, exist_ok=True)
    p0 = result["parallelism"]
    colors = {"memory": "tab:blue", "redis": "tab:red"}
    markers = {"memory": "o", "redis": "s"}
    thousands = FuncFormatter(lambda v, _: f"{v:,.0f}")
    subtitle = (
        f"{setup(result)}\nmedian of {result['rounds']} round(s), bars from min to max; "
        "×: ratio to plain PySpark same_shape in the same round"
    )
    base = {(b["kind"], b["parallelism"]): b for b in result["baselines"]}
    written = []

    def finish(fig: Any, ax: Any, title: str, name: str, sub: str = subtitle) -> None:
        fig.suptitle(title, fontsize=12)
        ax.set_title(sub, fontsize=8)
        ax.grid(True, which="major", alpha=0.3)
        ax.set_ylim(bottom=0)
        ax.yaxis.set_major_formatter(thousands)
        ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2)
        written.append(folder / name)
        fig.savefig(written[-1], dpi=110, bbox_inches="tight")
        plt.close(fig)

    def size_axis(ax: Any, sizes: list[int]) -> None:
        ax.set_xscale("log")
        ax.set_xticks(sizes, [_short(k) for k in sizes])
        ax.minorticks_off()
        ax.set_xlim(min(sizes) / 1.6, max(sizes) * 1.6)
        ax.set_xlabel("keys already committed in the state before the run (log scale)")

    def series(provider: str, *, keys: int | None = None, p: int | None = None) -> list[Any]:
        return sorted(
            (r for r in result["runs"] if r["provider"] == provider)
            if keys is None and p is None
            else (
                r
                for r in result["runs"]
                if r["provider"] == provider
                and (keys is None or r["state_keys"] == keys)
                and (p is None or r["parallelism"] == p)
            ),
            key=lambda r: (r["state_keys"], r["parallelism"]),
        )

    offsets = {"memory": (7, -13), "redis": (7, 6)}

    def errorbar(ax: Any, rows: list[Any], x: list[int], provider: str) -> None:
        y = [r["words_per_sec"] for r in rows]
        err = [
            [v - r["words_per_sec_min"] for v, r in zip(y, rows, strict=True)],
            [r["words_per_sec_max"] - v for v, r in zip(y, rows, strict=True)],
        ]
        ax.errorbar(
            x, y, yerr=err, color=colors.get(provider), marker=markers.get(provider, "o"),
            capsize=4, label=f"stateful word count, {provider} state",
        )  # fmt: skip
        for xi, r in zip(x, rows, strict=True):
            if "ratio_same_shape" in r:
                ax.annotate(
                    f"×{r['ratio_same_shape']:.2f}", (xi, r["words_per_sec"]),
                    textcoords="offset points", xytext=offsets.get(provider, (7, 6)), fontsize=8,
                    color=colors.get(provider),
                )  # fmt: skip

    providers = sorted({r["provider"] for r in result["runs"]})
    sizes = sorted({r["state_keys"] for r in result["runs"] if r["parallelism"] == p0})

    # 1. Throughput against state size.
    fig, ax = plt.subplots(figsize=(8, 5.2))
    for provider in providers:
        rows = series(provider, p=p0)
        errorbar(ax, rows, [r["state_keys"] for r in rows], provider)
    for kind, style in (("same_shape", "--"), ("reduceByKey", ":")):
        if (kind, p0) in base:
            ax.axhline(
                base[(kind, p0)]["words_per_sec"], color="gray", linestyle=style,
                label=f"plain PySpark {kind} (no state)",
            )  # fmt: skip
    size_axis(ax, sizes)
    ax.set_ylabel("throughput (words per second)")
    finish(
        fig,
        ax,
        f"Stateful word count: throughput against state size ({p0} tasks per bolt)",
        "scale-throughput-vs-state.png",
    )

    # 2. Throughput against parallelism.
    keys0 = min(r["state_keys"] for r in result["runs"])
    ps = sorted({r["parallelism"] for r in result["runs"] if r["state_keys"] == keys0})
    fig, ax = plt.subplots(figsize=(8, 5.2))
    for provider in providers:
        rows = series(provider, keys=keys0)
        errorbar(ax, rows, [r["parallelism"] for r in rows], provider)
    for kind, style in (("same_shape", "--"), ("reduceByKey", ":")):
        xs = [p for p in ps if (kind, p) in base]
        ax.plot(
            xs, [base[(kind, p)]["words_per_sec"] for p in xs], color="gray", linestyle=style,
            marker=".", label=f"plain PySpark {kind} (no state)",
        )  # fmt: skip
    ax.set_xscale("log", base=2)
    ax.set_xticks(ps, [str(p) for p in ps])
    ax.minorticks_off()
    ax.set_xlim(min(ps) / 1.4, max(ps) * 1.4)
    ax.set_xlabel("tasks per bolt (Spark partitions per stage for the baselines)")
    ax.set_ylabel("throughput (words per second)")
    finish(
        fig,
        ax,
        f"Stateful word count: throughput against parallelism ({_short(keys0)} keys of state)",
        "scale-throughput-vs-parallelism.png",
    )

    # 3. Peak RSS against state size: the peak, and what the run itself added to it.
    fig, axes = plt.subplots(1, 2, figsize=(11, 5.2), sharex=True)
    for provider in providers:
        rows = series(provider, p=p0)
        x = [r["state_keys"] for r in rows]
        for key, growth, style, what in (
            ("driver_mb", "driver_growth_mb", "-", "driver"),
            ("python_worker_max_mb", "python_worker_growth_mb", "--", "largest Python worker"),
            ("redis_mb", None, ":", "redis-server"),
        ):
            if provider != "redis" and key == "redis_mb":
                continue
            for ax, field in zip(axes, (key, growth), strict=True):
                if field is None:
                    continue
                ax.plot(
                    x, [r["peak_rss"].get(field, 0) for r in rows], color=colors.get(provider),
                    linestyle=style, marker=markers.get(provider),
                    label=f"{provider} state: {what}",
                )  # fmt: skip
    for ax in axes:
        size_axis(ax, sizes)
        ax.grid(True, which="major", alpha=0.3)
        ax.set_ylim(bottom=0)
        ax.yaxis.set_major_formatter(thousands)
    axes[0].set_ylabel("MB")
    axes[0].set_title("peak RSS during the run (max over rounds)", fontsize=9)
    axes[1].set_title("growth during the run: peak minus RSS at its start", fontsize=9)
    fig.suptitle(
        f"Memory per process against state size ({p0} tasks per bolt)\n"
        f"{subtitle.split(chr(10))[0]}; sampled at 5 Hz, seeding and checking the state included",
        fontsize=10,
    )
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="lower center", ncol=3, bbox_to_anchor=(0.5, -0.06))
    fig.tight_layout()
    written.append(folder / "scale-rss-vs-state.png")
    fig.savefig(written[-1], dpi=110, bbox_inches="tight")
    plt.close(fig)
    return written


def _short(n: int) -> str:
    """``10k``, ``1M``: a key count for an axis."""
    for unit, size in (("M", 1_000_000), ("k", 1000)):
        if n >= size and n % (size // 10) == 0:
            return f"{n / size:g}{unit}"
    return f"{n:,}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--words", type=int, default=1_000_000)
    parser.add_argument("--vocab", type=int, default=10_000, help="Zipf vocabulary size")
    parser.add_argument("--seed", type=int, default=0, help="the Zipf corpus's seed")
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--interval", type=int, default=1000, help="checkpoint interval, ms")
    parser.add_argument(
        "--pending",
        type=int,
        help="topology.max.spout.pending (sentences in flight): smaller transactions, more of "
        "them (default: unset, so a transaction takes what the spout emits in an interval)",
    )
    parser.add_argument("--sizes", type=_ints, default=_ints(DEFAULT_SIZES), help="state keys")
    parser.add_argument(
        "--max-keys", type=int, default=1_000_000, help="largest state size to run (default 1M)"
    )
    parser.add_argument("--parallelism", type=int, default=2, help="tasks per bolt (sizes)")
    parser.add_argument("--parallelisms", type=_ints, default=[1, 2, 4], help="tasks per bolt")
    parser.add_argument("--providers", type=lambda t: t.split(","), default=["memory", "redis"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--emit",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="the count bolt emits (word, count) to a sink bolt (default: yes, as issue 13)",
    )
    parser.add_argument("--driver-memory", help="spark.driver.memory (the JVM's heap)")
    parser.add_argument("--plots", default=str(ROOT / "docs" / "bench"), help="'' for none")
    parser.add_argument("--replot", help="a JSON this script printed: draw it, run nothing")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    if args.replot:
        result = json.loads(Path(args.replot).read_text())
    else:
        if not [k for k in args.sizes if k <= args.max_keys]:
            parser.error("no --sizes at or below --max-keys")
        result = measure(args)
    result["rss_estimate"] = estimate(result)
    if args.plots:
        folder = Path(args.plots)
        written = plot(result, folder)
        if not args.replot:
            (folder / "scale.json").write_text(json.dumps(result, indent=2) + "\n")
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(table(result), flush=True)
    if args.plots:
        print(f"plots: {', '.join(str(p) for p in written)}", file=sys.stderr)
    if not result["exact"]:
        print(f"WRONG results: {result['wrong']}", file=sys.stderr)
    return 0 if result["exact"] else 1


if __name__ == "__main__":
    sys.exit(main())
