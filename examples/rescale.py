"""Rescale and rename a running Redis word count, killing its driver on the way; check every step.

Run it::

    python -m examples.rescale                  # own redis-server, seed 7
    python -m examples.rescale --seed 3 --json
    python -m examples.rescale --redis-url redis://127.0.0.1:6379/0

It starts a redis-server on a free 127.0.0.1 port (unless ``--redis-url`` names one) and runs
the Redis word count (``RedisStreamSpout`` -> split -> counter, counts in Redis state) as a
child driver process through four steps: parallelism 2, 3, 1 and 4 of the counter, which is
renamed from ``count`` to ``counter`` at the third step (``topology.state.renames``). Before
each step it adds ``--sentences`` new sentences to the stream. In each step:

1. from the second step on, the first driver is SIGKILLed *while it rescales* the stored state
   (``topology.faults``: after every new namespace was staged, or after the n-th was swapped in,
   as the seed says);
2. the next driver finishes the rescale by itself and starts counting, and is SIGKILLed at a
   random moment after its first commit;
3. the last driver recovers (ROLLBACK or COMMIT, then INITSTATE) and runs until the stream is
   drained.

After each step it reads Redis: the counts of every task of the counter against a plain Python
count of all the sentences so far, that each key sits in the task that owns its key group, that
no namespace is left for a task or a name the topology no longer has, and that nothing is left
prepared or pending. Exit status 1 if any step is not exact, 2 on bad input.
"""

from __future__ import annotations

import argparse
import collections
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

from providers import KeyValueState, StateFactory, get_provider
from statefulbolts import Fields, StormTopology, TopologyBuilder
from statefulbolts.connectors import RedisStreamSpout, load_stream, pending_count
from statefulbolts.keygroups import KeyGroups
from statefulbolts.namespaces import TaskNamespace, topology_prefix
from statefulbolts.offline import stored_shape

from .corpus import sentence, words
from .crash_recovery import with_redis
from .wordcount import SplitSentence, WordCount

STEPS = [(2, "count"), (3, "count"), (1, "counter"), (4, "counter")]
KILLED = 137
_PARALLELISM_ENV = "RESCALE_DEMO_PARALLELISM"
_COUNTER_ENV = "RESCALE_DEMO_COUNTER"


def topology() -> StormTopology:
    """The Redis word count; the counter's parallelism and id come from the environment."""
    parallelism = int(os.environ.get(_PARALLELISM_ENV, "2"))
    counter = os.environ.get(_COUNTER_ENV, "count")
    builder = TopologyBuilder()
    builder.set_spout("sentences", RedisStreamSpout(batch=100), 1)
    builder.set_bolt("split", SplitSentence(), 2).shuffle_grouping("sentences")
    builder.set_bolt(counter, WordCount(), parallelism).fields_grouping("split", Fields("word"))
    return builder.create_topology()


