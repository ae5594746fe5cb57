"""Leases: one driver per topology, and the fencing token that makes it safe.

A durable store keeps, per *scope* (the namespace prefix of one topology, ``wc/``, or of one
transactional id, ``$transactional/words/``), one lease record:

- ``epoch``: a number that only grows, one more per grant: the *fencing token*;
- ``holder``: who holds it (``LeaseHolder``: host, pid, when it started, a restart token);
- an expiry, judged by the store's own clock where it has one, moved on by each renewal.

The protocol, for every store that outlives its driver:

1. **Acquire before touching state.** A driver takes the lease of its scope before it reads or
   writes any state of it (before INITSTATE). It is granted at once when no lease is live (never
   taken, released, or lapsed). A live lease stays with its holder (``LeaseHeldError``, naming
   it), unless the caller names the live lease's epoch (``over=``): a compare-and-set, so two
   drivers taking over one lease at once cannot both win.
2. **Fence on grant.** Before ``acquire`` returns, the store raises the *fence* of every
   namespace under the scope to the new epoch: from then on, any write carrying an older epoch
   is refused there by the store itself.
3. **Every write carries the epoch.** Every state the driver and its tasks make is told the
   epoch (``State.fence``; ``StateFactory`` does it when the config holds
   ``FENCE_EPOCH_KEY``). Each write step of the state (``prepare_commit``, ``commit`` with or
   without a txid, ``rollback``, ``replace_stored``) compares it with the namespace's fence in
   the same atomic step as the write: an older epoch is refused (``StateFencedError``, nothing
   written), a newer one raises the fence.
4. **Renew while running.** The holder renews the lease well inside its time to live; a renewal
   after another driver took the lease over fails (``LeaseLostError``) and the driver stops.
5. **Release on a clean stop**, so the next start needs no waiting.

Safety rests on steps 2 and 3 alone: a driver paused (SIGSTOP, a long GC, a network partition)
past its lease and resumed is refused at its first write, whatever its renewal thread thinks.
The lease record is what lets a second driver be refused at once, with the holder's name.

A namespace created after the grant's fence (step 2) has no fence until its first fenced write.
The protocols keep that harmless: every commit decision goes through a namespace that exists
before the first transaction (the checkpoint spout's record, the transactional coordinator's),
which is fenced, so a stale driver cannot decide a commit; whatever else it writes is a
prepared delta that the new driver rolls back or supersedes.

Example:
    >>> holder = LeaseHolder(host="h1", pid=42, started_at=0.0)
    >>> lease = Lease("wc/", 3, holder, ttl_ms=20_000, remaining_ms=15_000)
    >>> lease.live, lease.describe()
    (True, 'epoch 3, held by host h1 pid 42 (started 1970-01-01 00:00:00 UTC)')
"""

from __future__ import annotations

import datetime
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import asdict, dataclass

__all__ = ["FENCE_EPOCH_KEY", "Lease", "LeaseHolder", "LeaseStore"]

# The config key under which a driver hands its epoch to every state it and its tasks make.
# Not a ``topology.*`` key: the driver sets it after taking the lease; users never do.
FENCE_EPOCH_KEY = "statefulbolts.state.fence.epoch"


@dataclass(frozen=True)
class LeaseHolder:
    """Who holds (or held) a lease.

    ``process`` tells one run of a pid from another (the process's start time in the kernel's
    clock ticks on Linux, ``""`` where unknown), so a pid reused after a restart is not taken
    for the old holder. ``token`` is shared by the successive drivers of one supervisor (our
    ``--supervise``, a cluster manager's restarts): a driver with the holder's token is its
    successor, and the holder is known to be gone.
    """

    host: str
    pid: int
    started_at: float
    process: str = ""
    token: str = ""

    def describe(self) -> str:
        """``host h1 pid 42 (started 2026-11-28 08:20:15 UTC)``."""
        when = datetime.datetime.fromtimestamp(self.started_at, tz=datetime.UTC)
        return f"host {self.host} pid {self.pid} (started {when:%Y-%m-%d %H:%M:%S} UTC)"

    def to_fields(self) -> dict[str, str]:
        """The holder as string fields, for a store to keep."""
        return {k: str(v) for k, v in asdict(self).items()}

    @classmethod
    def from_fields(cls, fields: Mapping[str, str]) -> LeaseHolder:
        """The holder ``to_fields`` gave; missing fields read as unknown."""
        return cls(
            host=str(fields.get("host", "?")),
            pid=int(fields.get("pid", 0) or 0),
            started_at=float(fields.get("started_at", 0.0) or 0.0),
            process=str(fields.get("process", "")),
            token=str(fields.get("token", "")),
        )


@dataclass(frozen=True)
class Lease:
    """A scope's lease as the store holds it.

    ``remaining_ms`` is how long it had left when read, by the store's clock: at or below 0 it
    has lapsed (its holder stopped renewing) and anyone may take it.
    """

    scope: str
    epoch: int
    holder: LeaseHolder
    ttl_ms: int
    remaining_ms: int

    @property
    def live(self) -> bool:
        """Whether the lease still holds (not lapsed)."""
        return self.remaining_ms > 0

    def describe(self) -> str:
        """``epoch 3, held by host h1 pid 42 (started ...)`` (``lapsed`` when it has)."""
        verb = "held by" if self.live else "lapsed, last held by"
        return f"epoch {self.epoch}, {verb} {self.holder.describe()}"


class LeaseStore(ABC):
    """The leases of one store (see the module docstring for the protocol).

    Every method is one atomic step of the store. Epochs of a scope only grow: granting never
    reuses one, even after the scope's state was deleted, so a driver fenced once stays fenced.
    """

    @abstractmethod
    def acquire(
        self, scope: str, holder: LeaseHolder, ttl_ms: int, *, over: int | None = None
    ) -> Lease:
        """Take the lease of ``scope`` with a new epoch, and fence the scope's namespaces.

        Granted when no lease is live, or when ``over`` equals the live lease's epoch (a
        take-over). The grant fences every namespace under ``scope`` (step 2) before returning.

        Raises:
            LeaseHeldError: a live lease exists and ``over`` does not name its epoch; its
                ``lease`` says whose it is.
            StateBackendError: the store could not be reached.
        """

    @abstractmethod
    def renew(self, scope: str, epoch: int, ttl_ms: int) -> Lease:
        """Extend the lease ``epoch`` of ``scope`` by ``ttl_ms`` from now; the renewed lease.

        A lapsed lease that nobody took since is renewed too (its holder was only slow).

        Raises:
            LeaseLostError: the scope's lease has another epoch now (taken over), or none.
            StateBackendError: the store could not be reached.
        """

    @abstractmethod
    def release(self, scope: str, epoch: int) -> bool:
        """End the lease ``epoch`` of ``scope`` now; whether it was still this epoch's.

        The record stays (its epoch keeps counting), marked lapsed.
        """

    @abstractmethod
    def read(self, scope: str) -> Lease | None:
        """The scope's lease, live or lapsed; ``None`` if it was never taken."""

    @abstractmethod
    def holders(self, scope: str) -> dict[int, LeaseHolder]:
        """The holders of the scope's most recent epochs (at least the last 8), by epoch."""

    def close(self) -> None:  # noqa: B027 - an optional hook
        """Release connections; the default has none."""
