"""Transactional word counts and count buckets (a port of storm-starter's ``TransactionalWords``).

    python -m examples.transactional_words                 # in memory, local[2]
    python -m examples.transactional_words --conf examples/conf/redis.json   # on Redis
    python -m examples.transactional_words --bucket-size 3 --json

Words go out three per partition and batch. The committer ``count`` keeps, per word, its count
and its count before the batch (a ``TransactionalValue``: a replayed batch sees its own txid,
skips, and says the same thing again); ``bucketize`` (a ``BasicBolt`` downstream of a committer,
so it runs in the commit phase) turns a word's move from one bucket of ``--bucket-size`` counts
to another into +1 / -1; ``buckets`` (downstream of a committer, not one itself) keeps how many
words each bucket holds. Both maps are checked against a plain Python count of the data.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import sys
import time
from collections.abc import Mapping
from typing import Any

from statefulbolts import (
    BaseTransactionalBolt,
    BasicBolt,
    Committer,
    Config,
    Fields,
    MemoryTransactionalSpout,
    StatefulBoltsError,
    TransactionalMap,
    TransactionalTopology,
    TransactionalTopologyBuilder,
)

DATA: dict[int, list[list[Any]]] = {
    0: [[w] for w in "cat dog chicken cat dog apple".split()],
    1: [[w] for w in "cat dog apple banana".split()],
    2: [[w] for w in "cat cat cat cat cat dog dog dog dog".split()],
}
BUCKET_SIZE = 10


class KeyedCountUpdater(BaseTransactionalBolt, Committer):
    """Counts a batch's words, then applies them to ``[count, count before]`` per word."""

    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.collector, self.attempt = collector, id
        self.counts: collections.Counter[str] = collections.Counter()
        self.words = TransactionalMap(context.backing_map())

    def execute(self, tuple: Any) -> None:  # noqa: A002
        self.counts[tuple.get_value(1)] += 1

    def finish_batch(self) -> None:
        keys = sorted(self.counts)
        updaters = [_add_count(self.counts[k]) for k in keys]
        values = self.words.multi_update(self.attempt, keys, updaters)
        for word, (count, prev) in zip(keys, values, strict=True):
            self.collector.emit([self.attempt, word, count, prev])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "word", "count", "prev_count"))


def _add_count(n: int) -> Any:
    def update(old: list[int] | None) -> list[int | None]:
        return [n, None] if old is None else [old[0] + n, old[0]]

    return update


