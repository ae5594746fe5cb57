"""Peer table: Bytewax's ``stateful_map`` word count with recovery vs ours, on one Zipf input.

    python bench/peers.py                       # 1,000,000 words, Zipf over 10,000 words
    python bench/peers.py --repeat 3 --json     # best of 3 rounds, order alternating
    python bench/peers.py --words 200000 --no-bytewax-2p
    python bench/peers.py --api both --repeat 3 --json  # ours per tuple too (the Storm API)
    python bench/peers.py --api both --no-emit          # counts that emit nothing (examples')

It takes about 40 s plus 25 s per ``--repeat`` round on 2 cores.

Systems, all over ``examples/zipf.py``'s seeded corpus (10-word sentences), on this machine:

- ``same_shape``: the plain PySpark job of the topology's shape (split, partition by word,
  count per partition, no map-side combine), ``bench/wordcount.py``'s baseline, on a warm
  ``local[2]`` session; every ratio is to it. ``reduce_by_key`` (Spark's best, with its
  map-side combine) is shown too.
- ``statefulbolts``: the stateful word count (``bench/wordcount.py``'s topology: spout ->
  split -> count, 2 tasks each, split and count taking column batches) with in-memory state,
  checkpoints every ``--interval`` ms, from submit to idle (every count committed), on the
  same warm session.
- ``statefulbolts_tuple`` (``--api tuple`` or ``both``): the same topology written the Storm
  way, per tuple (``bench/wordcount.py --api tuple``: a ``BasicBolt`` split, a count whose
  ``execute`` does ``get``, ``put``, ``emit`` and ``ack`` per word, a per-tuple sink).
- ``bytewax_1p``: Bytewax (``pip install bytewax``): input -> ``flat_map`` (split) ->
  ``key_on`` -> ``stateful_map`` (count, emits ``(word, count)``) -> a sink keeping each word's
  last count, one worker (``run_main``), with recovery on: its SQLite recovery store
  (``init_db_dir``, ``RecoveryConfig``) snapshotting every epoch, epoch interval = ``--interval``.
- ``bytewax_2p``: the same dataflow on two worker processes (``cluster_main``, one worker each,
  two recovery partitions), the input split into two partitions: Bytewax's use of two cores.
- ``bytewax_1p_norecovery``: one worker, no recovery (what recovery costs Bytewax).

``--no-emit``: every count emits nothing, as ``examples/wordcount.py``'s does (issue 35 names
its per-tuple form): ours without the sink bolt (the per-tuple count is the examples'
``WordCount``: ``get``, ``put``, ``ack``), ``same_shape`` without its sink stage, and Bytewax's
count a ``stateful_flat_map`` that returns no items, its counts then read from the recovery
store alone. ``bytewax_1p_norecovery`` is left out there: nothing would hold its counts.

Each system's time is its run only: Spark's session, Bytewax's imports and processes and the
corpus are made before the clock starts (for ``bytewax_2p``: from the later of the two
processes' start of ``cluster_main`` to the later end). Every system's counts are checked
against a plain Python count: the sink's final counts and, for the recovery runs, the last
snapshot of every key in Bytewax's SQLite store (the durable state a restart would resume
from). ``ratio`` = words/s / ``same_shape`` words/s. With ``--repeat`` > 1 each system keeps its
fastest run and the rounds alternate their order.
"""

from __future__ import annotations

import argparse
import collections
import inspect
import json
import os
import pickle
import socket
import sqlite3
import subprocess
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples.corpus import words  # noqa: E402
from examples.zipf import zipf_sentences  # noqa: E402

COUNT_STEP = "count"


# ----------------------------------------------------------------------------- Bytewax
def _count(state: int | None, _word: str) -> tuple[int, int]:
    n = (state or 0) + 1
    return n, n


def _count_quietly(state: int | None, _word: str) -> tuple[int, list[int]]:
    return (state or 0) + 1, []


