"""Driver CPU and wall seconds per million spout tuples: a partitioned spout against a driver spout.

A no-op counting topology (``lines -> count``: a stateful bolt that counts the tuples it gets
and acks each) over the same lines, twice: read by a ``DirectorySpout`` in the PREPARE jobs'
tasks, and emitted by a plain ``Spout`` in the driver. The figures are the driver process's CPU
time (``resource.getrusage``, user + system, of this Python process: not Spark's JVM, not its
Python workers) and the wall time, from submit to the last commit, per million tuples. On the
inline engine the tasks run in the driver process too, so there the CPU is the whole topology's
cost; on Spark it is what the driver itself spends. The counts are checked in every run.

A warm-up run of each kind comes first (it starts the Python workers and loads the code: the
first run of a session pays some seconds for it, whichever kind it is); then ``--rounds``
rounds, the two kinds in alternating order, and the ratio of their wall times within each
round (partitioned / driver: below 1, the partitioned spout is faster). ``--grouping`` is how
``count`` takes its input: ``shuffle`` (a Spark shuffle after the partitioned spout's read
stage) or ``local_or_shuffle`` (spout task i feeds count task i: one chained stage).

    python -m bench.driver_cpu --engine spark --records 1000000 --rounds 3
    python -m bench.driver_cpu --engine spark --grouping local_or_shuffle --json
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from statefulbolts import (
    DirectorySpout,
    Fields,
    LocalCluster,
    Spout,
    StatefulBolt,
    TopologyBuilder,
)


class Lines(Spout):
    """The lines of ``files`` in the driver, shared out by task, tracked by their index."""

    def __init__(self, files: list[str]) -> None:
        self.files = files

    def open(self, conf: Any, context: Any, collector: Any) -> None:
        """Read this task's share of the lines (every n-th, n the tasks)."""
        self.collector, self.i = collector, 0
        lines = [line for f in self.files for line in Path(f).read_text().splitlines()]
        tasks = len(context.component_tasks(context.this_component_id))
        self.lines = lines[context.this_task_index :: tasks]

    def next_tuple(self) -> None:
        """The next line."""
        if self.i < len(self.lines):
            self.collector.emit([self.lines[self.i]], message_id=self.i)
            self.i += 1

    def declare_output_fields(self, declarer: Any) -> None:
        """``line``."""
        declarer.declare(Fields("line"))


class Count(StatefulBolt):
    """Counts its tuples; the count goes into the state once per transaction."""

    def prepare(self, conf: Any, context: Any, collector: Any) -> None:
        """Keep the collector."""
        self.collector, self.n = collector, 0
        self.key = f"n{context.this_task_index}"  # merged over tasks: one key each

    def init_state(self, state: Any) -> None:
        """The committed count."""
        self.state = state
        self.n = state.get(self.key, 0)

    def execute(self, tuple: Any) -> None:  # noqa: A002 - Storm's name
        """Count and ack."""
        self.n += 1
        self.collector.ack(tuple)

    def pre_prepare(self, txid: int) -> None:
        """Put the count before the state prepares."""
        self.state.put(self.key, self.n)


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run(
    cluster: Any,
    kind: str,
    files: list[str],
    records: int,
    conf: dict[str, Any],
    grouping: str = "shuffle",
) -> dict:
    """One run of ``kind`` ("partitioned" or "driver"); its driver CPU and wall seconds.

    ``jobs_s``: the seconds the transactions' jobs ran, summed; the rest of the wall is the
    driver between jobs (and the submit): what an overlap of the next job's start with the
    current one could save at most. Spark only: an inline job runs within its submit, so its
    seconds are not counted there.
    """
    builder = TopologyBuilder()
    spout = DirectorySpout(str(Path(files[0]).parent)) if kind == "partitioned" else Lines(files)
    builder.set_spout("lines", spout, 2)
    getattr(builder.set_bolt("count", Count(), 2), f"{grouping}_grouping")("lines")
    cpu, wall = _cpu(), time.perf_counter()
    name = f"cpu-{kind}-{time.time_ns()}"
    infos: list[Any] = []
    handle = cluster.submit_topology(
        name, conf, builder.create_topology(), on_transaction=infos.append
    )
    handle.await_idle(3600)
    cpu, wall = _cpu() - cpu, time.perf_counter() - wall
    counted = sum(handle.read_state("count").values())
    handle.kill()
    if counted != records:
        msg = f"{kind}: counted {counted} tuples, expected {records}"
        raise AssertionError(msg)
    return {
        "spout": kind,
        "cpu_s": round(cpu, 2),
        "wall_s": round(wall, 2),
        "jobs_s": round(sum(i.seconds for i in infos), 2),
        "transactions": sum(1 for i in infos if str(i.action) == "PREPARE"),
        "cpu_s_per_million": round(cpu * 1e6 / records, 2),
    }


