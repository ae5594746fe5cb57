"""Metrics a component counts in its tasks and the driver adds up (Storm's ``registerMetric``).

A bolt registers a metric in ``prepare`` (``TopologyContext.register_metric``) and adds to it
while its task runs. When the task ends, the runtime takes each metric's value (and resets it)
and sends it back with the task's report; the driver adds the values of every task of the
component, so a metric is a counter per component, from the start of the run. It reaches
``handle.metrics()`` and the dashboard under the component (``metrics``), and Prometheus as
``statefulbolts_<name>_total{topology, component}``.

A task that fails sends nothing back: its counts are lost with its work, and the retry counts
again. Names are lowercase words joined by ``_`` (``sink_records_published``).

Example:
    >>> from statefulbolts.testing import make_context
    >>> context = make_context("publish")
    >>> sent = context.register_metric("sink_records_published", CountMetric())
    >>> sent.incr(3)
    >>> sent.incr()
    >>> context.take_metric_values()
    (('sink_records_published', 4),)
    >>> context.take_metric_values()  # taken: nothing until the next count
    ()
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod

__all__ = ["METRIC_NAME", "METRIC_PREFIX", "CountMetric", "Metric", "check_metric_name"]

METRIC_NAME = re.compile(r"[a-z][a-z0-9_]{0,99}")
# Where the driver keeps a component's metric beside its counters: ``metric.<name>``.
METRIC_PREFIX = "metric."


def check_metric_name(name: object) -> str:
    """``name`` if it is a metric name (lowercase words joined by ``_``).

    Raises:
        ValueError: it is not.
    """
    if not isinstance(name, str) or not METRIC_NAME.fullmatch(name):
        msg = f"a metric name is lowercase letters, digits and '_' (a letter first), got {name!r}"
        raise ValueError(msg)
    return name


class Metric(ABC):
    """A figure a task counts; the runtime takes it when the task ends."""

    @abstractmethod
    def value_and_reset(self) -> float:
        """The value counted since the last call, and start again from nothing."""


class CountMetric(Metric):
    """A count (or a sum of seconds): ``incr(by)``."""

    __slots__ = ("_value",)

    def __init__(self) -> None:
        self._value: float = 0

    def incr(self, by: float = 1) -> None:
        """Add ``by``."""
        self._value += by

    def value_and_reset(self) -> float:
        """The sum since the last call."""
        value, self._value = self._value, 0
        return value
