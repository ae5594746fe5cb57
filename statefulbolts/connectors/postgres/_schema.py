"""What the PostgreSQL sink needs of the database, and the marker table it makes.

``check_table`` reads the catalog (``pg_class``, ``pg_attribute``, ``pg_index``) and refuses,
one problem per message naming the table, the column and the fix, a table the sink cannot
write: one that does not exist, a named column it lacks, a column that needs a value the sink
does not give (``NOT NULL``, no default), an upsert key without a unique constraint or index
on exactly its columns (``ON CONFLICT`` needs one), or a privilege the sink's role lacks.

The marker table (``ensure_marker_table``) holds one row per sink lane::

    lane        text PRIMARY KEY    <topology>.<component>.<task>of<parallelism>
    txid        bigint              the last txid whose rows the sink's table holds (NULL
                                    only inside a first publish, never committed so)
    epoch       bigint              the lease epoch of the driver that published it (or NULL)
    updated_at  timestamptz         when

It is made if missing (under a transaction-level advisory lock, so that two tasks making it
at once do not collide), and an existing one is checked for those columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from statefulbolts.connectors.postgres._config import TableName
from statefulbolts.connectors.sinks import SinkConfigError

__all__ = ["MARKER_COLUMNS", "Column", "check_table", "ensure_marker_table", "table_oid"]

# The marker table's columns, and the types an existing one must have for them.
MARKER_COLUMNS = {"lane": "text", "txid": "bigint", "epoch": "bigint"}
# An arbitrary, fixed advisory lock key: "the sink is making its marker table".
_MAKING_MARKERS = 0x5B_5157_4D4B


class Column(NamedTuple):
    """One column of a table, as the catalog says it."""

    name: str
    type: str
    not_null: bool
    has_default: bool  # a default, an identity or a generated column


def table_oid(cur: Any, table: TableName) -> int | None:
    """The table's oid (the search path's schema if it names none), or ``None``: no such table."""
    from psycopg import sql

    shown = sql.Identifier(*table.parts()).as_string(cur.connection)
    row = cur.execute("SELECT to_regclass(%s)::oid", [shown]).fetchone()
    return None if row is None or row[0] is None else int(row[0])


def _columns(cur: Any, oid: int) -> dict[str, Column]:
    rows = cur.execute(
        "SELECT attname, format_type(atttypid, atttypmod), attnotnull,"
        " atthasdef OR attidentity <> '' OR attgenerated <> ''"
        " FROM pg_attribute WHERE attrelid = %s AND attnum > 0 AND NOT attisdropped"
        " ORDER BY attnum",
        [oid],
    ).fetchall()
    return {r[0]: Column(r[0], r[1], bool(r[2]), bool(r[3])) for r in rows}


def _unique_column_sets(cur: Any, oid: int) -> list[frozenset[str]]:
    """The column sets of the table's unique indexes ``ON CONFLICT`` can use as arbiters.

    Valid, immediate (not deferrable), on plain columns (no expression), not partial.
    """
    rows = cur.execute(
        "SELECT array_agg(a.attname::text)"
        " FROM pg_index i"
        " JOIN pg_attribute a ON a.attrelid = i.indrelid"
        "  AND a.attnum = ANY((i.indkey::int2[])[0:i.indnkeyatts - 1])"
        " WHERE i.indrelid = %s AND i.indisunique AND i.indisvalid AND i.indimmediate"
        "  AND i.indpred IS NULL AND i.indexprs IS NULL"
        " GROUP BY i.indexrelid",
        [oid],
    ).fetchall()
    return [frozenset(r[0]) for r in rows]


def _privileges(cur: Any, oid: int, wanted: Sequence[str]) -> list[str]:
    """The privileges of ``wanted`` the current role lacks on the table."""
    return [
        p
        for p in wanted
        if not cur.execute("SELECT has_table_privilege(%s, %s)", [oid, p]).fetchone()[0]
    ]


def check_table(
    cur: Any,
    table: TableName,
    columns: Sequence[str],
    key: Sequence[str],
    txid_column: str | None,
    *,
    at: str,
) -> None:
    """Refuse a table the sink cannot write (the module docstring).

    Raises:
        SinkConfigError: the first problem found, naming the table, the column and the fix.
    """
    oid = table_oid(cur, table)
    if oid is None:
        msg = (
            f"PostgresSink: table {str(table)!r} not found in database {at} (a name without a "
            "schema is looked up in the search path); create it (the sink never creates the "
            "table it writes)"
        )
        raise SinkConfigError(msg)
    found = _columns(cur, oid)
    written = [*columns, *([txid_column] if txid_column else [])]
    for name in written:
        if name not in found:
            msg = (
                f"PostgresSink: table {str(table)!r} has no column {name!r} (its columns: "
                f"{', '.join(found)}); fix the sink's columns, or add the column"
            )
            raise SinkConfigError(msg)
    for column in found.values():
        if column.name not in written and column.not_null and not column.has_default:
            msg = (
                f"PostgresSink: column {column.name!r} of table {str(table)!r} is NOT NULL with "
                "no default, and the sink writes no value to it: add it to the sink's columns, "
                "give it a default, or allow NULL"
            )
            raise SinkConfigError(msg)
    if key and frozenset(key) not in _unique_column_sets(cur, oid):
        shown = ", ".join(key)
        msg = (
            f"PostgresSink: the upsert key ({shown}) of table {str(table)!r} has no unique "
            "constraint or index on exactly those columns (valid, not deferrable, not "
            f"partial), which INSERT ... ON CONFLICT needs: ALTER TABLE {table} ADD UNIQUE "
            f"({shown})"
        )
        raise SinkConfigError(msg)
    lacking = _privileges(cur, oid, ["INSERT", "UPDATE"] if key else ["INSERT"])
    if lacking:
        msg = (
            f"PostgresSink: the role of the DSN may not {' or '.join(lacking)} on table "
            f"{str(table)!r}: GRANT {', '.join(lacking)} ON {table} TO <the role>"
        )
        raise SinkConfigError(msg)


def ensure_marker_table(cur: Any, table: TableName, *, at: str) -> None:
    """Make the marker table if it is missing, in the cursor's transaction; check its columns.

    Raises:
        SinkConfigError: an existing table of that name lacks a marker column (or has another
            type for it), or the role may not use it.
        psycopg.Error: the database refused to make it (the caller words it).
    """
    from psycopg import sql

    oid = table_oid(cur, table)
    if oid is None:
        cur.execute("SELECT pg_advisory_xact_lock(%s)", [_MAKING_MARKERS])
        cur.execute(
            sql.SQL(
                "CREATE TABLE IF NOT EXISTS {} (lane text PRIMARY KEY, txid bigint,"
                " epoch bigint, updated_at timestamptz NOT NULL DEFAULT now())"
            ).format(sql.Identifier(*table.parts()))
        )
        return
    found = _columns(cur, oid)
    for name, type_ in MARKER_COLUMNS.items():
        got = found.get(name)
        if got is None or got.type != type_:
            msg = (
                f"PostgresSink: table {str(table)!r} at {at} is not a marker table: it needs "
                f"column {name!r} of type {type_} ({'missing' if got is None else got.type}); "
                "name another one (the sink's marker_table, sink.postgres.marker.table)"
            )
            raise SinkConfigError(msg)
    if frozenset({"lane"}) not in _unique_column_sets(cur, oid):
        msg = (
            f"PostgresSink: marker table {str(table)!r} at {at} has no unique key on 'lane': "
            f"ALTER TABLE {table} ADD PRIMARY KEY (lane)"
        )
        raise SinkConfigError(msg)
    lacking = _privileges(cur, oid, ["SELECT", "INSERT", "UPDATE"])
    if lacking:
        msg = (
            f"PostgresSink: the role of the DSN may not {' or '.join(lacking)} on marker table "
            f"{str(table)!r}: GRANT {', '.join(lacking)} ON {table} TO <the role>"
        )
        raise SinkConfigError(msg)
