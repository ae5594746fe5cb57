"""What a cluster's executors see, and how Spark labelled a driver's jobs: for the cluster tests.

Used by the drivers of ``tests/cli/test_cluster_submit.py`` (``cluster_driver.py``,
``submit_app.py``) inside their Spark application. ``executor_views`` runs a small job whose tasks
report their Python (``sys.executable``), where ``statefulbolts`` imports from (or the error
importing it), their working directory and ``PYTHONPATH``. This module is pickled by value
(registered with cloudpickle), so executors need no file of this checkout to run it. ``spark_jobs``
reads every job's description, group and status from the driver's own REST API (``/api/v1``).
"""

from __future__ import annotations

import json
import sys
import urllib.request
from collections.abc import Iterator
from typing import Any

PROBE_GROUP = "probe"


def _view(_: Iterator[Any]) -> Iterator[dict[str, str]]:
    import os
    import sys

    try:
        import statefulbolts

        where = str(statefulbolts.__file__)
    except ImportError as exc:
        where = f"{type(exc).__name__}: {exc}"
    yield {
        "python": sys.executable,
        "statefulbolts": where,
        "cwd": os.getcwd(),
        "pythonpath": os.environ.get("PYTHONPATH", ""),
    }


def executor_views(sc: Any, tasks: int = 4) -> list[dict[str, str]]:
    """One report per task of a ``tasks``-partition job (job group ``probe``)."""
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    sc.setJobGroup(PROBE_GROUP, "executor probe")  # this thread's later jobs too: none here
    return sc.parallelize(range(tasks), tasks).mapPartitions(_view).collect()


def spark_jobs(sc: Any) -> list[dict[str, Any]]:
    """Every job the driver's UI keeps: ``jobId``, ``description``, ``jobGroup``, ``status``."""
    url = f"{sc.uiWebUrl}/api/v1/applications/{sc.applicationId}/jobs"
    with urllib.request.urlopen(url, timeout=30) as reply:  # noqa: S310 - the driver's loopback UI
        jobs = json.loads(reply.read())
    keys = ("jobId", "description", "jobGroup", "jobTags", "status")
    return [{k: job.get(k) for k in keys} for job in jobs]