class Bucketize(BasicBolt):
    """A word's move between count buckets, as +1 for the new bucket and -1 for the old."""

    def __init__(self, bucket_size: int = BUCKET_SIZE) -> None:
        self.bucket_size = bucket_size

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        attempt, count, prev = tuple.get_value(0), tuple.get_value(2), tuple.get_value(3)
        bucket = count // self.bucket_size
        if prev is None:
            collector.emit([attempt, bucket, 1])
        elif bucket != prev // self.bucket_size:
            collector.emit([attempt, bucket, 1])
            collector.emit([attempt, prev // self.bucket_size, -1])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "bucket", "delta"))


class BucketCountUpdater(BaseTransactionalBolt):
    """How many words each bucket holds: a batch's deltas, applied once per txid."""

    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.attempt = id
        self.deltas: collections.Counter[int] = collections.Counter()
        self.buckets = TransactionalMap(context.backing_map())

    def execute(self, tuple: Any) -> None:  # noqa: A002
        self.deltas[tuple.get_value(1)] += tuple.get_value(2)

    def finish_batch(self) -> None:
        keys = sorted(self.deltas)
        updaters = [lambda old, d=self.deltas[k]: (old or 0) + d for k in keys]
        self.buckets.multi_update(self.attempt, keys, updaters)

    def declare_output_fields(self, declarer: Any) -> None:
        """Emits nothing."""


def build(
    data: Mapping[int, list[list[Any]]] | None = None,
    bucket_size: int = BUCKET_SIZE,
    transactional_id: str = "top-n-words",
) -> TransactionalTopology:
    """The word and bucket counts over ``data`` (storm-starter's by default)."""
    spout = MemoryTransactionalSpout(dict(DATA if data is None else data), ["word"], 3)
    builder = TransactionalTopologyBuilder(transactional_id, "spout", spout, 2)
    builder.set_bolt("count", KeyedCountUpdater(), 5).fields_grouping("spout", Fields("word"))
    builder.set_bolt("bucketize", Bucketize(bucket_size)).none_grouping("count")
    builder.set_bolt("buckets", BucketCountUpdater(), 2).fields_grouping(
        "bucketize", Fields("bucket")
    )
    return builder.build_topology()


def expected(
    data: Mapping[int, list[list[Any]]], bucket_size: int = BUCKET_SIZE
) -> tuple[dict[str, int], dict[int, int]]:
    """The word counts and the words per bucket, counted plainly."""
    counts = collections.Counter(row[0] for rows in data.values() for row in rows)
    buckets = collections.Counter(n // bucket_size for n in counts.values())
    return dict(counts), dict(buckets)


def main(argv: list[str] | None = None, *, spark: Any = None) -> int:
    """Run the topology, print the counts and buckets, check them."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {__package__}.transactional_words", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument("--conf", help="JSON or YAML file of topology config keys")
    parser.add_argument("--name", default="top-n-words", help="topology name")
    parser.add_argument("--bucket-size", type=int, default=BUCKET_SIZE, help="counts per bucket")
    parser.add_argument("--timeout", type=float, default=300, help="seconds to wait for the end")
    parser.add_argument("--json", action="store_true", help="one JSON document, no progress")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        result = _run(args, spark)
    except StatefulBoltsError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    print(json.dumps(result, indent=2) if args.json else _text(result))
    return 0 if result["exact"] else 1


def _run(args: argparse.Namespace, spark: Any) -> dict[str, Any]:
    from statefulbolts import LocalCluster

    conf = Config.from_file(args.conf) if args.conf else Config()
    conf.setdefault(Config.TOPOLOGY_MAX_SPOUT_PENDING, 3)
    conf.setdefault(Config.TOPOLOGY_STATE_CHECKPOINT_INTERVAL, 200)

    def progress(info: Any) -> None:
        if not args.json:
            state = "ok" if info.ok else f"FAILED: {info.error}"
            print(f"txid {info.txid:>3} {info.action:<8} {info.tuples:>3} tuples {state}")

    # Each run starts afresh: its own transactional id, so an earlier run's progress on a
    # durable store (Redis) does not carry over into this one's check.
    tid = f"{args.name}-{time.time_ns()}"
    if not args.json:  # the id `statefulbolts transactional status --id` asks for
        print(f"topology: {args.name}\ntransactional id: {tid}", flush=True)
    started = time.perf_counter()
    cluster = LocalCluster(spark=spark) if spark is not None else LocalCluster(args.master)
    with cluster:
        topology = build(bucket_size=args.bucket_size, transactional_id=tid)
        handle = cluster.submit_topology(args.name, conf, topology, on_transaction=progress)
        handle.await_idle(args.timeout)
        counts = {w: v[0] for w, v in handle.read_state("count").items()}
        buckets = {int(b): n for b, n in handle.read_state("buckets").items() if n}
        handle.kill()
    want_counts, want_buckets = expected(DATA, args.bucket_size)
    return {
        "transactional_id": tid,
        "counts": counts,
        "buckets": dict(sorted(buckets.items())),
        "exact": counts == want_counts and buckets == want_buckets,
        "expected": {"counts": want_counts, "buckets": dict(sorted(want_buckets.items()))},
        "seconds": round(time.perf_counter() - started, 3),
    }


def _text(result: dict[str, Any]) -> str:
    counts = sorted(result["counts"].items(), key=lambda kv: (-kv[1], kv[0]))
    lines = ["counts: " + ", ".join(f"{w} {n}" for w, n in counts)]
    lines.append("buckets: " + ", ".join(f"{b}: {n}" for b, n in result["buckets"].items()))
    check = "exact" if result["exact"] else f"MISMATCH: expected {result['expected']}"
    lines.append(f"checked against a plain Python count: {check} ({result['seconds']:.1f}s)")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
