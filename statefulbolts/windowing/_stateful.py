"""``BaseStatefulWindowedBolt``: a windowed bolt with a ``KeyValueState`` of its own."""

from __future__ import annotations

from abc import abstractmethod
from typing import TYPE_CHECKING, Any

from statefulbolts.windowing._bolt import BaseWindowedBolt

if TYPE_CHECKING:
    from providers import KeyValueState


class BaseStatefulWindowedBolt(BaseWindowedBolt):
    """A windowed bolt that also keeps state, as Storm's ``BaseStatefulWindowedBolt``.

    ``init_state(state)`` receives the task's ``KeyValueState`` restored to the last commit,
    before any window fires; what ``execute(window)`` writes there is committed with the
    checkpoint, together with the windows themselves. The hooks ``pre_prepare``,
    ``pre_commit`` and ``pre_rollback`` run as a ``StatefulBolt``'s do. Every windowed bolt's
    windows are checkpointed; this class adds the state for the bolt's own results.

    Example:
        >>> from statefulbolts.windowing import Count
        >>> class RunningTotal(BaseStatefulWindowedBolt):
        ...     def init_state(self, state):
        ...         self.totals = state
        ...     def execute(self, window):
        ...         total = self.totals.get("total", 0) + sum(t.get_value(0) for t in window)
        ...         self.totals.put("total", total)
        >>> print(RunningTotal().with_tumbling_window(Count(10)).window_config())
        tumbling window of 10 tuples (processing time)
    """

    @abstractmethod
    def init_state(self, state: KeyValueState) -> None:
        """Receive the bolt's state, restored to the last committed checkpoint."""

    def grouping_key(self, state_key: Any) -> Any:
        """The grouped value(s) ``state_key`` belongs to (see ``StatefulBolt.grouping_key``)."""
        return state_key

    def pre_prepare(self, txid: int) -> None:  # noqa: B027
        """Called before the state's ``prepare_commit(txid)``."""

    def pre_commit(self, txid: int) -> None:  # noqa: B027
        """Called before the state's ``commit(txid)``."""

    def pre_rollback(self) -> None:  # noqa: B027
        """Called before the state's ``rollback()``."""
