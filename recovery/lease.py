"""One driver per topology: taking a topology's lease, keeping it, and handing it over.

The store side (epochs, fencing, the atomic steps) is ``providers._lease``; this module is the
driver's policy around it:

1. **Take it before Spark starts.** ``take_lease`` asks the provider's ``LeaseStore`` for the
   lease of the topology's scope (``wc/``, or ``$transactional/<id>/``). Granted: the driver
   runs with the lease's epoch, which every state it and its tasks make carries.
2. **A live lease is refused at once**, with one line naming the topology, the holder (host,
   pid, when it started) and the ways on (``LeaseHeldError``, exit status 2), unless this
   driver is the holder's known successor, and then it takes over at once (compare-and-set on
   the holder's epoch, so two successors cannot both win):

   - ``take_over=True`` (``statefulbolts run --take-over``): the operator says so;
   - the holder's restart token equals ours (``STATEFULBOLTS_LEASE_TOKEN``; ``--supervise``
     gives all its children one): a supervisor runs one child at a time, so the holder has
     exited;
   - the holder ran on this machine and its process is gone (a crashed driver restarted by
     hand, or by a cluster manager in the same container): its pid no longer runs, or runs a
     process started at another time (the pid was reused);
   - the holder is this very process, and no runner of it holds the lease any more (an
     earlier run that stopped without releasing it: its store refused the release).

   A lapsed lease (its holder stopped renewing) needs none of these.
3. **Keep it while running.** ``DriverLease.keep`` renews four times per time to live
   (``topology.state.lease.timeout.secs``) on a daemon thread. A renewal that finds the lease
   taken over tells the runner (``on_lost``), which stops; one that finds no lease at all
   tells it the store lost its data (``StateLostError``: nobody took the lease, the store
   forgot it); one the store fails or refuses (an
   outage, a full Redis) is tried again at the next period: the fence keeps a lapsed holder
   from writing meanwhile.
4. **Release it on a clean stop**, so the next start does not wait. A release the store fails
   is logged and left: the lease lapses by itself.

A provider without a lease store (in-memory state lives in one driver, so a second driver has
its own) gets no lease; a durable provider without one is warned about at submit.

Example:
    >>> from providers import Lease, LeaseHolder
    >>> dead = LeaseHolder("h1", 42, 0.0, process="boot-a/100")
    >>> me = LeaseHolder("h1", 43, 5.0, process="boot-a/200")
    >>> successor_reason(Lease("wc/", 3, dead, 20_000, 9_000), me, alive=lambda pid: False)
    'its process on this machine (host h1 pid 42) is gone'
    >>> successor_reason(Lease("wc/", 3, dead, 20_000, 9_000), me, alive=lambda pid: True) is None
    True
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from providers import (
    DriverOwnedStateProvider,
    Lease,
    LeaseHeldError,
    LeaseHolder,
    LeaseLostError,
    LeaseStore,
    ProviderError,
    StateLostError,
    get_provider,
    provider_name,
)
from statefulbolts.config import validate_config

__all__ = [
    "LEASE_TOKEN_ENV",
    "DriverLease",
    "describe_lease",
    "lease_as_dict",
    "read_lease",
    "successor_reason",
    "take_lease",
    "this_holder",
]

log = logging.getLogger(__name__)

# The restart token of this driver: drivers that share one never run at once (one supervisor's
# successive children), so one may take over the other's lease at once.
LEASE_TOKEN_ENV = "STATEFULBOLTS_LEASE_TOKEN"
# Renewals per time to live: three may fail (the store briefly away) before the lease lapses.
_RENEWALS_PER_TTL = 4
# The scopes a ``DriverLease`` of this process holds now (taken and not released).
_HELD: set[str] = set()
_HELD_LOCK = threading.Lock()


def _boot_id() -> str:
    """This machine's boot (Linux: a random id per boot), ``""`` where unknown."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return ""


