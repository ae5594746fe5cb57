"""Crash the driver at random points of the checkpoint protocol, restart it, and check the counts.

Run it::

    python -m examples.crash_recovery                  # own redis-server, 4 kills, seed 7
    python -m examples.crash_recovery --kills 6 --seed 3 --json
    python -m examples.crash_recovery --redis-url redis://127.0.0.1:6379/0

It starts a redis-server on a free 127.0.0.1 port (unless ``--redis-url`` names one), loads
sentences into a Redis stream, and runs the Redis word count (``RedisStreamSpout`` -> split ->
count, counts in Redis state) as a child driver process: ``statefulbolts run
examples.crash_recovery:topology``. Each run but the last is killed (``topology.faults``) at a
protocol point chosen with ``--seed``: after-prepare, after-committing-saved, mid-commit or
after-committed, a transaction or two ahead. The next run recovers by itself (the checkpoint
spout reads the saved state and drives ROLLBACK or COMMIT, then INITSTATE; the spout gets back
the stream entries the dead driver held) and is killed in turn; the last run goes on until the
stream is drained.

It prints one row per kill: the point and txid, the checkpoint state the kill left, the recovery
the restarted driver ran, and the seconds from restart to recovered (Spark start-up included)
and in the recovery transactions. Then the final counts against a plain Python count, which must
be exact at every kill point (a transaction rolled back is counted once when re-delivered; one
rolled forward or already committed has its entries acked from its saved manifest). Exit status 1
if any count differs, 2 on bad input.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from checkpoint import TxPhase
from checkpoint.status import RECOVERY_ACTIONS, checkpoint_status
from providers import KeyValueState, StateFactory
from recovery import RecoveryTracker, exit_status
from statefulbolts import Fields, StormTopology, TopologyBuilder
from statefulbolts.connectors import RedisStreamSpout, load_stream, pending_count
from statefulbolts.state import committed_items

from .corpus import SENTENCES, sentence, words
from .wordcount import SplitSentence, WordCount

POINTS = ["after-prepare", "after-committing-saved", "mid-commit", "after-committed"]
# Points after the commit decision: the transaction's entries may be delivered a second time.
COSTLY = {"after-committing-saved", "mid-commit", "after-committed"}
PARALLELISM = 2


def topology() -> StormTopology:
    """The Redis word count; stream and server come from the config (``redis.stream.*``)."""
    builder = TopologyBuilder()
    builder.set_spout("sentences", RedisStreamSpout(batch=100), 1)
    builder.set_bolt("split", SplitSentence(), PARALLELISM).shuffle_grouping("sentences")
    builder.set_bolt("count", WordCount(), PARALLELISM).fields_grouping("split", Fields("word"))
    return builder.create_topology()


# --------------------------------------------------------------------------- a redis-server
@contextmanager
def redis_server(workdir: Path) -> Iterator[str]:
    """A throwaway redis-server on a free 127.0.0.1 port; yields its URL."""
    import redis

    exe = shutil.which("redis-server")
    if exe is None:
        msg = "error: redis-server is not on PATH (apt-get install redis-server); or --redis-url"
        raise SystemExit(msg)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    args = [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
    args += ["--dir", str(workdir), "--logfile", str(workdir / "redis.log")]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = redis.Redis(host="127.0.0.1", port=port)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.exceptions.ConnectionError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    msg = f"error: redis-server did not start; see {workdir}"
                    raise SystemExit(msg) from None
                time.sleep(0.05)
        yield f"redis://127.0.0.1:{port}/0"
    finally:
        client.close()
        proc.terminate()
        proc.wait(10)


# --------------------------------------------------------------------------- one child driver
def run_child(conf_path: Path, name: str, log: Path, timeout: float) -> dict[str, Any]:
    """Run the driver once; follow its transactions; return what it did."""
    spec = f"{__package__}.crash_recovery:topology"  # examples or statefulbolts.examples
    cmd = [sys.executable, "-m", "statefulbolts.cli", "run", spec]
    cmd += ["--conf", str(conf_path), "--name", name, "--json"]
    started = time.monotonic()
    tracker = RecoveryTracker(RECOVERY_ACTIONS)
    recovered_after = None
    transactions: list[dict[str, Any]] = []
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
            status = exit_status(proc.wait())
        finally:
            watchdog.cancel()
            _kill_group(proc.pid)  # the driver's JVM and Python workers too
            proc.wait()
    if time.monotonic() - started >= timeout:
        msg = f"the driver ran longer than {timeout} s and was stopped; see {log}"
        raise TimeoutError(msg)
    return {
        "exit_code": status,
        "recovery": tracker.actions,
        "seconds_to_recover": None if recovered_after is None else round(recovered_after, 2),
        "recovery_seconds": round(tracker.seconds, 2),
        "transactions": transactions,
    }


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def next_txid(conf: dict[str, Any], name: str) -> tuple[int, str]:
    """The txid the next PREPARE will use, and the saved checkpoint state (as text)."""
    saved = checkpoint_status(conf, name, []).checkpoint
    if saved is None:
        return 0, "none"
    return (saved.txid if saved.phase is TxPhase.PREPARING else saved.txid + 1), str(saved)


def committed_counts(conf: dict[str, Any], name: str) -> collections.Counter[str]:
    """The counts committed under ``name``: not what a killed run prepared and did not commit."""
    counts: collections.Counter[str] = collections.Counter()
    for task in range(PARALLELISM):
        state = StateFactory.get_state(f"{name}/count-{task}", conf)
        if not isinstance(state, KeyValueState):
            msg = f"the state provider returned {type(state).__qualname__}, not a KeyValueState"
            raise TypeError(msg)
        counts.update(dict(committed_items(state, conf)))
    return counts


# --------------------------------------------------------------------------- the demo
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=f"python -m {__package__}.crash_recovery", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--kills", type=int, default=4, help="driver kills (default 4)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the kill plan (default 7)")
    parser.add_argument("--sentences", type=int, default=400, help="sentences (default 400)")
    parser.add_argument("--pending", type=int, default=40, help="sentences per transaction, max")
    parser.add_argument("--redis-url", help="use this Redis instead of starting one")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per driver run")
    parser.add_argument("--json", action="store_true", help="one JSON document, no table")
    args = parser.parse_args(argv)
    if args.kills < 0 or args.sentences < 1 or args.pending < 1:
        parser.error("--kills must be >= 0, --sentences and --pending >= 1")
    return with_redis(args, demo, "crash-recovery-")


def with_redis(
    args: argparse.Namespace, demo: Callable[[argparse.Namespace, str, Path], int], prefix: str
) -> int:
    """Run ``demo(args, url, workdir)`` on ``--redis-url``, or on a throwaway redis-server."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp:
        workdir = Path(tmp)
        if args.redis_url:
            return demo(args, args.redis_url, workdir)
        with redis_server(workdir) as url:
            return demo(args, url, workdir)


