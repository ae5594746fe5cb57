"""The Lua scripts of the Redis provider, each with its KEYS / ARGV contract above it.

Each transaction step is one script, so Redis applies it all or nothing, and each is idempotent
for the same arguments, so redis-py may retry one after a dropped connection. ``ns`` is the
committed hash of a namespace (``{ns}`` on a cluster), ``ns$prepare`` its prepared delta and
``ns$txid`` its transaction record and ``ns$ttl`` its expiry index (a sorted set: field ->
expiry in ms, only for fields that have one); values are envelopes (``providers.redis._codec``).

Time to live (``providers._ttl``): a prepare stores, beside its txid in ``ns$txid``, ``ptime``
(the transaction's timestamp) and ``pexpiry`` (the expiry of every value its delta writes),
each only when there is one. COMMIT indexes what it writes by ``pexpiry`` (no ``pexpiry``:
the written fields leave the index), then deletes the fields expired at ``ptime`` from ``ns``
and the index, at most a chunk of them per commit (the rest at the next commits; reads hide
them meanwhile), and keeps ``ptime`` as ``time``, the committed transaction's timestamp.

The lease fence (``providers._lease``): field ``epoch`` of ``ns$txid`` is the highest lease epoch
that wrote the namespace. Every write script (PREPARE, COMMIT, COMMIT_WRITES, ROLLBACK, REPLACE)
takes the writer's epoch as an argument, ``''`` for a writer that carries none (tools and tests:
never refused, and the fence is left as it is). Before anything else the script compares: an
epoch below the fence is refused with the reply ``{FENCED, fence}`` (``FENCED`` is -1) and
nothing is written; otherwise the step runs and, when the epoch is above the fence, raises it in
the same atomic step. FENCE raises it alone, for a lease's grant (step 2 of the protocol).
"""

from __future__ import annotations

__all__ = [
    "ALL",
    "COMMIT",
    "COMMIT_WRITES",
    "FENCE",
    "FENCED",
    "LOAD",
    "PREPARE",
    "REPLACE",
    "ROLLBACK",
]

# The first element of a write script's reply when the fence refused the writer's epoch.
FENCED = -1

# Shared by the write scripts: the fence check, before anything is written. Returns the fence
# (a string) when the writer's epoch is below it, so the script must refuse; else nil and
# whether the write must raise the fence to the epoch. Only HGET: the maxmemory rule (PREPARE)
# still sees the step's own first write first.
_FENCE = """
local function fence(record, epoch)
  if epoch == '' then return nil, false end
  local f = redis.call('HGET', record, 'epoch')
  if f and tonumber(f) > tonumber(epoch) then return f, false end
  return nil, not f or tonumber(f) < tonumber(epoch)
end
"""

# Shared by the write scripts: apply field/value pairs to a hash, HDEL for tombstones, HSET for
# the rest, in slices small enough for Lua's unpack() limit.
_APPLY = """
local function apply(hash, tombstone, kv, first)
  local sets, dels = {}, {}
  for i = first, #kv, 2 do
    if kv[i + 1] == tombstone then
      dels[#dels + 1] = kv[i]
    else
      sets[#sets + 1] = kv[i]
      sets[#sets + 1] = kv[i + 1]
    end
  end
  for i = 1, #sets, 1000 do
    redis.call('HSET', hash, unpack(sets, i, math.min(i + 999, #sets)))
  end
  for i = 1, #dels, 1000 do
    redis.call('HDEL', hash, unpack(dels, i, math.min(i + 999, #dels)))
  end
end

-- Index the fields of a flat field/value list from position first: ZADD with expiry (a string
-- of ms) for present values, ZREM for tombstones and for everything when expiry is false.
-- Nothing is sent when there is no expiry and no index yet (a state without TTL pays nothing).
local function index(zset, tombstone, kv, first, expiry)
  if not expiry and redis.call('EXISTS', zset) == 0 then return end
  local adds, rems = {}, {}
  for i = first, #kv, 2 do
    if expiry and kv[i + 1] ~= tombstone then
      adds[#adds + 1] = expiry
      adds[#adds + 1] = kv[i]
    else
      rems[#rems + 1] = kv[i]
    end
  end
  for i = 1, #adds, 1000 do
    redis.call('ZADD', zset, unpack(adds, i, math.min(i + 999, #adds)))
  end
  for i = 1, #rems, 1000 do
    redis.call('ZREM', zset, unpack(rems, i, math.min(i + 999, #rems)))
  end
end
"""

