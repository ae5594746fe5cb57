"""``TopologyContext``: what a task knows about itself and the topology."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Protocol, TypeVar

from statefulbolts.metrics import Metric, check_metric_name
from statefulbolts.namespaces import TaskNamespace
from statefulbolts.streams import GlobalStreamId, Grouping, InputSpec
from statefulbolts.tuples import Fields

M = TypeVar("M", bound=Metric)


class ComponentView(Protocol):
    """What a context reads of one component of the topology."""

    @property
    def outputs(self) -> Mapping[str, Fields]:
        """Declared streams and their fields."""


class TopologyView(Protocol):
    """What a context reads of the topology (``StormTopology`` is one)."""

    def task_ids(self, component_id: str) -> tuple[int, ...]:
        """Global task ids of a component."""

    def component_of_task(self, task_id: int) -> str:
        """The component running a global task id."""

    def inputs(self, component_id: str) -> tuple[InputSpec, ...]:
        """A bolt's inputs."""

    def component(self, component_id: str) -> ComponentView:
        """One component."""


class TopologyContext:
    """Given to ``open`` and ``prepare``.

    Example:
        >>> from statefulbolts.testing import make_context
        >>> ctx = make_context("count", task_index=1, parallelism=2)
        >>> ctx.this_component_id, ctx.this_task_index, len(ctx.component_tasks("count"))
        ('count', 1, 2)
    """

    def __init__(
        self, topology: TopologyView, topology_name: str, component_id: str, task_index: int
    ) -> None:
        self.topology = topology
        self.topology_name = topology_name
        self.this_component_id = component_id
        self.this_task_index = task_index
        self.this_task_id = topology.task_ids(component_id)[task_index]
        self._metrics: dict[str, Metric] = {}

    def component_tasks(self, component_id: str) -> list[int]:
        """Global task ids of ``component_id``."""
        return list(self.topology.task_ids(component_id))

    def component_id(self, task_id: int) -> str:
        """The component that runs global task ``task_id``."""
        return self.topology.component_of_task(task_id)

    @property
    def this_sources(self) -> dict[GlobalStreamId, Grouping]:
        """The inputs of this component (``$checkpoint`` inputs included), with groupings."""
        return {i.source: i.grouping for i in self.topology.inputs(self.this_component_id)}

    def sending_tasks(self, source: GlobalStreamId) -> list[int]:
        """The tasks of ``source``'s component whose tuples on that input can reach this task.

        All of them, unless the input's grouping chains (``Grouping.chains``): then the one
        with this task's index.
        """
        tasks = self.component_tasks(source.component_id)
        if self.this_sources[source].chains(len(tasks), len(self.this_component_tasks)):
            return [tasks[self.this_task_index]]
        return tasks

    def component_output_fields(self, component_id: str, stream_id: str = "default") -> Fields:
        """The fields ``component_id`` declared for ``stream_id``."""
        return self.topology.component(component_id).outputs[stream_id]

    @property
    def this_component_tasks(self) -> list[int]:
        """Global task ids of this component."""
        return self.component_tasks(self.this_component_id)

    def state_namespace(self) -> str:
        """``<topology>/<component>-<task index>``: where this task's state lives."""
        return str(
            TaskNamespace.of_topology(
                self.topology_name, self.this_component_id, self.this_task_index
            )
        )

    def register_metric(self, name: str, metric: M) -> M:
        """Count ``metric`` for this task under ``name``; returns it (``statefulbolts.metrics``).

        Registering a name again replaces the metric.

        Raises:
            ValueError: ``name`` is not a metric name.
            TypeError: ``metric`` is not a ``Metric``.
        """
        check_metric_name(name)
        if not isinstance(metric, Metric):
            msg = f"metric {name!r} must be a statefulbolts.metrics.Metric, got {metric!r}"
            raise TypeError(msg)
        self._metrics[name] = metric
        return metric

    def take_metric_values(self) -> tuple[tuple[str, float], ...]:
        """Each registered metric's value since the last take (the runtime's, at a task's end).

        Metrics that counted nothing are left out.
        """
        values = ((name, m.value_and_reset()) for name, m in sorted(self._metrics.items()))
        return tuple((name, value) for name, value in values if value)

    def __repr__(self) -> str:
        return (
            f"TopologyContext(topology={self.topology_name!r}, "
            f"component={self.this_component_id!r}, task_index={self.this_task_index})"
        )
