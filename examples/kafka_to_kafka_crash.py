"""Kill the Kafka-to-Kafka driver at every point of the protocol and at random; check the log.

Run it against a broker you started::

    python -m examples.kafka_to_kafka_crash --bootstrap 127.0.0.1:9092
    python -m examples.kafka_to_kafka_crash --bootstrap 127.0.0.1:9092 --points none \\
        --random-kills 3 --seed 5 --json

It starts a redis-server on a free 127.0.0.1 port (unless ``--redis-url`` names one), makes an
input topic and the sink's target (``--sink``, ``examples._sink_targets``: an output topic by
default), writes ``--sentences`` sentences to the input, and runs ``examples.kafka_to_kafka``
(sentences -> split -> counts in Redis -> the sink) as a child driver: ``statefulbolts run``
of the target's topology (``--engine spark``, the default, or ``inline``). Each run but the
last is killed:

- at a protocol point (``topology.faults``), each of ``--points`` once in a seeded order, a
  transaction or two ahead: ``after-prepare`` (PREPARE(t) done, COMMITTING(t) not saved),
  ``after-committing-saved`` (no sink has published t), ``mid-commit`` (a task has published
  and committed t, the others may be publishing: the driver is killed from inside the COMMIT
  job, and every process of the run with it), ``after-committed`` (COMMITTED(t) saved);
- then ``--random-kills`` times at a random moment (SIGKILL of the whole process group, a
  seeded delay after the run's first transaction), which may land anywhere, a publish step
  included.

The next run recovers by itself: the checkpoint rolls PREPARING(t) back and COMMITTING(t)
forward; a rolled-forward COMMIT(t) finds each lane's marker and publishes what the target
does not hold yet, nothing twice. The last run goes on until the input is drained. Then the
change log is read back from the target and checked (``kafka_to_kafka.judge``): for every
word, each published count is the previous one plus its delta, strictly increasing, and the
last is the plain count. Exit status 0 when exact, 1 when not, 2 on bad input.

On a broker that shows aborted transactions' records to ``read_committed`` readers (the tests'
Tansu), a kill inside a publish step leaves that step's records in the log; the verdict
counts them (``aborted_records``, told apart by their publish headers), and they are not
part of the change log: Apache Kafka would not show them.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from checkpoint.status import RECOVERY_ACTIONS
from recovery import RecoveryTracker, exit_status

from ._sink_targets import SinkTarget, target_named
from .crash_recovery import next_txid, with_redis
from .kafka_to_kafka import add_sink_arguments, ensure_topics, verify
from .kafka_wordcount import load
from .wordcount import expected_counts

POINTS = ["after-prepare", "after-committing-saved", "mid-commit", "after-committed"]
KILLED = 137


def run_child(
    conf_path: Path,
    name: str,
    log: Path,
    timeout: float,
    kill_after: float | None = None,
    *,
    spec: str = f"{__package__}.kafka_to_kafka:topology",
    engine: str = "spark",
) -> dict[str, Any]:
    """Run the driver once (killed ``kill_after`` s after its first transaction, if given)."""
    cmd = [sys.executable, "-m", "statefulbolts.cli", "run", spec]
    cmd += ["--conf", str(conf_path), "--name", name, "--json", "--engine", engine]
    started = time.monotonic()
    tracker = RecoveryTracker(RECOVERY_ACTIONS)
    recovered_after: float | None = None
    transactions: list[dict[str, Any]] = []
    killer: threading.Timer | None = None
    with open(log, "a", encoding="utf-8") as err:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=err, text=True, start_new_session=True
        )
        watchdog = threading.Timer(timeout, _kill_group, (proc.pid,))
        watchdog.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if not line.startswith("{"):
                    continue
                event = json.loads(line)
                if event.get("event") != "transaction":
                    continue
                transactions.append(event)
                if tracker.add(event):
                    recovered_after = time.monotonic() - started
                if kill_after is not None and killer is None:
                    killer = threading.Timer(kill_after, _kill_group, (proc.pid,))
                    killer.start()
            status = exit_status(proc.wait())
        finally:
            watchdog.cancel()
            if killer is not None:
                killer.cancel()
            _kill_group(proc.pid)  # the driver's JVM and Python workers too
            proc.wait()
    if time.monotonic() - started >= timeout:
        msg = f"the driver ran longer than {timeout} s and was stopped; see {log}"
        raise TimeoutError(msg)
    return {
        "exit_code": status,
        "recovery": tracker.actions,
        "seconds_to_recover": None if recovered_after is None else round(recovered_after, 2),
        "transactions": transactions,
    }


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def main(argv: list[str] | None = None) -> int:
    """Parse the arguments; run the demo on a Redis."""
    parser = argparse.ArgumentParser(
        prog=f"python -m {__package__}.kafka_to_kafka_crash", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--bootstrap", required=True, help="the brokers, host:port[,...]")
    parser.add_argument(
        "--points",
        default=",".join(POINTS),
        help=f"kill points, comma-separated, each once (default all: {','.join(POINTS)}), "
        "or 'none'",
    )
    parser.add_argument("--random-kills", type=int, default=0, help="kills at random moments")
    parser.add_argument("--seed", type=int, default=7, help="seed of the kill plan (default 7)")
    parser.add_argument("--sentences", type=int, default=400, help="sentences (default 400)")
    parser.add_argument("--pending", type=int, default=20, help="records per spout task and txn")
    parser.add_argument(
        "--engine",
        choices=["spark", "inline"],
        default="spark",
        help="what runs each driver's jobs (default spark)",
    )
    parser.add_argument("--redis-url", help="use this Redis instead of starting one")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per driver run")
    parser.add_argument("--json", action="store_true", help="one JSON document, no table")
    parser.add_argument("--log", help="append the drivers' stderr to this file (else a temp file)")
    add_sink_arguments(parser)
    args = parser.parse_args(argv)
    points = [] if args.points == "none" else [p for p in args.points.split(",") if p]
    unknown = sorted(set(points) - set(POINTS))
    if unknown or args.random_kills < 0 or args.sentences < 1 or args.pending < 1:
        parser.error(
            f"unknown points {unknown}" if unknown else "counts must be positive (kills >= 0)"
        )
    args.point_list = points
    args.run_id = uuid.uuid4().hex[:8]
    try:
        args.target = target_named(args.sink).from_args(args, args.run_id)
    except ValueError as exc:
        parser.error(str(exc))
    return with_redis(args, demo, "kafka-to-kafka-crash-")


def demo(args: argparse.Namespace, url: str, workdir: Path) -> int:
    """The kills, the last run and the verdict (see the module docstring)."""
    started = time.monotonic()
    rng = random.Random(args.seed)
    run_id = args.run_id
    target: SinkTarget = args.target
    name = f"k2k-crash-{run_id}"
    in_topic = f"k2k-in-{run_id}"
    ensure_topics(args.bootstrap, [in_topic])
    target.prepare()
    load(args.bootstrap, in_topic, args.sentences)
    conf: dict[str, Any] = {
        "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
        "topology.state.provider.config": {"redisConfig": {"url": url}},
        "topology.state.checkpoint.interval.ms": 100,
        "topology.max.spout.pending": args.pending,
        "kafka.bootstrap.servers": args.bootstrap,
        "kafka.topics": in_topic,
        "sink.kafka.publish.timeout.ms": 20_000,
        **target.conf(),
    }
    log = Path(args.log) if args.log else workdir / "drivers.log"
    say = (lambda *a: None) if args.json else print
    say(
        f"topology {name!r}: {args.sentences} sentences {in_topic!r} -> updates in "
        f"{target.describe()}"
    )

    plan: list[tuple[str, Any]] = [
        ("point", p) for p in rng.sample(args.point_list, k=len(args.point_list))
    ]
    plan += [("random", round(rng.uniform(0.0, 2.0), 2)) for _ in range(args.random_kills)]
    kills: list[dict[str, Any]] = []
    previous: dict[str, Any] | None = None
    for i, step in enumerate([*plan, None], start=1):
        run_conf = dict(conf)
        kill_after = None
        txid = None
        if step is not None and step[0] == "point":
            first, _ = next_txid(conf, name)
            txid = first + rng.randint(0, 2)
            run_conf["topology.faults"] = {"driver": {"point": step[1], "txid": txid}}
            say(f"run {i}: kill at {step[1]} of txid {txid} ...")
        elif step is not None:
            kill_after = step[1]
            say(f"run {i}: kill {kill_after} s after its first transaction ...")
        else:
            say(f"run {i}: no fault, until drained ...")
        conf_path = workdir / f"run-{i}.json"
        conf_path.write_text(json.dumps(run_conf), encoding="utf-8")
        result = run_child(
            conf_path, name, log, args.timeout, kill_after, spec=target.spec, engine=args.engine
        )
        if previous is not None:
            previous.update(
                recovery=result["recovery"], seconds_to_recover=result["seconds_to_recover"]
            )
        if step is None:
            if result["exit_code"] != 0:
                print(f"error: the last driver exited {result['exit_code']}; see {log}")
                return 1
            break
        if result["exit_code"] == 0:
            say("  the input was drained before the kill; no more kills")
            break
        if result["exit_code"] != KILLED:
            print(f"error: driver {i} exited {result['exit_code']}, not killed; see {log}")
            _print_tail(log)
            return 1
        _, saved = next_txid(conf, name)
        previous = {
            "kill": i,
            "how": step[0],
            "point": step[1] if step[0] == "point" else None,
            "after_seconds": kill_after,
            "txid": txid,
            "saved": saved,
            "transactions": len(result["transactions"]),
        }
        kills.append(previous)

    verdict = verify(target, expected_counts(args.sentences))
    doc = {
        "topology": name,
        "in_topic": in_topic,
        "sink": args.sink,
        "target": target.describe(),
        "engine": args.engine,
        "seed": args.seed,
        "sentences": args.sentences,
        "kills": kills,
        "final": verdict.as_dict(),
        "exact": verdict.exact,
        "seconds": round(time.monotonic() - started, 1),
    }
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0 if verdict.exact else 1
    print()
    print(f"{'kill':>4}  {'how':<34} {'saved':<16} recovery on restart")
    for k in kills:
        how = (
            k["point"] + f" of txid {k['txid']}"
            if k["how"] == "point"
            else (f"random, {k['after_seconds']} s in")
        )
        actions = ", ".join(k.get("recovery") or ["(did not recover)"])
        print(f"{k['kill']:>4}  {how:<34} {k['saved']:<16} {actions}")
    print()
    print(
        f"{verdict.updates} updates of {verdict.words} words in {target.describe()}: "
        + ("exact" if verdict.exact else "NOT EXACT")
        + (
            f" ({verdict.aborted_records} records of {verdict.aborted_attempts} aborted "
            "publishes shown by the broker, not counted)"
            if verdict.aborted_records
            else ""
        )
    )
    for problem in verdict.problems[:10]:
        print(f"  {problem}")
    print(f"{doc['seconds']} s in all")
    return 0 if verdict.exact else 1


def _print_tail(log: Path) -> None:
    text = log.read_text(encoding="utf-8", errors="replace") if log.exists() else ""
    print(text[-3000:], file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
