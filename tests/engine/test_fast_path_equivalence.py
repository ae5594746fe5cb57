"""The per-tuple fast path (``runtime._rows``) gives exactly what the reference loop gives.

Every case runs twice, once through each loop (the job conf's ``REFERENCE_KEY``), and the two
must agree on everything observable:

- one task, directly (``run_task``), many seeded random cases: bolts of each kind (a
  ``BasicBolt``, a ``Bolt`` acking through its collector, a ``StatefulBolt``) running random
  scripts (``fast_path_topologies``: emit, emit untracked, multi-anchor, keep the tuple or only
  its values and ack it later, ack, ack twice, never ack, fail, report and fail, raise) over
  random batches (one- and two-field streams, untracked and multi-tree tuples), in PREPARE
  jobs and in jobs of a topology without state. Compared: every record the task sends back
  (its emitted batches with their roots, the XOR ledger, fails, the report's metrics and
  errors), the state it prepared, and the error that failed it, field for field;
- whole topologies on the inline engine, seeded random scripts whose failures happen once
  (so replays end), over each grouping: the committed state, what the spout saw (emits, acks,
  fails by message id), each component's counts;
- transactional topologies (a ``BasicBolt`` split, a batch bolt that keeps tuples and their
  values until ``finish_batch``, a committer), whose attempts fail or crash once here and
  there: the committed map, each component's counts, every transaction's outcome;
- two checkpointed topologies and one transactional on the shared Spark session.

The seeds are fixed: a failure names its seed, and ``pytest -k <seed>`` runs it again.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import column_topologies as col
import fast_path_topologies as fpt
import pytest
import topologies as topo
from pyspark import cloudpickle

from checkpoint import Action, CheckpointTaskProgram
from providers import InMemoryKeyValueStateProvider, KeyValueState, StateFactory
from statefulbolts import LocalCluster
from statefulbolts.errors import TaskFailedError
from statefulbolts.runtime import _collector, _rows
from statefulbolts.runtime._plan import ExecutionPlan
from statefulbolts.runtime._program import TaskJob
from statefulbolts.runtime._records import TaskReport, TupleBatch
from statefulbolts.runtime._rows import REFERENCE_KEY, REUSABLE
from statefulbolts.runtime._task import run_task
from statefulbolts.runtime._task_errors import decode_task_error
from statefulbolts.topology import CHECKPOINT_STREAM_ID

# ---------------------------------------------------------------------------- one task

# Ops a script is made of (see ``fast_path_topologies``), weighted: most tuples are acked.
_OPS = "eeeEuMkvrsssgaaaaaafF"
_KEYS = ["apple", "pear", "fig", "kiwi", "lime", "plum"]


def _script(rng: random.Random, crash: bool) -> str:
    ops = "".join(rng.choice(_OPS) for _ in range(rng.randint(0, 4)))
    if crash and rng.random() < 0.05:
        ops += "x"
    return f"{ops}:{rng.choice(_KEYS)}"


def _inputs(
    rng: random.Random, plan: ExecutionPlan, task: int, txid: int, checkpointed: bool, crash: bool
) -> list[TupleBatch]:
    """Random data batches from both ``up`` tasks on both streams, then their checkpoints."""
    comp, up = plan.index["bolt"], plan.index["up"]
    batches = []
    for up_task in range(2):
        for stream in ("one", "two"):
            if rng.random() < 0.2:
                continue
            n = rng.choice([0, 1, 2, 7, 30, 80])
            scripts = [_script(rng, crash) for _ in range(n)]
            values: list[Any] = scripts if stream == "one" else [[s, len(s)] for s in scripts]
            roots = [rng.choice([0, 0, 11, 12, 13, 14, 15, 16]) for _ in range(n)]
            more = None
            if n and rng.random() < 0.25:  # some tuples of several trees
                rows = rng.sample(range(n), max(1, n // 5))
                for i in rows:
                    roots[i] = roots[i] or 17
                more = {i: tuple(rng.sample([21, 22, 23], rng.randint(1, 2))) for i in rows}
            s = plan.stream_index[up][stream]
            batches.append(TupleBatch(comp, task, up, up_task, s, values, roots, more))
    if checkpointed:
        cp = plan.stream_index[up][CHECKPOINT_STREAM_ID]
        for up_task in range(2):
            batches.append(
                TupleBatch(comp, task, up, up_task, cp, [[txid, "PREPARE"]], [9000], None)
            )
    return batches


def _comparable(sent: list[Any]) -> list[Any]:
    """What a task sent back, its reports' tracebacks left out (their frames name the loop)."""
    out = []
    for r in col.comparable(sent):
        if isinstance(r, TaskReport):
            r = r._replace(errors=tuple(e._replace(traceback=None) for e in r.errors))
        out.append(r)
    return out


