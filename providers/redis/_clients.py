"""Connections to Redis: one pooled client per process and endpoint.

A provider is made every time a state is asked for, so clients (and their connection pools) are
cached at module level, keyed by process id and endpoint: a Spark Python worker forked from
another must not share its parent's sockets. ``override_client`` swaps in a client for tests.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator
from typing import Any

import providers.redis._scripts as _scripts
from providers._config import RedisClusterEndpoint, RedisEndpoint
from providers.redis._errors import BACKEND_ERRORS, backend_error

try:
    import redis as redis_py
    from redis.backoff import ExponentialWithJitterBackoff
    from redis.cluster import ClusterNode, RedisCluster
    from redis.retry import Retry
except ImportError as exc:  # pragma: no cover - depends on the environment
    _msg = "the Redis state provider needs redis-py: pip install 'statefulbolts[redis]'"
    raise ImportError(_msg) from exc

__all__ = [
    "Endpoint",
    "address_of",
    "client_for",
    "is_cluster",
    "make_client",
    "overriding_client",
    "override_client",
    "reset_clients",
]

log = logging.getLogger(__name__)

Endpoint = RedisEndpoint | RedisClusterEndpoint
# A couple of quick retries on a dropped connection; Spark retries the task after that.
_RETRIES = 2

_clients: dict[tuple[int, Endpoint], Any] = {}
_clients_lock = threading.Lock()
_override: list[Any] = []


def _retry() -> Retry:
    return Retry(ExponentialWithJitterBackoff(cap=0.5, base=0.05), _RETRIES)


def make_client(endpoint: Endpoint) -> Any:
    """A new redis-py client (``Redis`` or ``RedisCluster``) for an endpoint; the caller closes it.

    States share pooled clients per process; tools that read a provider's keys use this to
    connect exactly as the provider does.
    """
    password = endpoint.password.get_secret_value() if endpoint.password else None
    if isinstance(endpoint, RedisClusterEndpoint):
        cluster = RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in endpoint.nodes],
            password=password,
            socket_timeout=endpoint.timeout_s,
            socket_connect_timeout=endpoint.timeout_s,
            retry=_retry(),
        )
        # Jedis' maxRedirections: how many MOVED / ASK hops one command may take.
        cluster.RedisClusterRequestTTL = endpoint.max_redirections
        return cluster
    return redis_py.Redis(
        host=endpoint.host,
        port=endpoint.port,
        db=endpoint.database,
        username=endpoint.username,
        password=password,
        ssl=endpoint.ssl,
        socket_timeout=endpoint.timeout_s,
        socket_connect_timeout=endpoint.timeout_s,
        retry=_retry(),
    )


def _preload(client: Any) -> None:
    """Load every script once per new client, so a first prepare is not sent twice (NOSCRIPT)."""
    if isinstance(client, RedisCluster):
        for source in _scripts.ALL:
            client.script_load(source)
        return
    pipe = client.pipeline(transaction=False)
    for source in _scripts.ALL:
        pipe.script_load(source)
    pipe.execute()


def client_for(endpoint: Endpoint, namespace: str | None = None) -> Any:
    """This process's client (and so connection pool) for ``endpoint``, made once.

    Raises:
        StateBackendError: Redis could not be reached; names ``namespace`` when one is given.
        StateBackendRefusedError: Redis refused the connection (a wrong password, ...).
    """
    key = (os.getpid(), endpoint)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            log.info(
                "opening a Redis connection pool to %s for process %s", endpoint.address, key[0]
            )
            made = None
            try:
                made = make_client(endpoint)
                _preload(made)
            except BACKEND_ERRORS as exc:
                if made is not None:
                    made.close()
                subject = None if namespace is None else f"state {namespace!r}"
                raise backend_error(
                    exc, address=endpoint.address, step="connection", subject=subject
                ) from exc
            client = _clients[key] = made
        return client


@contextlib.contextmanager
def override_client(client: Any) -> Iterator[Any]:
    """Make every Redis state made in this process use ``client`` while the block runs.

    For tests: hand in a ``fakeredis.FakeRedis()`` (needs ``lupa`` for the scripts) or a client
    built on an instrumented connection. Overrides nest; the config's connection settings are
    ignored inside, its serializer settings are not.
    """
    _override.append(client)
    try:
        yield client
    finally:
        _override.remove(client)


def overriding_client() -> Any | None:
    """The client of the innermost ``override_client`` block, or ``None`` outside one."""
    return _override[-1] if _override else None


def reset_clients() -> None:
    """Close and forget this process's cached clients (tests, or after a config change)."""
    with _clients_lock:
        clients = list(_clients.values())
        _clients.clear()
    for client in clients:
        client.close()


def address_of(client: Any) -> str:
    """``host:port`` of a client, ``unix:<path>``, or a cluster's nodes (for messages).

    Never the URL the client was made from: it may hold a password.
    """
    if isinstance(client, RedisCluster):
        return ",".join(node.name for node in client.get_nodes()) or "a Redis cluster"
    kwargs = getattr(getattr(client, "connection_pool", None), "connection_kwargs", {})
    if "path" in kwargs:
        return f"unix:{kwargs['path']}"
    return f"{kwargs.get('host', '?')}:{kwargs.get('port', '?')}"


def is_cluster(client: Any) -> bool:
    """Whether ``client`` talks to a Redis cluster (so a namespace's keys need a hash tag)."""
    return isinstance(client, RedisCluster)
