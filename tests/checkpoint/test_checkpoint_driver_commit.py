"""A COMMIT without user code is done by the driver: no Spark job (``checkpoint.driver_commit``).

``topology.state.commit.location`` "auto" (the default) commits every stateful task's state from
the driver when no stateful bolt has a ``pre_commit`` of its own, no injected task fault targets
a stateful bolt, and the provider can (a driver-owned one gives the change log a task would
have, ``commit_changes``). The word counts stay exact on memory and Redis, no COMMIT job reaches
Spark, and the workers' kept images follow the driver's commits (no extra snapshots).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import msgpack
import pytest
import topologies as topo

from checkpoint import commit_hooks
from checkpoint._jobs import CheckpointJobs, _commits_here
from checkpoint._ledger import RootLedger
from examples.wordcount import SentenceSpout, SplitSentence, WordCount, expected_counts
from providers import InMemoryKeyValueStateProvider, StateFactory, get_provider
from providers.errors import StateLostError, StateTransactionError
from recovery.faults import FaultPlan
from statefulbolts import Fields, TopologyBuilder
from statefulbolts.errors import TaskFailedError
from statefulbolts.listeners import NoFaults
from statefulbolts.runtime._plan import ExecutionPlan
from statefulbolts.runtime._task_errors import decode_task_error

TIMEOUT = 240
SENTENCES = 400
KEY = "topology.state.commit.location"


class HookedCount(WordCount):
    """The word count's bolt with a ``pre_commit`` that logs where and for which txid it ran."""

    def __init__(self, path: str) -> None:
        self.path = path

    def pre_commit(self, txid: int) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(json.dumps({"pid": os.getpid(), "txid": txid}) + "\n")


def wordcount(count: Any = None) -> Any:
    builder = TopologyBuilder()
    builder.set_spout("sentences", SentenceSpout(SENTENCES), 1)
    builder.set_bolt("split", SplitSentence(), 2).shuffle_grouping("sentences")
    builder.set_bolt("count", count or WordCount(), 2).fields_grouping("split", Fields("word"))
    return builder.create_topology()


def redis_provider_conf(port: int = 1) -> dict[str, Any]:
    return {
        "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
        "topology.state.provider.config": json.dumps(
            {"jedisPoolConfig": {"host": "127.0.0.1", "port": port}}
        ),
    }


# ---------------------------------------------------------------- the decision, no Spark


def test_commit_hooks_lists_the_stateful_bolts_with_a_pre_commit_of_their_own() -> None:
    assert commit_hooks(wordcount()) == []
    assert commit_hooks(wordcount(HookedCount("/nonexistent"))) == ["count"]


def test_auto_commits_in_the_driver_only_without_hooks_or_a_provider_that_cannot() -> None:
    memory, redis = get_provider({}), get_provider(redis_provider_conf())
    plain = wordcount()
    assert _commits_here("auto", plain, memory) is True
    assert _commits_here("auto", plain, redis) is True
    assert _commits_here("executors", plain, memory) is False
    assert _commits_here("auto", wordcount(HookedCount("/nonexistent")), memory) is False


def test_injected_faults_never_move_the_commit_off_the_driver() -> None:
    # A COMMIT feeds no task a data tuple: no task fault fires in it, wherever it runs. So a
    # run with faults commits where a run without them does (the kill tests run that path).
    memory = get_provider({})
    on_count = FaultPlan.from_conf(
        {"topology.faults": {"tasks": [{"component": "count", "task": 1, "kind": "crash"}]}}
    )
    assert on_count is not None
    plain = wordcount()
    plan = ExecutionPlan(plain)
    jobs = CheckpointJobs("faults", plain, plan, RootLedger(timeout_secs=30), None, ackers=0,
                          faults=on_count, provider=memory)  # fmt: skip
    assert jobs.commits_here is True


def test_the_memory_providers_commit_log_is_what_a_task_commit_would_return() -> None:
    provider = InMemoryKeyValueStateProvider()
    ns = topo.new_key("commit-log")
    state = provider.new_state(ns, {})
    state.put("cat", 2)
    state.prepare_commit(4)
    changes = provider.commit_changes(ns, 4)
    assert changes is not None and msgpack.unpackb(changes) == [["commit", 4]]
    assert provider.new_state(ns, {}).get_committed("cat") is None  # not applied by asking
    provider.apply_changes(ns, changes)
    assert provider.new_state(ns, {}).get_committed("cat") == 2
    assert provider.commit_changes(ns, 4) is None  # committed already: a retried COMMIT
    with pytest.raises(StateTransactionError, match=r"cannot commit txid 5; prepared txid is"):
        provider.commit_changes(ns, 5)
    InMemoryKeyValueStateProvider.drop(ns)


