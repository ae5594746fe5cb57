"""Connections to Redis: the one place the project makes a redis-py client.

``connect`` is the factory every user of Redis calls (the state provider, ``RedisBackingMap``,
the stream spouts, the stream tools). It takes what the user gave:

- a URL (``redis://[[user]:password@]host[:port][/db]``, ``rediss://`` for TLS) or a mapping of
  ``redisConfig`` fields, validated by the provider config's model
  (``providers._config.redis_endpoint_of``), so every address in the project follows one
  grammar and a bad one gets one kind of message, which never shows a password;
- an endpoint of the provider config (``RedisEndpoint`` or ``RedisClusterEndpoint``);
- a redis-py client, used as it is once its reply decoding is checked.

Every client it makes has the same settings: the endpoint's socket and connect timeout, TLS and
credentials (the password is a ``SecretStr`` until this module hands it to redis-py), a couple
of quick retries on a dropped connection (``_retry``), and the reply decoding its caller reads
(bytes for states and maps, ``str`` for the transactional stream spouts).

A shared client (``shared=True``) is made once per process, endpoint and decoding, and cached at
module level: a provider is made every time a state is asked for, and a Spark Python worker
forked from another must not share its parent's sockets (the process id is in the key).
``reset_clients`` closes them. ``override_client`` swaps in a client for tests.

Nothing here talks to the server but ``client_for``'s script preload: errors of a command are
the caller's to turn into a message, with ``providers.redis.backend_error``.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
from collections.abc import Iterator, Mapping
from typing import Any

import providers.redis._scripts as _scripts
from providers._config import (
    DEFAULT_TIMEOUT_MS,
    RedisClusterEndpoint,
    RedisEndpoint,
    redis_endpoint_of,
)
from providers.errors import ProviderConfigError
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
    "connect",
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

# Shared clients by (process id, endpoint, decode_responses).
_clients: dict[tuple[int, Endpoint, bool], Any] = {}
# The shared clients whose server has the provider's scripts loaded (``client_for``).
_scripted: set[tuple[int, Endpoint, bool]] = set()
_clients_lock = threading.Lock()
_override: list[Any] = []


def _retry() -> Retry:
    return Retry(ExponentialWithJitterBackoff(cap=0.5, base=0.05), _RETRIES)


def make_client(endpoint: Endpoint, *, decode_responses: bool = False) -> Any:
    """A new redis-py client (``Redis`` or ``RedisCluster``) for an endpoint; the caller closes it.

    States share pooled clients per process; tools that read a provider's keys use this to
    connect exactly as the provider does. ``connect`` is the same with a URL, a mapping or a
    client accepted too.
    """
    password = endpoint.password.get_secret_value() if endpoint.password else None
    if isinstance(endpoint, RedisClusterEndpoint):
        cluster = RedisCluster(
            startup_nodes=[ClusterNode(host, port) for host, port in endpoint.nodes],
            password=password,
            socket_timeout=endpoint.timeout_s,
            socket_connect_timeout=endpoint.timeout_s,
            retry=_retry(),
            decode_responses=decode_responses,
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
        decode_responses=decode_responses,
    )


def connect(
    target: str | Mapping[str, Any] | Endpoint | Any,
    *,
    purpose: str,
    decode_responses: bool | None = False,
    timeout_ms: int = DEFAULT_TIMEOUT_MS,
    shared: bool = False,
) -> Any:
    """A redis-py client for ``target``, made the one way the project makes them.

    Args:
        target: a URL, a mapping of ``redisConfig`` fields, an endpoint, or a redis-py client
            (see the module docstring).
        purpose: who connects (``RedisBackingMap``, ``RedisStreamSpout 'reader'``): what a
            message about a bad address or client names.
        decode_responses: ``False``: replies are bytes; ``True``: ``str``. A client handed in
            must decode as asked; ``None`` takes a client either way (and makes one that
            returns bytes).
        timeout_ms: the socket timeout in milliseconds when a URL or mapping sets none (0:
            none); an endpoint carries its own.
        shared: return this process's one client for the endpoint and decoding (never close
            it: ``reset_clients`` does), rather than a new one the caller closes. A client
            handed in is returned as it is either way.

    Raises:
        ProviderConfigError: the URL or mapping is not a valid Redis address, or the client
            handed in decodes otherwise than asked; names ``purpose``, never a password.

    Example:
        >>> import fakeredis
        >>> try:
        ...     connect(fakeredis.FakeRedis(decode_responses=True), purpose="doc")
        ... except ProviderConfigError as exc:
        ...     print(exc)
        doc needs a client made with decode_responses=False (binary values)
        >>> client = connect("redis://:s3cret@10.0.0.5:6380/1", purpose="doc")
        >>> address_of(client), client.connection_pool.connection_kwargs["db"]
        ('10.0.0.5:6380', 1)
    """
    if isinstance(target, RedisEndpoint | RedisClusterEndpoint):
        endpoint: Endpoint = target
    elif isinstance(target, str | Mapping):
        endpoint = redis_endpoint_of(target, where=purpose, timeout_ms=timeout_ms)
    else:
        _check_decoding(target, decode_responses, purpose)
        return target
    decode = bool(decode_responses)
    if not shared:
        return make_client(endpoint, decode_responses=decode)
    key = (os.getpid(), endpoint, decode)
    with _clients_lock:
        client = _clients.get(key)
        if client is None:
            log.info(
                "opening a Redis connection pool to %s for %s in process %s",
                endpoint.address,
                purpose,
                key[0],
            )
            client = _clients[key] = make_client(endpoint, decode_responses=decode)
        return client


def _check_decoding(client: Any, decode_responses: bool | None, purpose: str) -> None:
    if decode_responses is None:
        return
    encoder = getattr(client, "get_encoder", None)
    if encoder is None:
        return  # not a redis-py client (an instrumented stand-in): trusted as it is
    if bool(encoder().decode_responses) != decode_responses:
        wanted = "decode_responses=True (str replies)" if decode_responses else (
            "decode_responses=False (binary values)"
        )
        msg = f"{purpose} needs a client made with {wanted}"
        raise ProviderConfigError(msg)


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


def client_for(
    endpoint: Endpoint, namespace: str | None = None, *, subject: str | None = None
) -> Any:
    """This process's shared client for ``endpoint``, with the provider's scripts loaded.

    Raises:
        StateBackendError: Redis could not be reached; names ``subject`` (by default the state
            of ``namespace``) when there is one.
        StateBackendRefusedError: Redis refused the connection (a wrong password, ...).
    """
    if subject is None and namespace is not None:
        subject = f"state {namespace!r}"
    key = (os.getpid(), endpoint, False)
    client = None
    try:
        # A cluster client talks to its nodes as it is made; a single server's only when used.
        client = connect(endpoint, purpose=subject or "the Redis state provider", shared=True)
        with _clients_lock:
            if key not in _scripted:
                _preload(client)
                _scripted.add(key)
    except BACKEND_ERRORS as exc:
        # Forget the client: the next state asks again, with a connection of its own.
        with _clients_lock:
            if _clients.pop(key, None) is not None and client is not None:
                client.close()
        raise backend_error(
            exc, address=endpoint.address, step="connection", subject=subject
        ) from exc
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
    """Close and forget this process's shared clients (tests, or after a config change)."""
    with _clients_lock:
        clients = list(_clients.values())
        _clients.clear()
        _scripted.clear()
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