# --------------------------------------------------------------------------- one child driver
def run_driver(
    conf: dict[str, Any],
    name: str,
    parallelism: int,
    counter: str,
    workdir: Path,
    *,
    kill_after_commit: random.Random | None = None,
    timeout: float = 300,
) -> dict[str, Any]:
    """Run one driver; with ``kill_after_commit``, SIGKILL it soon after its first commit."""
    path = workdir / f"conf-{uuid.uuid4().hex[:6]}.json"
    path.write_text(json.dumps(conf), encoding="utf-8")
    cmd = [sys.executable, "-m", "statefulbolts.cli", "run", f"{__package__}.rescale:topology"]
    cmd += ["--conf", str(path), "--name", name, "--json"]
    env = {**os.environ, _PARALLELISM_ENV: str(parallelism), _COUNTER_ENV: counter}
    log = workdir / "drivers.log"
    started = time.monotonic()
    commits = 0
    killed_at: float | None = None
    with open(log, "a", encoding="utf-8") as err:
        faults = conf.get("topology.faults")
        err.write(f"--- driver: {counter} x{parallelism}, faults {faults}\n")
        err.flush()
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=err, text=True, env=env, start_new_session=True
        )
        watchdog = threading.Timer(timeout, _kill_group, (proc.pid,))
        watchdog.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                if not line.startswith("{"):
                    continue
                event = json.loads(line)
                if event.get("event") != "transaction" or not event.get("ok"):
                    continue
                if event.get("action") == "COMMIT":
                    commits += 1
                    if commits == 1 and kill_after_commit is not None:
                        delay = kill_after_commit.uniform(0.0, 1.5)
                        killed_at = round(delay, 2)
                        threading.Timer(delay, _kill_group, (proc.pid,)).start()
            code = proc.wait()
        finally:
            watchdog.cancel()
            _kill_group(proc.pid)
            proc.wait()
    seconds = time.monotonic() - started
    if seconds >= timeout:
        msg = f"a driver ran longer than {timeout} s and was stopped; see {log}"
        raise TimeoutError(msg)
    text = log.read_text(encoding="utf-8", errors="replace")
    return {
        "exit_code": 128 + signal.SIGKILL if code == -signal.SIGKILL else code,
        "commits": commits,
        "killed_after_s": killed_at,
        "seconds": round(seconds, 1),
        "log_tail": text[-3000:],
    }


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# --------------------------------------------------------------------------- checking a step
def check(
    conf: dict[str, Any], name: str, counter: str, parallelism: int, sentences: int
) -> dict[str, Any]:
    """What Redis holds after a step, against a plain count of ``sentences`` sentences."""
    prefix = topology_prefix(name)
    listed = get_provider(conf).namespaces(conf, prefix) or []
    tasks = sorted(ns for ns in listed if TaskNamespace.parse(prefix, ns) is not None)
    expected_tasks = [str(TaskNamespace(prefix, counter, t)) for t in range(parallelism)]
    groups = KeyGroups(128)
    counts: collections.Counter[str] = collections.Counter()
    misplaced = 0
    for ns in expected_tasks:
        state = StateFactory.get_state(ns, conf)
        assert isinstance(state, KeyValueState)
        task = TaskNamespace.parse(prefix, ns).task  # type: ignore[union-attr]
        for ekey, payload in state.scan_committed():
            word = state.decode_key(ekey)
            counts[word] += state.decode_value(payload)
            if groups.owner(groups.group_of(word), parallelism) != task:
                misplaced += 1
    exact: collections.Counter[str] = collections.Counter()
    for i in range(sentences):
        exact.update(words(sentence(i)))
    shape = stored_shape(conf, prefix)
    recorded = shape.components.get(counter) if shape is not None else None
    return {
        "words": sum(exact.values()),
        "counted": sum(counts.values()),
        "exact": counts == exact,
        "misplaced_keys": misplaced,
        "stray_namespaces": [ns for ns in tasks if ns not in expected_tasks],
        "recorded_parallelism": recorded.parallelism if recorded else None,
    }


# --------------------------------------------------------------------------- the demo
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=f"python -m {__package__}.rescale", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--seed", type=int, default=7, help="seed of the kills (default 7)")
    parser.add_argument("--sentences", type=int, default=300, help="new sentences per step")
    parser.add_argument("--pending", type=int, default=40, help="sentences per transaction, max")
    parser.add_argument("--redis-url", help="use this Redis instead of starting one")
    parser.add_argument("--timeout", type=float, default=300, help="seconds per driver run")
    parser.add_argument("--json", action="store_true", help="one JSON document, no table")
    args = parser.parse_args(argv)
    if args.sentences < 1 or args.pending < 1:
        parser.error("--sentences and --pending must be >= 1")
    return with_redis(args, demo, "rescale-")


