"""A transactional id's stored progress, for changing its stored state (``recovery.evolve``).

``TransactionalProgress`` is the transactional protocol's ``recovery.StoredProgress``. A
committer task's state is one namespace per map (``$transactional/<id>/<component>-<task>/
<map>``), plain msgpack (``StateBackingMap``): each value is stored with the txid that wrote it,
so there is no record of the id's progress to check the maps against and no transaction to
settle; a moved map keeps its sources' highest committed txid. Each map's opaque record
(``OpaqueMap``: ``[t, keys]``, the keys a commit attempt of ``t`` wrote) does not move as an
entry: each new task gets the keys of the newest ``t`` it now owns. Migrating a committer's
maps to a new ``state_version`` is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from recovery.evolve import StagedRecords
from statefulbolts.state import LayoutRule, open_image
from statefulbolts.transactional._maps import _RECORD_KEY

__all__ = ["TransactionalProgress"]

_NO_MIGRATION = (
    "migrating a committer's maps is not supported; keep state_version, or export, rewrite and "
    "import the maps (statefulbolts state export / import)"
)


@dataclass(frozen=True)
class TransactionalProgress:
    """The transactional protocol's stored progress (see the module docstring).

    Example:
        >>> progress = TransactionalProgress()
        >>> progress.per_map, progress.task_records
        (True, False)
    """

    system: bool = True  # committer maps: plain msgpack
    per_map: bool = True  # <component>-<task>/<map>
    task_records: bool = False  # no timers or windows
    migration_refused: str | None = _NO_MIGRATION

    def check_and_settle(
        self,
        conf: Mapping[str, Any],
        prefix: str,
        label: str,
        namespaces: Sequence[str],
        *,
        settle: bool,
    ) -> int | None:
        """Nothing to check or settle: every value keeps the txid that wrote it."""
        return None

    def staged_txid(
        self, conf: Mapping[str, Any], sources: Sequence[str], settled: int | None
    ) -> int | None:
        """The highest committed txid of the map's ``sources`` (``None``: none committed)."""
        txids = [open_image(conf, ns, True).stored_txids()[0] for ns in sources]
        known = [t for t in txids if t is not None]
        return max(known) if known else None

    def records(
        self,
        conf: Mapping[str, Any],
        sources: Sequence[tuple[int, str]],
        rule: LayoutRule,
        parallelism: int,
    ) -> StagedRecords:
        """The map's opaque record: left out of the move, rebuilt per new task."""
        return StagedRecords(
            skip=lambda key: key == _RECORD_KEY,
            extra=_opaque_records(conf, sources, rule, parallelism),
        )


def _opaque_records(
    conf: Mapping[str, Any], sources: Sequence[tuple[int, str]], rule: LayoutRule, p: int
) -> Callable[[], Mapping[int, Iterable[tuple[Any, Any]]]]:
    """The record each new task of a map gets (see ``OpaqueMap``).

    A record ``[t, keys]`` names the keys a commit attempt of ``t`` wrote; only the newest
    ``t`` can matter (older ones are committed). Each new task gets the keys of that ``t`` it
    now owns.
    """

    def records() -> Mapping[int, Iterable[tuple[Any, Any]]]:
        found: list[tuple[int, list[Any]]] = []
        for _, ns in sources:
            plain = open_image(conf, ns, True).get_committed(_RECORD_KEY)
            if isinstance(plain, list | tuple) and len(plain) == 2 and isinstance(plain[1], list):
                found.append((int(plain[0]), list(plain[1])))
        if not found:
            return {}
        newest = max(t for t, _ in found)
        out: dict[int, list[Any]] = {task: [] for task in range(p)}
        for t, keys in found:
            if t != newest:
                continue
            for key in keys:
                for task in rule(-1, [key]):
                    out[task].append(key)
        return {task: [(_RECORD_KEY, [newest, keys])] for task, keys in out.items()}

    return records
