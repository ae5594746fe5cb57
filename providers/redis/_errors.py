"""What a Redis error means for a topology: an outage to wait out, or a refusal that stops it.

Every error redis-py raises is one of two kinds (``classify_error``):

- an **outage** (``ErrorKind.OUTAGE``, raised as ``StateBackendError``): the server is away or
  busy for a while, and the same command will do later. The runtime waits it out, for at most
  ``topology.state.backend.timeout.secs``.
- a **refusal** (``ErrorKind.REFUSED``, raised as ``StateBackendRefusedError``): the server
  answered, and said no for a reason that time does not fix. The topology stops at once; the
  message says the cause in plain words and the fix.

The decision is on redis-py's exception class, the most derived one in ``_BY_CLASS`` first. A
plain ``ResponseError`` (a reply redis-py has no class for) is decided on the reply's error
code, its first word (``_BY_CODE``). What neither table names: a ``ResponseError`` is a refusal
(the server answered; the same command gets the same answer), anything else an outage (the
client could not talk to the server). So:

=========================================================  ========================================
outage: waited out                                         refusal: stops the topology
=========================================================  ========================================
connection refused or lost, timeouts                       ``OOM`` (``maxmemory``, ``noeviction``)
(``ConnectionError``, ``TimeoutError``; too many clients)  ``READONLY`` (a replica)
``LOADING`` (loading its dataset)                          ``WRONGTYPE`` (a foreign key)
``BUSY`` (a script running too long)                       ``NOAUTH``, ``WRONGPASS``, other
``TRYAGAIN``, ``MOVED`` / ``ASK`` (slots migrating)        authentication errors
``CLUSTERDOWN``, ``MASTERDOWN``                            ``NOPERM`` (ACL)
redirections exhausted, a slot not served (cluster)        ``NOSCRIPT`` after redis-py reloaded it
``NOREPLICAS`` (``min-replicas-to-write``)                 ``MISCONF`` (cannot save to disk)
``UNBLOCKED`` (the server changed role)                    ``CROSSSLOT`` (keys in several slots)
any other client-side ``RedisError``                       ``NOGROUP``, ``EXECABORT``, ``ERR ...``
                                                           and any other reply; not the Redis
                                                           protocol; arguments redis-py refuses
=========================================================  ========================================

A refusal's message may carry numbers the server gives cheaply, asked for only on that error
path: ``INFO memory`` on ``OOM``, ``INFO replication`` on ``READONLY``, the ``TYPE`` of the
keys on ``WRONGTYPE``. The normal path costs nothing.

An ``OOM`` figure is read after the refusal, when the server has already freed the refused
command's arguments: the memory used then is below ``maxmemory`` whenever the write itself was
what did not fit (a 1 MB prepare into 2 MB with 1.1 MB used). So the message says what the
write needed (``written``: the bytes of its arguments, when the caller knows them), the limit,
what is used *now, after the refused write*, and the smallest ``maxmemory`` that would have
taken it.

Example:
    >>> from redis.exceptions import BusyLoadingError, OutOfMemoryError
    >>> classify_error(BusyLoadingError("Redis is loading the dataset in memory")).kind
    <ErrorKind.OUTAGE: 'outage'>
    >>> error = backend_error(
    ...     OutOfMemoryError("command not allowed when used memory > 'maxmemory'."),
    ...     address="127.0.0.1:6390", step="prepare of txid 4", subject="state 'wc/count-1'")
    >>> print(error)  # doctest: +NORMALIZE_WHITESPACE
    Redis at 127.0.0.1:6390 refused the prepare of txid 4 of state 'wc/count-1': out of memory;
    raise maxmemory, or use a volatile-* / allkeys-* eviction policy only if losing state is
    acceptable (it is not for topology state) [OutOfMemoryError: command not allowed when used
    memory > 'maxmemory'.]
    >>> print(out_of_memory(2 * 1024 * 1024, "noeviction", 1153434, 1048576))
    ... # doctest: +NORMALIZE_WHITESPACE
    maxmemory 2.00M, policy noeviction: the write of 1048576 bytes did not fit; 1.10M used now,
    after the refused write, so it needs maxmemory 2.10M or more
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from providers.errors import StateBackendError, StateBackendRefusedError

try:
    from redis import exceptions as rx
    from redis.exceptions import RedisClusterException, RedisError
except ImportError as exc:  # pragma: no cover - depends on the environment
    _msg = "the Redis state provider needs redis-py: pip install 'statefulbolts[redis]'"
    raise ImportError(_msg) from exc

__all__ = [
    "BACKEND_ERRORS",
    "PROVIDER_SETTINGS",
    "ErrorKind",
    "Verdict",
    "backend_error",
    "classify_error",
    "out_of_memory",
    "reply_code",
]

log = logging.getLogger(__name__)

# Everything redis-py raises about a server: catch these, then ask ``backend_error``.
BACKEND_ERRORS = (RedisError, RedisClusterException)
# Where the Redis provider's connection settings are: what a fix tells people to change.
PROVIDER_SETTINGS = "topology.state.provider.config"
_PIPELINE_PREFIX = " of pipeline caused error: "

# (client, keys the step used, bytes the refused command carried or None) -> figures.
Details = Callable[[Any, Mapping[Any, str], int | None], str]


class ErrorKind(enum.Enum):
    """What a Redis error means for a topology."""

    OUTAGE = "outage"  # the server is away or busy: wait, the same command will do
    REFUSED = "refused"  # the server said no: waiting does not change the answer


class Verdict(NamedTuple):
    """The kind of a Redis error, its cause in plain words, the fix, and what to ask the server.

    ``fix`` may name ``{settings}``: where the connection settings are. ``details(client,
    keys, written)``, on the error path only, asks the server for the figures behind a refusal.
    """

    kind: ErrorKind
    cause: str
    fix: str = ""
    details: Details | None = None


def human_bytes(n: int) -> str:
    """``n`` bytes as Redis' ``INFO`` shows sizes: ``512B``, ``941.54K``, ``2.00M``.

    Example:
        >>> human_bytes(1), human_bytes(2 * 1024 * 1024), human_bytes(964132)
        ('1B', '2.00M', '941.54K')
    """
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return f"{n}B"


def out_of_memory(limit: int, policy: str, used: int, written: int | None) -> str:
    """The figures of an ``OOM`` refusal, read after it (see the module docstring).

    ``written``: the bytes of the refused command's arguments (``None``: not known).
    """
    now = f"{human_bytes(used)} used now, after the refused write"
    if written is None:
        return f"maxmemory {human_bytes(limit)}, policy {policy}, {now}"
    return (
        f"maxmemory {human_bytes(limit)}, policy {policy}: the write of {written} bytes did not "
        f"fit; {now}, so it needs maxmemory {human_bytes(used + written)} or more"
    )


def _memory(client: Any, keys: Mapping[Any, str], written: int | None) -> str:
    info = _one_node(client.info("memory"))
    return out_of_memory(
        int(info["maxmemory"]), str(info["maxmemory_policy"]), int(info["used_memory"]), written
    )


def _replication(client: Any, keys: Mapping[Any, str], written: int | None) -> str:
    info = _one_node(client.info("replication"))
    return f"a replica of {info['master_host']}:{info['master_port']}"


def _key_types(client: Any, keys: Mapping[Any, str], written: int | None) -> str:
    found = []
    for key, expected in keys.items():
        kind = client.type(key)
        kind = kind.decode() if isinstance(kind, bytes) else str(kind)
        if kind not in ("none", expected):
            name = key.decode("utf-8", "replace") if isinstance(key, bytes) else key
            found.append(f"key {name!r} holds a {kind}, not a {expected}")
    return "; ".join(found)


def _one_node(info: Any) -> Mapping[str, Any]:
    """An ``INFO`` reply; on a cluster (a reply per node) the first node's."""
    if isinstance(info, Mapping) and info and all(isinstance(v, Mapping) for v in info.values()):
        return next(iter(info.values()))
    return info


