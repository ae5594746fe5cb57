"""Where a transactional topology stands in its state provider (read-only).

Everything is found by transactional id under ``$transactional/<id>/``: the coordinator's
``currtx`` (the next txid to commit) and the metas of the txids it started, each partition's
metas by txid, and the committers' maps. The txids with a stored meta from ``currtx`` on are the
ones a restarted topology replays, with those metas, before it starts anything new.

Example:
    >>> status = transactional_status(conf, "top-n-words")  # doctest: +SKIP
    >>> status.current_txid, status.replays  # doctest: +SKIP
    (4, [4, 5])
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from providers import KeyValueState, Lease, StateFactory, get_provider, provider_name
from statefulbolts.namespaces import (
    TRANSACTIONAL_ROOT,
    TaskNamespace,
    coordinator_namespace,
    partition_of,
    transactional_prefix,
)
from statefulbolts.transactional._coordinator import CURRTX_KEY, FIRST_TXID, META_PREFIX
from statefulbolts.transactional._txstate import RotatingTransactionalState

__all__ = ["TransactionalStatus", "stored_transactional_ids", "transactional_status"]

@dataclass(frozen=True)
class TransactionalStatus:
    """A transactional id's progress: next txid, stored metas, partitions, committer maps."""

    transactional_id: str
    provider: str
    current_txid: int
    metas: dict[int, Any]
    partitions: dict[int, dict[int, Any]] = field(default_factory=dict)
    maps: list[str] = field(default_factory=list)
    # The id's lease (one driver per transactional id): who runs it now, or ran it last.
    lease: Lease | None = None

    @property
    def found(self) -> bool:
        """Whether the provider holds anything of this transactional id."""
        return bool(self.metas or self.partitions or self.maps) or self.current_txid > FIRST_TXID

    @property
    def committed_txid(self) -> int | None:
        """The last committed txid (``None`` before the first commit)."""
        return None if self.current_txid <= FIRST_TXID else self.current_txid - 1

    @property
    def replays(self) -> list[int]:
        """The txids a restart replays with their stored metas (started, not committed)."""
        return sorted(t for t in self.metas if t >= self.current_txid)

    def as_dict(self) -> dict[str, Any]:
        """A JSON-friendly dict."""
        return {
            "transactional_id": self.transactional_id,
            "provider": self.provider,
            "current_txid": self.current_txid,
            "committed_txid": self.committed_txid,
            "replays": self.replays,
            "metas": {str(t): m for t, m in sorted(self.metas.items())},
            "partitions": {
                str(p): {str(t): m for t, m in sorted(metas.items())}
                for p, metas in sorted(self.partitions.items())
            },
            "maps": self.maps,
            "lease": _lease_as_dict(self.lease),
        }


def transactional_status(conf: Mapping[str, Any], transactional_id: str) -> TransactionalStatus:
    """Read where ``transactional_id`` stands from the provider ``conf`` names.

    Partitions and maps are listed with the provider's ``namespaces`` capability; a provider
    that cannot list shows the coordinator's state only.

    Raises:
        ProviderConfigError, ProviderNotFoundError: the provider config is wrong.
        StateBackendError: the store could not be reached.
    """
    prefix = transactional_prefix(transactional_id)
    coordinator = _state(coordinator_namespace(prefix), conf)
    currtx = coordinator.get(CURRTX_KEY)
    metas = RotatingTransactionalState(coordinator, strict=True, prefix=META_PREFIX)
    listed = get_provider(conf).namespaces(conf, prefix) or []
    partitions: dict[int, dict[int, Any]] = {}
    maps: list[str] = []
    for namespace in listed:
        partition = partition_of(prefix, namespace)
        if partition is not None:
            store = RotatingTransactionalState(_state(namespace, conf), strict=False, prefix="")
            partitions[partition] = {t: store.get(t) for t in store.txids()}
        elif (task := TaskNamespace.parse(prefix, namespace)) is not None and task.map:
            maps.append(namespace)
    return TransactionalStatus(
        transactional_id,
        provider_name(conf),
        currtx if isinstance(currtx, int) else FIRST_TXID,
        {t: metas.get(t) for t in metas.txids()},
        partitions,
        maps,
        _read_lease(conf, prefix),
    )


def stored_transactional_ids(conf: Mapping[str, Any]) -> list[str] | None:
    """The transactional ids whose coordinator's state the provider holds, sorted.

    ``None`` when the provider cannot list its namespaces.

    Raises:
        ProviderConfigError, ProviderNotFoundError: the provider config is wrong.
        StateBackendError: the store could not be reached.
    """
    root = f"{TRANSACTIONAL_ROOT}/"
    listed = get_provider(conf).namespaces(conf, root)
    if listed is None:
        return None
    ids = set()
    for namespace in listed:
        tid = namespace[len(root) :].partition("/")[0]  # an id has no "/" (the builder checks)
        if namespace == coordinator_namespace(transactional_prefix(tid)):
            ids.add(tid)
    return sorted(ids)


# The lease helpers are imported where used: this package is imported with ``statefulbolts``
# (and so in every Spark worker), and a status report is the tools' only.
def _read_lease(conf: Mapping[str, Any], scope: str) -> Lease | None:
    from recovery.lease import read_lease

    return read_lease(conf, scope)


def _lease_as_dict(lease: Lease | None) -> dict[str, Any] | None:
    from recovery.lease import lease_as_dict

    return lease_as_dict(lease)


def _state(namespace: str, conf: Mapping[str, Any]) -> KeyValueState:
    state = StateFactory.get_system_state(namespace, conf)
    assert isinstance(state, KeyValueState)  # noqa: S101 - every provider makes key-value states
    return state
