"""``Sink.stage_batch`` gives what ``Sink.stage`` gives tuple by tuple, for every built-in sink.

The sink bolts stage each column batch the runtime hands them with ``stage_batch``; the
built-in sinks make it from the batch's columns. Each case below is a sink and a batch whose
columns take the fast ways (a column of one plain type) and the slow ones (``None`` in a
column, mixed types, a mapper), and the batch's records must be the per-tuple records, in
order. No server: staging connects to nothing.
"""

from __future__ import annotations

import datetime
import decimal
from collections.abc import Callable
from typing import Any

import pytest
from sink_fixtures import MemorySink

from statefulbolts import Fields
from statefulbolts.components import BasicBoltExecutor
from statefulbolts.connectors.files import FileSink
from statefulbolts.connectors.kafka import KafkaSink, ProducerRecord
from statefulbolts.connectors.postgres import PostgresSink
from statefulbolts.connectors.redis import HSet, RedisSink
from statefulbolts.connectors.sinks import AtLeastOnceSinkBolt, Sink
from statefulbolts.testing import RecordingCollector, make_context
from statefulbolts.tuples import ColumnBatch

WORDS = ["storm", "spark", 'é\n"q"', "storm"]


def _kafka_record(tuple_: Any) -> ProducerRecord | None:
    word, count = tuple_.values
    return None if count == 0 else ProducerRecord({"n": count}, key=word, headers=[("h", "v")])


def _redis_record(tuple_: Any) -> HSet:
    word, count = tuple_.values
    return HSet("counts", word, count)


def _by_task(sink: KafkaSink) -> KafkaSink:
    sink.open({"topology.name": "batches", "sink.kafka.partitioning": "task"}, None)  # type: ignore[arg-type]
    sink._task, sink._partitions = 3, {"counts": 2, "other": 4}
    return sink


def _opened(sink: Any) -> Any:
    sink.open({"topology.name": "batches"}, None)
    return sink


def _files(fmt: str) -> Callable[[Any], Sink]:
    return lambda tmp: _opened(FileSink(str(tmp), format=fmt, fields=["word", "count"]))


