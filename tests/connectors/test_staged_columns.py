"""``StagedColumns``: records staged as columns are the same rows to whoever reads rows.

A sink's ``stage_batch`` may give columns (``KafkaSink`` does); ``ExactlyOnceSinkBolt`` cuts
them into chunks, stores each as a map, and at COMMIT hands ``publish`` the chunks joined
(``concat_staged``): columns when every chunk is columns of one shape, rows otherwise (chunks
of rows, staged before columns existed or by a tuple-at-a-time ``stage``, still publish).
"""

from __future__ import annotations

from typing import Any

import msgpack
import pytest

from statefulbolts.connectors.sinks import StagedColumns
from statefulbolts.connectors.sinks._columns import concat_staged, staged_count

ROWS = [[None, 1, b"a", b"1", None], [None, 1, b"b", b"2", None], [None, 1, b"c", b"3", None]]


def columns(rows: list[list[Any]] = ROWS) -> StagedColumns:
    keys, values = [r[2] for r in rows], [r[3] for r in rows]
    return StagedColumns(5, {2: keys, 3: values}, {0: None, 1: 1, 4: None})


def test_columns_are_the_rows_they_stand_for() -> None:
    cols = columns()
    assert len(cols) == 3 and list(cols) == ROWS
    assert [cols[i] for i in range(-3, 3)] == ROWS + ROWS
    assert list(cols.column(1)) == [1, 1, 1] and cols.column(2) == [b"a", b"b", b"c"]
    with pytest.raises(IndexError):
        cols[3]


def test_a_slice_is_columns_of_those_rows_and_survives_msgpack() -> None:
    part = columns()[1:]
    assert isinstance(part, StagedColumns) and list(part) == ROWS[1:]
    stored = msgpack.unpackb(msgpack.packb(part.stored(), use_bin_type=True), raw=False)
    assert StagedColumns.is_stored(stored) and staged_count(stored) == 2
    assert StagedColumns.from_stored(stored) == part
    assert not StagedColumns.is_stored(ROWS) and staged_count(ROWS) == 3


def test_records_whose_every_field_is_one_value_keep_their_count() -> None:
    same = StagedColumns(2, {}, {0: "t", 1: b"v"}, 4)
    assert list(same) == [["t", b"v"]] * 4
    assert len(same[1:3]) == 2
    assert StagedColumns.from_stored(same.stored()) == same


def test_chunks_of_columns_join_as_columns_and_anything_else_as_rows() -> None:
    cols = columns()
    joined = concat_staged([cols[:1].stored(), cols[1:].stored()])
    assert isinstance(joined, StagedColumns) and joined == cols
    # A chunk of rows among them (staged tuple by tuple): rows, in order.
    mixed = concat_staged([cols[:1].stored(), [ROWS[1]], cols[2:].stored()])
    assert mixed == ROWS
    # Columns of another shape (another partition): rows too.
    other = StagedColumns(5, {2: [b"d"], 3: [b"4"]}, {0: None, 1: 0, 4: None})
    assert concat_staged([cols.stored(), other.stored()]) == [*ROWS, [None, 0, b"d", b"4", None]]


@pytest.mark.parametrize(
    ("lists", "constants", "n"),
    [
        ({0: [1]}, {0: 2, 1: 3}, None),  # field 0 twice
        ({0: [1]}, {}, None),  # field 1 missing (width 2)
        ({0: [1], 1: [1, 2]}, {}, None),  # lengths differ
        ({0: [1, 2]}, {1: 0}, 3),  # n is not the lists' length
    ],
)
def test_columns_that_do_not_make_records_are_refused(
    lists: dict[int, list[Any]], constants: dict[int, Any], n: int | None
) -> None:
    with pytest.raises(ValueError, match="staged columns"):
        StagedColumns(2, lists, constants, n)


class _Recording:
    """Takes ``produce`` calls as a confluent-kafka ``Producer`` would, and keeps them."""

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []
        self.polled_after: list[int] = []  # how many records were produced at each poll

    def produce(self, *args: Any, **kwargs: Any) -> None:
        self.calls.append((*args, tuple(sorted(kwargs.items()))))

    def poll(self, timeout: float) -> int:
        self.polled_after.append(len(self.calls))
        return 0


SHAPES = {
    "own topic, one partition, no headers": columns(),
    "a topic per record": StagedColumns(
        5, {0: ["t1", None], 2: [b"a", b"b"], 3: [b"1", b"2"]}, {1: -1, 4: None}
    ),
    "a partition per record": StagedColumns(
        5, {1: [0, 1], 2: [b"a", b"b"], 3: [b"1", b"2"]}, {0: None, 4: None}
    ),
    "headers": StagedColumns(
        5, {3: [b"1", b"2"], 4: [[["h", b"x"]], None]}, {0: None, 1: -1, 2: None}
    ),
}


@pytest.mark.parametrize("shape", sorted(SHAPES))
@pytest.mark.parametrize("extra", [[], [("sb-txid", b"7")]])
def test_columns_are_produced_as_their_rows_are(shape: str, extra: list[Any]) -> None:
    from statefulbolts.connectors.kafka._producers import produce_all

    def produced(records: Any) -> list[tuple[Any, ...]]:
        client = _Recording()
        produce_all(client, records, "own", list(extra), float("inf"), RuntimeError)
        return client.calls

    cols = SHAPES[shape]
    assert produced(cols) == produced(list(cols)) and len(produced(cols)) == len(cols)


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_the_produce_loop_serves_the_client_every_so_many_records(
    shape: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Events served as records are queued, not all at the final flush (``POLL_EVERY``)."""
    from statefulbolts.connectors.kafka import _producers

    monkeypatch.setattr(_producers, "POLL_EVERY", 2)
    base = SHAPES[shape]
    cols = concat_staged([base.stored(), base.stored(), base[:1].stored()])  # an odd count
    n = len(cols)
    for records in (cols, list(cols)):
        client = _Recording()
        _producers.produce_all(client, records, "own", [], float("inf"), RuntimeError)
        assert len(client.calls) == n
        assert client.polled_after == [min(i + 2, n) for i in range(0, n, 2)]


def test_columns_of_no_topic_are_refused_when_the_sink_has_none() -> None:
    from statefulbolts.connectors.kafka._producers import produce_all

    with pytest.raises(ValueError, match="names no topic"):
        produce_all(_Recording(), columns(), None, [], float("inf"), RuntimeError)
