"""Latency: a spout paced at a steady rate, time from each tuple's emit to its spout ``ack``.

    python bench/latency.py                              # 1k, 10k, 100k tuples/s, 20 s each
    python bench/latency.py --rates 1000,10000 --seconds 30 --json
    python bench/latency.py --provider redis             # Redis state (own redis-server)
    python bench/latency.py --no-spark-ui                # skip Spark's per-job / stage figures
    python bench/latency.py --rates 1000,10000 --commit-location executors  # COMMIT as a job
    python bench/latency.py --rates 1000,10000 --cadence interval  # Storm's PREPARE cadence
    python bench/latency.py --rates 1000,10000 --driver-head never  # the split on Spark, always
    python bench/latency.py --rates 1000,10000 --standalone  # a standalone master + 2 workers

It takes about 2 to 3 minutes with the defaults on 2 cores (a rate the topology cannot keep up
with drains its backlog before the next rate starts), about 70 s for ``--rates 1000,10000``.

A ``PacedSpout`` emits one Zipf sentence (``examples/zipf.py``: 10 words over ``--vocab`` words,
the word count bench's corpus, cycled) per ``next_tuple`` while it is behind a wall-clock
schedule of ``rate`` tuples/s, each anchored with its index as message id, into the stateful
word count (split -> count, ``--parallelism`` tasks each) with a 100 ms checkpoint interval on
``local[2]``. The spout keeps each tuple's emit time and the time the runtime called its
``ack`` (on the driver, once the transaction that carried it committed), so every tuple gets
its latency; the script reports p50 / p90 / p99 / max per rate, and the rate achieved. A rate
the topology cannot sustain shows as ``sustained: NO``: the spout fell behind its schedule
(``achieved`` below ``target``; it stops adding new tuples ``--max-stretch`` times the planned
duration in, whatever it managed), or the acks did not keep up (``acked/s``, tuples acked over
the time from the first emit to the last ack, below 0.9 of the target), and the latency then
grows through the run (``latency_first_third_ms`` vs ``latency_last_third_ms``). The tuples'
lag behind their schedule is given too (``schedule_lag``: what an open-loop client would add).

Where the time goes: the script wraps the engine's ``submit`` / ``run`` to stamp every job
(submitted, started on the engine's thread, done) and takes the ``on_transaction`` callback,
then splits each tuple's latency into

- ``buffer``: emit -> the PREPARE that carried it is submitted (waiting in the spout buffer
  for the next checkpoint: the checkpoint interval, or the previous transaction's jobs);
- ``prepare``: that PREPARE job, submit to done;
- ``to_commit``: PREPARE done -> its COMMIT submitted (the driver settles the PREPARE, saves
  COMMITTING);
- ``commit``: the COMMIT job;
- ``ack``: COMMIT done -> the spout's ``ack`` (the driver notices, settles, acks).

The five add up to the latency exactly. With Spark's UI on (the default here, loopback only)
it also reads Spark's REST API for each PREPARE / COMMIT job: Spark's own span of the job, its
stages and their task run times, so a job's time splits into "Python driver outside Spark"
(building the job, pickling its input and state images, collecting and merging results), Spark
scheduling and shuffle, and task run time. Everything is also given relative to two baselines
measured in the same session after warm-up: an empty one-stage Python job and an empty
two-stage (shuffled) Python job, the floor any batch Spark runs pays (a tuple needs at least a
two-stage PREPARE and a one-stage COMMIT).

``--commit-location`` sets ``topology.state.commit.location``: "auto" (the default) lets the
driver do each COMMIT itself, no Spark job (``WordCount`` has no ``pre_commit``); "executors"
runs every COMMIT as a job, as before that existed. A driver COMMIT is stamped like a job
(submitted, started and done at the driver's call), so the breakdown keeps its five parts.
``--driver-head`` sets ``topology.driver.head``: "auto" (the default) lets the driver run a
small PREPARE's split itself, so Spark runs the count alone, one stage; "never" keeps the
split on Spark (two stages, as before that existed); "always" moves it whatever the batch.

``--standalone`` starts a Spark standalone master and two workers (one core, 1 GiB each) on
127.0.0.1 (``tests/standalone_cluster.py``'s ``start_standalone``, as ``bench/ingest.py`` does)
and runs the driver against it instead of ``--master``: tasks run in executors of their own,
and state images and results cross a real block manager.

The counts are checked against a plain Python count of what the spout emitted: they must be
exact (exit status 1 otherwise).
"""

from __future__ import annotations

import argparse
import array
import collections
import contextlib
import json
import math
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples.corpus import words  # noqa: E402
from examples.wordcount import SplitSentence, WordCount  # noqa: E402
from examples.zipf import zipf_sentences  # noqa: E402
from statefulbolts import Fields, Spout, StormTopology, TopologyBuilder  # noqa: E402

# The live spouts of this driver, by key. A spout given to a topology is copied (cloudpickle)
# before it is opened; its ``open`` registers the copy the runtime calls here. This module is
# imported by reference (see ``__main__`` below), so the copy sees this very dict.
REGISTRY: dict[str, PacedSpout] = {}

PERCENTILES = (50, 90, 99)


