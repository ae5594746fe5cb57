"""COMMIT of many namespaces in one round trip: the driver's commit of a transaction.

A transaction's driver commit (``checkpoint``) commits every stateful task's namespace. One by
one, each costs a state object (its load script), the check that the store holds what the
commit needs (an ``HMGET`` of ``ns$txid``) and the commit script: three round trips and a
millisecond a namespace. Here every namespace's COMMIT script goes in one pipeline, each with
the committed txid its delta must sit on (the script's ``ARGV[5]``), so the script itself
refuses, writing nothing, wherever the store does not hold what the one-by-one check wants.

A namespace is reported committed only on the script's two success replies: its delta of
``txid`` applied on top of ``txid - 1``, or ``txid`` already committed with nothing prepared
(a retried COMMIT). Any other reply (fenced, another txid prepared, the store behind or ahead)
leaves the namespace out, untouched, and its caller commits it the slow way, which reports why
in the words of the one-by-one path. A cluster is not batched (its namespaces live on
different nodes): every namespace is left to the caller.

Example:
    >>> import fakeredis
    >>> client = fakeredis.FakeRedis()
    >>> from providers.redis import RedisKeyValueState
    >>> state = RedisKeyValueState("doc-many/count-0", client)
    >>> state.put("storm", 1)
    >>> state.prepare_commit(0)
    >>> commit_namespaces(client, ["doc-many/count-0", "doc-many/count-1"], 0, "")
    ['doc-many/count-0']
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from redis.exceptions import NoScriptError

import providers.redis._scripts as _scripts
from providers.redis._clients import is_cluster
from providers.redis._codec import TOMBSTONE
from providers.redis._keys import namespace_keys

__all__ = ["EXPIRED_PER_COMMIT", "commit_namespaces"]

log = logging.getLogger(__name__)

# The most expired fields one commit deletes (``_scripts.COMMIT``): a commit's script stays short
# however many keys expired at once; the rest go at the next commits, and reads hide them.
EXPIRED_PER_COMMIT = 10_000


def commit_namespaces(client: Any, namespaces: Sequence[str], txid: int, epoch: str) -> list[str]:
    """COMMIT ``txid`` in each namespace, one pipelined round trip; the ones committed, in order.

    ``epoch``: the writer's lease epoch (``''``: unfenced). redis-py's errors (an outage) are
    the caller's: whatever the pipeline committed before it broke stays committed, and a
    COMMIT again is a no-op.
    """
    if not namespaces or is_cluster(client):
        return []
    sha = client.register_script(_scripts.COMMIT).sha
    expected = str(max(int(txid) - 1, -1))
    args = (str(int(txid)), TOMBSTONE, EXPIRED_PER_COMMIT, epoch, expected)
    replies = _run(client, sha, namespaces, args)
    if any(_no_script(r) for r in replies):
        # Redis lost its scripts (restarted, SCRIPT FLUSH): load this one, send again; a
        # namespace that committed in the first pass answers "already committed".
        client.script_load(_scripts.COMMIT)
        replies = _run(client, sha, namespaces, args)
    done = [ns for ns, reply in zip(namespaces, replies, strict=True) if _committed(reply)]
    log.debug("committed txid %s in %s of %s namespaces", txid, len(done), len(namespaces))
    return done


def _run(client: Any, sha: str, namespaces: Sequence[str], args: tuple[Any, ...]) -> list[Any]:
    pipe = client.pipeline(transaction=False)
    for namespace in namespaces:
        pipe.evalsha(sha, 4, *namespace_keys(namespace, False), *args)
    return list(pipe.execute(raise_on_error=False))


def _no_script(reply: Any) -> bool:
    return isinstance(reply, NoScriptError)


def _committed(reply: Any) -> bool:
    """The COMMIT script's success replies: ``{0, expired}`` and ``{1}``."""
    return isinstance(reply, list) and bool(reply) and int(reply[0]) in (0, 1)
