"""Transactional word count throughput against a plain PySpark job, in one process.

    python bench/transactional.py --json                      # 1,000,000 words, memory and Redis
    python bench/transactional.py --words 200000 --provider memory
    python bench/transactional.py --repeat 3 --pending 1,4   # best of 3 per configuration
    python bench/transactional.py --commit-location executors  # commits as Spark jobs
    python bench/transactional.py --shape combine --wait-ms 50  # a 50 ms remote call per batch

The input is ``bench/wordcount.py``'s: the same sentences (Zipf over ``--vocab`` words, 10,000
by default; ``--vocab 0``: the examples' 94-word corpus), read by a partitioned transactional
spout whose meta is a range of sentence numbers. Each Spark worker makes the Zipf corpus once
(``examples.zipf.cached_corpus``), so the batches are not shipped from the driver. Two shapes
(``--shape``): "tuples", where ``split`` emits a tuple per word and a batch bolt counts each
batch's words after a fields grouping on the word; and "combine", where one batch bolt splits
and counts (the map-side combine ``reduceByKey`` does), so only per-batch counts cross the
shuffle. In both a committer applies the counts to a ``TransactionalMap`` in the state provider
(``commit``). The baseline is the same split /
shuffle / count as a plain RDD ``reduceByKey`` job, warm, in the same session. Figures: words
per second of each configuration, its ratio to the baseline, Redis against memory, and
``topology.max.spout.pending`` 4 against 1; per configuration, the seconds its batches spent
in each job (emit, process, commit, summed over batches: with pipelining they overlap); and
per configuration the CPU seconds of each process role (the driver, Spark's JVM, the Python
workers: ``bench._cpu``), median over the rounds, with each round's total against its
baseline's (``cpu_vs_baseline``): on two cores a run that needs more CPU than its baseline
cannot keep up with it by overlapping its jobs, whatever the pipelining.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._cpu import CpuMeter  # noqa: E402
from bench.wordcount import baseline, corpus_for  # noqa: E402
from examples.corpus import sentence, words  # noqa: E402
from examples.zipf import cached_corpus  # noqa: E402
from statefulbolts import (  # noqa: E402
    BaseTransactionalBolt,
    BasicBolt,
    Committer,
    Fields,
    PartitionedTransactionalSpout,
    TransactionalMap,
    TransactionalTopology,
    TransactionalTopologyBuilder,
)


class CorpusSpout(PartitionedTransactionalSpout):
    """Sentences ``0 .. n-1`` split into ``partitions`` contiguous ranges; meta ``[start, n]``.

    ``zipf`` ``(count, vocab, seed)``: sentence ``i`` is ``cached_corpus(*zipf)[i]`` (n <=
    count); ``None``: the examples' corpus.
    """

    def __init__(
        self, n: int, partitions: int, take_per_batch: int, zipf: tuple[int, int, int] | None
    ) -> None:
        self.n, self.partitions, self.take, self.zipf = n, partitions, take_per_batch, zipf

    def sentences(self) -> Any:
        """Sentence ``i`` at index ``i``."""
        if self.zipf is None:
            return _Cycled()
        return cached_corpus(*self.zipf)

    def bounds(self, p: int) -> tuple[int, int]:
        return p * self.n // self.partitions, (p + 1) * self.n // self.partitions

    def get_coordinator(self, conf: Any, context: Any) -> Any:
        return _Coordinator(self.partitions)

    def get_emitter(self, conf: Any, context: Any) -> Any:
        return _Emitter(self)

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "sentence"))


class _Coordinator(PartitionedTransactionalSpout.Coordinator):
    def __init__(self, partitions: int) -> None:
        self.partitions = partitions

    def num_partitions(self) -> int:
        return self.partitions


class _Emitter(PartitionedTransactionalSpout.Emitter):
    def __init__(self, spout: CorpusSpout) -> None:
        self.spout = spout

    def emit_partition_batch_new(self, tx: Any, collector: Any, partition: int, last: Any) -> Any:
        lo, hi = self.spout.bounds(partition)
        start = lo if last is None else last[0] + last[1]
        meta = [start, max(0, min(self.spout.take, hi - start))]
        self.emit_partition_batch(tx, collector, partition, meta)
        return meta

    def emit_partition_batch(self, tx: Any, collector: Any, partition: int, meta: Any) -> None:
        emit, corpus = collector.emit, self.spout.sentences()
        for i in range(meta[0], meta[0] + meta[1]):
            emit([tx, corpus[i]])


class _Cycled:
    """The examples' corpus, indexed like a list."""

    def __getitem__(self, i: int) -> str:
        return sentence(i)


