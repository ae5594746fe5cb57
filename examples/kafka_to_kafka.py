"""Kafka to Kafka, exactly once: sentences in, each transaction's changed word counts out.

``sentences`` (a ``KafkaSpout`` of the input topic) -> ``split`` -> ``count`` (counts in
``KeyValueState``, Redis with ``--redis-url`` or a redis-server of its own) -> ``publish`` (an
``ExactlyOnceSinkBolt`` writing to the output topic with ``KafkaSink``). ``count`` emits, once
per transaction, each word whose count changed: ``(word, count, delta)``, the delta being what
the transaction added. The sink publishes them when the transaction commits, keyed by word,
value ``{"count": c, "delta": d}``, so the output topic is a change log of the counts in
which, for every word:

- the counts only go up, and each record's count is the previous one plus its delta (a
  missing update breaks the chain, a duplicated one repeats a count);
- the last count is the plain count of the word over the input topic.

``verify`` checks exactly that, reading the output topic as a ``read_committed`` consumer.

Each sink task writes to a partition of its own (``partitioning="task"``): ``publish`` is
grouped by word, so all of a word's updates still go through one task, into one partition, in
order. By key (``--partitioning key``) works as well on Apache Kafka. The tests' broker (Tansu)
loses, now and then, a commit it acknowledged when two producers' transactions are open on one
partition at once: it needs each task on partitions of its own.

Run it against a broker you started::

    python -m examples.kafka_to_kafka --bootstrap 127.0.0.1:9092 --load 400

It makes the two topics if they are missing (two partitions each; ``--in-topic`` and
``--out-topic`` name them), writes ``--load`` sentences, runs the topology until it is idle,
and prints the verdict (exit status 1 if it is not exact). ``examples.kafka_to_kafka_crash``
kills the driver at every point of the protocol and checks the same verdict.

Records of a publish that was aborted are not part of the change log. Apache Kafka never
shows them to a ``read_committed`` reader; a broker that does (Tansu, the tests' broker: its
Fetch lists no aborted transactions) shows them, and ``verify`` tells them apart by the
``statefulbolts.publish`` header the sink gives every record: two publish attempts of one lane
and transaction mean all but the last one aborted (a producer of the lane fences the earlier
ones before it writes). They are counted in the verdict (``aborted_records``), never hidden
silently.
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
from statefulbolts.connectors.kafka import (
    PUBLISH_HEADER,
    TXID_HEADER,
    KafkaSink,
    KafkaSpout,
    ProducerRecord,
)
from statefulbolts.connectors.sinks import ExactlyOnceSinkBolt

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


def update_record(tuple_: Any) -> ProducerRecord:
    """The record of an update: key the word, value ``{"count": c, "delta": d}``."""
    word, count, delta = tuple_.values
    return ProducerRecord({"count": count, "delta": delta}, key=word)


def build(
    in_topic: str | None = None,
    out_topic: str | None = None,
    bootstrap: str | None = None,
    parallelism: int = PARALLELISM,
    partitioning: str | None = None,
) -> StormTopology:
    """``sentences`` -> ``split`` -> ``count`` -> ``publish`` (see the module docstring).

    Without the topics and brokers, the spout and the sink read ``kafka.topics``,
    ``sink.kafka.topic`` and ``kafka.bootstrap.servers`` from the config, and
    ``sink.kafka.partitioning`` without ``partitioning``.
    """
    spout = KafkaSpout(in_topic, bootstrap_servers=bootstrap, translator=SENTENCES)
    sink = KafkaSink(
        out_topic,
        mapper=update_record,
        value_serializer="json",
        bootstrap_servers=bootstrap,
        partitioning=partitioning,
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
    """For ``statefulbolts run``: topics and brokers come from the config."""
    return build()


# ------------------------------------------------------------------ the verdict
@dataclass
class Verdict:
    """What ``verify`` found in the output topic (see the module docstring)."""

    exact: bool = False
    words: int = 0
    updates: int = 0
    aborted_records: int = 0  # records of aborted publishes a read_committed reader was given
    aborted_attempts: int = 0
    problems: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict (the first 20 problems)."""
        return {**self.__dict__, "problems": self.problems[:20]}


def read_log(bootstrap: str, topic: str, timeout_s: float = 60.0) -> list[Any]:
    """Every record a ``read_committed`` reader gets from ``topic``, each partition to its end.

    The end is where the fetches say the partition ends, never a listed offset (a broker may
    list the end short after a batch: Tansu does).
    """
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "kafka-to-kafka-verify",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    try:
        partitions = sorted(reader.list_topics(topic, timeout=timeout_s).topics[topic].partitions)
        reader.assign([TopicPartition(topic, p, 0) for p in partitions])
        got: dict[int, list[Any]] = {p: [] for p in partitions}
        open_ = set(partitions)
        deadline = time.monotonic() + timeout_s
        while open_ and time.monotonic() < deadline:
            message = reader.poll(0.2)
            if message is None:
                continue
            error = message.error()
            if error is None:
                got[message.partition()].append(message)
            elif error.code() == KafkaError._PARTITION_EOF:
                open_.discard(message.partition())
            else:
                msg = f"reading {topic!r}: {error}"
                raise RuntimeError(msg)
        if open_:
            msg = f"partitions {sorted(open_)} of {topic!r} not read to their end in {timeout_s} s"
            raise RuntimeError(msg)
        return [m for p in partitions for m in got[p]]
    finally:
        reader.close()