# ----------------------------------------------------------------------------- sentence sources
class CycledCorpus:
    """Sentence ``i`` is ``corpus[i % len(corpus)]``; counts of the first ``n`` are cheap."""

    def __init__(self, corpus: Sequence[str]) -> None:
        self.corpus = list(corpus)

    def sentence(self, i: int) -> str:
        """The ``i``-th sentence."""
        return self.corpus[i % len(self.corpus)]

    def expected(self, n: int) -> collections.Counter[str]:
        """Word counts of sentences ``0 .. n - 1``."""
        full, rest = divmod(n, len(self.corpus))
        counts: collections.Counter[str] = collections.Counter()
        if full:
            one = collections.Counter(w for text in self.corpus for w in words(text))
            counts.update({w: c * full for w, c in one.items()})
        counts.update(w for text in self.corpus[:rest] for w in words(text))
        return counts


# ----------------------------------------------------------------------------- what the spout keeps
class FullRecord:
    """Every tuple's emit time and ack time, in arrays indexed by message id (``total`` ids)."""

    def __init__(self, total: int) -> None:
        self.emit_at = array.array("d", [0.0]) * total
        self.ack_at = array.array("d", [0.0]) * total
        self.acked = 0

    def emitted(self, i: int, now: float) -> None:
        """Tuple ``i`` left the spout at ``now`` (a replay keeps its first emit)."""
        if not self.emit_at[i]:
            self.emit_at[i] = now

    def ack(self, i: int, now: float) -> None:
        """Tuple ``i`` was acked at ``now``."""
        self.ack_at[i] = now
        self.acked += 1


class PacedSpout(Spout):
    """Emits sentence ``i`` with message id ``i`` at ``rate`` per second of wall clock.

    It emits nothing until ``arm()`` (so the bench can instrument the runtime first), then at
    most one tuple per ``next_tuple`` while behind its schedule (``t0 + i / rate``), and stops
    at ``total`` tuples or, if it fell behind, when ``max_seconds`` have passed since ``t0``.
    Failed tuples are emitted again (first), keeping their first emit time.
    """

    def __init__(
        self,
        source: Any,
        rate: float,
        total: int,
        key: str,
        *,
        max_seconds: float | None = None,
        record: Callable[[int], Any] = FullRecord,
    ) -> None:
        self.source = source
        self.rate = float(rate)
        self.total = total
        self.key = key
        self.max_seconds = max_seconds
        self._make_record = record

    def open(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        """Register this copy, make the record."""
        self.collector = collector
        self.record = self._make_record(self.total)
        self.next_id = 0
        self.t0: float | None = None
        self.last_emit = 0.0
        self.armed = False
        self.closed = False  # no more new tuples (all emitted, or out of time)
        self.replay: collections.deque[int] = collections.deque()
        self.live_text: dict[int, str] = {}
        self.failed = 0
        self.acked = 0
        REGISTRY[self.key] = self

    def arm(self) -> None:
        """Start the clock on the next ``next_tuple``."""
        self.armed = True

    def next_tuple(self) -> None:
        """Emit a replay, or the next tuple if the schedule says it is due."""
        now = time.perf_counter()
        if self.replay:
            i = self.replay.popleft()
            self.collector.emit([self.live_text[i]], message_id=i)
            return
        if not self.armed or self.closed:
            return
        if self.t0 is None:
            self.t0 = now
        i = self.next_id
        elapsed = now - self.t0
        if i >= self.total or (self.max_seconds is not None and elapsed > self.max_seconds):
            self.closed = True
            return
        if i >= elapsed * self.rate:
            return  # ahead of the schedule
        text = self.source.sentence(i)
        self.live_text[i] = text
        self.next_id = i + 1
        self.last_emit = now
        self.record.emitted(i, now)
        self.collector.emit([text], message_id=i)

    def ack(self, msg_id: Any) -> None:
        """The tuple's transaction committed."""
        self.record.ack(msg_id, time.perf_counter())
        self.live_text.pop(msg_id, None)
        self.acked += 1

    def fail(self, msg_id: Any) -> None:
        """Emit it again."""
        self.failed += 1
        self.replay.append(msg_id)

    def declare_output_fields(self, declarer: Any) -> None:
        """One field: ``sentence``."""
        declarer.declare(Fields("sentence"))


def build(spout: Spout, parallelism: int) -> StormTopology:
    """The stateful word count behind ``spout``."""
    builder = TopologyBuilder()
    builder.set_spout("sentences", spout, 1)
    builder.set_bolt("split", SplitSentence(), parallelism).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(), parallelism).fields_grouping("split", Fields("word"))
    return builder.create_topology()


# ----------------------------------------------------------------------------- job timestamps
@dataclass
class JobStamp:
    """One engine job as the driver saw it (``time.perf_counter`` seconds)."""

    action: str
    txid: int
    submitted: float
    started: float = math.nan  # the engine's thread began ``run``
    done: float = math.nan  # its future completed (on the engine's thread)
    settled: float = math.nan  # the driver's ``on_transaction`` (after the acks of a COMMIT)
    ok: bool = True
    task_seconds: float = 0.0  # the framework's own time in the job's tasks (their reports)
    tasks: int = 0
    phases: dict[str, float] = field(default_factory=dict)  # the runner's (TransactionInfo)
    cut: float = math.nan  # a late-cut job's tuples taken (``topology.input.cut`` task-start)


