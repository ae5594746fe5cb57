"""What ``StatefulBoltExecutor`` and ``CheckpointTupleForwarder`` share: checkpoint barriers."""

from __future__ import annotations

import logging
from abc import abstractmethod
from collections.abc import Mapping
from typing import Any

from checkpoint._state import Action
from statefulbolts.collectors import OutputCollector
from statefulbolts.components import Bolt, OutputFieldsDeclarer
from statefulbolts.context import TopologyContext
from statefulbolts.errors import CheckpointError
from statefulbolts.topology import CHECKPOINT_FIELDS, CHECKPOINT_STREAM_ID
from statefulbolts.tuples import Tuple

log = logging.getLogger(__name__)


class BaseStatefulBoltExecutor(Bolt):
    """Counts ``$checkpoint`` tuples per (action, txid) and per source task; acts when all arrived.

    Differences from Storm, deliberate: a duplicate from one input task cannot stand in for a
    missing one from another, and all partial counts are dropped once a checkpoint is processed
    (the spout never emits the next action before the current tree completes, so any partial count
    left at that point is stale).
    """

    def __init__(self, bolt: Bolt) -> None:
        self.bolt = bolt
        self._collector: OutputCollector | None = None
        self._context: TopologyContext | None = None
        self._input_tasks: frozenset[int] = frozenset()
        self._arrived: dict[tuple[Action, int], set[int]] = {}
        self._last_txid: int | None = None

    def declare_output_fields(self, declarer: OutputFieldsDeclarer) -> None:
        """The wrapped bolt's streams plus ``$checkpoint``."""
        self.bolt.declare_output_fields(declarer)
        if CHECKPOINT_STREAM_ID not in declarer.streams:
            declarer.declare_stream(CHECKPOINT_STREAM_ID, CHECKPOINT_FIELDS)

    def init(self, context: TopologyContext, collector: OutputCollector) -> None:
        """Remember the raw collector and which tasks send this component checkpoints."""
        self._context = context
        self._collector = collector
        tasks: set[int] = set()
        for source in context.this_sources:
            if source.stream_id == CHECKPOINT_STREAM_ID:
                tasks.update(context.sending_tasks(source))
        self._input_tasks = frozenset(tasks)

    @property
    def collector(self) -> OutputCollector:
        """The raw collector given by the runtime."""
        if self._collector is None:
            msg = f"{type(self).__name__} used before prepare"
            raise CheckpointError(msg)
        return self._collector

    def execute(self, tuple: Tuple) -> None:  # noqa: A002
        """Route ``$checkpoint`` tuples to the barrier logic and data tuples to ``handle_tuple``."""
        if tuple.source_stream_id == CHECKPOINT_STREAM_ID:
            self._process_checkpoint(tuple)
        else:
            self.handle_tuple(tuple)

    def _process_checkpoint(self, cp: Tuple) -> None:
        action = Action(cp.get_value_by_field("action"))
        txid = int(cp.get_value_by_field("txid"))
        key = (action, txid)
        seen = self._arrived.setdefault(key, set())
        seen.add(cp.source_task)
        if not seen >= self._input_tasks:
            self.collector.ack(cp)  # wait for the other input tasks
            return
        self._arrived.clear()
        if self._last_txid is not None and txid < self._last_txid:
            log.debug("ignoring stale %s(%s); last txid %s", action.value, txid, self._last_txid)
            self.collector.ack(cp)
            return
        try:
            self.handle_checkpoint(cp, action, txid)
        except Exception as exc:  # noqa: BLE001 - any failure fails the checkpoint, as in Storm
            ctx = self._context
            where = f"{ctx.this_component_id!r} task {ctx.this_task_index}" if ctx else "?"
            log.warning("%s(%s) failed in component %s: %s", action.value, txid, where, exc)
            self.collector.fail(cp)
            self.collector.report_error(exc)
            return
        self._last_txid = txid - 1 if action is Action.ROLLBACK else txid

    def forward(self, cp: Tuple, action: Action, txid: int) -> None:
        """Emit the checkpoint downstream anchored to ``cp``, then ack ``cp``."""
        self.collector.emit([txid, action.value], [cp], CHECKPOINT_STREAM_ID)
        self.collector.ack(cp)

    @abstractmethod
    def handle_checkpoint(self, cp: Tuple, action: Action, txid: int) -> None:
        """Act on a checkpoint that every input task has delivered."""

    @abstractmethod
    def handle_tuple(self, tuple_: Tuple) -> None:
        """Act on a data tuple."""

    def cleanup(self) -> None:
        """Clean up the wrapped bolt."""
        self.bolt.cleanup()

    def get_component_configuration(self) -> Mapping[str, Any] | None:
        """Delegate to the wrapped bolt."""
        return self.bolt.get_component_configuration()
