"""Soak: the stateful word count for a long run at a steady rate, RSS of every process sampled.

    python bench/soak.py                          # 30 minutes, 2,000 tuples/s, 1M-word vocab
    python bench/soak.py --minutes 5 --rate 1000 --json
    python bench/soak.py --provider redis         # Redis state (starts its own redis-server)
    python bench/soak.py --replot docs/bench/soak.json   # redraw the PNG of a finished run

It takes ``--minutes`` plus about 2 minutes (Spark's start, the drain, the count check), and uses
about half a core of 2 at the default rate.

A paced spout (``bench/latency.py``'s ``PacedSpout``) emits ``--rate`` Zipf sentences per second
(10 words each, over ``--vocab`` words: with a 1M vocabulary most words are rare, so the
state keeps gaining keys through the run, about 0.9M by the end of 30 minutes at 2,000/s) into
the stateful word count (split -> count) on ``local[2]`` with in-memory state by default. The
sentences are generated as the spout goes (same draws as ``examples/zipf.py``'s generator, chunk
by chunk), never held whole; a tuple's latency is kept only until its sample is taken.

Every ``--sample-secs`` the script samples, with psutil, the RSS (and USS, the pages only that
process holds) of this driver process, the Spark JVM, PySpark's worker daemon and every Python
worker (the descendants of this process), with the tuples emitted and acked so far and the
latency (emit -> spout ack) of the tuples acked since the last sample. At the end it writes
``soak.csv`` (one row per process per sample), ``soak.json`` (summary and samples) and
``soak.png`` (RSS over time, and the state's distinct keys) into ``--out`` (``docs/bench``),
and reports per process kind: mean RSS over the first and the last 5 minutes, their
difference, and the least-squares slope (MB/min) over the whole run and over its second half.
The final counts are checked exactly against a regeneration of every sentence emitted (exit
status 1 if any differs).
"""

from __future__ import annotations

import argparse
import collections
import csv
import itertools
import json
import os
import random
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples import zipf  # noqa: E402
from examples.corpus import words  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("driver", "jvm", "daemon", "workers")


# ----------------------------------------------------------------------------- the input
def vocabulary(size: int, seed: int = 0) -> list[str]:
    """``size`` distinct pseudo-words; ``examples.zipf.vocabulary`` up to two syllables.

    ``zipf.vocabulary`` builds every word of the next syllable count as a list: three
    syllables are 714**3 (364M) strings, so for more than its 510,510 two-syllable words this
    takes the three-syllable words lazily, only as many as needed (twice the shortfall, then a
    seeded sample, as ``zipf.vocabulary`` samples).
    """
    syllables = ["".join(p) for p in itertools.product(zipf._ONSETS, zipf._VOWELS, zipf._CODAS)]
    two = len(
        dict.fromkeys(syllables + ["".join(p) for p in itertools.product(syllables, repeat=2)])
    )
    if size <= two:
        return zipf.vocabulary(size, seed)
    pool = dict.fromkeys(syllables)
    pool.update(dict.fromkeys("".join(p) for p in itertools.product(syllables, repeat=2)))
    want = len(pool) + 2 * (size - len(pool))
    for p in itertools.product(syllables, repeat=3):
        pool["".join(p)] = None
        if len(pool) >= want:
            break
    return random.Random(f"vocab/{seed}").sample(list(pool), size)


class ZipfStream:
    """Sentence ``i`` of a seeded Zipf stream, generated in chunks, asked for in order.

    The draws are ``zipf.zipf_sentences``'s (same cumulative weights, same seeded
    ``random.Random``, one ``random()`` per word, so chunked draws equal one big draw) over
    ``vocabulary(vocab, seed)``.
    """

    def __init__(self, vocab: int, seed: int = 0, chunk: int = 2000, per_sentence: int = 10):
        self.words = vocabulary(vocab, seed)
        self.weights = list(itertools.accumulate(1.0 / r for r in range(1, vocab + 1)))
        self.seed, self.chunk, self.k = seed, chunk, per_sentence
        self._rng = random.Random(f"zipf/{seed}")
        self._buf: list[str] = []
        self._first = 0  # the index of _buf[0]

    def sentence(self, i: int) -> str:
        """The ``i``-th sentence; ``i`` must be the next one or within the current chunk."""
        while i >= self._first + len(self._buf):
            self._first += len(self._buf)
            drawn = self._rng.choices(self.words, cum_weights=self.weights, k=self.chunk * self.k)
            k = self.k
            self._buf = [" ".join(drawn[j * k : (j + 1) * k]) for j in range(self.chunk)]
        if i < self._first:
            msg = f"sentence {i} is behind the stream (at {self._first})"
            raise IndexError(msg)
        return self._buf[i - self._first]


