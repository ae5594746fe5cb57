"""The stateful word count: sentences -> split -> count, with counts in ``KeyValueState``.

Run it::

    python -m examples.wordcount                      # 2,000 sentences on local[2], in-memory state
    python -m examples.wordcount --sentences 20000 --json
    python -m examples.wordcount --conf examples/conf/redis.json

It prints a progress line per transaction, then the top words, checks every count against a
plain Python count of the same sentences (exit status 1 if any differs) and says where the state
is: the provider and the namespaces (``<name>/count-<task>``, ``<name>/$checkpointspout-0``).

With a durable provider (Redis) a second run under the same ``--name`` continues from the counts
the first one committed; the check then expects those counts plus this run's. Its spout keeps
what it sent in memory, so a driver restarted after a crash would count its sentences again: on
a durable provider the run says so first (``SpoutReplayWarning``, one ``warning:`` line). A
state store that cannot be reached stops the run at once with the provider's error (exit status
2).
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import sys
import time
import warnings
from collections.abc import Mapping
from typing import Any

from checkpoint.status import checkpoint_status
from providers import KeyValueState, StateFactory, get_provider, provider_name
from statefulbolts import (
    BasicBolt,
    Config,
    Fields,
    Spout,
    StatefulBolt,
    StatefulBoltsError,
    StormTopology,
    TopologyBuilder,
)
from statefulbolts.namespaces import TaskNamespace, checkpoint_namespace, topology_prefix
from statefulbolts.state import committed_items

from .corpus import sentence, words


class SentenceSpout(Spout):
    """Emits ``count`` sentences with their index as message id; replays on ``fail``."""

    def __init__(self, count: int, start: int = 0) -> None:
        self.count = count
        self.start = start

    def open(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        """Split the sentence range over the spout's tasks."""
        self.collector = collector
        tasks = len(context.this_component_tasks)
        self.next_index = self.start + context.this_task_index
        self.step = tasks
        self.replay: collections.deque[int] = collections.deque()
        self.pending: set[int] = set()

    def next_tuple(self) -> None:
        """Emit a replay if there is one, else the next new sentence."""
        if self.replay:
            i = self.replay.popleft()
        elif self.next_index < self.start + self.count:
            i = self.next_index
            self.next_index += self.step
        else:
            return
        self.pending.add(i)
        self.collector.emit([sentence(i)], message_id=i)

    def ack(self, msg_id: Any) -> None:
        """Done with ``msg_id``."""
        self.pending.discard(msg_id)

    def fail(self, msg_id: Any) -> None:
        """Replay ``msg_id``."""
        self.replay.append(msg_id)

    def declare_output_fields(self, declarer: Any) -> None:
        """One field: ``sentence``."""
        declarer.declare(Fields("sentence"))


class SplitSentence(BasicBolt):
    """Splits a sentence into lower-case words."""

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        """Emit each word, anchored to the sentence."""
        for word in words(tuple.get_value(0)):
            collector.emit([word])

    def declare_output_fields(self, declarer: Any) -> None:
        """One field: ``word``."""
        declarer.declare(Fields("word"))


class WordCount(StatefulBolt):
    """Counts words in managed state (a sink: it emits nothing)."""

    def prepare(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        """Keep the collector."""
        self.collector = collector

    def init_state(self, state: Any) -> None:
        """The counts, restored to the last commit."""
        self.counts = state

    def execute(self, tuple: Any) -> None:  # noqa: A002
        """Add one to the word's count."""
        word = tuple.get_value(0)
        count = self.counts.get(word, 0) + 1
        self.counts.put(word, count)
        self.collector.ack(tuple)


def build(sentences: int, parallelism: int = 2, start: int = 0) -> StormTopology:
    """The word count topology over ``sentences`` sentences."""
    builder = TopologyBuilder()
    builder.set_spout("sentences", SentenceSpout(sentences, start), 1)
    builder.set_bolt("split", SplitSentence(), parallelism).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(), parallelism).fields_grouping("split", Fields("word"))
    return builder.create_topology()


def topology() -> StormTopology:
    """The default word count (2,000 sentences), for ``statefulbolts run``."""
    return build(2000)


def expected_counts(sentences: int, start: int = 0) -> collections.Counter[str]:
    """The counts a plain Python loop gets for the same sentences."""
    counts: collections.Counter[str] = collections.Counter()
    for i in range(start, start + sentences):
        counts.update(words(sentence(i)))
    return counts


def state_namespaces(name: str, parallelism: int) -> list[str]:
    """Where the topology ``name`` keeps its state: the count tasks, then the checkpoint spout."""
    counts = [str(TaskNamespace.of_topology(name, "count", task)) for task in range(parallelism)]
    return [*counts, checkpoint_namespace(topology_prefix(name))]


def describe_state(conf: Mapping[str, Any], name: str, parallelism: int) -> dict[str, str]:
    """Per namespace of the topology ``name``, what a person reads of it: txids and place.

    For the count tasks, their committed and prepared txids; for the checkpoint spout, the
    transaction it saved and its phase (what a restart would start from).
    """
    tasks = [("count", task) for task in range(parallelism)]
    status = checkpoint_status(conf, name, tasks)
    out: dict[str, str] = {}
    for task in status.tasks:
        where = StateFactory.get_system_state(task.namespace, conf).location
        out[task.namespace] = (
            f"committed txid {_txid(task.committed_txid)}, "
            f"prepared txid {_txid(task.prepared_txid)}, in {where}"
        )
    namespace = state_namespaces(name, parallelism)[-1]
    where = StateFactory.get_system_state(namespace, conf).location
    cp = status.checkpoint
    saved = "nothing saved" if cp is None else f"{cp} (txid {cp.txid}, phase {cp.phase.value})"
    out[namespace] = f"checkpoint {saved}, in {where}"
    return out