# LOAD. KEYS[1] = ns$prepare, KEYS[2] = ns$txid, KEYS[3] = ns$ttl, KEYS[4] = ns. No ARGV.
# Returns {HGETALL ns$txid, HGETALL ns$prepare} as flat field/value lists, EXISTS ns$ttl and
# HLEN ns.
LOAD = """
return {redis.call('HGETALL', KEYS[2]), redis.call('HGETALL', KEYS[1]),
        redis.call('EXISTS', KEYS[3]), redis.call('HLEN', KEYS[4])}
"""

# PREPARE. KEYS[1] = ns$prepare, KEYS[2] = ns$txid.
# ARGV[1] = txid (decimal), ARGV[2] = '1' to replace a delta of the same txid, '0' to merge,
# ARGV[3] = the rollbacks count the state saw (decimal),
# ARGV[4] = the transaction's timestamp in ms ('' for none: the commit cleans nothing up),
# ARGV[5] = the expiry in ms of every value of the delta ('' for none),
# ARGV[6] = the writer's lease epoch ('' for none: unfenced),
# ARGV[7..] = field, envelope, field, envelope, ... (tombstones kept).
# Returns {FENCED, fence} when ARGV[6] is below the fence (checked first),
#         {0, previous prepare txid or ''} when prepared,
#         {1, prepared txid, committed txid or ''} when another txid is prepared,
#         {2, '', committed txid} when txid <= the committed txid,
#         {3, rollbacks} when the namespace was rolled back since the state saw ARGV[3].
# A fresh prepare first drops any delta not owned by a prepare txid; the same txid again merges
# (HSET over the old delta: newer wins) or, with ARGV[2] = '1' (a new task attempt superseding a
# lost one), replaces it; ptime and pexpiry are set from ARGV[4] / ARGV[5] (removed when '');
# the fence rises to ARGV[6] with 'prepare'. Idempotent for the same arguments.
# The first write is the HSET of 'prepare' (with 'epoch' when the fence rises): Redis checks
# maxmemory only at a script's first write (after one it lets the script finish, to keep it
# atomic), so on a full server under noeviction the prepare is refused (OOM) before it writes
# anything; a DEL first would let the whole delta in past the limit.
PREPARE = (
    _FENCE
    + """
local refused, raise = fence(KEYS[2], ARGV[6])
if refused then return {-1, refused} end
local txid = tonumber(ARGV[1])
local t = redis.call('HMGET', KEYS[2], 'rollbacks', 'prepare', 'commit')
local r, p, c = t[1] or '0', t[2], t[3]
if r ~= ARGV[3] then return {3, r} end
if p and tonumber(p) ~= txid then return {1, p, c or ''} end
if c and txid <= tonumber(c) then return {2, p or '', c} end
if raise then
  redis.call('HSET', KEYS[2], 'prepare', ARGV[1], 'epoch', ARGV[6])
else
  redis.call('HSET', KEYS[2], 'prepare', ARGV[1])
end
for i, name in ipairs({'ptime', 'pexpiry'}) do
  if ARGV[3 + i] == '' then
    redis.call('HDEL', KEYS[2], name)
  else
    redis.call('HSET', KEYS[2], name, ARGV[3 + i])
  end
end
if not p or ARGV[2] == '1' then redis.call('DEL', KEYS[1]) end
for i = 7, #ARGV, 1000 do
  redis.call('HSET', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
return {0, p or ''}
"""
)

