"""Sliding-window word counts: our windowed bolt vs plain PySpark vs Bytewax, on one Zipf input.

    python bench/windows.py                        # 1,000,000 words, Zipf over 10,000 words
    python bench/windows.py --words 100000 --repeat 3 --json windows.json --plot windows.png

The input is ``examples.trending_words``' (``examples/zipf.py``'s Zipf words, each a record with an
event time spread evenly over ``--minutes`` simulated minutes, 5 % of them up to 20 s out of
order), and every system computes the same windows: per word, the count in every 10-minute
window sliding every minute (event time; a window ending at ``E`` holds ``E - 10 min <= ts <
E``). Systems, each on this machine, alternating their order round by round:

- ``pyspark``: the baseline. A DataFrame of ``(word, ts)`` on a warm ``local[2]`` session,
  ``groupBy(window(ts, "10 minutes", "1 minute"), word).count()``, collected. Every ratio is
  to it.
- ``statefulbolts``: ``examples.trending_words``' topology (spout -> parse -> windowed bolt,
  lag 60 s, the windows kept in the in-memory provider and checkpointed) with the bolt's top N
  set to the whole vocabulary, so each window emits every word's count; from submit until
  every window is committed, on the same warm session.
- ``bytewax``: Bytewax (``pip install bytewax``): input -> ``key_on`` word ->
  ``windowing.count_window`` with an ``EventClock`` (the same 60 s of lateness allowed) and a
  ``SlidingWindower`` aligned to the period's start, one worker (``run_main``), no recovery.

Each system's windows are checked against a plain Python count (``expected_windows``) in every
run: a run that differs stops the bench. Times are the runs only (sessions, imports and the
input made before the clock). With ``--repeat`` > 1 each system keeps its fastest run. The JSON
has, per system, its seconds, records/s and ``ratio`` = records/s / ``pyspark`` records/s; the
plot is a bar per system.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples.trending_words import (  # noqa: E402
    LENGTH,
    SLIDE,
    START_MS,
    Input,
    make_input,
)

Counts = dict[int, dict[str, int]]  # window end -> word -> count


def expected(data: Input) -> Counts:
    """The windows, counted plainly."""
    from examples.trending_words import expected_windows

    vocab = len({r.word for r in data.on_time})
    return {
        end: {w: c for w, c in window["top"]}
        for end, window in expected_windows(data, vocab).items()
    }


# ----------------------------------------------------------------------------- the systems
def run_pyspark(spark: Any, data: Input) -> Counts:
    """``groupBy(window(ts, 10 min, 1 min), word).count()`` over a DataFrame of the records."""
    from pyspark.sql import functions as F  # noqa: N812 - PySpark's own spelling

    rows = [(r.word, r.ts) for r in data.on_time]
    df = spark.createDataFrame(rows, "word string, ms long")
    df = df.withColumn("ts", F.timestamp_millis("ms"))
    length, slide = f"{LENGTH.value // 60_000} minutes", f"{SLIDE.value // 60_000} minute"
    out = df.groupBy(F.window("ts", length, slide), "word").count()
    got: Counts = {}
    for row in out.select(
        F.unix_millis(F.col("window.end")).alias("end"), "word", "count"
    ).collect():
        got.setdefault(row["end"], {})[row["word"]] = row["count"]
    return got


def run_ours(spark: Any, data: Input, vocab: int) -> Counts:
    """The trending topology with top N = the vocabulary; until every window is committed."""
    from examples import trending_words as tw
    from providers import get_provider
    from statefulbolts import Config, LocalCluster
    from statefulbolts.namespaces import TaskNamespace

    # A name of its own per run: the in-memory provider keeps a finished run's committed
    # windows, and a second run under the same name would find them all done at once.
    name = f"bench-windows-{uuid.uuid4().hex[:8]}"
    feed = tw.Feed()
    feed.extend([*data.first_phase, data.end.line()])
    tw.FeedSpout.FEEDS[name] = feed
    conf = Config({"topology.max.spout.pending": 20_000})
    ends = tw.expected_windows_ends(data)
    # Polled by its committed key count (one per window fired), not by reading every window's
    # counts: read_state decodes them all under the runner's lock, which slows the run.
    results_ns = str(TaskNamespace.of_topology(name, "results", 0))
    provider = get_provider(conf)
    try:
        with LocalCluster(spark=spark) as cluster:
            handle = cluster.submit_topology(name, conf, tw.build(tw.FeedSpout(name), vocab))
            tw.wait_for(
                lambda: (provider.committed_key_counts(conf, [results_ns]) or {}).get(
                    results_ns, 0
                )
                >= len(ends),
                3600,
                "every window to be committed",
                poll=0.05,
            )
            results = handle.read_state("results")
            handle.kill()
    finally:
        tw.FeedSpout.FEEDS.pop(name, None)
    return {int(end): {w: c for w, c in value["top"]} for end, value in results.items()}


def run_bytewax(data: Input) -> Counts:
    """Bytewax's ``count_window``, sliding, on event time, one worker."""
    from datetime import UTC, datetime, timedelta

    import bytewax.operators as op
    import bytewax.operators.windowing as win
    from bytewax.dataflow import Dataflow
    from bytewax.testing import TestingSink, TestingSource, run_main

    def at(ms: int) -> datetime:
        return datetime.fromtimestamp(ms / 1000, UTC)

    records = [(r.word, at(r.ts)) for r in data.on_time]
    out: list[Any] = []
    flow = Dataflow("windows")
    stream = op.input("records", flow, TestingSource(records, batch_size=1000))
    clock = win.EventClock(lambda rec: rec[1], wait_for_system_duration=timedelta(seconds=60))
    windower = win.SlidingWindower(
        length=timedelta(milliseconds=LENGTH.value),
        offset=timedelta(milliseconds=SLIDE.value),
        align_to=at(START_MS),
    )
    counted = win.count_window("count", stream, clock, windower, lambda rec: rec[0])
    op.output("out", counted.down, TestingSink(out))
    run_main(flow)
    got: Counts = {}
    for word, (window_id, count) in out:
        end = START_MS + window_id * SLIDE.value + LENGTH.value
        got.setdefault(end, {})[word] = count
    return got


