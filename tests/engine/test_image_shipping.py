"""Image shipping without Spark: the driver's ``ImageShipper`` and a worker's kept images.

Each "process" (the driver, two Python workers) gets its own in-memory provider store and its own
worker cache, swapped in around the code it runs; broadcasts are fakes that count their reads. A
task is what the runtime does around a stateful task: ``install_images``, the state's work,
``end_task``, ``finish_images``; the driver applies the logs of a job that succeeded through the
shipper. After every step the worker's image must equal the driver's, byte for byte.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from seed_lists import env_seeds

from providers import DriverOwnedStateProvider, InMemoryKeyValueStateProvider
from statefulbolts.runtime import _held_images
from statefulbolts.runtime._held_images import Held, catch_up, finish_images, install_images
from statefulbolts.runtime._images import Delta, ImageShipper, ShippedImage

NS = "topo/count-0"
ROOT = NS


class FakeBroadcast:
    def __init__(self, value: bytes) -> None:
        self._bytes = value
        self.reads = 0
        self.destroyed = False

    @property
    def value(self) -> bytes:
        assert not self.destroyed, "a destroyed broadcast was read"
        self.reads += 1
        return self._bytes

    def destroy(self, blocking: bool = False) -> None:
        self.destroyed = True


class FakeContext:
    _jsc = object()

    def __init__(self) -> None:
        self.made: list[FakeBroadcast] = []

    def broadcast(self, value: bytes) -> FakeBroadcast:
        b = FakeBroadcast(value)
        self.made.append(b)
        return b


class Process:
    """One process's provider store, task roots and worker cache."""

    def __init__(self) -> None:
        self.store: dict[str, Any] = {}
        self.tasks: set[str] = set()
        self.held: dict[str, Held] = {}


@contextmanager
def inside(monkeypatch: pytest.MonkeyPatch, process: Process) -> Iterator[Any]:
    with monkeypatch.context() as m:
        m.setattr(InMemoryKeyValueStateProvider, "_store", process.store)
        m.setattr(InMemoryKeyValueStateProvider, "_tasks", process.tasks)
        m.setattr(_held_images, "_held", process.held)
        yield InMemoryKeyValueStateProvider()


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> Any:
    return World(monkeypatch)


class World:
    def __init__(
        self, monkeypatch: pytest.MonkeyPatch, max_deltas: int = 256, inline_bytes: int = 0
    ) -> None:
        self.mp = monkeypatch
        self.driver, self.w1, self.w2 = Process(), Process(), Process()
        self.sc = FakeContext()
        with inside(monkeypatch, self.driver) as p:
            # Nothing inline unless a test says so: these tests follow the broadcasts.
            self.shipper = ImageShipper(
                self.sc, p, max_deltas=max_deltas, inline_bytes=inline_bytes
            )
            seed = p.new_state(NS, {})
            for i in range(50):
                seed.put(f"seed-{i}", i)
            seed.commit()

    def ship(self) -> dict[str, Any]:
        with inside(self.mp, self.driver):
            return self.shipper.ship([NS])

    def task(
        self, worker: Process, shipped: dict[str, Any], work: Callable[[Any], None]
    ) -> dict[str, bytes]:
        """A task on ``worker``: its changes (not yet applied on the driver)."""
        with inside(self.mp, worker) as p:
            install_images(p, ROOT, shipped)
            work(p.new_state(NS, {}))
            changes = p.end_task(ROOT, list(shipped))
            finish_images(p, shipped, changes)
            return changes

    def apply(self, changes: dict[str, bytes]) -> None:
        with inside(self.mp, self.driver):
            for ns, log in changes.items():
                self.shipper.apply_changes(ns, log)

    def job(self, worker: Process, work: Callable[[Any], None]) -> dict[str, Any]:
        """Ship, run the task on ``worker``, apply its log: a job that succeeded."""
        shipped = self.ship()
        self.apply(self.task(worker, shipped, work))
        return shipped

    def image(self, process: Process) -> bytes:
        with inside(self.mp, process) as p:
            return p.export_image(NS)

    def loads(self) -> dict[str, int]:
        return _held_images.loads()