def _outage(cause: str) -> Verdict:
    return Verdict(ErrorKind.OUTAGE, cause)


def _refused(cause: str, fix: str, details: Details | None = None) -> Verdict:
    return Verdict(ErrorKind.REFUSED, cause, fix, details)


_WAITING_DOES_NOT_HELP = "this is the server's answer, not an outage: waiting does not change it"
_WRONG_CREDENTIALS = _refused("the username or password is wrong", "correct them in {settings}")
_CROSSSLOT = _refused(
    "the keys of one command are in different cluster slots",
    "put a hash tag in the keys' prefix (for example '{{counts}}:') so they share a slot",
)

# redis-py's classes, looked up along the exception's MRO (most derived first).
_BY_CLASS: dict[type[BaseException], Verdict] = {
    rx.TimeoutError: _outage("timed out"),
    rx.ConnectionError: _outage("could not be reached"),
    rx.BusyLoadingError: _outage("is loading its dataset into memory"),
    rx.TryAgainError: _outage("asked to try again (its cluster slots are migrating)"),
    rx.AskError: _outage("redirected the command (its cluster slots are migrating)"),
    rx.ClusterDownError: _outage("reports the cluster down"),
    rx.MasterDownError: _outage("lost the link to its primary"),
    rx.ClusterError: _outage("could not serve the command (cluster redirections exhausted)"),
    RedisClusterException: _outage("could not serve the command (cluster)"),
    rx.OutOfMemoryError: _refused(
        "out of memory",
        "raise maxmemory, or use a volatile-* / allkeys-* eviction policy only if losing state "
        "is acceptable (it is not for topology state)",
        _memory,
    ),
    rx.ReadOnlyError: _refused(
        "it is a read-only replica",
        "point {settings} at the primary, or make this server a primary (REPLICAOF NO ONE)",
        _replication,
    ),
    rx.AuthenticationError: _refused(
        "authentication failed", "check the username and password in {settings}"
    ),
    rx.AuthenticationWrongNumberOfArgsError: _refused(
        "it does not take a username (a Redis before 6)", "remove the username from {settings}"
    ),
    rx.AuthorizationError: _refused(
        "its TLS certificate failed the OCSP check", "check the server's certificate"
    ),
    rx.NoPermissionError: _refused(
        "the user lacks a permission (ACL)",
        "grant that user the commands and keys the topology uses (ACL SETUSER ... +@read "
        "+@write +@scripting ~<its keys>), or use another user in {settings}",
    ),
    rx.NoScriptError: _refused(
        "it forgot a Lua script again right after it was loaded",
        "something flushes the script cache over and over (SCRIPT FLUSH), or a proxy sends "
        "EVALSHA and SCRIPT LOAD to different servers: stop it",
    ),
    rx.ClusterCrossSlotError: _CROSSSLOT,
    rx.CrossSlotTransactionError: _CROSSSLOT,
    rx.InvalidResponse: _refused(
        "it does not speak the Redis protocol", "check the host and port in {settings}"
    ),
    rx.DataError: _refused(
        "redis-py refused the command's arguments", "report it: the state layer sent them"
    ),
    rx.ResponseError: _refused("it answered with an error", _WAITING_DOES_NOT_HELP),
    RedisError: _outage("failed"),
}

