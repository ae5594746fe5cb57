"""Kafka to Kafka, exactly once: sentences in, each transaction's changed word counts out.

``sentences`` (a ``KafkaSpout`` of the input topic) -> ``split`` -> ``count`` (counts in
``KeyValueState``, Redis with ``--redis-url`` or a redis-server of its own) -> ``publish`` (an
``ExactlyOnceSinkBolt``). ``count`` emits, once per transaction, each word whose count
changed: ``(word, count, delta)``, the delta being what the transaction added. The sink
publishes them when the transaction commits, so what it writes is a change log of the counts
in which, for every word:

- the counts only go up, and each update's count is the previous one plus its delta (a
  missing update breaks the chain, a duplicated one repeats a count);
- the last count is the plain count of the word over the input topic.

``judge`` checks exactly that, on the change log read back from the sink's target.

The sink is a choice (``--sink``, ``examples._sink_targets``): ``kafka`` (the default) writes
to an output topic with ``KafkaSink``, keyed by word, value ``{"count": c, "delta": d}``, read
back as a ``read_committed`` consumer; ``postgres`` inserts each update as a row of a
change-log table with ``PostgresSink`` (``word``, ``count``, ``delta`` and its ``txid``),
read back in the order the rows were written.

Run it against a broker (and a database) you started::

    python -m examples.kafka_to_kafka --bootstrap 127.0.0.1:9092 --load 400
    python -m examples.kafka_to_kafka --bootstrap 127.0.0.1:9092 --sink postgres \\
        --dsn postgresql://postgres@127.0.0.1:5432/postgres

It makes the topics if they are missing (two partitions each; ``--in-topic`` and
``--out-topic`` name them) and the change-log table (``--table``), writes ``--load`` sentences,
runs the topology until it is idle, and prints the verdict (exit status 1 if it is not exact).
``examples.kafka_to_kafka_crash`` kills the driver at every point of the protocol and checks
the same verdict.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from statefulbolts import Fields, LocalCluster, StatefulBolt, StormTopology, TopologyBuilder
from statefulbolts.connectors.kafka import KafkaSink, KafkaSpout
from statefulbolts.connectors.sinks import ExactlyOnceSinkBolt, Sink

from ._sink_targets import TARGETS, ChangeLog, SinkTarget, target_named, update_record
from .kafka_wordcount import SENTENCES, load
from .wordcount import SplitSentence, expected_counts

PARALLELISM = 2


class ChangedCounts(StatefulBolt):
    """Counts words; at each PREPARE emits ``(word, count, delta)`` for every word it changed.

    The emit is anchored to every tuple that changed the word in the transaction (their acks
    are still held then), so the update is part of their tuple trees.
    """

    def prepare(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        """Keep the collector."""
        self.collector = collector
        self.changed: dict[str, list[Any]] = {}  # word -> [count, delta, anchors]

    def init_state(self, state: Any) -> None:
        """The counts, restored to the last commit."""
        self.counts = state

    def execute(self, tuple: Any) -> None:  # noqa: A002
        """Add one to the word's count; remember the change."""
        word = tuple.get_value(0)
        count = self.counts.get(word, 0) + 1
        self.counts.put(word, count)
        change = self.changed.get(word)
        if change is None:
            self.changed[word] = [count, 1, [tuple]]
        else:
            change[0], change[1] = count, change[1] + 1
            change[2].append(tuple)
        self.collector.ack(tuple)

    def pre_prepare(self, txid: int) -> None:
        """The transaction's changes, one tuple per word, before the state prepares."""
        for word, (count, delta, anchors) in sorted(self.changed.items()):
            self.collector.emit([word, count, delta], anchors=anchors)
        self.changed = {}

    def pre_rollback(self) -> None:
        """Forget the changes of a transaction that will not commit."""
        self.changed = {}

    def declare_output_fields(self, declarer: Any) -> None:
        """``word``, ``count``, ``delta``."""
        declarer.declare(Fields("word", "count", "delta"))


