"""``PostgresSink`` against a real PostgreSQL: rows, layouts, the checks at submit, and faults.

The contract every sink keeps is in ``test_sink_contract`` (its ``postgres`` target); this file
is what is PostgreSQL's own: what a tuple becomes (no server), the upsert and insert layouts,
a table refused at submit with the fix, a server away at submit and in the middle of a run,
two publishers of one lane, rows the database refuses, and the sink bolt on Spark.
"""

from __future__ import annotations

import datetime
import decimal
import pickle
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from redis_fixtures import free_port

from examples.kafka_to_kafka import ChangedCounts
from examples.wordcount import SentenceSpout, SplitSentence, expected_counts
from statefulbolts import Fields, LocalCluster, TopologyBuilder
from statefulbolts.connectors.postgres import (
    PostgresSink,
    PostgresSinkWriteError,
    PostgresUnavailableError,
)
from statefulbolts.connectors.sinks import (
    ExactlyOnceSinkBolt,
    Lane,
    SinkConfigError,
    SinkStageError,
    StagedBatch,
)
from statefulbolts.testing import make_tuple

CONF: dict[str, Any] = {"topology.name": "pg-sink"}
LANE = Lane("pg-sink", "publish", 0, 1)
COUNTS = "CREATE TABLE counts (word text PRIMARY KEY, count bigint NOT NULL, txid bigint)"


def _opened(sink: PostgresSink, conf: dict[str, Any] | None = None) -> PostgresSink:
    sink.open(conf or CONF, None)  # type: ignore[arg-type]
    return sink


def _counts_sink(dsn: str, **kwargs: Any) -> PostgresSink:
    return _opened(
        PostgresSink(
            "counts", columns=("word", "count"), key=("word",), txid_column="txid", dsn=dsn,
            **kwargs,
        )
    )  # fmt: skip


def _batch(sink: PostgresSink, txid: int, *rows: tuple[Any, ...], fields: Any = None):
    names = fields or list(sink.columns)
    return StagedBatch(txid, [sink.stage(make_tuple(list(r), fields=names)) for r in rows])


def row_of(tuple_: Any) -> dict[str, Any] | None:
    word, count = tuple_.values
    return None if count == 0 else {"count": count * 10, "word": word.upper()}


# ------------------------------------------------------------------ rows (no server)
def test_a_tuple_becomes_the_values_of_the_named_columns_in_their_order() -> None:
    sink = PostgresSink("counts", columns=("count", "word"))
    assert sink.stage(make_tuple(["storm", 3, "x"], fields=["word", "count", "other"])) == [
        3,
        "storm",
    ]
    assert sink.name == "PostgreSQL table 'counts'"


def test_a_mapper_makes_the_row_or_leaves_the_tuple_out() -> None:
    by_name = PostgresSink("counts", columns=("word", "count"), mapper=row_of)
    assert by_name.stage(make_tuple(["storm", 3], fields=["w", "c"])) == ["STORM", 30]
    assert by_name.stage(make_tuple(["storm", 0], fields=["w", "c"])) is None
    in_order = PostgresSink("counts", columns=("word", "count"), mapper=lambda t: t.values)
    assert in_order.stage(make_tuple(["a", 1], fields=["w", "c"])) == ["a", 1]