# Reply codes redis-py has no class for (a plain ResponseError), and the authentication codes.
_BY_CODE: dict[str, Verdict] = {
    "BUSY": _outage("is busy running a script (busy-reply-threshold)"),
    "NOREPLICAS": _outage("has too few replicas online for a write (min-replicas-to-write)"),
    "UNBLOCKED": _outage("unblocked the command (its role changed)"),
    "WRONGTYPE": _refused(
        "a key holds another type of value",
        "another program writes these keys: remove that key, or give the topology a database "
        "or key prefix of its own",
        _key_types,
    ),
    "MISCONF": _refused(
        "it stopped taking writes because it cannot save to disk",
        "free disk space or fix its dir's permissions (see the server's log); turning "
        "stop-writes-on-bgsave-error off would risk losing state",
    ),
    "NOGROUP": _refused(
        "the stream or its consumer group does not exist",
        "it was deleted while the topology ran: create it again (XGROUP CREATE ... MKSTREAM)",
    ),
    "NOAUTH": _refused(
        "it requires a password and none was given",
        "set the password (and the username, if not 'default') in {settings}",
    ),
    "WRONGPASS": _WRONG_CREDENTIALS,
}
# ``ERR`` replies redis-py raises as ``AuthenticationError``: its message, without the code.
_NO_PASSWORD_SET = _refused(
    "a password was given but the server has none",
    "remove the password from {settings}, or set one on the server (requirepass)",
)
_AUTH_ERR_TEXT: dict[str, Verdict] = {
    "invalid password": _WRONG_CREDENTIALS,
    "Client sent AUTH, but no password is set": _NO_PASSWORD_SET,  # Redis before 6
    "AUTH <password> called without any password configured for the default user. Are you "
    "sure your configuration is correct?": _NO_PASSWORD_SET,
}


