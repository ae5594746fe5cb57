"""A component's state as a Spark DataFrame: one partition per task, read where it runs.

Nothing is gathered in the driver: each partition is one task's namespace, and the Spark task
that computes it reads it from the store (Redis, a SQLite file, any provider the executors
reach) a page at a time. The in-memory provider's data lives in the driver, so its images are
shipped to the partitions (``DriverOwnedStateProvider.export_image``, installed in the Spark
task with ``begin_task``, as the runtime does for a topology's tasks).

pyspark is imported inside ``state_dataframe`` only: the rest of ``statefulbolts.state`` stays
usable without Spark.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from statefulbolts.errors import StateToolError
from statefulbolts.state._read import View
from statefulbolts.state._scope import Scope, component_tasks, driver_owned

__all__ = ["state_dataframe"]


def _text(value: Any, namespace: str, key: Any) -> str:
    """A str as it is; anything else as its JSON text."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False)
    except (TypeError, ValueError) as exc:
        msg = (
            f"namespace {namespace!r}, key {key!r}: a {type(value).__name__} has no JSON "
            "text; give the DataFrame column a Spark type instead of string"
        )
        raise StateToolError(msg) from exc


class _PartitionReader:
    """Reads the task namespaces of one partition into ``(task, key, value)`` rows.

    Pickled into every Spark task: it holds the config and the view, not the data.
    """

    def __init__(
        self, conf: Mapping[str, Any], view: View, key_text: bool, value_text: bool
    ) -> None:
        self.conf = dict(conf)
        self.view = view
        self.key_text, self.value_text = key_text, value_text

    def __call__(self, items: Iterable[tuple[int, str, bytes | None]]) -> Iterator[tuple[Any, ...]]:
        for task, namespace, image in items:
            owner = None
            if image is not None:
                owner = driver_owned(self.conf)
                if owner is not None:
                    owner.begin_task(namespace, {namespace: image})
            try:
                for row in self.view.rows(self.conf, task, namespace):
                    key = _text(row.key, namespace, row.key) if self.key_text else row.key
                    value = _text(row.value, namespace, row.key) if self.value_text else row.value
                    yield task, key, value
            finally:
                if owner is not None:
                    owner.end_task(namespace, [namespace])


def state_dataframe(
    spark: Any,
    conf: Mapping[str, Any],
    component: str,
    *,
    topology: str | None = None,
    transactional_id: str | None = None,
    map_name: str = "default",
    prepared: bool = False,
    raw: bool = False,
    key_type: str = "string",
    value_type: str = "string",
) -> Any:
    """A component's committed state as a DataFrame ``(task int, key, value)``.

    One partition per task of the component; each is read by the Spark task that computes it,
    so the state never passes through the driver (except the in-memory provider's, which lives
    there). Other arguments as for ``iter_state``.

    Args:
        spark: the SparkSession.
        conf: the topology's config, naming the provider.
        component: the stateful bolt (or committer) id.
        topology: the checkpointed topology's name; or
        transactional_id: the transactional topology's id.
        map_name: a committer's map, "default" by default.
        prepared: the state as of the prepared delta.
        raw: a committer map's stored form.
        key_type: the Spark SQL type of the ``key`` column (``"string"``, ``"bigint"``, ...).
            For ``"string"`` a str key stays itself and any other key becomes its JSON text.
        value_type: the same for the ``value`` column (e.g. ``"bigint"`` for counts).

    Raises:
        StateNotFoundError: nothing is stored for the component.
        StateToolError: a bad argument, or a provider the tool cannot read.
    """
    scope = Scope.of(topology, transactional_id)
    tasks = component_tasks(conf, scope, component, map_name)
    owner = driver_owned(conf)
    items = [
        (
            t.task,
            t.namespace,
            None if owner is None else owner.export_image(t.namespace),
        )
        for t in tasks
    ]
    reader = _PartitionReader(
        conf,
        View(scope, prepared, raw),
        key_type.strip().lower() == "string",
        value_type.strip().lower() == "string",
    )
    rdd = spark.sparkContext.parallelize(items, len(items)).mapPartitions(reader)
    return spark.createDataFrame(rdd, f"task INT, key {key_type}, value {value_type}")
