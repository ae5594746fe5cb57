"""Recovery: fault injection for tests and demos (more to come: restart policy)."""

from recovery.faults import FAULTS_KEY, FaultPlan, InjectedFault, KillPoint, TaskFault

__all__ = ["FAULTS_KEY", "FaultPlan", "InjectedFault", "KillPoint", "TaskFault"]
