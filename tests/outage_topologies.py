"""Topologies and Redis helpers for the outage and cluster tests.

Imported by the test process, by ``tests/cluster_driver.py`` and (because the topology is
cloudpickled by reference) by Spark's Python workers, so it needs ``tests/`` on their path: the
library ships the driver's ``sys.path`` to local workers, and the cluster driver sets
``spark.executorEnv.PYTHONPATH``.

Every Redis assertion reads Redis itself: Storm's layout (``ns``, ``ns$prepare``, ``ns$txid``),
values decoded by hand from the documented envelope, msgpack ``[1, msgpack(value)]``.
"""

from __future__ import annotations

import collections
import json
import os
from collections.abc import Mapping
from typing import Any

import msgpack

from examples.corpus import sentence
from examples.wordcount import SplitSentence, WordCount
from statefulbolts import Fields, Spout, StormTopology, TopologyBuilder

PROVIDER = "providers.redis.RedisKeyValueStateProvider"
CHECKPOINT = "$checkpointspout-0"


class BurstSentenceSpout(Spout):
    """Emits ``count`` sentences in bursts of ``burst``, the next only when the last is settled.

    Acks come after COMMIT, so each burst is a checkpoint transaction of its own and a run spans
    about ``count / burst`` transactions. A burst is emitted in one ``next_tuple`` call, right
    after the previous one was acked, so the topology is never idle before the spout is done.
    Failed sentences are replayed in the next burst, as the word count's spout does.
    """

    def __init__(self, count: int, burst: int) -> None:
        self.count = count
        self.burst = burst

    def open(self, conf: Mapping[str, Any], context: Any, collector: Any) -> None:
        """Start at sentence 0 with nothing in flight."""
        self.collector = collector
        self.next_index = 0
        self.live = 0
        self.replay: collections.deque[int] = collections.deque()

    def next_tuple(self) -> None:
        """Emit the next burst (replays first) once nothing of the last one is in flight."""
        if self.live:
            return
        for _ in range(self.burst):
            if self.replay:
                i = self.replay.popleft()
            elif self.next_index < self.count:
                i = self.next_index
                self.next_index += 1
            else:
                return
            self.live += 1
            self.collector.emit([sentence(i)], message_id=i)

    def ack(self, msg_id: Any) -> None:
        """One fewer in flight."""
        self.live -= 1

    def fail(self, msg_id: Any) -> None:
        """Replay ``msg_id`` in the next burst."""
        self.live -= 1
        self.replay.append(msg_id)

    def declare_output_fields(self, declarer: Any) -> None:
        """One field: ``sentence``."""
        declarer.declare(Fields("sentence"))


def burst_wordcount(sentences: int, burst: int, counter: Any = None) -> StormTopology:
    """The word count (``examples.wordcount``) fed in bursts; ``counter`` replaces its counter."""
    builder = TopologyBuilder()
    builder.set_spout("sentences", BurstSentenceSpout(sentences, burst), 1)
    builder.set_bolt("split", SplitSentence(), 2).shuffle_grouping("sentences")
    builder.set_bolt("count", counter or WordCount(), 2).fields_grouping("split", Fields("word"))
    return builder.create_topology()


def redis_conf(port: int, **extra: Any) -> dict[str, Any]:
    """Topology config with Redis state on ``127.0.0.1:port`` (plus ``extra`` keys)."""
    pool = {"jedisPoolConfig": {"host": "127.0.0.1", "port": port, "timeout": 2000}}
    return {
        "topology.state.provider": PROVIDER,
        "topology.state.provider.config": json.dumps(pool),
        "topology.state.checkpoint.interval.ms": 100,
        **extra,
    }


def decode_hash(raw: Mapping[bytes, bytes]) -> dict[Any, Any]:
    """A committed hash as ``{key: value}``: msgpack keys, ``[1, payload]`` envelopes."""
    decoded: dict[Any, Any] = {}
    for name, envelope in raw.items():
        tag, payload = msgpack.unpackb(envelope, raw=False)
        assert tag == 1, f"field {name!r} holds a tombstone or an unknown tag {tag!r}"
        decoded[msgpack.unpackb(name, raw=False)] = msgpack.unpackb(payload, raw=False)
    return decoded


def counts_in_redis(client: Any, name: str, parallelism: int = 2) -> dict[str, int]:
    """The committed counts of every ``count`` task, merged; asserts each word is in one task."""
    merged: dict[str, int] = {}
    for task in range(parallelism):
        part = decode_hash(client.hgetall(f"{name}/count-{task}"))
        assert not set(part) & set(merged), "fields grouping put a word in two tasks"
        merged.update(part)
    return merged


def checkpoint_state(client: Any, name: str) -> list[Any]:
    """The checkpoint spout's saved ``[txid, phase]``."""
    return decode_hash(client.hgetall(f"{name}/{CHECKPOINT}"))["__state"]


def snapshot(client: Any, name: str) -> dict[bytes, dict[bytes, bytes]]:
    """Every hash of topology ``name``, raw, by key."""
    return {key: client.hgetall(key) for key in sorted(client.keys(f"{name}/*"))}


class ShutdownRedisOnPrepare(WordCount):
    """The word count's counter, which shuts Redis down in ``pre_prepare(txid)``, once.

    The shutdown lands inside the PREPARE job, between the tasks' prepares: this task's
    ``prepare_commit`` then fails, while the other task may already have prepared. Only the first
    task attempt to create ``marker`` sends ``SHUTDOWN`` (append-only data is fsynced on it).
    """

    def __init__(self, txid: int, port: int, marker: str) -> None:
        self.at_txid = txid
        self.port = port
        self.marker = marker

    def pre_prepare(self, txid: int) -> None:
        """Shut Redis down if this is the chosen txid and nobody did it before."""
        if txid != self.at_txid:
            return
        try:
            os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        import redis
        from redis.backoff import NoBackoff
        from redis.retry import Retry

        # No retries: redis-py would resend SHUTDOWN on the lost connection, and a retry that
        # lands after the restart would take the new server down too.
        client = redis.Redis(host="127.0.0.1", port=self.port, retry=Retry(NoBackoff(), 0))
        try:
            client.shutdown()
        finally:
            client.close()