class Split(BasicBolt):
    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        attempt = tuple.values[0]
        for word in words(tuple.values[1]):
            collector.emit([attempt, word])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "word"))


class BatchWordCount(BaseTransactionalBolt):
    """Counts a batch's words on this task; sends ``(attempt, word, n)`` per word at the end."""

    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.collector, self.attempt = collector, id
        self.counts: collections.Counter[str] = collections.Counter()

    def execute(self, tuple: Any) -> None:  # noqa: A002
        self.counts[tuple.values[1]] += 1

    def finish_batch(self) -> None:
        emit, attempt = self.collector.emit, self.attempt
        for word, n in self.counts.items():
            emit([attempt, word, n])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "word", "n"))


class SplitCount(BaseTransactionalBolt):
    """Splits and counts a batch's sentences on this task: the map-side combine of the RDD job.

    Sends ``(attempt, word, n)`` per distinct word at the end of the batch, so only a batch's
    distinct words per task cross the shuffle, not every word.
    """

    def __init__(self, wait_ms: float = 0.0) -> None:
        self.wait_ms = wait_ms

    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.collector, self.attempt = collector, id
        self.counts: collections.Counter[str] = collections.Counter()

    def execute(self, tuple: Any) -> None:  # noqa: A002
        self.counts.update(words(tuple.values[1]))

    def finish_batch(self) -> None:
        if self.wait_ms:  # a remote call per batch (``--wait-ms``): time, not CPU
            time.sleep(self.wait_ms / 1000)
        emit, attempt = self.collector.emit, self.attempt
        for word, n in self.counts.items():
            emit([attempt, word, n])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "word", "n"))


class CommitCounts(BaseTransactionalBolt, Committer):
    """Applies a batch's counts to the word counts, exactly once per txid."""

    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.attempt, self.counts = id, {}
        self.map = TransactionalMap(context.backing_map())

    def execute(self, tuple: Any) -> None:  # noqa: A002
        word = tuple.values[1]
        self.counts[word] = self.counts.get(word, 0) + tuple.values[2]

    def finish_batch(self) -> None:
        keys = list(self.counts)
        updaters = [lambda old, n=self.counts[k]: (old or 0) + n for k in keys]
        self.map.multi_update(self.attempt, keys, updaters)

    def declare_output_fields(self, declarer: Any) -> None:
        """Emits nothing."""


def build(
    n: int,
    parallelism: int,
    take: int,
    tid: str,
    shape: str,
    zipf: tuple[int, int, int] | None = None,
    wait_ms: float = 0.0,
) -> TransactionalTopology:
    """The transactional word count over sentences ``0 .. n-1``.

    ``shape`` "tuples": split emits a tuple per word, a batch bolt counts them after the shuffle
    on the word. "combine": one batch bolt splits and counts, and only its per-batch counts are
    shuffled to the committer (what ``reduceByKey`` does with its map-side combine).
    """
    spout = CorpusSpout(n, 2 * parallelism, take, zipf)
    b = TransactionalTopologyBuilder(tid, "sentences", spout, parallelism)
    if shape == "combine":
        b.set_bolt("count", SplitCount(wait_ms), parallelism).none_grouping("sentences")
    else:
        b.set_bolt("split", Split(), parallelism).none_grouping("sentences")
        b.set_bolt("count", BatchWordCount(), parallelism).fields_grouping("split", Fields("word"))
    b.set_committer_bolt("commit", CommitCounts(), parallelism).fields_grouping(
        "count", Fields("word")
    )
    return b.build_topology()


