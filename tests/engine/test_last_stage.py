"""A job's stages made in the JVM with few calls, and the job run (``_pyrdd.PythonStages``).

They must give what PySpark's ``mapPartitionsWithIndex``, ``partitionBy`` and ``collect``
give, fall back to them where PySpark has more to do (a command to broadcast, a broadcast
variable), and pay fewer py4j round trips per job than they do: the calls are counted, not
timed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from statefulbolts import Fields, Spout
from statefulbolts.runtime._pyrdd import PythonStages

pytestmark = pytest.mark.spark


def _tagged(split: int, items: Any) -> list[Any]:
    return [(split, item) for item in items]


def _doubled(split: int, items: Any) -> list[Any]:
    return [(split, item * 2) for _, item in items]


def _by_three(split: int, items: Any) -> list[Any]:
    return [(item % 3, (split, item)) for item in items]


def _gathered(split: int, pairs: Any) -> list[Any]:
    return [(split, sorted(value for _, value in pairs))]


class _Quiet(Spout):
    """A spout that emits nothing: a topology to make engines of."""

    def next_tuple(self) -> None:
        pass

    def declare_output_fields(self, declarer: Any) -> None:
        declarer.declare(Fields("word"))


def _slot(key: int) -> int:
    return key


class _Calls:
    """The py4j commands this thread sends, by kind (``c`` call, ``i`` constructor, ...)."""

    def __init__(self) -> None:
        self.kinds: list[str] = []


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> Iterator[_Calls]:
    from py4j.clientserver import ClientServerConnection

    seen = _Calls()
    me = threading.get_ident()
    send = ClientServerConnection.send_command

    def counted(self: Any, command: str) -> Any:
        if threading.get_ident() == me and command[:1] != "m":  # not the releases of objects
            seen.kinds.append(command[:1])
        return send(self, command)

    monkeypatch.setattr(ClientServerConnection, "send_command", counted)
    yield seen


def test_it_gives_what_pyspark_s_collect_gives(spark: Any) -> None:
    sc = spark.sparkContext
    source = sc.parallelize(range(20), 4)
    stage = PythonStages(sc)

    def fn(split: int, items: Any) -> Any:  # two functions in one partition, as a job's
        return _doubled(split, _tagged(split, items))

    got = stage.collect(stage.build(source, 4, fn))
    assert got == source.mapPartitionsWithIndex(fn).collect()
    assert got[:2] == [(0, 0), (0, 2)] and len(got) == 20
    assert stage.shortcuts == 1


def test_a_job_makes_less_than_half_of_pyspark_s_calls_into_the_jvm(
    spark: Any, calls: _Calls
) -> None:
    sc = spark.sparkContext
    source = sc.parallelize([(s, []) for s in range(2)], 2)
    stage = PythonStages(sc)
    for _ in range(2):  # the first build makes the Java copies of the environment
        stage.collect(stage.build(source, 2, _tagged))
    calls.kinds.clear()
    ours = stage.collect(stage.build(source, 2, _tagged))
    our_calls = len(calls.kinds)
    calls.kinds.clear()
    theirs = source.mapPartitionsWithIndex(_tagged).collect()
    assert ours == theirs
    assert our_calls * 2 < len(calls.kinds), (calls.kinds, our_calls)


def test_a_command_above_the_broadcast_threshold_takes_pyspark_s_path(spark: Any) -> None:
    sc = spark.sparkContext
    big = "x" * 4000

    def sized(split: int, items: Any) -> list[Any]:
        return [(split, len(big), item) for item in items]

    stage = PythonStages(sc, threshold=1000)
    source = sc.parallelize(range(4), 2)
    assert stage.collect(stage.build(source, 2, sized)) == [
        (0, 4000, 0),
        (0, 4000, 1),
        (1, 4000, 2),
        (1, 4000, 3),
    ]
    assert stage.shortcuts == 0


def test_a_function_that_reads_a_broadcast_takes_pyspark_s_path(spark: Any) -> None:
    sc = spark.sparkContext
    table = sc.broadcast({"a": 1, "b": 2})

    def looked_up(split: int, items: Any) -> list[Any]:
        return [table.value[item] for item in items]

    stage = PythonStages(sc)
    try:
        got = stage.collect(stage.build(sc.parallelize(["a", "b", "a"], 2), 2, looked_up))
    finally:
        table.destroy()
    assert got == [1, 2, 1]
    assert stage.shortcuts == 0


def test_the_java_copy_of_the_environment_follows_pyspark_s(spark: Any) -> None:
    sc = spark.sparkContext
    stage = PythonStages(sc)
    env, includes, _ = stage._java_env()
    assert stage._java_env()[0] is env  # kept from job to job
    sc.environment["SB_LAST_STAGE_TEST"] = "1"
    try:
        moved = stage._java_env()[0]
        assert moved is not env
        assert moved.get("SB_LAST_STAGE_TEST") == "1"
    finally:
        del sc.environment["SB_LAST_STAGE_TEST"]
    assert stage._java_env()[0].get("SB_LAST_STAGE_TEST") is None
    assert stage._java_env()[1] is includes


def test_a_shuffle_gives_what_pyspark_s_partition_by_gives(spark: Any) -> None:
    sc = spark.sparkContext
    source = sc.parallelize(range(20), 4)
    stages = PythonStages(sc)
    got = stages.collect(stages.build(stages.shuffle(source, _by_three, 3), 3, _gathered))
    theirs = source.mapPartitionsWithIndex(_by_three).partitionBy(3, _slot)
    assert got == theirs.mapPartitionsWithIndex(_gathered).collect()
    assert [split for split, _ in got] == [0, 1, 2]
    assert sorted(item for _, values in got for _, item in values) == list(range(20))
    assert all(item % 3 == split for split, values in got for _, item in values)
    # Twice over, as a job with two shuffles (and an acker's) has them; the second of as many
    # partitions as the first must move its pairs all the same.
    again = stages.shuffle(stages.shuffle(source, _by_three, 3), _rekeyed, 2)
    assert stages.collect(stages.build(again, 2, _gathered)) == [(0, [0, 2]), (1, [1])]
    rotated = stages.shuffle(stages.shuffle(source, _by_three, 3), _rotated, 3)
    assert stages.collect(stages.build(rotated, 3, _gathered)) == [(0, [2]), (1, [0]), (2, [1])]
    assert stages.shortcuts == 3


def _rotated(split: int, pairs: Any) -> list[Any]:
    """Partition ``split``'s pairs, counted, to the next partition of three."""
    return [((split + 1) % 3, split)] if list(pairs) else []


