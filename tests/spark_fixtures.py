"""One local[2] SparkSession for the whole test session, bound to 127.0.0.1."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    """The shared session (``local[2,4]``: two cores, four attempts per task)."""
    from statefulbolts.runtime import build_session

    session = build_session("local[2]", app_name="statefulbolts-tests")
    yield session
    session.stop()


@pytest.fixture
def cluster(spark):
    """A ``LocalCluster`` on the shared session; kills its topologies after the test."""
    from statefulbolts import LocalCluster

    c = LocalCluster(spark=spark)
    yield c
    c.shutdown()
