"""Kill a transactional topology's driver at every point of the protocol, restart it, check counts.

Run it::

    python -m examples.transactional_crash                 # own redis-server, 7 kills, seed 7
    python -m examples.transactional_crash --kills 3 --seed 5 --json
    python -m examples.transactional_crash --redis-url redis://127.0.0.1:6379/0

It starts a redis-server on a free 127.0.0.1 port (unless ``--redis-url`` names one) and runs a
transactional word count as a child driver process on the Redis provider,
``statefulbolts run examples.transactional_crash:topology``, always with the same transactional
id (new for each demo run, handed to the child in ``$TX_CRASH_ID``). The topology: a
``MemoryTransactionalSpout`` over sentences in four partitions -> ``split`` (a batch bolt of the
processing phase: its task's words of the batch, counted) -> ``count`` (committer: word ->
``[count, count before]`` in a ``TransactionalMap``) -> ``bucketize`` -> ``buckets`` (words per
count bucket; the bolts of ``examples.transactional_words``).

Why a memory spout: a partitioned transactional spout must replay a txid's identical batch from
its stored metas. The memory spout's data is a fixed corpus built in the module, so every
restarted child holds the very same rows, and a meta ``[index, amount]`` read back from Redis
names the same sentences in every process; the demo needs no stream to load or to clean up.
``RedisStreamsTransactionalSpout`` would do as well, since its data lives in Redis.

Each run but the last is killed once, in a seeded order (``--seed``; every kind once, then seeded
choices, ``--kills`` in all):

- at a kill point of the transactional protocol (``topology.faults``), for a txid at most two
  after the next one to commit: ``during-processing`` (t's processing job started),
  ``after-processed`` (t processed, its commit not started), ``mid-commit`` (a committer task
  has written t's values, the driver has not recorded the commit: a Spark task SIGKILLs the
  driver), ``after-commit`` (t's commit job succeeded, ``currtx`` not moved past t);
- ``random``: SIGKILL of the driver a seeded random delay after its first commit;
- ``worker-processing`` / ``worker-commit``: a Python worker crashes (``os._exit``) mid-batch
  in a ``split`` task (processing phase) or a ``count`` task (commit phase) of txid t, on the
  task's first Spark attempt (a task fault ``{"kind": "crash"}``); Spark runs the task again and
  the driver goes on, without failing the batch. The run is then SIGKILLed as soon as it
  reports t's commit.

Every restart uses the same command and the same transactional id: the coordinator resumes at
the stored ``currtx`` and replays the txids that have a stored meta, with their metas. The last
run goes on until the topology is idle. Printed per kill: the kind, the txid, what
``transactional_status`` shows afterwards (next txid to commit, the txids a restart replays),
and how long the restart took to its first commit (Spark start-up included). At the end, the
committer maps read from Redis are checked against a plain Python count of the corpus: every
word count and every bucket exact, each word's stored txid the last txid whose batch held it,
and no txid reported committed twice. Exit status 0 only if all of that holds, 1 otherwise, 2
on bad input.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statefulbolts import (
    BaseTransactionalBolt,
    Fields,
    MemoryTransactionalSpout,
    TransactionalTopology,
    TransactionalTopologyBuilder,
)

from .corpus import sentence, words
from .crash_recovery import with_redis
from .transactional_words import (
    BUCKET_SIZE,
    BucketCountUpdater,
    Bucketize,
    KeyedCountUpdater,
)

ID_ENV = "TX_CRASH_ID"
DEFAULT_ID = "tx-crash"
PARTITIONS = 4
SENTENCES_PER_PARTITION = 60
TAKE_PER_BATCH = 2
MAX_PENDING = 3
POINTS = ["during-processing", "after-processed", "mid-commit", "after-commit"]
WORKERS = {"worker-processing": "split", "worker-commit": "count"}  # kind -> component
KINDS = [*POINTS, "random", *WORKERS]
KILLED = 137
RANDOM_DELAY_S = 1.5  # a random kill comes at most this long after the run's first commit

Data = dict[int, list[list[str]]]


# --------------------------------------------------------------------------- the topology
def corpus(partitions: int = PARTITIONS, per_partition: int = SENTENCES_PER_PARTITION) -> Data:
    """The fixed data: partition ``p`` holds sentences ``p * per_partition ...``, one per row."""
    return {
        p: [[sentence(p * per_partition + j)] for j in range(per_partition)]
        for p in range(partitions)
    }


class SplitCount(BaseTransactionalBolt):
    """Counts the words of the sentences of one batch that reach this task (processing phase)."""

    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.collector, self.attempt = collector, id
        self.counts: collections.Counter[str] = collections.Counter()

    def execute(self, tuple: Any) -> None:  # noqa: A002
        self.counts.update(words(tuple.get_value(1)))

    def finish_batch(self) -> None:
        for word, n in sorted(self.counts.items()):
            self.collector.emit([self.attempt, word, n])

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("id", "word", "count"))


class SumUpdater(KeyedCountUpdater):
    """``KeyedCountUpdater`` fed with partial counts: adds them up per word, then commits."""

    def execute(self, tuple: Any) -> None:  # noqa: A002
        self.counts[tuple.get_value(1)] += tuple.get_value(2)


def build(
    data: Mapping[int, list[list[str]]] | None = None,
    transactional_id: str = DEFAULT_ID,
    *,
    spout: MemoryTransactionalSpout | None = None,
    bucket_size: int = BUCKET_SIZE,
) -> TransactionalTopology:
    """spout -> split -> count (committer) -> bucketize -> buckets, over ``data`` or ``spout``."""
    if spout is None:
        rows = corpus() if data is None else dict(data)
        spout = MemoryTransactionalSpout(rows, ["line"], TAKE_PER_BATCH)
    builder = TransactionalTopologyBuilder(transactional_id, "spout", spout, 2)
    builder.set_bolt("split", SplitCount(), 2).shuffle_grouping("spout")
    builder.set_committer_bolt("count", SumUpdater(), 2).fields_grouping("split", Fields("word"))
    builder.set_bolt("bucketize", Bucketize(bucket_size)).none_grouping("count")
    builder.set_bolt("buckets", BucketCountUpdater(), 2).fields_grouping(
        "bucketize", Fields("bucket")
    )
    return builder.build_topology()


def topology() -> TransactionalTopology:
    """What the child driver runs: the corpus, under the transactional id in ``$TX_CRASH_ID``."""
    return build(transactional_id=os.environ.get(ID_ENV) or DEFAULT_ID)


# --------------------------------------------------------------------------- what to expect
def expected(
    data: Mapping[int, list[list[str]]],
    take_per_batch: int = TAKE_PER_BATCH,
    bucket_size: int = BUCKET_SIZE,
) -> dict[str, Any]:
    """The word counts, words per bucket and each word's last txid, counted plainly.

    Row ``j`` of every partition goes out in txid ``j // take_per_batch + 1``: a partitioned
    spout's txid t takes the next ``take_per_batch`` rows of each partition, on every attempt.
    """
    counts: collections.Counter[str] = collections.Counter()
    last_txid: dict[str, int] = {}
    for rows in data.values():
        for j, row in enumerate(rows):
            for word in words(row[0]):
                counts[word] += 1
                last_txid[word] = max(last_txid.get(word, 0), j // take_per_batch + 1)
    buckets = collections.Counter(n // bucket_size for n in counts.values())
    data_txids = max(-(-len(rows) // take_per_batch) for rows in data.values())
    return {
        "counts": dict(counts),
        "buckets": dict(buckets),
        "last_txid": last_txid,
        "data_txids": data_txids,
    }


def stored_maps(conf: Mapping[str, Any], transactional_id: str) -> dict[str, dict[Any, Any]]:
    """The committers' maps as stored: ``{component: {key: [txid, value]}}``, tasks merged."""
    from providers import KeyValueState, StateFactory
    from statefulbolts.namespaces import TaskNamespace

    found: dict[str, dict[Any, Any]] = {}
    for component in ("count", "buckets"):
        merged: dict[Any, Any] = {}
        for task in range(2):
            namespace = str(
                TaskNamespace.of_transactional(transactional_id, component, task, "default")
            )
            state = StateFactory.get_system_state(namespace, conf)
            assert isinstance(state, KeyValueState)  # every provider's system state is one
            for key, plain in state:
                # A key of the map is stored as a one-item array; the record key is a str.
                if isinstance(key, list | tuple) and len(key) == 1:
                    merged[key[0]] = plain
        found[component] = merged
    return found


