"""A transactional global count (a port of storm-starter's ``TransactionalGlobalCount``).

    python -m examples.transactional_global_count            # in memory, local[2]
    python -m examples.transactional_global_count --json
    python -m examples.transactional_global_count --conf examples/conf/redis.json

Three partitions of words go out three at a time per partition and batch. Five ``partial``
tasks count what each receives of a batch and say so in ``finish_batch`` (five partial counts
per batch, some of them 0); the committer ``sum`` adds them up and applies the batch's total
to the global count exactly once (a ``TransactionalValue``: a replayed batch sees its own txid
and skips). The totals after each batch are 9, 16 and 19; the final count, 19, is checked
against ``len`` of the data.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from typing import Any

from statefulbolts import (
    BaseTransactionalBolt,
    Committer,
    Config,
    Fields,
    MemoryTransactionalSpout,
    StatefulBoltsError,
    TransactionalMap,
    TransactionalTopology,
    TransactionalTopologyBuilder,
)

# storm-starter's data, three partitions.
DATA: dict[int, list[list[Any]]] = {
    0: [[w] for w in "cat dog chicken cat dog apple".split()],
    1: [[w] for w in "cat dog apple banana".split()],
    2: [[w] for w in "cat cat cat cat cat dog dog dog dog".split()],
}
GLOBAL_KEY = "GLOBAL-COUNT"


class BatchCount(BaseTransactionalBolt):
    """Counts the tuples of one batch that reach this task."""

    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.collector, self.attempt, self.count = collector, id, 0

    def execute(self, tuple: Any) -> None:  # noqa: A002
        self.count += 1

    def finish_batch(self) -> None:
        self.collector.emit([self.attempt, self.count])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "count"))


class UpdateGlobalCount(BaseTransactionalBolt, Committer):
    """Adds a batch's partial counts to the global count, exactly once per txid."""

    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.collector, self.attempt, self.sum = collector, id, 0
        self.counts = TransactionalMap(context.backing_map())

    def execute(self, tuple: Any) -> None:  # noqa: A002
        self.sum += tuple.get_value(1)

    def finish_batch(self) -> None:
        added = self.sum
        (total,) = self.counts.multi_update(
            self.attempt, [GLOBAL_KEY], [lambda old: (old or 0) + added]
        )
        self.collector.emit([self.attempt, total])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "sum"))


def build(
    data: dict[int, list[list[Any]]] | None = None, transactional_id: str = "global-count"
) -> TransactionalTopology:
    """The global count over ``data`` (storm-starter's by default), under ``transactional_id``."""
    spout = MemoryTransactionalSpout(DATA if data is None else data, ["word"], 3)
    builder = TransactionalTopologyBuilder(transactional_id, "spout", spout, 3)
    builder.set_bolt("partial", BatchCount(), 5).none_grouping("spout")
    builder.set_bolt("sum", UpdateGlobalCount()).global_grouping("partial")
    return builder.build_topology()


def main(argv: list[str] | None = None, *, spark: Any = None) -> int:
    """Run the global count, print the count after each batch, check the final one."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {__package__}.transactional_global_count",
        description=__doc__.split("\n")[0],
    )
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument("--conf", help="JSON or YAML file of topology config keys")
    parser.add_argument("--name", default="global-count", help="topology name")
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
    totals: list[tuple[int, int]] = []

    def progress(info: Any) -> None:
        if info.ok and info.action == "COMMIT" and info.tuples:
            totals.append((info.txid, info.tuples))
        if not args.json:
            state = "ok" if info.ok else f"FAILED: {info.error}"
            print(f"txid {info.txid:>3} {info.action:<8} {info.tuples:>3} tuples {state}")

    topology = build()
    if not args.json:  # the id `statefulbolts transactional status --id` asks for
        print(f"topology: {args.name}\ntransactional id: {topology.transactional_id}", flush=True)
    started = time.perf_counter()
    cluster = LocalCluster(spark=spark) if spark is not None else LocalCluster(args.master)
    with cluster:
        handle = cluster.submit_topology(args.name, conf, topology, on_transaction=progress)
        handle.await_idle(args.timeout)
        count = handle.read_state("sum").get(GLOBAL_KEY)
        handle.kill()
    expected = sum(len(rows) for rows in DATA.values())
    running, after = 0, []
    for txid, tuples in totals:
        running += tuples
        after.append({"txid": txid, "tuples": tuples, "count": running})
    return {
        "count": count,
        "expected": expected,
        "exact": count == expected,
        "batches": after,
        "seconds": round(time.perf_counter() - started, 3),
    }


def _text(result: dict[str, Any]) -> str:
    lines = [f"after txid {b['txid']}: {b['count']}" for b in result["batches"]]
    check = "exact" if result["exact"] else f"MISMATCH: expected {result['expected']}"
    lines.append(f"global count {result['count']} ({check}) in {result['seconds']:.1f}s")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