def replay_counts(vocab: int, seed: int, n: int, marks: list[int]) -> tuple[dict[str, int], list]:
    """Word counts of the stream's first ``n`` sentences; distinct words after each mark."""
    stream = ZipfStream(vocab, seed)
    counts: collections.Counter[str] = collections.Counter()
    distinct = []
    marks = sorted(marks)
    m = 0
    for i in range(n):
        while m < len(marks) and marks[m] <= i:
            distinct.append((marks[m], len(counts)))
            m += 1
        counts.update(words(stream.sentence(i)))
    distinct.extend((mark, len(counts)) for mark in marks[m:])
    return dict(counts), distinct


class WindowRecord:
    """Latencies of the tuples acked since the sampler last took them (bounded memory)."""

    def __init__(self, _total: int) -> None:
        self.emit_at: dict[int, float] = {}
        self.window: list[float] = []
        self.acked = 0

    def emitted(self, i: int, now: float) -> None:
        """Tuple ``i`` left the spout (a replay keeps its first emit)."""
        self.emit_at.setdefault(i, now)

    def ack(self, i: int, now: float) -> None:
        """Tuple ``i`` was acked."""
        t = self.emit_at.pop(i, None)
        if t is not None:
            self.window.append(now - t)
        self.acked += 1

    def take(self) -> list[float]:
        """The window's latencies; a new window starts."""
        window, self.window = self.window, []
        return window


# ----------------------------------------------------------------------------- processes
def processes() -> dict[str, list[Any]]:
    """This driver, the JVM(s), the worker daemon(s) and the Python workers, by kind."""
    import psutil

    me = psutil.Process(os.getpid())
    out: dict[str, list[Any]] = {k: [] for k in KINDS} | {"other": []}
    out["driver"].append(me)
    jvms = set()
    kids = me.children(recursive=True)
    for p in kids:
        try:
            if p.name() == "java":
                out["jvm"].append(p)
                jvms.add(p.pid)
        except psutil.Error:
            continue
    daemons = set()
    for p in kids:
        try:
            if p.pid in jvms:
                continue
            if p.ppid() in jvms and "python" in p.name():
                out["daemon"].append(p)
                daemons.add(p.pid)
        except psutil.Error:
            continue
    for p in kids:
        try:
            if p.pid in jvms or p.pid in daemons:
                continue
            if p.ppid() in daemons:
                out["workers"].append(p)
            else:
                out["other"].append(p)
        except psutil.Error:
            continue
    return out


def sample_memory() -> list[tuple[str, int, float, float, float]]:
    """``(kind, pid, rss MB, uss MB, cpu seconds)`` of every process of the run."""
    import psutil

    rows = []
    for kind, procs in processes().items():
        for p in procs:
            try:
                info = p.memory_full_info()
                cpu = p.cpu_times()
                rows.append(
                    (kind, p.pid, info.rss / 2**20, info.uss / 2**20, cpu.user + cpu.system)
                )
            except psutil.Error:
                continue
    return rows


