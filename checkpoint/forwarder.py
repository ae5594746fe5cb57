"""``CheckpointTupleForwarder``: runs a non-stateful bolt in a stateful topology."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from checkpoint._base import BaseStatefulBoltExecutor
from checkpoint._collectors import AnchoringOutputCollector
from checkpoint._state import Action
from statefulbolts.collectors import OutputCollector
from statefulbolts.context import TopologyContext
from statefulbolts.tuples import Tuple


class CheckpointTupleForwarder(BaseStatefulBoltExecutor):
    """Passes data tuples straight to the bolt and forwards every checkpoint action.

    The bolt acks and anchors for itself (a ``BasicBolt`` does so automatically); unanchored emits
    are refused.
    """

    def prepare(
        self, conf: Mapping[str, Any], context: TopologyContext, collector: OutputCollector
    ) -> None:
        """Prepare the bolt with an anchoring collector."""
        self.init(context, collector)
        self.bolt.prepare(conf, context, AnchoringOutputCollector(collector, context))

    def handle_tuple(self, tuple_: Tuple) -> None:
        """Execute at once; there is no state to wait for."""
        self.bolt.execute(tuple_)

    def handle_checkpoint(self, cp: Tuple, action: Action, txid: int) -> None:
        """Forward the checkpoint, whatever the action."""
        self.forward(cp, action, txid)