CASES: dict[str, tuple[Callable[[Any], Sink], tuple[str, ...], list[list[Any]]]] = {
    "kafka json ints": (
        lambda _: KafkaSink("counts", key="word", value="count", value_serializer="json"),
        ("word", "count"),
        [[w, n] for n, w in enumerate(WORDS)] + [["big", 10**30], ["neg", -7]],
    ),
    "kafka json mixed, a None": (
        lambda _: KafkaSink("counts", key="word", value="count", value_serializer="json"),
        ("word", "count"),
        [["a", 1], ["b", "x"], ["c", {"n": [1, 2.5]}], ["d", None], ["e", True]],
    ),
    "kafka json strs": (
        lambda _: KafkaSink("counts", value="word", value_serializer="json"),
        ("word",),
        [[w] for w in WORDS],
    ),
    "kafka str, a None key": (
        lambda _: KafkaSink("counts", key="word", value="text"),
        ("word", "text"),
        [["a", "x"], [None, "y"], ["c", "z"]],
    ),
    "kafka msgpack and bytes": (
        lambda _: KafkaSink(
            "counts", key="k", value="v", key_serializer="bytes", value_serializer="msgpack"
        ),  # fmt: skip
        ("k", "v"),
        [[b"a", [1, "x"]], [b"b", {"y": 2}]],
    ),
    "kafka topic field": (
        lambda _: KafkaSink("counts", topic_field="to", value="v"),
        ("to", "v"),
        [["other", "x"], [None, "y"], ["", "z"]],
    ),
    "kafka headers field": (
        lambda _: KafkaSink("counts", headers_field="hs", value="v"),
        ("hs", "v"),
        [[[("a", "b"), ("raw", b"\x00")], "x"], [[], "y"]],
    ),
    "kafka by task": (
        lambda _: _by_task(KafkaSink("counts", key="word", value="word")),
        ("word",),
        [[w] for w in WORDS],
    ),
    "kafka by task, topic field": (
        lambda _: _by_task(KafkaSink("counts", topic_field="to", value="v")),
        ("to", "v"),
        [["other", "x"], ["counts", "y"]],
    ),
    "kafka partition field": (
        lambda _: KafkaSink("counts", partition_field="p", value="v"),
        ("p", "v"),
        [[0, "x"], [None, "y"], [3, "z"]],
    ),
    "kafka mapper": (
        lambda _: KafkaSink("counts", mapper=_kafka_record, value_serializer="json"),
        ("word", "count"),
        [["a", 1], ["b", 0], ["c", 2]],
    ),
    "postgres plain": (
        lambda _: PostgresSink("counts", columns=("word", "count"), dsn="postgresql://x@h/db"),
        ("word", "count"),
        [[w, n] for n, w in enumerate(WORDS)] + [[None, 2**63 - 1], ["f", 1.5]],
    ),
    "postgres converted": (
        lambda _: PostgresSink("counts", columns=("word", "count"), dsn="postgresql://x@h/db"),
        ("count", "word"),
        [
            [2**70, "big"],
            [decimal.Decimal("1.5"), datetime.date(2026, 1, 2)],
            [[1, 2], {"a": [1]}],
            [True, b"raw"],
        ],
    ),
    "redis mapper": (
        lambda _: RedisSink(mapper=_redis_record),
        ("word", "count"),
        [["a", 1], ["b", 2]],
    ),
    "files jsonl": (_files("jsonl"), ("word", "count"), [["a", 1], ["é", None], ["c", 1.5]]),
    "files csv": (_files("csv"), ("word", "count"), [["a", 1], ["b", True], ["c", None]]),
    "files parquet": (_files("parquet"), ("word", "count"), [["a", 1], [b"b", 2.5]]),
    "files, the tuple's fields": (
        lambda tmp: _opened(FileSink(str(tmp), format="jsonl")),
        ("count", "word"),
        [[1, "a"], [2, "b"]],
    ),
    "a sink with stage only": (lambda _: MemorySink("batches"), ("word",), [[w] for w in WORDS]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_batch_is_staged_as_its_tuples_are(case: str, tmp_path: Any) -> None:
    make, fields, rows = CASES[case]
    sink = make(tmp_path)
    batch = ColumnBatch(rows, Fields(*fields), "count", 3)
    one_by_one = [sink.stage(t) for t in batch.tuples()]
    # Rows, or columns (``StagedColumns``) that are a sequence of the same rows.
    assert list(sink.stage_batch(batch)) == [r for r in one_by_one if r is not None]


def test_a_one_field_batch_and_an_empty_one_are_staged_as_their_tuples_are() -> None:
    sink = KafkaSink("counts", value="word")
    single = ColumnBatch(WORDS, Fields("word"), "count", 3, single=True)
    assert list(sink.stage_batch(single)) == [sink.stage(t) for t in single.tuples()]
    assert list(sink.stage_batch(ColumnBatch([], Fields("word"), "count", 3))) == []


@pytest.mark.parametrize(
    ("sink", "fields", "rows"),
    [
        (KafkaSink("counts", key="word", value="count"), ("word", "count"), [["a", "1"], ["b", 2]]),
        (KafkaSink("counts", key="nope", value="count"), ("word", "count"), [["a", "1"]]),
        (PostgresSink("t", columns=("word",), dsn="postgresql://x@h/db"), ("word",), [[object()]]),
        (FileSink("/nowhere", format="csv"), ("word",), [[object()]]),
    ],
)
def test_a_batch_with_a_tuple_stage_refuses_raises_for_the_runtime_to_name_it(
    sink: Sink, fields: tuple[str, ...], rows: list[list[Any]]
) -> None:
    # The runtime then runs the batch through ``execute`` tuple by tuple, whose error names
    # the tuple (``runtime._columns``); the batch path must not stage around it.
    batch = ColumnBatch(rows, Fields(*fields), "count", 3)
    with pytest.raises(Exception):  # noqa: B017, PT011 - any error: the per-tuple path names it
        sink.stage_batch(batch)
    with pytest.raises(Exception):  # noqa: B017, PT011 - and stage refuses the tuple too
        [sink.stage(t) for t in batch.tuples()]


class _Counting(MemorySink):
    """A sink that counts its per-tuple and per-batch calls."""

    calls: list[str]

    def stage(self, tuple_: Any) -> Any:
        self.calls.append("stage")
        return super().stage(tuple_)

    def stage_batch(self, batch: ColumnBatch) -> list[Any]:
        self.calls.append(f"stage_batch {len(batch)}")
        return [[v] for v in batch.column(0)]


def test_the_at_least_once_bolt_stages_a_batch_in_one_call() -> None:
    sink = _Counting("batches-alo")
    sink.calls = []
    bolt = BasicBoltExecutor(AtLeastOnceSinkBolt(sink))
    bolt.prepare(
        {}, make_context("publish", stateful=False, checkpointed=True), RecordingCollector()
    )
    bolt.execute_batch(ColumnBatch([["b"], ["c"]], Fields("value"), "words", 1))
    assert sink.calls == ["stage_batch 2"]