def bytewax_flow(
    corpus: list[str], partitions: int, batch: int, sink: dict[str, int], emit: bool = True
) -> Any:
    """Input (``partitions`` parts) -> split -> key -> stateful_map count -> last-count sink.

    ``emit`` false: the count is a ``stateful_flat_map`` that emits nothing (the examples' word
    count, a sink); its counts are then only in the recovery store.
    """
    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.inputs import FixedPartitionedSource, StatefulSourcePartition
    from bytewax.outputs import DynamicSink, StatelessSinkPartition

    class _Part(StatefulSourcePartition):
        """Sentences ``i, i + n, i + 2n, ...`` of the corpus; resumes from a position."""

        def __init__(self, index: int, resume: int | None) -> None:
            self._items = corpus[index::partitions]
            self._pos = resume or 0

        def next_batch(self) -> list[str]:
            if self._pos >= len(self._items):
                raise StopIteration
            out = self._items[self._pos : self._pos + batch]
            self._pos += len(out)
            return out

        def snapshot(self) -> int:
            return self._pos

    class _Source(FixedPartitionedSource):
        def list_parts(self) -> list[str]:
            return [str(i) for i in range(partitions)]

        def build_part(self, step_id: str, for_part: str, resume_state: int | None) -> _Part:
            return _Part(int(for_part), resume_state)

    class _SinkPart(StatelessSinkPartition):
        def write_batch(self, items: list[tuple[str, int]]) -> None:
            sink.update(items)  # each word's last count (they arrive in order per key)

    class _Sink(DynamicSink):
        def build(self, step_id: str, worker_index: int, worker_count: int) -> _SinkPart:
            return _SinkPart()

    flow = Dataflow("peers_wc")
    lines = op.input("in", flow, _Source())
    split = op.flat_map("split", lines, words)
    keyed = op.key_on("key", split, lambda w: w)
    if emit:
        counts = op.stateful_map(COUNT_STEP, keyed, _count)
    else:
        counts = op.stateful_flat_map(COUNT_STEP, keyed, _count_quietly)
    op.output("out", counts, _Sink())
    return flow


def snapshot_counts(db_dir: Path) -> dict[str, int]:
    """The last snapshot of every key of the count step in a Bytewax SQLite recovery store."""
    out: dict[str, Any] = {}
    epoch: dict[str, int] = {}
    for path in sorted(db_dir.glob("*.sqlite3")):
        db = sqlite3.connect(path)
        try:
            rows = db.execute(
                "SELECT state_key, snap_epoch, ser_change FROM snaps WHERE step_id LIKE ?",
                (f"%.{COUNT_STEP}.%",),
            ).fetchall()
        finally:
            db.close()
        for key, snap_epoch, blob in rows:
            if key not in epoch or snap_epoch > epoch[key]:
                epoch[key] = snap_epoch
                out[key] = pickle.loads(blob) if blob is not None else None  # noqa: S301 - ours
    return {k: v for k, v in out.items() if v is not None}


def bytewax_1p(
    corpus: list[str], interval_ms: int, batch: int, recovery: bool, emit: bool = True
) -> dict[str, Any]:
    """One worker in this process (``run_main``); counts from the sink and the store."""
    from bytewax.recovery import RecoveryConfig, init_db_dir
    from bytewax.testing import run_main

    sink: dict[str, int] = {}
    flow = bytewax_flow(corpus, 1, batch, sink, emit)
    with tempfile.TemporaryDirectory(prefix="bytewax-recovery-") as tmp:
        config = None
        if recovery:
            init_db_dir(Path(tmp), 1)
            config = RecoveryConfig(tmp)
        started = time.perf_counter()
        run_main(flow, epoch_interval=timedelta(milliseconds=interval_ms), recovery_config=config)
        seconds = time.perf_counter() - started
        stored = snapshot_counts(Path(tmp)) if recovery else None
        size = sum(p.stat().st_size for p in Path(tmp).glob("*.sqlite3"))
    counts = sink if emit or stored is None else stored  # no emit: the store is the only record
    return {"seconds": seconds, "counts": counts, "stored": stored, "store_bytes": size}


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def bytewax_2p(args: argparse.Namespace) -> dict[str, Any]:
    """Two worker processes (``cluster_main``), each this script in ``--bytewax-worker`` mode."""
    addresses = ";".join(f"127.0.0.1:{p}" for p in _free_ports(2))
    with tempfile.TemporaryDirectory(prefix="bytewax-recovery-") as tmp:
        from bytewax.recovery import init_db_dir

        init_db_dir(Path(tmp), 2)
        outs = [Path(tmp) / f"out-{i}.pickle" for i in range(2)]
        procs = [
            subprocess.Popen(
                [
                    sys.executable,
                    __file__,
                    "--bytewax-worker",
                    str(i),
                    "--addresses",
                    addresses,
                    "--recovery-dir",
                    tmp,
                    "--worker-out",
                    str(outs[i]),
                    "--words",
                    str(args.words),
                    "--vocab",
                    str(args.vocab),
                    "--seed",
                    str(args.seed),
                    "--interval",
                    str(args.interval),
                    "--batch",
                    str(args.batch),
                    *([] if args.emit else ["--no-emit"]),
                ],
                stdout=sys.stderr,  # Bytewax prints its connection retries: keep --json clean
            )
            for i in range(2)
        ]
        codes = [p.wait(3600) for p in procs]
        if any(codes):
            msg = f"a Bytewax worker process failed: exit codes {codes}"
            raise RuntimeError(msg)
        parts = [pickle.loads(o.read_bytes()) for o in outs]  # noqa: S301 - written above
        stored = snapshot_counts(Path(tmp))
        size = sum(p.stat().st_size for p in Path(tmp).glob("*.sqlite3"))
    counts: dict[str, int] = {}
    for part in parts:
        counts.update(part["counts"])
    if not args.emit:
        counts = stored  # no emit: the store is the only record
    start = max(p["started"] for p in parts)
    end = max(p["ended"] for p in parts)
    return {
        "seconds": end - start,
        "counts": counts,
        "stored": stored,
        "store_bytes": size,
        "start_skew": round(start - min(p["started"] for p in parts), 3),
    }


