"""Recovery: fault injection, restarting a crashed driver, and reading where a checkpoint stands."""

from recovery.faults import FAULTS_KEY, FaultPlan, InjectedFault, KillPoint, TaskFault
from recovery.status import (
    CheckpointStatus,
    TaskStatus,
    checkpoint_status,
    recovery_actions,
    redis_stateful_tasks,
    stateful_tasks,
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
    "FaultPlan",
    "InjectedFault",
    "KillPoint",
    "RecoveryTracker",
    "RestartPolicy",
    "TaskFault",
    "TaskStatus",
    "checkpoint_status",
    "exit_status",
    "recovery_actions",
    "redis_stateful_tasks",
    "stateful_tasks",
    "supervise",
]
