"""Sinks: Kafka -> word count -> Kafka exactly once, against at-least-once and Quix Streams.

    python bench/sinks.py --json > out.json          # 1M words, 3 rounds, then the latency sweep
    python bench/sinks.py --rounds 5 --no-latency
    python bench/sinks.py --provider redis           # the state in a redis-server of its own
    python bench/sinks.py --quick --json             # the smoke test's run: its shape, no figures
    python bench/sinks.py --replot docs/bench/sinks.json    # redraw the latency plot, run nothing

The broker is ``bench/kafka.py``'s (Tansu on a free 127.0.0.1 port, or ``--bootstrap``), and so
are the input, the topology and the peer: progress lines go to stderr, ``--json`` prints one
document on stdout, a wrong count makes the exit status 1.

**Throughput.** ``examples/zipf.py``'s corpus (``--words`` words over a ``--vocab`` Zipf
vocabulary, 10-word sentences) is written once to a topic of ``--partitions`` partitions. Each
round runs, in alternating order, three systems over it, each to a fresh output topic of
``--parallelism`` partitions, every word's new count a record (key the word, value the count
as JSON), from the start to the last record committed:

- ``exactly_once``: ``bench/kafka.py``'s topology (``KafkaSpout`` -> split -> count emitting
  ``(word, count)``, 2 tasks each, ``--provider`` state, ``--interval`` checkpoints, on a warm
  ``local[2]`` session) whose sink is ``ExactlyOnceSinkBolt(KafkaSink)``: staged in the state
  at PREPARE, published at COMMIT, one Kafka transaction per sink task and commit;
- ``at_least_once``: the same, the sink ``AtLeastOnceSinkBolt(KafkaSink)``: written by an
  idempotent producer as the PREPARE runs, nothing staged;
- ``quix``: Quix Streams (``bench/_kafka_peers.py quix --out-topic``, in ``--peers-python``):
  ``processing_guarantee="exactly-once"``, RocksDB state and changelog, commit interval
  ``--interval``, ``group_by`` the word, a stateful count, ``to_topic`` the output topic.

Both of our sinks write partitions by task (``partitioning="task"``: the test broker loses
commits when two producers' transactions share a partition, docs/sinks.md); Quix by key. Either
way each word's records are in one partition, in order. Every run's output is read back by a
``read_committed`` consumer to the end of each partition: the last count of every word must be
its plain count over the input (``exact``; also reported: whether every word's counts run
1, 2, ... n with none repeated or missing). A run that is not exact counts in no ratio. The
figures are ratios within a round: ``exactly_once_vs_at_least_once`` (the at-least-once run's
seconds over the exactly-once run's: the throughput kept; goal 0.8 or more) and
``exactly_once_vs_quix`` (goal 3 or more), with ``..._after_start`` leaving Quix's start-up
(before its first counted word) out. Each round records the 1-minute load average.

Each of our runs also records the CPU seconds its processes spent (``cpu_s``, ``bench/_cpu.py``:
the driver, Spark's JVM, the Python workers, the broker, and a Redis of its own), and the round
``cpu_exactly_once_vs_at_least_once``: at-least-once's CPU seconds over exactly-once's, the
work exactly-once adds for the same input. It moves much less with the machine's load than the
wall-clock ratio does: on 2 cores, where both runs keep both cores busy, the two ratios agree.

**Visible latency.** For each offered load (``--rates``, records per second), checkpoint
interval (``--intervals``) and sink, a fresh input and output topic and a running topology:
``KafkaSpout`` -> split -> count -> sink as above, with each record's send stamp carried from
its input header to the header of its count's update (``StampedSplit``, ``StampedCount``,
``stamped_record``). ``bench/_sink_probe.py``, in a process of its own, writes one Zipf word a
record at the offered load for ``--latency-seconds`` and reads the output topic
``read_committed``: a record's latency is from its send to its count's update being returned
to that reader. Sustained: the producer kept to 0.95 of the load, updates became visible at 0.9
of it or more, and the median latency of the last third of the records is under 1.5 times the
first third's. Once the probe ends (every record seen, or 30 s after the last was sent), the
topology is given ``--drain`` seconds to read what is left, and its output is then checked as
above (not at all when it is still behind: ``drained`` false). The plot: the latency's
distribution per load, interval and sink (``docs/bench/sinks-latency.png``).
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import _state  # noqa: E402
from bench._cpu import CpuMeter  # noqa: E402
from bench._sink_probe import STAMP_HEADER  # noqa: E402
from bench.kafka import Broker, peer, say, split, wordcount_topology  # noqa: E402
from bench.wordcount import BatchSplit, BatchWordCount  # noqa: E402
from examples._sink_targets import read_topic  # noqa: E402
from examples.corpus import words  # noqa: E402
from examples.kafka_wordcount import SENTENCES  # noqa: E402
from examples.zipf import zipf_sentences  # noqa: E402
from statefulbolts import Fields, LocalCluster, StormTopology, TopologyBuilder  # noqa: E402
from statefulbolts.connectors.kafka import (  # noqa: E402
    KafkaRecord,
    KafkaSink,
    KafkaSpout,
    ProducerRecord,
    SimpleRecordTranslator,
)
from statefulbolts.connectors.sinks import AtLeastOnceSinkBolt, ExactlyOnceSinkBolt  # noqa: E402

SINKS = ("exactly_once", "at_least_once")
SINK_COMPONENT = "sink"  # wordcount_topology's name for it
GOALS = {"exactly_once_vs_at_least_once": 0.8, "exactly_once_vs_quix": 3.0}


# --------------------------------------------------------------------------- the sinks
def sink_bolt(kind: str, topic: str, bootstrap: str, mapper: Any = None) -> Any:
    """A sink bolt of ``kind`` writing ``(word, count)`` (or ``mapper``'s records) to ``topic``."""
    if mapper is None:
        sink = KafkaSink(
            topic, key="word", value="count", value_serializer="json",
            bootstrap_servers=bootstrap, partitioning="task",
        )  # fmt: skip
    else:
        sink = KafkaSink(
            topic, mapper=mapper, value_serializer="json", bootstrap_servers=bootstrap,
            partitioning="task",
        )  # fmt: skip
    return ExactlyOnceSinkBolt(sink) if kind == "exactly_once" else AtLeastOnceSinkBolt(sink)


def check_output(bootstrap: str, topic: str, expected: Mapping[str, int]) -> dict[str, Any]:
    """Read ``topic`` back ``read_committed``: is each word's last count its plain count?"""
    try:
        messages = read_topic(bootstrap, topic, timeout_s=300)
    except RuntimeError as exc:
        return {"exact": False, "every_update_once": False, "error": str(exc)}
    last: dict[str, int] = {}
    out_of_step: set[str] = set()
    for m in messages:
        word = m.key().decode()
        count = json.loads(m.value())
        if count != last.get(word, 0) + 1:
            out_of_step.add(word)
        last[word] = count
    wrong = sum(1 for w in expected.keys() | last.keys() if last.get(w) != expected.get(w))
    return {
        "exact": wrong == 0,
        "every_update_once": wrong == 0 and not out_of_step,
        "output_records": len(messages),
        "output_words": len(last),
        "wrong_words": wrong,
    }


def job_figures(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """A run's PREPAREs and COMMITs (how many, median seconds: a job, or the driver's COMMIT)
    and its sink's publish steps (or at-least-once writes): how many, mean seconds in Kafka.
    """
    sink = metrics["components"].get(SINK_COMPONENT, {})
    steps = int(sink.get("metric.sink_publishes", 0))
    in_kafka = float(sink.get("metric.sink_publish_seconds", 0.0))
    out: dict[str, Any] = {
        "publish_steps": steps,
        "publish_s_mean": round(in_kafka / steps, 4) if steps else None,
    }
    transactions = metrics["transactions"]
    for action in ("PREPARE", "COMMIT"):
        seconds = [t["seconds"] for t in transactions if t["action"] == action and t["ok"]]
        out[f"{action.lower()}s"] = len(seconds)
        out[f"{action.lower()}_s_median"] = (
            round(statistics.median(seconds), 3) if seconds else None
        )
    return out


def delete_topics(bootstrap: str, topics: Sequence[str]) -> None:
    """Drop a run's topics once read: the broker keeps every record in memory."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics(list(topics), operation_timeout=30).values():
        with contextlib.suppress(Exception):  # a topic left behind costs memory only
            future.result(30)


def new_name(kind: str) -> str:
    return f"sbench-{kind.replace('_', '-')}-{time.time_ns()}"


@contextlib.contextmanager
def running(
    cluster: Any, name: str, conf: Mapping[str, Any], topology: StormTopology, parallelism: int
) -> Iterator[Any]:
    """Submit; kill and drop the state (counter and sink) after."""
    handle = cluster.submit_topology(name, dict(conf), topology)
    try:
        yield handle
    finally:
        handle.kill()
        _state.drop(conf, name, parallelism, (_state.COUNTER, SINK_COMPONENT))


# --------------------------------------------------------------------------- throughput
def ours(
    cluster: Any,
    kind: str,
    args: argparse.Namespace,
    broker: Broker,
    topic: str,
    expected: Mapping[str, int],
) -> dict[str, Any]:
    """One run of the word count with sink ``kind``, submit to idle; its output checked."""
    name = new_name(kind)
    out = f"{name}-out"
    broker.create(out, args.parallelism)
    conf = {**args.state_conf, "topology.state.checkpoint.interval.ms": args.interval}
    spout = KafkaSpout(topic, bootstrap_servers=broker.bootstrap, translator=SENTENCES)
    sink = sink_bolt(kind, out, broker.bootstrap)
    topology = wordcount_topology(spout, args.parallelism, sink)
    meter = CpuMeter()
    meter.start()
    started = time.perf_counter()
    with running(cluster, name, conf, topology, args.parallelism) as handle:
        handle.await_idle(3600)
        seconds = time.perf_counter() - started
        cpu = meter.stop()
        metrics = handle.metrics()
    run = {"seconds": seconds, "cpu_s": cpu, **job_figures(metrics)}
    run |= check_output(broker.bootstrap, out, expected)
    delete_topics(broker.bootstrap, [out])
    return run


def quix(
    args: argparse.Namespace, broker: Broker, topic: str, expected: Mapping[str, int]
) -> dict[str, Any]:
    """One run of Quix Streams writing the counts to a fresh topic; its output checked.

    The topics it made for itself (changelog, repartition) go with its output topic, so each
    run, ours or its, starts from the same broker.
    """
    out = f"{new_name('quix')}-out"
    broker.create(out, args.parallelism)
    before = set(topic_names(broker.bootstrap))
    run = peer(args, "quix", broker.bootstrap, topic, ["--out-topic", out])
    if run.get("ok"):
        run["state_exact"] = run.pop("exact")  # its own counts, checked in its process
        run |= check_output(broker.bootstrap, out, expected)
    made = [t for t in topic_names(broker.bootstrap) if t not in before and t != topic]
    delete_topics(broker.bootstrap, [out, *made])
    return run


def topic_names(bootstrap: str) -> list[str]:
    """The broker's topics but its own (``__consumer_offsets``, ...)."""
    from confluent_kafka.admin import AdminClient

    listed = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=30).topics
    return [t for t in listed if not t.startswith("__")]


def throughput(args: argparse.Namespace, broker: Broker, cluster: Any) -> dict[str, Any]:
    corpus = zipf_sentences(-(-args.words // 10), args.vocab, args.seed)
    expected = dict(collections.Counter(w for text in corpus for w in words(text)))
    total = sum(expected.values())
    topic = f"sbench-words-{time.time_ns()}"
    wrote = broker.write(topic, split(corpus, args.partitions))
    say(f"wrote {len(corpus):,} sentences ({total:,} words) to {topic} in {wrote:.1f}s")
    systems: dict[str, Any] = {
        kind: lambda k=kind: ours(cluster, k, args, broker, topic, expected) for kind in SINKS
    }
    if args.peers_python:
        systems["quix"] = lambda: quix(args, broker, topic, expected)
    if not args.quick:
        say("warming up: one run of each sink")
        for kind in SINKS:
            systems[kind]()
    order = list(systems)
    rounds: list[dict[str, Any]] = []
    after_peer = False
    for r in range(args.rounds):
        row: dict[str, Any] = {"round": r + 1, "load_avg_1m": round(os.getloadavg()[0], 2)}
        for name in order if r % 2 == 0 else order[::-1]:
            # Quix's run outlasts Spark's idle Python workers; the sink run after it would pay
            # fresh workers and producers, the other not (``bench/kafka.py``, warm workers).
            if name in SINKS and after_peer:
                say("warming up again after Quix: one run of each sink")
                for kind in SINKS:
                    systems[kind]()
            after_peer = name not in SINKS
            run = systems[name]()
            if run.get("ok", True):
                run["words_per_sec"] = round(total / run["seconds"])
                run["seconds"] = round(run["seconds"], 3)
                state = (
                    f"{run['seconds']:.2f}s {run['words_per_sec']:,} words/s, output: "
                    f"{run.get('output_records', 0):,} records exact={run['exact']}"
                )
            else:
                state = f"FAILED: {run.get('error')}"
            row[name] = run
            say(f"[round {r + 1}/{args.rounds}] {name:<13} {state}")
        row["ratios"] = round_ratios(row)
        say(f"[round {r + 1}/{args.rounds}] ratios {row['ratios']}")
        rounds.append(row)
    wrong = [
        f"round {row['round']} {n}"
        for row in rounds
        for n in order
        if row[n].get("ok", True) and not row[n]["exact"]
    ]
    failed = {n: row[n].get("error") for row in rounds for n in order if not row[n].get("ok", True)}
    delete_topics(broker.bootstrap, [topic])
    return {
        "words": total,
        "sentences": len(corpus),
        "vocab": len(expected),
        "partitions": args.partitions,
        "parallelism": args.parallelism,
        "interval_ms": args.interval,
        "topic_write_s": round(wrote, 2),
        "rounds": rounds,
        "ratios_median": medians(rounds),
        "goals": goals(rounds),
        "peers_failed": failed,
        "wrong": wrong,
    }


def round_ratios(row: Mapping[str, Any]) -> dict[str, float]:
    """Exactly-once's throughput over each other exact run's in the round (seconds inverted)."""
    eo = row["exactly_once"]
    if not eo["exact"]:
        return {}
    ratios: dict[str, float] = {}
    for name in ("at_least_once", "quix"):
        other = row.get(name)
        if other is None or not other.get("ok", True) or not other["exact"]:
            continue
        ratios[f"exactly_once_vs_{name}"] = round(other["seconds"] / eo["seconds"], 3)
        if "cpu_s" in other and "cpu_s" in eo:  # ours only: a peer runs in its own process
            ratios[f"cpu_exactly_once_vs_{name}"] = round(
                other["cpu_s"]["total"] / eo["cpu_s"]["total"], 3
            )
        if other.get("first_s") is not None:
            after = other["seconds"] - other["first_s"]
            ratios[f"exactly_once_vs_{name}_after_start"] = round(after / eo["seconds"], 3)
    return ratios


def medians(rounds: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    keys = sorted({k for r in rounds for k in r["ratios"]})
    return {k: statistics.median(r["ratios"][k] for r in rounds if k in r["ratios"]) for k in keys}


def goals(rounds: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Each goal: its target, the rounds that met it, the median."""
    out: dict[str, Any] = {}
    for key, target in GOALS.items():
        got = [r["ratios"][key] for r in rounds if key in r["ratios"]]
        out[key] = {
            "target": target,
            "rounds": len(got),
            "rounds_met": sum(1 for g in got if g >= target),
            "median": statistics.median(got) if got else None,
            "met": bool(got) and statistics.median(got) >= target,
        }
    return out


# --------------------------------------------------------------------------- latency
def stamped_sentence(record: KafkaRecord) -> list[Any]:
    """The tuple of a stamped record: its sentence and its ``bench.sent`` header."""
    sent = next((v.decode() for n, v in record.headers if n == STAMP_HEADER and v), "")
    return [record.value, sent]


STAMPED = SimpleRecordTranslator(stamped_sentence, ["sentence", "sent"])


class StampedSplit(BatchSplit):
    """The split, each word carrying its sentence's stamp."""

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        """Emit ``(word, stamp)`` for each word."""
        for word in words(tuple.get_value(0)):
            collector.emit([word, tuple.get_value(1)])

    def execute_batch(self, batch: Any, collector: Any) -> None:
        """Split every sentence of the batch; each word anchored to it, with its stamp."""
        column: list[str] = []
        stamps: list[str] = []
        rows: list[int] = []
        for row, (text, sent) in enumerate(zip(batch.column(0), batch.column(1), strict=True)):
            split_ = words(text)
            column += split_
            stamps += [sent] * len(split_)
            rows += [row] * len(split_)
        collector.emit_columns([column, stamps], rows)

    def declare_output_fields(self, declarer: Any) -> None:
        """``word``, ``sent``."""
        declarer.declare(Fields("word", "sent"))


class StampedCount(BatchWordCount):
    """The counter emitting ``(word, count, stamp)`` after each update."""

    def execute(self, tuple: Any) -> None:  # noqa: A002
        """Add one to the word's count; emit it with the stamp, anchored; ack."""
        word = tuple.get_value(0)
        count = self.counts.get(word, 0) + 1
        self.counts.put(word, count)
        self.collector.emit([word, count, tuple.get_value(1)], anchors=tuple)
        self.collector.ack(tuple)

    def execute_batch(self, batch: Any, collector: Any) -> None:
        """Count the batch's words; emit each new count with its stamp, in one call."""
        collector.emit_columns([batch.column(0), self.counted(batch), batch.column(1)])

    def declare_output_fields(self, declarer: Any) -> None:
        """``word``, ``count``, ``sent``."""
        declarer.declare(Fields("word", "count", "sent"))


def stamped_record(tuple_: Any) -> ProducerRecord:
    """The update's record: key the word, value the count, the input's stamp as a header."""
    word, count, sent = tuple_.values
    return ProducerRecord(count, key=word, headers=[(STAMP_HEADER, sent)])


def stamped_topology(spout: Any, parallelism: int, sink: Any) -> StormTopology:
    """``wordcount_topology``'s shape with the stamped bolts."""
    builder = TopologyBuilder()
    builder.set_spout("sentences", spout, parallelism)
    builder.set_bolt("split", StampedSplit(), parallelism).shuffle_grouping("sentences")
    builder.set_bolt(_state.COUNTER, StampedCount(), parallelism).fields_grouping(
        "split", Fields("word")
    )
    builder.set_bolt(SINK_COMPONENT, sink, parallelism).local_or_shuffle_grouping(_state.COUNTER)
    return builder.create_topology()


def latency_run(
    cluster: Any, kind: str, rate: int, interval: int, args: argparse.Namespace, broker: Broker
) -> dict[str, Any]:
    """One probe run against a running topology with sink ``kind``; its output checked."""
    from bench._sink_probe import probe_words

    name = new_name(f"lat-{kind}")
    source, out = f"{name}-in", f"{name}-out"
    broker.create(source, args.partitions)
    broker.create(out, args.parallelism)
    conf = {**args.state_conf, "topology.state.checkpoint.interval.ms": interval}
    spout = KafkaSpout(source, bootstrap_servers=broker.bootstrap, translator=STAMPED)
    topology = stamped_topology(
        spout, args.parallelism, sink_bolt(kind, out, broker.bootstrap, stamped_record)
    )
    flags = ["--bootstrap", broker.bootstrap, "--in-topic", source, "--out-topic", out]
    flags += ["--partitions", str(args.partitions), "--rate", str(rate)]
    flags += ["--seconds", str(args.latency_seconds), "--warmup", str(args.warmup)]
    flags += ["--vocab", str(args.vocab), "--seed", str(args.seed), "--drain", "30"]
    load = os.getloadavg()[0]
    with running(cluster, name, conf, topology, args.parallelism) as handle:
        done = subprocess.run(
            [sys.executable, str(ROOT / "bench" / "_sink_probe.py"), *flags],
            capture_output=True,
            text=True,
            timeout=args.latency_seconds * 4 + 300,
            check=False,
        )
        # A load it did not keep up with leaves a backlog: the output is checked once the
        # topology has read it all, or not at all.
        waited = time.monotonic()
        drained = handle.wait_idle(args.drain)
        drain_s = time.monotonic() - waited
        metrics = handle.metrics()
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    run: dict[str, Any] = {"sink": kind, "rate": rate, "interval_ms": interval}
    run["load_avg_1m"] = [round(load, 2), round(os.getloadavg()[0], 2)]
    if not lines:
        run |= {"ok": False, "error": f"probe exit {done.returncode}: {done.stderr[-1500:]}"}
    else:
        run |= json.loads(lines[-1])
    run |= job_figures(metrics)
    probe = argparse.Namespace(
        warmup=args.warmup, rate=rate, seconds=args.latency_seconds, vocab=args.vocab,
        seed=args.seed,
    )  # fmt: skip
    run |= {"drained": drained, "drain_s": round(drain_s, 1)}
    if drained:
        run |= check_output(broker.bootstrap, out, collections.Counter(probe_words(probe)))
    else:
        run |= {"exact": None, "error": f"still behind {args.drain:g} s after the probe"}
    run["sustained"] = sustained(run)
    batch = run.get("batch_records")
    if batch and run.get("paced_records"):
        # The test broker's short listed end (``bench/_sink_probe.py``): at most a partition's
        # last batch but its first record waits for the next PREPARE, at each PREPARE.
        held = args.partitions * max(batch - 1, 0) * run["prepares"] / run["paced_records"]
        run["held_back_share_max"] = round(min(1.0, held), 4)
    delete_topics(broker.bootstrap, [source, out])
    return run


def sustained(run: Mapping[str, Any]) -> bool:
    """Kept the load: sent at 0.95 of it, visible at 0.9, latency not growing (docstring)."""
    if not run.get("ok") or not run.get("all_seen"):
        return False
    rate = run["offered_per_sec"]
    growth = run["p50_last_third_ms"] / max(run["p50_first_third_ms"], 1.0)
    return (
        run["sent_per_sec"] >= 0.95 * rate
        and (run.get("visible_per_sec") or 0) >= 0.9 * rate
        and growth < 1.5
    )


def latency(args: argparse.Namespace, broker: Broker, cluster: Any) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    plan = [(rate, interval) for rate in args.rates for interval in args.intervals]
    for n, (rate, interval) in enumerate(plan):
        for kind in SINKS if n % 2 == 0 else SINKS[::-1]:
            run = latency_run(cluster, kind, rate, interval, args, broker)
            runs.append(run)
            if run.get("ok") and "latency_ms" in run:
                lat = run["latency_ms"]
                state = (
                    f"p50 {lat['p50']:.0f} ms p99 {lat['p99']:.0f} ms, sent "
                    f"{run['sent_per_sec']:,}/s visible {run.get('visible_per_sec') or 0:,}/s, "
                    f"sustained={run['sustained']} exact={run['exact']}"
                )
            else:
                state = f"FAILED: {run.get('error')}"
            say(f"[latency] {rate:>6}/s interval {interval:>5} ms {kind:<13} {state}")
    wrong = [
        f"latency {r['sink']} {r['rate']}/s {r['interval_ms']} ms"
        for r in runs
        if r.get("exact") is False
    ]
    return {
        "seconds": args.latency_seconds,
        "warmup_records": args.warmup,
        "partitions": args.partitions,
        "parallelism": args.parallelism,
        "runs": runs,
        "wrong": wrong,
    }


def plot(result: Mapping[str, Any], path: Path) -> None:
    """The latency's distribution, a panel per offered load, a line per interval and sink."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FixedLocator, NullFormatter, NullLocator

    runs = [r for r in result["latency"]["runs"] if r.get("quantiles_ms")]
    runs.sort(key=lambda r: (r["sink"] != "exactly_once", r["interval_ms"]))
    rates = sorted({r["rate"] for r in runs})
    intervals = sorted({r["interval_ms"] for r in runs})
    colors = dict(zip(intervals, ["tab:blue", "tab:orange", "tab:green", "tab:red"], strict=False))
    styles = {"exactly_once": "-", "at_least_once": ":"}
    fig, axes = plt.subplots(1, len(rates), figsize=(6 * len(rates), 5.4), squeeze=False)
    for ax, rate in zip(axes[0], rates, strict=True):
        for run in (r for r in runs if r["rate"] == rate):
            q = run["quantiles_ms"]
            share = [i / (len(q) - 1) for i in range(len(q))]
            lat = run["latency_ms"]
            label = (
                f"{run['sink'].replace('_', '-')}, {run['interval_ms']} ms: p50 "
                f"{lat['p50']:.0f}, p99 {lat['p99']:.0f}"
            ) + ("" if run["sustained"] else " (NOT kept up)")
            ax.plot(q, share, styles[run["sink"]], color=colors[run["interval_ms"]], label=label)
        ax.set_xscale("log")
        ticks = [50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000]
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_major_formatter(lambda v, _: f"{v:,.0f}")
        ax.xaxis.set_minor_locator(NullLocator())
        ax.xaxis.set_minor_formatter(NullFormatter())
        ax.set_xlabel("input record sent -> its count visible to a read_committed reader (ms)")
        ax.set_ylabel("share of records")
        ax.set_title(f"{rate:,} records/s offered", fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=1)
    loads = [x for r in runs for x in r["load_avg_1m"]]
    fig.suptitle(
        "Visible-output latency, Kafka -> word count -> Kafka, by checkpoint interval and sink "
        f"(load {min(loads):g}-{max(loads):g} on 2 cores)",
        fontsize=10,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


# --------------------------------------------------------------------------- main
def summary(result: Mapping[str, Any]) -> None:
    tp = result.get("throughput")
    if tp:
        print(f"throughput, {tp['words']:,} words over a {tp['vocab']:,}-word vocabulary:")
        for key, goal in tp["goals"].items():
            verdict = "met" if goal["met"] else "NOT met"
            print(
                f"  {key}: median {goal['median']} (goal {goal['target']}: {verdict}; "
                f"{goal['rounds_met']} of {goal['rounds']} rounds)"
            )
        for key, value in tp["ratios_median"].items():
            if key not in tp["goals"]:
                print(f"  {key}: median {value}")
        for name, error in tp["peers_failed"].items():
            print(f"  {name} failed: {error}")
    for run in result.get("latency", {}).get("runs", []):
        lat = run.get("latency_ms", {})
        print(
            f"latency {run['sink']:<13} {run['rate']:>6}/s interval {run['interval_ms']:>5} ms: "
            f"p50 {lat.get('p50')} ms, p99 {lat.get('p99')} ms, visible "
            f"{run.get('visible_per_sec')}/s, sustained={run.get('sustained')}"
        )


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap", help="a broker to use instead of starting Tansu")
    parser.add_argument("--words", type=int, default=1_000_000)
    parser.add_argument("--vocab", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--partitions", type=int, default=4, help="of the input topics")
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--provider", choices=["memory", "redis"], default="memory")
    parser.add_argument("--interval", type=int, default=1000, help="checkpoint / commit, ms")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--peers-python",
        default="/work/peers-venv/bin/python",
        help="an interpreter with quixstreams ('' for no Quix run)",
    )
    parser.add_argument("--peer-timeout", type=float, default=1800)
    parser.add_argument("--throughput", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--latency", action=argparse.BooleanOptionalAction, default=True)
    parser.add_argument("--rates", type=_ints, default=[1000, 10000], help="records/s offered")
    parser.add_argument("--intervals", type=_ints, default=[100, 1000], help="checkpoint, ms")
    parser.add_argument("--latency-seconds", type=float, default=30)
    parser.add_argument("--warmup", type=int, default=200, help="records before the paced ones")
    parser.add_argument(
        "--drain", type=float, default=300, help="seconds to wait for a backlog, then no check"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="seconds, for the smoke test: 5k words, 1 round, no warm-up and no Quix; "
        "200 records/s for 1 s at a 200 ms interval",
    )
    parser.add_argument("--plots", default=str(ROOT / "docs" / "bench"), help="'' for none")
    parser.add_argument("--replot", help="a JSON this script wrote: draw it, run nothing")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = parser.parse_args(argv)
    if args.quick:
        args.words, args.rounds, args.peers_python = 5_000, 1, ""
        args.rates, args.intervals, args.latency_seconds, args.warmup = [200], [200], 1, 20
        if "--plots" not in (argv if argv is not None else sys.argv):
            args.plots = ""
    return args


def measure(args: argparse.Namespace) -> dict[str, Any]:
    from statefulbolts.runtime import build_session

    workdir = Path(tempfile.mkdtemp(prefix="sinks-bench-"))
    broker = Broker(args.bootstrap, workdir)
    redis = None
    started = time.perf_counter()
    result: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "provider": args.provider,
        "quick": args.quick,
    }
    try:
        args.state_conf = {}
        if args.provider == "redis":
            from bench._redis import redis_conf, start_redis

            redis = start_redis()
            args.state_conf = redis_conf(redis.port)
        spark = build_session(args.master, app_name="statefulbolts-bench-sinks")
        try:
            cluster = LocalCluster(spark=spark)
            if args.throughput:
                result["throughput"] = throughput(args, broker, cluster)
            if args.latency:
                result["latency"] = latency(args, broker, cluster)
        finally:
            spark.stop()
    finally:
        if redis is not None:
            redis.stop()
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    result["bench_s"] = round(time.perf_counter() - started, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    result = json.loads(Path(args.replot).read_text()) if args.replot else measure(args)
    if args.plots and result.get("latency", {}).get("runs"):
        folder = Path(args.plots)
        try:
            plot(result, folder / "sinks-latency.png")
            say(f"plot: {folder / 'sinks-latency.png'}")
        except ImportError:
            say("no plot: matplotlib is not installed (pip install -e '.[bench]')")
        if not args.replot:
            (folder / "sinks.json").write_text(json.dumps(result, indent=2) + "\n")
    wrong = result.get("throughput", {}).get("wrong", []) + result.get("latency", {}).get(
        "wrong", []
    )
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        summary(result)
    if wrong:
        say(f"WRONG output: {wrong}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
