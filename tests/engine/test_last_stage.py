"""A job's last stage made and collected with few calls into the JVM (``_pyrdd.LastStage``).

It must give what PySpark's ``mapPartitionsWithIndex(...).collect()`` gives, fall back to it
where PySpark has more to do (a command to broadcast, a broadcast variable), and pay fewer
py4j round trips per job than it: the calls are counted, not timed.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from statefulbolts.runtime._pyrdd import LastStage, chain

pytestmark = pytest.mark.spark


def _tagged(split: int, items: Any) -> list[Any]:
    return [(split, item) for item in items]


def _doubled(split: int, items: Any) -> list[Any]:
    return [(split, item * 2) for _, item in items]


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
    stage = LastStage(sc)
    fn = chain([_tagged, _doubled])
    got = stage.collect(stage.build(source, 4, fn))
    assert got == source.mapPartitionsWithIndex(fn).collect()
    assert got[:2] == [(0, 0), (0, 2)] and len(got) == 20
    assert stage.shortcuts == 1


def test_a_job_makes_less_than_half_of_pyspark_s_calls_into_the_jvm(
    spark: Any, calls: _Calls
) -> None:
    sc = spark.sparkContext
    source = sc.parallelize([(s, []) for s in range(2)], 2)
    stage = LastStage(sc)
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

    stage = LastStage(sc, threshold=1000)
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

    stage = LastStage(sc)
    try:
        got = stage.collect(stage.build(sc.parallelize(["a", "b", "a"], 2), 2, looked_up))
    finally:
        table.destroy()
    assert got == [1, 2, 1]
    assert stage.shortcuts == 0


def test_the_java_copy_of_the_environment_follows_pyspark_s(spark: Any) -> None:
    sc = spark.sparkContext
    stage = LastStage(sc)
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