@pytest.mark.parametrize(
    ("sink", "values", "fields", "message"),
    [
        (
            PostgresSink("t", columns=("word", "count")),
            ["a"],
            ["word"],
            "column 'count' is written from the tuple's field 'count', which it lacks "
            r"\(its fields: \['word'\]\)",
        ),
        (
            PostgresSink("t", columns=("word", "count"), mapper=lambda t: {"word": "a", "n": 1}),
            ["a"],
            ["word"],
            r"does not fit the sink's columns \['word', 'count'\]: missing \['count'\], "
            r"unknown \['n'\]",
        ),
        (
            PostgresSink("t", columns=("word", "count"), mapper=lambda t: ["a"]),
            ["a"],
            ["word"],
            r"the mapper's row has 1 values, the sink writes 2 columns",
        ),
        (
            PostgresSink("t", columns=("word",), mapper=lambda t: "a"),
            ["a"],
            ["word"],
            "the mapper returned 'a', not a row",
        ),
        (
            PostgresSink("t", columns=("word",)),
            [object()],
            ["word"],
            "column 'word': a value of type object .* cannot be written",
        ),
        (
            PostgresSink("t", columns=("doc",)),
            [{1: "x"}],
            ["doc"],
            "column 'doc': a mapping for JSON needs string keys",
        ),
        (
            PostgresSink("t", columns=("tags",)),
            [[{"a": 1}]],
            ["tags"],
            "column 'tags': a list holding a mapping cannot be an array",
        ),
    ],
)
def test_a_tuple_the_sink_cannot_stage_is_refused_naming_the_column(
    sink: PostgresSink, values: list[Any], fields: list[str], message: str
) -> None:
    with pytest.raises(SinkStageError, match=message):
        sink.stage(make_tuple(values, fields=fields))


def test_values_are_staged_as_plain_values_the_state_keeps() -> None:
    sink = PostgresSink("t", columns=("day", "at", "amount", "id", "doc", "tags", "raw", "big"))
    day = datetime.date(2024, 5, 1)
    at = datetime.datetime(2024, 5, 1, 12, 30, tzinfo=datetime.UTC)
    ident = uuid.UUID(int=7)
    values = [
        day,
        at,
        decimal.Decimal("1.50"),
        ident,
        {"n": day},
        (1, 2),
        bytearray(b"\x01"),
        1 << 70,
    ]
    assert sink.stage(make_tuple(values, fields=list(sink.columns))) == [
        "2024-05-01",
        "2024-05-01T12:30:00+00:00",
        "1.50",
        str(ident),
        {"n": "2024-05-01"},
        [1, 2],
        b"\x01",
        str(1 << 70),
    ]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"columns": ()}, "columns must be a non-empty sequence"),
        ({"columns": "word"}, "columns must be a non-empty sequence"),
        ({"columns": ("a", "a")}, r"columns name \['a'\] more than once"),
        ({"columns": ("a",), "key": ("b",)}, r"key \['b'\] must be distinct columns of \['a'\]"),
        ({"columns": ("a",), "txid_column": "a"}, "txid_column 'a' is also one of the columns"),
        ({"columns": ("x" * 64,)}, "is not a PostgreSQL identifier"),
        ({"columns": ("a",), "mapper": 3}, "mapper must be a function of the tuple"),
        ({"columns": ("a",), "publish_timeout_ms": 5}, "argument for 'publish.timeout.ms'"),
    ],
)
def test_arguments_that_cannot_work_are_refused_at_once(kwargs: dict[str, Any], message: str):
    with pytest.raises(ValueError, match=message):
        PostgresSink("counts", **kwargs)


def test_the_keys_fill_what_the_arguments_leave_and_a_dsn_is_never_shown() -> None:
    secret = "postgresql://app:s3cret@db.example:5433/shop"
    sink = PostgresSink(columns=("word",))
    settings = sink.settings({"sink.postgres.dsn": secret, "sink.postgres.table": "rep.daily"})
    assert (str(settings.table), settings.at) == ("rep.daily", "db.example:5433/shop as 'app'")
    assert str(settings.marker_table) == "statefulbolts_sink_markers"
    with pytest.raises(SinkConfigError, match="no database: give the sink a dsn") as no_dsn:
        sink.settings({"sink.postgres.table": "t"})
    with pytest.raises(SinkConfigError, match="no table: give the sink a table"):
        sink.settings({"sink.postgres.dsn": secret})
    with pytest.raises(SinkConfigError, match="config 'sink.postgres.dsn'") as bad:
        sink.settings({"sink.postgres.dsn": 5, "sink.postgres.table": "t"})
    with pytest.raises(SinkConfigError, match="'sink.postgres.table'.*one dot at most"):
        sink.settings({"sink.postgres.dsn": secret, "sink.postgres.table": "a.b.c"})
    assert "s3cret" not in str(bad.value) + str(no_dsn.value)
    copy = pickle.loads(pickle.dumps(_opened(PostgresSink("t", columns=("a",), dsn=secret))))
    assert copy._settings is None and copy.dsn == secret


