"""Shared fixtures (a real redis-server, a Kafka broker, a PostgreSQL, one Spark session), markers.

Markers (``pyproject.toml``): ``spark`` for a test that starts Spark, ``redis`` for one that
needs a redis-server, ``kafka`` for one that needs the Kafka broker (``kafka_fixtures``),
``postgres`` for one that needs a PostgreSQL (``postgres_fixtures``), ``slow`` for a long
end-to-end scenario. A test that uses the ``spark``, ``redis_*``, ``kafka_*`` or ``postgres_*``
fixtures, directly or through another fixture, is marked here
(``pytest_collection_modifyitems``); one that starts a server another way (a subprocess,
a fixture parameter that asks for ``redis_db`` by name) carries the mark itself. ``scripts/test
--fast`` deselects them all and puts ``tests/no_servers`` first on ``PATH`` and as
``SPARK_HOME``, so a test that starts Spark, redis-server or PostgreSQL without its mark fails,
naming the mark to add.

The repository root goes on ``sys.path`` and on ``PYTHONPATH`` (for the processes the tests
start, Spark's Python workers included): the tests run the repository's ``examples`` package,
which an install carries only as ``statefulbolts.examples``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = str(Path(__file__).resolve().parent.parent)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
if ROOT not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (ROOT, os.environ.get("PYTHONPATH")) if p
    )

from kafka_fixtures import *  # noqa: E402, F403
from postgres_fixtures import *  # noqa: E402, F403
from redis_fixtures import *  # noqa: E402, F403
from spark_fixtures import *  # noqa: E402, F403

# The fixtures that start a server, and the mark a test that uses one gets.
MARK_OF_FIXTURE = {
    "spark": "spark",
    "cluster": "spark",
    "redis_server": "redis",
    "redis_db": "redis",
    "redis_server_factory": "redis",
    "kafka_broker": "kafka",
    "kafka_topic": "kafka",
    "postgres_server": "postgres",
    "postgres_db": "postgres",
    "postgres_server_factory": "postgres",
}


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by mark
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test by the server fixtures in its closure (``MARK_OF_FIXTURE``)."""
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        for mark in sorted({m for f, m in MARK_OF_FIXTURE.items() if f in used}):
            item.add_marker(mark)