def reply_code(exc: BaseException) -> str | None:
    """The error code of a Redis reply (``OOM``, ``WRONGTYPE``, ``ERR``, ...), if it has one.

    redis-py keeps the code it recognised in ``status_code``; an unrecognised reply is the
    whole text, whose first word is the code (also after a pipeline's ``Command # n (...)``).

    Example:
        >>> from redis.exceptions import ResponseError
        >>> reply_code(ResponseError("WRONGTYPE Operation against a key holding the wrong kind"))
        'WRONGTYPE'
    """
    code = getattr(exc, "status_code", None)
    if isinstance(code, str) and code:
        return code
    if not isinstance(exc, rx.ResponseError):
        return None
    text = str(exc).rpartition(_PIPELINE_PREFIX)[2]
    first = text.partition(" ")[0]
    return first if first.isalpha() and first.isupper() else None


def classify_error(exc: BaseException) -> Verdict:
    """The ``Verdict`` on an error redis-py raised (see the module docstring).

    Example:
        >>> from redis.exceptions import ReadOnlyError, ResponseError
        >>> classify_error(ReadOnlyError("You can't write against a read only replica.")).kind
        <ErrorKind.REFUSED: 'refused'>
        >>> classify_error(ResponseError("BUSY Redis is busy running a script.")).cause
        'is busy running a script (busy-reply-threshold)'
    """
    code = reply_code(exc)
    if isinstance(exc, rx.AuthenticationError):
        message = str(exc).rpartition(_PIPELINE_PREFIX)[2]
        found = _BY_CODE.get(code or "") or _AUTH_ERR_TEXT.get(message)
        return found or _BY_CLASS[rx.AuthenticationError]
    for cls in type(exc).__mro__:
        verdict = _BY_CLASS.get(cls)
        if verdict is None:
            continue
        if cls is rx.ResponseError and code in _BY_CODE:
            return _BY_CODE[code]
        return verdict
    return _outage("failed")


def backend_error(
    exc: BaseException,
    *,
    address: str,
    step: str,
    subject: str | None = None,
    client: Any = None,
    keys: Mapping[Any, str] | None = None,
    settings: str = PROVIDER_SETTINGS,
    written: int | None = None,
) -> StateBackendError | StateBackendRefusedError:
    """The error to raise (``from exc``) for ``exc``: where, during what, of what, and why.

    Args:
        exc: what redis-py raised.
        address: where Redis is (``host:port``, or a cluster's nodes).
        step: what was being done (``prepare of txid 4``, ``multi_get``).
        subject: whose data (``state 'wc/count-1'``, ``map 'counts:' (owner 'count-0')``).
        client: the client that failed; with it a refusal's message gets the server's figures.
        keys: the keys the step used, each with the type it must have (``WRONGTYPE``).
        settings: where the connection settings are, for the fix of an authentication or
            replica refusal.
        written: the bytes of the command's arguments, when it wrote (a prepare's delta):
            an ``OOM`` refusal says the write did not fit, and how much it needed.
    """
    verdict = classify_error(exc)
    of = f" of {subject}" if subject else ""
    said = f"{type(exc).__name__}: {exc}"
    if verdict.kind is ErrorKind.OUTAGE:
        return StateBackendError(f"Redis at {address} {verdict.cause} during {step}{of}: {said}")
    cause = verdict.cause
    if verdict.details is not None and client is not None:
        figures = _figures(verdict.details, client, keys or {}, written)
        cause = f"{cause} ({figures})" if figures else cause
    fix = verdict.fix.format(settings=settings)
    return StateBackendRefusedError(
        f"Redis at {address} refused the {step}{of}: {cause}; {fix} [{said}]"
    )


def _figures(details: Details, client: Any, keys: Mapping[Any, str], written: int | None) -> str:
    """The server's figures behind a refusal, or ``""`` if it cannot give them now."""
    try:
        return details(client, keys, written)
    except (*BACKEND_ERRORS, KeyError, TypeError, ValueError, StopIteration) as exc:
        # A courtesy only: the refusal being reported is the error that counts.
        log.debug("no figures for a Redis refusal: %s: %s", type(exc).__name__, exc)
        return ""
