"""What ``evolve`` needs from the protocol whose stored state it changes: ``StoredProgress``.

``evolve`` knows shapes, layout rules and the two-step move (stage, then swap); how a protocol
lays out its tasks' state and records how far its transactions got is the protocol's own. Each
protocol implements this interface in its package, and its driver (or the offline tool) passes
the implementation in; nothing in ``recovery`` imports a protocol.

- a checkpointed topology (``checkpoint.progress.CheckpointProgress``): a task's state is its
  namespace ``<component>-<task>``, read with the bolt's key and value classes, with its timers
  and windows beside it; every task is checked against the checkpoint and a transaction left
  half-way is settled as the checkpoint's recovery would settle it, so that all hold one
  committed txid ``T``, at which moved state is staged and new tasks are given empty state;
- a transactional id (``statefulbolts.transactional.progress.TransactionalProgress``): a
  committer task's state is one namespace per map, ``<component>-<task>/<map>``, plain msgpack;
  each value keeps the txid that wrote it, so nothing is checked or settled, a moved map keeps
  its sources' highest committed txid, and each map's opaque record is rebuilt for its new
  tasks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, NamedTuple, Protocol

from statefulbolts.state import LayoutRule

__all__ = ["StagedRecords", "StoredProgress"]


class StagedRecords(NamedTuple):
    """A protocol's own entries in a moving namespace: left out of the move, then rebuilt.

    ``skip`` names the stored keys the move leaves out; ``extra`` gives, per new task, the
    entries (already decoded) to write in their place. Neither: every entry moves.
    """

    skip: Callable[[Any], bool] | None = None
    extra: Callable[[], Mapping[int, Iterable[tuple[Any, Any]]]] | None = None


class StoredProgress(Protocol):
    """How one protocol stores its tasks' state and its progress (see the module docstring)."""

    @property
    def system(self) -> bool:
        """Whether its task namespaces are system states (plain msgpack, no user classes)."""

    @property
    def per_map(self) -> bool:
        """Whether a task's state is one namespace per map (``<component>-<task>/<map>``)."""

    @property
    def task_records(self) -> bool:
        """Whether its tasks keep timers and windows beside their state, to move with it."""

    @property
    def migration_refused(self) -> str | None:
        """Why a new ``state_version`` cannot be migrated (``None``: the bolt's hooks run)."""

    def check_and_settle(
        self,
        conf: Mapping[str, Any],
        prefix: str,
        label: str,
        namespaces: Sequence[str],
        *,
        settle: bool,
    ) -> int | None:
        """Check ``namespaces`` against the protocol's record; settle a half-way transaction.

        ``namespaces`` are every stored task's (its timers and windows too); ``label`` names the
        topology in messages. Settles only when ``settle`` (state is about to move). Returns the
        committed txid every task then holds, at which moved state is staged and new tasks get
        empty state (``None``: none, and nothing is given).

        Raises:
            StateLostError: a task's store does not hold what the protocol's record says.
        """

    def staged_txid(
        self, conf: Mapping[str, Any], sources: Sequence[str], settled: int | None
    ) -> int | None:
        """The committed txid a moved namespace is staged at, from its ``sources``.

        ``settled`` is what ``check_and_settle`` returned.
        """

    def records(
        self,
        conf: Mapping[str, Any],
        sources: Sequence[tuple[int, str]],
        rule: LayoutRule,
        parallelism: int,
    ) -> StagedRecords:
        """The protocol's own entries in one moving map of ``(task, namespace)`` ``sources``."""