# ----------------------------------------------------------------------------- the bench
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python bench/windows.py", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--words", type=int, default=1_000_000, help="records (1,000,000)")
    parser.add_argument("--vocab", type=int, default=10_000, help="Zipf vocabulary (10,000)")
    parser.add_argument("--minutes", type=int, default=60, help="simulated minutes (60)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds; each keeps its best")
    parser.add_argument("--systems", default="pyspark,statefulbolts,bytewax")
    parser.add_argument("--json", dest="json_path", help="write the result here too")
    parser.add_argument("--plot", help="PNG of records/s per system")
    args = parser.parse_args(argv)
    systems = args.systems.split(",")
    unknown = set(systems) - {"pyspark", "statefulbolts", "bytewax"}
    if unknown or "pyspark" not in systems:
        parser.error(
            "--systems: pyspark (the baseline) and any of statefulbolts, bytewax; got "
            f"{sorted(unknown)}"
        )
    if "bytewax" in systems:
        try:
            import bytewax  # noqa: F401
        except ImportError:
            parser.error(
                "bytewax is not installed: pip install bytewax (or leave it out of --systems)"
            )

    from statefulbolts.runtime import build_session

    data = make_input(args.words, args.minutes, late=0, disorder=args.words // 20, vocab=args.vocab)
    want = expected(data)
    spark = build_session("local[2]", app_name="bench-windows")
    spark.sparkContext.setLogLevel("ERROR")
    run_pyspark(spark, make_input(2000, 12, 0, 100, 100))  # warm the session up
    best: dict[str, float] = {}
    for round_ in range(args.repeat):
        order = systems if round_ % 2 == 0 else systems[::-1]
        for system in order:
            started = time.perf_counter()
            if system == "pyspark":
                got = run_pyspark(spark, data)
            elif system == "statefulbolts":
                got = run_ours(spark, data, args.vocab)
            else:
                got = run_bytewax(data)
            seconds = time.perf_counter() - started
            if got != want:
                wrong = sorted(e for e in set(got) | set(want) if got.get(e) != want.get(e))
                print(f"error: {system}'s windows differ from the plain count at ends {wrong[:5]}")
                return 1
            print(
                f"round {round_ + 1} {system}: {seconds:.2f} s, {len(got)} windows exact",
                flush=True,
            )
            best[system] = min(seconds, best.get(system, float("inf")))
    spark.stop()
    base = args.words / best["pyspark"]
    result = {
        "words": args.words,
        "vocab": args.vocab,
        "simulated_minutes": args.minutes,
        "windows": len(want),
        "window": "10 min sliding 1 min, event time, lag 60 s",
        "repeat": args.repeat,
        "exact": True,
        "systems": {
            s: {
                "seconds": round(t, 3),
                "records_per_s": round(args.words / t),
                "ratio": round(args.words / t / base, 3),
            }
            for s, t in best.items()
        },
    }
    print(json.dumps(result, indent=2))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(result, indent=2), encoding="utf-8")
    if args.plot:
        plot(result, Path(args.plot))
    return 0


def plot(result: dict[str, Any], path: Path) -> None:
    """A bar of records/s per system, with its ratio to PySpark."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(result["systems"])
    rates = [result["systems"][n]["records_per_s"] for n in names]
    fig, ax = plt.subplots(figsize=(7, 4.2))
    bars = ax.bar(names, rates, color=["#888888", "#2a6fb0", "#d0822a"][: len(names)])
    for bar, name in zip(bars, names, strict=True):
        ratio = result["systems"][name]["ratio"]
        ax.annotate(f"{ratio:.2f}x", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                    ha="center", va="bottom")  # fmt: skip
    ax.set_ylabel("records / s (best run)")
    ax.set_title(
        f"10-min windows sliding 1 min over {result['words']:,} Zipf words "
        f"({result['vocab']:,} distinct), exact in every run"
    )
    ax.title.set_fontsize(9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
