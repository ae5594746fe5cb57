"""The command line: exit statuses, ``run --supervise`` and ``checkpoint status``.

The supervisor is tested twice: with a scripted child (fast: restart policy, backoff, recovery
report, bad input, giving up) and end to end with a real driver killed once by ``topology.faults``
(``once_file``, so the restarted child with the same config does not die again).
"""

from __future__ import annotations

import collections
import json
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from recovery_topologies import run_driver_process
from redis_fixtures import free_port

from checkpoint import TX_STATE_KEY, CheckPointState, TxPhase
from checkpoint.status import RECOVERY_ACTIONS, recovery_actions
from examples.corpus import sentence, words
from providers import StateFactory
from recovery import RecoveryTracker, RestartPolicy, exit_status, supervise
from statefulbolts import cli
from statefulbolts.connectors import load_stream, pending_count
from statefulbolts.errors import (
    ConfigError,
    StateBackendError,
    TaskFailedError,
    TopologyError,
    TopologyFailedError,
)

ROOT = Path(__file__).resolve().parents[2]


# --------------------------------------------------------------------------- exit statuses
def test_exit_code_tells_bad_input_from_a_failure_at_run_time():
    assert cli.exit_code_for(ConfigError("bad key")) == 2
    assert cli.exit_code_for(TopologyError("bad wiring")) == 2
    assert cli.exit_code_for(TopologyFailedError("gave up after retries")) == 1
    assert cli.exit_code_for(TaskFailedError("a task failed")) == 1
    assert cli.exit_code_for(StateBackendError("redis down")) == 1
    try:
        try:
            raise ConfigError("redis.stream.key missing")
        except ConfigError as exc:
            raise TopologyFailedError("spout failed in open") from exc
    except TopologyFailedError as wrapped:
        assert cli.exit_code_for(wrapped) == 2  # caused by bad input: a restart fails again


def test_exit_status_shows_signals_as_a_shell_does():
    assert exit_status(0) == 0 and exit_status(137) == 137
    assert exit_status(-signal.SIGKILL) == 137 and exit_status(-signal.SIGTERM) == 143


# --------------------------------------------------------------------------- restart policy
def test_restart_policy_backoff_doubles_up_to_the_cap():
    policy = RestartPolicy(max_restarts=3, backoff_s=0.5, max_backoff_s=3)
    assert [policy.delay(n) for n in range(1, 6)] == [0.5, 1.0, 2.0, 3, 3]
    assert policy.should_restart(137, 0) and policy.should_restart(1, 2)
    assert not policy.should_restart(137, 3)
    assert not policy.should_restart(0, 0) and not policy.should_restart(2, 0)
    assert not policy.should_restart(3, 0)  # --timeout ran out: giving up was asked for
    with pytest.raises(ValueError, match="must not be negative"):
        RestartPolicy(max_restarts=-1)


def test_recovery_tracker_collects_actions_until_initstate():
    tracker = RecoveryTracker(RECOVERY_ACTIONS)
    events = [
        {"action": "COMMIT", "txid": 4, "ok": False, "seconds": 0.5},
        {"action": "COMMIT", "txid": 4, "ok": True, "seconds": 0.25},
        {"action": "INITSTATE", "txid": 4, "ok": True, "seconds": 0.25},
        {"action": "PREPARE", "txid": 5, "ok": True, "seconds": 1},
    ]
    ended = [tracker.add(e) for e in events]
    assert ended == [False, False, True, False]
    assert tracker.actions == ["COMMIT(4) failed", "COMMIT(4)", "INITSTATE(4)"]
    assert tracker.seconds == 1.0 and not tracker.progressed
    tracker.add({"action": "COMMIT", "txid": 5, "ok": True})
    assert tracker.progressed


def test_recovery_actions_follow_storm_protocol():
    assert recovery_actions(None) == ["INITSTATE(-1)"]
    assert recovery_actions(CheckPointState(3, TxPhase.PREPARING)) == [
        "ROLLBACK(3)",
        "INITSTATE(2)",
    ]
    assert recovery_actions(CheckPointState(3, TxPhase.COMMITTING)) == [
        "COMMIT(3)",
        "INITSTATE(3)",
    ]
    assert recovery_actions(CheckPointState(3, TxPhase.COMMITTED)) == ["INITSTATE(3)"]


