"""The PostgreSQL connector: ``PostgresSink``, rows written to a table exactly once.

In parts:

- ``_config``: ``PostgresSinkConfig`` (the ``sink.postgres.*`` keys), table names, the
  connector's errors;
- ``_client``: the process's connections, and how a database error becomes an outage or a
  refusal;
- ``_schema``: what the sink needs of its table (checked at submit), and the marker table;
- ``_sink``: ``PostgresSink``, its stage, marker and publish steps.

psycopg is imported only when the sink connects, so this package imports without it; a sink
that connects without it fails with the install command (``pip install
'statefulbolts[postgres]'``).
"""

from statefulbolts.connectors.postgres._config import (
    DEFAULT_MARKER_TABLE,
    DEFAULT_PUBLISH_TIMEOUT_MS,
    DSN_KEY,
    MARKER_TABLE_KEY,
    PUBLISH_TIMEOUT_KEY,
    TABLE_KEY,
    PostgresRefusedError,
    PostgresSinkConfig,
    PostgresSinkWriteError,
    PostgresUnavailableError,
    TableName,
)
from statefulbolts.connectors.postgres._sink import PostgresSink, Row

__all__ = [
    "DEFAULT_MARKER_TABLE",
    "DEFAULT_PUBLISH_TIMEOUT_MS",
    "DSN_KEY",
    "MARKER_TABLE_KEY",
    "PUBLISH_TIMEOUT_KEY",
    "TABLE_KEY",
    "PostgresRefusedError",
    "PostgresSink",
    "PostgresSinkConfig",
    "PostgresSinkWriteError",
    "PostgresUnavailableError",
    "Row",
    "TableName",
]

# The public home of the sink: what repr, pickle and messages name.
PostgresSink.__module__ = __name__
