"""Which ``Host`` headers the dashboard answers, and the middleware that refuses the others.

A page on another site can make a browser send requests to the dashboard under a name the
attacker's DNS points at 127.0.0.1 (DNS rebinding); the browser then lets that page read the
answers: errors, tracebacks, the topology. Such a request carries the attacker's name in its
``Host`` header, so the dashboard answers only to the names it is reached by:

1. the loopback names: ``localhost``, ``127.0.0.1``, ``::1``;
2. the configured host (``topology.ui.host``) and the address it bound;
3. bound to every interface (``0.0.0.0``, ``::``): also this machine's host name, its fully
   qualified name and the addresses they resolve to.

Any other ``Host`` (or none) gets ``400`` with a one-line text and nothing of the topology.
Starlette's ``TrustedHostMiddleware`` does this too, but the releases our range allows split
``[::1]:8080`` at its first colon; ``HostCheck`` parses IPv6 literals in every release.

Example:
    >>> names = allowed_hosts("127.0.0.1", "127.0.0.1")
    >>> sorted(names)
    ['127.0.0.1', '::1', 'localhost']
    >>> host_of("[::1]:8080"), host_of("LocalHost:80"), host_of("evil.example")
    ('::1', 'localhost', 'evil.example')
"""

from __future__ import annotations

import ipaddress
import logging
import socket
from collections.abc import Iterable

from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = [
    "LOOPBACK_NAMES",
    "WILDCARDS",
    "HostCheck",
    "allowed_hosts",
    "beyond_loopback",
    "exposure_warning",
    "host_of",
]

log = logging.getLogger(__name__)

LOOPBACK_NAMES = frozenset({"localhost", "127.0.0.1", "::1"})
# Hosts that bind every interface.
WILDCARDS = frozenset({"", "0.0.0.0", "::"})  # noqa: S104 - names to recognise, not to bind


def host_of(header: str) -> str:
    """The host part of a ``Host`` header, lower case, without its port or IPv6 brackets."""
    value = header.strip().lower()
    if value.startswith("["):
        return value[1 : value.find("]")] if "]" in value else value
    if value.count(":") == 1:
        return value.split(":", 1)[0]
    return value


def _normal(host: str) -> str:
    return host_of(f"[{host}]" if ":" in host and not host.startswith("[") else host)


def _machine_names() -> set[str]:
    """This machine's names and their addresses (rule 3); whatever resolves."""
    names = {socket.gethostname(), socket.getfqdn()}
    found = set()
    for name in names:
        try:
            infos = socket.getaddrinfo(name, None)
        except OSError:
            continue
        found |= {str(info[4][0]) for info in infos}
    return {_normal(n) for n in names | found if n}


def allowed_hosts(configured: str, bound: str, extra: Iterable[str] = ()) -> frozenset[str]:
    """The hosts a request may name (rules 1 to 3), lower case, without brackets."""
    names = set(LOOPBACK_NAMES) | {_normal(configured), _normal(bound)} | set(map(_normal, extra))
    if configured.strip("[]") in WILDCARDS or bound in WILDCARDS:
        names |= _machine_names()
    return frozenset(n for n in names if n not in WILDCARDS)


def beyond_loopback(bound: str) -> bool:
    """Whether a bound address is reachable from other machines (anything but loopback)."""
    try:
        return not ipaddress.ip_address(_normal(bound)).is_loopback
    except ValueError:
        return True


def exposure_warning(topology: str, host: str, bound: str, port: int) -> str | None:
    """The one-line warning for a dashboard listening beyond loopback; ``None`` on loopback.

    Example:
        >>> exposure_warning("wc", "127.0.0.1", "127.0.0.1", 8080) is None
        True
        >>> print(exposure_warning("wc", "0.0.0.0", "0.0.0.0", 8080))
        ... # doctest: +NORMALIZE_WHITESPACE
        the dashboard of topology 'wc' listens on 0.0.0.0:8080, beyond loopback: anyone who can
        reach this machine can read its figures, errors and tracebacks (there is no login); set
        topology.ui.host to 127.0.0.1 to keep it to this machine
    """
    if not beyond_loopback(bound):
        return None
    return (
        f"the dashboard of topology {topology!r} listens on {host}:{port}, beyond loopback: "
        "anyone who can reach this machine can read its figures, errors and tracebacks (there "
        "is no login); set topology.ui.host to 127.0.0.1 to keep it to this machine"
    )


class HostCheck:
    """ASGI middleware: a request whose ``Host`` is not among ``allowed`` gets 400, and no data.

    Args:
        app: the application it guards.
        allowed: the hosts (``allowed_hosts``).
        topology: the topology's name, for the log.
    """

    def __init__(self, app: ASGIApp, allowed: Iterable[str], topology: str) -> None:
        self._app = app
        self._allowed = frozenset(allowed)
        self._topology = topology

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Pass an allowed request on; answer any other HTTP request with 400."""
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        header = ""
        for key, value in scope.get("headers", []):
            if key == b"host":
                header = value.decode("latin-1")
                break
        if host_of(header) in self._allowed:
            await self._app(scope, receive, send)
            return
        log.info("dashboard of %r refused a request for Host %r", self._topology, header)
        text = (
            f"400 Bad Request: this dashboard does not answer to Host {header!r}; reach it by "
            "127.0.0.1 or localhost, or by the name set as topology.ui.host.\n"
        )
        await PlainTextResponse(text, status_code=400)(scope, receive, send)