def _rekeyed(split: int, pairs: Any) -> list[Any]:
    return [(split % 2, split)] if list(pairs) else []


def test_a_shuffle_or_a_stage_after_it_too_large_to_send_inline_takes_pyspark_s_path(
    spark: Any,
) -> None:
    sc = spark.sparkContext
    big = "x" * 4000

    def sized_keys(split: int, items: Any) -> list[Any]:
        return [(item % 2, len(big) + item) for item in items]

    def sized_gather(split: int, pairs: Any) -> list[Any]:
        return [(split, len(big), sorted(value for _, value in pairs))]

    stages = PythonStages(sc, threshold=2000)
    source = sc.parallelize(range(6), 2)
    # A small shuffle made here and a large last stage by PySpark over it; then the other way.
    # Only the second's last stage runs here (``shortcuts`` counts the jobs run here).
    for keys, gather, shortcuts in ((_by_three, sized_gather, 0), (sized_keys, _gathered, 1)):
        ours = stages.collect(stages.build(stages.shuffle(source, keys, 2), 2, gather))
        theirs = source.mapPartitionsWithIndex(keys).partitionBy(2, _slot)
        assert ours == theirs.mapPartitionsWithIndex(gather).collect()
        assert len(ours) == 2 and ours[0][0] == 0
        assert stages.shortcuts == shortcuts


def test_a_two_stage_job_makes_less_than_half_of_pyspark_s_calls_into_the_jvm(
    spark: Any, calls: _Calls
) -> None:
    sc = spark.sparkContext
    source = sc.parallelize(range(8), 2)
    stages = PythonStages(sc)

    def ours() -> list[Any]:
        return stages.collect(stages.build(stages.shuffle(source, _by_three, 3), 3, _gathered))

    for _ in range(2):  # the first job makes the Java copies and the partitioner
        ours()
    calls.kinds.clear()
    got = ours()
    our_calls = len(calls.kinds)
    calls.kinds.clear()
    theirs = source.mapPartitionsWithIndex(_by_three).partitionBy(3, _slot)
    assert got == theirs.mapPartitionsWithIndex(_gathered).collect()
    assert our_calls * 2 < len(calls.kinds), (calls.kinds, our_calls)


def test_every_engine_on_a_context_shares_one_instance_and_its_empty_slots(
    spark: Any, calls: _Calls
) -> None:
    from statefulbolts import TopologyBuilder
    from statefulbolts.runtime._spark_engine import SparkEngine

    sc = spark.sparkContext
    stages = PythonStages.of(sc)
    slots = stages.empty_slots(3)
    builder = TopologyBuilder()
    builder.set_spout("words", _Quiet())
    SparkEngine(spark, builder.create_topology(), "shares-1", {}).close()
    calls.kinds.clear()
    # A topology submitted later: its engine looks nothing up in the JVM again.
    SparkEngine(spark, builder.create_topology(), "shares-2", {}).close()
    assert "r" not in calls.kinds, calls.kinds
    assert PythonStages.of(sc) is stages
    calls.kinds.clear()
    assert stages.empty_slots(3) is slots and calls.kinds == []  # no second ``parallelize``
    assert stages.collect(stages.build(slots, 3, _tagged)) == [(s, (s, [])) for s in range(3)]
