"""``ExactlyOnceSinkBolt`` over ``RedisSink`` and ``FileSink``, driven through the protocol's
task steps without Spark, with crashes put where a killed driver or worker leaves them.

Each "task" is a ``checkpoint.CheckpointTask`` made, fed and finished as the runtime does for
one transaction (a fresh bolt and state each time, the in-memory provider's store shared by
namespace), writing to a real redis-server or a real directory. The scenarios are the kill
points of ``docs/sinks.md`` as a sink task meets them: a driver killed after PREPARE (the
transaction rolls back and is replayed), after COMMITTING is saved (every lane publishes on
the recovery's COMMIT), in the middle of the COMMIT (the lanes that published skip), inside a
publish step (Redis: the script ran and its reply was lost; files: the parts renamed, the
manifest entry not written), and a Spark retry of a COMMIT task. After each the target holds
every word's records once, asserted exactly.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import pytest

from checkpoint import Action, CheckpointTask
from providers import KeyValueState, StateFactory
from providers.memory import InMemoryKeyValueStateProvider
from statefulbolts import Fields, Spout, TopologyBuilder
from statefulbolts.connectors.files import FileSink, read_committed_records
from statefulbolts.connectors.redis import HIncrBy, RedisSink, XAdd
from statefulbolts.connectors.sinks import ExactlyOnceSinkBolt, Sink, SinkPublishError
from statefulbolts.context import TopologyContext
from statefulbolts.testing import RecordingCollector, checkpoint_barrier, make_tuple
from statefulbolts.topology import StormTopology

_names = itertools.count()


class Info(NamedTuple):
    component: str
    task: int
    attempt: int = 0


class Words(Spout):
    def next_tuple(self) -> None:
        """Never called: the tests feed the sink themselves."""

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("value"))


def to_redis(tuple_: Any) -> list[Any]:
    word = tuple_.values[0]
    return [XAdd("log", {"word": word}), HIncrBy("counts", word, 1)]


class Target:
    """A sink, a faulty sink of the same target, and what the target holds."""

    def __init__(self, kind: str, tmp_path: Path, redis: Any) -> None:
        self.kind = kind
        self.prefix = f"bolt-{next(_names)}:"
        self.path = tmp_path / "out"
        self.redis = redis

    def conf(self) -> dict[str, Any]:
        if self.kind == "redis":
            return {"sink.redis.url": self.redis.url, "sink.redis.key.prefix": self.prefix}
        return {"sink.files.path": str(self.path)}

    def sink(self, faulty: bool = False) -> Sink:
        if self.kind == "redis":
            return (ReplyLost if faulty else RedisSink)(to_redis)
        return (DiesBeforeEntry if faulty else FileSink)()

    def words(self) -> list[str]:
        """The records the target holds, in the order a reader gets them."""
        if self.kind == "redis":
            client = self.redis.client()
            log = [e[b"word"].decode() for _, e in client.xrange(self.prefix + "log")]
            counts = {k.decode(): int(v) for k, v in client.hgetall(self.prefix + "counts").items()}
            assert counts == {w: log.count(w) for w in set(log)}  # HINCRBY once per record
            return log
        return [row["value"] for row in read_committed_records(self.path)]


class ReplyLost(RedisSink):
    """The script runs; then the connection drops before its reply (a worker killed there)."""

    def _run(self, keys: Any, args: Any) -> Any:
        super()._run(keys, args)
        msg = "injected: the worker died after the script, before its reply"
        raise SinkPublishError(msg)


class DiesBeforeEntry(FileSink):
    """The parts are renamed into place; the worker dies before the manifest entry."""

    def _commit(self, root: str, entry: Any) -> bool:
        msg = "injected: the worker died after the parts, before the entry"
        raise SinkPublishError(msg)


class Run:
    """One topology name and its sink tasks, run by hand."""

    def __init__(self, target: Target, parallelism: int = 1) -> None:
        self.target = target
        self.name = f"sinktargets-{next(_names)}"
        self.parallelism = parallelism
        self.conf: dict[str, Any] = {"topology.name": self.name, **target.conf()}

    def topology(self, sink: Sink) -> StormTopology:
        builder = TopologyBuilder()
        builder.set_spout("words", Words(), 1)
        builder.set_bolt("publish", ExactlyOnceSinkBolt(sink), self.parallelism).fields_grouping(
            "words", Fields("value")
        )
        return builder.create_topology()

    def task(
        self,
        action: Action,
        txid: int,
        values: Sequence[str] = (),
        *,
        task: int = 0,
        attempt: int = 0,
        faulty: bool = False,
    ) -> None:
        """One task of ``publish`` through ``action(txid)``; a step's error is raised here."""
        topology = self.topology(self.target.sink(faulty))
        spec = topology.component("publish")
        context = TopologyContext(topology, self.name, "publish", task)
        step = CheckpointTask(spec, action, txid, Info("publish", task, attempt))
        out = RecordingCollector()
        feed = step.prepare(self.conf, context, out)
        for v in values:
            feed(make_tuple([v], fields=["value"], component="words"))
        for cp in checkpoint_barrier(context, action.value, txid):
            step.control(cp)
        step.finish()
        step.cleanup()
        if out.errors:  # the task failed its checkpoint, as the runtime would see it
            raise out.errors[0]