def count(key: str, txid: int | None = None) -> Callable[[Any], None]:
    """A task that adds one to ``key`` and prepares ``txid`` (commits at once without one)."""

    def work(state: Any) -> None:
        state.put(key, state.get(key, 0) + 1)
        if txid is None:
            state.commit()
        else:
            state.prepare_commit(txid)

    return work


def commit(txid: int) -> Callable[[Any], None]:
    return lambda state: state.commit(txid)


def nothing(state: Any) -> None:
    state.get("seed-1")


@pytest.fixture(autouse=True)
def fresh_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    import collections

    monkeypatch.setattr(_held_images, "_loads", collections.Counter())


# ----------------------------------------------------------------- the decision alone


def shipped_at(version: int, base: int, digests: list[bytes], base_digest: bytes | None = None):
    deltas = tuple(Delta(base + 1 + i, d, f"log {base + 1 + i}") for i, d in enumerate(digests))
    assert base + len(deltas) == version
    return ShippedImage("tok", version, base, base_digest, "snapshot", deltas)


@pytest.mark.parametrize(
    ("held", "mark", "expected"),
    [
        (None, 5, None),  # nothing kept here
        (Held("other", 3, None, 5), 5, None),  # another token: another run of the driver
        (Held("tok", 3, None, 5), 6, None),  # something changed the image since
        (Held("tok", 3, None, 5), None, None),  # the provider cannot tell
        (Held("tok", 4, None, 5), 5, ()),  # current
        (Held("tok", 3, b"d4", 5), 5, ()),  # its own log is version 4
        (Held("tok", 3, b"zz", 5), 5, None),  # another attempt's log is version 4
        (Held("tok", 4, b"d5", 5), 5, None),  # its log was never applied (the job failed)
        (Held("tok", 2, None, 5), 5, ("log 3", "log 4")),  # behind: replay two deltas
        (Held("tok", 1, b"d2", 5), 5, ("log 3", "log 4")),  # its log was version 2
        (Held("tok", 1, b"xx", 5), 5, None),  # the log before the snapshot is not known
        (Held("tok", 1, None, 5), 5, None),  # behind the snapshot
        (Held("tok", 6, None, 5), 5, None),  # ahead of the driver: impossible, not trusted
    ],
)
def test_catch_up_decides_from_token_mark_version_and_digest(held, mark, expected):
    shipped = shipped_at(4, 2, [b"d3", b"d4"], base_digest=b"d2")
    got = catch_up(held, shipped, mark)
    assert (got if got is None else tuple(d.changes for d in got)) == expected


# ----------------------------------------------------------------- driver and workers


def test_a_warm_worker_reads_no_image_and_a_cold_one_the_snapshot_once(world: World):
    first = world.job(world.w1, count("a", 1))  # cold: the snapshot
    [snapshot] = world.sc.made
    assert isinstance(first[NS], ShippedImage) and snapshot.reads == 1
    world.job(world.w1, commit(1))  # warm: its own log became version 1, nothing read
    world.job(world.w1, count("a", 2))
    assert snapshot.reads == 1
    assert world.loads() == {"snapshot": 1, "current": 2}
    assert sum(b.reads for b in world.sc.made) == 1
    assert world.image(world.w1) == world.image(world.driver)

    # A second worker: the snapshot, then every delta since.
    world.job(world.w2, commit(2))
    assert world.loads()["snapshot"] == 2
    assert world.image(world.w2) == world.image(world.driver)
    # Back on the first, two versions behind: the two deltas, not the snapshot.
    world.job(world.w1, count("a", 3))
    assert world.loads() == {"snapshot": 2, "current": 2, "caught-up": 1}
    assert world.image(world.w1) == world.image(world.driver)
    with inside(world.mp, world.driver) as p:
        state = p.new_state(NS, {})
        assert state.get("a") == 3 and state.get("seed-7") == 7


def test_a_job_the_driver_did_not_apply_leaves_no_trace_in_the_worker(world: World):
    world.job(world.w1, count("a", 1))
    world.job(world.w1, commit(1))
    # This job fails elsewhere: the task ended cleanly here, the driver applies nothing.
    world.task(world.w1, world.ship(), count("a"))
    with inside(world.mp, world.w1) as p:
        assert p.new_state(NS, {}).get("a") == 2  # the failed job's write, in this worker
    world.job(world.w1, nothing)
    assert world.loads()["snapshot"] == 2
    assert world.image(world.w1) == world.image(world.driver)
    with inside(world.mp, world.w1) as p:
        assert p.new_state(NS, {}).get("a") == 1


