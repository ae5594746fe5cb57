"""The Kafka word count in Quix Streams and in Bytewax: one run, its figures as JSON on stdout.

    /work/peers-venv/bin/python bench/_kafka_peers.py quix --bootstrap 127.0.0.1:9092 \\
        --topic words-0 --words 1000000 --vocab 10000 --interval 1000

``bench/kafka.py`` runs it once per round and peer, with the peers' own interpreter (a venv of
their own: ``pip install quixstreams bytewax``, which pin other confluent-kafka versions than
ours), so that each peer reads the topic this bench wrote, on the same broker. Each reads the
whole topic from its start, splits the sentences, counts every word with its own state and
checkpointing, and stops once the last word was counted:

- ``quix``: Quix Streams 3 ``Application`` (``processing_guarantee="exactly-once"``: a
  transactional producer, offsets committed in its transactions; RocksDB state with its
  changelog topic; ``commit_interval`` = ``--interval``), in a new consumer group: split
  (``apply(..., expand=True)``), ``group_by`` the word (a repartition topic, as a keyed count
  needs), a stateful count; it stops itself (``app.stop()``) after the last word. With
  ``--out-topic``, each word's new count also goes to that topic (``to_topic``: key the
  word, value the count as JSON), in the same transactions (``bench/sinks.py``).
- ``bytewax``: Bytewax ``KafkaSource`` (``tail=False``: it ends at each partition's end),
  ``flat_map`` split, ``key_on`` the word, ``stateful_map`` count, one worker, with recovery
  (its SQLite store, an epoch every ``--interval``).

Time is the run's only: from the call that starts processing to its return (the consumer's
group join and the peers' topic setup included, as our runs include their Spark jobs' start),
with the imports, the corpus and the expected counts made before; ``first_s`` is the part of
it before the first word was counted (a peer's start-up). Every run checks its final
counts against a plain count of the corpus. A peer that fails is reported with its error (the
first lines), never retried.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time
import traceback
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples.corpus import words  # noqa: E402
from examples.zipf import zipf_sentences  # noqa: E402


def quix(args: argparse.Namespace, total: int) -> dict[str, Any]:
    """Quix Streams, exactly-once, RocksDB state (see the module docstring)."""
    from quixstreams import Application, State

    counts: dict[str, int] = {}
    seen = [0]
    first: list[float] = []
    state_dir = tempfile.mkdtemp(prefix="quix-state-")
    app = Application(
        broker_address=args.bootstrap,
        consumer_group=f"bench-quix-{uuid.uuid4().hex[:8]}",
        auto_offset_reset="earliest",
        processing_guarantee="exactly-once",
        commit_interval=args.interval / 1000,
        state_dir=state_dir,
        loglevel=os.environ.get("QUIX_LOGLEVEL", "WARNING"),
        consumer_poll_timeout=0.1,
    )
    topic = app.topic(args.topic, value_deserializer="bytes")

    def count(word: str, state: State) -> int:
        n = state.get("n", 0) + 1
        state.set("n", n)
        counts[word] = n
        seen[0] += 1
        if not first:
            first.append(time.perf_counter())
        if seen[0] == total:
            app.stop()
        return n

    sdf = app.dataframe(topic)
    sdf = sdf.apply(lambda v: words(v.decode()), expand=True)
    sdf = sdf.group_by(lambda w: w, name="word")
    sdf = sdf.apply(count, stateful=True)
    if args.out_topic:
        out = app.topic(args.out_topic, key_serializer="str", value_serializer="json")
        sdf = sdf.to_topic(out)
    started = time.perf_counter()
    app.run()
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "first_s": _first(first, started), "counts": counts}


def bytewax(args: argparse.Namespace, total: int) -> dict[str, Any]:
    """Bytewax's Kafka input, one worker, recovery on (see the module docstring)."""
    import bytewax.operators as op
    from bytewax.connectors.kafka import KafkaSource
    from bytewax.dataflow import Dataflow
    from bytewax.outputs import DynamicSink, StatelessSinkPartition
    from bytewax.recovery import RecoveryConfig, init_db_dir
    from bytewax.testing import run_main

    counts: dict[str, int] = {}
    first: list[float] = []

    class _Part(StatelessSinkPartition):
        def write_batch(self, items: list[tuple[str, int]]) -> None:
            if not first:
                first.append(time.perf_counter())
            counts.update(items)

    class _Sink(DynamicSink):
        def build(self, step_id: str, worker_index: int, worker_count: int) -> _Part:
            return _Part()

    def count(state: int | None, _word: str) -> tuple[int, int]:
        n = (state or 0) + 1
        return n, n

    flow = Dataflow("kafka_wc")
    source = KafkaSource([args.bootstrap], [args.topic], tail=False, batch_size=args.batch)
    messages = op.input("in", flow, source)
    split = op.flat_map("split", messages, lambda m: words(m.value.decode()))
    keyed = op.key_on("key", split, lambda w: w)
    op.output("out", op.stateful_map("count", keyed, count), _Sink())
    with tempfile.TemporaryDirectory(prefix="bytewax-recovery-") as tmp:
        init_db_dir(Path(tmp), 1)
        started = time.perf_counter()
        run_main(
            flow,
            epoch_interval=timedelta(milliseconds=args.interval),
            recovery_config=RecoveryConfig(tmp),
        )
        seconds = time.perf_counter() - started
    return {"seconds": seconds, "first_s": _first(first, started), "counts": counts}


def _first(first: list[float], started: float) -> float | None:
    """Seconds from the start of the run to its first counted word (its start-up)."""
    return round(first[0] - started, 3) if first else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("peer", choices=["quix", "bytewax"])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--words", type=int, default=1_000_000)
    parser.add_argument("--vocab", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--interval", type=int, default=1000, help="commit / epoch, ms")
    parser.add_argument("--batch", type=int, default=1000, help="Bytewax's input batch")
    parser.add_argument("--out-topic", help="Quix: write each word's new count there")
    args = parser.parse_args(argv)
    if args.out_topic and args.peer != "quix":
        parser.error("--out-topic is for quix only")
    corpus = zipf_sentences(-(-args.words // 10), args.vocab, args.seed)
    expected = dict(collections.Counter(w for text in corpus for w in words(text)))
    total = sum(expected.values())
    from importlib.metadata import version

    package = {"quix": "quixstreams", "bytewax": "bytewax"}[args.peer]
    out: dict[str, Any] = {"peer": args.peer, "version": version(package)}
    try:
        run = quix(args, total) if args.peer == "quix" else bytewax(args, total)
    except Exception as exc:  # noqa: BLE001 - a peer's failure is a figure of the bench
        out |= {"ok": False, "error": f"{type(exc).__name__}: {exc}"[:2000]}
        out["traceback"] = traceback.format_exc()[-4000:]
        print(json.dumps(out))
        return 1
    out |= {
        "ok": True,
        "seconds": run["seconds"],
        "words": total,
        "first_s": run["first_s"],
        "exact": run["counts"] == expected,
    }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