# The mark on the parameter, not applied in the fixture: ``-m "not redis"`` deselects before
# any fixture runs.
@pytest.fixture(params=[pytest.param("redis", marks=pytest.mark.redis), "files"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    redis = request.getfixturevalue("redis_server") if request.param == "redis" else None
    yield Target(request.param, tmp_path, redis)
    InMemoryKeyValueStateProvider.drop("sinktargets-")


def test_records_reach_the_target_at_commit_only(target: Target) -> None:
    run = Run(target)
    run.task(Action.PREPARE, 0, ["a", "b"])
    assert target.words() == []
    run.task(Action.COMMIT, 0)
    assert target.words() == ["a", "b"]


def test_killed_after_prepare_the_rollback_drops_the_records_and_the_replay_commits(
    target: Target,
) -> None:
    run = Run(target)
    run.task(Action.PREPARE, 0, ["lost"])
    run.task(Action.ROLLBACK, 0)  # the restarted driver's recovery of PREPARING(0)
    run.task(Action.PREPARE, 0, ["kept"])
    run.task(Action.COMMIT, 0)
    assert target.words() == ["kept"]


def test_killed_after_committing_saved_the_recovery_s_commit_publishes_once(
    target: Target,
) -> None:
    run = Run(target)
    run.task(Action.PREPARE, 0, ["a"])
    run.task(Action.COMMIT, 0)  # the recovery of COMMITTING(0) ...
    run.task(Action.COMMIT, 0)  # ... killed in turn, and recovered again
    run.task(Action.COMMIT, 0, attempt=1)  # and a Spark retry of the task
    run.task(Action.PREPARE, 1, ["b"])
    run.task(Action.COMMIT, 1)
    assert target.words() == ["a", "b"]


def test_killed_mid_commit_the_lanes_that_published_skip(target: Target) -> None:
    run = Run(target, parallelism=2)
    run.task(Action.PREPARE, 0, ["a", "c"], task=0)
    run.task(Action.PREPARE, 0, ["b"], task=1)
    run.task(Action.COMMIT, 0, task=0)  # one task published, then the driver died
    for t in (0, 1):  # the recovery's COMMIT(0) on every task
        run.task(Action.COMMIT, 0, task=t)
    assert sorted(target.words()) == ["a", "b", "c"]


@pytest.mark.parametrize("then", ["the same commit", "the next commit"])
def test_killed_inside_a_publish_step_the_next_publish_of_the_lane_completes_it(
    target: Target, then: str
) -> None:
    run = Run(target)
    run.task(Action.PREPARE, 0, ["a", "b"])
    with pytest.raises(SinkPublishError, match="injected: the worker died"):
        run.task(Action.COMMIT, 0, faulty=True)
    if target.kind == "redis":
        assert target.words() == ["a", "b"]  # the script ran whole: visible, once
    else:
        assert target.words() == []  # the parts are orphans: no entry lists them
    if then == "the same commit":
        run.task(Action.COMMIT, 0, attempt=1)
    else:  # committed without the hook (a start that changed the shape), then published
        state = StateFactory.get_state(f"{run.name}/publish-0", run.conf)
        assert isinstance(state, KeyValueState)
        state.commit(0)
        run.task(Action.PREPARE, 1, ["c"])
        run.task(Action.COMMIT, 1)
    expected = ["a", "b"] if then == "the same commit" else ["a", "b", "c"]
    assert target.words() == expected
