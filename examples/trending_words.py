"""Trending words: the top N words per minute over the last 10 minutes, by the records' own time.

Run it::

    python -m examples.trending_words                     # 6,000 records over 30 minutes, local[2]
    python -m examples.trending_words --records 20000 --minutes 60 --top 5 --json
    python -m examples.trending_words --conf examples/conf/redis.json

The input is synthetic but shaped like a real feed: words drawn from ``examples/zipf.py``'s Zipf
vocabulary, each record ``(id, word, ts)`` stamped with an event time spread evenly over
``--minutes`` of simulated time (starting 2024-01-01 00:00 UTC). Some records come out of order
(``--disorder`` of them, up to 20 s behind the newest, within the lag), and ``--late`` records
are stragglers: stamped in the first half of the period, they arrive after their windows closed.
A last record, stamped one lag after the last window's end, marks the end of the input: it moves
event time past every window, so they all fire.

The topology::

    records (spout) -> parse -> trending (windowed: 10 min sliding every 1 min, event time
                                          from "ts", lag 60 s)  -> results (window -> top N)
                                         \\ late stream "late"  -> late_count (record id -> n)

``trending`` is a ``BaseWindowedBolt``; each window that fires emits ``[end, start, size, top]``
once, and ``results`` keeps it under its end, with how many times it was emitted. Late records go
to the ``late`` stream, and ``late_count`` counts each by id.

Why the stragglers are late for sure: the watermark, not the records, decides lateness, and the
watermark moves with processing time. So the driver sends the stragglers only once
``results`` holds a window ending at the middle of the period, committed: that window fired, so
the committed watermark is past it, and every straggler, stamped before it, is late whatever
the batching or a restart does. The on-time records are never late: each is at most 20 s older
than any record before it, and the lag is 60 s.

At the end it prints each window's top N, and a verdict: every window's result equals a plain
Python computation over the same records (the same windows, counted with a ``Counter``), no
window was emitted twice, and the late records counted are exactly the stragglers. Exit status
0 if all of that holds, 1 if not, 2 on bad input.

With ``--redis-stream KEY`` (and a Redis provider in ``--conf``) the records are read from that
Redis stream through a ``RedisStreamSpout`` instead of from memory, which a restarted driver
resumes: ``examples.window_crash`` runs it so, killing drivers and workers.
"""

from __future__ import annotations

import argparse
import bisect
import collections
import heapq
import itertools
import json
import logging
import random
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

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
from statefulbolts.errors import ConfigError
from statefulbolts.windowing import BaseWindowedBolt, Duration

START_MS = 1_704_067_200_000  # 2024-01-01 00:00 UTC: the simulated period's start
LENGTH = Duration.minutes(10)
SLIDE = Duration.minutes(1)
LAG = Duration.seconds(60)
DISORDER_MS = 20_000  # how far behind the newest record an out-of-order one may be (< LAG)
LATE_STREAM = "late"
RECORD_FIELDS = Fields("id", "word", "ts")


# --------------------------------------------------------------------------- the input
class Record(NamedTuple):
    """One input record: its id, its word, its event time in milliseconds."""

    id: int
    word: str
    ts: int

    def line(self) -> str:
        """The record as a line of text, ``"id word ts"`` (what a stream entry holds)."""
        return f"{self.id} {self.word} {self.ts}"

    @classmethod
    def parse(cls, line: str) -> Record:
        """A record from ``line()``'s form."""
        rid, word, ts = line.split(" ")
        return cls(int(rid), word, int(ts))


@dataclass(frozen=True)
class Input:
    """The synthetic input, in the order it is sent, and what its windows must be.

    ``on_time``: the records sent first (some out of order, none late). ``late``: the
    stragglers, sent once the window ending at ``gate_end`` is committed. ``end``: the end of
    input record, sent last.
    """

    on_time: tuple[Record, ...]
    late: tuple[Record, ...]
    end: Record
    gate_end: int

    @property
    def first_phase(self) -> list[str]:
        """The lines sent at once: the on-time records."""
        return [r.line() for r in self.on_time]

    @property
    def second_phase(self) -> list[str]:
        """The lines sent once the gate window is committed: the stragglers, then the end."""
        return [r.line() for r in (*self.late, self.end)]