# COMMIT. KEYS[1] = ns, KEYS[2] = ns$prepare, KEYS[3] = ns$txid, KEYS[4] = ns$ttl.
# ARGV[1] = txid (decimal), ARGV[2] = the tombstone envelope,
# ARGV[3] = the most expired fields one commit deletes (decimal),
# ARGV[4] = the writer's lease epoch ('' for none: unfenced),
# ARGV[5] (optional) = the committed txid the delta of txid must sit on ('-1': none committed;
# absent or '': not checked).
# Returns {FENCED, fence} when ARGV[4] is below the fence (checked first; nothing written),
#         {0, fields deleted as expired} when the delta of txid was applied (HSET values, HDEL
#         tombstones, index by pexpiry, delete what expired at ptime, DEL ns$prepare,
#         commit = txid, time = ptime if any, prepare / ptime / pexpiry removed, the fence
#         raised to ARGV[4]), all in this one atomic step,
#         {1} when nothing is prepared and txid is already committed (a retried COMMIT: no-op),
#         {2, prepared txid or '', committed txid or ''} otherwise, and when the committed
#         txid is not ARGV[5] (nothing written).
# The fence rises last, so the maxmemory rule (PREPARE) still judges the commit by its own
# first write.
COMMIT = (
    _APPLY
    + _FENCE
    + """
local refused, raise = fence(KEYS[3], ARGV[4])
if refused then return {-1, refused} end
local p = redis.call('HGET', KEYS[3], 'prepare')
local c = redis.call('HGET', KEYS[3], 'commit')
local sits = true
if ARGV[5] and ARGV[5] ~= '' then sits = math.max(tonumber(c) or -1, -1) == tonumber(ARGV[5]) end
if p and tonumber(p) == tonumber(ARGV[1]) and sits then
  local t = redis.call('HMGET', KEYS[3], 'ptime', 'pexpiry')
  local delta = redis.call('HGETALL', KEYS[2])
  apply(KEYS[1], ARGV[2], delta, 1)
  index(KEYS[4], ARGV[2], delta, 1, t[2])
  local gone = {}
  if t[1] then
    gone = redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', t[1], 'LIMIT', 0, tonumber(ARGV[3]))
    for i = 1, #gone, 1000 do
      redis.call('HDEL', KEYS[1], unpack(gone, i, math.min(i + 999, #gone)))
      redis.call('ZREM', KEYS[4], unpack(gone, i, math.min(i + 999, #gone)))
    end
    redis.call('HSET', KEYS[3], 'time', t[1])
  end
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[3], 'commit', ARGV[1])
  redis.call('HDEL', KEYS[3], 'prepare', 'ptime', 'pexpiry')
  if raise then redis.call('HSET', KEYS[3], 'epoch', ARGV[4]) end
  return {0, #gone}
end
if not p and c and tonumber(c) == tonumber(ARGV[1]) then return {1} end
return {2, p or '', c or ''}
"""
)

# COMMIT WITHOUT TXID (the checkpoint spout's save). KEYS[1] = ns, KEYS[2] = ns$txid,
# KEYS[3] = ns$ttl.
# ARGV[1] = the tombstone envelope, ARGV[2] = the writer's lease epoch ('' for none: unfenced),
# ARGV[3..] = field, envelope, ... (the pending writes).
# Returns {FENCED, fence} when ARGV[2] is below the fence (checked first; nothing written);
# else writes the values, HDELs the tombstones, takes the written fields out of the expiry index
# (no TTL without a transaction), sets commit = -1 if no commit was recorded yet, leaves any
# pending prepare alone, raises the fence to ARGV[2], and returns {0, the committed txid}.
COMMIT_WRITES = (
    _APPLY
    + _FENCE
    + """
local refused, raise = fence(KEYS[2], ARGV[2])
if refused then return {-1, refused} end
apply(KEYS[1], ARGV[1], ARGV, 3)
index(KEYS[3], ARGV[1], ARGV, 3, false)
redis.call('HSETNX', KEYS[2], 'commit', '-1')
if raise then redis.call('HSET', KEYS[2], 'epoch', ARGV[2]) end
return {0, redis.call('HGET', KEYS[2], 'commit')}
"""
)