# ------------------------------------------------------------------ layouts
def test_upsert_keeps_one_row_per_key_with_its_last_value_and_txid(postgres_db: Any) -> None:
    postgres_db.execute(COUNTS)
    sink = _counts_sink(postgres_db.dsn)
    first = sink.publish(LANE, 1, [_batch(sink, 1, ("a", 1), ("b", 1), ("a", 2))], None)
    # COMMIT(3) with txid 2 left by a start that settled it: 2 then 3, a key's last one wins.
    batches = [_batch(sink, 2, ("b", 5)), _batch(sink, 3, ("c", 1), ("b", 6))]
    second = sink.publish(LANE, 3, batches, None)
    again = sink.publish(LANE, 3, batches, None)
    assert (first.published, first.records) == ((1,), 3)
    assert (second.published, second.records, second.marker_before) == ((2, 3), 3, 1)
    assert (again.published, again.records) == ((), 0)
    assert postgres_db.execute("SELECT word, count, txid FROM counts ORDER BY word") == [
        ("a", 2, 1),
        ("b", 6, 3),
        ("c", 1, 3),
    ]
    assert postgres_db.execute("SELECT lane, txid, epoch FROM statefulbolts_sink_markers") == [
        ("pg-sink.publish.0of1", 3, None)
    ]


def test_insert_writes_every_record_as_a_row_with_its_types(postgres_db: Any) -> None:
    postgres_db.execute(
        "CREATE TABLE events (seq bigserial PRIMARY KEY, day date, amount numeric, doc jsonb,"
        " tags int[], raw bytea, note text, txid bigint)"
    )
    sink = _opened(
        PostgresSink(
            "events",
            columns=("day", "amount", "doc", "tags", "raw", "note"),
            txid_column="txid",
            dsn=postgres_db.dsn,
        )
    )
    fields = list(sink.columns)
    day = datetime.date(2024, 5, 1)
    rows = [(day, decimal.Decimal("1.5"), {"k": [1, "x"]}, [1, 2], b"\x00", "a")]
    rows += [(None, 2, None, [], None, "a")]  # the same note again: a new row, not an update
    sink.publish(LANE, 4, [_batch(sink, 4, *rows, fields=fields)], epoch=2)
    assert postgres_db.execute(
        "SELECT day, amount, doc, tags, raw, note, txid FROM events ORDER BY seq"
    ) == [
        (day, decimal.Decimal("1.5"), {"k": [1, "x"]}, [1, 2], b"\x00", "a", 4),
        (None, decimal.Decimal(2), None, [], None, "a", 4),
    ]
    assert sink.published(LANE) == 4


def test_at_least_once_write_is_at_once_without_a_marker(postgres_db: Any) -> None:
    postgres_db.execute(COUNTS)
    sink = _counts_sink(postgres_db.dsn)
    staged = [sink.stage(make_tuple(["a", n], fields=["word", "count"])) for n in (1, 2)]
    sink.write(staged)
    sink.write(staged[:1])  # a replay: the upsert leaves what one write would
    assert postgres_db.execute("SELECT word, count, txid FROM counts") == [("a", 1, None)]
    assert sink.published(LANE) is None


