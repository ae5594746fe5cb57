"""Choosing the engine that runs a topology's jobs: ``"spark"`` or ``"inline"``.

A protocol's runner asks ``open_engine`` for its topology's engine by name; ``LocalCluster``
passes the name it was built with (``LocalCluster(engine="inline")``).

Example:
    >>> from examples.wordcount import build
    >>> engine = open_engine("inline", None, build(10), "wc", {})
    >>> type(engine).__name__
    'InlineEngine'
    >>> open_engine("flink", None, build(10), "wc", {})
    Traceback (most recent call last):
    ...
    statefulbolts.errors.ConfigError: unknown engine 'flink' for topology 'wc': expected one of ...
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statefulbolts.errors import ConfigError, TopologyError
from statefulbolts.runtime._engine import Engine
from statefulbolts.runtime._inline import InlineEngine
from statefulbolts.runtime._spark_engine import SparkEngine
from statefulbolts.topology import StormTopology

__all__ = ["ENGINES", "open_engine"]

# Every engine, by the name a runner or a LocalCluster is given, with what it is.
ENGINES = {
    "spark": "jobs on a SparkSession",
    "inline": "jobs in this process, no Spark",
}


def open_engine(
    kind: str,
    spark: Any,
    topology: StormTopology,
    name: str,
    conf: Mapping[str, Any],
    **options: Any,
) -> Engine:
    """The engine ``kind`` for ``topology`` (``spark``: on the SparkSession ``spark``).

    ``options`` go to the engine (``faults``, ``max_jobs``, ``lead``, ``tasks_run_spouts``,
    ``key_groups``).

    Raises:
        ConfigError: ``kind`` is no engine's name.
        TopologyError: the Spark engine was asked for without a SparkSession.
    """
    if kind == "inline":
        return InlineEngine(topology, name, conf, **options)
    if kind == "spark":
        if spark is None:
            msg = (
                f"topology {name!r}: the spark engine needs a SparkSession; pass one, or "
                "use engine='inline' to run the jobs in this process"
            )
            raise TopologyError(msg)
        return SparkEngine(spark, topology, name, conf, **options)
    known = ", ".join(f"{k!r} ({what})" for k, what in ENGINES.items())
    msg = f"unknown engine {kind!r} for topology {name!r}: expected one of {known}"
    raise ConfigError(msg)