def check(
    conf: Mapping[str, Any],
    transactional_id: str,
    commits: list[int],
    data: Mapping[int, list[list[str]]] | None = None,
    take_per_batch: int = TAKE_PER_BATCH,
) -> dict[str, Any]:
    """Compare what the store holds with the plain count of ``data`` (default: the corpus).

    ``commits``: the txids the drivers reported committed, every run's, in order.
    """
    from statefulbolts.transactional import transactional_status

    want = expected(corpus() if data is None else data, take_per_batch)
    maps = stored_maps(conf, transactional_id)
    counts = {w: v[1][0] for w, v in maps["count"].items()}
    txids = {w: v[0] for w, v in maps["count"].items()}
    buckets = {int(b): v[1] for b, v in maps["buckets"].items() if v[1]}
    status = transactional_status(conf, transactional_id)
    repeated = sorted(t for t, n in collections.Counter(commits).items() if n > 1)
    result = {
        "words": sum(want["counts"].values()),
        "counted": sum(counts.values()),
        "counts_exact": counts == want["counts"],
        "buckets_exact": buckets == want["buckets"],
        "txids_as_planned": txids == want["last_txid"],
        "committed_txid": status.committed_txid,
        "data_txids": want["data_txids"],
        "all_committed": (status.committed_txid or 0) >= want["data_txids"],
        "committed_twice": repeated,
        "commits_not_reported": sorted(set(range(1, status.current_txid)) - set(commits)),
    }
    result["exact"] = (
        all(
            result[k]
            for k in ("counts_exact", "buckets_exact", "txids_as_planned", "all_committed")
        )
        and not repeated
    )
    if not result["counts_exact"]:
        wrong = {w for w in {*counts, *want["counts"]} if counts.get(w) != want["counts"].get(w)}
        result["wrong_counts"] = {
            w: [counts.get(w), want["counts"].get(w)] for w in sorted(wrong)[:10]
        }
    return result


