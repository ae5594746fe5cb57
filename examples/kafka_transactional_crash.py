"""Kill a transactional topology over Kafka at every kill point, restart it, check exact counts.

Run it against a broker you started::

    python -m examples.kafka_transactional_crash --bootstrap 127.0.0.1:9092           # partitioned
    python -m examples.kafka_transactional_crash --bootstrap 127.0.0.1:9092 --opaque  # opaque
    python -m examples.kafka_transactional_crash --bootstrap 127.0.0.1:9092 --kills 3 --json

The Kafka sibling of ``examples.transactional_crash``, with the same kills and the same child
driver handling (its ``run_child``). It writes 60 sentences to each of the four partitions of a
new topic, starts a redis-server on a free 127.0.0.1 port (unless ``--redis-url`` names one) for
the state, and runs ``examples.kafka_transactional_words``' topology (Kafka spout, 2 tasks ->
``split`` -> committer ``count``; ``--opaque`` for ``OpaqueKafkaTransactionalSpout`` and an
``OpaqueMap``) as a child driver, ``statefulbolts run examples.kafka_transactional_crash:topology``,
the same command and transactional id each time (handed over in ``$KAFKA_TX_CRASH``). Two
sentences per partition and batch: 30 txids of data, three in flight
(``topology.max.spout.pending``).

Each run but the last is killed once, in a seeded order (``--seed``; every kind once, then
seeded choices, ``--kills`` in all): at each of the four kill points of the transactional
protocol, by a SIGKILL at a random moment after its first commit, and by a Python worker that
crashes mid-batch in ``split`` (processing phase) or ``count`` (commit phase), after which the
run is killed as soon as that txid commits. Every restart replays the txids the store holds
metas for: the partitioned spout reads each one's stored offset range again (checked against
the records' digest), the opaque one reads on from the last committed offsets.

At the end the committers' maps are read from Redis and checked: every word count equals a
plain count of the topic, each word's stored txid is the last txid whose batch held it (every
batch takes exactly two records of each partition, replays included, as the topic is written
whole before the first run: record ``j`` of a partition goes out in txid ``j // 2 + 1``), and
no txid was reported committed twice. Exit status 0 only if all of that holds, 1 otherwise.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from statefulbolts import TransactionalTopology

from .crash_recovery import with_redis
from .kafka_transactional_words import build, load, make_topic
from .transactional_crash import (
    KILLED,
    KINDS,
    POINTS,
    RANDOM_DELAY_S,
    WORKERS,
    Run,
    _count_since,
    corpus,
    plan,
    run_child,
)
from .transactional_crash import expected as expected_of

ENV = "KAFKA_TX_CRASH"
PARTITIONS = 4
SENTENCES_PER_PARTITION = 60
TAKE_PER_BATCH = 2
MAX_PENDING = 3
Data = dict[int, list[list[str]]]


@dataclass(frozen=True)
class Params:
    """What the child driver builds: the id, the broker and topic, the spout kind, the take."""

    transactional_id: str
    bootstrap: str
    topic: str
    opaque: bool = False
    take_per_batch: int = TAKE_PER_BATCH

    def env(self, base: Mapping[str, str] | None = None) -> dict[str, str]:
        """``base`` (default: this process's) with ``$KAFKA_TX_CRASH`` set to these params.

        With ``JAVA_TOOL_OPTIONS`` for a JVM that starts sooner, as ``transactional_crash``'s.
        """
        env = dict(os.environ if base is None else base)
        env[ENV] = json.dumps(asdict(self))
        env.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
        return env


def params_from_env() -> Params:
    """The ``Params`` in ``$KAFKA_TX_CRASH``."""
    raw = os.environ.get(ENV)
    if not raw:
        msg = f"set {ENV} to the JSON of examples.kafka_transactional_crash.Params"
        raise RuntimeError(msg)
    return Params(**json.loads(raw))


def topology() -> TransactionalTopology:
    """What the child driver runs: ``kafka_transactional_words.build`` with the env's params."""
    p = params_from_env()
    return build(
        p.topic,
        p.bootstrap,
        opaque=p.opaque,
        take_per_batch=p.take_per_batch,
        transactional_id=p.transactional_id,
    )


def provider_conf(redis_url: str, pending: int = MAX_PENDING) -> dict[str, Any]:
    """The topology config of every run: Redis state, ``pending`` txids in flight."""
    return {
        "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
        "topology.state.provider.config": {"redisConfig": {"url": redis_url}},
        "topology.state.checkpoint.interval.ms": 100,
        "topology.max.spout.pending": pending,
    }


def write_topic(bootstrap: str, topic: str, data: Data) -> None:
    """Make ``topic`` with a partition per key of ``data`` and write each partition's rows."""
    make_topic(bootstrap, topic, len(data))
    load(bootstrap, topic, {p: [row[0] for row in rows] for p, rows in data.items()})


# --------------------------------------------------------------------------- what is stored
def stored_words(conf: Mapping[str, Any], transactional_id: str) -> dict[str, tuple[int, int]]:
    """Every word in ``count``'s maps: (the txid that last wrote it, its count), tasks merged.

    A ``TransactionalMap`` stores ``[txid, count]``, an ``OpaqueMap`` ``[txid, count, count
    before]``: the first two are read.
    """
    from providers import KeyValueState, StateFactory
    from statefulbolts.namespaces import TaskNamespace

    found: dict[str, tuple[int, int]] = {}
    for task in range(2):
        namespace = TaskNamespace.of_transactional(transactional_id, "count", task, "default")
        state = StateFactory.get_system_state(str(namespace), conf)
        assert isinstance(state, KeyValueState)  # every provider's system state is one
        for key, plain in state:
            # A key of the map is stored as a one-item array; the record key is a str.
            if isinstance(key, list | tuple) and len(key) == 1:
                found[key[0]] = (plain[0], plain[1])
    return found


def check(
    conf: Mapping[str, Any],
    transactional_id: str,
    commits: list[int],
    data: Data | None = None,
    take_per_batch: int = TAKE_PER_BATCH,
) -> dict[str, Any]:
    """Compare what the store holds with the plain count of ``data`` (default: ``corpus()``).

    ``commits``: the txids the drivers reported committed, every run's, in order.
    """
    from statefulbolts.transactional import transactional_status

    want = expected_of(corpus(PARTITIONS, SENTENCES_PER_PARTITION) if data is None else data,
                       take_per_batch)  # fmt: skip
    stored = stored_words(conf, transactional_id)
    counts = {w: n for w, (_, n) in stored.items() if n}
    txids = {w: t for w, (t, n) in stored.items() if n}
    status = transactional_status(conf, transactional_id)
    repeated = sorted(t for t, n in collections.Counter(commits).items() if n > 1)
    result = {
        "words": sum(want["counts"].values()),
        "counted": sum(counts.values()),
        "counts_exact": counts == want["counts"],
        "txids_as_planned": txids == want["last_txid"],
        "committed_txid": status.committed_txid,
        "data_txids": want["data_txids"],
        "all_committed": (status.committed_txid or 0) >= want["data_txids"],
        "committed_twice": repeated,
    }
    result["exact"] = (
        all(result[k] for k in ("counts_exact", "txids_as_planned", "all_committed"))
        and not repeated
    )
    if not result["counts_exact"]:
        wrong = {w for w in {*counts, *want["counts"]} if counts.get(w) != want["counts"].get(w)}
        result["wrong_counts"] = {
            w: [counts.get(w), want["counts"].get(w)] for w in sorted(wrong)[:10]
        }
    return result


# --------------------------------------------------------------------------- the demo
def child_command(conf_path: Path, name: str) -> list[str]:
    """The command of one child driver (the same for every restart)."""
    spec = f"{__package__}.kafka_transactional_crash:topology"
    cmd = [sys.executable, "-m", "statefulbolts.cli", "run", spec]
    return [*cmd, "--conf", str(conf_path), "--name", name, "--json"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=f"python -m {__package__}.kafka_transactional_crash",
        description=__doc__.split("\n")[0],
    )
    parser.add_argument("--bootstrap", required=True, help="the Kafka brokers, host:port[,...]")
    parser.add_argument("--opaque", action="store_true", help="OpaqueKafkaTransactionalSpout")
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
    return with_redis(args, demo, "kafka-transactional-crash-")


def demo(args: argparse.Namespace, url: str, workdir: Path) -> int:
    from statefulbolts.transactional import transactional_status

    started = time.monotonic()
    rng = random.Random(args.seed)
    run_id = uuid.uuid4().hex[:8]
    tid, topic = f"kafka-tx-crash-{run_id}", f"kafka-tx-crash-{run_id}"
    data = corpus(PARTITIONS, SENTENCES_PER_PARTITION)
    write_topic(args.bootstrap, topic, data)
    params = Params(tid, args.bootstrap, topic, args.opaque)
    conf = provider_conf(url)
    say = (lambda *a: None) if args.json else print
    kind_of_spout = "opaque" if args.opaque else "partitioned"
    say(f"redis {url}, Kafka {args.bootstrap}, topic {topic!r}, {kind_of_spout} spout, seed "
        f"{args.seed}")  # fmt: skip
    say(
        f"{PARTITIONS} partitions of {SENTENCES_PER_PARTITION} sentences, {TAKE_PER_BATCH} per "
        f"partition and batch: {expected_of(data)['data_txids']} txids of data"
    )
    log = workdir / "drivers.log"
    env = params.env()
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
            task, at = rng.randrange(2), rng.randint(1, 2)
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
        run: Run = run_child(
            child_command(conf_path, f"kafka-tx-crash-{i}"), env, log, args.timeout, **options
        )
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

    final = check(conf, tid, commits, data)
    doc = {
        "redis": url,
        "bootstrap": args.bootstrap,
        "topic": topic,
        "spout": kind_of_spout,
        "transactional_id": tid,
        "seed": args.seed,
        "kills": kills,
        "final": final,
        "exact": final["exact"],
        "seconds": round(time.monotonic() - started, 1),
    }
    print(json.dumps(doc, indent=2) if args.json else _table(doc))
    return 0 if final["exact"] else 1


def _table(doc: dict[str, Any]) -> str:
    lines = [
        "",
        f"{'kill':>4}  {'kind':<18} {'txid':>4}  {'next txid':>9}  {'replays':<10}  restart",
    ]
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
        lines.append(
            f"{k['kill']:>4}  {k['kind']:<18} {k['txid']:>4}  {status['current_txid']:>9}  "
            f"{replays:<10}  {how}"
        )
        if k["kind"] in WORKERS:
            lines.append(
                f"{'':>6}worker crashes: {k['worker_crashes']}, failed batch attempts: "
                f"{k['failed_attempts']} (Spark ran the task again)"
            )
    final = doc["final"]
    verdict = "exact" if final["exact"] else "NOT EXACT"
    lines += [
        "",
        f"counted {final['counted']} words for {final['words']}; txids 1..{final['committed_txid']}"
        f" committed ({final['data_txids']} with data): {verdict}",
        f"  counts exact: {final['counts_exact']}, stored txids as planned: "
        f"{final['txids_as_planned']}, committed twice: {final['committed_twice'] or 'none'}; "
        f"{doc['seconds']} s in all",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