def build(
    in_topic: str | None = None,
    out_topic: str | None = None,
    bootstrap: str | None = None,
    parallelism: int = PARALLELISM,
    partitioning: str | None = None,
    sink: Sink | None = None,
) -> StormTopology:
    """``sentences`` -> ``split`` -> ``count`` -> ``publish`` (see the module docstring).

    ``sink``: what ``publish`` writes with (a target's, ``examples._sink_targets``); else a
    ``KafkaSink`` of ``out_topic``. Without the topics and brokers, the spout and the Kafka
    sink read ``kafka.topics``, ``sink.kafka.topic`` and ``kafka.bootstrap.servers`` from the
    config, and ``sink.kafka.partitioning`` without ``partitioning``.
    """
    spout = KafkaSpout(in_topic, bootstrap_servers=bootstrap, translator=SENTENCES)
    if sink is None:
        sink = KafkaSink(
            out_topic,
            mapper=update_record,
            value_serializer="json",
            bootstrap_servers=bootstrap,
            partitioning=partitioning,
            txid_headers=True,  # the verdict tells a failed attempt's records apart by them
        )
    builder = TopologyBuilder()
    builder.set_spout("sentences", spout, parallelism)
    builder.set_bolt("split", SplitSentence(), parallelism).shuffle_grouping("sentences")
    builder.set_bolt("count", ChangedCounts(), parallelism).fields_grouping("split", Fields("word"))
    # Grouped by word: one lane publishes all of a word's updates, in order.
    builder.set_bolt("publish", ExactlyOnceSinkBolt(sink), parallelism).fields_grouping(
        "count", Fields("word")
    )
    return builder.create_topology()


def topology() -> StormTopology:
    """For ``statefulbolts run``: publishing to Kafka, topics and brokers from the config."""
    return build()


# ------------------------------------------------------------------ the verdict
@dataclass
class Verdict:
    """What ``judge`` found in the change log (see the module docstring)."""

    exact: bool = False
    words: int = 0
    updates: int = 0
    aborted_records: int = 0  # records of failed publishes the target showed, told apart
    aborted_attempts: int = 0
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict (the first 20 problems)."""
        return {**self.__dict__, "problems": self.problems[:20]}


def judge(log: ChangeLog, expected: Mapping[str, int]) -> Verdict:
    """Check a change log against ``expected`` counts (the module docstring)."""
    verdict = Verdict(
        aborted_records=log.aborted_records,
        aborted_attempts=log.aborted_attempts,
        problems=list(log.problems),
    )
    chains: dict[str, list[tuple[int, int, int]]] = collections.defaultdict(list)
    for update in log.updates:
        chains[update.word].append((update.count, update.delta, update.txid))
    verdict.updates = len(log.updates)
    verdict.words = len(chains)
    for word in sorted(set(chains) | set(expected)):
        previous, last_txid = 0, -1
        for count, delta, txid in chains.get(word, []):
            if delta < 1 or count != previous + delta:
                verdict.problems.append(
                    f"{word!r}: count {count} (delta {delta}) after {previous}: an update is "
                    f"{'repeated' if count <= previous else 'missing'}"
                )
            if txid <= last_txid:
                verdict.problems.append(f"{word!r}: txid {txid} after txid {last_txid}")
            previous, last_txid = count, txid
        want = expected.get(word, 0)
        if previous != want:
            verdict.problems.append(
                f"{word!r}: last published count {previous}, plain count {want}"
            )
    verdict.exact = not verdict.problems
    return verdict


def verify(target: SinkTarget, expected: Mapping[str, int]) -> Verdict:
    """The verdict on what ``target`` holds."""
    return judge(target.read_log(), expected)


def ensure_topics(bootstrap: str, topics: Sequence[str], partitions: int = 2) -> list[str]:
    """Make each topic of ``topics`` that does not exist; the ones made."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    existing = admin.list_topics(timeout=30).topics
    missing = [t for t in topics if t not in existing]
    for future in admin.create_topics([NewTopic(t, partitions, 1) for t in missing]).values():
        future.result(30)
    deadline = time.monotonic() + 30
    while missing and time.monotonic() < deadline:
        listed = admin.list_topics(timeout=10).topics
        if all(t in listed and len(listed[t].partitions) == partitions for t in missing):
            break
        time.sleep(0.05)
    return missing


