"""One driver per topology, with real child drivers against real stores (Redis, SQLite).

Each scenario runs ``statefulbolts run tests.lease_topologies:wordcount`` (files -> split ->
count, positions saved with the checkpoint) as child processes against one store, and checks
that whatever the timing, exactly one driver runs the topology and the committed counts equal a
plain count of the input:

- two drivers started together, at a random offset: one runs to the end (exit 0), the other
  is refused at once (exit 2) with one line naming the holder, and took no epoch;
- a second driver started with ``--take-over`` while the first runs: the first stops with the
  take-over named (exit 2), the second finishes the topology;
- a driver paused with SIGSTOP until its lease lapsed, a second one started without a flag,
  then the first resumed: the first commits nothing more and stops (exit 2);
- two ``--supervise`` sessions started together while the test SIGKILLs whichever child holds
  the lease, twice: the holder's supervisor restarts it and its successor takes the lease over
  at once (same restart token), the other session is refused (exit 2).

The children run ``--engine inline`` (the protocol across real processes is what is tested;
a JVM per child would cost seconds each), one scenario also on Spark ``local[2]``. Timings and
offsets come from the seed: ``STATEFULBOLTS_LEASE_SEEDS`` (``"0-49"``, or ``"3,7"``) loops
them; the default is one or two seeds per scenario (the loops before a release run 25 or more).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from lease_topologies import DELAY_KEY, INPUT_DIR_ENV, committed, corpus, expected
from recovery_topologies import child_env
from seed_lists import env_seeds

from providers import LeaseHolder
from recovery.lease import read_lease

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGY = "tests.lease_topologies:wordcount"
SENTENCES = 300
RUN_TIMEOUT = 240


def _seeds(default: str) -> list[int]:
    return env_seeds("STATEFULBOLTS_LEASE_SEEDS", default)


# --- the stores --------------------------------------------------------------------------------
@dataclass
class Store:
    """A store the drivers share, and a config naming it."""

    kind: str
    conf: dict[str, Any]


@pytest.fixture(params=[pytest.param("redis", marks=pytest.mark.redis), "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    if request.param == "redis":
        server = request.getfixturevalue("redis_db")
        yield Store(
            "redis",
            {
                "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
                "topology.state.provider.config": {
                    "jedisPoolConfig": {"host": "127.0.0.1", "port": server.port}
                },
            },
        )
    else:
        path = tmp_path / "state.sqlite3"
        yield Store(
            "sqlite",
            {
                "topology.state.provider": "sqlite_state.SqliteKeyValueStateProvider",
                "topology.state.provider.config": {"path": str(path)},
            },
        )


# --- child drivers ---------------------------------------------------------------------------
@dataclass
class Child:
    """A child process (a driver, or a supervisor of drivers) with its output in files."""

    proc: subprocess.Popen[bytes]
    out: Path
    err: Path

    def finish(self, timeout: float = RUN_TIMEOUT) -> tuple[int, list[dict[str, Any]], str]:
        """Wait for it; (exit status, JSON lines, stderr). Nothing of it is left running."""
        try:
            self.proc.wait(timeout)
        finally:
            self.kill()
        lines = self.out.read_text(encoding="utf-8").splitlines()
        events = [json.loads(line) for line in lines if line.startswith("{")]
        code = self.proc.returncode
        return (128 - code if code < 0 else code), events, self.err.read_text(encoding="utf-8")

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def events(self) -> list[dict[str, Any]]:
        """The JSON lines written so far (a last partial line is left out)."""
        text = self.out.read_text(encoding="utf-8")
        lines = text.splitlines()[: text.count("\n")]
        return [json.loads(line) for line in lines if line.startswith("{")]


def start(
    tmp_path: Path,
    label: str,
    conf: dict[str, Any],
    name: str,
    inputs: Path,
    *extra: str,
) -> Child:
    """Start ``statefulbolts run`` for topology ``name`` in its own process group."""
    conf_file = tmp_path / f"{label}.json"
    conf_file.write_text(json.dumps(conf), encoding="utf-8")
    cmd = [sys.executable, "-m", "statefulbolts.cli", "run", TOPOLOGY, "--conf", str(conf_file)]
    cmd += ["--name", name, "--json", *extra]
    env = child_env()
    env[INPUT_DIR_ENV] = str(inputs)
    env.pop("STATEFULBOLTS_LEASE_TOKEN", None)
    out, err = tmp_path / f"{label}.out", tmp_path / f"{label}.err"
    with out.open("wb") as o, err.open("wb") as e:
        proc = subprocess.Popen(  # noqa: S603 - our own command line
            cmd, cwd=ROOT, stdout=o, stderr=e, env=env, start_new_session=True
        )
    return Child(proc, out, err)


def wait_for(what: str, check: Any, timeout: float = RUN_TIMEOUT) -> Any:
    """Poll ``check()`` until it returns something true; fail naming ``what`` at the timeout."""
    deadline = time.monotonic() + timeout
    while True:
        got = check()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def commits(events: list[dict[str, Any]]) -> list[int]:
    """The txids of the successful COMMITs among a driver's transaction lines."""
    return [
        e["txid"]
        for e in events
        if e.get("event") == "transaction" and e["action"] == "COMMIT" and e["ok"]
    ]


