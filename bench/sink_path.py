"""The Kafka sink's record path alone: stage, state round trip and publish, in us a record.

    python bench/sink_path.py                      # Tansu on a free port, 500,000 records, 3 rounds
    python bench/sink_path.py --bootstrap 127.0.0.1:9092 --records 200000 --json

What ``bench/sinks.py`` runs as a topology, here taken apart and timed alone, one sink task's
share of the word count's updates (``--records``, ``(word, count)`` over a ``--vocab`` Zipf
vocabulary, in column batches of ``--batch`` rows as the runtime hands them to a sink bolt):

- ``stage_tuple``: ``Sink.stage`` called per tuple (``ColumnBatch.tuple(i)``), what both sink
  bolts did before they staged a batch at a time;
- ``stage_batch``: ``Sink.stage_batch`` of each batch (``KafkaSink``'s column path), if the
  sink has one; both must give the same records;
- ``state``: the staged records through the state's encoding and back (msgpack of chunks of
  1,000, as ``ExactlyOnceSinkBolt`` stores them at PREPARE and reads them at COMMIT);
- ``publish``: ``KafkaSink.publish`` of them as one transaction of a lane, to a fresh topic,
  with and without the per-record txid headers, the first publish of a lane in this process
  (its producer made and fenced) and the next one (``publish_again``: a producer kept from the
  last publish, if the sink keeps one);
- ``write``: ``KafkaSink.write``, the at-least-once sink's idempotent producer, of the same
  records.

Each figure is CPU seconds of this process (``time.process_time``: Python and librdkafka's
threads together) per record, in microseconds, with the wall time beside it; the broker's own
CPU is not counted. Rounds alternate the order of the publish variants; the report gives each
variant's median and range over the rounds and the 1-minute load average at each round.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgpack

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.kafka import Broker, say  # noqa: E402
from examples.zipf import zipf_sentences  # noqa: E402
from statefulbolts import Fields  # noqa: E402
from statefulbolts.connectors.kafka import KafkaSink  # noqa: E402
from statefulbolts.connectors.sinks import Lane, StagedBatch, StagedColumns  # noqa: E402
from statefulbolts.connectors.sinks._columns import concat_staged  # noqa: E402
from statefulbolts.tuples import ColumnBatch  # noqa: E402

CHUNK = 1000  # ExactlyOnceSinkBolt's default chunk_records


def batches(records: int, vocab: int, size: int, seed: int) -> list[ColumnBatch]:
    """``records`` rows ``(word, count)``: each word's running count, in column batches."""
    counts: dict[str, int] = {}
    rows: list[list[Any]] = []
    for sentence in zipf_sentences(-(-records // 10), vocab, seed):
        for word in sentence.split():
            counts[word] = counts.get(word, 0) + 1
            rows.append([word, counts[word]])
    rows = rows[:records]
    fields = Fields("word", "count")
    return [
        ColumnBatch(rows[i : i + size], fields, "count", 3, "default", first=i)
        for i in range(0, len(rows), size)
    ]


def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    """``fn()``, its CPU seconds and its wall seconds."""
    cpu, wall = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - cpu, time.perf_counter() - wall


def sink_for(topic: str, bootstrap: str, *, txid_headers: bool | None = None) -> KafkaSink:
    """The bench's sink: key the word, value the count as JSON, a partition per task."""
    extra = {} if txid_headers is None else {"txid_headers": txid_headers}
    sink = KafkaSink(
        topic, key="word", value="count", value_serializer="json", bootstrap_servers=bootstrap,
        partitioning="task", **extra,
    )  # fmt: skip
    sink.open({"topology.name": "sink-path"}, None)  # type: ignore[arg-type]
    return sink


def stage_figures(sink: KafkaSink, data: list[ColumnBatch]) -> tuple[Sequence[Any], dict[str, Any]]:
    """Stage every batch per tuple and (if the sink can) per batch; the records and figures.

    The records come back as the sink bolt's COMMIT reads them: through the state's encoding
    in chunks (rows, or the sink's ``StagedColumns``), joined (``concat_staged``).
    """
    n = sum(len(b) for b in data)
    out: dict[str, Any] = {}
    stage = sink.stage
    per_tuple, cpu, wall = timed(lambda: [stage(b.tuple(i)) for b in data for i in range(len(b))])
    out["stage_tuple"] = {"us_cpu": cpu / n * 1e6, "us_wall": wall / n * 1e6}
    segments: list[Sequence[Any]] = [per_tuple]
    stage_batch = getattr(sink, "stage_batch", None)
    if stage_batch is not None:
        segments, cpu, wall = timed(lambda: [stage_batch(b) for b in data])
        out["stage_batch"] = {"us_cpu": cpu / n * 1e6, "us_wall": wall / n * 1e6}
        if [r for seg in segments for r in seg] != per_tuple:
            msg = "stage_batch gave other records than stage"
            raise SystemExit(msg)

    def round_trip() -> Sequence[Any]:
        # As ExactlyOnceSinkBolt: each segment in chunks of CHUNK, stored; read back, joined.
        stored = [
            msgpack.packb(part.stored() if isinstance(part, StagedColumns) else part,
                          use_bin_type=True)
            for seg in segments
            for part in (seg[i : i + CHUNK] for i in range(0, len(seg), CHUNK))
        ]  # fmt: skip
        return concat_staged([msgpack.unpackb(c, raw=False) for c in stored])

    records, cpu, wall = timed(round_trip)
    out["state"] = {"us_cpu": cpu / n * 1e6, "us_wall": wall / n * 1e6}
    return records, out


def publish_figures(
    broker: Broker, records: Sequence[Any], order: list[str], lane_no: int
) -> dict[str, Any]:
    """Each publish variant of ``order`` to a fresh topic: us a record, CPU and wall."""
    n = len(records)
    out: dict[str, Any] = {}
    for variant in order:
        topic = f"spath-{variant.replace('_', '-')}-{time.time_ns()}"
        broker.create(topic, 2)
        if variant == "write":
            sink = sink_for(topic, broker.bootstrap)
            sink.write(records[:1000])  # the process's idempotent producer made beforehand
            _, cpu, wall = timed(lambda s=sink: s.write(records))
            out[variant] = {"us_cpu": cpu / n * 1e6, "us_wall": wall / n * 1e6}
            continue
        headers = variant.endswith("_headers")
        sink = sink_for(topic, broker.bootstrap, txid_headers=headers)
        lane = Lane("sink-path", f"publish-{lane_no}-{variant}", 0, 1)
        result, cpu, wall = timed(
            lambda s=sink, ln=lane: s.publish(ln, 1, [StagedBatch(1, records)], None)
        )
        if result.records != n:
            msg = f"{variant}: published {result.records} of {n} records"
            raise SystemExit(msg)
        out[variant] = {"us_cpu": cpu / n * 1e6, "us_wall": wall / n * 1e6}
        again, cpu, wall = timed(
            lambda s=sink, ln=lane: s.publish(ln, 2, [StagedBatch(2, records)], None)
        )
        if again.records != n:
            msg = f"{variant} again: published {again.records} of {n} records"
            raise SystemExit(msg)
        out[f"{variant}_again"] = {"us_cpu": cpu / n * 1e6, "us_wall": wall / n * 1e6}
    return out


def summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    keys = sorted({k for r in rounds for k in r if isinstance(r[k], dict)})
    out: dict[str, Any] = {}
    for key in keys:
        cpu = [r[key]["us_cpu"] for r in rounds if key in r]
        wall = [r[key]["us_wall"] for r in rounds if key in r]
        out[key] = {
            "us_cpu_median": round(statistics.median(cpu), 2),
            "us_cpu_range": [round(min(cpu), 2), round(max(cpu), 2)],
            "us_wall_median": round(statistics.median(wall), 2),
        }
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap", help="a broker to use instead of starting Tansu")
    parser.add_argument("--records", type=int, default=500_000)
    parser.add_argument("--vocab", type=int, default=10_000)
    parser.add_argument("--batch", type=int, default=4096, help="rows per column batch")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = parser.parse_args(argv)
    data = batches(args.records, args.vocab, args.batch, args.seed)
    workdir = Path(tempfile.mkdtemp(prefix="sink-path-"))
    broker = Broker(args.bootstrap, workdir)
    variants = ["publish_headers", "publish", "write"]
    rounds: list[dict[str, Any]] = []
    try:
        for r in range(args.rounds):
            row: dict[str, Any] = {"round": r + 1, "load_avg_1m": round(os.getloadavg()[0], 2)}
            topic = f"spath-stage-{time.time_ns()}"
            broker.create(topic, 2)
            records, staged = stage_figures(sink_for(topic, broker.bootstrap), data)
            row |= staged
            order = variants if r % 2 == 0 else variants[::-1]
            row |= publish_figures(broker, records, order, r)
            rounds.append(row)
            shown = ", ".join(
                f"{k} {v['us_cpu']:.2f}/{v['us_wall']:.2f}"
                for k, v in row.items()
                if isinstance(v, dict)
            )
            say(f"[round {r + 1}] load {row['load_avg_1m']}: us a record, cpu/wall: {shown}")
    finally:
        broker.stop()
    result = {
        "records": args.records,
        "batch": args.batch,
        "rounds": rounds,
        "median": summarise(rounds),
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for key, value in result["median"].items():
            print(
                f"{key:<22} {value['us_cpu_median']:6.2f} us cpu a record "
                f"({value['us_cpu_range'][0]}-{value['us_cpu_range'][1]}), "
                f"{value['us_wall_median']:6.2f} us wall"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
