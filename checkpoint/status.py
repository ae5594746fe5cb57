"""Where a topology's checkpoint stands in its state provider, and what a restart would do.

The checkpoint protocol's report for tools (``statefulbolts checkpoint status | list``, the state
tool's export and import): what a restart runs is read off ``CheckPointState``'s transition
tables, the last committed txid off ``CheckPointState.committed_txid``. Read-only: it opens the
checkpoint spout's state (``<topology>/$checkpointspout-0``, key ``__state``, value ``[txid,
phase]``) and each stateful task's state (``<topology>/<bolt>-<task>``) and reports their
``committed_txid`` / ``prepared_txid``. The stateful tasks come from the topology (when given)
or from the provider's own list of the namespaces it holds (``StateProvider.namespaces``; none
when the provider cannot list). Every state is opened as a system state
(``StateFactory.get_system_state``): the spout's record is the framework's, and of a task's
state only the txids are read, so the user's key and value classes need not be importable.

``RECOVERY_ACTIONS`` is what a restarted driver's transaction events show of its recovery, for
``recovery.supervise``, from the same tables.

Example:
    >>> status = checkpoint_status(conf, "wordcount")  # doctest: +SKIP
    >>> print(status.checkpoint, status.on_restart)  # doctest: +SKIP
    COMMITTING(4) ['COMMIT(4)', 'INITSTATE(4)']
    >>> recovery_actions(CheckPointState(3, TxPhase.PREPARING))
    ['ROLLBACK(3)', 'INITSTATE(2)']
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from checkpoint._state import Action, CheckPointState, TxPhase
from checkpoint.spout import TX_STATE_KEY
from providers import KeyValueState, Lease, StateFactory, get_provider, provider_name
from recovery.lease import lease_as_dict, read_lease
from recovery.supervisor import RecoveryActions
from statefulbolts.namespaces import (
    RECORD_MARK,
    TRANSACTIONAL_ROOT,
    TaskNamespace,
    checkpoint_namespace,
    topology_prefix,
)
from statefulbolts.topology import StormTopology

__all__ = [
    "RECOVERY_ACTIONS",
    "CheckpointStatus",
    "TaskStatus",
    "checkpoint_status",
    "last_committed_txid",
    "provider_stateful_tasks",
    "recovery_actions",
    "stateful_tasks",
    "stored_topologies",
]

@dataclass(frozen=True)
class TaskStatus:
    """One stateful task's state: its last committed txid and its pending prepare, if any."""

    component: str
    task: int
    namespace: str
    committed_txid: int | None
    prepared_txid: int | None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return dict(self.__dict__)


@dataclass(frozen=True)
class CheckpointStatus:
    """The checkpoint spout's saved state, the recovery it implies, and every task's txids."""

    topology: str
    provider: str
    checkpoint: CheckPointState | None
    tasks: list[TaskStatus] = field(default_factory=list)
    # The topology's lease (one driver per topology): who runs it now, or ran it last.
    lease: Lease | None = None

    @property
    def on_restart(self) -> list[str]:
        """The recovery actions a restarted driver will run, e.g. ``['ROLLBACK(3)', ...]``."""
        return recovery_actions(self.checkpoint)

    @property
    def found(self) -> bool:
        """Whether the provider holds anything of this topology."""
        return self.checkpoint is not None or any(
            t.committed_txid is not None or t.prepared_txid is not None for t in self.tasks
        )

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        cp = self.checkpoint
        return {
            "topology": self.topology,
            "provider": self.provider,
            "checkpoint": None if cp is None else {"txid": cp.txid, "phase": cp.phase.value},
            "on_restart": self.on_restart,
            "tasks": [t.as_dict() for t in self.tasks],
            "lease": lease_as_dict(self.lease),
        }


def recovery_actions(saved: CheckPointState | None) -> list[str]:
    """What the checkpoint spout runs on start from ``saved`` (docs/protocol/checkpoint.md).

    ``PREPARING(t)``: ROLLBACK(t), INITSTATE(t-1); ``COMMITTING(t)``: COMMIT(t), INITSTATE(t);
    ``COMMITTED(t)``: INITSTATE(t); nothing saved: INITSTATE(-1).
    """
    state = saved or CheckPointState(-1, TxPhase.COMMITTED)
    actions: list[str] = []
    while True:
        action = state.next_action(True)
        actions.append(f"{action.value}({state.txid})")
        nxt = state.next_state(True)
        if nxt == state:
            return actions
        state = nxt


def _recovery_steps() -> RecoveryActions:
    """What a recovering checkpoint spout emits, and what ends its recovery, by its tables.

    A recovering spout's action from each phase (ROLLBACK, COMMIT, INITSTATE); the recovery
    ends with the action of the state it stays in (INITSTATE of COMMITTED); after it, an action
    that makes a transaction durable (COMMIT) is progress.
    """
    states = [CheckPointState(0, phase) for phase in TxPhase]
    return RecoveryActions(
        recovering=[s.next_action(True) for s in states],
        ends=[s.next_action(True) for s in states if s.next_state(True) == s],
        progress=[a for a in Action if a.makes_durable],
    )