def _header(message: Any, name: str) -> str | None:
    for key, value in message.headers() or ():
        if key == name and value is not None:
            return str(value.decode())
    return None


def _committed_attempts(messages: Sequence[Any], verdict: Verdict) -> set[str]:
    """The publish attempts whose records count: per lane and commit, the last attempt.

    Attempts of one lane and COMMIT(t) run one after the other (each fences the one before,
    and only the last can commit), so in a partition two attempts both wrote to, the earlier
    one's records all come before the later one's.
    """
    spans: dict[tuple[str, str], dict[str, dict[int, list[int]]]] = {}
    for m in messages:
        attempt = _header(m, PUBLISH_HEADER)
        if attempt is None:
            verdict.problems.append(f"record at {m.partition()}/{m.offset()} has no publish header")
            continue
        lane, commit, _ = attempt.split("/", 2)
        span = spans.setdefault((lane, commit), {}).setdefault(attempt, {})
        low, high = span.get(m.partition(), [m.offset(), m.offset()])
        span[m.partition()] = [min(low, m.offset()), max(high, m.offset())]
    kept: set[str] = set()
    for (lane, commit), attempts in spans.items():
        last = [
            a
            for a in attempts
            if all(
                attempts[a][p][0] > attempts[b][p][1]
                for b in attempts
                if b != a
                for p in set(attempts[a]) & set(attempts[b])
            )
            and all(set(attempts[a]) & set(attempts[b]) for b in attempts if b != a)
        ]
        if len(last) != 1:
            verdict.problems.append(
                f"lane {lane} COMMIT({commit}): {len(attempts)} publish attempts, and no one of "
                "them wrote after all the others"
            )
            kept.update(attempts)
            continue
        kept.add(last[0])
        verdict.aborted_attempts += len(attempts) - 1
    return kept


def verify(bootstrap: str, out_topic: str, expected: Mapping[str, int]) -> Verdict:
    """Check the output topic's change log against ``expected`` counts (module docstring)."""
    verdict = Verdict()
    messages = read_log(bootstrap, out_topic)
    kept = _committed_attempts(messages, verdict)
    chains: dict[str, list[tuple[int, int, int]]] = collections.defaultdict(list)
    for m in messages:
        if _header(m, PUBLISH_HEADER) not in kept:
            verdict.aborted_records += 1
            continue
        word = m.key().decode()
        value = json.loads(m.value())
        chains[word].append((value["count"], value["delta"], int(_header(m, TXID_HEADER) or -1)))
    verdict.updates = sum(len(c) for c in chains.values())
    verdict.words = len(chains)
    for word in sorted(set(chains) | set(expected)):
        chain = chains.get(word, [])
        previous, last_txid = 0, -1
        for count, delta, txid in chain:
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
def main(argv: Sequence[str] | None = None) -> int:
    """Run the topology once over ``--load`` sentences; 0 when the change log is exact."""
    parser = argparse.ArgumentParser(prog="python -m examples.kafka_to_kafka")
    parser.add_argument("--bootstrap", required=True, help="the brokers, host:port[,...]")
    run_id = uuid.uuid4().hex[:8]
    parser.add_argument("--in-topic", default=f"sentences-{run_id}", help="the input topic")
    parser.add_argument("--out-topic", default=f"counts-{run_id}", help="the output topic")
    parser.add_argument("--load", type=int, default=400, help="sentences to write first")
    parser.add_argument(
        "--partitioning",
        choices=["task", "key"],
        default="task",
        help="where an update goes: the partition of its sink task (the default), or by its "
        "key (the word); see the module docstring",
    )
    parser.add_argument("--redis-url", help="the Redis for the counts (else one of its own)")
    parser.add_argument("--name", default=f"kafka-to-kafka-{run_id}", help="topology name")
    parser.add_argument("--master", default="local[2]", help="the Spark master")
    parser.add_argument("--engine", choices=["spark", "inline"], default="spark")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to idle")
    parser.add_argument("--json", action="store_true", help="one JSON document")
    args = parser.parse_args(argv)
    from .crash_recovery import with_redis

    return with_redis(args, _run, "kafka-to-kafka-")


def _run(args: argparse.Namespace, url: str, workdir: Any) -> int:
    made = ensure_topics(args.bootstrap, [args.in_topic, args.out_topic])
    if args.load:
        load(args.bootstrap, args.in_topic, args.load)
    conf = {
        "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
        "topology.state.provider.config": {"redisConfig": {"url": url}},
        "topology.state.checkpoint.interval.ms": 200,
        "topology.max.spout.pending": 50,
    }
    cluster = (
        LocalCluster(engine="inline") if args.engine == "inline" else LocalCluster(args.master)
    )
    started = time.monotonic()
    with cluster:
        topo = build(args.in_topic, args.out_topic, args.bootstrap, partitioning=args.partitioning)
        handle = cluster.submit_topology(args.name, conf, topo)
        handle.await_idle(args.timeout)
        published = handle.metrics()["components"]["publish"]
        handle.kill()
    verdict = verify(args.bootstrap, args.out_topic, expected_counts(args.load))
    doc = {
        "in_topic": args.in_topic,
        "out_topic": args.out_topic,
        "topics_made": made,
        "sentences": args.load,
        "records_published": int(published.get("metric.sink_records_published", 0)),
        "seconds": round(time.monotonic() - started, 1),
        **verdict.as_dict(),
    }
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        print(f"{args.load} sentences from {args.in_topic!r}; updates in {args.out_topic!r}")
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