def _run_one(
    topology: Any, name: str, task: int, records: list[TupleBatch], action: Action | None,
    reference: bool,
) -> dict[str, Any]:  # fmt: skip
    plan = ExecutionPlan(topology)
    layout = plan.layout([plan.index["bolt"]])
    conf = {REFERENCE_KEY: True} if reference else {}
    txid = 0  # a stateful task's first PREPARE, over no committed state
    job = TaskJob(plan, layout, CheckpointTaskProgram(action, txid), name, conf, txid, 0)
    outcome: dict[str, Any] = {}
    with pytest.MonkeyPatch.context() as patch:
        if reference:  # all in Python: a ``BasicBolt``'s emit too (``_native/_basicemit.c``)
            basic = _collector._TaskBasicCollector
            patch.setattr(basic, "emit", basic._emit)
        try:
            out = list(run_task(job, cloudpickle.dumps(topology), 0, task, [(0, records)]))
        except TaskFailedError as exc:
            error = decode_task_error(exc)
            assert error is not None
            outcome["error"] = error
        else:
            outcome["sent"] = _comparable([r for _, recs in out for r in recs])
    state = StateFactory.get_state(f"{name}/bolt-{task}", {})
    assert isinstance(state, KeyValueState)
    outcome["state"] = dict(state)
    return outcome


def _case(seed: int, kind: str, crash: bool = False) -> tuple[dict[str, Any], dict[str, Any]]:
    rng = random.Random(seed)
    downstream = kind == "stateful" or rng.random() < 0.7
    checkpointed = downstream  # a topology with a stateful bolt runs PREPARE jobs
    topology = fpt.scripted(
        topo.ValueSpout("unused", []),
        kind,
        parallelism=rng.choice([1, 2]),
        grouping=rng.choice(["shuffle", "fields", "all"]),
        stateful_downstream=downstream,
    )
    plan = ExecutionPlan(topology)
    task = rng.randrange(len(plan.task_ids[plan.index["bolt"]]))
    records = _inputs(rng, plan, task, 0, checkpointed, crash)
    action = Action.PREPARE if checkpointed else None
    key = topo.new_key(f"fast-{kind}-{seed}")
    try:
        fast = _run_one(topology, f"{key}-f", task, records, action, reference=False)
        ref = _run_one(topology, f"{key}-r", task, records, action, reference=True)
    finally:
        InMemoryKeyValueStateProvider.drop(key)
    return fast, ref


