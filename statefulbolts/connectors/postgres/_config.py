"""The PostgreSQL sink's settings: its ``sink.postgres.*`` config keys, names, and its errors.

``PostgresSinkConfig`` validates the keys ``PostgresSink`` reads (strict types, as the topology
config's; the key named in every error; the DSN, which may hold a password, never printed).
An argument given to the sink wins over its key.

Table and column names are PostgreSQL identifiers, always quoted when they reach SQL
(``psycopg.sql.Identifier``), so a name is taken as written, case included; ``schema.table``
names a table of a schema (``TableName``).

The errors, in the project's tree (``statefulbolts.errors``)::

    StateBackendError (providers)
    └── PostgresUnavailableError    the server is away, restarting, busy or slow: waited out,
                                    as a state store's outage
    StateBackendRefusedError (providers)
    └── PostgresRefusedError        the server refused (a permission, a read-only server)
    SinkPublishError (sinks)
    └── PostgresSinkWriteError      the database refused the rows (a type, a constraint, a
                                    table changed under the sink): no retry changes it
    SinkConfigError (sinks)         a setting, or the table, that cannot work (named, with the fix)

Example:
    >>> config = PostgresSinkConfig.from_conf(
    ...     {"sink.postgres.dsn": "postgresql://app:pw@db/shop", "sink.postgres.table": "counts"})
    >>> config.table, config.dsn
    ('counts', SecretStr('**********'))
    >>> TableName.parse("reports.daily_counts")
    TableName(schema='reports', name='daily_counts')
    >>> str(TableName.parse("counts"))
    'counts'
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any, Final, NamedTuple, Self

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError, field_validator

from providers import StateBackendError, StateBackendRefusedError
from statefulbolts.connectors.sinks import SinkConfigError, SinkPublishError

__all__ = [
    "DEFAULT_MARKER_TABLE",
    "DEFAULT_PUBLISH_TIMEOUT_MS",
    "DSN_KEY",
    "INSTALL",
    "MARKER_TABLE_KEY",
    "PUBLISH_TIMEOUT_KEY",
    "TABLE_KEY",
    "PostgresRefusedError",
    "PostgresSinkConfig",
    "PostgresSinkWriteError",
    "PostgresUnavailableError",
    "TableName",
    "check_identifier",
    "require_psycopg",
]

DSN_KEY: Final = "sink.postgres.dsn"
TABLE_KEY: Final = "sink.postgres.table"
MARKER_TABLE_KEY: Final = "sink.postgres.marker.table"
PUBLISH_TIMEOUT_KEY: Final = "sink.postgres.publish.timeout.ms"
DEFAULT_MARKER_TABLE: Final = "statefulbolts_sink_markers"
DEFAULT_PUBLISH_TIMEOUT_MS: Final = 30_000
INSTALL: Final = "pip install 'statefulbolts[postgres]'"
# PostgreSQL keeps the first 63 bytes of a longer name (NAMEDATALEN - 1): two long names
# could silently be one table.
_MAX_IDENTIFIER_BYTES = 63


class PostgresUnavailableError(StateBackendError):
    """The PostgreSQL server could not be reached, went away, or was busy: waited out."""


class PostgresRefusedError(StateBackendRefusedError):
    """The PostgreSQL server answered and refused for good (a permission, read-only): stops."""


class PostgresSinkWriteError(SinkPublishError):
    """The database refused the sink's rows (a type, a constraint): none of them is visible."""


def require_psycopg(who: str) -> ModuleType:
    """The psycopg 3 module, or an ``ImportError`` saying ``who`` needs it and how to get it."""
    try:
        import psycopg
    except ImportError as exc:  # pragma: no cover - depends on the environment
        msg = f"{who} needs psycopg 3: {INSTALL}"
        raise ImportError(msg) from exc
    return psycopg


def check_identifier(name: Any, what: str) -> str:
    """``name`` as a PostgreSQL identifier: a non-empty string of at most 63 bytes.

    Raises:
        ValueError: it is not one; the message names ``what`` it is.
    """
    if not isinstance(name, str) or not name:
        msg = f"{what} must be a non-empty string, got {name!r}"
        raise ValueError(msg)
    if len(name.encode()) > _MAX_IDENTIFIER_BYTES or "\0" in name:
        msg = (
            f"{what} {name!r} is not a PostgreSQL identifier (at most "
            f"{_MAX_IDENTIFIER_BYTES} bytes, no NUL): PostgreSQL would cut it short"
        )
        raise ValueError(msg)
    return name