# The checkpoint protocol's recovery as its driver's transaction events show it.
RECOVERY_ACTIONS = _recovery_steps()


def stateful_tasks(topology: StormTopology) -> list[tuple[str, int]]:
    """Every (stateful component id, task index) of ``topology``."""
    return [
        (cid, t)
        for cid, spec in sorted(topology.components.items())
        if spec.is_stateful
        for t in range(spec.parallelism)
    ]


def provider_stateful_tasks(conf: Mapping[str, Any], topology_name: str) -> list[tuple[str, int]]:
    """The (component, task) pairs whose state the configured provider holds for a topology.

    Asks the provider for the namespaces under ``<topology>/`` (``StateProvider.namespaces``)
    and keeps those named ``<component>-<task>``, the checkpoint spout's left out. A provider
    that cannot list gives none.

    Raises:
        ProviderConfigError, ProviderNotFoundError: the provider config is wrong.
        StateBackendError: the store could not be reached.
    """
    found = get_provider(conf).namespaces(conf, topology_prefix(topology_name))
    return [] if found is None else _parse_namespaces(topology_name, found)


def _parse_namespaces(topology_name: str, namespaces: Iterable[str]) -> list[tuple[str, int]]:
    found = set()
    prefix = topology_prefix(topology_name)
    for ns in namespaces:
        task = TaskNamespace.parse(prefix, ns)  # the framework's records ($...) are not tasks
        if task is not None and task.map is None:
            found.add((task.component, task.task))
    return sorted(found)


def _txids(state: Any) -> tuple[int | None, int | None]:
    return getattr(state, "committed_txid", None), getattr(state, "prepared_txid", None)


def checkpoint_status(
    conf: Mapping[str, Any],
    topology_name: str,
    tasks: Iterable[tuple[str, int]] | None = None,
) -> CheckpointStatus:
    """Read the checkpoint state and the task states of ``topology_name`` from the provider.

    ``tasks``: the (component, task index) pairs to read; by default those the provider lists
    (``provider_stateful_tasks``), none when it cannot list.

    Raises:
        ProviderConfigError, ProviderNotFoundError: the provider config is wrong.
        StateBackendError: the store could not be reached.
    """
    provider = provider_name(conf)
    cp_namespace = checkpoint_namespace(topology_prefix(topology_name))
    cp_state = StateFactory.get_system_state(cp_namespace, conf)
    saved = cp_state.get(TX_STATE_KEY) if isinstance(cp_state, KeyValueState) else None
    checkpoint = None if saved is None else CheckPointState.from_value(saved)
    if tasks is None:
        tasks = provider_stateful_tasks(conf, topology_name)
    rows = []
    for component, task in tasks:
        namespace = str(TaskNamespace.of_topology(topology_name, component, task))
        committed, prepared = _txids(StateFactory.get_system_state(namespace, conf))
        rows.append(TaskStatus(component, task, namespace, committed, prepared))
    lease = read_lease(conf, topology_prefix(topology_name))
    return CheckpointStatus(topology_name, provider, checkpoint, rows, lease)


def stored_topologies(conf: Mapping[str, Any]) -> list[CheckpointStatus] | None:
    """Every checkpointed topology the provider holds state of, by name, with its checkpoint.

    A topology is found by any namespace of it: a stateful task's (``T/<component>-<task>``)
    or a framework record's (``T/$...``). Each status has its checkpoint and no tasks
    (``checkpoint_status`` reads them). ``None`` when the provider cannot list.

    Raises:
        ProviderConfigError, ProviderNotFoundError: the provider config is wrong.
        StateBackendError: the store could not be reached.
    """
    listed = get_provider(conf).namespaces(conf, "")
    if listed is None:
        return None
    names = set()
    for namespace in listed:
        name, slash, last = namespace.rpartition("/")
        if not slash or name.split("/", 1)[0] == TRANSACTIONAL_ROOT:
            continue
        if last.startswith(RECORD_MARK) and _is_task(name):
            continue  # a task's own record (its timers, ``T/<component>-<task>/$timers``)
        if last.startswith(RECORD_MARK) or TaskNamespace.parse(topology_prefix(name), namespace):
            names.add(name)
    return [checkpoint_status(conf, name, tasks=[]) for name in sorted(names)]


def _is_task(namespace: str) -> bool:
    """Whether ``namespace`` is a stateful task's (``T/<component>-<task>``)."""
    parent, slash, _ = namespace.rpartition("/")
    return bool(slash) and TaskNamespace.parse(topology_prefix(parent), namespace) is not None


def last_committed_txid(checkpoint: CheckPointState | None) -> int | None:
    """The last txid every stateful task committed, by the checkpoint spout's saved state.

    ``COMMITTED(t)``: ``t``; ``PREPARING(t)`` and ``COMMITTING(t)``: ``t - 1`` (``t`` is not
    committed everywhere yet); nothing saved, or nothing committed yet: ``None``.

    Example:
        >>> last_committed_txid(CheckPointState(4, TxPhase.COMMITTING))
        3
        >>> last_committed_txid(CheckPointState(4, TxPhase.COMMITTED))
        4
    """
    return None if checkpoint is None else checkpoint.committed_txid
