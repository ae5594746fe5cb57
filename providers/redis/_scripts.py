"""The Lua scripts of the Redis provider, each with its KEYS / ARGV contract above it.

Each transaction step is one script, so Redis applies it all or nothing, and each is idempotent
for the same arguments, so redis-py may retry one after a dropped connection. ``ns`` is the
committed hash of a namespace (``{ns}`` on a cluster), ``ns$prepare`` its prepared delta and
``ns$txid`` its transaction record; values are envelopes (``providers.redis._codec``).
"""

from __future__ import annotations

__all__ = ["ALL", "COMMIT", "COMMIT_WRITES", "LOAD", "PREPARE", "REPLACE", "ROLLBACK"]

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
"""

# LOAD. KEYS[1] = ns$prepare, KEYS[2] = ns$txid. No ARGV.
# Returns {HGETALL ns$txid, HGETALL ns$prepare} as flat field/value lists.
LOAD = """
return {redis.call('HGETALL', KEYS[2]), redis.call('HGETALL', KEYS[1])}
"""

# PREPARE. KEYS[1] = ns$prepare, KEYS[2] = ns$txid.
# ARGV[1] = txid (decimal), ARGV[2] = '1' to replace a delta of the same txid, '0' to merge,
# ARGV[3] = the rollbacks count the state saw (decimal),
# ARGV[4..] = field, envelope, field, envelope, ... (tombstones kept).
# Returns {0, previous prepare txid or ''} when prepared,
#         {1, prepared txid, committed txid or ''} when another txid is prepared,
#         {2, '', committed txid} when txid <= the committed txid,
#         {3, rollbacks} when the namespace was rolled back since the state saw ARGV[3].
# A fresh prepare first drops any delta not owned by a prepare txid; the same txid again merges
# (HSET over the old delta: newer wins) or, with ARGV[2] = '1' (a new task attempt superseding a
# lost one), replaces it. Idempotent for the same arguments.
# The first write is the HSET of 'prepare': Redis checks maxmemory only at a script's first write
# (after one it lets the script finish, to keep it atomic), so on a full server under noeviction
# the prepare is refused (OOM) before it writes anything; a DEL first would let the whole delta
# in past the limit.
PREPARE = """
local txid = tonumber(ARGV[1])
local t = redis.call('HMGET', KEYS[2], 'rollbacks', 'prepare', 'commit')
local r, p, c = t[1] or '0', t[2], t[3]
if r ~= ARGV[3] then return {3, r} end
if p and tonumber(p) ~= txid then return {1, p, c or ''} end
if c and txid <= tonumber(c) then return {2, p or '', c} end
redis.call('HSET', KEYS[2], 'prepare', ARGV[1])
if not p or ARGV[2] == '1' then redis.call('DEL', KEYS[1]) end
for i = 4, #ARGV, 1000 do
  redis.call('HSET', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
return {0, p or ''}
"""

# COMMIT. KEYS[1] = ns, KEYS[2] = ns$prepare, KEYS[3] = ns$txid.
# ARGV[1] = txid (decimal), ARGV[2] = the tombstone envelope.
# Returns {0} when the delta of txid was applied (HSET values, HDEL tombstones, DEL ns$prepare,
#         commit = txid, prepare removed), all in this one atomic step,
#         {1} when nothing is prepared and txid is already committed (a retried COMMIT: no-op),
#         {2, prepared txid or '', committed txid or ''} otherwise (nothing written).
COMMIT = (
    _APPLY
    + """
local p = redis.call('HGET', KEYS[3], 'prepare')
local c = redis.call('HGET', KEYS[3], 'commit')
if p and tonumber(p) == tonumber(ARGV[1]) then
  apply(KEYS[1], ARGV[2], redis.call('HGETALL', KEYS[2]), 1)
  redis.call('DEL', KEYS[2])
  redis.call('HSET', KEYS[3], 'commit', ARGV[1])
  redis.call('HDEL', KEYS[3], 'prepare')
  return {0}
end
if not p and c and tonumber(c) == tonumber(ARGV[1]) then return {1} end
return {2, p or '', c or ''}
"""
)

# COMMIT WITHOUT TXID (the checkpoint spout's save). KEYS[1] = ns, KEYS[2] = ns$txid.
# ARGV[1] = the tombstone envelope, ARGV[2..] = field, envelope, ... (the pending writes).
# Writes the values, HDELs the tombstones, sets commit = -1 if no commit was recorded yet, leaves
# any pending prepare alone. Returns the committed txid (decimal).
COMMIT_WRITES = (
    _APPLY
    + """
apply(KEYS[1], ARGV[1], ARGV, 2)
redis.call('HSETNX', KEYS[2], 'commit', '-1')
return redis.call('HGET', KEYS[2], 'commit')
"""
)

# ROLLBACK. KEYS[1] = ns$prepare, KEYS[2] = ns$txid. No ARGV.
# Drops the prepared delta and the prepare txid, and counts the rollback (the fence of PREPARE).
# Returns {committed txid or '', rollbacks}.
ROLLBACK = """
redis.call('DEL', KEYS[1])
redis.call('HDEL', KEYS[2], 'prepare')
local r = redis.call('HINCRBY', KEYS[2], 'rollbacks', 1)
return {redis.call('HGET', KEYS[2], 'commit') or '', r}
"""

# REPLACE (the stored image's replace_stored, after the new image was staged).
# KEYS[1] = ns, KEYS[2] = ns$prepare, KEYS[3] = ns$txid,
# KEYS[4] = ns$import (staged committed hash), KEYS[5] = ns$import-prepare (staged delta),
# KEYS[6] = ns$import-txid (staged record: 'staged' = '1', and 'commit' / 'prepare' if any).
# No ARGV. Returns 1 when nothing is staged (already applied: a retry after a lost reply),
# else 0 after, in this one atomic step: DEL ns, ns$prepare, ns$txid (the rollback count goes
# with it); RENAME the staged hashes that exist into ns and ns$prepare; copy the staged txids
# into ns$txid; DEL the staged record. The staged names do not end in "$txid", so a namespace
# listing never mistakes them for a namespace.
REPLACE = """
if redis.call('EXISTS', KEYS[6]) == 0 then return 1 end
redis.call('DEL', KEYS[1], KEYS[2], KEYS[3])
if redis.call('EXISTS', KEYS[4]) == 1 then redis.call('RENAME', KEYS[4], KEYS[1]) end
if redis.call('EXISTS', KEYS[5]) == 1 then redis.call('RENAME', KEYS[5], KEYS[2]) end
local t = redis.call('HMGET', KEYS[6], 'commit', 'prepare')
if t[1] then redis.call('HSET', KEYS[3], 'commit', t[1]) end
if t[2] then redis.call('HSET', KEYS[3], 'prepare', t[2]) end
redis.call('DEL', KEYS[6])
return 0
"""

# Every script of the transaction, for loading them once per new client (REPLACE, for offline
# tools only, is loaded on its first use).
ALL = (LOAD, PREPARE, COMMIT, COMMIT_WRITES, ROLLBACK)