def test_a_state_that_lost_its_prepared_delta_fails_the_commit_naming_its_task() -> None:
    name = topo.new_key("cannot")
    topology = wordcount()
    plan = ExecutionPlan(topology)
    jobs = CheckpointJobs(
        name,
        topology,
        plan,
        RootLedger(timeout_secs=30),
        None,
        ackers=0,
        provider=get_provider({}),
    )
    assert jobs.commits_here
    future, root = jobs.commit_here(7)  # nothing was ever prepared: the store lost it
    assert isinstance(root, int)
    exc = future.exception()
    assert isinstance(exc, TaskFailedError)
    error = decode_task_error(exc)
    assert error is not None and error.is_a(StateLostError)
    assert error.component == "count" and error.txid == 7
    assert error.task == 0  # the task's index (its global id is topology.task_ids("count")[0])
    assert f"state '{name}/count-0' in memory holds nothing committed" in error.message
    assert "COMMIT(7), which needs committed txid 6 with txid 7 prepared" in error.message
    InMemoryKeyValueStateProvider.drop(f"{name}/")


class CommitOrder(NoFaults):
    """Records, at each task's commit, which namespaces Redis holds committed at the txid."""

    def __init__(self, client: Any, namespaces: list[str]) -> None:
        self.client, self.namespaces = client, namespaces
        self.seen: list[tuple[str, int, list[bool]]] = []

    def on_task_committed(self, component: str, task: int, txid: int) -> None:
        want = str(txid).encode()
        done = [self.client.hget(f"{ns}$txid", "commit") == want for ns in self.namespaces]
        self.seen.append((component, task, done))


def redis_jobs(name: str, conf: dict[str, Any], faults: Any = None) -> CheckpointJobs:
    topology = wordcount()
    more = {} if faults is None else {"faults": faults}
    ledger, provider = RootLedger(timeout_secs=30), get_provider(conf)
    plan = ExecutionPlan(topology)
    return CheckpointJobs(name, topology, plan, ledger, None, ackers=0, provider=provider,
                          conf=conf, **more)  # fmt: skip


def prepare_counts(conf: dict[str, Any], name: str, txid: int) -> list[str]:
    """Both count tasks' namespaces committed at ``txid - 1`` and prepared at ``txid``."""
    names = [f"{name}/count-{t}" for t in range(2)]
    for t, ns in enumerate(names):
        state: Any = StateFactory.get_state(ns, conf)
        state.put("storm", t)
        state.prepare_commit(txid - 1)
        state.commit(txid - 1)
        state.put("storm", t + 10)
        state.prepare_commit(txid)
    return names


def script_calls(client: Any) -> int:
    stats = client.info("commandstats").get("cmdstat_evalsha")
    return 0 if stats is None else int(stats["calls"])


@pytest.mark.redis
def test_the_driver_commits_every_redis_namespace_in_one_pipeline(redis_db: Any) -> None:
    conf = redis_provider_conf(redis_db.port)
    name = topo.new_key("drv-many")
    names = prepare_counts(conf, name, 7)
    client = redis_db.client()
    client.config_resetstat()
    future, _ = redis_jobs(name, conf).commit_here(7)
    assert future.exception() is None
    assert script_calls(client) == 2  # the COMMIT scripts alone: no state opened one by one
    assert [client.hget(f"{ns}$txid", "commit") for ns in names] == [b"7", b"7"]
    assert [StateFactory.get_state(ns, conf).get("storm") for ns in names] == [10, 11]


@pytest.mark.redis
def test_a_namespace_the_pipeline_refuses_fails_the_commit_naming_its_task(redis_db: Any) -> None:
    conf = redis_provider_conf(redis_db.port)
    name = topo.new_key("drv-lost")
    names = prepare_counts(conf, name, 7)
    client = redis_db.client()
    client.hset(f"{names[1]}$txid", "commit", "2")  # count-1's store went back in time
    future, _ = redis_jobs(name, conf).commit_here(7)
    error = decode_task_error(future.exception())
    assert error is not None and error.is_a(StateLostError)
    assert (error.component, error.task, error.txid) == ("count", 1, 7)
    assert "holds committed txid 2 and a prepared delta of txid 7" in error.message
    assert client.hget(f"{names[0]}$txid", "commit") == b"7"
    assert client.hget(f"{names[1]}$txid", "prepare") == b"7"  # untouched