# --------------------------------------------------------------------------- one child driver
@dataclass
class Run:
    """What one child driver did."""

    exit_code: int = 0
    events: list[dict[str, Any]] = field(default_factory=list)
    first_commit: int | None = None
    seconds_to_first_commit: float | None = None
    seconds: float = 0.0

    @property
    def commits(self) -> list[int]:
        """The txids this run reported committed, in order."""
        return [
            e["txid"]
            for e in self.events
            if e.get("event") == "transaction" and e["ok"] and e["action"] == "COMMIT"
        ]

    @property
    def failed(self) -> int:
        """How many batch attempts this run reported failed."""
        return sum(1 for e in self.events if e.get("event") == "transaction" and not e["ok"])


def child_command(conf_path: Path, name: str) -> list[str]:
    """The command of one child driver (the same for every restart)."""
    spec = f"{__package__}.transactional_crash:topology"
    cmd = [sys.executable, "-m", "statefulbolts.cli", "run", spec]
    return [*cmd, "--conf", str(conf_path), "--name", name, "--json"]


def child_env(transactional_id: str) -> dict[str, str]:
    """The child's environment: the transactional id, and a JVM that starts faster.

    A child driver's JVM lives for a few seconds of tiny jobs: C1-only JIT and the serial GC
    start it sooner on a small machine (set ``JAVA_TOOL_OPTIONS`` yourself to override).
    """
    env = dict(os.environ)
    env[ID_ENV] = transactional_id
    env.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
    return env


