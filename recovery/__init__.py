"""Recovery: retries and outage waits, chaos testing (fault injection), restarting a driver.

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
from recovery.faults import FAULTS_KEY, Attempts, FaultKind, FaultPlan, InjectedFault, TaskFault
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
    "Attempts",
    "EvolutionPlan",
    "EvolutionReport",
    "FailureGate",
    "FaultKind",
    "FaultPlan",
    "InjectedFault",
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
    "plan_evolution",
    "supervise",
    "transaction_retries",
    "wanted_shapes",
]

# Names that moved, and why: the checkpoint protocol's status report went to its package; the
# fault points went down beside the listener interface, where the engine can name them.
_MOVED = {
    name: ("checkpoint.status", "is the checkpoint protocol's")
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
_MOVED["KillPoint"] = ("statefulbolts.listeners", "is a fault point of the listener interface")


def __getattr__(name: str) -> object:
    moved = _MOVED.get(name)
    if moved is not None:
        home, why = moved
        msg = f"recovery.{name} {why} and moved to {home}: from {home} import {name}"
        raise AttributeError(msg)
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