def make_input(
    records: int = 6000,
    minutes: int = 30,
    late: int = 40,
    disorder: int = 300,
    vocab: int = 10_000,
    seed: int = 0,
) -> Input:
    """The input for these settings: the same in every process.

    Example:
        >>> data = make_input(records=50, minutes=4, late=3, disorder=5, vocab=100)
        >>> len(data.on_time), len(data.late), data.gate_end - START_MS
        (50, 3, 120000)
        >>> all(r.ts < data.gate_end for r in data.late)
        True
    """
    if minutes < 4 or records < 1 or not 0 <= disorder <= records or late < 0:
        msg = (
            f"the input needs --minutes >= 4, --records >= 1, 0 <= --disorder <= --records and "
            f"--late >= 0, got minutes={minutes}, records={records}, disorder={disorder}, "
            f"late={late}"
        )
        raise ValueError(msg)
    from .zipf import zipf_sentences

    drawn = " ".join(zipf_sentences(-(-(records + late) // 10), vocab, seed)).split()
    rng = random.Random(f"trending/{seed}")
    span = minutes * 60_000
    stamps = [START_MS + i * span // records for i in range(records)]
    for i in rng.sample(range(records), disorder):
        # Behind the newest by at most DISORDER_MS, and not before the period.
        stamps[i] = max(START_MS, stamps[i] - rng.randint(1, DISORDER_MS))
    on_time = tuple(Record(i, drawn[i], ts) for i, ts in enumerate(stamps))
    gate_end = START_MS + (minutes // 2) * 60_000
    late_records = tuple(
        Record(records + j, drawn[records + j], rng.randrange(START_MS, gate_end))
        for j in range(late)
    )
    end = Record(records + late, "(end)", last_window_end(max(stamps)) + LAG.value)
    return Input(on_time, late_records, end, gate_end)


def last_window_end(ts: int) -> int:
    """The end of the last window that holds a record stamped ``ts``."""
    return (ts + LENGTH.value) // SLIDE.value * SLIDE.value


def top_words(words: Sequence[str], n: int) -> list[list[Any]]:
    """The ``n`` most frequent words, as ``[word, count]``, ties by word."""
    counts = collections.Counter(words)
    return [[w, c] for w, c in sorted(counts.items(), key=lambda wc: (-wc[1], wc[0]))[:n]]


def expected_windows(data: Input, top: int) -> dict[int, dict[str, Any]]:
    """Every window that must fire, by end, computed plainly: ``{end: {start, size, top}}``.

    A window ending at ``E`` (a multiple of the slide) holds the on-time records with
    ``E - 10 min <= ts < E``; it fires if it holds any, and once the final watermark (the end
    record minus the lag) has reached ``E``. Late records are in no window.
    """
    ordered = sorted(data.on_time, key=lambda r: r.ts)
    stamps = [r.ts for r in ordered]
    final_watermark = data.end.ts - LAG.value
    first = (stamps[0] // SLIDE.value + 1) * SLIDE.value
    out: dict[int, dict[str, Any]] = {}
    for end in range(first, final_watermark + 1, SLIDE.value):
        lo = bisect.bisect_left(stamps, end - LENGTH.value)
        hi = bisect.bisect_left(stamps, end)
        if hi > lo:
            words = [r.word for r in ordered[lo:hi]]
            out[end] = {"start": end - LENGTH.value, "size": hi - lo, "top": top_words(words, top)}
    return out


# --------------------------------------------------------------------------- the topology
class Feed:
    """Lines a ``FeedSpout`` sends, appended by the driver application while it runs."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self._lock = threading.Lock()

    def extend(self, lines: Sequence[str]) -> None:
        """Add ``lines`` at the end."""
        with self._lock:
            self.lines.extend(lines)

    def get(self, i: int) -> str | None:
        """Line ``i``, or ``None`` if not there yet."""
        with self._lock:
            return self.lines[i] if i < len(self.lines) else None


class FeedSpout(Spout):
    """Emits the lines of a ``Feed`` of this driver process, in order; replays failed ones.

    The spout is copied for its task (as every spout is), so it finds its feed by name in
    ``FEEDS``; the driver application registers it there. Not durable: a driver restart starts
    the feed over (``RedisStreamSpout`` is the durable source).
    """

    FEEDS: ClassVar[dict[str, Feed]] = {}

    def __init__(self, feed: str) -> None:
        self.feed = feed

    def open(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        """Find the feed."""
        found = self.FEEDS.get(self.feed)
        if found is None:
            msg = f"FeedSpout: no feed {self.feed!r} in this process; register it in FEEDS"
            raise LookupError(msg)
        self._lines, self.collector, self.next_index = found, collector, 0
        self.replay: list[int] = []  # a heap: replays go out in input order

    def next_tuple(self) -> None:
        """The oldest replay, else the next line if the feed has it."""
        if self.replay:
            i = heapq.heappop(self.replay)
            line = self._lines.get(i)
        else:
            i = self.next_index
            line = self._lines.get(i)
            if line is None:
                return
            self.next_index += 1
        self.collector.emit([line], message_id=i)

    def fail(self, msg_id: Any) -> None:
        """Send ``msg_id`` again."""
        heapq.heappush(self.replay, msg_id)

    def declare_output_fields(self, declarer: Any) -> None:
        """One field: ``record``."""
        declarer.declare(Fields("record"))


class ParseRecord(BasicBolt):
    """``"id word ts"`` -> ``(id, word, ts)``."""

    def execute(self, tuple: Any, collector: Any) -> None:  # noqa: A002
        """Emit the record's fields, anchored to the line."""
        collector.emit(list(Record.parse(tuple.get_value(0))))

    def declare_output_fields(self, declarer: Any) -> None:
        """``id``, ``word``, ``ts``."""
        declarer.declare(RECORD_FIELDS)


class TrendingWords(BaseWindowedBolt):
    """Each window's top N words: emits ``[end, start, size, top]`` once per window."""

    def __init__(self, top: int) -> None:
        self.top = top

    def execute(self, window: Any) -> None:
        """Count the window's words and emit its top N."""
        words = [t.get_value_by_field("word") for t in window.get()]
        start, end = window.get_start_timestamp(), window.get_end_timestamp()
        self.collector.emit([end, start, len(words), top_words(words, self.top)])  # type: ignore[attr-defined]

    def declare_output_fields(self, declarer: Any) -> None:
        """``end``, ``start``, ``size``, ``top``; the late stream is declared by the executor."""
        declarer.declare(Fields("end", "start", "size", "top"))


class WindowResults(StatefulBolt):
    """Keeps each window's result under its end, with how many times it came (a sink)."""

    def prepare(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        """Keep the collector."""
        self.collector = collector

    def init_state(self, state: Any) -> None:
        """The results, restored to the last commit."""
        self.results = state

    def execute(self, tuple: Any) -> None:  # noqa: A002
        """Store the window's result; count the times it was emitted."""
        end, start, size, top = tuple.values
        before = self.results.get(end)
        times = 1 if before is None else before["emitted"] + 1
        self.results.put(end, {"start": start, "size": size, "top": top, "emitted": times})
        self.collector.ack(tuple)


class LateCount(StatefulBolt):
    """Counts the late records by id: ``{id: times seen}`` (a sink)."""

    def prepare(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        """Keep the collector."""
        self.collector = collector

    def init_state(self, state: Any) -> None:
        """The counts, restored to the last commit."""
        self.late = state

    def execute(self, tuple: Any) -> None:  # noqa: A002
        """One more sighting of this late record."""
        rid = tuple.get_value(0).get_value_by_field("id")
        self.late.put(rid, self.late.get(rid, 0) + 1)
        self.collector.ack(tuple)


def build(spout: Spout, top: int = 5) -> StormTopology:
    """records -> parse -> trending (windowed) -> results, and its late stream -> late_count."""
    trending = (
        TrendingWords(top)
        .with_window(LENGTH, SLIDE)
        .with_timestamp_field("ts")
        .with_lag(LAG)
        .with_late_tuple_stream(LATE_STREAM)
    )
    builder = TopologyBuilder()
    builder.set_spout("records", spout, 1)
    # One task each up to the window: records reach it in input order (the lag covers the rest).
    builder.set_bolt("parse", ParseRecord(), 1).shuffle_grouping("records")
    builder.set_bolt("trending", trending, 1).shuffle_grouping("parse")
    builder.set_bolt("results", WindowResults(), 1).shuffle_grouping("trending")
    builder.set_bolt("late_count", LateCount(), 1).shuffle_grouping("trending", LATE_STREAM)
    return builder.create_topology()


def stream_spout(stream: str, url: str) -> Spout:
    """The durable source: a ``RedisStreamSpout`` over ``stream``, entries ``{"record": line}``."""
    from statefulbolts.connectors import RedisStreamSpout

    return RedisStreamSpout(stream, redis_url=url, fields=("record",), batch=200)


# --------------------------------------------------------------------------- the verdict
def verdict(
    data: Input, top: int, results: Mapping[Any, Any], late: Mapping[Any, Any]
) -> dict[str, Any]:
    """What the committed results say, against the plain computation."""
    want = expected_windows(data, top)
    got = {int(end): value for end, value in results.items()}
    rows = []
    for end in sorted(set(want) | set(got)):
        w, g = want.get(end), got.get(end)
        same = (
            g is not None
            and w is not None
            and (g["start"], g["size"], [list(x) for x in g["top"]])
            == (w["start"], w["size"], w["top"])
        )
        rows.append(
            {
                "end": end,
                "expected": w is not None,
                "emitted": 0 if g is None else g["emitted"],
                "equal": same,
                "size": None if g is None else g["size"],
                "top": None if g is None else g["top"],
            }
        )
    late_ids = {int(k): v for k, v in late.items()}
    want_late = {r.id for r in data.late}
    out = {
        "windows": rows,
        "windows_expected": len(want),
        "windows_equal": sum(1 for r in rows if r["equal"] and r["emitted"] == 1),
        "windows_emitted_twice": [r["end"] for r in rows if r["emitted"] > 1],
        "late_expected": len(want_late),
        "late_counted": sum(late_ids.values()),
        "late_exact": set(late_ids) == want_late and all(v == 1 for v in late_ids.values()),
    }
    out["exact"] = out["windows_equal"] == len(want) == len(rows) and out["late_exact"]
    return out


def complete(data: Input, results: Mapping[Any, Any], late: Mapping[Any, Any]) -> bool:
    """Whether every window and every late record has reached the sinks (right or not)."""
    want = expected_windows_ends(data)
    return want <= {int(k) for k in results} and len(late) >= len(data.late)


def expected_windows_ends(data: Input) -> set[int]:
    """The ends of the windows that must fire (``expected_windows`` without the counting)."""
    return set(expected_windows(data, 1))


def wait_for(check: Callable[[], bool], timeout: float, what: str, poll: float = 0.2) -> None:
    """Return once ``check()`` holds; ``TimeoutError`` naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            msg = f"waited {timeout} s for {what}; raise --timeout, or see the driver's log"
            raise TimeoutError(msg)
        time.sleep(poll)


# --------------------------------------------------------------------------- the run
def main(argv: list[str] | None = None, *, spark: Any = None) -> int:
    """Run the trending words topology and check it (on ``spark``, a SparkSession, when given)."""
    parser = argparse.ArgumentParser(
        prog="python -m examples.trending_words", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--records", type=int, default=6000, help="on-time records (6000)")
    parser.add_argument("--minutes", type=int, default=30, help="simulated minutes (30)")
    parser.add_argument("--late", type=int, default=40, help="late records (default 40)")
    parser.add_argument("--disorder", type=int, default=300, help="out-of-order records (300)")
    parser.add_argument("--vocab", type=int, default=10_000, help="Zipf vocabulary (10000)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the input (default 0)")
    parser.add_argument("--top", type=int, default=5, help="top N words per window (default 5)")
    parser.add_argument("--master", default="local[2]", help="Spark master (default local[2])")
    parser.add_argument("--conf", help="JSON or YAML file of topology config keys")
    parser.add_argument("--name", default="trending-words", help="topology name")
    parser.add_argument(
        "--redis-stream", help="read the records from this Redis stream (Redis provider only)"
    )
    parser.add_argument("--timeout", type=float, default=600, help="seconds to wait for the end")
    parser.add_argument("--events", action="store_true", help="each transaction as a JSON line")
    parser.add_argument("--json", action="store_true", help="print one JSON document at the end")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        data = make_input(
            args.records, args.minutes, args.late, args.disorder, args.vocab, args.seed
        )
    except ValueError as exc:
        parser.error(str(exc))
    try:
        return _run(args, data, spark)
    except StatefulBoltsError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2


def _run(args: argparse.Namespace, data: Input, spark: Any) -> int:
    from statefulbolts import LocalCluster
    from statefulbolts._output import print_event, print_line

    conf = Config.from_file(args.conf) if args.conf else Config()
    conf.setdefault("topology.max.spout.pending", 500)
    say = (lambda text: None) if args.json or args.events else print_line
    if args.redis_stream:
        url = _redis_url(conf)
        spout = stream_spout(args.redis_stream, url)
        second_phase = _stream_appender(url, args.redis_stream, data)
    else:
        feed = Feed()
        feed.extend(data.first_phase)
        FeedSpout.FEEDS[args.name] = feed
        spout = FeedSpout(args.name)

        def second_phase() -> None:
            feed.extend(data.second_phase)

    def progress(info: Any) -> None:
        if args.events:
            print_event({"event": "transaction", **info.as_dict()})

    if not args.json:
        print_line(f"topology: {args.name}")
    say(
        f"{len(data.on_time)} records over {args.minutes} simulated minutes ({args.disorder} out "
        f"of order), then {len(data.late)} late ones; top {args.top} per 10 min sliding 1 min"
    )
    started = time.perf_counter()
    cluster = LocalCluster(spark=spark) if spark is not None else LocalCluster(args.master)
    with cluster:
        handle = cluster.submit_topology(
            args.name, conf, build(spout, args.top), on_transaction=progress
        )
        gate = data.gate_end

        def gate_fired() -> bool:
            return gate in {int(k) for k in handle.read_state("results")}

        wait_for(gate_fired, args.timeout, f"the window ending at {gate} to be committed")
        say("the window of the period's middle is committed: sending the late records")
        second_phase()
        wait_for(
            lambda: complete(data, handle.read_state("results"), handle.read_state("late_count")),
            args.timeout,
            "every window and late record to be committed",
        )
        handle.await_idle(args.timeout)
        results, late = handle.read_state("results"), handle.read_state("late_count")
        transactions = len(handle.metrics()["transactions"])
        handle.kill()
    FeedSpout.FEEDS.pop(args.name, None)
    found = verdict(data, args.top, results, late)
    found.update(
        topology=args.name,
        records=len(data.on_time),
        seconds=round(time.perf_counter() - started, 2),
        transactions=transactions,
    )
    if args.json:
        print(json.dumps(found, indent=2))
    elif not args.events:
        _print_summary(found, args.top)
    return 0 if found["exact"] else 1


def _redis_url(conf: Mapping[str, Any]) -> str:
    provider = conf.get("topology.state.provider.config") or {}
    url = (provider.get("redisConfig") or {}).get("url")
    if not url:
        msg = (
            "--redis-stream needs a Redis provider in --conf: topology.state.provider.config "
            '{"redisConfig": {"url": "redis://..."}}'
        )
        raise ConfigError(msg)
    return str(url)


def _stream_appender(url: str, stream: str, data: Input) -> Callable[[], None]:
    """Appends the second phase once: a restarted driver finds it there and adds nothing."""

    def append() -> None:
        from providers.redis import connect

        client = connect(url, purpose="the trending words stream")
        try:
            if client.xlen(stream) == len(data.on_time):
                pipe = client.pipeline(transaction=True)  # all or nothing, if killed meanwhile
                for line in data.second_phase:
                    pipe.xadd(stream, {"record": line})
                pipe.execute()
        finally:
            client.close()

    return append


def _print_summary(found: dict[str, Any], top: int) -> None:
    def clock(ms: int) -> str:
        return time.strftime("%H:%M", time.gmtime(ms / 1000))

    print(f"\n{'window (UTC)':<13} {'records':>7}  {'emitted':>7}  {'plain':<5}  top {top}")
    for row in found["windows"]:
        top_text = ", ".join(f"{w} {c}" for w, c in itertools.islice(row["top"] or [], top))
        span = f"{clock(row['end'] - LENGTH.value)}-{clock(row['end'])}"
        equal = "equal" if row["equal"] else ("MISSING" if row["emitted"] == 0 else "DIFFERS")
        print(f"{span:<13} {row['size'] or 0:>7}  {row['emitted']:>7}  {equal:<5}  {top_text}")
    print(
        f"\n{found['windows_equal']} of {found['windows_expected']} windows emitted once and "
        f"equal to a plain Python computation; emitted twice: "
        f"{found['windows_emitted_twice'] or 'none'}"
    )
    print(
        f"late records counted: {found['late_counted']} of {found['late_expected']} stragglers, "
        f"{'each exactly once' if found['late_exact'] else 'NOT the expected ones'}"
    )
    print(
        f"verdict: {'exact' if found['exact'] else 'NOT EXACT'} ({found['records']} records, "
        f"{found['transactions']} transactions, {found['seconds']} s)"
    )


if __name__ == "__main__":
    # Run from the package's module, not __main__: the spout finds its feed in the class the
    # topology's copies refer to.
    import importlib

    sys.exit(importlib.import_module(__spec__.name).main())