def run_child(
    cmd: list[str],
    env: Mapping[str, str],
    log: Path,
    timeout: float,
    *,
    kill_after_first_commit: float | None = None,
    kill_after_commit_of: int | None = None,
) -> Run:
    """Run one child driver to its end; SIGKILL it at the moment asked for, if any.

    ``kill_after_first_commit``: seconds after the run's first commit; ``kill_after_commit_of``:
    as soon as the run reports that txid committed. The driver alone is killed (its JVM exits
    when the driver's pipe closes); whatever of its process group is left is killed afterwards.
    """
    run = Run()
    started = time.monotonic()
    lines: queue.Queue[str | None] = queue.Queue()
    with open(log, "a", encoding="utf-8") as err:
        proc = subprocess.Popen(
            cmd,
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=dict(env),
            start_new_session=True,
        )
        assert proc.stdout is not None
        reader = threading.Thread(target=_read_lines, args=(proc.stdout, lines), daemon=True)
        reader.start()
        timer: threading.Timer | None = None

        def kill_driver() -> None:
            _signal(proc.pid, group=False)

        try:
            while True:
                line = lines.get(timeout=max(0.1, started + timeout - time.monotonic()))
                if line is None:
                    break
                if not line.startswith("{"):
                    continue
                event = json.loads(line)
                run.events.append(event)
                if event.get("event") != "transaction" or not event["ok"]:
                    continue
                if event["action"] != "COMMIT":
                    continue
                if run.first_commit is None:
                    run.first_commit = event["txid"]
                    run.seconds_to_first_commit = round(time.monotonic() - started, 2)
                    if kill_after_first_commit is not None:
                        timer = threading.Timer(kill_after_first_commit, kill_driver)
                        timer.start()
                if kill_after_commit_of is not None and event["txid"] >= kill_after_commit_of:
                    kill_driver()
        except queue.Empty:
            _signal(proc.pid, group=True)
            msg = f"the driver ran longer than {timeout} s and was stopped; see {log}"
            raise TimeoutError(msg) from None
        finally:
            if timer is not None:
                timer.cancel()
            code = proc.wait()
            _signal(proc.pid, group=True)  # its JVM and Python workers, if still there
            reader.join(10)
    run.exit_code = 128 - code if code < 0 else code
    run.seconds = round(time.monotonic() - started, 2)
    return run


def _read_lines(stream: Any, into: queue.Queue[str | None]) -> None:
    for line in stream:
        into.put(line)
    into.put(None)


def _signal(pid: int, *, group: bool) -> None:
    try:
        if group:
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# --------------------------------------------------------------------------- the demo
def plan(rng: random.Random, kills: int) -> list[str]:
    """The kinds of kill, in order: every kind once (shuffled), then seeded choices."""
    kinds = rng.sample(KINDS, k=min(kills, len(KINDS)))
    return kinds + [rng.choice(KINDS) for _ in range(kills - len(kinds))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=f"python -m {__package__}.transactional_crash", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--kills", type=int, default=len(KINDS), help=f"kills (default {len(KINDS)})"
    )
    parser.add_argument("--seed", type=int, default=7, help="seed of the kill plan (default 7)")
    parser.add_argument("--redis-url", help="use this Redis instead of starting one")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per driver run")
    parser.add_argument("--json", action="store_true", help="one JSON document, no table")
    args = parser.parse_args(argv)
    if args.kills < 0:
        parser.error("--kills must be >= 0")
    return with_redis(args, demo, "transactional-crash-")


