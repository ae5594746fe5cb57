"""Sinks: a topology's output written to an external system exactly once, with the checkpoint.

What every sink shares, whatever the system:

- ``Sink``: the contract an external system's client implements (``stage``, ``published``,
  ``publish`` with its idempotence rule, optionally ``write``), and ``Lane``, ``StagedBatch``,
  ``PublishResult``; the errors (``SinkError`` and below, ``SinkConfigError``);
- ``ExactlyOnceSinkBolt``: stages a transaction's records in its managed state while the
  transaction is prepared and publishes them when it commits, each lane's records with its
  marker in one atomic step of the target, so a replayed commit is a no-op;
- ``AtLeastOnceSinkBolt``: writes at once, for idempotent targets that prefer latency;
- ``staged_holdings`` and ``StagedKey``: how staged records sit in a sink task's state;
  ``sink_status`` reads them offline with each lane's marker (``statefulbolts sink status``).

Each system's sink lives with its sources: ``statefulbolts.connectors.kafka.KafkaSink``.

Example:
    >>> from statefulbolts.connectors.sinks import ExactlyOnceSinkBolt, Lane
    >>> Lane("wc", "publish", 0, 2).qualified()
    'wc.publish.0of2'
"""

from statefulbolts.connectors.sinks._api import (
    Lane,
    PublishResult,
    Sink,
    SinkConfigError,
    SinkError,
    SinkFencedError,
    SinkMarkerError,
    SinkPublishError,
    SinkStageError,
    StagedBatch,
)
from statefulbolts.connectors.sinks._bolt import (
    AtLeastOnceSinkBolt,
    ExactlyOnceSinkBolt,
    staged_holdings,
)
from statefulbolts.connectors.sinks._columns import StagedColumns
from statefulbolts.connectors.sinks._metrics import SINK_METRICS
from statefulbolts.connectors.sinks._staging import StagedKey, anchor_for
from statefulbolts.connectors.sinks._status import (
    LaneStatus,
    SinkTaskStatus,
    sink_bolts,
    sink_status,
    target_lanes,
)

__all__ = [
    "SINK_METRICS",
    "AtLeastOnceSinkBolt",
    "ExactlyOnceSinkBolt",
    "Lane",
    "LaneStatus",
    "PublishResult",
    "Sink",
    "SinkConfigError",
    "SinkError",
    "SinkFencedError",
    "SinkMarkerError",
    "SinkPublishError",
    "SinkStageError",
    "SinkTaskStatus",
    "StagedBatch",
    "StagedColumns",
    "StagedKey",
    "anchor_for",
    "sink_bolts",
    "sink_status",
    "staged_holdings",
    "target_lanes",
]

# The public home of the bolts: what repr, pickle and messages name.
AtLeastOnceSinkBolt.__module__ = __name__
ExactlyOnceSinkBolt.__module__ = __name__