def write_corpus(folder: Path, records: int, files: int) -> list[str]:
    """``files`` files of ``records // files`` lines each in ``folder``; their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    per = records // files
    paths = []
    for i in range(files):
        path = folder / f"part-{i}.txt"
        path.write_text("".join(f"line {i} {j}\n" for j in range(per)))
        paths.append(str(path))
    return paths


def main() -> None:
    """Write the corpus, warm up, run both spouts in alternating rounds; the figures as JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=["inline", "spark"], default="inline")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--grouping", choices=["shuffle", "local_or_shuffle"], default="shuffle")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = parser.parse_args()
    base = Path(tempfile.mkdtemp(prefix="driver-cpu-"))
    files = write_corpus(base / "corpus", args.records, args.files)
    warm_each = max(1, args.records // 10 // args.files)  # a tenth of the lines
    warm = write_corpus(base / "warm", warm_each * args.files, args.files)
    records = len(files) * (args.records // args.files)
    conf = {"topology.max.spout.pending": 100_000, "topology.state.checkpoint.interval.ms": 50}
    if args.engine == "spark":
        from statefulbolts.runtime import build_session

        cluster = LocalCluster(spark=build_session("local[2]", app_name="driver-cpu"))
    else:
        cluster = LocalCluster(engine="inline")
    runs: list[dict[str, Any]] = []
    ratios: list[float] = []
    with cluster:
        for kind in ("partitioned", "driver"):
            run(cluster, kind, warm, warm_each * args.files, conf, args.grouping)
        for r in range(args.rounds):
            order = ("partitioned", "driver") if r % 2 == 0 else ("driver", "partitioned")
            walls = {}
            for kind in order:
                got = {"round": r, **run(cluster, kind, files, records, conf, args.grouping)}
                walls[kind] = got["wall_s"]
                runs.append(got)
                print(
                    f"[round {r + 1}/{args.rounds}] {json.dumps(got)}", file=sys.stderr, flush=True
                )
            ratios.append(round(walls["partitioned"] / walls["driver"], 3))
    result = {
        "engine": args.engine,
        "records": records,
        "grouping": args.grouping,
        "runs": runs,
        "wall_ratio_partitioned_over_driver": ratios,
        "wall_ratio_median": statistics.median(ratios),
    }
    for kind in ("partitioned", "driver"):
        mine = [x for x in runs if x["spout"] == kind]
        result[f"{kind}_wall_s_median"] = statistics.median(x["wall_s"] for x in mine)
        result[f"{kind}_cpu_s_per_million_median"] = statistics.median(
            x["cpu_s_per_million"] for x in mine
        )
        if args.engine == "spark":
            result[f"{kind}_between_jobs_share_median"] = round(
                statistics.median(1 - x["jobs_s"] / x["wall_s"] for x in mine), 3
            )
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(
            f"{args.engine}, {records:,} lines, count by {args.grouping} grouping: wall "
            f"partitioned {result['partitioned_wall_s_median']} s, driver "
            f"{result['driver_wall_s_median']} s (medians); partitioned / driver per round "
            f"{ratios}, median {result['wall_ratio_median']}; driver CPU s per 1M tuples: "
            f"partitioned {result['partitioned_cpu_s_per_million_median']}, driver "
            f"{result['driver_cpu_s_per_million_median']}"
            + (
                f"; share of the wall between jobs: partitioned "
                f"{result['partitioned_between_jobs_share_median']}, driver "
                f"{result['driver_between_jobs_share_median']}"
                if args.engine == "spark"
                else ""
            )
        )


if __name__ == "__main__":
    main()