def initstates(events: list[dict[str, Any]]) -> list[int]:
    """The txids of a driver's INITSTATE lines, in order (its recovery is the first)."""
    return [
        e["txid"] for e in events if e.get("event") == "transaction" and e["action"] == "INITSTATE"
    ]


def held_at(marker: Path, txid: int) -> dict[str, Any]:
    """``topology.faults``: count task 0 waits in PREPARE(txid) until ``<marker>.release``.

    A run cannot end before the test lets it, however slow the machine: what the tests
    below need to stay true while a second driver starts.
    """
    fault = {"component": "count", "task": 0, "at_tuple": 0, "kind": "hold"}
    return {"tasks": [{**fault, "marker": str(marker), "txid": txid, "attempts": "every"}]}


def release(marker: Path) -> None:
    Path(f"{marker}.release").touch()


def base(store: Store, **extra: Any) -> dict[str, Any]:
    return {
        **store.conf,
        "topology.state.checkpoint.interval.ms": 100,
        "topology.max.spout.pending": 15,
        DELAY_KEY: 20,
        **extra,
    }


# --- two drivers started together ------------------------------------------------------------
@pytest.mark.parametrize("seed", _seeds("0-1"))
def test_two_drivers_started_together_one_runs_the_other_is_refused(
    store: Store, seed: int, tmp_path: Path
) -> None:
    """Whichever takes the lease is held in PREPARE(1) until the other has exited.

    So the two always overlap, on a machine however busy: the loser cannot start after the
    winner ended. Which one wins is the race the random offset makes.
    """
    rng = random.Random(seed)
    name = f"together-{store.kind}-{seed}"
    inputs = corpus(tmp_path / "in", SENTENCES)
    marker = tmp_path / "held"
    conf = {**base(store), "topology.faults": held_at(marker, 1)}
    first = start(tmp_path, "a", conf, name, inputs, "--engine", "inline")
    time.sleep(rng.uniform(0, 0.6))  # the random offset between the two starts
    second = start(tmp_path, "b", conf, name, inputs, "--engine", "inline")
    try:
        loser = wait_for("one driver to exit", lambda: _exited(first, second))
        assert loser.finish()[0] == 2, loser.err.read_text(encoding="utf-8")[-2000:]
    finally:
        release(marker)
    results = [first.finish(), second.finish()]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 2], [err[-2000:] for _, _, err in results]
    refused = next(err for code, _, err in results if code == 2)
    line = next(line for line in refused.splitlines() if line.startswith("error: "))
    assert f"error: topology '{name}' is already running: host " in line
    assert "epoch 1" in line and "--take-over" in line
    ran = next(events for code, events, _ in results if code == 0)
    assert commits(ran), "the driver that ran committed nothing"
    lease = read_lease(store.conf, f"{name}/")
    assert lease is not None and lease.epoch == 1 and not lease.live  # one grant, released
    assert committed(store.conf, name) == expected(SENTENCES)


def _exited(*children: Child) -> Child | None:
    return next((c for c in children if c.proc.poll() is not None), None)


# --- --take-over -----------------------------------------------------------------------------
@pytest.mark.parametrize("seed", _seeds("0"))
def test_take_over_stops_the_running_driver_and_finishes_its_work(
    store: Store, seed: int, tmp_path: Path
) -> None:
    rng = random.Random(seed)
    name = f"takeover-{store.kind}-{seed}"
    inputs = corpus(tmp_path / "in", SENTENCES)
    after = rng.randint(1, 4)
    marker = tmp_path / "held"
    conf = base(store)
    # Held a few transactions on, so it cannot finish before the second driver takes over.
    first = start(
        tmp_path, "a", {**conf, "topology.faults": held_at(marker, after + 3)}, name, inputs,
        "--engine", "inline",
    )  # fmt: skip
    try:
        wait_for(f"{after} commits", lambda: len(commits(first.events())) >= after)
        second = start(tmp_path, "b", conf, name, inputs, "--engine", "inline", "--take-over")
        wait_for("the take-over", lambda: read_lease(store.conf, f"{name}/").epoch == 2)  # type: ignore[union-attr]
    finally:
        release(marker)
    code_b, events_b, err_b = second.finish()
    code_a, events_a, err_a = first.finish()
    assert code_b == 0, err_b[-2000:]
    assert code_a == 2, err_a[-2000:]
    assert f"topology '{name}': this driver (lease epoch 1) was taken over" in err_a
    assert "epoch 2, held by host" in err_a or "epoch 2, lapsed" in err_a
    assert committed(store.conf, name) == expected(SENTENCES)
    lease = read_lease(store.conf, f"{name}/")
    assert lease is not None and lease.epoch == 2