def test_a_task_that_raised_leaves_its_worker_without_a_usable_copy(world: World):
    world.job(world.w1, count("a", 1))
    shipped = world.ship()
    with inside(world.mp, world.w1) as p, pytest.raises(RuntimeError):
        install_images(p, ROOT, shipped)
        state = p.new_state(NS, {})
        state.commit(1)  # the task's writes reach the image...
        raise RuntimeError("...and then it fails: Spark retries it elsewhere")
    world.job(world.w2, commit(1))  # the retry
    world.job(world.w1, count("b", 2))
    assert world.loads()["snapshot"] == 3  # w1 first, w2, w1 again
    assert world.image(world.w1) == world.image(world.driver)


def test_a_retry_whose_log_differs_makes_the_first_attempts_copy_stale(world: World):
    world.job(world.w1, count("a", 1))
    shipped = world.ship()
    world.task(world.w1, shipped, count("x"))  # an attempt that lost
    world.apply(world.task(world.w2, shipped, count("y")))  # the attempt the driver took
    world.job(world.w1, nothing)
    assert world.loads()["snapshot"] == 3
    assert world.image(world.w1) == world.image(world.driver)
    with inside(world.mp, world.w1) as p:
        state = p.new_state(NS, {})
        assert (state.get("x"), state.get("y")) == (None, 1)


def test_an_identical_retry_keeps_both_copies_current(world: World):
    world.job(world.w1, count("a", 1))
    shipped = world.ship()
    world.task(world.w1, shipped, count("x"))
    world.apply(world.task(world.w2, shipped, count("x")))  # the same log: deterministic
    world.job(world.w1, nothing)
    assert world.loads() == {"snapshot": 2, "current": 2}
    assert world.image(world.w1) == world.image(world.driver)


@pytest.mark.parametrize("how", ["driver-state", "replace", "drop", "restart"])
def test_a_change_the_shipper_did_not_record_starts_a_new_token(world: World, how: str):
    world.job(world.w1, count("a", 1))
    world.job(world.w1, commit(1))
    token = world.ship()[NS].token
    with inside(world.mp, world.driver) as p:
        if how == "driver-state":  # a driver-side state on the namespace
            state = p.new_state(NS, {})
            state.put("driver", 1)
            state.commit()
        elif how == "replace":  # the state tool's import
            p.new_state(NS, {}).replace_stored(1, [(b"\xa1k", b"\x01")], None, {})
        elif how == "drop":
            InMemoryKeyValueStateProvider.drop(NS)
        else:  # a new run of the driver in the same process: a new shipper
            world.shipper = ImageShipper(world.sc, p, inline_bytes=0)
    shipped = world.ship()
    assert shipped[NS].token != token
    world.job(world.w1, count("b", 2))
    assert world.loads()["snapshot"] == 2
    assert world.image(world.w1) == world.image(world.driver)


def test_a_changed_worker_copy_is_not_trusted(world: World):
    world.job(world.w1, count("a", 1))
    with inside(world.mp, world.w1) as p:  # something else in the worker writes to the copy
        state = p.new_state(NS, {})
        state.put("stray", 1)
        state.commit()
    world.job(world.w1, commit(1))
    assert world.loads()["snapshot"] == 2
    assert world.image(world.w1) == world.image(world.driver)


def test_the_snapshot_is_made_again_when_deltas_outgrow_it(monkeypatch: pytest.MonkeyPatch):
    world = World(monkeypatch, max_deltas=2)
    world.job(world.w1, count("a", 1))
    world.job(world.w1, commit(1))
    world.job(world.w1, count("a", 2))  # three deltas after this job
    old = list(world.sc.made)
    shipped = world.ship()[NS]
    assert world.shipper.snapshots == 2 and (shipped.base, shipped.version) == (3, 3)
    assert shipped.deltas == () and shipped.base_digest is not None
    # The old broadcasts may still be read by the job running now: destroyed one job later.
    assert not any(b.destroyed for b in old)
    world.apply(world.task(world.w1, {NS: shipped}, commit(2)))
    world.job(world.w1, count("a", 3))
    assert all(b.destroyed for b in old)
    # w1's copy was the new snapshot's version (its own last log): current, no reload.
    assert world.loads() == {"snapshot": 1, "current": 4}
    world.job(world.w2, commit(3))
    assert world.image(world.w2) == world.image(world.driver)