def demo(args: argparse.Namespace, url: str, workdir: Path) -> int:
    from providers.redis import connect

    started = time.monotonic()
    rng = random.Random(args.seed)
    run_id = uuid.uuid4().hex[:8]
    name, stream = f"crashdemo-{run_id}", f"crashdemo-{run_id}:sentences"
    client = connect(url, purpose="the crash demo")
    db = client.connection_pool.connection_kwargs
    conf: dict[str, Any] = {
        "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
        "topology.state.provider.config": {"redisConfig": {"url": url}},
        "topology.state.checkpoint.interval.ms": 200,
        "topology.max.spout.pending": args.pending,
        "redis.stream.url": url,
        "redis.stream.key": stream,
    }
    load_stream(client, stream, (sentence(i) for i in range(args.sentences)))
    log = workdir / "drivers.log"
    say = (lambda *a: None) if args.json else print
    say(f"redis {db.get('host')}:{db.get('port')}, topology {name!r}, stream {stream!r}")
    say(f"{args.sentences} sentences, at most {args.pending} per transaction, seed {args.seed}")

    # Every point once (in a seeded order), then seeded choices.
    points = rng.sample(POINTS, k=min(args.kills, len(POINTS)))
    points += [rng.choice(POINTS) for _ in range(args.kills - len(points))]
    kills: list[dict[str, Any]] = []
    previous: dict[str, Any] | None = None
    for i, point in enumerate([*points, None], start=1):
        run_conf = dict(conf)
        if point is not None:
            first, _ = next_txid(conf, name)
            txid = first + rng.randint(0, 2)
            run_conf["topology.faults"] = {"driver": {"point": point, "txid": txid}}
        conf_path = workdir / f"run-{i}.json"
        conf_path.write_text(json.dumps(run_conf), encoding="utf-8")
        say(
            f"run {i}: "
            + (f"kill at {point} of txid {txid}" if point else "no fault, until drained")
            + " ...",
        )
        result = run_child(conf_path, name, log, args.timeout)
        if previous is not None:  # this run's recovery belongs to the previous kill
            previous.update(
                recovery=result["recovery"],
                seconds_to_recover=result["seconds_to_recover"],
                recovery_seconds=result["recovery_seconds"],
            )
        if point is None:
            if result["exit_code"] != 0:
                print(f"error: the last driver exited {result['exit_code']}; see {log}")
                return 1
            break
        if result["exit_code"] == 0:
            say(f"  the stream was drained before txid {txid}; no more kills")
            break
        if result["exit_code"] != 137:
            print(f"error: driver {i} exited {result['exit_code']}, not killed; see {log}")
            return 1
        _, saved = next_txid(conf, name)
        tx = result["transactions"]
        previous = {
            "kill": i,
            "point": point,
            "txid": txid,
            "saved": saved,
            "exit_code": result["exit_code"],
            "tuples_in_txid": next(
                (t["tuples"] for t in tx if t["action"] == "PREPARE" and t["txid"] == txid), None
            ),
        }
        kills.append(previous)

    counts = committed_counts(conf, name)
    exact: collections.Counter[str] = collections.Counter()
    for i in range(args.sentences):
        exact.update(words(sentence(i)))
    lost = exact - counts
    excess = counts - exact
    longest = max(len(words(s)) for s in SENTENCES)
    costly = sum(1 for k in kills if k["point"] in COSTLY)
    bound = costly * args.pending * longest
    prepare_keys = len(client.keys(f"{name}/*$prepare"))
    pending = pending_count(client, stream, name)
    ok = counts == exact and prepare_keys == 0 and pending == 0
    final = {
        "sentences": args.sentences,
        "words": sum(exact.values()),
        "counted": sum(counts.values()),
        "exact": counts == exact,
        "lost_words": sum(lost.values()),
        "excess_words": sum(excess.values()),
        "excess_bound_words": bound,
        "prepare_keys_left": prepare_keys,
        "pending_entries_left": pending,
        "ok": ok,
    }
    result_doc = {
        "redis": f"{db.get('host')}:{db.get('port')}",
        "topology": name,
        "stream": stream,
        "seed": args.seed,
        "kills": kills,
        "final": final,
        "seconds": round(time.monotonic() - started, 1),
    }
    client.close()
    if args.json:
        print(json.dumps(result_doc, indent=2))
        return 0 if ok else 1
    print()
    print(
        f"{'kill':>4}  {'point':<22} {'txid':>4}  {'saved':<15} {'recovery on restart':<32} "
        f"{'recovered s':>11} {'in jobs s':>9}"
    )
    for k in kills:
        actions = ", ".join(k.get("recovery") or ["(did not recover)"])
        print(
            f"{k['kill']:>4}  {k['point']:<22} {k['txid']:>4}  {k['saved']:<15} {actions:<32} "
            f"{k.get('seconds_to_recover') or 0:>11.1f} {k.get('recovery_seconds') or 0:>9.2f}"
        )
    print()
    verdict = (
        "exact"
        if final["exact"]
        else (
            f"{final['excess_words']} words above the exact count (expected exact; {costly} "
            f"kills after the commit decision, at-least-once bound {bound})"
        )
    )
    if lost:
        verdict = f"LOST {final['lost_words']} words"
    print(
        f"counted {final['counted']} words for {final['words']} in {args.sentences} sentences: "
        f"{verdict}"
    )
    print(
        f"$prepare keys left: {prepare_keys}; stream entries pending: {pending}; "
        f"{result_doc['seconds']} s in all"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
