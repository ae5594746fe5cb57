"""A transactional word count over a Kafka topic, with either transactional Kafka spout.

    python -m examples.kafka_transactional_words --bootstrap 127.0.0.1:9092 --topic words --load 200
    python -m examples.kafka_transactional_words --bootstrap 127.0.0.1:9092 --topic words --opaque

The topology (``build``)::

    spout (KafkaTransactionalSpout, or OpaqueKafkaTransactionalSpout with --opaque; 2 tasks)
      -> split (a batch bolt: counts the words of its task's sentences, emits them at the end)
      -> count (committer, fields grouping on the word: adds a batch's counts to a map)

``count`` keeps its counts in a ``TransactionalMap`` behind the partitioned spout (a replayed
txid reads the very same records, so a committer that already wrote it skips it) and in an
``OpaqueMap`` behind the opaque one (a replay may read other records: the value before the
txid is kept, and the replay's counts are applied to it). ``--load N`` first writes N sentences
to the topic (made with ``--partitions`` partitions if it does not exist). The run goes until the
topology is idle, prints the top words and checks every count against a plain count of the
topic (exit status 1 if one differs). A durable store (``--conf examples/conf/redis.json``)
keeps the counts and the spout's metas under the transactional id (``--id``): a second run with
the same id reads on where the first one stopped.
"""

from __future__ import annotations

import argparse
import collections
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from statefulbolts import (
    BaseTransactionalBolt,
    Committer,
    Config,
    Fields,
    LocalCluster,
    OpaqueMap,
    TransactionalMap,
    TransactionalTopology,
    TransactionalTopologyBuilder,
)
from statefulbolts.config import load_config_file
from statefulbolts.connectors.kafka import (
    KafkaTransactionalSpout,
    OpaqueKafkaTransactionalSpout,
)

from .corpus import sentence
from .kafka_wordcount import SENTENCES, plain_count
from .transactional_crash import SplitCount

PARALLELISM = 2


class WordSum(BaseTransactionalBolt, Committer):
    """Adds a batch's per-word counts to the map: ``TransactionalMap``, or ``OpaqueMap``."""

    def __init__(self, opaque: bool = False) -> None:
        self.opaque = opaque

    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.attempt = id
        self.counts: collections.Counter[str] = collections.Counter()
        backing = context.backing_map()
        self.words = OpaqueMap(backing) if self.opaque else TransactionalMap(backing)

    def execute(self, tuple: Any) -> None:  # noqa: A002
        self.counts[tuple.get_value(1)] += tuple.get_value(2)

    def finish_batch(self) -> None:
        keys = sorted(self.counts)
        updaters = [lambda old, n=self.counts[k]: (old or 0) + n for k in keys]
        self.words.multi_update(self.attempt, keys, updaters)

    def declare_output_fields(self, declarer: Any) -> None:
        """Emits nothing."""


def spout_for(
    topic: str | None,
    bootstrap: str | None,
    *,
    opaque: bool = False,
    take_per_batch: int = 100,
) -> KafkaTransactionalSpout | OpaqueKafkaTransactionalSpout:
    """The spout of sentences: ``topic`` (else ``kafka.topics``), one sentence a tuple."""
    kind = OpaqueKafkaTransactionalSpout if opaque else KafkaTransactionalSpout
    return kind(
        topic, take_per_batch=take_per_batch, bootstrap_servers=bootstrap, translator=SENTENCES
    )


def build(
    topic: str | None = None,
    bootstrap: str | None = None,
    *,
    opaque: bool = False,
    take_per_batch: int = 100,
    transactional_id: str = "kafka-words",
) -> TransactionalTopology:
    """spout -> split -> count (see the module docstring)."""
    spout = spout_for(topic, bootstrap, opaque=opaque, take_per_batch=take_per_batch)
    builder = TransactionalTopologyBuilder(transactional_id, "spout", spout, PARALLELISM)
    builder.set_bolt("split", SplitCount(), PARALLELISM).shuffle_grouping("spout")
    builder.set_committer_bolt("count", WordSum(opaque), PARALLELISM).fields_grouping(
        "split", Fields("word")
    )
    return builder.build_topology()