@pytest.mark.redis
def test_with_a_fault_listener_each_task_commits_before_the_next(redis_db: Any) -> None:
    # A mid-commit kill (KillPoint.MID_COMMIT) needs a commit that is half done when it fires.
    conf = redis_provider_conf(redis_db.port)
    name = topo.new_key("drv-order")
    names = prepare_counts(conf, name, 7)
    order = CommitOrder(redis_db.client(), names)
    future, _ = redis_jobs(name, conf, order).commit_here(7)
    assert future.exception() is None
    assert order.seen == [("count", 0, [True, False]), ("count", 1, [True, True])]


# ---------------------------------------------------------------- on Spark


def commit_jobs(spark: Any, name: str, txids: list[int]) -> list[int]:
    tracker = spark.sparkContext.statusTracker()
    return [j for t in txids for j in tracker.getJobIdsForGroup(f"{name}/COMMIT/txid={t}")]


def prepare_jobs(spark: Any, name: str, txids: list[int]) -> list[int]:
    tracker = spark.sparkContext.statusTracker()
    return [j for t in txids for j in tracker.getJobIdsForGroup(f"{name}/PREPARE/txid={t}")]


def run(cluster: Any, name: str, topology: Any, conf: dict[str, Any]) -> tuple[Any, list[int]]:
    conf = {
        "topology.state.checkpoint.interval.ms": 50,
        "topology.max.spout.pending": 40,
        **conf,
    }
    handle = cluster.submit_topology(name, conf, topology)
    handle.await_idle(TIMEOUT)
    commits = [
        t["txid"] for t in handle.metrics()["transactions"] if t["action"] == "COMMIT" and t["ok"]
    ]
    return handle, commits


@pytest.mark.spark
@pytest.mark.parametrize("location", ["auto", "executors"])
def test_memory_counts_stay_exact_and_auto_runs_no_commit_job(
    spark: Any, cluster: Any, location: str
) -> None:
    name = topo.new_key("drvcommit")
    # Committed filler keys: a snapshot the transactions' change logs never outgrow.
    topo.seed_keyed_state({}, name, 2, {f"seed-{i}": i for i in range(20_000)})
    handle, commits = run(cluster, name, wordcount(), {KEY: location})
    counts = handle.read_state("count")
    assert len(counts) == 20_000 + len(expected_counts(SENTENCES))
    assert {w: counts[w] for w in expected_counts(SENTENCES)} == dict(expected_counts(SENTENCES))
    snapshots = handle.runner.images.snapshots
    handle.kill()
    InMemoryKeyValueStateProvider.drop(f"{name}/")
    assert len(commits) >= 3
    assert len(prepare_jobs(spark, name, commits)) >= len(commits)
    if location == "auto":
        assert commit_jobs(spark, name, commits) == []
    else:
        assert len(commit_jobs(spark, name, commits)) == len(commits)
    # The driver's commits reach the workers as change logs: one snapshot per namespace.
    assert snapshots == 2


@pytest.mark.spark
@pytest.mark.redis
def test_redis_counts_stay_exact_with_the_driver_committing(
    spark: Any, cluster: Any, redis_db: Any
) -> None:
    name = topo.new_key("drvcommit-redis")
    conf = redis_provider_conf(redis_db.port)
    handle, commits = run(cluster, name, wordcount(), conf)
    assert handle.read_state("count") == dict(expected_counts(SENTENCES))
    handle.kill()
    assert len(commits) >= 3 and commit_jobs(spark, name, commits) == []
    # Storm's layout after the commits: the committed hash holds the counts, nothing prepared.
    client = redis_db.client()
    assert client.exists(f"{name}/count-0") and not client.exists(f"{name}/count-0$prepare")


@pytest.mark.spark
def test_a_bolt_with_a_pre_commit_hook_commits_in_tasks_with_its_hook(
    spark: Any, cluster: Any, tmp_path: Path
) -> None:
    name = topo.new_key("hooked")
    path = tmp_path / "hooks.jsonl"
    handle, commits = run(cluster, name, wordcount(HookedCount(str(path))), {})
    assert handle.read_state("count") == dict(expected_counts(SENTENCES))
    handle.kill()
    InMemoryKeyValueStateProvider.drop(f"{name}/")
    calls = [json.loads(line) for line in path.read_text().splitlines()]
    # Each task's hook once per COMMIT, in a Spark worker.
    assert sorted(c["txid"] for c in calls) == sorted(commits * 2)
    assert os.getpid() not in {c["pid"] for c in calls}
    assert len(commit_jobs(spark, name, commits)) == len(commits)