# ------------------------------------------------------------------ the checks at submit
TABLES = [
    "CREATE TABLE counts (word text PRIMARY KEY, count bigint)",
    "CREATE TABLE loose (word text, count bigint)",
    "CREATE TABLE strict (word text PRIMARY KEY, count bigint, source text NOT NULL)",
    "CREATE TABLE deferred (word text, count bigint, UNIQUE (word) DEFERRABLE)",
    "CREATE TABLE wrong_markers (lane text PRIMARY KEY, txid text)",
    # Roles belong to the server, not to the test's database: made once.
    "DO $$ BEGIN CREATE ROLE reader LOGIN; EXCEPTION WHEN duplicate_object THEN NULL; END $$",
    "GRANT SELECT ON counts TO reader",
]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (
            {"table": "nope"},
            r"table 'nope' not found in database 127.0.0.1:\d+/t_\w+ as 'postgres' \(a name "
            r"without a schema is looked up in the search path\); create it \(the sink never",
        ),
        (
            {"columns": ("word", "cnt")},
            r"table 'counts' has no column 'cnt' \(its columns: word, count\)",
        ),
        (
            {"table": "strict"},
            "column 'source' of table 'strict' is NOT NULL with no default, and the sink "
            "writes no value to it",
        ),
        (
            {"table": "loose"},
            r"the upsert key \(word\) of table 'loose' has no unique constraint or index on "
            r"exactly those columns .*: ALTER TABLE loose ADD UNIQUE \(word\)",
        ),
        ({"table": "deferred"}, "the upsert key .word. of table 'deferred' has no unique"),
        (
            {"marker_table": "wrong_markers"},
            "table 'wrong_markers' at .* is not a marker table: it needs column 'txid' of "
            "type bigint .text.",
        ),
        (
            {"role": "reader"},
            r"the role of the DSN may not INSERT or UPDATE on table 'counts': GRANT INSERT, "
            "UPDATE ON counts TO <the role>",
        ),
    ],
)
def test_a_table_the_sink_cannot_write_is_refused_at_submit_naming_it_and_the_fix(
    postgres_db: Any, kwargs: dict[str, Any], message: str
) -> None:
    for statement in TABLES:
        postgres_db.execute(statement)
    role = kwargs.pop("role", "postgres")
    dsn = postgres_db.dsn.replace("postgres@", f"{role}@")
    table = kwargs.pop("table", "counts")
    sink = PostgresSink(table, **{"columns": ("word", "count"), "key": ("word",), **kwargs})
    with pytest.raises(SinkConfigError, match=message):
        sink.check_config({**CONF, "sink.postgres.dsn": dsn})


def test_a_table_the_sink_can_write_passes_and_the_marker_table_is_made(postgres_db: Any) -> None:
    postgres_db.execute(COUNTS)
    sink = PostgresSink("counts", columns=("word", "count"), key=("word",), txid_column="txid")
    sink.check_config({**CONF, "sink.postgres.dsn": postgres_db.dsn})
    assert postgres_db.execute(
        "SELECT column_name, data_type FROM information_schema.columns"
        " WHERE table_name = 'statefulbolts_sink_markers' ORDER BY ordinal_position"
    ) == [
        ("lane", "text"),
        ("txid", "bigint"),
        ("epoch", "bigint"),
        ("updated_at", "timestamp with time zone"),
    ]


def test_statefulbolts_run_refuses_an_unreachable_server_before_spark_starts() -> None:
    from statefulbolts.cli import check_before_spark

    port = free_port()  # nothing listens there
    sink = PostgresSink("counts", columns=("word",), dsn=f"postgresql://app:pw@127.0.0.1:{port}/db")
    builder = TopologyBuilder()
    builder.set_spout("sentences", SentenceSpout(1), 1)
    builder.set_bolt("publish", ExactlyOnceSinkBolt(sink), 1).shuffle_grouping("sentences")
    with pytest.raises(PostgresUnavailableError) as refused:
        check_before_spark(CONF, topology=builder.create_topology())
    message = str(refused.value)
    assert message.startswith(
        f"PostgresSink: checking the table for sink PostgreSQL table 'counts': cannot connect to "
        f"PostgreSQL at 127.0.0.1:{port}/db as 'app': connection failed: "
    ), message
    assert "Connection refused" in message and "start the server or fix the DSN" in message
    assert "\n" not in message and "pw" not in message.split("as 'app'")[0]


