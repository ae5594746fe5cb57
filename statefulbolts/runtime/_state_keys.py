"""How big each stateful component's state is: its committed keys, counted after commits.

Both runners tell a ``StateKeyCounter`` of every successful commit (a checkpoint's COMMIT, a
transactional batch's commit). Counting asks the provider (``committed_key_counts``), which
may be a round trip to a store, so a fast topology must not count after every commit:

1. ``committed(txid)`` notes that the state changed, up to ``txid``, and counts if it may
   (step 2).
2. A count runs only if the last one is at least ``interval_ms`` old by the runner's clock
   (``topology.state.size.interval.ms``; 0: after every commit). Otherwise the latest txid
   waits, and ``tick()``, which the runner calls at every step of its loop, counts it once
   the interval has passed. So the last commit before a topology goes quiet is counted too,
   at most one interval late.
3. A count asks the provider once, for every namespace of every stateful component
   (``namespaces()``: component -> its namespaces, ``None`` if they cannot be listed), and
   keeps each component's sum in ``Stats.keys_counted``: ``None`` (unknown) when the provider
   cannot count or the namespaces cannot be listed, never a made-up 0.
4. A count the store fails (``StateBackendError``) is left out and logged; the txid waits for
   the next interval. The figure is for people: an outage is the protocol's to handle, on its
   own calls, and a count never stops or slows a topology beyond its one query.

Example:
    >>> from providers import InMemoryKeyValueStateProvider
    >>> from statefulbolts.clock import ManualClock
    >>> clock, stats = ManualClock(), Stats()
    >>> state = InMemoryKeyValueStateProvider().new_state("doc-keys/count-0", {})
    >>> state.put("a", 1)
    >>> state.commit()
    >>> counter = StateKeyCounter(
    ...     stats, clock, 1000, InMemoryKeyValueStateProvider(), {},
    ...     lambda: {"count": ["doc-keys/count-0"]})
    >>> counter.committed(1)
    >>> counter.committed(2)  # within the interval: waits
    >>> clock.advance(1000)
    >>> counter.tick()
    >>> [(k.txid, k.keys) for k in stats.key_counts()["count"]]
    [(1, 1), (2, 1)]
    >>> InMemoryKeyValueStateProvider.drop("doc-keys/")
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from providers import StateBackendError, StateProvider
from statefulbolts.clock import Clock
from statefulbolts.runtime._stats import Stats

__all__ = ["NamespacesOf", "StateKeyCounter"]

log = logging.getLogger(__name__)

# Each stateful component's namespaces now; ``None`` for a component whose cannot be listed.
NamespacesOf = Callable[[], Mapping[str, Sequence[str] | None]]


class StateKeyCounter:
    """Counts the committed keys of each stateful component, at most once per interval.

    Args:
        stats: where the counts are kept (the runner's ``Stats``).
        clock: the runner's clock.
        interval_ms: the least time between two counts (0: count after every commit).
        provider: the topology's state provider, asked on this (the driver's) process.
        conf: the topology's config, handed to the provider.
        namespaces: each stateful component's namespaces (see ``NamespacesOf``).
    """

    def __init__(
        self,
        stats: Stats,
        clock: Clock,
        interval_ms: float,
        provider: StateProvider,
        conf: Mapping[str, Any],
        namespaces: NamespacesOf,
    ) -> None:
        self._stats, self._clock, self._interval = stats, clock, interval_ms
        self._provider, self._conf, self._namespaces = provider, conf, namespaces
        self._waiting: int | None = None  # the latest committed txid not counted yet
        self._last_ms: float | None = None  # when the last count ran (or failed)

    def committed(self, txid: int) -> None:
        """The commit of ``txid`` succeeded: count now if the interval allows, else later."""
        self._waiting = txid
        self.tick()

    def tick(self) -> None:
        """Count the latest commit if one waits and the interval has passed (step 2)."""
        txid = self._waiting
        if txid is None:
            return
        now = self._clock.now_ms()
        if self._last_ms is not None and now - self._last_ms < self._interval:
            return
        self._last_ms = now
        try:
            counts = self.count()
        except StateBackendError as exc:
            log.warning("state size after txid %s not counted (tried again later): %s", txid, exc)
            return
        self._waiting = None
        self._stats.keys_counted(txid, counts)

    def count(self) -> dict[str, int | None]:
        """Each stateful component's committed keys now (``None``: unknown), one provider call."""
        groups = dict(self._namespaces())
        wanted = sorted({ns for names in groups.values() if names is not None for ns in names})
        counts = self._provider.committed_key_counts(self._conf, wanted)
        found: dict[str, int | None] = {}
        for component, names in sorted(groups.items()):
            if counts is None or names is None:
                found[component] = None
            else:
                found[component] = sum(counts.get(ns, 0) for ns in names)
        return found
