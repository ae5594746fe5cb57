"""The visible-output latency probe: a paced producer and a ``read_committed`` reader, one run.

    python bench/_sink_probe.py --bootstrap 127.0.0.1:9092 --in-topic words --out-topic counts \\
        --partitions 4 --rate 1000 --seconds 30

``bench/sinks.py`` runs it once per offered load, checkpoint interval and sink, in a process
of its own so that neither the topology's driver nor the other thread of this one steal the
interpreter from the clocks: the figures are JSON on stdout.

The input is ``zipf_sentences(warmup + rate * seconds, vocab, seed, words_per_sentence=1)``:
one Zipf word a record, so a record makes exactly one update of one count. Each record carries
the header ``bench.sent`` = ``<id>:<wall clock ns when it was handed to the producer>``; the
topology carries it to the count's update, whose record repeats it (``bench/sinks.py``). Two
threads:

- **producer**: first ``--warmup`` records at once, then waits until the reader saw all of
  them (the topology is running, its producers and Spark jobs are warm); then the paced ones,
  record ``i`` due at ``start + i / rate``: every half millisecond it sends what is due, each
  stamped as it is handed to the client, to partition ``i % partitions``, with librdkafka's
  default ``linger.ms`` of 5 (``--linger-ms``);
- **reader**: a ``read_committed`` consumer of every partition of the output topic from its
  start, fetching at most 5 ms apart; a record is visible when ``consume`` returns it, and its
  latency is that wall clock time minus its stamp.

It ends when every paced record was seen, or ``--drain`` seconds after the last was sent.

Two ways the test broker (Tansu) differs from Kafka bear on this, both measured:

- it lists a partition's end as the first record of its last produce request plus one, so
  records behind the first of a request are read one checkpoint later, once a later request
  moved the listed end. After the warm-up and after the paced records the probe sends an empty
  record alone to each partition, so nothing waits for good; the mean records of a partition's
  batch while pacing (``batch_records``, librdkafka's own window statistics) bounds how many
  wait during the run (``bench/sinks.py``: ``held_back_share_max``; on Apache Kafka, none);
- it answers a fetch with few record batches, so a backlog written one or two records a
  request is read at some 8,000 records a second a consumer (20,000 records: 2.6 s, against
  0.5 s written a thousand a request, on this machine under load): ``linger.ms`` 0 made a
  10,000/s load unreadable. With 5 ms, requests carry some ten records at 10,000/s.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples.zipf import zipf_sentences  # noqa: E402

STAMP_HEADER = "bench.sent"


def probe_words(args: argparse.Namespace) -> list[str]:
    """The words the probe writes: the warm-up's, then the paced ones (``bench/sinks.py`` too)."""
    total = args.warmup + round(args.rate * args.seconds)
    return zipf_sentences(total, args.vocab, args.seed, words_per_sentence=1)


class Reader(threading.Thread):
    """Reads the output topic ``read_committed``; each stamped id's first visible time."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        super().__init__(daemon=True, name="reader")
        from confluent_kafka import Consumer, TopicPartition

        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"sink-probe-{time.time_ns()}",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "fetch.wait.max.ms": 5,
                "fetch.error.backoff.ms": 5,
            }
        )
        listed = self.consumer.list_topics(topic, timeout=30).topics[topic].partitions
        self.consumer.assign([TopicPartition(topic, p, 0) for p in sorted(listed)])
        self.seen: dict[int, tuple[int, int]] = {}  # id -> (sent ns, visible ns)
        self.stop = threading.Event()
        self.error: str | None = None

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                batch = self.consumer.consume(1000, 0.05)
                visible = time.time_ns()
                for message in batch:
                    if message.error() is not None:
                        continue
                    for name, value in message.headers() or ():
                        if name == STAMP_HEADER and value:
                            rid, sent = value.decode().split(":")
                            self.seen.setdefault(int(rid), (int(sent), visible))
                            break
        except Exception as exc:  # noqa: BLE001 - reported in the figures, never hidden
            self.error = f"{type(exc).__name__}: {exc}"
        finally:
            self.consumer.close()

    def wait_for(self, ids: range, timeout: float) -> bool:
        """Whether every id of ``ids`` was seen within ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.error is None:
            if all(i in self.seen for i in ids):
                return True
            time.sleep(0.02)
        return all(i in self.seen for i in ids)