def test_the_snapshot_is_made_again_when_deltas_weigh_more(world: World):
    big = {f"k{i}": i for i in range(500)}  # far more than the 50 seeded keys

    def write_big(state: Any) -> None:
        for k, v in big.items():
            state.put(k, v)
        state.prepare_commit(1)

    world.job(world.w1, write_big)
    shipped = world.ship()[NS]
    assert world.shipper.snapshots == 2 and shipped.deltas == ()


def test_close_destroys_everything_and_ships_whole_images_after(world: World):
    world.job(world.w1, count("a", 1))
    world.ship()
    world.shipper.close()
    assert world.sc.made and all(b.destroyed for b in world.sc.made)
    shipped = world.ship()
    assert isinstance(shipped[NS], bytes)
    world.apply(world.task(world.w2, shipped, commit(1)))
    assert world.image(world.w2) == world.image(world.driver)


class BytesOnly(DriverOwnedStateProvider):
    """A provider with the abstract methods only (as an extlib one may be): no marks."""

    def __init__(self) -> None:
        self.inner = InMemoryKeyValueStateProvider()

    def new_state(self, namespace: str, conf: Any, context: Any = None) -> Any:
        return self.inner.new_state(namespace, conf, context)

    def export_image(self, namespace: str) -> bytes:
        return self.inner.export_image(namespace)

    def import_image(self, namespace: str, image: bytes) -> None:
        self.inner.import_image(namespace, image)

    def take_changes(self, namespace: str) -> bytes | None:
        return self.inner.take_changes(namespace)

    def apply_changes(self, namespace: str, changes: bytes) -> None:
        self.inner.apply_changes(namespace, changes)


def test_a_provider_without_marks_gets_whole_images(world: World):
    sc = FakeContext()
    with inside(world.mp, world.driver):
        shipper = ImageShipper(sc, BytesOnly())
        shipped = shipper.ship([NS])
    assert isinstance(shipped[NS], bytes) and sc.made == []
    with inside(world.mp, world.w1):
        provider = BytesOnly()
        install_images(provider, ROOT, shipped)
        state = provider.new_state(NS, {})
        state.put("a", 1)
        state.commit()
        changes = provider.end_task(ROOT, [NS])
        finish_images(provider, shipped, changes)
    assert world.w1.held == {}
    with inside(world.mp, world.driver):
        shipper.apply_changes(NS, changes[NS])
    assert world.image(world.w1) == world.image(world.driver)


def test_logs_of_namespaces_never_shipped_are_applied_then_shipped_with_a_line(world: World):
    other, worker = "topo/other-0", Process()
    with inside(world.mp, worker) as p:  # a committer's first map: made by the task
        p.begin_task(other, {})
        state = p.new_state(other, {})
        state.put("x", 1)
        state.commit()
        changes = p.end_task(other)
    world.apply(changes)
    with inside(world.mp, world.driver) as p:
        assert p.new_state(other, {}).get("x") == 1
        shipped = world.shipper.ship([other])[other]
    assert isinstance(shipped, ShippedImage) and shipped.version == 0


def test_a_log_that_fails_to_apply_puts_the_image_in_doubt(world: World):
    import msgpack

    from providers import StateTransactionError

    world.job(world.w1, count("a", 1))
    token = world.ship()[NS].token
    with pytest.raises(StateTransactionError):
        world.apply({NS: msgpack.packb([["commit_writes", {}], ["explode"]])})
    assert world.ship()[NS].token != token