# --- the store itself refuses a taken-over driver -----------------------------------------------
@pytest.mark.parametrize("seed", _seeds("0"))
def test_a_taken_over_driver_is_refused_by_the_store_itself(
    store: Store, seed: int, tmp_path: Path
) -> None:
    """A write of the old driver, after the new one took over, is refused by the store.

    The old driver's count task 0 is held (a ``hold`` fault) in PREPARE(t) before it wrote;
    the new one takes over; then the hold is released and the task prepares. The old
    driver's lease lasts ten minutes, so its renewal thread has not run yet and cannot be
    what stops it: the refusal must come from the store (the fence raised at the grant).
    """
    txid = random.Random(seed).randint(1, 4)
    name = f"refused-{store.kind}-{seed}"
    inputs = corpus(tmp_path / "in", SENTENCES)
    marker = tmp_path / "held"
    fault = {"component": "count", "task": 0, "at_tuple": 0, "kind": "hold"}
    fault.update({"marker": str(marker), "txid": txid, "attempts": "every"})
    conf = base(store, **{"topology.state.lease.timeout.secs": 600})
    first = start(
        tmp_path, "a", {**conf, "topology.faults": {"tasks": [fault]}}, name, inputs,
        "--engine", "inline",
    )  # fmt: skip
    try:
        wait_for("the held PREPARE", marker.exists)
        second = start(tmp_path, "b", conf, name, inputs, "--engine", "inline", "--take-over")
        wait_for("the take-over", lambda: read_lease(store.conf, f"{name}/").epoch == 2)  # type: ignore[union-attr]
    finally:
        Path(f"{marker}.release").touch()
    code_a, events_a, err_a = first.finish()
    code_b, _, err_b = second.finish()
    assert code_a == 2, err_a[-2000:]
    assert code_b == 0, err_b[-2000:]
    # Refused by the store (the fence), not by a txid check, nor by the renewal thread.
    assert f"prepare of txid {txid} under lease epoch 1 refused" in err_a, err_a[-3000:]
    assert "was taken over" in err_a
    assert commits(events_a) == list(range(txid))  # nothing of txid t or later
    assert committed(store.conf, name) == expected(SENTENCES)


# --- a paused driver -------------------------------------------------------------------------
def _pause_outside_a_write(pid: int, path: Path) -> None:
    """SIGSTOP ``pid`` at a moment it holds no write transaction on the SQLite file ``path``.

    The held task does not write, but the driver's lease renewal does, from a thread of its
    own: a pause that lands inside one of its writes (a millisecond, longer on a busy machine)
    keeps the file locked. Such a pause is resumed at once and made again a little later.
    """
    for _ in range(100):
        os.kill(pid, signal.SIGSTOP)
        probe = sqlite3.connect(path, timeout=0.2, isolation_level=None)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.execute("ROLLBACK")
            return
        except sqlite3.OperationalError:
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.05)
        finally:
            probe.close()
    raise AssertionError(f"driver {pid} held a write on {path} at every one of 100 pauses")