@dataclass
class JobClock:
    """Stamps every job of one topology's engine, and its ``on_transaction`` calls."""

    jobs: list[JobStamp] = field(default_factory=list)
    _by_key: dict[tuple[str, int], JobStamp] = field(default_factory=dict)
    _local: threading.local = field(default_factory=threading.local)

    def attach(self, engine: Any, jobs: Any = None) -> None:
        """Wrap ``engine.submit`` and ``engine.run`` on this instance only.

        With ``jobs`` (the runner's ``CheckpointJobs``) a COMMIT the driver does itself
        (``commit_here``, no Spark job) is stamped too: submitted and started when the driver
        calls it, done when it returns.
        """
        submit, run = engine.submit, engine.run

        def stamped_submit(spec: Any) -> Any:
            stamp = JobStamp(spec.action, spec.txid, time.perf_counter())
            self.jobs.append(stamp)
            self._by_key[(spec.action, spec.txid)] = stamp
            late = getattr(spec, "late", None)
            if late is not None:  # stamp the cut, when the first task asks
                give = late.give

                def stamped_give(records: Any, give: Any = give, stamp: JobStamp = stamp) -> None:
                    stamp.cut = time.perf_counter()
                    give(records)

                late.give = stamped_give
            future = submit(spec)
            future.add_done_callback(lambda _f: setattr(stamp, "done", time.perf_counter()))
            return future

        def stamped_run(spec: Any) -> Any:
            stamp = self._by_key.get((spec.action, spec.txid))
            if stamp is not None:
                stamp.started = time.perf_counter()
            result = run(spec)
            if stamp is not None:
                # Spark's tasks only: a head the driver ran is not in Spark's figures.
                here = result.timings.head_stages if result.timings is not None else 0
                stage_of = spec.layout.stage_of
                spark_run = [r for r in result.reports if (stage_of[r.comp] or 0) >= here]
                stamp.task_seconds = sum(r.metrics.seconds for r in spark_run)
                stamp.tasks = len(spark_run)
            return result

        if jobs is not None:
            commit_here = jobs.commit_here

            def stamped_commit(txid: int) -> Any:
                stamp = JobStamp("COMMIT", txid, time.perf_counter())
                stamp.started = stamp.submitted
                self.jobs.append(stamp)
                self._by_key[("COMMIT", txid)] = stamp
                found = commit_here(txid)
                stamp.done = time.perf_counter()
                return found

            jobs.commit_here = stamped_commit
        engine.submit = stamped_submit
        engine.run = stamped_run

    def on_transaction(self, info: Any) -> None:
        """The driver settled a job."""
        stamp = self._by_key.get((info.action or "BATCH", info.txid))
        if stamp is not None:
            stamp.settled = time.perf_counter()
            stamp.ok = info.ok
            stamp.phases = dict(info.phases)


# ----------------------------------------------------------------------------- statistics
def pct(values: Any, ps: Sequence[float] = PERCENTILES) -> dict[str, float]:
    """p50 / p90 / p99 / max / mean of ``values`` (seconds) in milliseconds."""
    import numpy as np

    a = np.asarray(values, dtype=float)
    if a.size == 0:
        return {}
    out = {f"p{p:g}": round(float(np.percentile(a, p)) * 1000, 2) for p in ps}
    out["max"] = round(float(a.max()) * 1000, 2)
    out["mean"] = round(float(a.mean()) * 1000, 2)
    return out


def stage_split(record: FullRecord, n: int, stamps: list[JobStamp]) -> dict[str, Any]:
    """Each acked tuple's latency split into buffer / prepare / to_commit / commit / ack (s)."""
    import numpy as np

    emit = np.frombuffer(record.emit_at, dtype=float)[:n]
    ack = np.frombuffer(record.ack_at, dtype=float)[:n]
    prepares = sorted(
        (s for s in stamps if s.action == "PREPARE" and s.ok), key=lambda s: s.submitted
    )
    commits = {s.txid: s for s in stamps if s.action == "COMMIT" and s.ok}
    if not prepares:
        return {}
    p_sub = np.array([_taken(s) for s in prepares])
    p_done = np.array([s.done for s in prepares])
    c_sub = np.array([commits[s.txid].submitted if s.txid in commits else np.nan for s in prepares])
    c_done = np.array([commits[s.txid].done if s.txid in commits else np.nan for s in prepares])
    # A tuple rides the first PREPARE whose buffer was taken after its emit: the driver thread
    # takes the whole buffer (at submit, or at a late cut), and emits happen on that thread.
    k = np.searchsorted(p_sub, emit, side="right")
    ok = (ack > 0) & (k < len(prepares))
    k = np.where(ok, k, 0)
    parts = {
        "buffer": p_sub[k] - emit,
        "prepare": p_done[k] - p_sub[k],
        "to_commit": c_sub[k] - p_done[k],
        "commit": c_done[k] - c_sub[k],
        "ack": ack - c_done[k],
    }
    # Keep tuples whose COMMIT we saw and whose ack came after it (no replay in between).
    keep = ok & ~np.isnan(c_done[k]) & (parts["ack"] >= 0)
    total = ack - emit
    out: dict[str, Any] = {"tuples": int(keep.sum())}
    for name, v in parts.items():
        out[name] = pct(v[keep])
        out[name]["share"] = round(float(v[keep].sum() / total[keep].sum()), 3) if keep.any() else 0
    return out


def _taken(stamp: JobStamp) -> float:
    """When a PREPARE took the buffer: its late cut, else its submission."""
    return stamp.submitted if math.isnan(stamp.cut) else stamp.cut


# The latency breakdown's parts, in a tuple's order; their means add up to the mean latency.
BREAKDOWN = (
    "wait_for_prepare",
    "driver_build",
    "driver_engine",
    "driver_head",
    "spark_scheduling",
    "task_framework",
    "user_code",
    "driver_settle",
    "commit",
)


