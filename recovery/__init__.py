"""Recovery: retries and outage waits, fault injection, restarting a crashed driver.

Also changing the stored state's shape, and reading where a checkpoint stands. The checkpoint
protocol's transaction manifest is ``checkpoint``'s (``checkpoint.TransactionManifest``).
"""

from recovery.evolve import (
    EvolutionPlan,
    EvolutionReport,
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
from recovery.status import (
    CheckpointStatus,
    TaskStatus,
    checkpoint_status,
    last_committed_txid,
    provider_stateful_tasks,
    recovery_actions,
    stateful_tasks,
    stored_topologies,
)
from recovery.supervisor import (
    BAD_INPUT_EXIT_CODE,
    TIMEOUT_EXIT_CODE,
    RecoveryTracker,
    RestartPolicy,
    exit_status,
    supervise,
)

__all__ = [
    "BAD_INPUT_EXIT_CODE",
    "FAULTS_KEY",
    "TIMEOUT_EXIT_CODE",
    "CheckpointStatus",
    "EvolutionPlan",
    "EvolutionReport",
    "FailureGate",
    "FaultPlan",
    "InjectedFault",
    "KillPoint",
    "RecoveryTracker",
    "RestartPolicy",
    "RetryBudget",
    "RetryPolicy",
    "TaskFault",
    "TaskStatus",
    "Wanted",
    "backend_outage",
    "checkpoint_status",
    "evolve",
    "exit_status",
    "fault_listener",
    "last_committed_txid",
    "plan_evolution",
    "provider_stateful_tasks",
    "recovery_actions",
    "stateful_tasks",
    "stored_topologies",
    "supervise",
    "transaction_retries",
    "wanted_shapes",
]