# ------------------------------------------------------------------ the demo
def add_sink_arguments(parser: argparse.ArgumentParser) -> None:
    """``--sink`` and every target's own options (``examples._sink_targets``)."""
    parser.add_argument(
        "--sink",
        choices=sorted(TARGETS),
        default="kafka",
        help="where the changed counts are published (default kafka)",
    )
    for target in TARGETS.values():
        target.add_arguments(parser)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the topology once over ``--load`` sentences; 0 when the change log is exact."""
    parser = argparse.ArgumentParser(prog="python -m examples.kafka_to_kafka")
    parser.add_argument("--bootstrap", required=True, help="the brokers, host:port[,...]")
    run_id = uuid.uuid4().hex[:8]
    parser.add_argument("--in-topic", default=f"sentences-{run_id}", help="the input topic")
    parser.add_argument("--load", type=int, default=400, help="sentences to write first")
    parser.add_argument("--redis-url", help="the Redis for the counts (else one of its own)")
    parser.add_argument("--name", default=f"kafka-to-kafka-{run_id}", help="topology name")
    parser.add_argument("--master", default="local[2]", help="the Spark master")
    parser.add_argument("--engine", choices=["spark", "inline"], default="spark")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to idle")
    parser.add_argument("--json", action="store_true", help="one JSON document")
    add_sink_arguments(parser)
    args = parser.parse_args(argv)
    try:
        args.target = target_named(args.sink).from_args(args, run_id)
    except ValueError as exc:
        parser.error(str(exc))
    from .crash_recovery import with_redis

    return with_redis(args, _run, "kafka-to-kafka-")


def _run(args: argparse.Namespace, url: str, workdir: Any) -> int:
    target: SinkTarget = args.target
    made = ensure_topics(args.bootstrap, [args.in_topic]) + target.prepare()
    if args.load:
        load(args.bootstrap, args.in_topic, args.load)
    conf = {
        "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
        "topology.state.provider.config": {"redisConfig": {"url": url}},
        "topology.state.checkpoint.interval.ms": 200,
        "topology.max.spout.pending": 50,
        **target.conf(),
    }
    cluster = (
        LocalCluster(engine="inline") if args.engine == "inline" else LocalCluster(args.master)
    )
    started = time.monotonic()
    with cluster:
        topo = build(args.in_topic, bootstrap=args.bootstrap, sink=target.sink())
        handle = cluster.submit_topology(args.name, conf, topo)
        handle.await_idle(args.timeout)
        published = handle.metrics()["components"]["publish"]
        handle.kill()
    verdict = verify(target, expected_counts(args.load))
    doc = {
        "in_topic": args.in_topic,
        "sink": args.sink,
        "target": target.describe(),
        "made": made,
        "sentences": args.load,
        "records_published": int(published.get("metric.sink_records_published", 0)),
        "seconds": round(time.monotonic() - started, 1),
        **verdict.as_dict(),
    }
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(f"{args.load} sentences from {args.in_topic!r}; updates in {target.describe()}")
        print(
            f"{verdict.updates} updates of {verdict.words} words published in "
            f"{doc['seconds']} s; each word's counts chain to its plain count: "
            + ("exact" if verdict.exact else "NOT EXACT")
        )
        for problem in verdict.problems[:10]:
            print(f"  {problem}", file=sys.stderr)
    return 0 if verdict.exact else 1


if __name__ == "__main__":
    sys.exit(main())