def breakdown(record: FullRecord, n: int, stamps: list[JobStamp]) -> dict[str, Any]:
    """Each acked tuple's latency in the parts of ``BREAKDOWN`` (ms: mean, p50, p99, share).

    From the job stamps and the runner's phases of each PREPARE (``TransactionInfo.phases``):

    - ``wait_for_prepare``: emit -> the driver takes the buffer for the PREPARE that carries it
      (when the job is submitted, or, cut late, when its first task asks);
    - ``driver_build``: taking the buffer, building the job (the runner's ``build``; 0 for a
      job cut late: it was built before its tuples were taken);
    - ``driver_engine``: the PREPARE job's time outside Spark's run of it and its head (the
      engine thread building the RDD chain, sealing, merging; the thread hand-over); cut late,
      the sealing after the cut and the merging (the runner's ``engine``);
    - ``driver_head``: the job's stateless head, run by the driver itself (``head``: the
      split, when ``topology.driver.head`` moved it; else 0);
    - ``spark_scheduling``: Spark's run of the job less the tasks' own time: scheduling,
      shuffles, the Python workers reading, unpickling and writing around our code; cut late,
      only what follows the cut (what Spark did before its first task asked is no tuple's);
    - ``task_framework``: the tasks' own time outside the executors' steps (setup: the
      topology, context, collector, state images; output: acks, sealing, state changes);
    - ``user_code``: the executors' steps (prepare, the tuples, finish: the bolts' code and the
      loops that feed it);
    - ``driver_settle``: PREPARE done -> its COMMIT submitted (settling, the commit decision);
    - ``commit``: the COMMIT, then the spout's ack.

    The tasks' parts are means over the tasks Spark ran times its stages. ``sum_of_means_ms`` and
    ``mean_ms`` (of the latency) are given so the addition shows.
    """
    import numpy as np

    emit = np.frombuffer(record.emit_at, dtype=float)[:n]
    ack = np.frombuffer(record.ack_at, dtype=float)[:n]
    prepares = sorted(
        (s for s in stamps if s.action == "PREPARE" and s.ok), key=lambda s: s.submitted
    )
    commits = {s.txid: s for s in stamps if s.action == "COMMIT" and s.ok}
    if not prepares or not all("spark" in s.phases for s in prepares):
        return {}

    def col(f: Callable[[JobStamp], float]) -> Any:
        return np.array([f(s) for s in prepares])

    nan = math.nan
    p_sub, p_done = col(lambda s: s.submitted), col(lambda s: s.done)
    cut = col(_taken)
    late = col(lambda s: not math.isnan(s.cut)).astype(bool)
    c_sub = col(lambda s: commits[s.txid].submitted if s.txid in commits else nan)
    c_done = col(lambda s: commits[s.txid].done if s.txid in commits else nan)
    build, spark = col(lambda s: s.phases["build"]), col(lambda s: s.phases["spark"])
    engine = col(lambda s: s.phases.get("engine", 0.0))
    head = col(lambda s: s.phases.get("head", 0.0))
    setup = col(lambda s: s.phases.get("task_setup", 0.0))
    execute = col(lambda s: s.phases.get("task_execute", 0.0))
    output = col(lambda s: s.phases.get("task_output", 0.0))
    k = np.searchsorted(cut, emit, side="right")
    ok = (ack > 0) & (k < len(prepares))
    k = np.where(ok, k, 0)
    tasks = setup[k] + execute[k] + output[k]
    lk = late[k]
    parts = {
        "wait_for_prepare": np.where(lk, cut[k], p_sub[k] - build[k]) - emit,
        "driver_build": np.where(lk, 0.0, build[k]),
        "driver_engine": np.where(lk, engine[k], (p_done[k] - p_sub[k]) - spark[k] - head[k]),
        "driver_head": head[k],
        "spark_scheduling": np.where(
            lk, (p_done[k] - cut[k]) - engine[k] - head[k] - tasks, spark[k] - tasks
        ),
        "task_framework": setup[k] + output[k],
        "user_code": execute[k],
        "driver_settle": c_sub[k] - p_done[k],
        "commit": ack - c_sub[k],
    }
    keep = ok & ~np.isnan(c_done[k]) & (ack >= c_done[k])
    total = (ack - emit)[keep]
    out: dict[str, Any] = {"tuples": int(keep.sum())}
    if not keep.any():
        return out
    for name in BREAKDOWN:
        v = parts[name][keep]
        out[name] = pct(v) | {"share": round(float(v.sum() / total.sum()), 3)}
    out["sum_of_means_ms"] = round(sum(out[name]["mean"] for name in BREAKDOWN), 2)
    out["mean_ms"] = round(float(total.mean()) * 1000, 2)
    return out


def job_summary(stamps: list[JobStamp]) -> dict[str, Any]:
    """Per action: jobs, duration (submit -> done), queueing, settle time, in ms."""
    out: dict[str, Any] = {}
    for action in ("PREPARE", "COMMIT"):
        sel = [s for s in stamps if s.action == action and not math.isnan(s.done)]
        if not sel:
            continue
        out[action] = {
            "jobs": len(sel),
            "duration": pct([s.done - s.submitted for s in sel]),
            "queued": pct([s.started - s.submitted for s in sel if not math.isnan(s.started)]),
            "settle": pct([s.settled - s.done for s in sel if not math.isnan(s.settled)]),
        }
    prepares = sorted((s for s in stamps if s.action == "PREPARE"), key=lambda s: s.submitted)
    gaps = [b.submitted - a.submitted for a, b in zip(prepares, prepares[1:], strict=False)]
    if gaps:
        out["prepare_period"] = pct(gaps)
    return out