def jvm_heap(pid: int) -> dict[str, float] | None:
    """The JVM's heap from ``jstat -gc`` (MB): used (garbage included), committed, old gen used.

    RSS alone cannot tell a leak from G1 growing its heap lazily (its default maximum is a
    quarter of the machine's memory); ``committed`` follows RSS, ``used`` and ``old_used``
    fall back after collections if what grew was garbage.
    """
    import shutil
    import subprocess

    jstat = shutil.which("jstat") or shutil.which("jstat", path=_java_bin())
    if jstat is None:
        return None
    try:
        out = subprocess.run(
            [jstat, "-gc", str(pid)], capture_output=True, text=True, timeout=10, check=True
        ).stdout.split("\n")
        row = dict(zip(out[0].split(), out[1].split(), strict=False))
        used = sum(float(row[k]) for k in ("S0U", "S1U", "EU", "OU"))
        committed = sum(float(row[k]) for k in ("S0C", "S1C", "EC", "OC"))
        return {
            "used": round(used / 1024, 1),
            "committed": round(committed / 1024, 1),
            "old_used": round(float(row["OU"]) / 1024, 1),
        }
    except (OSError, subprocess.SubprocessError, KeyError, ValueError, IndexError):
        return None


def _java_bin() -> str:
    home = os.environ.get("JAVA_HOME")
    if home:
        return str(Path(home) / "bin")
    java = Path("/usr/bin/java").resolve()
    return str(java.parent)


# ----------------------------------------------------------------------------- analysis
def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of ``(minute, MB)`` points, MB/min."""
    if len(points) < 2:
        return 0.0
    xs, ys = zip(*points, strict=True)
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0


def series(
    samples: list[dict[str, Any]], kind: str, field: str = "rss"
) -> list[tuple[float, float]]:
    """``(minute, MB)`` of ``kind``: summed over its processes (workers: all of them)."""
    out = []
    for s in samples:
        procs = [p for p in s["procs"] if p["kind"] == kind]
        if procs:
            out.append((s["t_min"], sum(p[field] for p in procs)))
    return out


def growth(samples: list[dict[str, Any]], minutes: float, window: float = 5.0) -> dict[str, Any]:
    """Per kind: first / last ``window`` minutes' mean, their difference, slopes (MB, MB/min)."""
    out: dict[str, Any] = {}
    end = samples[-1]["t_min"] if samples else minutes
    w = min(window, end / 3) if end else window
    for kind in KINDS:
        for field in ("rss", "uss"):
            pts = series(samples, kind, field)
            if not pts:
                continue
            first = [y for x, y in pts if x <= w]
            last = [y for x, y in pts if x >= end - w]
            half = [(x, y) for x, y in pts if x >= end / 2]
            out.setdefault(kind, {})[field] = {
                "first_mb": round(statistics.fmean(first), 1) if first else None,
                "last_mb": round(statistics.fmean(last), 1) if last else None,
                "growth_mb": round(statistics.fmean(last) - statistics.fmean(first), 1)
                if first and last
                else None,
                "peak_mb": round(max(y for _, y in pts), 1),
                "slope_mb_per_min": round(slope(pts), 2),
                "slope_second_half_mb_per_min": round(slope(half), 2),
            }
    for field in ("used", "committed", "old_used"):
        pts = [(s["t_min"], s["jvm_heap"][field]) for s in samples if s.get("jvm_heap")]
        if pts:
            first = [y for x, y in pts if x <= w]
            last = [y for x, y in pts if x >= end - w]
            out.setdefault("jvm_heap", {})[field] = {
                "first_mb": round(statistics.fmean(first), 1) if first else None,
                "last_mb": round(statistics.fmean(last), 1) if last else None,
                "peak_mb": round(max(y for _, y in pts), 1),
                "slope_mb_per_min": round(slope(pts), 2),
            }
    out["window_min"] = round(w, 2)
    return out