# A child driver, scripted: each run reads what to do from a list, by run number.
CHILD = textwrap.dedent(
    """
    import json, os, sys
    runs = json.loads(sys.argv[1])
    counter = sys.argv[2]
    n = int(open(counter).read()) if os.path.exists(counter) else 0
    open(counter, "w").write(str(n + 1))
    lines, status = runs[min(n, len(runs) - 1)]
    for action, txid, ok in lines:
        print(json.dumps({"event": "transaction", "txid": txid, "action": action,
                          "tuples": 0, "seconds": 0.125, "ok": ok, "acked": 0, "failed": 0,
                          "error": None}), flush=True)
    print("not json", flush=True)
    os._exit(status)
    """
)


def scripted(tmp_path: Path, runs: list[Any]) -> list[str]:
    script = tmp_path / "child.py"
    script.write_text(CHILD, encoding="utf-8")
    return [sys.executable, str(script), json.dumps(runs), str(tmp_path / "runs")]


def supervise_scripted(tmp_path, runs, policy):
    lines: list[str] = []
    events: list[dict[str, Any]] = []
    slept: list[float] = []
    status = supervise(
        scripted(tmp_path, runs),
        policy,
        on_line=lines.append,
        on_event=events.append,
        recovery=RECOVERY_ACTIONS,
        sleep=slept.append,
    )
    return status, lines, events, slept


def test_supervise_restarts_a_crashed_child_and_reports_its_recovery(tmp_path):
    runs = [
        [[["INITSTATE", -1, True], ["PREPARE", 0, True], ["COMMIT", 0, True]], 137],
        [[["COMMIT", 1, True], ["INITSTATE", 1, True], ["PREPARE", 2, True]], 137],
        [[["ROLLBACK", 2, True], ["INITSTATE", 1, True], ["PREPARE", 2, True]], 0],
    ]
    status, lines, events, slept = supervise_scripted(
        tmp_path, runs, RestartPolicy(max_restarts=5, backoff_s=0.5, max_backoff_s=10)
    )
    assert status == 0
    assert (tmp_path / "runs").read_text() == "3"
    assert sum(1 for line in lines if line.startswith('{"event": "transaction"')) == 9
    assert "not json\n" in lines
    kinds = [e["event"] for e in events]
    assert kinds == ["restart", "recovered", "restart", "recovered", "supervisor"]
    assert [e["exit_code"] for e in events if e["event"] == "restart"] == [137, 137]
    recovered = [e for e in events if e["event"] == "recovered"]
    assert [e["actions"] for e in recovered] == [
        ["COMMIT(1)", "INITSTATE(1)"],
        ["ROLLBACK(2)", "INITSTATE(1)"],
    ]
    assert recovered[0]["recovery_seconds"] == 0.25
    # The first child committed (progress): backoff starts again; the second did not: it doubles.
    assert slept == [0.5, 1.0]
    assert events[-1] == {"event": "supervisor", "restarts": 2, "exit_code": 0, "reason": "done"}


def test_supervise_does_not_restart_bad_input(tmp_path):
    status, _, events, slept = supervise_scripted(tmp_path, [[[], 2]], RestartPolicy())
    assert status == 2 and slept == []
    assert events == [
        {
            "event": "supervisor",
            "restarts": 0,
            "exit_code": 2,
            "reason": "bad input: not restarted",
        }
    ]


def test_supervise_gives_up_after_max_restarts(tmp_path):
    status, _, events, slept = supervise_scripted(
        tmp_path, [[[], 1]], RestartPolicy(max_restarts=2, backoff_s=1, max_backoff_s=1.5)
    )
    assert status == 1
    assert (tmp_path / "runs").read_text() == "3"
    assert slept == [1, 1.5]
    assert events[-1]["reason"] == "gave up after 2 restarts"


