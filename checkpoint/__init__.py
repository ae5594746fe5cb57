"""The checkpoint protocol: the spout's state machine, the bolt executors and the manifest.

The driver half, ``CheckpointRunner``, is the public module ``checkpoint.runner``: it runs
jobs on the engine (``statefulbolts.runtime``), which this face does not import.
"""

from checkpoint._base import BaseStatefulBoltExecutor
from checkpoint._collectors import AckTrackingOutputCollector, AnchoringOutputCollector
from checkpoint._expected import check_stored_txids, expected_committed
from checkpoint._manifest import MANIFEST_KEY, SpoutMessages, TransactionManifest
from checkpoint._state import Action, CheckPointState, TxPhase
from checkpoint.driver_commit import commit_hooks
from checkpoint.executor import StatefulBoltExecutor
from checkpoint.forwarder import CheckpointTupleForwarder
from checkpoint.spout import TX_STATE_KEY, CheckpointSpout
from checkpoint.task import CheckpointTask, CheckpointTaskProgram

__all__ = [
    "MANIFEST_KEY",
    "TX_STATE_KEY",
    "AckTrackingOutputCollector",
    "Action",
    "AnchoringOutputCollector",
    "BaseStatefulBoltExecutor",
    "CheckPointState",
    "CheckpointSpout",
    "CheckpointTask",
    "CheckpointTaskProgram",
    "CheckpointTupleForwarder",
    "SpoutMessages",
    "StatefulBoltExecutor",
    "TransactionManifest",
    "TxPhase",
    "check_stored_txids",
    "commit_hooks",
    "expected_committed",
]