def topology() -> TransactionalTopology:
    """For ``statefulbolts run``: the partitioned spout; topic and brokers from ``kafka.*``."""
    return build()


def make_topic(bootstrap: str, topic: str, partitions: int) -> None:
    """Make ``topic`` with ``partitions`` partitions, unless it exists."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    if topic in admin.list_topics(timeout=30).topics:
        return
    for future in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        future.result(30)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = admin.list_topics(timeout=10).topics.get(topic)
        if found is not None and found.error is None and len(found.partitions) == partitions:
            return
        time.sleep(0.05)
    msg = f"topic {topic!r} was made but its {partitions} partitions do not show in 30 s"
    raise RuntimeError(msg)


def load(bootstrap: str, topic: str, rows: dict[int, list[str]]) -> None:
    """Write each partition's sentences to it, in order.

    One record per request: the tests' broker (Tansu) answers a partition's end short after a
    batch of records (docs/kafka.md, the test broker).
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
    for partition, texts in rows.items():
        for text in texts:
            producer.produce(topic, value=text.encode(), partition=partition)
            producer.poll(0)
    if producer.flush(60):
        msg = f"could not write the sentences to {topic!r} at {bootstrap} in 60 s"
        raise RuntimeError(msg)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the word count over ``--topic``; 0 when every count matches the plain count."""
    parser = argparse.ArgumentParser(prog="python -m examples.kafka_transactional_words")
    parser.add_argument("--bootstrap", required=True, help="the brokers, host:port[,...]")
    parser.add_argument("--topic", required=True, help="the topic of sentences")
    parser.add_argument("--load", type=int, default=0, help="first write this many sentences")
    parser.add_argument("--partitions", type=int, default=2, help="of a topic --load makes")
    parser.add_argument("--opaque", action="store_true", help="OpaqueKafkaTransactionalSpout")
    parser.add_argument("--take", type=int, default=100, help="records per partition and batch")
    parser.add_argument("--conf", help="a topology config file (JSON or YAML)")
    parser.add_argument("--id", help="the transactional id (default: a new one each run)")
    parser.add_argument("--master", default="local[2]", help="the Spark master")
    parser.add_argument("--engine", choices=["spark", "inline"], default="spark")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds to idle")
    args = parser.parse_args(argv)

    if args.load:
        make_topic(args.bootstrap, args.topic, args.partitions)
        rows: dict[int, list[str]] = collections.defaultdict(list)
        for i in range(args.load):
            rows[i % args.partitions].append(sentence(i))
        load(args.bootstrap, args.topic, rows)
    conf = Config(load_config_file(args.conf)) if args.conf else Config()
    conf.setdefault(Config.TOPOLOGY_MAX_SPOUT_PENDING, 3)
    conf.setdefault(Config.TOPOLOGY_STATE_CHECKPOINT_INTERVAL, 100)
    tid = args.id or f"kafka-words-{time.time_ns()}"
    kind = "opaque" if args.opaque else "partitioned"
    print(f"transactional id: {tid} ({kind} spout)", flush=True)
    topology = build(
        args.topic,
        args.bootstrap,
        opaque=args.opaque,
        take_per_batch=args.take,
        transactional_id=tid,
    )
    cluster = (
        LocalCluster(engine="inline") if args.engine == "inline" else LocalCluster(args.master)
    )
    with cluster:
        handle = cluster.submit_topology("kafka-words", conf, topology)
        handle.await_idle(args.timeout)
        counts = collections.Counter(handle.read_state("count"))
        committed = handle.status()["current_txid"] - 1
        handle.kill()
    want = plain_count(args.bootstrap, args.topic)
    print("top words:", json.dumps(counts.most_common(5)))
    print(f"txids committed: {committed}")
    if counts != want:
        wrong = sorted(w for w in set(counts) | set(want) if counts[w] != want[w])
        print(f"MISMATCH in {len(wrong)} words, e.g. {wrong[:5]}", file=sys.stderr)
        return 1
    print(f"all {len(want)} word counts match a plain count of topic {args.topic!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
