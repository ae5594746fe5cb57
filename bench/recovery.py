"""Recovery time with Redis state: from a driver (re)start to the first committed transaction.

    python bench/recovery.py --json
    python bench/recovery.py --sizes 10000,100000 --repeat 5

For each size (10k, 100k and 1M keys by default) a topology of its own (``recovery-<keys>``)
gets the committed hashes of the word count's counter tasks (``<topology>/count-<i>``) filled
through the provider's own API (puts, one ``prepare_commit(t)`` per chunk, ``commit(t)``) and
the checkpoint spout's state saved as ``COMMITTED(t)``: what a driver that died after
``COMMIT(t)`` leaves behind. Then the topology is submitted again: it recovers
(``INITSTATE(t)``), takes a batch of sentences (``PREPARE(t+1)``) and commits it
(``COMMIT(t+1)``). The figure is the time from ``submit_topology`` (the checkpoint spout reading
its saved state) to that first commit, the median over ``--repeat`` restarts, and its ratio to
the first size (the baseline, measured in the same run). A ratio near 1 means recovery does not
read the whole state.

Everything runs in one process on one ``local[2]`` SparkSession, warmed up first, and the
restarts go round-robin over the sizes, so a slow spell of a shared machine is spread over all of
them. The session's own start, which a restarted driver process also pays, is given once as
``session_start_s``.
The script starts its own redis-server on a free 127.0.0.1 port and stops it at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from checkpoint import TX_STATE_KEY, CheckPointState, TxPhase  # noqa: E402
from examples.wordcount import build, expected_counts  # noqa: E402
from providers import KeyValueState, StateFactory  # noqa: E402
from statefulbolts.namespaces import (  # noqa: E402
    TaskNamespace,
    checkpoint_namespace,
    topology_prefix,
)

SAVED_TXID = 41
CHUNK = 50_000  # keys per prepare_commit: bounds one script call's arguments


def redis_conf(port: int, interval_ms: int) -> dict[str, Any]:
    pool = {"jedisPoolConfig": {"host": "127.0.0.1", "port": port, "timeout": 10_000}}
    return {
        "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
        "topology.state.provider.config": json.dumps(pool),
        "topology.state.checkpoint.interval.ms": interval_ms,
    }


def _state(namespace: str, conf: dict[str, Any]) -> KeyValueState:
    state = StateFactory.get_state(namespace, conf)
    if not isinstance(state, KeyValueState):
        msg = f"the provider returned {type(state).__qualname__}, not a KeyValueState"
        raise TypeError(msg)
    return state


def topology_name(keys: int) -> str:
    return f"recovery-{keys}"


def populate(conf: dict[str, Any], name: str, keys: int, parallelism: int) -> float:
    """Commit ``keys`` filler keys over the counter tasks at ``SAVED_TXID``; save COMMITTED."""
    started = time.perf_counter()
    per_task = keys // parallelism
    for task in range(parallelism):
        state = _state(str(TaskNamespace.of_topology(name, "count", task)), conf)
        for first in range(0, per_task, CHUNK):
            for i in range(first, min(first + CHUNK, per_task)):
                # Filler keys never collide with corpus words, so the word counts stay checkable.
                state.put(f"filler-{task}-{i:08d}", i)
            state.prepare_commit(SAVED_TXID)
        state.commit(SAVED_TXID)
    spout = _state(checkpoint_namespace(topology_prefix(name)), conf)
    spout.put(TX_STATE_KEY, CheckPointState(SAVED_TXID, TxPhase.COMMITTED).to_value())
    spout.commit()
    return time.perf_counter() - started


def restart(
    spark: Any, conf: dict[str, Any], name: str, sentences: int, parallelism: int
) -> dict[str, Any]:
    """Submit the word count over saved state; time it to the first COMMIT, then let it finish."""
    from statefulbolts import LocalCluster

    spout = _state(checkpoint_namespace(topology_prefix(name)), conf)
    saved = CheckPointState.from_value(spout.get(TX_STATE_KEY))
    seen: list[tuple[float, Any]] = []
    cluster = LocalCluster(spark=spark)
    started = time.perf_counter()
    handle = cluster.submit_topology(
        name,
        conf,
        build(sentences, parallelism),
        on_transaction=lambda info: seen.append((time.perf_counter(), info)),
    )
    opened = time.perf_counter() - started
    try:
        handle.await_idle(600)
    finally:
        handle.kill()
    first_commit = next(at for at, info in seen if info.action == "COMMIT" and info.ok)
    first = [info for _, info in seen[:3]]
    chain = [f"{i.action}({i.txid})" for i in first]
    t = saved.txid
    # A recovery from COMMITTED(t): INITSTATE(t), then PREPARE / COMMIT of t + 1.
    expected = [f"INITSTATE({t})", f"PREPARE({t + 1})", f"COMMIT({t + 1})"]
    return {
        "to_first_commit_s": first_commit - started,
        "open_s": opened,
        "initstate_s": first[0].seconds,
        "prepare_s": first[1].seconds,
        "commit_s": first[2].seconds,
        "recovered": saved.phase is TxPhase.COMMITTED and chain == expected,
        "failed": sum(1 for _, info in seen if not info.ok),
    }


def counts_exact(
    conf: dict[str, Any], name: str, sentences: int, parallelism: int, runs: int
) -> bool:
    """Every corpus word counted ``runs`` times over (the filler keys are not read)."""
    states = [_state(f"{name}/count-{t}", conf) for t in range(parallelism)]
    for word, n in expected_counts(sentences).items():
        if sum(s.get(word, 0) for s in states) != n * runs:
            return False
    return True


def summarize(
    keys: int, populate_s: float, samples: list[dict[str, Any]], exact: bool
) -> dict[str, Any]:
    def median(key: str) -> float:
        return round(statistics.median(s[key] for s in samples), 3)

    return {
        "keys": keys,
        "populate_s": round(populate_s, 2),
        "to_first_commit_s": median("to_first_commit_s"),
        "samples_s": [round(s["to_first_commit_s"], 3) for s in samples],
        "open_s": median("open_s"),
        "initstate_s": median("initstate_s"),
        "prepare_s": median("prepare_s"),
        "commit_s": median("commit_s"),
        "recovered": all(s["recovered"] for s in samples),
        "failed_transactions": sum(s["failed"] for s in samples),
        "exact": exact,
    }


def run_all(spark: Any, conf: dict[str, Any], args: argparse.Namespace) -> list[dict[str, Any]]:
    """Populate every size, warm up, then restart the sizes round-robin ``--repeat`` times.

    Round-robin, so that a slow spell of a shared machine or the JVM still warming up does not
    land on one size only.
    """
    sizes = args.sizes
    populate_s = {}
    for keys in sizes:
        populate_s[keys] = populate(conf, topology_name(keys), keys, args.parallelism)
        print(f"{keys:>9} keys: populated in {populate_s[keys]:.1f}s", file=sys.stderr, flush=True)
    warm = topology_name(1000)
    populate(conf, warm, 1000, args.parallelism)
    for _ in range(2):
        restart(spark, conf, warm, args.sentences, args.parallelism)
    samples: dict[int, list[dict[str, Any]]] = {keys: [] for keys in sizes}
    for _ in range(args.repeat):
        for keys in sizes:
            run = restart(spark, conf, topology_name(keys), args.sentences, args.parallelism)
            samples[keys].append(run)
    rows = []
    for keys in sizes:
        exact = counts_exact(
            conf, topology_name(keys), args.sentences, args.parallelism, args.repeat
        )
        row = summarize(keys, populate_s[keys], samples[keys], exact)
        row["ratio_vs_baseline"] = round(
            row["to_first_commit_s"] / (rows or [row])[0]["to_first_commit_s"], 2
        )
        rows.append(row)
        print(
            f"{keys:>9} keys: first commit after {row['to_first_commit_s']:.2f}s (median of "
            f"{row['samples_s']}; INITSTATE {row['initstate_s']:.2f}s, PREPARE "
            f"{row['prepare_s']:.2f}s, COMMIT {row['commit_s']:.2f}s), "
            f"x{row['ratio_vs_baseline']} vs {sizes[0]} keys, recovered={row['recovered']} "
            f"exact={row['exact']}",
            file=sys.stderr,
            flush=True,
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000,1000000", help="keys, comma-separated")
    parser.add_argument("--repeat", type=int, default=5, help="restarts per size (median)")
    parser.add_argument("--sentences", type=int, default=200, help="sentences after restart")
    parser.add_argument("--parallelism", type=int, default=2)
    parser.add_argument("--master", default="local[2]")
    parser.add_argument("--interval", type=int, default=100, help="checkpoint interval, ms")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]

    from bench._redis import start_redis
    from providers.redis import connect
    from statefulbolts.runtime import build_session

    server = start_redis()
    spark = None
    try:
        conf = redis_conf(server.port, args.interval)
        started = time.perf_counter()
        spark = build_session(args.master, app_name="statefulbolts-bench-recovery")
        session_start = time.perf_counter() - started
        rows = run_all(spark, conf, args)
        client = connect({"host": "127.0.0.1", "port": server.port}, purpose="bench")
        memory_mb = int(client.info("memory")["used_memory"]) / 2**20
        client.close()
        result = {
            "master": spark.sparkContext.master,
            "parallelism": args.parallelism,
            "sentences_after_restart": args.sentences,
            "saved_txid": SAVED_TXID,
            "repeat": args.repeat,
            "session_start_s": round(session_start, 2),
            "redis_used_memory_mb": round(memory_mb, 1),
            "baseline_keys": args.sizes[0],
            "sizes": rows,
        }
    finally:
        if spark is not None:
            spark.stop()
        server.stop()
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for row in result["sizes"]:
            print(
                f"{row['keys']:>9} keys: {row['to_first_commit_s']:6.2f}s to the first commit "
                f"(x{row['ratio_vs_baseline']})"
            )
    ok = all(r["recovered"] and r["exact"] for r in result["sizes"])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