def _txid(txid: int | None) -> str:
    return "none" if txid is None else str(txid)


def committed_counts(conf: Mapping[str, Any], name: str) -> dict[str, int]:
    """The counts already committed under ``name`` (an earlier run on a durable store).

    Committed only: what a transaction prepared and did not commit is not counted.

    Every task the store holds for ``count``, whatever the parallelism it ran with: a run with
    another parallelism redistributes them when it starts.
    """
    counts: dict[str, int] = {}
    prefix = topology_prefix(name)
    listed = get_provider(conf).namespaces(conf, prefix) or []
    found = [
        ns for ns in listed if (t := TaskNamespace.parse(prefix, ns)) and t.component == "count"
    ]
    for namespace in found:
        state = StateFactory.get_state(namespace, conf)
        if not isinstance(state, KeyValueState):
            msg = f"the state provider returned {type(state).__qualname__}, not a KeyValueState"
            raise TypeError(msg)
        # The committed map alone: iterating the state would add what a transaction prepared
        # and never committed (a run stopped between its PREPARE and its COMMIT).
        counts.update(committed_items(state, conf))
    return counts


def main(argv: list[str] | None = None, *, spark: Any = None) -> int:
    """Run the word count and check it (on ``spark``, a SparkSession, when given)."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {__package__}.wordcount", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--sentences", type=int, default=2000, help="sentences to count (default 2000)"
    )
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument("--parallelism", type=int, default=2, help="tasks per bolt (default 2)")
    parser.add_argument("--conf", help="JSON or YAML file of topology config keys")
    parser.add_argument("--name", default="wordcount", help="topology name (default wordcount)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for the end")
    parser.add_argument("--json", action="store_true", help="print one JSON document, no progress")
    parser.add_argument("--top", type=int, default=10, help="how many top words to print")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    warnings.showwarning = _show_warning

    try:
        return _run(args, spark)
    except StatefulBoltsError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2


def _show_warning(
    message: Warning | str, category: type[Warning], *args: Any, **kwargs: Any
) -> None:
    """A warning in one line, as ``statefulbolts run`` shows it (no file, no source line)."""
    print(f"warning: {message}", file=sys.stderr, flush=True)


def _run(args: argparse.Namespace, spark: Any) -> int:
    from statefulbolts import LocalCluster

    conf = Config.from_file(args.conf) if args.conf else Config()
    # Before Spark starts: an unreachable store fails here, at once, with the provider's error.
    before = committed_counts(conf, args.name)

    def progress(info: Any) -> None:
        if not args.json:
            status = "ok" if info.ok else f"FAILED: {info.error}"
            print(
                f"txid {info.txid:>4} {info.action or 'BATCH':<9} tuples {info.tuples:>7} "
                f"acked {info.acked:>7} failed {info.failed:>5} {info.seconds:6.2f}s {status}",
                flush=True,
            )

    if not args.json:  # the name `statefulbolts checkpoint status --topology` asks for
        print(f"topology: {args.name}", flush=True)
    started = time.perf_counter()
    cluster = LocalCluster(spark=spark) if spark is not None else LocalCluster(args.master)
    with cluster:
        handle = cluster.submit_topology(
            args.name, conf, build(args.sentences, args.parallelism), on_transaction=progress
        )
        handle.await_idle(args.timeout)
        counts = handle.read_state("count")
        metrics = handle.metrics()
        handle.kill()
    seconds = time.perf_counter() - started
    where = describe_state(conf, args.name, args.parallelism)

    this_run = expected_counts(args.sentences)
    expected = this_run + collections.Counter(before)
    mismatched = sorted(w for w in set(expected) | set(counts) if counts.get(w) != expected.get(w))
    top = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[: args.top]
    result = {
        "sentences": args.sentences,
        "words": sum(this_run.values()),
        "distinct_words": len(counts),
        "seconds": round(seconds, 3),
        "transactions": len(metrics["transactions"]),
        "top": top,
        "exact": not mismatched,
        "mismatched": mismatched[:20],
        "components": metrics["components"],
        "continued_from_words": sum(before.values()),
        "state": {"provider": provider_name(conf), "namespaces": where},
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"\ncounted {result['words']} words ({result['distinct_words']} distinct) "
            f"from {args.sentences} sentences in {seconds:.1f}s over "
            f"{result['transactions']} transactions"
        )
        if before:
            print(
                f"continued from the counts of an earlier run of {args.name!r}: "
                f"{result['continued_from_words']} words already counted"
            )
        width = max((len(w) for w, _ in top), default=4)
        for word, count in top:
            print(f"  {word:<{width}}  {count}")
        print(
            "check against a plain Python count:",
            "exact"
            if not mismatched
            else f"MISMATCH in {len(mismatched)} words, e.g. {mismatched[:5]}",
        )
        print(f"state: {result['state']['provider']}")
        for namespace, state in where.items():
            print(f"  {namespace}: {state}")
    return 0 if not mismatched else 1


if __name__ == "__main__":
    sys.exit(main())
