"""Driver CPU seconds per million spout tuples: a partitioned spout against a driver spout.

A no-op counting topology (``lines -> count``: a stateful bolt that counts the tuples it gets
and acks each) over the same lines, twice: read by a ``DirectorySpout`` in the PREPARE jobs'
tasks, and emitted by a plain ``Spout`` in the driver. The figure is the driver process's CPU
time (``resource.getrusage``, user + system, of this Python process: not Spark's JVM, not its
Python workers) from submit to the last commit, per million tuples. On the inline engine the
tasks run in the driver process too, so there it is the whole topology's cost; on Spark it is
what the driver itself spends. The counts are checked in every run.

    python -m bench.driver_cpu --engine inline --records 1000000
    python -m bench.driver_cpu --engine spark --records 1000000
"""

from __future__ import annotations

import argparse
import json
import resource
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


def run(cluster: Any, kind: str, files: list[str], records: int, conf: dict[str, Any]) -> dict:
    """One run of ``kind`` ("partitioned" or "driver"); its driver CPU and wall seconds."""
    builder = TopologyBuilder()
    spout = DirectorySpout(str(Path(files[0]).parent)) if kind == "partitioned" else Lines(files)
    builder.set_spout("lines", spout, 2)
    builder.set_bolt("count", Count(), 2).shuffle_grouping("lines")
    cpu, wall = _cpu(), time.perf_counter()
    name = f"cpu-{kind}-{time.time_ns()}"
    handle = cluster.submit_topology(name, conf, builder.create_topology())
    handle.await_idle(3600)
    cpu, wall = _cpu() - cpu, time.perf_counter() - wall
    counted = sum(handle.read_state("count").values())
    handle.kill()
    if counted != records:
        msg = f"{kind}: counted {counted} tuples, expected {records}"
        raise AssertionError(msg)
    return {"spout": kind, "cpu_s": round(cpu, 2), "wall_s": round(wall, 2),
            "cpu_s_per_million": round(cpu * 1e6 / records, 2)}


def main() -> None:
    """Write the corpus, run both spouts, print one JSON line per run."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=["inline", "spark"], default="inline")
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--files", type=int, default=4)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="driver-cpu-"))
    per = args.records // args.files
    files = []
    for i in range(args.files):
        path = folder / f"part-{i}.txt"
        path.write_text("".join(f"line {i} {j}\n" for j in range(per)))
        files.append(str(path))
    records = per * args.files
    conf = {"topology.max.spout.pending": 100_000, "topology.state.checkpoint.interval.ms": 50}
    if args.engine == "spark":
        from statefulbolts.runtime import build_session

        cluster = LocalCluster(spark=build_session("local[2]", app_name="driver-cpu"))
    else:
        cluster = LocalCluster(engine="inline")
    with cluster:
        for kind in ("partitioned", "driver", "partitioned", "driver"):
            print(json.dumps({"engine": args.engine, "records": records,
                              **run(cluster, kind, files, records, conf)}), flush=True)


if __name__ == "__main__":
    main()
