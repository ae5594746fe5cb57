"""The Redis provider's key names: a namespace's keys, a scope's lease keys, and the listing.

A namespace ``ns`` keeps ``ns`` (the committed hash), ``ns$prepare``, ``ns$txid`` and ``ns$ttl``
(the package docstring has the layout). On a cluster the namespace is wrapped in a hash tag,
``{ns}``, so that its keys share a slot and one script can touch them all.

A *scope* (a namespace prefix: ``wc/``, ``$transactional/words/``) keeps its lease in three keys
(``providers.redis._lease``), hash-tagged on the scope on every server, cluster or not, so that
one script touches them all and ``redis-cli`` shows the same names everywhere:

- ``{S}$lease``: the lease record;
- ``{S}$epoch``: the last epoch granted;
- ``{S}$leases``: the holders of the last epochs.

A namespace listing looks for the keys ending in ``$txid``; no lease key does, and none starts
with the scope (they start with ``{``), so a listing never takes one for a namespace.

Example:
    >>> namespace_base("wc/count-0", cluster=True), txid_key("wc/count-0", cluster=False)
    ('{wc/count-0}', 'wc/count-0$txid')
    >>> namespace_keys("wc/count-0", cluster=True).prepare
    '{wc/count-0}$prepare'
    >>> lease_keys("wc/")
    LeaseKeys(lease='{wc/}$lease', epoch='{wc/}$epoch', holders='{wc/}$leases')
"""

from __future__ import annotations

import re
from typing import Any, NamedTuple

__all__ = [
    "TXID_SUFFIX",
    "LeaseKeys",
    "NamespaceKeys",
    "lease_keys",
    "list_namespaces",
    "namespace_base",
    "namespace_keys",
    "txid_key",
]

# The transaction record's key is the namespace's key plus this; every namespace that ever
# prepared, committed or rolled back has one, so listing namespaces is a SCAN for it.
TXID_SUFFIX = "$txid"
# How many keys one SCAN page of a namespace listing asks for.
_KEY_SCAN_COUNT = 1000


def namespace_base(namespace: str, cluster: bool) -> str:
    """The key of the namespace's committed hash, which its other keys extend."""
    return f"{{{namespace}}}" if cluster else namespace


def txid_key(namespace: str, cluster: bool) -> str:
    """The key of the namespace's transaction record (``ns$txid``)."""
    return namespace_base(namespace, cluster) + TXID_SUFFIX


class NamespaceKeys(NamedTuple):
    """A namespace's four keys."""

    committed: str
    prepare: str
    txid: str
    ttl: str


def namespace_keys(namespace: str, cluster: bool) -> NamespaceKeys:
    """``ns``, ``ns$prepare``, ``ns$txid`` and ``ns$ttl`` (hash-tagged on a cluster)."""
    base = namespace_base(namespace, cluster)
    return NamespaceKeys(base, f"{base}$prepare", base + TXID_SUFFIX, f"{base}$ttl")


class LeaseKeys(NamedTuple):
    """The keys of a scope's lease, in the order the lease scripts take them."""

    lease: str
    epoch: str
    holders: str


def lease_keys(scope: str) -> LeaseKeys:
    """The lease keys of ``scope``; hash-tagged, so they share a slot on a cluster."""
    tag = f"{{{scope}}}"
    return LeaseKeys(f"{tag}$lease", f"{tag}$epoch", f"{tag}$leases")


def _glob_escape(text: str) -> str:
    """``text`` matched literally by a SCAN ``MATCH`` pattern."""
    return re.sub(r"([*?\[\]\\])", r"\\\1", text)


def list_namespaces(client: Any, prefix: str, cluster: bool) -> list[str]:
    """The namespaces starting with ``prefix`` that have a ``$txid`` hash, sorted.

    One ``SCAN`` for ``<prefix>*$txid`` (``{<prefix>*}$txid`` on a cluster, where redis-py
    scans every primary), with ``prefix`` matched literally. redis-py's errors are the caller's
    to turn into a message.
    """
    pattern = _glob_escape(prefix) + "*"
    pattern = namespace_base(pattern, cluster) + TXID_SUFFIX
    head, tail = (1, len("}" + TXID_SUFFIX)) if cluster else (0, len(TXID_SUFFIX))
    found = set()
    for key in client.scan_iter(match=pattern, count=_KEY_SCAN_COUNT):
        try:
            name = key.decode("utf-8") if isinstance(key, bytes) else key
        except UnicodeDecodeError:
            continue  # not a key of ours: redis-py writes namespaces as UTF-8
        found.add(name[head:-tail])
    return sorted(found)
