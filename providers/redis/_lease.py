"""Leases in Redis: one driver per scope, and the fence every write of a stale one meets.

The protocol is ``providers._lease``'s; here is how Redis keeps it. A scope ``S`` (``wc/``,
``$transactional/words/``) has three keys (``_keys.lease_keys``), in one cluster slot:

================  ======  ====================================================================
key               type    content
================  ======  ====================================================================
``{S}$lease``     hash    ``epoch``; ``holder`` (JSON of ``LeaseHolder.to_fields``); ``ttl``
                          (ms); ``expires`` (ms, by the server's clock); ``grant`` (the id of
                          the ``acquire`` call that took it, so a retried call is not refused
                          by its own grant)
``{S}$epoch``     string  the last epoch granted (``INCR``); only the lease touches it, so
                          deleting the scope's state leaves it, and epochs never go back
``{S}$leases``    hash    epoch -> holder JSON, for the last ``HISTORY`` grants
================  ======  ====================================================================

Time is the Redis server's (``TIME`` inside each script): drivers' clocks never matter, and a
lease lapses when the server says so. ``remaining_ms`` is ``expires`` minus the server's now.
Each method is one script, atomic and idempotent for the same arguments (redis-py may resend
one after a dropped connection), except ``holders``, one ``HGETALL``.

The grant raises the fence of every namespace under the scope before ``acquire`` returns
(step 2): a ``SCAN`` lists them (``_keys.list_namespaces``, the provider's own listing), then
one pipelined round trip runs ``_scripts.FENCE`` on each ``ns$txid``: the cost is the scan of
the keyspace (a page per 1,000 keys; every primary on a cluster) plus one round trip whatever
the number of namespaces. From then on every write script of a state (``_scripts``) refuses an
older epoch.

Example:
    >>> import fakeredis
    >>> from providers import LeaseHeldError, LeaseHolder
    >>> store = RedisLeaseStore(fakeredis.FakeRedis())
    >>> first = store.acquire("wc/", LeaseHolder("h1", 42, 0.0), ttl_ms=20_000)
    >>> first.epoch, first.live
    (1, True)
    >>> try:
    ...     store.acquire("wc/", LeaseHolder("h2", 7, 0.0), ttl_ms=20_000)
    ... except LeaseHeldError as exc:
    ...     print(exc.lease.holder.host)
    h1
    >>> store.acquire("wc/", LeaseHolder("h2", 7, 0.0), ttl_ms=20_000, over=1).epoch
    2
"""

from __future__ import annotations

import contextlib
import json
import logging
import uuid
from collections.abc import Iterator
from typing import Any

import providers.redis._scripts as _scripts
from providers._lease import Lease, LeaseHolder, LeaseStore
from providers.errors import (
    LeaseHeldError,
    LeaseLostError,
    StateFencedError,
    StateLostError,
    StateSerializationError,
)
from providers.redis._clients import address_of, is_cluster
from providers.redis._errors import BACKEND_ERRORS, backend_error
from providers.redis._keys import LeaseKeys, lease_keys, list_namespaces, txid_key

__all__ = ["HISTORY", "RedisLeaseStore", "fenced_error"]

log = logging.getLogger(__name__)

# How many grants ``{S}$leases`` remembers (the contract asks for at least 8).
HISTORY = 16

# The server's clock in ms, for every lease script.
_NOW = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
"""

# ACQUIRE. KEYS[1] = {S}$lease, KEYS[2] = {S}$epoch, KEYS[3] = {S}$leases.
# ARGV[1] = the holder (JSON), ARGV[2] = the time to live in ms, ARGV[3] = the live epoch the
# caller takes over ('' for none), ARGV[4] = this call's grant id, ARGV[5] = HISTORY.
# Returns {1, epoch, holder, ttl, remaining ms} when granted: no record, a lapsed one, ARGV[3]
#         naming the live epoch, or the record already granted to ARGV[4] (a resent call);
#         {0, epoch, holder, ttl, remaining ms} of the live lease otherwise (nothing written).
# A grant takes the next epoch of {S}$epoch (past the record's, should the counter be lost),
# writes the record, expiring ARGV[2] ms from the server's now, and keeps the holder in
# {S}$leases, dropping the grants older than the last ARGV[5].
ACQUIRE = (
    _NOW
    + """
