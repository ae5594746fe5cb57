"""How the Redis connectors reach their server: their shared config, connection and errors.

The connectors neither make redis-py clients themselves nor borrow the state provider's: they
name the project's one connection layer, ``providers.redis``, which stays at the bottom of the
house because the state provider and ``RedisBackingMap`` use it too (``providers`` imports
nothing of ours). From it they take

- ``connect``: one URL grammar (``redis://[[user]:password@]host[:port][/db]``, ``rediss://``
  for TLS; or ``host``/``port``/``database``, validated by the provider config's own model),
  one message for a bad address, which never shows a password, and one pool per process and
  server when ``shared``;
- ``backend_error``: whether a Redis error is an outage (``StateBackendError``: the server away
  or busy; waited out, or the batch retried) or a refusal (``StateBackendRefusedError``: a wrong
  password, a key that is not a stream, out of memory; the topology stops), with cause and fix.

What is the connectors' own is here: the config key they share (``RedisConnectorConfig``,
``redis.stream.url``; each connector's model adds its keys, next to the connector), where a
connector's server is (``server``: its arguments, else its key, else ``DEFAULT_URL``), the
install command, and their Redis errors, raised naming the connector, its keys and where its
settings come from (``raise_backend_errors``).

redis-py is optional: nothing here imports it, nor ``providers.redis`` (which does), before a
connector connects, so ``import statefulbolts`` works without it; a connector that connects
without it fails with the install command (``require_redis``).

Example:
    >>> config = RedisConnectorConfig.from_conf({URL_KEY: "redis://:pw@10.0.0.5:6380/1"},
    ...                                         who="doc")
    >>> config
    RedisConnectorConfig(url=SecretStr('**********'))
    >>> server(config, url=None, host=None, port=6379, db=0)
    'redis://:pw@10.0.0.5:6380/1'
    >>> server(config, url=None, host="h", port=7000, db=2)
    {'host': 'h', 'port': 7000, 'database': 2}
"""

from __future__ import annotations

import contextlib
import typing
from collections.abc import Iterator, Mapping
from types import ModuleType
from typing import Any, Final, Self

from pydantic import BaseModel, ConfigDict, Field, SecretStr, ValidationError

from providers import StateBackendError, StateBackendRefusedError
from statefulbolts.errors import ConfigError

__all__ = [
    "DEFAULT_URL",
    "URL_KEY",
    "RedisConnectorConfig",
    "backend_error",
    "backend_errors",
    "connect",
    "raise_backend_errors",
    "require_redis",
    "server",
    "text",
]

URL_KEY: Final = "redis.stream.url"
DEFAULT_URL = "redis://localhost:6379/0"
_INSTALL = "pip install 'statefulbolts[redis]'"


def require_redis(who: str) -> ModuleType:
    """redis-py, or an ``ImportError`` saying ``who`` needs it and how to install it."""
    try:
        import redis
    except ImportError as exc:  # pragma: no cover - depends on the environment
        msg = f"{who} needs redis-py: {_INSTALL}"
        raise ImportError(msg) from exc
    return redis


# ------------------------------------------------------------------ config
class RedisConnectorConfig(BaseModel):
    """The topology config keys every Redis connector reads; each connector's model adds its own.

    A key that is missing, ``None`` or empty is unset: the connector's argument, then its
    default, applies. Types are strict, as ``TopologyConfig``'s are. A connector validates its
    keys where it reads them (``from_conf``); an argument given to it wins over its key.
    """

    model_config = ConfigDict(frozen=True, extra="ignore", strict=True, populate_by_name=False)

    url: SecretStr | None = Field(
        None,
        alias=URL_KEY,
        description=(
            "`RedisStreamSpout`, `PartitionedRedisStreamSpout`: the Redis server, "
            "`redis://[[user]:password@]host[:port][/db]` (`rediss://` for TLS), when no URL or "
            "host is given as an argument (never printed)."
        ),
        json_schema_extra={"shown_default": f"`{DEFAULT_URL}`"},
    )

    @classmethod
    def from_conf(cls, conf: Mapping[str, Any] | None, *, who: str) -> Self:
        """This model's keys in ``conf``, validated.

        Raises:
            ConfigError: a key has the wrong type or value; the message starts with ``who``,
                names the key and what was got (never a URL: it may hold a password).
        """
        conf = conf or {}
        given = {}
        for field in cls.model_fields.values():
            key = str(field.alias)
            value = conf.get(key)
            if value is None or (isinstance(value, str | list | tuple) and not value):
                continue
            given[key] = value
        try:
            return cls.model_validate(given)
        except ValidationError as exc:
            raise ConfigError(_describe(exc, cls, who)) from None