def _start_ticks(pid: int) -> str:
    """When process ``pid`` started, in clock ticks since boot (Linux), ``""`` where unknown."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
    except OSError:
        return ""
    # The command name (field 2) may hold spaces and parentheses: count fields after the last ')'.
    fields = stat.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else ""


def _process_mark(pid: int) -> str:
    """``<boot id>/<start ticks>`` of ``pid``: equal marks are one run of one process."""
    ticks = _start_ticks(pid)
    return f"{_boot_id()}/{ticks}" if ticks else ""


def this_holder(token: str | None = None) -> LeaseHolder:
    """This process as a lease holder (its token from ``STATEFULBOLTS_LEASE_TOKEN`` by default)."""
    pid = os.getpid()
    return LeaseHolder(
        host=socket.gethostname(),
        pid=pid,
        started_at=time.time(),
        process=_process_mark(pid),
        token=os.environ.get(LEASE_TOKEN_ENV, "") if token is None else token,
    )


def _runs(holder: LeaseHolder) -> bool:
    """Whether ``holder``'s process still runs (called only for a holder on this machine)."""
    try:
        os.kill(holder.pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass  # another user's process: it runs
    if holder.process and holder.process.partition("/")[2]:
        now = _process_mark(holder.pid)
        return not now or now == holder.process  # a reused pid started at another time
    return True


def successor_reason(
    lease: Lease, me: LeaseHolder, *, alive: Callable[[int], bool] | None = None
) -> str | None:
    """Why ``me`` may take ``lease`` over without being asked (step 2), or ``None``.

    ``alive(pid)`` says whether a pid of this machine still runs its holder's process (the
    default checks the pid and its start time).
    """
    if not lease.live:
        return "its lease lapsed"
    held = lease.holder
    if held.token and held.token == me.token:
        return f"it holds the same restart token ({LEASE_TOKEN_ENV})"
    if held.host != me.host:
        return None
    boot, _, _ = held.process.partition("/")
    mine, _, _ = me.process.partition("/")
    if boot and mine and boot != mine:
        return f"this machine (host {held.host}) restarted since"
    if held.pid == me.pid and held.process == me.process:
        with _HELD_LOCK:
            ours = lease.scope in _HELD
        if not ours:
            return "it was this process's, and no runner of it holds it any more"
        return None
    running = _runs(held) if alive is None else alive(held.pid)
    if not running:
        return f"its process on this machine (host {held.host} pid {held.pid}) is gone"
    return None


def _refusal(what: str, lease: Lease) -> str:
    """The one line a refused driver prints."""
    renewed = max(0.0, (lease.ttl_ms - lease.remaining_ms) / 1000)
    left = lease.remaining_ms / 1000
    return (
        f"{what} is already running: {lease.holder.describe()} holds its lease (epoch "
        f"{lease.epoch}, renewed {renewed:.1f} s ago, lapses in {left:.1f} s unless renewed). "
        "Stop that driver, or start this one with --take-over (the other is fenced off and "
        "stops at its next write), or wait until the lease lapses"
    )


class DriverLease:
    """The lease a running driver holds: its epoch, kept renewed, released at the end.

    The runner needs only ``epoch``, ``keep``, ``release`` and ``taken_over``
    (``statefulbolts.runtime.HeldLease``). ``sleep`` waits on the stop event by default;
    tests inject their own.
    """

    def __init__(self, store: LeaseStore, lease: Lease, what: str) -> None:
        self.store = store
        self.lease = lease
        self.what = what
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        with _HELD_LOCK:
            _HELD.add(lease.scope)

    @property
    def epoch(self) -> int:
        """The fencing token every write of this driver carries."""
        return self.lease.epoch

    @property
    def scope(self) -> str:
        """The namespace prefix the lease covers."""
        return self.lease.scope

    def keep(self, on_lost: Callable[[BaseException], None]) -> None:
        """Renew the lease on a daemon thread until ``release``; ``on_lost`` once it is gone."""
        if self._thread is not None:
            return
        period = max(0.05, self.lease.ttl_ms / 1000 / _RENEWALS_PER_TTL)

        def renew() -> None:
            while not self._stopped.wait(period):
                try:
                    self.lease = self.store.renew(self.scope, self.epoch, self.lease.ttl_ms)
                except LeaseLostError as exc:
                    log.error("%s: %s", self.what, exc)
                    on_lost(exc if exc.lease is not None else self._record_gone(exc))
                    return
                except ProviderError as exc:
                    # An outage or a refusal (a full Redis): the fence keeps writes safe
                    # meanwhile, and the next period tries again.
                    log.warning("%s: could not renew its lease: %s", self.what, exc)

        self._thread = threading.Thread(target=renew, name=f"lease-{self.scope}", daemon=True)
        self._thread.start()

    def _record_gone(self, exc: LeaseLostError) -> StateLostError:
        """The store no longer has the lease at all: it lost data, nobody took it over."""
        msg = (
            f"{self.what}: the state store no longer holds its lease (epoch {self.epoch}) of "
            f"{self.scope!r}: it restarted empty, was flushed, or is another database. The "
            "topology stops rather than go on from a store that lost what it held; restore "
            f"the store (a durable Redis keeps it: appendonly yes) [{exc}]"
        )
        err = StateLostError(msg)
        err.__cause__ = exc
        return err

    def taken_over(self) -> Lease | None:
        """The lease as it is now, if another driver holds it; ``None`` while it is ours.

        ``None`` too when the store cannot be read: this is for messages, not decisions.
        """
        try:
            now = self.store.read(self.scope)
        except ProviderError:
            return None
        if now is None or now.epoch == self.epoch:
            return None
        return now

    def release(self) -> None:
        """Stop renewing and end the lease (if still ours); the store is closed. Idempotent."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5)
        with _HELD_LOCK:
            _HELD.discard(self.scope)
        try:
            self.store.release(self.scope, self.epoch)
        except ProviderError as exc:
            log.warning("%s: could not release its lease (it lapses by itself): %s", self.what, exc)
        finally:
            self.store.close()


def take_lease(
    conf: Mapping[str, Any],
    scope: str,
    what: str,
    *,
    take_over: bool = False,
    holder: LeaseHolder | None = None,
) -> DriverLease | None:
    """Take the lease of ``scope`` for a driver of ``what`` (``"topology 'wc'"``; step 1, 2).

    ``None`` when the provider keeps no leases.

    Raises:
        LeaseHeldError: another driver holds a live lease and this one is not its successor
            (the message is the one line to print).
        StateBackendError: the store could not be reached.
        ProviderConfigError: the provider config is invalid.
    """
    provider = get_provider(conf)
    try:
        store = provider.lease_store(conf)
    except ProviderError as exc:
        # The first contact with the store: say whose lease it was for.
        msg = f"{what}: taking its lease: {exc}"
        raise type(exc)(msg) from exc
    if store is None:
        if not isinstance(provider, DriverOwnedStateProvider):
            warnings.warn(
                f"{what}: the state provider {provider_name(conf)} keeps no leases "
                "(StateProvider.lease_store), so nothing stops a second driver of it from "
                "writing the same state; run one driver at a time",
                UserWarning,
                stacklevel=2,
            )
        return None
    me = holder or this_holder()
    ttl_ms = int(validate_config(conf).state_lease_timeout_secs * 1000)
    try:
        try:
            lease = store.acquire(scope, me, ttl_ms)
        except LeaseHeldError as held:
            live = held.lease
            if live is None:
                raise
            reason = "--take-over was given" if take_over else successor_reason(live, me)
            if reason is None:
                raise LeaseHeldError(_refusal(what, live), lease=live) from None
            try:
                lease = store.acquire(scope, me, ttl_ms, over=live.epoch)
            except LeaseHeldError as again:
                # Another successor won the compare-and-set: it is the live holder now.
                if again.lease is None:
                    raise
                raise LeaseHeldError(_refusal(what, again.lease), lease=again.lease) from None
            log.warning(
                "%s: took its lease over at epoch %s from %s: %s",
                what,
                lease.epoch,
                live.holder.describe(),
                reason,
            )
    except BaseException:
        store.close()
        raise
    log.info("%s: holds its lease at epoch %s", what, lease.epoch)
    return DriverLease(store, lease, what)


def read_lease(conf: Mapping[str, Any], scope: str) -> Lease | None:
    """The lease of ``scope`` as the store holds it (live or lapsed); ``None``: never taken.

    ``None`` too for a provider that keeps no leases.

    Raises:
        StateBackendError: the store could not be reached.
    """
    store = get_provider(conf).lease_store(conf)
    if store is None:
        return None
    try:
        return store.read(scope)
    finally:
        store.close()


def describe_lease(lease: Lease | None) -> str:
    """One line for status reports: who holds the lease, and for how long yet."""
    if lease is None:
        return "none (no driver has run, or the provider keeps no leases)"
    if lease.live:
        return f"{lease.describe()}; lapses in {lease.remaining_ms / 1000:.1f} s unless renewed"
    return lease.describe()


def lease_as_dict(lease: Lease | None) -> dict[str, Any] | None:
    """A JSON-friendly form of ``lease`` (``None`` stays ``None``)."""
    if lease is None:
        return None
    return {
        "epoch": lease.epoch,
        "live": lease.live,
        "remaining_ms": lease.remaining_ms,
        "ttl_ms": lease.ttl_ms,
        "holder": {
            "host": lease.holder.host,
            "pid": lease.holder.pid,
            "started_at": lease.holder.started_at,
        },
    }