# ROLLBACK. KEYS[1] = ns$prepare, KEYS[2] = ns$txid.
# ARGV[1] = the writer's lease epoch ('' for none: unfenced).
# Returns {FENCED, fence} when ARGV[1] is below the fence (nothing written); else drops the
# prepared delta, the prepare txid, ptime and pexpiry, counts the rollback (the fence of
# PREPARE's ARGV[3]), raises the lease fence to ARGV[1], and returns
# {0, committed txid or '', rollbacks}. The expiry index is not touched.
ROLLBACK = (
    _FENCE
    + """
local refused, raise = fence(KEYS[2], ARGV[1])
if refused then return {-1, refused} end
redis.call('DEL', KEYS[1])
redis.call('HDEL', KEYS[2], 'prepare', 'ptime', 'pexpiry')
local r = redis.call('HINCRBY', KEYS[2], 'rollbacks', 1)
if raise then redis.call('HSET', KEYS[2], 'epoch', ARGV[1]) end
return {0, redis.call('HGET', KEYS[2], 'commit') or '', r}
"""
)

# REPLACE (the stored image's replace_stored, after the new image was staged).
# KEYS[1] = ns, KEYS[2] = ns$prepare, KEYS[3] = ns$txid,
# KEYS[4] = ns$import (staged committed hash), KEYS[5] = ns$import-prepare (staged delta),
# KEYS[6] = ns$import-txid (staged record: 'staged' = '1', and 'commit' / 'prepare' / 'time' if
# any), KEYS[7] = ns$ttl, KEYS[8] = ns$import-ttl (staged expiry index).
# ARGV[1] = the writer's lease epoch ('' for none: unfenced).
# Returns {1} when nothing is staged (already applied: a retry after a lost reply);
# {FENCED, fence} when ARGV[1] is below the fence: the staged keys are deleted and the namespace
# is left as it was; else {0} after, in this one atomic step: DEL ns, ns$prepare, ns$txid (the
# rollback count goes with it), ns$ttl; RENAME the staged keys that exist into ns, ns$prepare and
# ns$ttl; copy the staged txids and time into ns$txid; DEL the staged record. The lease fence
# stays (raised to ARGV[1]) when the new image has a txid; an image without one leaves no
# namespace, and no fence either. The staged names do not end in "$txid", so a namespace listing
# never mistakes them for a namespace.
REPLACE = (
    _FENCE
    + """
if redis.call('EXISTS', KEYS[6]) == 0 then return {1} end
local refused, raise = fence(KEYS[3], ARGV[1])
if refused then
  redis.call('DEL', KEYS[4], KEYS[5], KEYS[6], KEYS[8])
  return {-1, refused}
end
local kept = redis.call('HGET', KEYS[3], 'epoch')
if raise then kept = ARGV[1] end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3], KEYS[7])
if redis.call('EXISTS', KEYS[4]) == 1 then redis.call('RENAME', KEYS[4], KEYS[1]) end
if redis.call('EXISTS', KEYS[5]) == 1 then redis.call('RENAME', KEYS[5], KEYS[2]) end
if redis.call('EXISTS', KEYS[8]) == 1 then redis.call('RENAME', KEYS[8], KEYS[7]) end
local t = redis.call('HMGET', KEYS[6], 'commit', 'prepare', 'time')
if t[1] then redis.call('HSET', KEYS[3], 'commit', t[1]) end
if t[2] then redis.call('HSET', KEYS[3], 'prepare', t[2]) end
if t[3] then redis.call('HSET', KEYS[3], 'time', t[3]) end
if kept and (t[1] or t[2]) then redis.call('HSET', KEYS[3], 'epoch', kept) end
redis.call('DEL', KEYS[6])
return {0}
"""
)

# FENCE (step 2 of the lease protocol: the grant raises the fence of each existing namespace).
# KEYS[1] = ns$txid. ARGV[1] = the new lease epoch (decimal).
# Raises field 'epoch' to ARGV[1] unless it is at or above it already; a namespace without a
# record (deleted since it was listed) is left alone, so the grant never makes one appear.
# Returns the fence now (decimal), or '' when there is no record. Idempotent.
FENCE = (
    _FENCE
    + """
if redis.call('EXISTS', KEYS[1]) == 0 then return '' end
local refused, raise = fence(KEYS[1], ARGV[1])
if refused then return refused end
if raise then redis.call('HSET', KEYS[1], 'epoch', ARGV[1]) end
return ARGV[1]
"""
)

# Every script of the transaction, for loading them once per new client (REPLACE, for offline
# tools only, is loaded on its first use; FENCE is sent whole, in the grant's pipeline).
ALL = (LOAD, PREPARE, COMMIT, COMMIT_WRITES, ROLLBACK)