# ----------------------------------------------------------------------------- Spark's own view
def _get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=30) as resp:  # noqa: S310 - loopback UI only
        return json.loads(resp.read())


def _ms(stamp: str | None) -> float | None:
    """Spark REST time ``2024-01-02T03:04:05.678GMT`` as epoch ms."""
    import datetime as dt

    if not stamp:
        return None
    when = dt.datetime.strptime(stamp.replace("GMT", "+0000"), "%Y-%m-%dT%H:%M:%S.%f%z")
    return when.timestamp() * 1000


def spark_view(sc: Any, topology: str, stamps: list[JobStamp]) -> dict[str, Any]:
    """Spark's figures for the topology's PREPARE / COMMIT jobs (needs ``spark.ui.enabled``).

    Per action, means over its jobs (ms; means, so that the parts add up): ``driver`` (our
    submit -> done), ``spark_job`` (Spark's submission -> completion), ``outside_spark``
    (their difference: the Python
    driver's work around the job), ``stages`` (count), ``stage_spans`` (sum of each stage's
    submission -> completion), ``between_stages`` (spark_job - stage_spans), ``task_run``
    (per stage, executorRunTime / tasks, summed over stages: what a tuple waits for),
    ``task_deserialize`` (the same for executorDeserializeTime), ``framework_in_task`` (the
    same for the time ``run_task`` itself measured: our code, from its task reports), and
    ``pyspark_in_task`` (task_run - framework_in_task: the Python worker's reading,
    unpickling, writing around our code).
    """
    base = sc.uiWebUrl
    if not base:
        return {}
    app = sc.applicationId
    jobs = _get(f"{base}/api/v1/applications/{app}/jobs")
    stages = {
        (s["stageId"], s["attemptId"]): s for s in _get(f"{base}/api/v1/applications/{app}/stages")
    }
    ours = {(s.action, s.txid): s for s in stamps}
    rows: dict[str, list[dict[str, float]]] = {"PREPARE": [], "COMMIT": []}
    for job in jobs:
        desc = job.get("description") or ""
        if not desc.startswith(f"{topology}: ") or job.get("status") != "SUCCEEDED":
            continue
        words_ = desc[len(topology) + 2 :].split()
        action, txid = words_[0], int(words_[1].split("=")[1])
        stamp = ours.get((action, txid))
        if action not in rows or stamp is None:
            continue
        sub, end = _ms(job.get("submissionTime")), _ms(job.get("completionTime"))
        if sub is None or end is None:
            continue
        spans = run = deser = 0.0
        n = 0
        for sid in job.get("stageIds", []):
            st = stages.get((sid, 0))
            if st is None or st.get("status") != "COMPLETE":
                continue  # skipped (a shuffle already computed) or not ours
            s0, s1 = _ms(st.get("submissionTime")), _ms(st.get("completionTime"))
            if s0 is not None and s1 is not None:
                spans += s1 - s0
            tasks = max(int(st.get("numTasks") or 1), 1)
            run += float(st.get("executorRunTime") or 0) / tasks
            deser += float(st.get("executorDeserializeTime") or 0) / tasks
            n += 1
        driver = (stamp.done - stamp.submitted) * 1000
        ours_ms = stamp.task_seconds * 1000 * n / stamp.tasks if stamp.tasks else 0.0
        rows[action].append(
            {
                "driver": driver,
                "spark_job": end - sub,
                "outside_spark": driver - (end - sub),
                "stages": n,
                "stage_spans": spans,
                "between_stages": (end - sub) - spans,
                "task_run": run,
                "task_deserialize": deser,
                "framework_in_task": ours_ms,
                "pyspark_in_task": run - ours_ms,
            }
        )
    out: dict[str, Any] = {}
    for action, rs in rows.items():
        if rs:
            out[action] = {"jobs": len(rs)} | {
                k: round(statistics.fmean(r[k] for r in rs), 1) for k in rs[0]
            }
    return out


# ----------------------------------------------------------------------------- baselines
def _nothing(it: Any) -> Any:
    # Consume the input: a Python worker whose function leaves input unread is not reused
    # (SPARK-26549), and every later task would pay a fresh worker (about 0.5 s here).
    for _ in it:
        pass
    return iter(())


def _pair(x: int) -> tuple[int, int]:
    return (x, x)


def empty_jobs(sc: Any, parallelism: int, repeat: int) -> dict[str, float]:
    """Median seconds of an empty warm Python job: one stage, and two stages with a shuffle."""
    one, two = [], []
    for _ in range(repeat):
        t = time.perf_counter()
        sc.parallelize(range(parallelism), parallelism).mapPartitions(_nothing).collect()
        one.append(time.perf_counter() - t)
        t = time.perf_counter()
        (
            sc.parallelize(range(parallelism), parallelism)
            .map(_pair)
            .partitionBy(parallelism)
            .mapPartitions(_nothing)
            .collect()
        )
        two.append(time.perf_counter() - t)
    return {"one_stage": statistics.median(one), "two_stage": statistics.median(two)}