def batch_records(windows: list[dict[str, Any]], topic: str) -> float | None:
    """The mean records of a partition's batch over librdkafka's statistics ``windows``."""
    counts = [w.get("topics", {}).get(topic, {}).get("batchcnt", {}) for w in windows]
    batches = sum(c.get("cnt", 0) for c in counts)
    records = sum(c.get("cnt", 0) * c.get("avg", 0) for c in counts)
    return round(records / batches, 2) if batches else None


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Warm up, send the paced records, wait for them; the figures (module docstring)."""
    from confluent_kafka import Producer

    words = probe_words(args)
    warm = range(args.warmup)
    paced = range(args.warmup, len(words))
    windows: list[dict[str, Any]] = []  # librdkafka's statistics while pacing
    pacing = threading.Event()
    producer = Producer(
        {
            "bootstrap.servers": args.bootstrap,
            "linger.ms": args.linger_ms,
            "statistics.interval.ms": 500,
            "stats_cb": lambda text: windows.append(json.loads(text)) if pacing.is_set() else None,
        }
    )
    reader = Reader(args.bootstrap, args.out_topic)
    reader.start()

    def send(i: int) -> int:
        stamp = time.time_ns()
        header = [(STAMP_HEADER, f"{i}:{stamp}".encode())]
        while True:
            try:
                producer.produce(
                    args.in_topic, value=words[i].encode(), partition=i % args.partitions,
                    headers=header,
                )  # fmt: skip
                return stamp
            except BufferError:
                producer.poll(0.001)

    def tail() -> None:
        """An empty record alone to each partition: the listed ends reach every record."""
        producer.flush(30)
        for p in range(args.partitions):
            producer.produce(args.in_topic, value=b"", partition=p)
            producer.flush(30)

    started = time.monotonic()
    for i in warm:
        send(i)
    tail()
    warmed = reader.wait_for(warm, args.warmup_timeout)
    warmup_s = time.monotonic() - started
    if not warmed:
        reader.stop.set()
        return {"ok": False, "error": f"warm-up not visible in {args.warmup_timeout} s"}
    lag: list[float] = []  # how late each record went against its schedule, seconds
    pacing.set()
    begin = time.perf_counter()
    i = paced.start
    while i < paced.stop:
        now = time.perf_counter()
        due_until = min(paced.stop, paced.start + int((now - begin) * args.rate) + 1)
        while i < due_until:
            send(i)
            lag.append(time.perf_counter() - (begin + (i - paced.start) / args.rate))
            i += 1
        producer.poll(0)
        time.sleep(0.0005)
    send_s = time.perf_counter() - begin
    producer.poll(0)  # the last window's statistics
    pacing.clear()
    tail()
    all_seen = reader.wait_for(paced, args.drain)
    reader.stop.set()
    reader.join(10)
    producer.flush(10)
    return figures(args, reader, paced, send_s, lag, warmup_s, all_seen, windows)


def figures(
    args: argparse.Namespace,
    reader: Reader,
    paced: range,
    send_s: float,
    lag: list[float],
    warmup_s: float,
    all_seen: bool,
    windows: list[dict[str, Any]],
) -> dict[str, Any]:
    """Latency percentiles and quantiles, rates, and whether the load was sustained."""
    import numpy as np

    seen = [reader.seen[i] for i in paced if i in reader.seen]
    latency = np.array([(v - s) / 1e6 for s, v in seen])  # ms, in id (send) order
    n = len(paced)
    out: dict[str, Any] = {
        "ok": reader.error is None and len(seen) > 0,
        "error": reader.error,
        "offered_per_sec": args.rate,
        "paced_records": n,
        "seen": len(seen),
        "all_seen": all_seen,
        "warmup_s": round(warmup_s, 2),
        "sent_per_sec": round(n / send_s),
        "schedule_lag_ms_p99": round(float(np.percentile(lag, 99)) * 1000, 2) if lag else None,
        "batch_records": batch_records(windows, args.in_topic),
    }
    if not seen:
        return out
    visible = np.array([v for _, v in seen], dtype=float)
    span = (visible.max() - visible.min()) / 1e9
    out["visible_per_sec"] = round(len(seen) / span) if span > 0 else None
    out["latency_ms"] = {
        p: round(float(np.percentile(latency, q)), 1)
        for p, q in (("p50", 50), ("p90", 90), ("p99", 99))
    } | {"max": round(float(latency.max()), 1), "mean": round(float(latency.mean()), 1)}
    third = max(1, len(latency) // 3)
    out["p50_first_third_ms"] = round(float(np.median(latency[:third])), 1)
    out["p50_last_third_ms"] = round(float(np.median(latency[-third:])), 1)
    # The distribution for the plot: every half percent.
    quantiles = np.percentile(latency, np.arange(0, 100.5, 0.5))
    out["quantiles_ms"] = [round(float(q), 1) for q in quantiles]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--in-topic", required=True)
    parser.add_argument("--out-topic", required=True)
    parser.add_argument("--partitions", type=int, required=True, help="of the input topic")
    parser.add_argument("--rate", type=float, required=True, help="records per second")
    parser.add_argument("--seconds", type=float, default=30)
    parser.add_argument("--warmup", type=int, default=200, help="records sent first, at once")
    parser.add_argument("--warmup-timeout", type=float, default=120)
    parser.add_argument("--drain", type=float, default=60, help="seconds to wait after sending")
    parser.add_argument("--linger-ms", type=float, default=5, help="the producer's linger.ms")
    parser.add_argument("--vocab", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    out = run(args)
    print(json.dumps(out))
    return 0 if out["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