class TableName(NamedTuple):
    """A table's name, and its schema if one is named (``None``: the search path's)."""

    schema: str | None
    name: str

    @classmethod
    def parse(cls, text: Any, what: str = "table") -> Self:
        """``"table"`` or ``"schema.table"``.

        Raises:
            ValueError: not such a name (the message names ``what``).
        """
        if not isinstance(text, str):
            msg = f"{what} must be a string ('table' or 'schema.table'), got {text!r}"
            raise ValueError(msg)
        schema, dot, name = text.partition(".")
        if not dot:
            return cls(None, check_identifier(text, what))
        if "." in name:
            msg = f"{what} {text!r}: a table is 'table' or 'schema.table', one dot at most"
            raise ValueError(msg)
        return cls(check_identifier(schema, f"{what}'s schema"), check_identifier(name, what))

    def parts(self) -> tuple[str, ...]:
        """The name's parts, for ``psycopg.sql.Identifier``."""
        return (self.name,) if self.schema is None else (self.schema, self.name)

    def __str__(self) -> str:
        return ".".join(self.parts())


class PostgresSinkConfig(BaseModel):
    """The ``sink.postgres.*`` keys ``PostgresSink`` reads; its arguments win over them."""

    model_config = ConfigDict(frozen=True, extra="ignore", strict=True, populate_by_name=False)

    dsn: SecretStr | None = Field(
        None,
        alias=DSN_KEY,
        description=(
            "`PostgresSink`: the database, as a libpq connection string "
            "(`postgresql://user:password@host:port/dbname` or `host=... dbname=...`); "
            "never printed."
        ),
    )
    table: str | None = Field(
        None,
        alias=TABLE_KEY,
        description=(
            "`PostgresSink`: the table rows go to, `table` or `schema.table`, when the sink's "
            "`table` argument names none. It must exist."
        ),
    )
    marker_table: str | None = Field(
        None,
        alias=MARKER_TABLE_KEY,
        description=(
            "`PostgresSink`: the table of the sink lanes' markers (a row per lane: the last "
            "txid published and the lease epoch that published it), made if missing."
        ),
        json_schema_extra={"shown_default": f"`{DEFAULT_MARKER_TABLE}`"},
    )
    publish_timeout_ms: int | None = Field(
        None,
        alias=PUBLISH_TIMEOUT_KEY,
        ge=100,
        description=(
            "`PostgresSink`: the longest a statement of a publish step, a wait for the lane's "
            "marker row or a pause inside its transaction may take before the step is given "
            "up and rolled back (the sessions' `statement_timeout`, `lock_timeout` and "
            "`idle_in_transaction_session_timeout`): an outage, waited out."
        ),
        json_schema_extra={"shown_default": f"`{DEFAULT_PUBLISH_TIMEOUT_MS}`"},
    )

    @field_validator("dsn", mode="before")
    @classmethod
    def _secret(cls, value: Any) -> Any:
        """A DSN given as a plain string is kept as a secret."""
        return SecretStr(value) if isinstance(value, str) else value

    @field_validator("table", "marker_table")
    @classmethod
    def _table_name(cls, value: str | None) -> str | None:
        """``table`` or ``schema.table``."""
        if value is not None:
            TableName.parse(value)
        return value

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any] | None, *, who: str = "PostgresSink") -> Self:
        """This model's keys in ``conf``, validated.

        Raises:
            SinkConfigError: a key has the wrong type or value (named; a DSN never shown).
        """
        given = {}
        for field in cls.model_fields.values():
            key = str(field.alias)
            value = (conf or {}).get(key)
            if value is not None and value != "":
                given[key] = value
        try:
            return cls.model_validate(given)
        except ValidationError as exc:
            problems = []
            for err in exc.errors(include_url=False):
                key = str(err["loc"][0]) if err["loc"] else ""
                message = err["msg"].removeprefix("Value error, ")
                shown = "" if key == DSN_KEY else f" (got {err['input']!r:.80})"
                problems.append(f"config {key!r}: {message}{shown}")
            raise SinkConfigError(f"{who}: " + "; ".join(problems)) from None
