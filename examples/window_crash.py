"""Kill the trending-words driver and a Python worker while windows are open; check every window.

Run it::

    python -m examples.window_crash                  # own redis-server, 3 kills, seed 7
    python -m examples.window_crash --kills 2 --seed 3 --json
    python -m examples.window_crash --redis-url redis://127.0.0.1:6379/0

It starts a redis-server on a free 127.0.0.1 port (unless ``--redis-url`` names one), loads the
trending-words input (``examples.trending_words``: Zipf words stamped over simulated minutes,
some out of order) into a Redis stream, and runs the trending topology as a child driver process
on the Redis provider: ``python -m examples.trending_words --redis-stream KEY --events``. The
child reads the stream through a ``RedisStreamSpout`` (a restarted driver gets back the entries
its dead predecessor held), keeps its windows in Redis, appends the late records once the
window of the period's middle is committed, and stops once every window and late record is.

Each run but the last is killed once, in a seeded order (``--seed``; every kind once, then
seeded choices, ``--kills`` in all), for a txid at most two after the next one to commit, so
with windows open (some fired, the later ones still filling):

- a kill point of the checkpoint protocol (``topology.faults``): ``after-prepare``,
  ``after-committing-saved``, ``mid-commit``, ``after-committed``;
- ``worker``: a Python worker running the windowed bolt crashes (``os._exit``) at a seeded
  tuple of that txid, on the task's first Spark attempt (Spark runs the task again), and the
  driver is SIGKILLed as soon as it reports that txid committed;
- ``random``: SIGKILL of the driver a seeded delay (under 1.5 s) after its first commit.

The same command restarts the driver each time; the last run goes on to the end. Then the
results committed in Redis are checked: one row per window (its end, records, how many times
its result was emitted, and whether it equals the plain Python computation over the same
records), and the late records counted against the stragglers sent. Exit status 0 only if every
window was emitted exactly once and equal, and the late records are exactly the expected ones;
1 otherwise, 2 on bad input.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from .crash_recovery import POINTS, next_txid, with_redis
from .transactional_crash import KILLED, RANDOM_DELAY_S, run_child
from .trending_words import LENGTH, Input, make_input, verdict

KINDS = [*POINTS, "worker", "random"]
WINDOWED = "trending"


def plan(rng: random.Random, kills: int) -> list[str]:
    """The kinds of kill, in order: every kind once (shuffled), then seeded choices."""
    kinds = rng.sample(KINDS, k=min(kills, len(KINDS)))
    return kinds + [rng.choice(KINDS) for _ in range(kills - len(kinds))]


def committed(conf: Mapping[str, Any], name: str) -> tuple[dict[Any, Any], dict[Any, Any]]:
    """The results and late counts committed in the store under topology ``name``.

    Committed only: what a killed run prepared and did not commit is not in them.
    """
    from statefulbolts.namespaces import TaskNamespace
    from statefulbolts.state import merged_state

    results, late = (
        merged_state(conf, [str(TaskNamespace.of_topology(name, component, 0))])
        for component in ("results", "late_count")
    )
    return results, late


def child_command(args: argparse.Namespace, conf_path: Path, name: str, stream: str) -> list[str]:
    """One child driver: the trending topology over the stream (the same for every restart)."""
    cmd = [sys.executable, "-m", f"{__package__}.trending_words", "--conf", str(conf_path)]
    cmd += ["--name", name, "--redis-stream", stream, "--events", "--timeout", str(args.timeout)]
    for flag in ("records", "minutes", "late", "disorder", "top"):
        cmd += [f"--{flag}", str(getattr(args, flag))]
    return cmd


def child_env() -> dict[str, str]:
    """A JVM that starts faster for a driver that lives seconds (override: set it yourself)."""
    env = dict(os.environ)
    env.setdefault("JAVA_TOOL_OPTIONS", "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC")
    return env


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=f"python -m {__package__}.window_crash", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--kills", type=int, default=3, help="kills (default 3)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the kill plan (default 7)")
    parser.add_argument("--records", type=int, default=1500, help="on-time records (1500)")
    parser.add_argument("--minutes", type=int, default=14, help="simulated minutes (14)")
    parser.add_argument("--late", type=int, default=12, help="late records (default 12)")
    parser.add_argument("--disorder", type=int, default=80, help="out-of-order records (80)")
    parser.add_argument("--top", type=int, default=5, help="top N words per window (default 5)")
    parser.add_argument("--pending", type=int, default=150, help="records per transaction, max")
    parser.add_argument("--redis-url", help="use this Redis instead of starting one")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per driver run")
    parser.add_argument("--json", action="store_true", help="one JSON document, no table")
    args = parser.parse_args(argv)
    if args.kills < 0 or args.pending < 1:
        parser.error("--kills must be >= 0 and --pending >= 1")
    try:
        make_input(args.records, args.minutes, args.late, args.disorder)
    except ValueError as exc:
        parser.error(str(exc))
    return with_redis(args, demo, "window-crash-")


def demo(args: argparse.Namespace, url: str, workdir: Path) -> int:
    from providers.redis import connect
    from statefulbolts.connectors import load_stream

    started = time.monotonic()
    rng = random.Random(args.seed)
    run_id = uuid.uuid4().hex[:8]
    name, stream = f"windowcrash-{run_id}", f"windowcrash-{run_id}:records"
    data = make_input(args.records, args.minutes, args.late, args.disorder)
    conf: dict[str, Any] = {
        "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
        "topology.state.provider.config": {"redisConfig": {"url": url}},
        "topology.state.checkpoint.interval.ms": 100,
        "topology.max.spout.pending": args.pending,
    }
    client = connect(url, purpose="the window crash demo")
    load_stream(client, stream, data.first_phase, field="record")
    client.close()
    say = (lambda *a: None) if args.json else print
    say(f"redis {url}, topology {name!r}, stream {stream!r}, seed {args.seed}")
    say(
        f"{len(data.on_time)} records over {args.minutes} simulated minutes, {len(data.late)} "
        f"late; at most {args.pending} records per transaction"
    )
    log = workdir / "drivers.log"
    env = child_env()
    kills: list[dict[str, Any]] = []
    previous: dict[str, Any] | None = None
    for i, kind in enumerate([*plan(rng, args.kills), None], start=1):
        run_conf: dict[str, Any] = dict(conf)
        first, _ = next_txid(conf, name)
        txid: int | None = None
        options: dict[str, Any] = {}
        if kind in POINTS:
            txid = first + rng.randint(0, 2)
            run_conf["topology.faults"] = {"driver": {"point": kind, "txid": txid}}
            what = f"kill at {kind} of txid {txid}"
        elif kind == "worker":
            txid = first + rng.randint(0, 2)
            at = rng.randint(1, 20)
            fault = {"component": WINDOWED, "task": 0, "at_tuple": at, "kind": "crash",
                     "attempts": "first", "txid": txid}  # fmt: skip
            run_conf["topology.faults"] = {"tasks": [fault]}
            options["kill_after_commit_of"] = txid
            what = f"crash the windowed bolt's worker at tuple {at} of txid {txid}, then the driver"
        elif kind == "random":
            delay = round(rng.uniform(0, RANDOM_DELAY_S), 2)
            options["kill_after_first_commit"] = delay
            what = f"SIGKILL {delay} s after the first commit"
        else:
            what = "no fault, to the end"
        conf_path = workdir / f"run-{i}.json"
        conf_path.write_text(json.dumps(run_conf), encoding="utf-8")
        say(f"run {i}: {what} ...")
        mark = log.stat().st_size if log.exists() else 0
        run = run_child(child_command(args, conf_path, name, stream), env, log, args.timeout,
                        **options)  # fmt: skip
        if previous is not None:  # this run's start is the previous kill's restart
            previous["restart_seconds_to_first_commit"] = run.seconds_to_first_commit
        if kind is None:
            if run.exit_code != 0:
                print(f"error: the last driver exited {run.exit_code}; see {log}")
                return 1
            break
        if run.exit_code == 0:
            say("  the run reached the end before the kill; no more kills")
            break
        if run.exit_code != KILLED:
            print(f"error: driver {i} exited {run.exit_code}, not killed; see {log}")
            return 1
        results, late = committed(conf, name)
        _, saved = next_txid(conf, name)
        previous = {
            "kill": i,
            "kind": kind,
            "txid": txid,
            "exit_code": run.exit_code,
            "saved": saved,
            "windows_committed": len(results),
            "late_committed": sum(late.values()),
            "commits": len(run.commits),
        }
        if kind == "worker":
            previous["worker_crashes"] = _count_since(log, mark, "injected crash in")
        kills.append(previous)

    results, late = committed(conf, name)
    found = verdict(data, args.top, results, late)
    doc = {
        "redis": url,
        "topology": name,
        "seed": args.seed,
        "kills": kills,
        "windows": found.pop("windows"),
        "final": found,
        "exact": found["exact"],
        "seconds": round(time.monotonic() - started, 1),
    }
    if args.json:
        print(json.dumps(doc, indent=2))
    else:
        _table(doc, data)
    return 0 if doc["exact"] else 1


def _count_since(log: Path, offset: int, text: str) -> int:
    with open(log, encoding="utf-8", errors="replace") as fh:
        fh.seek(offset)
        return fh.read().count(text)


def _table(doc: dict[str, Any], data: Input) -> None:
    print()
    print(f"{'kill':>4}  {'kind':<22} {'txid':>4}  {'saved':<15} {'windows':>7}  restart")
    for k in doc["kills"]:
        restart = k.get("restart_seconds_to_first_commit")
        how = "-" if restart is None else f"{restart:.1f} s to its first commit"
        print(
            f"{k['kill']:>4}  {k['kind']:<22} {k['txid'] if k['txid'] is not None else '-':>4}  "
            f"{k['saved']:<15} {k['windows_committed']:>7}  {how}"
        )
    print()
    print(f"{'window (UTC)':<13} {'records':>7}  {'emitted':>7}  plain computation")
    for row in doc["windows"]:
        start, end = row["end"] - LENGTH.value, row["end"]
        span = f"{time.strftime('%H:%M', time.gmtime(start / 1000))}-"
        span += time.strftime("%H:%M", time.gmtime(end / 1000))
        state = "equal" if row["equal"] else ("MISSING" if row["emitted"] == 0 else "DIFFERS")
        print(f"{span:<13} {row['size'] or 0:>7}  {row['emitted']:>7}  {state}")
    final = doc["final"]
    print()
    print(
        f"{final['windows_equal']} of {final['windows_expected']} windows emitted exactly once "
        f"and equal to the plain computation; emitted twice: "
        f"{final['windows_emitted_twice'] or 'none'}"
    )
    print(
        f"late records counted: {final['late_counted']} for {len(data.late)} sent late, "
        f"{'each once' if final['late_exact'] else 'NOT the expected ones'}"
    )
    print(f"verdict: {'exact' if doc['exact'] else 'NOT EXACT'}; {doc['seconds']} s in all")


if __name__ == "__main__":
    sys.exit(main())