@pytest.fixture(params=["compiled", "python"])
def row_loop(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """``feed_rows`` and ``feed_basic`` with their inner loops in C (``_rowloop.c``) and a
    ``BasicBolt``'s emit too (``_basicemit.c``), or all in Python."""
    if request.param == "python":
        monkeypatch.setattr(_rows, "COMPILED", False)
        basic = _collector._TaskBasicCollector
        monkeypatch.setattr(basic, "emit", basic._emit)
    return str(request.param)


@pytest.mark.parametrize("kind", ["basic", "rich", "stateful"])
@pytest.mark.parametrize("seed", range(40))
def test_one_task_sends_back_and_prepares_what_the_reference_loop_does(
    kind: str, seed: int, row_loop: str
) -> None:
    fast, ref = _case(seed, kind)
    assert fast == ref


@pytest.mark.parametrize("kind", ["basic", "rich", "stateful"])
@pytest.mark.parametrize("seed", range(100, 112))
def test_a_task_that_raises_names_the_tuple_the_reference_loop_names(
    kind: str, seed: int, row_loop: str
) -> None:
    fast, ref = _case(seed, kind, crash=True)
    assert fast == ref


@pytest.mark.skipif(not REUSABLE, reason="this Python runs every bolt through the reference loop")
def test_the_compiled_loop_is_built_and_runs_the_rows_that_join_a_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert _rows.COMPILED, (
        "statefulbolts/runtime/_native/_rowloop.c was not compiled: reinstall with a C "
        "compiler and Python's headers (pip install -e .)"
    )
    real = _rows._rowloop
    stretches: dict[str, list[tuple[int, int]]] = {"stretch": [], "stretch_basic": []}

    def spy(name: str) -> Any:
        def stretch(*args: Any) -> tuple[int, BaseException | None]:
            i, error = getattr(real, name)(*args)
            stretches[name].append((args[6] - args[5], i - args[5]))  # rows given, run
            return i, error

        return stretch

    class Spy:
        stretch = staticmethod(spy("stretch"))
        stretch_basic = staticmethod(spy("stretch_basic"))

    monkeypatch.setattr(_rows, "_rowloop", Spy)
    for kind in ("stateful", "rich", "basic"):
        for seed in range(12):
            fast, ref = _case(seed, kind)
            assert fast == ref
    for name, runs in stretches.items():
        assert sum(ran for _, ran in runs) > 100, name
        # Some rows stopped the stretch (kept, failed, acked twice...): Python took them over.
        assert any(ran < given for given, ran in runs), name


def test_the_compiled_emit_is_built_and_takes_a_basic_bolts_emits_of_one_str(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``_basicemit.c`` is built; its ``emit`` takes the one-str emits of a fields-grouped
    stream and hands the others (two fields, several trees) to the Python ``_emit``."""
    assert _collector.COMPILED_EMIT, (
        "statefulbolts/runtime/_native/_basicemit.c was not compiled: reinstall with a C "
        "compiler and Python's headers (pip install -e .)"
    )
    basic = _collector._TaskBasicCollector
    compiled, python = basic.emit, basic._emit
    counts = {"emit": 0, "handed on": 0}
    inside = [False]

    def emit(self: Any, *args: Any, **kwargs: Any) -> None:
        counts["emit"] += 1
        inside[0] = True
        try:
            compiled(self, *args, **kwargs)
        finally:
            inside[0] = False

    def _emit(self: Any, *args: Any, **kwargs: Any) -> None:
        counts["handed on"] += inside[0]
        python(self, *args, **kwargs)

    monkeypatch.setattr(basic, "emit", emit)
    monkeypatch.setattr(basic, "_emit", _emit)
    for seed in range(12):
        fast, ref = _case(seed, "basic")
        assert fast == ref
    taken = counts["emit"] - counts["handed on"]
    assert taken > 100, counts  # by C
    assert counts["handed on"] > 50, counts  # two fields, several trees: to Python


@pytest.mark.skipif(not REUSABLE, reason="this Python runs every bolt through the reference loop")
def test_the_fast_loops_run_where_they_apply_and_not_when_the_conf_asks_for_the_reference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import statefulbolts.runtime._task as task_module

    calls: list[str] = []
    for name in ("feed_rows", "feed_basic", "_feed"):
        real = getattr(task_module, name)

        def spy(*args: Any, _real: Any = real, _name: str = name, **kwargs: Any) -> Any:
            calls.append(_name)
            return _real(*args, **kwargs)

        monkeypatch.setattr(task_module, name, spy)
    for kind, loop in (("basic", "feed_basic"), ("rich", "feed_rows"), ("stateful", "feed_rows")):
        calls.clear()
        fast, ref = _case(7, kind)
        assert fast == ref
        half = len(calls) // 2
        assert calls[:half] and set(calls[:half]) <= {loop, "_feed"} and loop in calls[:half]
        assert set(calls[half:]) == {"_feed"}


# ------------------------------------------------------------------------- whole topologies

# What a tuple does end to end: each is acked exactly once in the end (``a``; ``k``, acked
# later; ``f`` / ``F``, failed once, replayed, then acked), with emits around it; ``x`` makes
# its task raise once (the transaction fails and is replayed).
_EMITS = "eeEuMgv"


def _e2e_script(rng: random.Random, kind: str, i: int) -> str:
    emits = "".join(rng.choice(_EMITS) for _ in range(rng.randint(0, 2)))
    settle = rng.choice("aaaakkrfF") if kind != "basic" else rng.choice("..kkrfF")
    settle = settle.replace(".", "")
    if settle == "r":
        settle = "ar"  # acks itself, then what was kept before it
    crash = "x" if rng.random() < 0.02 else ""
    s = "s" if kind == "stateful" and rng.random() < 0.7 else ""
    return f"{emits}{s}{crash}{settle}:{i}"


def _e2e(
    cluster: LocalCluster, seed: int, kind: str, markers: Path, reference: bool
) -> dict[str, Any]:
    rng = random.Random(seed)
    n = rng.choice([40, 120])
    scripts = [_e2e_script(rng, kind, i) for i in range(n)]
    grouping = rng.choice(["shuffle", "fields", "all", "global", "none", "local_or_shuffle"])
    key = topo.new_key(f"fast-e2e-{kind}-{seed}")
    topology = fpt.scripted(
        topo.ValueSpout(key, scripts, burst=rng.choice([None, 10, 40])),
        kind,
        parallelism=rng.choice([1, 2]),
        grouping=grouping,
        stateful_downstream=kind == "stateful" or rng.random() < 0.7,
        once=str(markers),
    )
    conf = dict(col.FAST) | ({REFERENCE_KEY: True} if reference else {})
    handle = cluster.submit_topology(key, conf, topology)
    try:
        handle.await_idle(120)
        stateful = [c for c in ("bolt", "down", "side") if _is_stateful(topology, c)]
        states = {c: handle.read_state(c) for c in stateful}
        metrics = handle.metrics()
    finally:
        handle.kill()
        InMemoryKeyValueStateProvider.drop(key)
    rec = topo.record(key)
    components = {
        c: {k: v for k, v in m.items() if k in ("executed", "emitted", "acked", "failed")}
        for c, m in metrics["components"].items()
    }
    return {
        "state": states,
        "emits": dict(rec.emits),
        "acks": dict(rec.acks),
        "fails": dict(rec.fails),
        "components": components,
    }


def _is_stateful(topology: Any, component: str) -> bool:
    try:
        spec = topology.component(component)
    except Exception:  # noqa: BLE001 - the topology has no such component
        return False
    return spec.is_stateful


@pytest.mark.parametrize("kind", ["basic", "rich", "stateful"])
@pytest.mark.parametrize("seed", range(4))
def test_a_topology_commits_acks_fails_and_replays_what_the_reference_loop_does(
    tmp_path: Path, kind: str, seed: int
) -> None:
    with LocalCluster(engine="inline") as cluster:
        fast = _e2e(cluster, seed, kind, _folder(tmp_path / "fast"), reference=False)
        ref = _e2e(cluster, seed, kind, _folder(tmp_path / "ref"), reference=True)
    assert fast == ref
    # Every message ended acked, once; those whose tuples failed were failed first.
    assert set(ref["acks"].values()) == {1}


def _folder(path: Path) -> Path:
    path.mkdir()
    return path


@pytest.mark.spark
@pytest.mark.parametrize(("kind", "seed"), [("stateful", 2), ("basic", 1)])
def test_on_spark_a_topology_commits_acks_fails_and_replays_what_the_reference_loop_does(
    spark: Any, tmp_path: Path, kind: str, seed: int
) -> None:
    cluster = LocalCluster(spark=spark)
    fast = _e2e(cluster, seed, kind, _folder(tmp_path / "fast"), reference=False)
    ref = _e2e(cluster, seed, kind, _folder(tmp_path / "ref"), reference=True)
    assert fast == ref
    assert set(ref["acks"].values()) == {1} and ref["fails"]


# ------------------------------------------------------------------ transactional topologies

_TX_OPS = "eeekvg"


def _tx_run(seed: int, markers: Path, reference: bool, spark: Any = None) -> dict[str, Any]:
    rng = random.Random(seed)
    rows = rng.choice([30, 90])

    def script(key: str) -> str:
        ops = "".join(rng.choice(_TX_OPS) for _ in range(rng.randint(0, 3)))
        # A failed attempt, now and then: a batch holds a few at most (retries are 5 in a row).
        return f"{ops}{rng.choice('fF') if rng.random() < 0.03 else ''}:{key}"

    partitions = {
        p: [[script(f"{p}-{i}")] for i in range(rows)] for p in range(rng.choice([1, 2, 3]))
    }
    if rng.random() < 0.5:  # a crash, once
        partitions[0][rows // 2] = [f"{rng.choice('xX')}{partitions[0][rows // 2][0]}"]
    tid = topo.new_key(f"fast-tx-{seed}")
    topology = fpt.transactional(tid, partitions, rng.choice([7, 25]), str(markers), 2)
    conf = {REFERENCE_KEY: True} if reference else {}
    cluster = LocalCluster(engine="inline") if spark is None else LocalCluster(spark=spark)
    with cluster:
        handle = cluster.submit_topology(tid, conf, topology)
        try:
            handle.await_idle(120)
            committed = handle.read_state("sum")
            metrics = handle.metrics()
        finally:
            handle.kill()
    components = {
        c: {k: v for k, v in m.items() if k in ("executed", "emitted", "acked", "failed")}
        for c, m in metrics["components"].items()
    }
    outcomes = [(t["txid"], t["ok"], t["tuples"]) for t in metrics["transactions"]]
    return {"committed": committed, "components": components, "transactions": outcomes}


@pytest.mark.parametrize("seed", range(4))
def test_a_transactional_topology_commits_what_the_reference_loop_does(
    tmp_path: Path, seed: int
) -> None:
    fast = _tx_run(seed, _folder(tmp_path / "fast"), reference=False)
    ref = _tx_run(seed, _folder(tmp_path / "ref"), reference=True)
    assert fast == ref
    # Every value the batch bolt was given is counted in the committed map, once.
    assert ref["committed"] and set(ref["committed"].values()) >= {1}


@pytest.mark.spark
def test_on_spark_a_transactional_topology_commits_what_the_reference_loop_does(
    spark: Any, tmp_path: Path
) -> None:
    fast = _tx_run(3, _folder(tmp_path / "fast"), reference=False, spark=spark)
    ref = _tx_run(3, _folder(tmp_path / "ref"), reference=True, spark=spark)
    assert fast == ref and ref["committed"]
