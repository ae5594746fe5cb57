"""The Redis provider: Storm's ``RedisKeyValueState`` layout with an atomic, idempotent commit.

Select it with ``topology.state.provider = "providers.redis.RedisKeyValueStateProvider"`` and
configure it with ``topology.state.provider.config`` (see ``providers._config``). The package
is in parts: ``_codec`` (the value envelope), ``_scripts`` (the Lua scripts), ``_clients``
(``connect``, the one factory of redis-py clients in the project, and the connection pools per
process), ``_errors`` (which Redis errors are an outage to wait out and
which a refusal that stops the topology; every user of Redis in the project asks it),
``_keys`` (the key names and the namespace listing), ``_state`` (the state and its provider),
``_commits`` (the commit of many namespaces in one round trip) and ``_lease`` (the lease store
and the fence's error).

Layout per namespace ``ns`` (Storm's):

==============  =====  ==============================================================
key             type   content
==============  =====  ==============================================================
``ns``          hash   committed data: serialized key -> envelope
``ns$prepare``  hash   the prepared delta, tombstones included
``ns$txid``     hash   ``commit``: last committed txid; ``prepare``: the pending prepare;
                       ``rollbacks``: how many rollbacks the namespace had (ours);
                       ``epoch``: the highest lease epoch that wrote it (the fence, ours)
==============  =====  ==============================================================

Txids are decimal strings. ``prepare`` is present exactly while a prepare is pending: commit and
rollback remove it (Storm left it behind after a rollback). ``rollbacks`` appears with the first
rollback and is a fence: a state object may prepare only if no rollback happened since it was
loaded (or since its own last rollback), so a task attempt that outlived a failed job, the
ROLLBACK after it and the retry cannot land its stale delta over the retry's. ``commit`` is
``-1`` after a commit without txid (the checkpoint spout's save) on a namespace that never
committed one. On a cluster the namespace is wrapped in a hash tag, ``{ns}``, ``{ns}$prepare``,
``{ns}$txid``, so the three keys share a slot and one script can touch them.

Value envelope (``_codec``): every value in ``ns`` and ``ns$prepare`` is msgpack
``[1, <payload bytes>]`` (present; the payload is the value serializer's output) or ``[0]``
(tombstone, the two bytes ``91 00``). The envelope lets a deletion travel in the prepared
delta and keeps the payload opaque, so any value serializer works. Tombstones never reach the
committed hash.

Round trips: a process's first state on a server loads the scripts (one pipelined round trip);
constructing a state is one (a script loads ``ns$txid``, the prepared delta and the committed
hash's length);
``prepare_commit``, ``commit`` and ``rollback`` are one script each, whatever the number of keys
(the driver's commit of a transaction sends every namespace's in one pipeline, ``_commits``);
``get`` is at most one ``HGET`` per distinct key per state object (hits and misses are cached, and
the cache follows commits), and usually none: before a stateful task's tuples the runtime hands the
state the distinct values its input is fields-grouped on (``prefetch``), read with one ``HMGET``
per 10,000 keys, so a keyed aggregation costs a handful of round trips per task and transaction
whatever its number of keys; when the committed hash was empty at the load (a namespace's first
transaction), none at all, and the hint is not even computed. Writes only touch memory until
``prepare_commit``. A state object assumes it is the only writer of its namespace while it
lives, which the checkpoint protocol guarantees (one task per namespace). Connection pools
are shared per process and per config.

Every script is idempotent, so redis-py may retry one after a dropped connection. The provider
can list the namespaces it holds (``namespaces``: a ``SCAN`` for the ``$txid`` hashes).

Leases (``providers._lease``; ``_lease``): ``lease_store`` keeps one lease per scope (``wc/``) in
``{wc/}$lease``, ``{wc/}$epoch`` and ``{wc/}$leases``, hash-tagged on the scope so they share a
cluster slot, and judged by the server's clock. A grant raises ``epoch`` in the ``$txid`` hash of
every namespace under the scope; from then on each write script refuses a state fenced with an
older epoch (``StateFencedError``), in the same atomic step as the write it refuses.
"""

from providers.redis._clients import (
    address_of,
    connect,
    make_client,
    override_client,
    reset_clients,
)
from providers.redis._codec import TOMBSTONE
from providers.redis._errors import (
    BACKEND_ERRORS,
    ErrorKind,
    Verdict,
    backend_error,
    classify_error,
    reply_code,
)
from providers.redis._lease import RedisLeaseStore, fenced_error
from providers.redis._state import RedisKeyValueState, RedisKeyValueStateProvider

__all__ = [
    "BACKEND_ERRORS",
    "TOMBSTONE",
    "ErrorKind",
    "RedisKeyValueState",
    "RedisKeyValueStateProvider",
    "RedisLeaseStore",
    "Verdict",
    "address_of",
    "backend_error",
    "classify_error",
    "connect",
    "fenced_error",
    "make_client",
    "override_client",
    "reply_code",
    "reset_clients",
]

# The public home of the classes: what repr, pickle and error messages name, and what a config's
# dotted name (providers.redis.RedisKeyValueStateProvider) says.
RedisKeyValueState.__module__ = __name__
RedisKeyValueStateProvider.__module__ = __name__
RedisLeaseStore.__module__ = __name__