def _paused_past_its_lease(
    store: Store, seed: int, tmp_path: Path, engine: str, sentences: int = SENTENCES
) -> None:
    """Pause the first driver, let its lease lapse, run a second, resume the first.

    The first is held in PREPARE(t + 3) (a ``hold`` fault), so it cannot end before it is
    paused: t is at most 4, and a transaction takes 15 lines (``max.spout.pending``), so
    ``sentences`` of 120 or more leave data for PREPARE(7). On Redis the pause lands anywhere
    from PREPARE(t) on, the held task included. On SQLite it lands in the held task: a
    process paused inside one of SQLite's write transactions keeps the file locked for every
    other process, so the second driver could not even take the lease (it waits out the
    provider's busy timeout, then exits 1).
    """
    rng = random.Random(seed)
    name = f"paused-{store.kind}-{engine}-{seed}"
    inputs = corpus(tmp_path / "in", sentences)
    conf = base(store, **{"topology.state.lease.timeout.secs": 2})
    anywhere = store.kind != "sqlite"
    marker = tmp_path / "held"
    txid = rng.randint(1, 4)
    held = txid + 3 if anywhere else txid
    first = start(
        tmp_path, "a", {**conf, "topology.faults": held_at(marker, held)}, name, inputs,
        "--engine", engine,
    )  # fmt: skip
    if anywhere:
        wait_for(f"{txid} commits", lambda: len(commits(first.events())) >= txid)
        time.sleep(rng.uniform(0, 0.15))  # pause it anywhere in a transaction
    else:
        wait_for("the held PREPARE", marker.exists)
    if anywhere:
        os.kill(first.proc.pid, signal.SIGSTOP)  # the driver's process; its JVM, if any, runs on
    else:
        _pause_outside_a_write(
            first.proc.pid, Path(store.conf["topology.state.provider.config"]["path"])
        )
    try:
        paused_at = len(first.events())
        wait_for("the lease to lapse", lambda: not read_lease(store.conf, f"{name}/").live)  # type: ignore[union-attr]
        second = start(tmp_path, "b", conf, name, inputs, "--engine", engine)
        code_b, events_b, err_b = second.finish()
    finally:
        release(marker)
        os.kill(first.proc.pid, signal.SIGCONT)
    code_a, events_a, err_a = first.finish()
    assert code_b == 0, err_b[-2000:]
    assert code_a == 2, err_a[-2000:]
    assert "was taken over" in err_a
    # A COMMIT whose writes landed before the pause may be reported after it: on Spark the
    # job runs on in the JVM while the driver's Python process is stopped, and even inline the
    # pause can fall between the write and its line. What the fence forbids is a commit the
    # second driver did not find: the first reports after its pause at most the one that was
    # in flight, and only one the second recovered from (its first INITSTATE), never later.
    late = commits(events_a[paused_at:])
    recovered_from = initstates(events_b)[0]
    assert len(late) <= 1 and all(t <= recovered_from for t in late), (
        f"the paused driver committed {late} after it resumed; the second driver recovered "
        f"from txid {recovered_from}"
    )
    assert set(commits(events_a)) <= set(range(held))
    assert committed(store.conf, name) == expected(sentences)


@pytest.mark.parametrize("seed", _seeds("0"))
def test_a_driver_paused_past_its_lease_commits_nothing_after_it_resumes(
    store: Store, seed: int, tmp_path: Path
) -> None:
    _paused_past_its_lease(store, seed, tmp_path, "inline")


@pytest.mark.spark
def test_a_paused_driver_on_spark_commits_nothing_after_it_resumes(
    redis_db: Any, tmp_path: Path
) -> None:
    redis = Store(
        "redis",
        {
            "topology.state.provider": "providers.redis.RedisKeyValueStateProvider",
            "topology.state.provider.config": {
                "jedisPoolConfig": {"host": "127.0.0.1", "port": redis_db.port}
            },
        },
    )
    # 150 sentences, 10 transactions: on Spark each of them is a job or two, and what is
    # tested is the pause, the take-over and the resumed driver, not the length of the rest.
    _paused_past_its_lease(redis, _seeds("0")[0], tmp_path, "spark", sentences=150)


# --- supervised sessions ---------------------------------------------------------------------
@pytest.mark.parametrize("seed", _seeds("0"))
def test_supervised_children_killed_and_restarted_keep_one_driver(
    store: Store, seed: int, tmp_path: Path
) -> None:
    rng = random.Random(seed)
    name = f"supervised-{store.kind}-{seed}"
    inputs = corpus(tmp_path / "in", SENTENCES * 2)
    conf = base(store)
    flags = ("--engine", "inline", "--supervise", "--backoff", "0.1", "--max-restarts", "5")
    one = start(tmp_path, "s1", conf, name, inputs, *flags)
    time.sleep(rng.uniform(0, 0.6))
    two = start(tmp_path, "s2", conf, name, inputs, *flags)
    scope = f"{name}/"
    killed: list[LeaseHolder] = []
    for _ in range(2):
        # A live lease of a child not killed yet; or the end, if the topology got there first.
        found = wait_for(
            "a live lease or the end",
            lambda: _live_holder(store, scope, killed) or _finished(one, two),
        )
        if not isinstance(found, LeaseHolder):
            break
        time.sleep(rng.uniform(0.1, 0.6))
        try:
            os.kill(found.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # it finished meanwhile: nothing to kill
        killed.append(found)
    results = [one.finish(), two.finish()]
    codes = sorted(code for code, _, _ in results)
    assert codes == [0, 2], [err[-3000:] for _, _, err in results]
    assert killed, "no child was killed: the run ended before the first kill"
    assert committed(store.conf, name) == expected(SENTENCES * 2)


def _finished(*children: Child) -> Child | None:
    """A child that ended with status 0 (a supervisor refused at start ends with 2)."""
    return next((c for c in children if c.proc.poll() == 0), None)


def _live_holder(store: Store, scope: str, killed: list[LeaseHolder]) -> LeaseHolder | None:
    """The holder of the scope's live lease, if it is not one already killed."""
    lease = read_lease(store.conf, scope)
    if lease is None or not lease.live or lease.holder in killed:
        return None
    return lease.holder
