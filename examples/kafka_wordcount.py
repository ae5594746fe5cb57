"""The word count over a Kafka topic: sentences -> split -> count, checked against a plain count.

``KafkaSpout`` reads the topic on the executors (a partition of the topic is a partition of the
spout, its offset saved with each checkpoint); ``split`` emits the words; ``count`` keeps them
in ``KeyValueState`` (in memory, or Redis with ``--conf examples/conf/redis.json``). Run it
against a broker you started::

    python -m examples.kafka_wordcount --bootstrap 127.0.0.1:9092 --topic sentences --load 2000

``--load N`` first writes N sentences to the topic. The run goes until the topology is idle
(everything the topic held then is read), prints the top words and checks every count against a
plain count of the topic's records, read again by a consumer of its own (exit status 1 if one
differs). Nothing is started here: the broker, the topic and (with Redis) the state store are
yours. With a durable store a second run under the same ``--name`` reads on from the offsets
the first one committed, and its counts are the topic's whole count again.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from statefulbolts import Config, Fields, LocalCluster, StormTopology, TopologyBuilder
from statefulbolts.config import load_config_file
from statefulbolts.connectors.kafka import KafkaRecord, KafkaSpout, SimpleRecordTranslator

from .corpus import sentence, words
from .wordcount import SplitSentence, WordCount


def sentence_of(record: KafkaRecord) -> list[Any]:
    """The tuple of a record: its value, the sentence (a module function: it is pickled)."""
    return [record.value]


SENTENCES = SimpleRecordTranslator(sentence_of, ["sentence"])


def build(
    topic: str | None = None, bootstrap: str | None = None, parallelism: int = 2
) -> StormTopology:
    """``sentences`` (a ``KafkaSpout`` of ``topic``) -> ``split`` -> ``count``.

    Without ``topic`` / ``bootstrap`` the spout reads ``kafka.topics`` and
    ``kafka.bootstrap.servers`` from the config (``statefulbolts run --conf``).
    """
    spout = KafkaSpout(topic, bootstrap_servers=bootstrap, translator=SENTENCES)
    builder = TopologyBuilder()
    builder.set_spout("sentences", spout, parallelism)
    builder.set_bolt("split", SplitSentence(), parallelism).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(), parallelism).fields_grouping("split", Fields("word"))
    return builder.create_topology()


def topology() -> StormTopology:
    """For ``statefulbolts run``: the topic and brokers come from the ``kafka.*`` keys."""
    return build()


def load(bootstrap: str, topic: str, count: int, first: int = 0) -> None:
    """Write sentences ``first`` .. ``first + count - 1`` to ``topic``.

    A loader for trying the example, not for throughput: one record per request, as some
    Kafka-compatible brokers (the tests' Tansu) answer a partition's end short after a batch.
    """
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 0,
            "batch.num.messages": 1,
            "max.in.flight.requests.per.connection": 1,
        }
    )
    for i in range(first, first + count):
        producer.produce(topic, value=sentence(i).encode())
        producer.poll(0)
    if producer.flush(60):
        msg = f"could not write {count} sentences to {topic!r} at {bootstrap} in 60 s"
        raise RuntimeError(msg)


def plain_count(bootstrap: str, topic: str, timeout_s: float = 60.0) -> collections.Counter[str]:
    """The words of every committed record of ``topic``, read by a plain consumer to its end."""
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "kafka-wordcount-check",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "isolation.level": "read_committed",
        }
    )
    try:
        partitions = reader.list_topics(timeout=timeout_s).topics[topic].partitions
        reader.assign([TopicPartition(topic, p, 0) for p in partitions])
        open_ = set(partitions)
        counts: collections.Counter[str] = collections.Counter()
        deadline = time.monotonic() + timeout_s
        while open_ and time.monotonic() < deadline:
            message = reader.poll(0.5)
            if message is None:
                continue
            if message.error() is None:
                counts.update(words(message.value().decode()))
            elif message.error().code() == KafkaError._PARTITION_EOF:
                open_.discard(message.partition())
        if open_:
            msg = f"partitions {sorted(open_)} of {topic!r} not read to their end in {timeout_s} s"
            raise RuntimeError(msg)
        return counts
    finally:
        reader.close()


def main(argv: Sequence[str] | None = None) -> int:
    """Run the word count over ``--topic``; 0 when every count matches the plain count."""
    parser = argparse.ArgumentParser(prog="python -m examples.kafka_wordcount")
    parser.add_argument("--bootstrap", required=True, help="the brokers, host:port[,...]")
    parser.add_argument("--topic", required=True, help="the topic of sentences")
    parser.add_argument("--load", type=int, default=0, help="first write this many sentences")
    parser.add_argument("--conf", help="a topology config file (JSON or YAML)")
    parser.add_argument("--name", default="kafka-wordcount", help="the topology name")
    parser.add_argument("--master", default="local[2]", help="the Spark master")
    parser.add_argument("--engine", choices=["spark", "inline"], default="spark")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to idle")
    args = parser.parse_args(argv)

    if args.load:
        load(args.bootstrap, args.topic, args.load)
    conf = Config(load_config_file(args.conf)) if args.conf else Config()
    conf.setdefault("topology.state.checkpoint.interval.ms", 100)
    cluster = (
        LocalCluster(engine="inline") if args.engine == "inline" else LocalCluster(args.master)
    )
    with cluster:
        handle = cluster.submit_topology(args.name, conf, build(args.topic, args.bootstrap))
        handle.await_idle(args.timeout)
        counts = collections.Counter(handle.read_state("count"))
        positions = handle.status()["partition_positions"]["sentences"]
        handle.kill()
    want = plain_count(args.bootstrap, args.topic)
    # Ties by word: the state's order depends on how the reads fell into transactions.
    top = sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:5]
    print("top words:", json.dumps(top))
    print("offsets:", json.dumps(positions, sort_keys=True))
    if counts != want:
        wrong = sorted(w for w in set(counts) | set(want) if counts[w] != want[w])
        print(f"MISMATCH in {len(wrong)} words, e.g. {wrong[:5]}", file=sys.stderr)
        return 1
    print(f"all {len(want)} word counts match a plain count of topic {args.topic!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