def test_a_small_line_travels_inline_and_a_large_one_by_broadcast(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The seeded image (50 keys) and a few deltas fit the budget: bytes in the descriptor, no
    # broadcast made; warm and cold workers read them as they read broadcasts.
    world = World(monkeypatch, inline_bytes=64 * 1024)
    first = world.job(world.w1, count("a", 1))
    world.job(world.w1, commit(1))
    last = world.job(world.w2, count("b", 2))[NS]
    assert world.sc.made == []
    assert isinstance(first[NS].snapshot, bytes)
    assert last.deltas and all(isinstance(d.changes, bytes) for d in last.deltas)
    assert world.loads() == {"snapshot": 2, "current": 1}
    world.job(world.w1, commit(2))
    assert world.loads()["caught-up"] == 1
    assert world.image(world.w1) == world.image(world.driver)

    # An image too large for the budget goes by broadcast.
    small = World(monkeypatch, inline_bytes=len(world.image(world.driver)) // 2)
    shipped = small.job(small.w1, count("a", 1))[NS]
    assert not isinstance(shipped.snapshot, bytes)
    assert small.sc.made == [shipped.snapshot]


def test_a_small_line_that_fills_its_budget_is_snapshotted_again_not_broadcast(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The seeded image leaves the budget room for about one delta: every later delta would be a
    # broadcast. The line exports its small image again instead, so jobs carry bytes only, and
    # workers warm, behind or cold still end at the driver's image.
    probe = World(monkeypatch)
    budget = len(probe.image(probe.driver)) + 80  # the image grows 8 bytes a txid here
    world = World(monkeypatch, inline_bytes=budget)
    shipped = []
    for txid in range(1, 5):
        shipped.append(world.job(world.w1, count(f"k{txid}", txid))[NS])
        shipped.append(world.job(world.w1, commit(txid))[NS])
    world.job(world.w2, count("late", 5))  # w2 held nothing: it loads the newest snapshot
    assert world.image(world.w2) == world.image(world.driver)
    world.job(world.w1, commit(5))  # w1 is behind by w2's log: it catches up or reloads
    assert world.image(world.w1) == world.image(world.driver)
    assert world.sc.made == []
    assert all(isinstance(s.snapshot, bytes) for s in shipped)
    assert world.shipper.snapshots >= 3
    last = world.ship()[NS]
    assert sum(len(d.changes) for d in last.deltas) + len(last.snapshot) <= budget


@pytest.mark.parametrize("seed", env_seeds("STATEFULBOLTS_IMAGE_SEEDS", "0-29"))
def test_random_jobs_failures_and_budgets_leave_every_worker_at_the_drivers_image(
    monkeypatch: pytest.MonkeyPatch, seed: int
) -> None:
    # Any budget (nothing inline, about the seeded image, everything inline), any cap on the
    # deltas; each step a job on either worker that the driver applies, one it does not (failed
    # elsewhere), a task that raises, or a retry on the other worker. A worker that ran the last
    # applied job holds the driver's image; in the end each, given one more job, holds it too.
    import random

    rng = random.Random(seed)
    probe = World(monkeypatch)
    seeded = len(probe.image(probe.driver))
    budget = rng.choice([0, seeded // 2, seeded + 40, seeded + 200, 64 * 1024])
    world = World(monkeypatch, max_deltas=rng.choice([1, 3, 256]), inline_bytes=budget)
    workers = [world.w1, world.w2]
    committed = 0  # the driver's last committed txid: a failed txid is tried again
    for step in range(40):
        worker, other = rng.sample(workers, 2)
        txid = committed + 1
        write = count(f"k{rng.randrange(30)}", txid)
        how = rng.random()
        if how < 0.15:  # failed elsewhere: the task ended cleanly, the driver applies nothing
            world.task(worker, world.ship(), write)
        elif how < 0.25:  # the task raises after writing: its worker's copy is in doubt
            with inside(world.mp, worker) as p, pytest.raises(RuntimeError):
                install_images(p, ROOT, world.ship())
                write(p.new_state(NS, {}))
                raise RuntimeError(f"step {step}")
        elif how < 0.35:  # a lost attempt, then the retry the driver takes, elsewhere
            shipped = world.ship()
            world.task(worker, shipped, count("lost", txid))
            world.apply(world.task(other, shipped, write))
            assert world.image(other) == world.image(world.driver), (seed, step)
            world.job(other, commit(txid))
            committed = txid
        else:
            world.job(worker, write)
            assert world.image(worker) == world.image(world.driver), (seed, step)
            world.job(rng.choice(workers), commit(txid))
            committed = txid
    for worker in workers:
        world.job(worker, nothing)
        assert world.image(worker) == world.image(world.driver), seed
    if budget >= 64 * 1024:
        assert world.sc.made == []  # everything fit inline: not one broadcast