local l = redis.call('HMGET', KEYS[1], 'epoch', 'holder', 'ttl', 'expires', 'grant')
if l[1] then
  local left = tonumber(l[4]) - now
  if l[5] == ARGV[4] then return {1, l[1], l[2], l[3], left} end
  if left > 0 and (ARGV[3] == '' or tonumber(ARGV[3]) ~= tonumber(l[1])) then
    return {0, l[1], l[2], l[3], left}
  end
end
local e = redis.call('INCR', KEYS[2])
if l[1] and tonumber(l[1]) >= e then
  e = tonumber(l[1]) + 1
  redis.call('SET', KEYS[2], e)
end
local ttl = tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'epoch', e, 'holder', ARGV[1], 'ttl', ARGV[2],
           'expires', string.format('%d', now + ttl), 'grant', ARGV[4])
redis.call('HSET', KEYS[3], e, ARGV[1])
for _, old in ipairs(redis.call('HKEYS', KEYS[3])) do
  if tonumber(old) <= e - tonumber(ARGV[5]) then redis.call('HDEL', KEYS[3], old) end
end
return {1, tostring(e), ARGV[1], ARGV[2], ttl}
"""
)

# RENEW. KEYS[1] = {S}$lease. ARGV[1] = the caller's epoch, ARGV[2] = the time to live in ms.
# Returns {1, epoch, holder, ttl, remaining ms} when the record still has ARGV[1], live or
#         lapsed (nobody took it since): it now expires ARGV[2] ms from the server's now;
#         {0, epoch, holder, ttl, remaining ms} of the record that replaced it (nothing written);
#         {0} when there is no record.
RENEW = (
    _NOW
    + """
local l = redis.call('HMGET', KEYS[1], 'epoch', 'holder', 'ttl', 'expires')
if not l[1] then return {0} end
if tonumber(l[1]) ~= tonumber(ARGV[1]) then return {0, l[1], l[2], l[3], tonumber(l[4]) - now} end
local ttl = tonumber(ARGV[2])
redis.call('HSET', KEYS[1], 'ttl', ARGV[2], 'expires', string.format('%d', now + ttl))
return {1, l[1], l[2], ARGV[2], ttl}
"""
)

# RELEASE. KEYS[1] = {S}$lease. ARGV[1] = the caller's epoch.
# Returns 1 when the record has ARGV[1]: it is lapsed now (expires = the server's now, unless it
# lapsed earlier), its epoch and holder kept; 0 otherwise (nothing written).
RELEASE = (
    _NOW
    + """
local l = redis.call('HMGET', KEYS[1], 'epoch', 'expires')
if not l[1] or tonumber(l[1]) ~= tonumber(ARGV[1]) then return 0 end
if tonumber(l[2]) > now then redis.call('HSET', KEYS[1], 'expires', string.format('%d', now)) end
return 1
"""
)

# READ. KEYS[1] = {S}$lease. No ARGV.
# Returns {epoch, holder, ttl, remaining ms by the server's clock}, or {} when there is no record.
READ = (
    _NOW
    + """
