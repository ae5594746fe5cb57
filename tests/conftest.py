"""Shared fixtures: a real redis-server and one Spark session per test session."""

from redis_fixtures import *  # noqa: F403
from spark_fixtures import *  # noqa: F403