def demo(args: argparse.Namespace, url: str, workdir: Path) -> int:
    from providers.redis import connect

    started = time.monotonic()
    rng = random.Random(args.seed)
    run_id = uuid.uuid4().hex[:8]
    name, stream = f"rescale-{run_id}", f"rescale-{run_id}:sentences"
    client = connect(url, purpose="the rescale demo")
    conf: dict[str, Any] = {
        "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
        "topology.state.provider.config": {"redisConfig": {"url": url}},
        "topology.state.checkpoint.interval.ms": 200,
        "topology.state.renames": {"count": "counter"},
        "topology.max.spout.pending": args.pending,
        "redis.stream.url": url,
        "redis.stream.key": stream,
    }
    say = (lambda *a: None) if args.json else print
    say(
        f"redis {url}, topology {name!r}, {args.sentences} new sentences per step, seed {args.seed}"
    )
    rows: list[dict[str, Any]] = []
    loaded = 0
    # Each kind of mid-rescale kill once, in a seeded order, then a seeded choice.
    kinds = rng.sample(["evolve-staged", "evolve-mid-swap"], 2)
    kinds.append(rng.choice(kinds))
    previous = None
    for step, (parallelism, counter) in enumerate(STEPS, start=1):
        load_stream(client, stream, (sentence(i) for i in range(loaded, loaded + args.sentences)))
        loaded += args.sentences
        kills: list[str] = []
        resumed = False
        if step > 1:  # 1. killed while it rescales
            point = kinds[step - 2]
            swapped = rng.randrange(parallelism) if point == "evolve-mid-swap" else 0
            faulty = {**conf, "topology.faults": {"driver": {"point": point, "txid": swapped}}}
            say(
                f"step {step}: {counter} x{parallelism}; driver killed {_where(point, swapped)} ..."
            )
            run = run_driver(faulty, name, parallelism, counter, workdir, timeout=args.timeout)
            if run["exit_code"] != KILLED:
                return _failed(args, f"the rescaling driver exited {run['exit_code']}", run)
            kills.append(_where(point, swapped))
        # 2. killed while it counts
        say(f"step {step}: {counter} x{parallelism}; driver killed while it counts ...")
        run = run_driver(
            conf, name, parallelism, counter, workdir,
            kill_after_commit=rng, timeout=args.timeout,
        )  # fmt: skip
        resumed = "finishing a change of its stored state" in run["log_tail"]
        if run["exit_code"] == 0:
            kills.append("none while counting (the stream drained first)")
        elif run["exit_code"] == KILLED:
            kills.append(f"{run['killed_after_s']} s after its first commit")
        else:
            return _failed(args, f"a driver exited {run['exit_code']}", run)
        # 3. recovers and drains
        say(f"step {step}: {counter} x{parallelism}; last driver, until drained ...")
        run = run_driver(conf, name, parallelism, counter, workdir, timeout=args.timeout)
        if run["exit_code"] != 0:
            return _failed(args, f"the last driver exited {run['exit_code']}", run)
        verdict = check(conf, name, counter, parallelism, loaded)
        verdict["prepare_keys"] = len(client.keys(f"{name}/*$prepare"))
        verdict["pending_entries"] = pending_count(client, stream, name)
        verdict["ok"] = (
            verdict["exact"]
            and not verdict["misplaced_keys"]
            and not verdict["stray_namespaces"]
            and verdict["recorded_parallelism"] == parallelism
            and not verdict["prepare_keys"]
            and not verdict["pending_entries"]
        )
        rows.append(
            {
                "step": step,
                "counter": counter,
                "parallelism": parallelism,
                "rescale": "" if previous is None else f"{previous[1]} x{previous[0]} ->",
                "sentences": loaded,
                "kills": kills,
                "rescale_finished_after_kill": resumed if step > 1 else None,
                **verdict,
            }
        )
        previous = (parallelism, counter)
    client.close()
    ok = all(r["ok"] for r in rows)
    doc = {"topology": name, "seed": args.seed, "steps": rows, "ok": ok,
           "seconds": round(time.monotonic() - started, 1)}  # fmt: skip
    if args.json:
        print(json.dumps(doc, indent=2))
        return 0 if ok else 1
    print()
    print(f"{'step':>4}  {'from':<14} {'to':<12} {'sentences':>9} {'words':>6} "
          f"{'counted':>7}  {'placed':<6} {'strays':>6}  {'verdict':<7} driver kills")  # fmt: skip
    for r in rows:
        placed = "ok" if not r["misplaced_keys"] else f"{r['misplaced_keys']} off"
        verdict = "exact" if r["ok"] else "WRONG"
        to = f"{r['counter']} x{r['parallelism']}"
        print(
            f"{r['step']:>4}  {r['rescale'] or 'new':<14} {to:<12} {r['sentences']:>9} "
            f"{r['words']:>6} {r['counted']:>7}  {placed:<6} {len(r['stray_namespaces']):>6}  "
            f"{verdict:<7} {'; '.join(r['kills'])}"
        )
    print()
    print(f"{'exact at every step' if ok else 'NOT EXACT'}; {doc['seconds']} s in all")
    return 0 if ok else 1


def _where(point: str, swapped: int) -> str:
    if point == "evolve-staged":
        return "mid-rescale, after staging"
    return f"mid-rescale, after swapping namespace {swapped + 1}"


def _failed(args: argparse.Namespace, why: str, run: dict[str, Any]) -> int:
    print(f"error: {why}; the driver's log ends with:\n{run['log_tail'][-1500:]}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