# ------------------------------------------------------------------ publishers of one lane
def _waiting_on_a_lock(db: Any, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    query = (
        "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'statefulbolts-sink'"
        " AND wait_event_type = 'Lock'"
    )
    while db.execute(query)[0][0] == 0:
        assert time.monotonic() < deadline, "the publish never waited for the marker's lock"
        time.sleep(0.02)


@pytest.fixture
def holder(postgres_db: Any) -> Iterator[Any]:
    """A connection of another publisher of ``LANE``, inside a transaction that locked its row."""
    import psycopg

    postgres_db.execute(COUNTS)
    sink = _counts_sink(postgres_db.dsn)
    sink.publish(LANE, 1, [_batch(sink, 1, ("a", 1))], 3)
    with psycopg.connect(postgres_db.dsn) as conn:
        conn.execute(
            "SELECT txid FROM statefulbolts_sink_markers WHERE lane = %s FOR UPDATE",
            [LANE.qualified()],
        )
        yield conn


def test_a_second_publisher_of_a_lane_waits_for_the_first_and_then_writes_nothing_twice(
    postgres_db: Any, holder: Any
) -> None:
    sink = _counts_sink(postgres_db.dsn)
    results: list[Any] = []
    zombie = threading.Thread(
        target=lambda: results.append(sink.publish(LANE, 2, [_batch(sink, 2, ("a", 7))], 3))
    )
    zombie.start()
    _waiting_on_a_lock(postgres_db)
    # The first publisher writes txid 2 and moves the marker, then commits.
    holder.execute("UPDATE counts SET count = 2, txid = 2 WHERE word = 'a'")
    holder.execute(
        "UPDATE statefulbolts_sink_markers SET txid = 2 WHERE lane = %s", [LANE.qualified()]
    )
    holder.commit()
    zombie.join(30)
    [result] = results
    assert (result.published, result.marker_before) == ((), 2)
    assert postgres_db.execute("SELECT word, count, txid FROM counts") == [("a", 2, 2)]


def test_a_lane_locked_longer_than_the_publish_timeout_is_an_outage(
    postgres_db: Any, holder: Any
) -> None:
    sink = _counts_sink(postgres_db.dsn, publish_timeout_ms=200)
    # The lock's wait or the statement's, whichever PostgreSQL ends first: a busy server.
    with pytest.raises(PostgresUnavailableError, match=r"locking the marker .* \((55P03|57014)\)"):
        sink.publish(LANE, 2, [_batch(sink, 2, ("a", 7))], 3)
    assert postgres_db.execute("SELECT count, txid FROM counts") == [(1, 1)]


def test_a_driver_taken_over_publishes_nothing(postgres_db: Any, holder: Any) -> None:
    holder.rollback()
    sink = _counts_sink(postgres_db.dsn)
    with pytest.raises(Exception, match="lease epoch 2 is below the stored 3") as fenced:
        sink.publish(LANE, 2, [_batch(sink, 2, ("a", 7))], 2)
    assert type(fenced.value).__name__ == "SinkFencedError"
    assert postgres_db.execute("SELECT count, txid FROM counts") == [(1, 1)]


def test_rows_the_database_refuses_fail_the_step_naming_table_txids_and_cause(
    postgres_db: Any,
) -> None:
    postgres_db.execute(COUNTS)
    sink = _counts_sink(postgres_db.dsn)
    batches = [_batch(sink, 5, ("a", 1)), _batch(sink, 6, ("b", None))]
    with pytest.raises(PostgresSinkWriteError) as refused:
        sink.publish(LANE, 6, batches, None)
    assert str(refused.value).startswith(
        "PostgresSink: writing 2 rows of txids 5-6 to table 'counts' for lane 0of1 of sink "
        "'publish' (marker 'pg-sink.publish.0of1') at "
    )
    assert '(23502): null value in column "count"' in str(refused.value)
    assert postgres_db.execute("SELECT count(*) FROM counts") == [(0,)]
    assert sink.published(LANE) is None


def test_lane_markers_lists_every_lane_of_a_component_the_table_has(postgres_db: Any) -> None:
    postgres_db.execute(COUNTS)
    sink = _counts_sink(postgres_db.dsn)
    conf = {**CONF, "sink.postgres.dsn": postgres_db.dsn}
    assert sink.lane_markers(conf, "pg-sink", "publish") == {}
    for lane, txid in ((LANE, 4), (Lane("pg-sink", "publish", 1, 3), 2)):
        sink.publish(lane, txid, [_batch(sink, txid, (f"w{txid}", 1))], None)
    sink.publish(Lane("pg_sink", "publish", 0, 1), 9, [_batch(sink, 9, ("x", 1))], None)
    assert sink.lane_markers(conf, "pg-sink", "publish") == {"0of1": 4, "1of3": 2}


# ------------------------------------------------------------------ on the engines
def wordcount(sink: PostgresSink, sentences: int) -> Any:
    builder = TopologyBuilder()
    builder.set_spout("sentences", SentenceSpout(sentences), 1)
    builder.set_bolt("split", SplitSentence(), 2).shuffle_grouping("sentences")
    builder.set_bolt("count", ChangedCounts(), 2).fields_grouping("split", Fields("word"))
    builder.set_bolt("publish", ExactlyOnceSinkBolt(sink), 2).fields_grouping(
        "count", Fields("word")
    )
    return builder.create_topology()


RUN_CONF = {
    "topology.state.checkpoint.interval.ms": 50,
    "topology.max.spout.pending": 50,
}


def test_a_server_away_mid_run_is_waited_out_and_the_rows_are_the_counts(
    postgres_server_factory: Any,
) -> None:
    server = postgres_server_factory()
    db = server.new_database()
    db.execute(COUNTS)
    failed: list[Any] = []
    down, seen = threading.Event(), threading.Event()

    def on_transaction(info: Any) -> None:  # the driver's thread, between jobs
        if info.action == "COMMIT" and info.txid == 2 and info.ok:
            server.stop("immediate")
            down.set()
        if not info.ok:
            failed.append(info)
            seen.set()

    conf = {**RUN_CONF, "topology.max.transaction.retries": 1}
    sink = PostgresSink("counts", columns=("word", "count"), key=("word",), dsn=db.dsn)
    with LocalCluster(engine="inline") as cluster:
        handle = cluster.submit_topology(
            "pg-outage", conf, wordcount(sink, 300), on_transaction=on_transaction
        )
        try:
            assert down.wait(120), "COMMIT(2) never came"
            assert seen.wait(120), "no transaction met the server away"
            server.start(server.port)
            handle.await_idle(180)
            observed = handle.runner.observe()
        finally:
            handle.kill()
    assert dict(db.execute("SELECT word, count FROM counts")) == dict(expected_counts(300))
    # Waited out as an outage (not a failed transaction's retry budget of 1), named.
    assert observed.backend_errors >= 1 and observed.error is None
    assert all("PostgresUnavailableError" in (i.error or "") for i in failed), failed
    assert f"127.0.0.1:{server.port}" in (failed[0].error or "")


@pytest.mark.spark
def test_the_sink_bolt_on_spark_writes_a_word_count_whose_rows_are_the_counts(
    cluster: Any, postgres_db: Any
) -> None:
    postgres_db.execute(COUNTS)
    sink = PostgresSink("counts", columns=("word", "count"), key=("word",), txid_column="txid")
    conf = {**RUN_CONF, "sink.postgres.dsn": postgres_db.dsn}
    handle = cluster.submit_topology("pg-spark", conf, wordcount(sink, 200))
    try:
        handle.await_idle(300)
        metrics = handle.metrics()["components"]["publish"]
        committed = handle.runner.observe().progress.committed_txid
    finally:
        handle.kill()
    assert dict(postgres_db.execute("SELECT word, count FROM counts")) == dict(expected_counts(200))
    markers = postgres_db.execute("SELECT lane, txid FROM statefulbolts_sink_markers ORDER BY 1")
    assert [lane for lane, _ in markers] == ["pg-spark.publish.0of2", "pg-spark.publish.1of2"]
    last = max(txid for _, txid in markers)
    assert committed is not None and last <= committed
    assert postgres_db.execute("SELECT max(txid) FROM counts") == [(last,)]
    assert metrics["metric.sink_records_published"] >= len(expected_counts(200))
    assert metrics["metric.sink_publishes"] >= 2 and metrics["metric.sink_publish_seconds"] > 0
