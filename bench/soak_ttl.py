"""Soak with expiring keys: ever-new keys under a state TTL stay bounded; without one they grow.

    python bench/soak_ttl.py                                  # 3 min per run, memory and Redis
    python bench/soak_ttl.py --minutes 10 --rate 1000 --ttl 30 --json
    python bench/soak_ttl.py --providers memory --out /tmp/soak-ttl

A paced spout (``bench/latency.py``'s ``PacedSpout``) emits ``--rate`` tuples per second, each a
key never seen before (``k000000000``, ``k000000001``, ...), into the stateful word count
(split -> count, ``--parallelism`` tasks each): every tuple adds one key to the state. For each
provider of ``--providers`` the script runs that topology twice, ``--minutes`` each, one after
the other on one SparkSession (and one redis-server of its own for Redis): once with
``topology.state.ttl.secs`` = ``--ttl`` (keys expire ``--ttl`` seconds after their write and
each commit deletes the expired ones), once without a TTL.

Every ``--sample-secs`` it samples the state's committed key count (the runtime's own count,
``committed_key_counts``, after every commit: ``topology.state.size.interval.ms`` 0), the RSS of
this driver process (the in-memory provider keeps the state here), of Spark's JVM and Python
workers, and of the redis-server. The figures, per run:

- ``keys``: mean of the first and the last ``--window`` fraction of the run (after the first
  ``--ttl`` seconds, when the TTL run has filled up), their growth, the least-squares slope over
  the run's second half (keys/min), the peak, and the final count; with a TTL the expected
  plateau is ``rate x ttl`` keys (the keys written in the last ``ttl`` seconds);
- ``rss``: the same for the driver's RSS (MB), and for the redis-server's RSS with Redis;
- per provider, the ratios without / with TTL of the final keys, of the key slope and of the
  growth of the memory that holds the state (the driver's RSS for memory, the redis-server's
  for Redis).

It writes ``soak_ttl.json`` (figures and samples) and ``soak_ttl.png`` (keys and RSS over time,
both runs per provider) into ``--out`` (``docs/bench``). A run is exact if, without TTL, the
final key count is every key emitted; exit status 1 if not.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.soak import WindowRecord, sample_memory, slope  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PROVIDERS = ("memory", "redis")


class NewKeys:
    """Sentence ``i`` is one key never used before: ``k`` and ``i`` in nine digits."""

    def sentence(self, i: int) -> str:
        """Key ``i``."""
        return f"k{i:09d}"


# ----------------------------------------------------------------------------- one run
def run_one(
    args: argparse.Namespace, spark: Any, provider: str, ttl: int | None, server: Any
) -> dict[str, Any]:
    """One soak run of ``provider``, with a TTL of ``ttl`` seconds or none; figures and samples."""
    import psutil

    from bench import latency
    from statefulbolts import LocalCluster

    conf: dict[str, Any] = {
        "topology.state.checkpoint.interval.ms": args.interval,
        "topology.state.size.interval.ms": 0,
    }
    if ttl is not None:
        conf["topology.state.ttl.secs"] = ttl
    if server is not None:
        from bench._redis import redis_conf

        conf |= redis_conf(server.port)
    duration = args.minutes * 60
    total = int(args.rate * duration)
    name = f"soak-ttl-{provider}-{'ttl' if ttl else 'none'}-{time.time_ns()}"
    spout = latency.PacedSpout(
        NewKeys(), args.rate, total, name, max_seconds=duration, record=WindowRecord
    )
    cluster = LocalCluster(spark=spark)
    handle = cluster.submit_topology(name, conf, latency.build(spout, args.parallelism))
    live = latency.REGISTRY[name]
    redis_proc = psutil.Process(server.process.pid) if server is not None else None
    samples: list[dict[str, Any]] = []
    stop = threading.Event()
    started = time.perf_counter()

    def sample() -> None:
        live.record.take()  # latencies are not this bench's figure: keep none
        procs = sample_memory()
        keys = handle.metrics()["state_keys"].get("count")
        samples.append(
            {
                "t_min": round((time.perf_counter() - started) / 60, 4),
                "emitted": live.next_id,
                "acked": live.acked,
                "keys": keys,
                "driver_rss": round(sum(r for k, _, r, _, _ in procs if k == "driver"), 1),
                "jvm_rss": round(sum(r for k, _, r, _, _ in procs if k == "jvm"), 1),
                "workers_rss": round(sum(r for k, _, r, _, _ in procs if k == "workers"), 1),
                "redis_rss": round(redis_proc.memory_info().rss / 2**20, 1)
                if redis_proc is not None
                else None,
            }
        )
        if args.progress:
            s = samples[-1]
            print(
                f"{provider} ttl={ttl}: {s['t_min']:5.2f} min emitted {s['emitted']:>8} keys "
                f"{s['keys']} driver {s['driver_rss']} MB redis {s['redis_rss']} MB",
                file=sys.stderr,
                flush=True,
            )

    def sampler() -> None:
        nxt = started
        while not stop.is_set():
            sample()
            nxt += args.sample_secs
            stop.wait(max(0.0, nxt - time.perf_counter()))

    thread = threading.Thread(target=sampler, name="soak-ttl-sampler", daemon=True)
    live.arm()
    thread.start()
    try:
        while not live.closed:
            time.sleep(0.5)
        handle.await_idle(600)
        stop.set()
        thread.join()
        sample()  # the end: every commit done and counted
    finally:
        stop.set()
        handle.kill()
        cluster.shutdown()
    final = samples[-1]
    return {
        "provider": provider,
        "ttl_secs": ttl,
        "emitted": live.next_id,
        "acked": live.acked,
        "final_keys": final["keys"],
        "exact": ttl is not None or final["keys"] == live.next_id,
        "keys": figures(samples, "keys", args.window, args.ttl),
        "driver_rss_mb": figures(samples, "driver_rss", args.window, args.ttl),
        "redis_rss_mb": figures(samples, "redis_rss", args.window, args.ttl)
        if server is not None
        else None,
        "samples": samples,
    }


def figures(
    samples: list[dict[str, Any]], field: str, window: float, ttl: int | None
) -> dict[str, Any]:
    """First / last window means, growth, second-half slope (per min), peak, final of ``field``.

    The first window starts after the TTL has filled the state once (``ttl`` seconds, the same
    in both runs of a provider, so they compare).

    Example:
        >>> pts = [{"t_min": m / 10, "k": 100 * m} for m in range(11)]
        >>> f = figures(pts, "k", 0.2, None)
        >>> f["first"], f["last"], f["growth"], f["slope_second_half_per_min"]
        (100.0, 900.0, 800.0, 1000.0)
    """
    pts = [(s["t_min"], float(s[field])) for s in samples if s.get(field) is not None]
    if not pts:
        return {}
    end = pts[-1][0]
    settle = (ttl or 0) / 60
    span = max(end - settle, 1e-9)
    first = [y for x, y in pts if settle <= x <= settle + window * span]
    last = [y for x, y in pts if x >= end - window * span]
    half = [(x, y) for x, y in pts if x >= end / 2]
    return {
        "first": round(statistics.fmean(first), 1) if first else None,
        "last": round(statistics.fmean(last), 1) if last else None,
        "growth": round(statistics.fmean(last) - statistics.fmean(first), 1)
        if first and last
        else None,
        "slope_second_half_per_min": round(slope(half), 1),
        "peak": round(max(y for _, y in pts), 1),
        "final": pts[-1][1],
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    if a is None or b is None:
        return None
    return round(a / b, 2) if abs(b) > 1e-9 else None


def compare(with_ttl: dict[str, Any], without: dict[str, Any]) -> dict[str, Any]:
    """Without TTL against with TTL: key ratios; slopes and memory growth side by side.

    The ratios are of the final keys and of the last window's keys; the key slopes and the
    growth of the memory that holds the state are given side by side, as a ratio to a figure
    near 0 means nothing.
    """
    memory = "redis_rss_mb" if with_ttl["provider"] == "redis" else "driver_rss_mb"
    return {
        "final_keys": _ratio(without["final_keys"], with_ttl["final_keys"]),
        "last_window_keys": _ratio(without["keys"]["last"], with_ttl["keys"]["last"]),
        "keys_slope_second_half_per_min": {
            "ttl": with_ttl["keys"]["slope_second_half_per_min"],
            "none": without["keys"]["slope_second_half_per_min"],
        },
        "state_memory": memory,
        "state_memory_growth_mb": {
            "ttl": with_ttl[memory]["growth"],
            "none": without[memory]["growth"],
        },
    }


# ----------------------------------------------------------------------------- plot
def plot(result: dict[str, Any], path: Path) -> None:
    """Per provider: committed keys over time (top), the state's memory (bottom), both runs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    providers = list(result["providers"])
    fig, axes = plt.subplots(
        2, len(providers), figsize=(6 * len(providers), 7), squeeze=False, sharex="col"
    )
    styles = {"ttl": ("tab:green", f"TTL {result['ttl_secs']} s"), "none": ("tab:red", "no TTL")}
    for col, provider in enumerate(providers):
        keys_ax, mem_ax = axes[0][col], axes[1][col]
        for mode, (color, label) in styles.items():
            samples = result["providers"][provider][mode]["samples"]
            xs = [s["t_min"] for s in samples if s["keys"] is not None]
            keys_ax.plot(xs, [s["keys"] for s in samples if s["keys"] is not None],
                         color=color, lw=2, label=label)  # fmt: skip
            t = [s["t_min"] for s in samples]
            mem_ax.plot(t, [s["driver_rss"] for s in samples], color=color, lw=2,
                        label=f"driver RSS, {label}")  # fmt: skip
            if provider == "redis":
                mem_ax.plot(t, [s["redis_rss"] for s in samples], color=color, lw=1.5, ls="--",
                            label=f"redis-server RSS, {label}")  # fmt: skip
        keys_ax.set_title(
            f"{provider} state: {result['rate']:,} new keys/s, {result['minutes']:g} min a run",
            fontsize=10,
        )
        keys_ax.set_ylabel("committed keys in state")
        keys_ax.set_ylim(bottom=0)
        keys_ax.grid(alpha=0.3)
        keys_ax.legend(loc="upper left", fontsize=9)
        mem_ax.set_ylabel("RSS (MB)")
        mem_ax.set_xlabel("minutes")
        mem_ax.set_ylim(bottom=0)
        mem_ax.grid(alpha=0.3)
        mem_ax.legend(loc="upper left", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------- the script
def run(args: argparse.Namespace) -> dict[str, Any]:
    """Both runs of every provider; the figures, the ratios, the files."""
    from statefulbolts.runtime import build_session

    spark = build_session(args.master, "statefulbolts-bench-soak-ttl")
    out: dict[str, Any] = {
        "minutes": args.minutes,
        "rate": args.rate,
        "ttl_secs": args.ttl,
        "expected_plateau_keys": args.rate * args.ttl,
        "interval_ms": args.interval,
        "parallelism": args.parallelism,
        "master": args.master,
        "sample_secs": args.sample_secs,
        "window": args.window,
        "providers": {},
        "ratios_none_vs_ttl": {},
    }
    try:
        for provider in args.providers:
            server = None
            if provider == "redis":
                from bench._redis import start_redis

                server = start_redis()
            try:
                runs = {
                    "ttl": run_one(args, spark, provider, args.ttl, server),
                    "none": run_one(args, spark, provider, None, server),
                }
            finally:
                if server is not None:
                    server.stop()
            out["providers"][provider] = runs
            out["ratios_none_vs_ttl"][provider] = compare(runs["ttl"], runs["none"])
    finally:
        spark.stop()
    out["exact"] = all(r["exact"] for p in out["providers"].values() for r in p.values())
    path = Path(args.out)
    path.mkdir(parents=True, exist_ok=True)
    (path / "soak_ttl.json").write_text(json.dumps(out, indent=1))
    plot(out, path / "soak_ttl.png")
    out["files"] = [str(path / "soak_ttl.json"), str(path / "soak_ttl.png")]
    return out


def summary(result: dict[str, Any]) -> dict[str, Any]:
    """The result without the samples (what ``--json`` prints)."""
    providers = {
        p: {mode: {k: v for k, v in r.items() if k != "samples"} for mode, r in runs.items()}
        for p, runs in result["providers"].items()
    }
    return {**result, "providers": providers}


def print_summary(result: dict[str, Any]) -> None:
    """What a person reads."""
    print(
        f"soak with expiring keys: {result['rate']} new keys/s, {result['minutes']:g} min a run, "
        f"TTL {result['ttl_secs']} s (expected plateau {result['expected_plateau_keys']:,} keys)"
        f", checkpoints every {result['interval_ms']} ms, {result['master']}"
    )
    for provider, runs in result["providers"].items():
        for mode, r in runs.items():
            k = r["keys"]
            line = (
                f"  {provider:>6} {mode:>4}: emitted {r['emitted']:,}, final keys "
                f"{r['final_keys']:,}, keys {k['first']} -> {k['last']} (slope 2nd half "
                f"{k['slope_second_half_per_min']:+,}/min); driver RSS "
                f"{r['driver_rss_mb']['first']} -> {r['driver_rss_mb']['last']} MB"
            )
            if r["redis_rss_mb"]:
                redis = r["redis_rss_mb"]
                line += f"; redis-server RSS {redis['first']} -> {redis['last']} MB"
            print(line)
        ratio = result["ratios_none_vs_ttl"][provider]
        print(
            f"  {provider:>6} no TTL / TTL: final keys x{ratio['final_keys']}, last window's "
            f"keys x{ratio['last_window_keys']}; key slope /min "
            f"{ratio['keys_slope_second_half_per_min']}; {ratio['state_memory']} growth "
            f"{ratio['state_memory_growth_mb']}"
        )
    print(f"exact: {result['exact']}")
    print("files: " + ", ".join(result["files"]))


def main(argv: list[str] | None = None) -> int:
    """Parse the flags, run, print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=3, help="minutes per run (3)")
    parser.add_argument("--rate", type=int, default=500, help="new keys per second (500)")
    parser.add_argument("--ttl", type=int, default=20, help="state TTL, seconds (20)")
    parser.add_argument("--interval", type=int, default=1000, help="checkpoint interval, ms")
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--providers",
        type=lambda s: [p for p in s.split(",") if p],
        default=list(PROVIDERS),
        help="comma-separated, of memory,redis (default both)",
    )
    parser.add_argument("--sample-secs", type=float, default=2)
    parser.add_argument(
        "--window", type=float, default=0.2, help="fraction of a run averaged at each end (0.2)"
    )
    parser.add_argument("--out", default=str(ROOT / "docs" / "bench"))
    parser.add_argument("--progress", action="store_true", help="a line per sample on stderr")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    unknown = [p for p in args.providers if p not in PROVIDERS]
    if unknown or not args.providers:
        parser.error(f"--providers takes {','.join(PROVIDERS)}, got {unknown or 'nothing'}")
    if args.ttl < 1 or args.minutes * 60 <= args.ttl:
        parser.error(f"--ttl must be at least 1 s and shorter than a run, got {args.ttl}")
    result = run(args)
    if args.json:
        print(json.dumps(summary(result), indent=2))
    else:
        print_summary(result)
    return 0 if result["exact"] else 1


if __name__ == "__main__":
    sys.exit(main())