local l = redis.call('HMGET', KEYS[1], 'epoch', 'holder', 'ttl', 'expires')
if not l[1] then return {} end
return {l[1], l[2], l[3], tonumber(l[4]) - now}
"""
)


def fenced_error(subject: str, step: str, epoch: int, fence: int) -> StateFencedError:
    """The error of a write refused by the fence of ``subject`` (``state 'wc/count-0'``)."""
    msg = (
        f"{subject}: {step} under lease epoch {epoch} refused: it was written under epoch "
        f"{fence} since; another driver of this topology took over, and this one must stop "
        "(nothing of this step was written)"
    )
    return StateFencedError(msg, epoch=epoch, fence=fence)


def _text(raw: Any) -> str:
    return raw.decode("utf-8") if isinstance(raw, bytes) else str(raw)


class RedisLeaseStore(LeaseStore):
    """The ``LeaseStore`` of a Redis server or cluster (see the module docstring).

    ``client`` is a redis-py client returning bytes (a state's); the store does not close it.
    """

    def __init__(self, client: Any, *, address: str | None = None) -> None:
        self._client = client
        self._address = address or address_of(client)
        self._acquire = client.register_script(ACQUIRE)
        self._renew = client.register_script(RENEW)
        self._release = client.register_script(RELEASE)
        self._read = client.register_script(READ)

    def __repr__(self) -> str:
        return f"RedisLeaseStore(redis={self._address})"

    @contextlib.contextmanager
    def _backend(self, step: str, scope: str, keys: LeaseKeys) -> Iterator[None]:
        """Turn a Redis error into an outage (``StateBackendError``) or a refusal."""
        try:
            yield
        except BACKEND_ERRORS as exc:
            raise backend_error(
                exc,
                address=self._address,
                step=step,
                subject=f"the lease of {scope!r}",
                client=self._client,
                keys={keys.lease: "hash", keys.epoch: "string", keys.holders: "hash"},
            ) from exc

    def _lease(self, scope: str, keys: LeaseKeys, fields: list[Any]) -> Lease:
        """The lease of a script's ``epoch, holder, ttl, remaining`` reply."""
        epoch, holder, ttl, remaining = fields
        return Lease(scope, int(epoch), self._holder(keys.lease, holder), int(ttl), int(remaining))

    @staticmethod
    def _holder(key: str, raw: Any) -> LeaseHolder:
        try:
            fields = json.loads(raw)
        except ValueError as exc:
            msg = f"Redis key {key!r} holds a lease holder that is not JSON: {raw[:60]!r}"
            raise StateSerializationError(msg) from exc
        return LeaseHolder.from_fields(fields)

    def acquire(
        self, scope: str, holder: LeaseHolder, ttl_ms: int, *, over: int | None = None
    ) -> Lease:
        """Take the lease (one script), then fence the scope's namespaces (see the module).

        Should fencing fail (``StateBackendError`` between the two round trips), the lease stays
        granted, unfenced and unused: a later ``acquire`` meets it as live, naming this holder,
        and takes it over with ``over=`` its epoch, which fences everything again.

        Raises:
            LeaseHeldError: a live lease exists and ``over`` does not name its epoch.
            StateLostError: a namespace of the scope was written under an epoch above the one
                granted: the scope's lease keys were deleted; the grant is released.
            StateBackendError: Redis could not be reached.
        """
        _check(scope, ttl_ms)
        keys = lease_keys(scope)
        args = [
            json.dumps(holder.to_fields(), sort_keys=True),
            int(ttl_ms),
            "" if over is None else int(over),
            uuid.uuid4().hex,
            HISTORY,
        ]
        with self._backend("lease acquire", scope, keys):
            reply = self._acquire(keys=list(keys), args=args)
        lease = self._lease(scope, keys, reply[1:])
        if not int(reply[0]):
            left = lease.remaining_ms / 1000
            msg = (
                f"the lease of {scope!r} on redis {self._address} is held: {lease.describe()}, "
                f"{left:.1f} s left by the server's clock; stop that driver, wait for its lease "
                f"to lapse, or take it over (over={lease.epoch}) if it is gone"
            )
            raise LeaseHeldError(msg, lease=lease)
        self._fence(scope, keys, lease.epoch)
        log.info("lease %s: epoch %s granted to %s", scope, lease.epoch, holder.describe())
        return lease

    def _fence(self, scope: str, keys: LeaseKeys, epoch: int) -> None:
        """Step 2: raise the fence of every namespace under ``scope`` to ``epoch``.

        One SCAN, then ``FENCE`` on each record in one pipeline (sent whole: a cluster's
        pipeline has no script cache to lean on).
        """
        cluster = is_cluster(self._client)
        with self._backend(f"fence of the namespaces for lease epoch {epoch}", scope, keys):
            names = list_namespaces(self._client, scope, cluster)
            if not names:
                return
            pipe = self._client.pipeline(transaction=False)
            for name in names:
                # execute_command: a cluster pipeline has no eval(), but routes EVAL by its key.
                pipe.execute_command("EVAL", _scripts.FENCE, 1, txid_key(name, cluster), epoch)
            fences = pipe.execute()
        above = [(n, int(f)) for n, f in zip(names, fences, strict=True) if f and int(f) > epoch]
        if above:
            with self._backend("lease release", scope, keys):
                self._release(keys=[keys.lease], args=[epoch])
            name, fence = above[0]
            msg = (
                f"the lease of {scope!r} on redis {self._address}: granted epoch {epoch}, but "
                f"namespace {name!r} was written under epoch {fence}: the scope's lease keys "
                f"({keys.lease}, {keys.epoch}) were deleted or lost; set {keys.epoch!r} to "
                f"{fence} or more (redis-cli SET) and start again"
            )
            raise StateLostError(msg)
        log.debug("lease %s: fenced %s namespaces at epoch %s", scope, len(names), epoch)

    def renew(self, scope: str, epoch: int, ttl_ms: int) -> Lease:
        """Extend lease ``epoch`` by ``ttl_ms`` from the server's now (one script).

        Raises:
            LeaseLostError: the scope's lease has another epoch now, or there is none.
            StateBackendError: Redis could not be reached.
        """
        _check(scope, ttl_ms)
        keys = lease_keys(scope)
        with self._backend(f"lease renewal of epoch {epoch}", scope, keys):
            reply = self._renew(keys=[keys.lease], args=[int(epoch), int(ttl_ms)])
        if len(reply) == 1:
            msg = (
                f"the lease of {scope!r} on redis {self._address}: epoch {epoch} is gone, and "
                f"no lease is there any more ({keys.lease} was deleted); this driver must stop"
            )
            raise LeaseLostError(msg)
        lease = self._lease(scope, keys, reply[1:])
        if not int(reply[0]):
            msg = (
                f"the lease of {scope!r} on redis {self._address}: epoch {epoch} was taken "
                f"over, the lease is now {lease.describe()}; this driver must stop"
            )
            raise LeaseLostError(msg, lease=lease)
        return lease

    def release(self, scope: str, epoch: int) -> bool:
        """Mark lease ``epoch`` lapsed now, if it is still this epoch's (one script)."""
        _check(scope)
        keys = lease_keys(scope)
        with self._backend(f"lease release of epoch {epoch}", scope, keys):
            released = bool(self._release(keys=[keys.lease], args=[int(epoch)]))
        log.info("lease %s: epoch %s %s", scope, epoch, "released" if released else "not ours")
        return released

    def read(self, scope: str) -> Lease | None:
        """The scope's lease as the server holds it now, ``remaining_ms`` by its clock."""
        _check(scope)
        keys = lease_keys(scope)
        with self._backend("lease read", scope, keys):
            reply = self._read(keys=[keys.lease])
        return self._lease(scope, keys, reply) if reply else None

    def holders(self, scope: str) -> dict[int, LeaseHolder]:
        """The holders of the last ``HISTORY`` grants by epoch (one ``HGETALL``)."""
        _check(scope)
        keys = lease_keys(scope)
        with self._backend("lease holders read", scope, keys):
            found = self._client.hgetall(keys.holders)
        by_epoch = {int(_text(e)): raw for e, raw in found.items()}
        return {e: self._holder(keys.holders, by_epoch[e]) for e in sorted(by_epoch)}


def _check(scope: str, ttl_ms: int = 1) -> None:
    """Refuse a scope that is not a namespace prefix, or a time to live that is not one."""
    if not isinstance(scope, str) or not scope.endswith("/"):
        msg = f"a lease scope is a namespace prefix ending in '/' ('wc/'); got {scope!r}"
        raise ValueError(msg)
    if isinstance(ttl_ms, bool) or not isinstance(ttl_ms, int) or ttl_ms <= 0:
        msg = f"the lease of {scope!r}: ttl_ms must be a positive int (ms); got {ttl_ms!r}"
        raise ValueError(msg)