def demo(args: argparse.Namespace, url: str, workdir: Path) -> int:
    from statefulbolts.transactional import transactional_status

    started = time.monotonic()
    rng = random.Random(args.seed)
    tid = f"tx-crash-{uuid.uuid4().hex[:8]}"
    conf: dict[str, Any] = {
        "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
        "topology.state.provider.config": {"redisConfig": {"url": url}},
        "topology.state.checkpoint.interval.ms": 100,
        "topology.max.spout.pending": MAX_PENDING,
    }
    say = (lambda *a: None) if args.json else print
    want = expected(corpus())
    say(f"redis {url}, transactional id {tid!r}, seed {args.seed}")
    say(
        f"{PARTITIONS} partitions of {SENTENCES_PER_PARTITION} sentences, {TAKE_PER_BATCH} per "
        f"partition and batch: {want['data_txids']} txids of data"
    )
    log = workdir / "drivers.log"
    env = child_env(tid)
    kills: list[dict[str, Any]] = []
    commits: list[int] = []
    previous: dict[str, Any] | None = None
    for i, kind in enumerate([*plan(rng, args.kills), None], start=1):
        run_conf: dict[str, Any] = dict(conf)
        first = transactional_status(conf, tid).current_txid
        txid: int | None = None
        options: dict[str, Any] = {}
        if kind in POINTS:
            txid = first + rng.randint(0, 2)
            run_conf["topology.faults"] = {"driver": {"point": kind, "txid": txid}}
            what = f"kill at {kind} of txid {txid}"
        elif kind == "random":
            delay = round(rng.uniform(0, RANDOM_DELAY_S), 2)
            options["kill_after_first_commit"] = delay
            what = f"SIGKILL {delay} s after the first commit"
        elif kind in WORKERS:
            txid = first + rng.randint(0, 2)
            task, at = rng.randrange(2), rng.randint(1, 3)
            fault = {"component": WORKERS[kind], "task": task, "at_tuple": at, "kind": "crash",
                     "attempts": "first", "txid": txid}  # fmt: skip
            run_conf["topology.faults"] = {"tasks": [fault]}
            if kind == "worker-commit":  # a worker runs the commit phase only on executors
                run_conf["topology.transactional.commit.location"] = "executors"
            options["kill_after_commit_of"] = txid
            what = f"crash a worker in {WORKERS[kind]} task {task} at tuple {at} of txid {txid}"
        else:
            what = "no fault, until idle"
        conf_path = workdir / f"run-{i}.json"
        conf_path.write_text(json.dumps(run_conf), encoding="utf-8")
        say(f"run {i}: {what} ...")
        mark = log.stat().st_size if log.exists() else 0
        cmd = child_command(conf_path, f"tx-crash-{i}")
        run = run_child(cmd, env, log, args.timeout, **options)
        commits += run.commits
        if previous is not None:  # this run's start is the previous kill's restart
            previous["restart"] = {
                "first_commit": run.first_commit,
                "seconds_to_first_commit": run.seconds_to_first_commit,
                "seconds_run": run.seconds,
            }
        if kind is None:
            if run.exit_code != 0:
                print(f"error: the last driver exited {run.exit_code}; see {log}")
                return 1
            break
        if run.exit_code == 0:
            say("  the topology went idle before the kill; no more kills")
            break
        if run.exit_code != KILLED:
            print(f"error: driver {i} exited {run.exit_code}, not killed; see {log}")
            return 1
        status = transactional_status(conf, tid)
        previous = {
            "kill": i,
            "kind": kind,
            "txid": txid if txid is not None else status.current_txid,
            "exit_code": run.exit_code,
            "commits": [min(run.commits), max(run.commits)] if run.commits else [],
            "failed_attempts": run.failed,
            "status": {
                "current_txid": status.current_txid,
                "committed_txid": status.committed_txid,
                "replays": status.replays,
            },
        }
        if kind in WORKERS:
            crashed = f"injected crash in {WORKERS[kind]} task"
            previous["worker_crashes"] = _count_since(log, mark, crashed)
        kills.append(previous)

    final = check(conf, tid, commits)
    doc = {
        "redis": url,
        "transactional_id": tid,
        "seed": args.seed,
        "kills": kills,
        "final": final,
        "exact": final["exact"],
        "seconds": round(time.monotonic() - started, 1),
    }
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        _table(doc)
    return 0 if final["exact"] else 1


def _count_since(log: Path, offset: int, text: str) -> int:
    with open(log, encoding="utf-8", errors="replace") as fh:
        fh.seek(offset)
        return fh.read().count(text)


def _table(doc: dict[str, Any]) -> None:
    print()
    print(f"{'kill':>4}  {'kind':<18} {'txid':>4}  {'next txid':>9}  {'replays':<10}  restart")
    for k in doc["kills"]:
        status, restart = k["status"], k.get("restart") or {}
        replays = ",".join(str(t) for t in status["replays"]) or "-"
        if restart.get("first_commit") is not None:
            how = (
                f"{restart['seconds_to_first_commit']:.1f} s to its first commit, "
                f"txid {restart['first_commit']}"
            )
        else:
            how = f"killed again after {restart.get('seconds_run', 0):.1f} s, before a commit"
        print(
            f"{k['kill']:>4}  {k['kind']:<18} {k['txid']:>4}  {status['current_txid']:>9}  "
            f"{replays:<10}  {how}"
        )
        if k["kind"] in WORKERS:
            print(
                f"{'':>6}worker crashes: {k['worker_crashes']}, failed batch attempts: "
                f"{k['failed_attempts']} (Spark ran the task again)"
            )
    final = doc["final"]
    print()
    verdict = "exact" if final["exact"] else "NOT EXACT"
    print(
        f"counted {final['counted']} words for {final['words']}; txids 1..{final['committed_txid']}"
        f" committed ({final['data_txids']} with data): {verdict}"
    )
    print(
        f"  counts exact: {final['counts_exact']}, buckets exact: {final['buckets_exact']}, "
        f"stored txids as planned: {final['txids_as_planned']}, committed twice: "
        f"{final['committed_twice'] or 'none'}; {doc['seconds']} s in all"
    )


if __name__ == "__main__":
    sys.exit(main())