def bytewax_worker(args: argparse.Namespace) -> int:
    """One process of ``bytewax_2p``: run, then write this worker's sink and times."""
    from bytewax.recovery import RecoveryConfig
    from bytewax.testing import cluster_main

    corpus = zipf_sentences(-(-args.words // 10), args.vocab, args.seed)
    sink: dict[str, int] = {}
    flow = bytewax_flow(corpus, 2, args.batch, sink, args.emit)
    started = time.time()
    cluster_main(
        flow,
        args.addresses.split(";"),
        args.bytewax_worker,
        epoch_interval=timedelta(milliseconds=args.interval),
        recovery_config=RecoveryConfig(args.recovery_dir),
        worker_count_per_proc=1,
    )
    ended = time.time()
    Path(args.worker_out).write_bytes(
        pickle.dumps({"counts": sink, "started": started, "ended": ended})
    )
    return 0


# ----------------------------------------------------------------------------- the table
def main(argv: list[str] | None = None) -> int:  # noqa: C901 - one linear script
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--words", type=int, default=1_000_000)
    parser.add_argument("--vocab", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--interval", type=int, default=1000, help="our checkpoint / Bytewax epoch interval, ms"
    )
    parser.add_argument("--batch", type=int, default=1000, help="Bytewax input batch size")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--no-bytewax-2p", dest="bytewax_2p", action="store_false")
    parser.add_argument(
        "--api",
        choices=["batch", "tuple", "both"],
        default="batch",
        help="our word count's bolts: column batches (statefulbolts), per tuple "
        "(statefulbolts_tuple), or both",
    )
    parser.add_argument(
        "--no-emit",
        dest="emit",
        action="store_false",
        help="counts that emit nothing: examples/wordcount.py's count bolt (get, put, ack) and "
        "a Bytewax stateful_flat_map emitting nothing; no bytewax_1p_norecovery (nothing to "
        "check its counts by)",
    )
    parser.add_argument("--json", action="store_true")
    # Internal: one process of the two-process Bytewax run.
    parser.add_argument("--bytewax-worker", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--addresses", help=argparse.SUPPRESS)
    parser.add_argument("--recovery-dir", help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.bytewax_worker is not None:
        return bytewax_worker(args)

    try:
        import bytewax  # noqa: F401
    except ImportError as exc:
        msg = f"Bytewax is not installed ({exc}): pip install bytewax"
        raise SystemExit(msg) from exc
    from importlib.metadata import version

    from bench.wordcount import baseline, framework, same_shape
    from statefulbolts.runtime import build_session

    def say(text: str) -> None:
        print(text, file=sys.stderr, flush=True)

    corpus = zipf_sentences(-(-args.words // 10), args.vocab, args.seed)
    expected = dict(collections.Counter(w for text in corpus for w in words(text)))
    total = sum(expected.values())
    spark = build_session(args.master, app_name="statefulbolts-bench-peers")
    sc = spark.sparkContext
    conf = {"topology.state.checkpoint.interval.ms": args.interval}

    def ours(
        name: str, sentences: list[str], counts: dict[str, int], api: str = "batch"
    ) -> dict[str, Any]:
        """``bench.wordcount.framework``: checks the state itself (newer) or returns counts."""
        kwargs: dict[str, Any] = {}
        if "expected" in inspect.signature(framework).parameters:
            kwargs["expected"] = counts
        if api != "batch":
            kwargs["api"] = api
        if not args.emit:
            kwargs["emit"] = False
        res = framework(spark, sentences, args.parallelism, conf, name, False, **kwargs)
        if "counts" not in res:  # it checked every count in the provider against ``counts``
            res["counts"] = counts if res.get("exact") else {}
        return res

    say("warming up Spark and the topology")
    warm = corpus[: len(corpus) // 5]
    baseline(sc, warm, args.parallelism)
    same_shape(sc, warm, args.parallelism, args.emit)
    warm_expected = dict(collections.Counter(w for text in warm for w in words(text)))
    apis = ["batch", "tuple"] if args.api == "both" else [args.api]
    for api in apis:
        ours(f"peers-warm-{time.time_ns()}", warm, warm_expected, api)

    systems: dict[str, Any] = {
        "same_shape": lambda: same_shape(sc, corpus, args.parallelism, args.emit),
        "reduce_by_key": lambda: baseline(sc, corpus, args.parallelism),
    }
    if "batch" in apis:
        systems["statefulbolts"] = lambda: ours(f"peers-{time.time_ns()}", corpus, expected)
    if "tuple" in apis:
        systems["statefulbolts_tuple"] = lambda: ours(
            f"peers-tuple-{time.time_ns()}", corpus, expected, "tuple"
        )
    systems["bytewax_1p"] = lambda: bytewax_1p(corpus, args.interval, args.batch, True, args.emit)
    if args.bytewax_2p:
        systems["bytewax_2p"] = lambda: bytewax_2p(args)
    if args.emit:
        systems["bytewax_1p_norecovery"] = lambda: bytewax_1p(
            corpus, args.interval, args.batch, False
        )

    runs: dict[str, dict[str, Any]] = {}
    rounds: list[dict[str, float]] = []
    order = list(systems)
    for i in range(args.repeat):
        this_round: dict[str, float] = {}
        for name in order if i % 2 == 0 else order[::-1]:
            say(f"round {i + 1}/{args.repeat}: {name}")
            res = systems[name]()
            exact = res["counts"] == expected
            stored = res.get("stored")
            if stored is not None:
                exact_store = stored == expected
            else:
                exact_store = None
            this_round[name] = res["seconds"]
            best = runs.get(name)
            row = {
                "seconds": res["seconds"],
                "exact": exact and (best is None or best["exact"]),
                "all_seconds": [*(best["all_seconds"] if best else []), round(res["seconds"], 3)],
            }
            if exact_store is not None:
                row["exact_recovery_store"] = exact_store and (
                    best is None or best.get("exact_recovery_store", True)
                )
                row["store_mb"] = round(res["store_bytes"] / 2**20, 2)
            for key in ("transactions", "start_skew"):
                if key in res:
                    row[key] = res[key]
            if best is not None and best["seconds"] < row["seconds"]:
                row["seconds"] = best["seconds"]
            runs[name] = row
            say(
                f"  {res['seconds']:.2f}s exact={exact}"
                + (f" store exact={exact_store}" if exact_store is not None else "")
            )
        rounds.append(this_round)
    spark.stop()

    base = runs["same_shape"]["seconds"]
    for row in runs.values():
        row["seconds"] = round(row["seconds"], 3)
        row["words_per_sec"] = round(total / row["seconds"])
        row["ratio_to_same_shape"] = round(base / row["seconds"], 3)
    per_round = [
        {n: round(r["same_shape"] / s, 3) for n, s in r.items() if n != "same_shape"}
        for r in rounds
    ]
    result = {
        "words": total,
        "vocab": len(expected),
        "interval_ms": args.interval,
        "emit": args.emit,
        "master": sc.master,
        "parallelism": args.parallelism,
        "bytewax_version": version("bytewax"),
        "python": sys.version.split()[0],
        "cpus": os.cpu_count(),
        "load_avg": [round(x, 2) for x in os.getloadavg()],
        "runs": runs,
        "ratios_per_round": per_round,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"{total:,} words, Zipf over {len(expected):,} words; interval {args.interval} ms; "
            f"Spark {sc.master}; Bytewax {result['bytewax_version']}; Python {result['python']}"
        )
        print(f"{'system':>22} {'seconds':>8} {'words/s':>10} {'x same_shape':>12}  exact")
        for name, row in sorted(runs.items(), key=lambda kv: kv[1]["seconds"]):
            exact = str(row["exact"])
            if "exact_recovery_store" in row:
                exact += f" (store {row['exact_recovery_store']}, {row['store_mb']} MB)"
            print(
                f"{name:>22} {row['seconds']:>8.2f} {row['words_per_sec']:>10,} "
                f"{row['ratio_to_same_shape']:>12.3f}  {exact}"
            )
        if args.repeat > 1:
            print("per-round ratios to same_shape:", per_round)
    ok = all(r["exact"] and r.get("exact_recovery_store", True) for r in runs.values())
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
