"""The user-facing classes of transactional topologies: contracts, defaults, errors, pickling."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import msgpack
import pytest
from pyspark import cloudpickle

from statefulbolts.components import OutputFieldsDeclarer
from statefulbolts.connectors import (
    OpaqueRedisStreamsTransactionalSpout,
    RedisStreamsTransactionalSpout,
)
from statefulbolts.errors import TopologyError
from statefulbolts.transactional._attempt import TransactionAttempt
from statefulbolts.transactional._bolts import (
    BaseTransactionalBolt,
    BatchBolt,
    BatchOutputCollector,
    Committer,
)
from statefulbolts.transactional._memory import (
    MemoryTransactionalSpout,
    OpaqueMemoryTransactionalSpout,
)
from statefulbolts.transactional._spouts import (
    OpaquePartitionedTransactionalSpout,
    PartitionedTransactionalSpout,
    TransactionalSpout,
)
from statefulbolts.tuples import DEFAULT_STREAM, Fields, Tuple

URL = "redis://127.0.0.1:6379/0"  # never contacted here


class Recorder(BatchOutputCollector):
    """Keeps every emit; tells each emit it went to task 7."""

    def __init__(self) -> None:
        self.emitted: list[tuple[str, list[Any]]] = []
        self.errors: list[BaseException] = []

    def emit(self, values: Sequence[Any], stream: str = DEFAULT_STREAM) -> list[int]:
        self.emitted.append((stream, list(values)))
        return [7]

    def report_error(self, error: BaseException) -> None:
        self.errors.append(error)


class CountBatch(BaseTransactionalBolt):
    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.collector, self.id, self.count = collector, id, 0

    def execute(self, tuple: Tuple) -> None:  # noqa: A002
        self.count += 1

    def finish_batch(self) -> None:
        self.targets = self.collector.emit([self.id, self.count])

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("id", "count"))


class SumCommitter(BaseTransactionalBolt, Committer):
    def prepare(self, conf: Any, context: Any, collector: Any, id: Any) -> None:  # noqa: A002
        self.id = id

    def execute(self, tuple: Tuple) -> None:  # noqa: A002
        pass

    def finish_batch(self) -> None:
        pass


class Sentences(TransactionalSpout):
    """A plain transactional spout: meta ``[start, end)`` of a numbered sequence."""

    class Coordinator(TransactionalSpout.Coordinator):
        def initialize_transaction(self, txid: int, prev_metadata: Any) -> Any:
            start = 0 if prev_metadata is None else prev_metadata[1]
            return [start, start + 2]

    class Emitter(TransactionalSpout.Emitter):
        def emit_batch(self, tx: Any, coordinator_meta: Any, collector: Any) -> None:
            for n in range(*coordinator_meta):
                collector.emit([tx, n])

    def get_coordinator(self, conf: Any, context: Any) -> Any:
        return Sentences.Coordinator()

    def get_emitter(self, conf: Any, context: Any) -> Any:
        return Sentences.Emitter()

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        declarer.declare(Fields("tx", "n"))


def _declared(component: Any) -> list[str]:
    declarer = OutputFieldsDeclarer()
    component.declare_output_fields(declarer)
    return declarer.streams[DEFAULT_STREAM].to_list()


def _roundtrip(obj: Any) -> Any:
    return cloudpickle.loads(cloudpickle.dumps(obj))


# ----------------------------------------------------------------- bolts and collector
def test_a_batch_bolt_emits_the_attempt_first_and_gets_the_target_tasks() -> None:
    tx = TransactionAttempt(3, 11)
    bolt, collector = CountBatch(), Recorder()
    bolt.prepare({}, None, collector, tx)
    for word in ("a", "b"):
        bolt.execute(Tuple([tx, word], Fields("tx", "word"), "spout", 1))
    bolt.finish_batch()
    assert collector.emitted == [("default", [tx, 2])]
    assert bolt.targets == [7]
    assert _declared(bolt)[0] == "id"


def test_emit_direct_is_refused_naming_the_alternative() -> None:
    with pytest.raises(TopologyError) as info:
        Recorder().emit_direct(4, [TransactionAttempt(1, 1), "x"], stream="words")
    message = str(info.value)
    assert "direct grouping is not supported" in message
    assert "fields_grouping" in message
    assert "task=4" in message and "'words'" in message
    assert "Recorder" in message


@pytest.mark.parametrize(
    ("abc", "abstract"),
    [
        (BatchBolt, {"prepare", "execute", "finish_batch"}),
        (BaseTransactionalBolt, {"prepare", "execute", "finish_batch"}),
        (BatchOutputCollector, {"emit", "report_error"}),
        (TransactionalSpout, {"get_coordinator", "get_emitter", "declare_output_fields"}),
        (TransactionalSpout.Coordinator, {"initialize_transaction"}),
        (TransactionalSpout.Emitter, {"emit_batch"}),
        (PartitionedTransactionalSpout.Coordinator, {"num_partitions"}),
        (
            PartitionedTransactionalSpout.Emitter,
            {"emit_partition_batch_new", "emit_partition_batch"},
        ),
        (OpaquePartitionedTransactionalSpout.Coordinator, set()),
        (OpaquePartitionedTransactionalSpout.Emitter, {"emit_partition_batch", "num_partitions"}),
    ],
)
def test_what_a_subclass_must_implement(abc: type, abstract: set[str]) -> None:
    assert set(abc.__abstractmethods__) == abstract  # type: ignore[attr-defined]
    if abstract:
        with pytest.raises(TypeError, match="abstract"):
            abc()


def test_hook_defaults_are_ready_and_do_nothing() -> None:
    coordinators = [
        Sentences().get_coordinator({}, None),
        MemoryTransactionalSpout({0: []}, ["w"], 1).get_coordinator({}, None),
        OpaqueMemoryTransactionalSpout({0: []}, ["w"], 1).get_coordinator({}, None),
    ]
    for coordinator in coordinators:
        assert coordinator.is_ready() is True
        assert coordinator.close() is None
    emitter = Sentences().get_emitter({}, None)
    assert emitter.cleanup_before(5) is None
    assert emitter.close() is None
    assert Sentences().get_component_configuration() is None


def test_committer_is_a_marker_only() -> None:
    assert isinstance(SumCommitter(), Committer)
    assert isinstance(SumCommitter(), BatchBolt)
    assert not isinstance(CountBatch(), Committer)
    assert [n for n in vars(Committer) if not n.startswith("__")] == []


def test_a_plain_spout_chains_metas_and_emits_the_attempt_first() -> None:
    spout = Sentences()
    coordinator, emitter, collector = (
        spout.get_coordinator({}, None),
        spout.get_emitter({}, None),
        Recorder(),
    )
    meta1 = coordinator.initialize_transaction(1, None)
    meta2 = coordinator.initialize_transaction(2, meta1)
    emitter.emit_batch(TransactionAttempt(2, 5), meta2, collector)
    assert collector.emitted == [
        ("default", [TransactionAttempt(2, 5), 2]),
        ("default", [TransactionAttempt(2, 5), 3]),
    ]


# ----------------------------------------------------------------- spouts declare the attempt
@pytest.mark.parametrize(
    "spout",
    [
        MemoryTransactionalSpout({0: [["a", 1]]}, ["word", "n"], 2),
        OpaqueMemoryTransactionalSpout({0: [["a", 1]]}, ["word", "n"], 2),
        RedisStreamsTransactionalSpout(URL, ["s0"], ["word", "n"], 2),
        OpaqueRedisStreamsTransactionalSpout(URL, "s*", ["word", "n"], 2),
    ],
    ids=type,
)
def test_spouts_declare_their_tx_field_first(spout: Any) -> None:
    cls = type(spout)
    assert cls.TX_FIELD == f"{cls.__module__}.{cls.__qualname__}/id"
    assert _declared(spout) == [cls.TX_FIELD, "word", "n"]


def test_spout_kinds_are_the_abcs_the_runtime_dispatches_on() -> None:
    assert isinstance(MemoryTransactionalSpout({}, ["w"], 1), PartitionedTransactionalSpout)
    assert isinstance(
        OpaqueMemoryTransactionalSpout({}, ["w"], 1), OpaquePartitionedTransactionalSpout
    )
    assert isinstance(
        RedisStreamsTransactionalSpout(URL, ["s"], ["w"], 1), PartitionedTransactionalSpout
    )
    assert isinstance(
        OpaqueRedisStreamsTransactionalSpout(URL, ["s"], ["w"], 1),
        OpaquePartitionedTransactionalSpout,
    )
    assert not isinstance(MemoryTransactionalSpout({}, ["w"], 1), TransactionalSpout)


def test_a_memory_emitter_emits_the_attempt_first() -> None:
    tx = TransactionAttempt(1, 4)
    spout = MemoryTransactionalSpout({0: [["cat", 1], ["dog", 2]]}, ["word", "n"], 5)
    collector = Recorder()
    spout.get_emitter({}, None).emit_partition_batch_new(tx, collector, 0, None)
    assert collector.emitted == [("default", [tx, "cat", 1]), ("default", [tx, "dog", 2])]


# ----------------------------------------------------------------- metas and pickling
def test_metas_survive_msgpack() -> None:
    tx, collector = TransactionAttempt(1, 1), Recorder()
    memory = MemoryTransactionalSpout({0: [["a"], ["b"]]}, ["w"], 1).get_emitter({}, None)
    meta = memory.emit_partition_batch_new(tx, collector, 0, None)
    stored = msgpack.unpackb(msgpack.packb(meta))
    assert stored == [0, 1]
    assert memory.emit_partition_batch_new(tx, collector, 0, stored) == [1, 1]
    redis_meta = {"stream": "s", "first": "1-0", "last": "1-2", "count": 3}
    assert msgpack.unpackb(msgpack.packb(redis_meta)) == redis_meta


def test_every_class_pickles_with_cloudpickle() -> None:
    tx = TransactionAttempt(2, 9)
    assert _roundtrip(tx) == tx and str(_roundtrip(tx)) == "2:9"

    memory = MemoryTransactionalSpout({0: [["a"], ["b"], ["c"]]}, ["w"], 2)
    opaque = OpaqueMemoryTransactionalSpout([[["a"]], [["b"]]], ["w"], 2)
    opaque.set_disabled(1)
    redis_spout = RedisStreamsTransactionalSpout(URL, ["s0", "s1"], ["w"], 10)
    opaque_redis = OpaqueRedisStreamsTransactionalSpout(URL, "s*", ["w"], 10)
    objects: list[Any] = [
        CountBatch(),
        SumCommitter(),
        Recorder(),
        Sentences(),
        Sentences().get_coordinator({}, None),
        Sentences().get_emitter({}, None),
    ]
    for spout in (memory, opaque, redis_spout, opaque_redis):
        objects += [spout, spout.get_coordinator({}, None), spout.get_emitter({}, None)]
    for obj in objects:
        assert type(_roundtrip(obj)) is type(obj)

    # The copies behave as the originals: data, take, disabled partitions, settings.
    collector = Recorder()
    copy = _roundtrip(memory).get_emitter({}, None)
    assert copy.emit_partition_batch_new(tx, collector, 0, [0, 2]) == [2, 1]
    assert collector.emitted == [("default", [tx, "c"])]
    opaque_copy = _roundtrip(opaque).get_emitter({}, None)
    assert opaque_copy.emit_partition_batch(tx, collector, 1, None) is None
    assert _roundtrip(redis_spout).get_coordinator({}, None).num_partitions() == 2
    assert _roundtrip(opaque_redis).registry_key == "statefulbolts:txstreams:s*"
    assert isinstance(_roundtrip(SumCommitter()), Committer)


def test_without_redis_py_the_redis_spouts_name_the_install_command(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)  # makes ``import redis`` fail
    with pytest.raises(ImportError, match=r"pip install 'statefulbolts\[redis\]'"):
        RedisStreamsTransactionalSpout(URL, ["s"], ["w"], 1)
    with pytest.raises(ImportError, match=r"pip install 'statefulbolts\[redis\]'"):
        OpaqueRedisStreamsTransactionalSpout(URL, "s*", ["w"], 1)


def test_reprs_name_the_settings() -> None:
    memory = MemoryTransactionalSpout({0: [["a"]], 1: []}, ["w"], 2)
    assert repr(memory) == (
        "MemoryTransactionalSpout(rows per partition={0: 1, 1: 0}, fields=['w'], take_per_batch=2)"
    )
    assert repr(OpaqueRedisStreamsTransactionalSpout(URL, "s*", ["w"], 3)) == (
        f"OpaqueRedisStreamsTransactionalSpout(url={URL!r}, partitions='s*', fields=['w'], "
        "take_per_batch=3)"
    )
