"""Recovery: retries and outage waits, fault injection, restarting a crashed driver.

Also changing the stored state's shape. What is a protocol's own stays in its package: the
checkpoint's transaction manifest (``checkpoint.TransactionManifest``) and its status report
(``checkpoint.status``: where a checkpoint stands, what a restart runs).
"""

from recovery.evolve import (
    EvolutionPlan,
    EvolutionReport,
    StagedRecords,
    StoredProgress,
    Wanted,
    evolve,
    plan_evolution,
    wanted_shapes,
)
from recovery.faults import (
    FAULTS_KEY,
    FaultPlan,
    InjectedFault,
    KillPoint,
    TaskFault,
    fault_listener,
)
from recovery.gate import FailureGate
from recovery.retry import RetryBudget, RetryPolicy, backend_outage, transaction_retries
from recovery.supervisor import (
    BAD_INPUT_EXIT_CODE,
    TIMEOUT_EXIT_CODE,
    RecoveryActions,
    RecoveryTracker,
    RestartPolicy,
    exit_status,
    supervise,
)

__all__ = [
    "BAD_INPUT_EXIT_CODE",
    "FAULTS_KEY",
    "TIMEOUT_EXIT_CODE",
    "EvolutionPlan",
    "EvolutionReport",
    "FailureGate",
    "FaultPlan",
    "InjectedFault",
    "KillPoint",
    "RecoveryActions",
    "RecoveryTracker",
    "RestartPolicy",
    "RetryBudget",
    "RetryPolicy",
    "StagedRecords",
    "StoredProgress",
    "TaskFault",
    "Wanted",
    "backend_outage",
    "evolve",
    "exit_status",
    "fault_listener",
    "plan_evolution",
    "supervise",
    "transaction_retries",
    "wanted_shapes",
]

# The checkpoint protocol's status report moved to its package; the names say where.
_MOVED = {
    name: "checkpoint.status"
    for name in (
        "CheckpointStatus",
        "TaskStatus",
        "checkpoint_status",
        "last_committed_txid",
        "provider_stateful_tasks",
        "recovery_actions",
        "stateful_tasks",
        "stored_topologies",
    )
}


def __getattr__(name: str) -> object:
    home = _MOVED.get(name)
    if home is not None:
        msg = (
            f"recovery.{name} is the checkpoint protocol's and moved to {home}: "
            f"from {home} import {name}"
        )
        raise AttributeError(msg)
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