def test_run_supervise_with_bad_input_starts_one_child_only(tmp_path):
    cmd = [sys.executable, "-m", "statefulbolts.cli", "run", "no_such_module:build"]
    done = subprocess.run(
        [*cmd, "--supervise", "--json", "--backoff", "0"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "cannot import module 'no_such_module'" in done.stderr
    events = [json.loads(line) for line in done.stdout.splitlines()]
    assert events == [
        {
            "event": "supervisor",
            "restarts": 0,
            "exit_code": 2,
            "reason": "bad input: not restarted",
        }
    ]


def test_driver_fault_with_once_file_fires_once(tmp_path):
    marker = tmp_path / "killed"
    conf = {
        "topology.faults": {
            "driver": {"point": "after-prepare", "txid": 2, "once_file": str(marker)}
        }
    }
    code = textwrap.dedent(
        f"""
        from recovery import FaultPlan
        from statefulbolts.listeners import KillPoint
        plan = FaultPlan.from_conf({conf!r})
        plan.on_driver(KillPoint.AFTER_PREPARE, 1)   # another txid: nothing
        plan.on_driver(KillPoint.AFTER_COMMITTED, 2)  # another point: nothing
        plan.on_driver(KillPoint.AFTER_PREPARE, 2)
        print("alive")
        """
    )
    first = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert first.returncode == 137 and "alive" not in first.stdout and marker.exists()
    again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and again.stdout == "alive\n"


def test_fault_once_file_must_be_a_path():
    from recovery import FaultPlan

    with pytest.raises(ConfigError, match="once_file"):
        FaultPlan.from_conf(
            {"topology.faults": {"driver": {"point": "mid-commit", "once_file": 3}}}
        )


def test_task_fault_at_must_be_tuple_prepared_or_committed():
    from recovery import FaultPlan

    task = {"component": "count", "task": 0, "at": "finished"}
    with pytest.raises(ConfigError, match="at tuple[|]prepared[|]committed.*'finished'"):
        FaultPlan.from_conf({"topology.faults": {"tasks": [task]}})


@pytest.mark.parametrize("marker", [None, 3])
def test_a_hold_fault_needs_a_marker_path(marker):
    from recovery import FaultPlan

    task = {"component": "count", "task": 0, "kind": "hold", "marker": marker}
    with pytest.raises(ConfigError, match="hold, and only hold, with a marker path"):
        FaultPlan.from_conf({"topology.faults": {"tasks": [task]}})


def test_a_hold_fault_after_commit_waits_for_its_release(tmp_path):
    from recovery import FaultPlan

    marker = tmp_path / "held"
    task = {"component": "count", "task": 1, "at": "committed", "kind": "hold", "txid": 4}
    plan = FaultPlan.from_conf({"topology.faults": {"tasks": [{**task, "marker": str(marker)}]}})
    assert plan is not None
    plan.on_task_committed("count", 1, 3)  # another txid: no hold
    plan.on_task_prepared("count", 1, 4, 0)  # not after a commit
    assert not marker.exists()
    held = threading.Thread(target=plan.on_task_committed, args=("count", 1, 4), daemon=True)
    held.start()
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert time.monotonic() < deadline
            time.sleep(0.01)
        # Read the moment it exists: the marker appears whole.
        assert "count task 1 after its state committed, txid 4" in marker.read_text()
        assert held.is_alive()  # waiting for its release
    finally:
        (tmp_path / "held.release").touch()  # never leave the thread holding past the test
    held.join(60)
    assert not held.is_alive()


def test_task_fault_after_prepare_fires_only_there():
    from recovery import FaultPlan, InjectedFault

    task = {"component": "count", "task": 1, "at": "prepared", "kind": "raise", "txid": 4}
    plan = FaultPlan.from_conf({"topology.faults": {"tasks": [task]}})
    assert plan is not None
    plan.on_tuple("count", 1, 4, 0, 0)  # not at a tuple
    plan.on_task_prepared("count", 1, 3, 0)  # another txid
    plan.on_task_prepared("count", 0, 4, 0)  # another task
    plan.on_task_prepared("count", 1, 4, 1)  # a retry ("first" attempts only)
    with pytest.raises(InjectedFault, match="count task 1 after its state prepared .txid 4."):
        plan.on_task_prepared("count", 1, 4, 0)


# --------------------------------------------------------------------------- checkpoint status
def redis_conf(server) -> dict[str, Any]:
    return {
        "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
        "topology.state.provider.config": {
            "jedisPoolConfig": {"host": "127.0.0.1", "port": server.port}
        },
    }


def make_state(conf, namespace, committed=None, prepared=None, saved=None):
    state = StateFactory.get_state(namespace, conf)
    if saved is not None:
        state.put(TX_STATE_KEY, saved.to_value())
        state.commit()
        return
    if committed is not None:
        state.put("storm", committed)
        state.prepare_commit(committed)
        state.commit(committed)
    if prepared is not None:
        state.put("storm", prepared)
        state.prepare_commit(prepared)


def status_cli(conf_file: Path, *args: str, capsys) -> tuple[int, str]:
    code = cli.main(["checkpoint", "status", "--conf", str(conf_file), *args])
    return code, capsys.readouterr().out


@pytest.mark.redis
def test_checkpoint_status_reads_redis(redis_db, tmp_path, capsys):
    conf = redis_conf(redis_db)
    make_state(conf, "wc/$checkpointspout-0", saved=CheckPointState(3, TxPhase.COMMITTING))
    make_state(conf, "wc/count-0", committed=2, prepared=3)
    make_state(conf, "wc/count-1", committed=3)
    make_state(conf, "other/count-0", committed=7)  # another topology: not listed
    conf_file = tmp_path / "conf.json"
    conf_file.write_text(json.dumps(conf), encoding="utf-8")

    code, out = status_cli(conf_file, "--topology", "wc", "--json", capsys=capsys)
    assert code == 0
    assert json.loads(out) == {
        "topology": "wc",
        "provider": "providers.redis.RedisKeyValueStateProvider",
        "checkpoint": {"txid": 3, "phase": "COMMITTING"},
        "on_restart": ["COMMIT(3)", "INITSTATE(3)"],
        "tasks": [
            {
                "component": "count",
                "task": 0,
                "namespace": "wc/count-0",
                "committed_txid": 2,
                "prepared_txid": 3,
            },
            {
                "component": "count",
                "task": 1,
                "namespace": "wc/count-1",
                "committed_txid": 3,
                "prepared_txid": None,
            },
        ],
        "lease": None,  # written by hand: no driver ever took the topology's lease
    }

    code, out = status_cli(conf_file, "--topology", "wc", capsys=capsys)
    assert code == 0
    assert out.splitlines() == [
        "topology 'wc' in providers.redis.RedisKeyValueStateProvider",
        "  checkpoint: COMMITTING(3) (txid 3, phase COMMITTING)",
        "  on restart: COMMIT(3), INITSTATE(3)",
        "  lease: none (no driver has run, or the provider keeps no leases)",
        "  wc/count-0: committed txid 2, prepared txid 3",
        "  wc/count-1: committed txid 3, prepared txid none",
    ]

    # From the topology: its stateful tasks, including one that never wrote anything.
    code, out = status_cli(
        conf_file,
        "--topology",
        "other",
        "--topology-module",
        "recovery_topologies:wordcount",
        "--json",
        capsys=capsys,
    )
    status = json.loads(out)
    assert code == 0 and status["checkpoint"] is None and status["on_restart"] == ["INITSTATE(-1)"]
    assert [(t["namespace"], t["committed_txid"]) for t in status["tasks"]] == [
        ("other/count-0", 7),
        ("other/count-1", None),
    ]


@pytest.mark.redis
def test_checkpoint_status_of_an_unknown_topology_fails(redis_db, tmp_path, capsys):
    conf_file = tmp_path / "conf.json"
    conf_file.write_text(json.dumps(redis_conf(redis_db)), encoding="utf-8")
    code, out = status_cli(conf_file, "--topology", "nothing-here", capsys=capsys)
    assert code == 1
    assert "checkpoint: nothing saved" in out and "stateful tasks: none found" in out


def test_checkpoint_status_with_the_in_memory_provider_finds_nothing(tmp_path, capsys):
    conf_file = tmp_path / "conf.json"
    conf_file.write_text("{}", encoding="utf-8")
    # A name no other test runs: the in-memory provider's state lives in this process.
    code, out = status_cli(
        conf_file,
        "--topology",
        f"wc-nothing-{uuid.uuid4().hex[:8]}",
        "--topology-module",
        "recovery_topologies:wordcount",
        "--json",
        capsys=capsys,
    )
    status = json.loads(out)
    assert code == 1 and status["checkpoint"] is None
    assert [t["committed_txid"] for t in status["tasks"]] == [None, None]


def test_checkpoint_status_with_an_unreachable_redis_says_where(tmp_path, capsys):
    port = free_port()
    conf = {
        "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
        "topology.state.provider.config": {
            "jedisPoolConfig": {"host": "127.0.0.1", "port": port, "timeout": 500}
        },
    }
    conf_file = tmp_path / "conf.json"
    conf_file.write_text(json.dumps(conf), encoding="utf-8")
    code = cli.main(["checkpoint", "status", "--conf", str(conf_file), "--topology", "wc"])
    err = capsys.readouterr().err
    assert code == 1  # the store is down: a failure at run time, not bad input
    assert f"127.0.0.1:{port}" in err


# --------------------------------------------------------------------------- supervise, for real
@pytest.mark.spark
@pytest.mark.redis
def test_run_supervise_restarts_a_killed_driver_which_recovers(redis_db, tmp_path):
    url = redis_db.url
    name = "wc-supervised"
    stream = "supervised"
    n = 120
    load_stream(url, stream, (sentence(i) for i in range(n)))
    marker = tmp_path / "killed-once"
    conf = {
        **redis_conf(redis_db),
        "topology.state.checkpoint.interval.ms": 200,
        "topology.max.spout.pending": 30,
        "redis.stream.url": url,
        "redis.stream.key": stream,
        "topology.faults": {
            "driver": {"point": "after-committing-saved", "txid": 1, "once_file": str(marker)}
        },
    }
    conf_file = tmp_path / "conf.json"
    conf_file.write_text(json.dumps(conf), encoding="utf-8")
    cmd = [sys.executable, "-m", "statefulbolts.cli", "run", "tests.recovery_topologies:wordcount"]
    cmd += ["--conf", str(conf_file), "--name", name, "--json", "--supervise", "--backoff", "0.2"]
    code, events, err = run_driver_process(cmd, ROOT, 240)
    assert code == 0, err[-3000:]
    assert marker.exists()
    supervisor = [e for e in events if e["event"] in ("restart", "recovered", "supervisor")]
    assert [e["event"] for e in supervisor] == ["restart", "recovered", "supervisor"]
    restart, recovered, final = supervisor
    assert restart["exit_code"] == 137 and restart["backoff_seconds"] == 0.2
    assert recovered["actions"] == ["COMMIT(1)", "INITSTATE(1)"]
    assert recovered["seconds"] > recovered["recovery_seconds"] > 0
    assert final == {"event": "supervisor", "restarts": 1, "exit_code": 0, "reason": "done"}
    assert "supervise: driver exited with status 137; restart #1" in err
    assert "supervise: restart #1 recovered in" in err and "COMMIT(1), INITSTATE(1)" in err
    # Both children's transactions came through: the first up to COMMIT(0)...
    txs = [(e["action"], e["txid"]) for e in events if e["event"] == "transaction"]
    first_restart = txs.index(("COMMIT", 1))
    assert txs[:first_restart] == [("INITSTATE", -1), ("PREPARE", 0), ("COMMIT", 0)]
    assert events[-2]["event"] == "done"

    counts: collections.Counter[str] = collections.Counter()
    for task in range(2):
        counts.update(dict(StateFactory.get_state(f"{name}/count-{task}", conf)))
    exact: collections.Counter[str] = collections.Counter()
    for i in range(n):
        exact.update(words(sentence(i)))
    # Transaction 1 was rolled forward and its entries acked from its saved manifest: exact.
    assert counts == exact
    assert pending_count(url, stream, name) == 0


# --------------------------------------------------------------------------- transactional status
class _ThreePartitions:
    def num_partitions(self) -> int:
        return 3

    def is_ready(self) -> bool:
        return True

    def close(self) -> None:
        pass


def write_transactional_progress(conf: dict[str, Any], tid: str) -> None:
    """Leave ``tid`` where a driver killed during txid 3 leaves it, with the runtime's classes.

    Three partitions, ``max.spout.pending`` 2: txids 1 and 2 committed (``currtx`` 3), txid 3
    emitted (its partition metas stored), txid 4 started (its coordinator meta stored); one
    committer task wrote its map.
    """
    from statefulbolts.transactional import (
        StateBackingMap,
        TransactionalMap,
        TransactionalSpoutCoordinator,
        partitioned_coordinator,
    )
    from statefulbolts.transactional._emitting import PARTITIONED, EmitterMetas
    from statefulbolts.transactional._task import EmitResult

    def state_for(namespace: str) -> Any:
        return StateFactory.get_system_state(namespace, conf)

    coordinator = TransactionalSpoutCoordinator(
        partitioned_coordinator(_ThreePartitions()),
        state_for(f"$transactional/{tid}/coordinator"),
        max_pending=2,
    )
    metas = EmitterMetas(PARTITIONED, tid, state_for)
    count = TransactionalMap(StateBackingMap(state_for(f"$transactional/{tid}/count-0/default")))
    emitted = {
        1: [EmitResult({0: [0, 2], 2: [0, 2]}, 3), EmitResult({1: [0, 1]}, 3)],
        2: [EmitResult({0: [2, 2], 2: [2, 1]}, 3), EmitResult({1: [1, 1]}, 3)],
        3: [EmitResult({0: [4, 0], 2: [3, 0]}, 3), EmitResult({1: [2, 0]}, 3)],
    }
    started = {c.attempt.transaction_id: c.attempt for c in coordinator.sync()}
    for txid in (1, 2, 3):  # as the driver does: emit, then (1 and 2) process and commit
        metas.order(txid, 3, txid - 1 or None)
        metas.emitted(txid, emitted[txid])
    for txid in (1, 2):
        (commit,) = coordinator.ack(started[txid])  # processed: commit it
        count.multi_update(txid, ["cat"], [lambda old: (old or 0) + 2])
        metas.committed(txid)
        for command in coordinator.ack(commit.attempt):  # committed: currtx moves on
            started[command.attempt.transaction_id] = command.attempt
    assert sorted(started) == [1, 2, 3, 4]


def tx_status_cli(conf_file: Path, tid: str, *args: str, capsys) -> tuple[int, str]:
    code = cli.main(["transactional", "status", "--conf", str(conf_file), "--id", tid, *args])
    return code, capsys.readouterr().out


@pytest.mark.redis
def test_transactional_status_shows_currtx_replays_partitions_and_maps(redis_db, tmp_path, capsys):
    conf = redis_conf(redis_db)
    write_transactional_progress(conf, "words")
    write_transactional_progress(conf, "words-2")  # another id, with a name that starts alike
    conf_file = tmp_path / "conf.json"
    conf_file.write_text(json.dumps(conf), encoding="utf-8")

    code, out = tx_status_cli(conf_file, "words", capsys=capsys)
    assert code == 0
    assert out.splitlines() == [
        "transactional id 'words' in providers.redis.RedisKeyValueStateProvider",
        "  next txid to commit: 3 (last committed: 2)",
        "  on restart, replays: 3 (meta 3), 4 (meta 3)",
        "  lease: none (no driver has run, or the provider keeps no leases)",
        "  partition 0: txid 2: [2, 2], txid 3: [4, 0]",
        "  partition 1: txid 2: [1, 1], txid 3: [2, 0]",
        "  partition 2: txid 2: [2, 1], txid 3: [3, 0]",
        "  committer maps: 1",
        "    $transactional/words/count-0/default",
    ]

    code, out = tx_status_cli(conf_file, "words", "--json", capsys=capsys)
    assert code == 0
    assert json.loads(out) == {
        "transactional_id": "words",
        "provider": "providers.redis.RedisKeyValueStateProvider",
        "current_txid": 3,
        "committed_txid": 2,
        "replays": [3, 4],
        "metas": {"2": 3, "3": 3, "4": 3},
        "partitions": {
            "0": {"2": [2, 2], "3": [4, 0]},
            "1": {"2": [1, 1], "3": [2, 0]},
            "2": {"2": [2, 1], "3": [3, 0]},
        },
        "maps": ["$transactional/words/count-0/default"],
        "lease": None,
    }

    # An id that ends like a task ("-2"): its coordinator is not taken for a committer's map.
    code, out = tx_status_cli(conf_file, "words-2", "--json", capsys=capsys)
    assert code == 0
    assert json.loads(out)["maps"] == ["$transactional/words-2/count-0/default"]


@pytest.mark.redis
def test_transactional_status_of_an_id_with_nothing_stored_exits_1(redis_db, tmp_path, capsys):
    conf = redis_conf(redis_db)
    write_transactional_progress(conf, "words")
    conf_file = tmp_path / "conf.json"
    conf_file.write_text(json.dumps(conf), encoding="utf-8")

    code, out = tx_status_cli(conf_file, "nothing-here", capsys=capsys)
    assert code == 1
    assert out.splitlines() == [
        "transactional id 'nothing-here' in providers.redis.RedisKeyValueStateProvider",
        "  next txid to commit: 1 (last committed: none)",
        "  on restart, replays: none",
        "  lease: none (no driver has run, or the provider keeps no leases)",
        "  partitions: none stored",
        "  committer maps: 0",
    ]
    code, out = tx_status_cli(conf_file, "nothing-here", "--json", capsys=capsys)
    assert code == 1
    status = json.loads(out)
    assert status["current_txid"] == 1 and status["committed_txid"] is None
    assert status["replays"] == [] and status["metas"] == {} and status["partitions"] == {}
    assert status["maps"] == []


def test_transactional_status_with_a_wrong_provider_config_exits_2_naming_it(tmp_path, capsys):
    conf_file = tmp_path / "conf.json"
    conf_file.write_text(
        json.dumps({"topology.state.provider": "providers.nowhere.NoSuchProvider"}),
        encoding="utf-8",
    )
    code = cli.main(["transactional", "status", "--conf", str(conf_file), "--id", "words"])
    assert code == 2
    assert "providers.nowhere.NoSuchProvider" in capsys.readouterr().err