def _describe(exc: ValidationError, model: type[BaseModel], who: str) -> str:
    """One clause per problem: the key, what is wrong, what was got (unless secret)."""
    secret = {
        str(field.alias)
        for field in model.model_fields.values()
        if SecretStr in (field.annotation, *typing.get_args(field.annotation))
    }
    problems = []
    for err in exc.errors(include_url=False):
        loc = err["loc"]
        message = err["msg"].removeprefix("Value error, ")
        if not loc:
            problems.append(message)
            continue
        key = str(loc[0])
        where = repr(key) + "".join(f"[{part!r}]" for part in loc[1:])
        shown = "" if key in secret else f" (got {err['input']!r:.80})"
        problems.append(f"config {where}: {message}{shown}")
    return f"{who}: " + "; ".join(problems)


def server(
    config: RedisConnectorConfig, *, url: str | None, host: str | None, port: int, db: int
) -> str | dict[str, Any]:
    """Where a connector's server is: the host or URL given to it, else its key, else the default.

    A host comes as a mapping of ``redisConfig`` fields, which ``providers.redis.connect``
    validates as the state provider's own config.
    """
    if host is not None:
        return {"host": host, "port": port, "database": db}
    if url:
        return url
    if config.url is not None:
        return config.url.get_secret_value()
    return DEFAULT_URL


# ------------------------------------------------------------------ connection
def connect(
    target: Any,
    *,
    who: str,
    decode_responses: bool | None,
    shared: bool,
    timeout_ms: int | None = None,
) -> Any:
    """A redis-py client for ``target``, made by the project's connection layer.

    ``providers.redis.connect`` with the connector's own settings: replies as bytes (``False``,
    the spouts decode entries themselves) or ``str`` (``True``), or either for a client handed
    in (``None``); ``shared``: this process's one client for the server (never closed by a
    connector), else a new one the caller closes; ``timeout_ms``: the socket timeout when the
    URL sets none (0: none; ``None``: the connection layer's default, as the state provider's).

    Raises:
        ImportError: redis-py is not installed (with the install command).
        ProviderConfigError: ``target`` is not a Redis address; names ``who``, never a password.
    """
    require_redis(who)
    from providers.redis import connect as connect_redis

    timeout = {} if timeout_ms is None else {"timeout_ms": timeout_ms}
    return connect_redis(
        target, purpose=who, decode_responses=decode_responses, shared=shared, **timeout
    )


def text(value: Any) -> str:
    """A reply as ``str`` (a client made with ``decode_responses=False`` gives bytes).

    Example:
        >>> text(b"1700000000000-0"), text("0-1")
        ('1700000000000-0', '0-1')
    """
    return value.decode() if isinstance(value, bytes) else str(value)


# ------------------------------------------------------------------ errors
def backend_errors() -> tuple[type[BaseException], ...]:
    """What redis-py raises about a server (``providers.redis.BACKEND_ERRORS``)."""
    require_redis("a Redis connector")
    from providers.redis import BACKEND_ERRORS

    return BACKEND_ERRORS


def backend_error(
    exc: BaseException,
    client: Any,
    *,
    step: str,
    subject: str,
    settings: str,
    keys: Mapping[Any, str] | None = None,
    fixes: Mapping[str, str] | None = None,
) -> StateBackendError | StateBackendRefusedError:
    """A Redis error as an outage (``StateBackendError``) or a refusal, to raise from ``exc``.

    ``providers.redis.classify_error`` decides, and the message says the cause and the fix.

    Args:
        exc: what redis-py raised.
        client: the client that raised it (its address is named; some refusals ask it for
            figures, such as the type of ``keys`` on ``WRONGTYPE``).
        step: what was being done (``"read"``, ``"XREVRANGE"``).
        subject: what it was done to, naming the connector (``"stream 'clicks' (...)"``).
        settings: where the connector's address and credentials come from (for the fix).
        keys: the keys involved, with the type each should have.
        fixes: the connector's own fix, by the reply's error code (``{"WRONGTYPE": ...}``),
            added after the server's.
    """
    from providers.redis import address_of, reply_code
    from providers.redis import backend_error as classified

    error = classified(
        exc,
        address=address_of(client),
        step=step,
        subject=subject,
        client=client,
        keys=keys,
        settings=settings,
    )
    fix = (fixes or {}).get(reply_code(exc) or "")
    return type(error)(f"{error}; {fix}") if fix else error


@contextlib.contextmanager
def raise_backend_errors(
    client: Any,
    *,
    step: str,
    subject: str,
    settings: str,
    keys: Mapping[Any, str] | None = None,
    fixes: Mapping[str, str] | None = None,
) -> Iterator[None]:
    """Raise a Redis error in the block as ``backend_error`` words it (arguments as there)."""
    errors = backend_errors()
    try:
        yield
    except errors as exc:
        raise backend_error(
            exc, client, step=step, subject=subject, settings=settings, keys=keys, fixes=fixes
        ) from exc