# ----------------------------------------------------------------------------- one run
def run_rate(
    spark: Any,
    corpus: CycledCorpus,
    rate: int,
    args: argparse.Namespace,
    conf: dict[str, Any],
    name: str,
    *,
    quiet: bool = False,
) -> dict[str, Any]:
    """Run the word count at ``rate`` tuples/s for ``args.seconds``; the figures of the run."""
    from statefulbolts import LocalCluster

    load_before = os.getloadavg()[0]
    total = int(rate * args.seconds)
    spout = PacedSpout(corpus, rate, total, name, max_seconds=args.seconds * args.max_stretch)
    clock = JobClock()
    cluster = LocalCluster(spark=spark)
    handle = cluster.submit_topology(
        name, conf, build(spout, args.parallelism), on_transaction=clock.on_transaction
    )
    try:
        runner: Any = handle.runner  # a CheckpointRunner: its engine runs every job
        clock.attach(runner.engine, runner.jobs)
        live = REGISTRY[name]
        live.arm()
        started = time.perf_counter()
        shown = started
        while not live.closed:  # a progress line a second; the end seen within 50 ms
            time.sleep(0.05)
            if not quiet and time.perf_counter() - shown >= 1:
                shown += 1
                done = time.perf_counter() - started
                print(
                    f"  {rate:>7}/s {done:5.0f}s: emitted {live.next_id:>9} acked "
                    f"{live.acked:>9} failed {live.failed} "
                    f"(schedule {min(total, int(done * rate)):>9})",
                    file=sys.stderr,
                    flush=True,
                )
        handle.await_idle(args.seconds * args.max_stretch + 600)
        counts = handle.read_state("count")
        metrics = handle.metrics()
    finally:
        handle.kill()
    n = live.next_id
    rec: FullRecord = live.record
    expected = corpus.expected(n)
    exact = counts == dict(expected)
    import numpy as np

    emit = np.frombuffer(rec.emit_at, dtype=float)[:n]
    ack = np.frombuffer(rec.ack_at, dtype=float)[:n]
    acked = ack > 0
    t0 = live.t0 or 0.0
    emit_window = (live.last_emit - t0) if n > 1 else 0.0
    achieved = (n - 1) / emit_window if emit_window > 0 else 0.0
    ack_window = float(ack[acked].max() - t0) if acked.any() else 0.0
    latency = (ack - emit)[acked]
    schedule = t0 + np.arange(n) / rate
    third = max(n // 3, 1)
    txs = metrics["transactions"]
    result = {
        "target_per_sec": rate,
        "planned_tuples": total,
        "emitted": n,
        "acked": int(acked.sum()),
        "failed_calls": live.failed,
        "achieved_per_sec": round(achieved, 1),
        "acked_per_sec": round(int(acked.sum()) / ack_window, 1) if ack_window else 0.0,
        # Sustained: the spout kept its schedule and the acks kept up with it (the acked rate
        # counts the drain at the end, a latency's worth: 0.9 leaves room for ~2 s in 20 s).
        "sustained": n == total
        and achieved >= 0.97 * rate
        and ack_window > 0
        and int(acked.sum()) / ack_window >= 0.9 * rate,
        "words_per_sec": round(achieved * 10, 1),
        "latency_ms": pct(latency),
        "latency_first_third_ms": pct((ack - emit)[:third][acked[:third]]),
        "latency_last_third_ms": pct((ack - emit)[-third:][acked[-third:]]),
        "schedule_lag_ms": pct(emit - schedule),
        "stages_ms": stage_split(rec, n, clock.jobs),
        "breakdown_ms": breakdown(rec, n, clock.jobs),
        "jobs_ms": job_summary(clock.jobs),
        "transactions": len(txs),
        "prepare_tuples_mean": round(
            statistics.mean([t["tuples"] for t in txs if t["action"] == "PREPARE"] or [0]), 1
        ),
        "exact": exact,
        "distinct_words": len(counts),
        "load_avg_1min": [round(load_before, 2), round(os.getloadavg()[0], 2)],
    }
    if args.spark_ui:
        result["spark_ms"] = spark_view(spark.sparkContext, name, clock.jobs)
    return result


def with_ratios(run: dict[str, Any], floor: dict[str, float]) -> None:
    """Add latency / baseline ratios: to the empty 2-stage job, and to the 2+1-stage floor."""
    two = floor["two_stage"] * 1000
    both = (floor["two_stage"] + floor["one_stage"]) * 1000
    lat = run["latency_ms"]
    run["latency_vs_empty_two_stage_job"] = {k: round(v / two, 1) for k, v in lat.items()}
    run["latency_vs_prepare_commit_floor"] = {k: round(v / both, 1) for k, v in lat.items()}


# ----------------------------------------------------------------------------- output
def print_summary(result: dict[str, Any]) -> None:
    """The tables a person reads."""
    floor = result["baseline_ms"]
    print(
        f"local {result['master']}, parallelism {result['parallelism']}, interval "
        f"{result['interval_ms']} ms, provider {result['provider']}, vocab {result['vocab']}, "
        f"{result['seconds']} s per rate"
    )
    print(
        f"COMMIT: topology.state.commit.location {result['commit_location']}; "
        f"topology.driver.head {result['driver_head']}; "
        f"topology.input.cut {result.get('input_cut', 'submit')}"
    )
    print(
        f"baseline (median of {result['baseline_repeat']} warm empty Python jobs): one stage "
        f"{floor['one_stage']:.1f} ms, two stages (shuffle) {floor['two_stage']:.1f} ms; "
        f"floor PREPARE+COMMIT = {floor['one_stage'] + floor['two_stage']:.1f} ms"
    )
    print()
    head = (
        f"{'target/s':>9} {'emitted/s':>10} {'acked/s':>9} {'sust':>5} {'p50':>8} {'p90':>8} "
        f"{'p99':>8} {'max':>8}  {'p50/floor':>9} {'p99/floor':>9}  exact"
    )
    print(head)
    for run in result["runs"]:
        lat, ratio = run["latency_ms"], run["latency_vs_prepare_commit_floor"]
        print(
            f"{run['target_per_sec']:>9} {run['achieved_per_sec']:>10.0f} "
            f"{run['acked_per_sec']:>9.0f} {'yes' if run['sustained'] else 'NO':>5} "
            f"{lat['p50']:>8.1f} {lat['p90']:>8.1f} "
            f"{lat['p99']:>8.1f} {lat['max']:>8.1f}  {ratio['p50']:>9.1f} {ratio['p99']:>9.1f}  "
            f"{run['exact']}"
        )
    print("(latencies in ms, emit -> spout ack; floor = empty 2-stage + 1-stage Python job)")
    for run in result["runs"]:
        first, last = run["latency_first_third_ms"], run["latency_last_third_ms"]
        print(
            f"{run['target_per_sec']:>9}: p50 first third {first.get('p50')} ms, last third "
            f"{last.get('p50')} ms; schedule lag p99 {run['schedule_lag_ms'].get('p99')} ms; "
            f"load avg {run['load_avg_1min']}"
        )
    print()
    print("breakdown per tuple, ms (p50 / p99, share of the total latency):")
    names = ("buffer", "prepare", "to_commit", "commit", "ack")
    print(f"{'target/s':>9} " + " ".join(f"{n:>22}" for n in names))
    for run in result["runs"]:
        st = run["stages_ms"]
        cells = []
        for n in names:
            s = st.get(n, {})
            cells.append(f"{s.get('p50', 0):7.1f}/{s.get('p99', 0):7.1f} {s.get('share', 0):4.0%}")
        print(f"{run['target_per_sec']:>9} " + " ".join(f"{c:>22}" for c in cells))
    print()
    print("latency breakdown per tuple, ms (mean, share of the mean latency; means add up):")
    print(f"{'target/s':>9} " + " ".join(f"{n:>16}" for n in BREAKDOWN) + f" {'sum / mean':>14}")
    for run in result["runs"]:
        bd = run["breakdown_ms"]
        cells = [
            f"{bd.get(n, {}).get('mean', 0):6.1f} {bd.get(n, {}).get('share', 0):4.0%}"
            for n in BREAKDOWN
        ]
        total = f"{bd.get('sum_of_means_ms', 0):.1f} / {bd.get('mean_ms', 0):.1f}"
        print(
            f"{run['target_per_sec']:>9} " + " ".join(f"{c:>16}" for c in cells) + f" {total:>14}"
        )
    print()
    print(
        "jobs, ms: median duration [means: driver-measured = Spark's job span + outside Spark;"
        " stage spans; task run = framework + PySpark; task deserialize]"
    )
    for run in result["runs"]:
        jobs, sv = run["jobs_ms"], run.get("spark_ms", {})
        parts = []
        for action in ("PREPARE", "COMMIT"):
            j = jobs.get(action)
            if j is None:
                continue
            cell = f"{action} x{j['jobs']} {j['duration']['p50']:.0f}"
            s = sv.get(action)
            if s:
                cell += (
                    f" [{s['driver']:.0f} = {s['spark_job']:.0f} + {s['outside_spark']:.0f}; "
                    f"{s['stage_spans']:.0f}; "
                    f"{s['task_run']:.0f} = {s['framework_in_task']:.0f} + "
                    f"{s['pyspark_in_task']:.0f}, {s['task_deserialize']:.0f}]"
                )
            parts.append(cell)
        period = jobs.get("prepare_period", {}).get("p50", 0)
        print(
            f"{run['target_per_sec']:>9}: " + "; ".join(parts) + f"; PREPARE every {period:.0f}"
            f", {run['prepare_tuples_mean']:.0f} tuples each"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rates", default="1000,10000,100000", help="tuples/s, comma-separated")
    parser.add_argument("--seconds", type=float, default=20, help="planned seconds per rate")
    parser.add_argument(
        "--max-stretch",
        type=float,
        default=2.0,
        help="stop new tuples after this many times --seconds, if behind (default 2)",
    )
    parser.add_argument("--interval", type=int, default=100, help="checkpoint interval, ms")
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument(
        "--standalone",
        action="store_true",
        help="start a standalone master + 2 workers on 127.0.0.1 and run there (not --master)",
    )
    parser.add_argument("--provider", choices=["memory", "redis"], default="memory")
    parser.add_argument("--vocab", type=int, default=10_000, help="Zipf vocabulary size")
    parser.add_argument("--sentences", type=int, default=100_000, help="corpus size, cycled")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--baseline-repeat", type=int, default=30)
    parser.add_argument(
        "--warm-seconds",
        type=float,
        default=5,
        help="seconds of the warm-up run at 2,000 tuples/s, before anything is timed",
    )
    parser.add_argument(
        "--no-spark-ui", dest="spark_ui", action="store_false", help="no Spark REST figures"
    )
    parser.add_argument(
        "--commit-location",
        choices=["auto", "executors"],
        default="auto",
        help="topology.state.commit.location: auto (the driver commits, no job), executors",
    )
    parser.add_argument(
        "--cadence",
        choices=["back-to-back", "interval"],
        default="back-to-back",
        help="topology.state.checkpoint.cadence (default back-to-back)",
    )
    parser.add_argument(
        "--driver-head",
        choices=["auto", "always", "never"],
        default="auto",
        help="topology.driver.head: auto (a small PREPARE's split in the driver), always, never",
    )
    parser.add_argument(
        "--input-cut",
        choices=["task-start", "submit"],
        default="task-start",
        help="topology.input.cut: a PREPARE takes the waiting tuples when its first task asks "
        "(task-start), or when it is submitted",
    )
    parser.add_argument(
        "--spark-conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a Spark setting for the bench's session (repeatable; wins over the bench's own)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    for item in args.spark_conf:
        if "=" not in item:
            parser.error(f"--spark-conf {item!r}: expected KEY=VALUE")
    with contextlib.ExitStack() as stack:
        if args.standalone:
            args.master = stack.enter_context(standalone_master())
        return measure(args)


@contextlib.contextmanager
def standalone_master() -> Iterator[str]:
    """A standalone master and two workers on 127.0.0.1 (``start_standalone``); its URL."""
    tests = Path(__file__).resolve().parent.parent / "tests"
    sys.path.insert(0, str(tests))
    from standalone_cluster import start_standalone

    base = Path(tempfile.mkdtemp(prefix="latency-cluster-"))
    with start_standalone(base, workers=2) as standalone:
        yield standalone.url


def _cluster_conf(master: str) -> dict[str, str]:
    """What a driver on a standalone master needs: loopback, and the checkout on executors."""
    if not master.startswith("spark://"):
        return {}
    return {
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.executorEnv.PYTHONPATH": str(Path(__file__).resolve().parent.parent),
        "spark.executorEnv.SPARK_LOCAL_IP": "127.0.0.1",
        "spark.pyspark.python": sys.executable,
        "spark.executor.memory": "512m",
    }


def measure(args: argparse.Namespace) -> int:
    """Run every rate of ``args`` on ``args.master``; print the figures; the exit status."""
    rates = [int(r) for r in args.rates.split(",") if r.strip()]

    from statefulbolts.runtime import build_session

    spark_conf = {"spark.ui.enabled": "true", "spark.ui.port": "0"} if args.spark_ui else {}
    if args.spark_ui:  # keep every job of a run for the REST API
        spark_conf |= {"spark.ui.retainedJobs": "20000", "spark.ui.retainedStages": "40000"}
    spark_conf |= _cluster_conf(args.master)
    spark_conf |= dict(item.split("=", 1) for item in args.spark_conf)
    spark = build_session(args.master, "statefulbolts-bench-latency", spark_conf)
    sc = spark.sparkContext
    corpus = CycledCorpus(zipf_sentences(args.sentences, args.vocab, args.seed))
    conf: dict[str, Any] = {
        "topology.state.checkpoint.interval.ms": args.interval,
        "topology.state.commit.location": args.commit_location,
        "topology.state.checkpoint.cadence": args.cadence,
        "topology.driver.head": args.driver_head,
        "topology.input.cut": args.input_cut,
    }
    server = None
    if args.provider == "redis":
        from bench._redis import redis_conf, start_redis

        server = start_redis()
        conf |= redis_conf(server.port)
    try:
        print("warming up", file=sys.stderr, flush=True)
        empty_jobs(sc, args.parallelism, 10)
        warm = argparse.Namespace(**{**vars(args), "seconds": args.warm_seconds, "spark_ui": False})
        run_rate(spark, corpus, 2000, warm, conf, f"lat-warm-{time.time_ns()}", quiet=True)
        floor = empty_jobs(sc, args.parallelism, args.baseline_repeat)
        runs = []
        for rate in rates:
            print(f"rate {rate}/s", file=sys.stderr, flush=True)
            run = run_rate(spark, corpus, rate, args, conf, f"lat-{rate}-{time.time_ns()}")
            with_ratios(run, floor)
            runs.append(run)
            print(
                f"  p50 {run['latency_ms']['p50']} ms p99 {run['latency_ms']['p99']} ms, "
                f"achieved {run['achieved_per_sec']}/s, exact={run['exact']}",
                file=sys.stderr,
                flush=True,
            )
        # The floor again at the end: a shared machine drifts.
        floor_after = empty_jobs(sc, args.parallelism, args.baseline_repeat)
    finally:
        if server is not None:
            server.stop()
    result = {
        "master": sc.master,
        "spark_conf": list(args.spark_conf),
        "parallelism": args.parallelism,
        "interval_ms": args.interval,
        "provider": args.provider,
        "commit_location": args.commit_location,
        "cadence": args.cadence,
        "driver_head": args.driver_head,
        "input_cut": args.input_cut,
        "vocab": args.vocab,
        "seconds": args.seconds,
        "baseline_repeat": args.baseline_repeat,
        "baseline_ms": {k: round(v * 1000, 2) for k, v in floor.items()},
        "baseline_after_ms": {k: round(v * 1000, 2) for k, v in floor_after.items()},
        "runs": runs,
    }
    spark.stop()
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print_summary(result)
    return 0 if all(r["exact"] for r in runs) else 1


# Imported by reference (``bench.latency``), never as ``__main__``: cloudpickle would copy a
# ``__main__`` class by value, with its own ``REGISTRY``, and the runtime's spout copy would
# register where this script cannot see it.
__all__ = ["REGISTRY", "PacedSpout", "main"]

if __name__ == "__main__":
    from bench import latency

    sys.exit(latency.main())