def plot(samples: list[dict[str, Any]], result: dict[str, Any], path: Path) -> None:
    """RSS per process kind over time (top), state keys and latency p99 (bottom)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax, ax2) = plt.subplots(
        2, 1, figsize=(11, 8), sharex=True, gridspec_kw={"height_ratios": [3, 2]}
    )
    colors = {"driver": "tab:blue", "jvm": "tab:orange", "daemon": "tab:gray"}
    for kind in ("driver", "jvm", "daemon"):
        pts = series(samples, kind)
        if pts:
            xs, ys = zip(*pts, strict=True)
            ax.plot(xs, ys, label=f"{kind} RSS", color=colors[kind], lw=2)
    heap = [(s["t_min"], s["jvm_heap"]["used"]) for s in samples if s.get("jvm_heap")]
    if heap:
        xs, ys = zip(*heap, strict=True)
        ax.plot(xs, ys, color="tab:orange", lw=1, ls=":", label="JVM heap used (jstat)")
    pids = sorted({p["pid"] for s in samples for p in s["procs"] if p["kind"] == "workers"})
    for n, pid in enumerate(pids):
        pts = [
            (s["t_min"], p["rss"])
            for s in samples
            for p in s["procs"]
            if p["kind"] == "workers" and p["pid"] == pid
        ]
        xs, ys = zip(*pts, strict=True)
        ax.plot(
            xs,
            ys,
            color="tab:green",
            lw=1.2,
            alpha=0.8,
            label="Python worker RSS (each)" if n == 0 else None,
        )
    pts = series(samples, "workers", "uss")
    if pts:
        xs, ys = zip(*pts, strict=True)
        ax.plot(xs, ys, color="tab:green", lw=2, ls="--", label="Python workers USS (sum)")
    ax.set_ylabel("memory (MB)")
    top = max((p["rss"] for s in samples for p in s["procs"] if p["kind"] in KINDS), default=1)
    ax.set_ylim(0, top * 1.3)  # room for the legend above the lines
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=9, ncol=3)
    ax.set_title(
        f"Soak: stateful word count, {result['rate']:,} tuples/s of {result['words_per_tuple']} "
        f"words, vocab {result['vocab']:,}, {result['provider']} state, "
        f"{result['interval_ms']} ms checkpoints, {result['master']}",
        fontsize=10,
    )
    keys = [(s["t_min"], s["distinct_keys"] / 1e6) for s in samples if "distinct_keys" in s]
    if keys:
        xs, ys = zip(*keys, strict=True)
        ax2.plot(xs, ys, color="tab:purple", lw=2, label="distinct keys in state (M)")
    ax2.set_ylabel("distinct keys (millions)", color="tab:purple")
    ax2.set_ylim(bottom=0)
    ax2.set_xlabel("minutes")
    ax2.grid(alpha=0.3)
    ax3 = ax2.twinx()
    lat = [(s["t_min"], s["latency_ms"]["p99"]) for s in samples if s["latency_ms"]]
    if lat:
        xs, ys = zip(*lat, strict=True)
        ax3.plot(xs, ys, color="tab:red", lw=1, alpha=0.7, label="latency p99 (ms)")
    ax3.set_ylabel("latency p99, emit -> ack (ms)", color="tab:red")
    ax3.set_ylim(bottom=0)
    h1, l1 = ax2.get_legend_handles_labels()
    h2, l2 = ax3.get_legend_handles_labels()
    ax2.legend(h1 + h2, l1 + l2, loc="lower right", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ----------------------------------------------------------------------------- the run
def run(args: argparse.Namespace) -> dict[str, Any]:  # noqa: C901 - one linear script
    from bench import latency
    from statefulbolts import LocalCluster
    from statefulbolts.runtime import build_session

    duration = args.minutes * 60
    total = int(args.rate * duration)
    conf: dict[str, Any] = {"topology.state.checkpoint.interval.ms": args.interval}
    server = None
    if args.provider == "redis":
        from bench._redis import redis_conf, start_redis

        server = start_redis()
        conf |= redis_conf(server.port)
    spark = build_session(args.master, "statefulbolts-bench-soak")
    name = f"soak-{time.time_ns()}"
    stream = ZipfStream(args.vocab, args.seed)
    spout = latency.PacedSpout(
        stream, args.rate, total, name, max_seconds=duration, record=WindowRecord
    )
    spout.source = None  # ship no stream with the topology; the driver's copy gets it below
    cluster = LocalCluster(spark=spark)
    txs: collections.Counter[str] = collections.Counter()
    failed_txs = []

    def on_tx(info: Any) -> None:
        txs[info.action or "BATCH"] += 1
        if not info.ok:
            failed_txs.append(f"{info.action}({info.txid}): {info.error}")

    handle = cluster.submit_topology(
        name, conf, latency.build(spout, args.parallelism), on_transaction=on_tx
    )
    samples: list[dict[str, Any]] = []
    stop = threading.Event()
    live = latency.REGISTRY[name]
    live.source = stream
    started = time.perf_counter()

    def sampler() -> None:
        nxt = started
        while not stop.is_set():
            now = time.perf_counter()
            window = live.record.take()
            window.sort()
            lat = {}
            if window:
                lat = {
                    "p50": round(window[len(window) // 2] * 1000, 1),
                    "p99": round(window[min(len(window) - 1, int(len(window) * 0.99))] * 1000, 1),
                    "max": round(window[-1] * 1000, 1),
                }
            procs: list[dict[str, Any]] = [
                {"kind": k, "pid": pid, "rss": round(r, 1), "uss": round(u, 1), "cpu": round(c, 1)}
                for k, pid, r, u, c in sample_memory()
            ]
            status = handle.status()
            jvm = next((p["pid"] for p in procs if p["kind"] == "jvm"), None)
            heap = jvm_heap(jvm) if jvm is not None else None
            samples.append(
                {
                    "t_min": round((now - started) / 60, 3),
                    "emitted": live.next_id,
                    "acked": live.acked,
                    "failed": live.failed,
                    "buffered": status.get("buffered"),
                    "live_roots": status.get("live_roots"),
                    "latency_ms": lat,
                    "procs": procs,
                    "load1": round(os.getloadavg()[0], 2),
                    "jvm_heap": heap,
                }
            )
            if not args.json or args.progress:
                rss = {k: sum(p["rss"] for p in procs if p["kind"] == k) for k in KINDS}
                print(
                    f"{(now - started) / 60:6.1f} min: emitted {live.next_id:>9} acked "
                    f"{live.acked:>9} live {status.get('live_roots')}, p99 {lat.get('p99')} ms, "
                    "RSS MB " + " ".join(f"{k} {v:.0f}" for k, v in rss.items()),
                    file=sys.stderr,
                    flush=True,
                )
            nxt += args.sample_secs
            stop.wait(max(0.0, nxt - time.perf_counter()))

    thread = threading.Thread(target=sampler, name="soak-sampler", daemon=True)
    live.arm()
    thread.start()
    try:
        while not live.closed:  # the end of the paced input, seen within 50 ms
            time.sleep(0.05)
        handle.await_idle(600)
        stop.set()
        thread.join()
        counts = handle.read_state("count")
        metrics = handle.metrics()
    finally:
        stop.set()
        handle.kill()
        spark.stop()
        if server is not None:
            server.stop()
    emitted = live.next_id
    print("checking the counts (regenerating the stream)", file=sys.stderr, flush=True)
    expected, distinct = replay_counts(
        args.vocab, args.seed, emitted, [s["emitted"] for s in samples]
    )
    for s, (_, d) in zip(samples, distinct, strict=True):
        s["distinct_keys"] = d
    mismatched = [w for w in set(expected) | set(counts) if counts.get(w) != expected.get(w)]
    keys_at = {
        f"{m:g} min": next((s["distinct_keys"] for s in samples if s["t_min"] >= m), None)
        for m in sorted({5, args.minutes / 2, args.minutes - 5})
        if 0 < m < args.minutes
    }
    elapsed = samples[-1]["t_min"] * 60 if samples else duration
    cpu = {}
    if samples:
        for kind in KINDS:
            first = sum(p["cpu"] for p in samples[0]["procs"] if p["kind"] == kind)
            last = sum(p["cpu"] for p in samples[-1]["procs"] if p["kind"] == kind)
            cpu[kind] = round((last - first) / max(elapsed, 1), 3)
    result = {
        "minutes": args.minutes,
        "rate": args.rate,
        "words_per_tuple": 10,
        "vocab": args.vocab,
        "provider": args.provider,
        "interval_ms": args.interval,
        "master": args.master,
        "parallelism": args.parallelism,
        "sample_secs": args.sample_secs,
        "emitted": emitted,
        "acked": live.acked,
        "failed_calls": live.failed,
        "achieved_per_sec": round(emitted / duration, 1),
        "transactions": dict(txs),
        "failed_transactions": failed_txs[:10],
        "distinct_keys": len(counts),
        "distinct_keys_at": keys_at,
        "words_counted": sum(counts.values()),
        "words_expected": sum(expected.values()),
        "exact": not mismatched,
        "mismatched": sorted(mismatched)[:10],
        "growth": growth(samples, args.minutes),
        "cpu_cores_used": cpu,
        "spout_component": metrics["components"].get("sentences"),
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "soak.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["t_min", "kind", "pid", "rss_mb", "uss_mb", "cpu_s", "emitted", "acked"])
        for s in samples:
            for p in s["procs"]:
                w.writerow(
                    [
                        s["t_min"],
                        p["kind"],
                        p["pid"],
                        p["rss"],
                        p["uss"],
                        p["cpu"],
                        s["emitted"],
                        s["acked"],
                    ]
                )
    (out / "soak.json").write_text(json.dumps(result | {"samples": samples}, indent=1))
    plot(samples, result, out / "soak.png")
    result["files"] = [str(out / n) for n in ("soak.csv", "soak.json", "soak.png")]
    return result


def print_summary(result: dict[str, Any]) -> None:
    """What a person reads."""
    print(
        f"soak: {result['minutes']} min at {result['rate']} tuples/s ({result['achieved_per_sec']}"
        f" achieved), vocab {result['vocab']:,}, {result['provider']} state, interval "
        f"{result['interval_ms']} ms, {result['master']}"
    )
    print(
        f"emitted {result['emitted']:,}, acked {result['acked']:,}, failed calls "
        f"{result['failed_calls']}, transactions {result['transactions']}"
    )
    print(
        f"final state: {result['distinct_keys']:,} distinct keys, {result['words_counted']:,} "
        f"words; exact: {result['exact']}"
    )
    g = result["growth"]
    print(
        f"RSS / USS growth, MB (first vs last {g['window_min']} min; slope MB/min whole run / "
        "second half; peak):"
    )
    for kind in KINDS:
        for field in ("rss", "uss"):
            s = g.get(kind, {}).get(field)
            if s:
                print(
                    f"  {kind:>8} {field}: {s['first_mb']:>8} -> {s['last_mb']:>8} "
                    f"({s['growth_mb']:+.1f}), slope {s['slope_mb_per_min']:+.2f} / "
                    f"{s['slope_second_half_mb_per_min']:+.2f}, peak {s['peak_mb']}"
                )
    heap = g.get("jvm_heap")
    if heap:
        print(
            "  JVM heap (jstat), MB first -> last, peak: "
            + "; ".join(
                f"{k} {v['first_mb']} -> {v['last_mb']}, peak {v['peak_mb']}"
                for k, v in heap.items()
            )
        )
    print(f"distinct keys in the state along the run: {result.get('distinct_keys_at')}")
    print(f"CPU cores used on average: {result['cpu_cores_used']}")
    print("files: " + ", ".join(result["files"]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=30)
    parser.add_argument("--rate", type=int, default=2000, help="tuples (sentences) per second")
    parser.add_argument("--vocab", type=int, default=1_000_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--interval", type=int, default=1000, help="checkpoint interval, ms")
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--provider", choices=["memory", "redis"], default="memory")
    parser.add_argument("--sample-secs", type=float, default=5)
    parser.add_argument("--out", default=str(ROOT / "docs" / "bench"))
    parser.add_argument("--progress", action="store_true", help="progress on stderr with --json")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--replot", metavar="SOAK_JSON", help="only redraw soak.png from a run")
    args = parser.parse_args(argv)
    if args.replot:
        saved = json.loads(Path(args.replot).read_text())
        plot(saved["samples"], saved, Path(args.replot).with_suffix(".png"))
        return 0
    result = run(args)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_summary(result)
    return 0 if result["exact"] else 1


if __name__ == "__main__":
    sys.exit(main())