def run(
    spark: Any, n: int, args: argparse.Namespace, conf: dict[str, Any], tag: str, shape: str
) -> dict[str, Any]:
    """One transactional run, from submit to idle; its counts and per-phase seconds."""
    from statefulbolts import LocalCluster

    last_data = [0.0]

    def show(info: Any) -> None:
        if info.ok and info.tuples:
            last_data[0] = time.perf_counter()
        if not args.json:
            phases = " ".join(f"{k} {v:.2f}s" for k, v in info.phases.items())
            print(
                f"  {tag}: {info.action}({info.txid}) {info.tuples} sentences {phases}",
                file=sys.stderr,
                flush=True,
            )

    tid = f"bench-{tag}-{time.time_ns()}"
    topology = build(n, args.parallelism, args.take, tid, shape, args.zipf, args.wait_ms)
    cluster = LocalCluster(spark=spark)
    meter = CpuMeter()
    meter.start()
    started = time.perf_counter()
    handle = cluster.submit_topology(tid, conf, topology, on_transaction=show)
    handle.await_idle(3600)
    idle = time.perf_counter() - started
    cpu = meter.stop()
    # Throughput is words committed per second: until the last batch with data committed. A
    # finite input then needs one empty batch (or max.spout.pending of them) to go idle; that
    # tail is reported apart (``idle_seconds``).
    seconds = last_data[0] - started
    txs = handle.metrics()["transactions"]
    counts = handle.read_state("commit")
    handle.kill()
    phases: dict[str, float] = collections.Counter()
    for t in txs:
        phases.update(t["phases"])
    busy = [t for t in txs if t["ok"] and t["tuples"]]
    return {
        "seconds": seconds,
        "idle_seconds": round(idle, 3),
        "counts": counts,
        "batches": len(busy),
        "phase_seconds": {k: round(v, 3) for k, v in phases.items()},
        "cpu_seconds": cpu,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--words", type=int, default=1_000_000)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--take", type=int, default=6000, help="sentences per partition and batch")
    parser.add_argument("--provider", choices=["memory", "redis", "both"], default="both")
    parser.add_argument("--pending", default="1,4", help="max.spout.pending values to compare")
    parser.add_argument(
        "--shape",
        choices=["tuples", "combine", "both"],
        default="both",
        help="tuples: a tuple per word through the shuffle; combine: per-batch counts only",
    )
    parser.add_argument(
        "--vocab", type=int, default=10_000, help="Zipf vocabulary size (0: the examples' corpus)"
    )
    parser.add_argument("--seed", type=int, default=0, help="the Zipf corpus's seed")
    parser.add_argument(
        "--wait-ms",
        type=float,
        default=0.0,
        help="combine shape: each counting task waits this long per batch, as for a remote "
        "call (what pipelining can overlap on a busy machine)",
    )
    parser.add_argument(
        "--commit-location",
        choices=["auto", "driver", "executors"],
        default="auto",
        help="topology.transactional.commit.location of every run",
    )
    parser.add_argument("--repeat", type=int, default=1, help="runs per configuration; best counts")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)

    from statefulbolts.runtime import build_session

    spark = build_session(args.master, app_name="statefulbolts-bench-tx")
    sc = spark.sparkContext
    sentences = corpus_for(args.words, args.vocab, args.seed)
    n = len(sentences)
    args.zipf = (n, args.vocab, args.seed) if args.vocab else None
    expected = dict(collections.Counter(w for text in sentences for w in words(text)))
    total = sum(expected.values())
    providers = ["memory", "redis"] if args.provider == "both" else [args.provider]
    pendings = [int(p) for p in args.pending.split(",")]
    server = None
    where = {"topology.transactional.commit.location": args.commit_location}
    confs: dict[str, dict[str, Any]] = {"memory": where}
    if "redis" in providers:
        from bench._redis import start_redis

        server = start_redis()
        confs["redis"] = {
            **where,
            "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
            "topology.state.provider.config": json.dumps(
                {"jedisPoolConfig": {"host": "127.0.0.1", "port": server.port}}
            ),
        }

    warm = n * min(args.words // 5, 200_000) // max(total, 1)
    baseline(sc, sentences[:warm], args.parallelism)
    shapes = ["tuples", "combine"] if args.shape == "both" else [args.shape]
    for shape in shapes:
        run(spark, warm, args, {"topology.max.spout.pending": 2}, f"warmup-{shape}", shape)

    runs: dict[str, Any] = {}
    rounds: list[dict[str, float]] = []
    cpu_rounds: list[dict[str, dict[str, float]]] = []
    for i in range(args.repeat):
        meter = CpuMeter()
        meter.start()
        base = baseline(sc, sentences, args.parallelism)
        this_round = {"baseline": base["seconds"]}
        cpu_round = {"baseline": meter.stop()}
        _keep(runs, "baseline", {"seconds": base["seconds"], "exact": base["counts"] == expected})
        configs = [(s, p, q) for s in shapes for p in providers for q in pendings]
        for shape, provider, pending in configs if i % 2 == 0 else configs[::-1]:
            name = f"{_prefix(shape)}{provider}-pending{pending}"
            conf = {**confs[provider], "topology.max.spout.pending": pending}
            res = run(spark, n, args, conf, f"{name}-{i}", shape)
            this_round[name] = res["seconds"]
            cpu_round[name] = res["cpu_seconds"]
            _keep(
                runs,
                name,
                {
                    **{k: v for k, v in res.items() if k != "counts"},
                    "exact": res["counts"] == expected,
                },
            )
        rounds.append(this_round)
        cpu_rounds.append(cpu_round)
    if server is not None:
        server.stop()
    spark.stop()
    result = _summary(runs, rounds, total, n, args, sc)
    result["cpu"] = _cpu_summary(cpu_rounds)
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        _print(result)
    return 0 if all(r["exact"] for r in runs.values()) else 1


def _prefix(shape: str) -> str:
    """Run names: ``memory-pending1`` for the tuple-per-word shape, ``combine-...`` else."""
    return "" if shape == "tuples" else f"{shape}-"


def _keep(runs: dict[str, Any], name: str, run: dict[str, Any]) -> None:
    """Keep the fastest run of ``name``, with every run's seconds and whether all were exact."""
    best = runs.get(name)
    every = [*(best["all_seconds"] if best else []), round(run["seconds"], 3)]
    exact = run["exact"] and (best["exact"] if best else True)
    if best is None or run["seconds"] < best["seconds"]:
        best = run
    runs[name] = {**best, "all_seconds": every, "exact": exact}


def _summary(
    runs: dict[str, Any], rounds: list[dict[str, float]], total: int, n: int, args: Any, sc: Any
) -> dict[str, Any]:
    for r in runs.values():
        r["seconds"] = round(r["seconds"], 3)
        r["words_per_sec"] = round(total / r["seconds"])
    base = runs["baseline"]["words_per_sec"]
    ratios = {
        f"{name}_vs_baseline": round(r["words_per_sec"] / base, 3)
        for name, r in runs.items()
        if name != "baseline"
    }
    per_round = {
        f"{name}_vs_baseline": [round(rd["baseline"] / rd[name], 3) for rd in rounds]
        for name in runs
        if name != "baseline"
    }
    result: dict[str, Any] = {
        "words": total,
        "sentences": n,
        "parallelism": args.parallelism,
        "take_per_batch": args.take,
        "vocab": args.vocab,
        "commit_location": args.commit_location,
        "wait_ms": args.wait_ms,
        "master": sc.master,
        "runs": runs,
        "ratios": ratios,
        "ratios_per_round": per_round,
        "median_round_ratios": {k: statistics.median(v) for k, v in per_round.items()},
    }
    for shape in ("tuples", "combine"):
        pre = _prefix(shape)
        for provider in ("memory", "redis"):
            a, b = runs.get(f"{pre}{provider}-pending1"), runs.get(f"{pre}{provider}-pending4")
            if a and b:
                result[f"{pre}{provider}_pending4_vs_pending1"] = round(
                    b["words_per_sec"] / a["words_per_sec"], 3
                )
        for pending in ("1", "4"):
            m = runs.get(f"{pre}memory-pending{pending}")
            r = runs.get(f"{pre}redis-pending{pending}")
            if m and r:
                result[f"{pre}redis_vs_memory_pending{pending}"] = round(
                    r["words_per_sec"] / m["words_per_sec"], 3
                )
    return result


def _cpu_summary(cpu_rounds: list[dict[str, dict[str, float]]]) -> dict[str, Any]:
    """Per configuration: the median CPU seconds of each role, and total against baseline.

    A topology run's CPU is from its submit to idle (its trailing empty batch included);
    the baseline's is its job's.
    """
    out: dict[str, Any] = {}
    for name in cpu_rounds[0]:
        roles = sorted({role for rd in cpu_rounds for role in rd[name]})
        entry: dict[str, Any] = {
            "median_seconds": {
                role: round(statistics.median(rd[name].get(role, 0.0) for rd in cpu_rounds), 3)
                for role in roles
            }
        }
        if name != "baseline":
            entry["cpu_vs_baseline"] = [
                round(rd[name]["total"] / max(rd["baseline"]["total"], 1e-9), 3)
                for rd in cpu_rounds
            ]
        out[name] = entry
    return out


def _print(result: dict[str, Any]) -> None:
    for name, run in result["runs"].items():
        phases = " ".join(f"{k} {v:.2f}s" for k, v in run.get("phase_seconds", {}).items())
        print(
            f"{name:>16}: {run['seconds']:6.2f}s {run['words_per_sec']:>9} words/s "
            f"exact={run['exact']} {phases}"
        )
    for key, value in result.items():
        if "vs" in key and not isinstance(value, dict):
            print(f"{key}: {value}")
    for key, value in result["ratios"].items():
        print(f"{key}: {value} (rounds: {result['ratios_per_round'][key]})")
    for name, cpu in result["cpu"].items():
        roles = " ".join(f"{k} {v:.2f}" for k, v in cpu["median_seconds"].items())
        rounds = cpu.get("cpu_vs_baseline")
        against = f", total vs baseline {rounds}" if rounds else ""
        print(f"CPU s {name}: {roles}{against}")


if __name__ == "__main__":
    sys.exit(main())
