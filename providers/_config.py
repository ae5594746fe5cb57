"""The provider configuration: ``topology.state.provider.config``, validated.

Storm passes this key as a JSON string; a dict is accepted too. The field names are Storm's::

    {
      "keyClass": "builtins.str",                  # class keys are rebuilt as (optional)
      "valueClass": "myapp.model.Point",           # class values are rebuilt as (optional)
      "keySerializerClass": "myapp.ser.KeySer",    # serialize/deserialize, no-arg constructor
      "valueSerializerClass": "myapp.ser.ValSer",
      "jedisPoolConfig": {"host": "localhost", "port": 6379, "timeout": 2000,
                          "database": 0, "password": "..."},
      "jedisClusterConfig": {"nodes": ["10.0.0.1:7000", "10.0.0.2:7000"], "timeout": 2000,
                             "maxRedirections": 5, "password": "..."}
    }

plus a Python spelling of the pool config, ``redisConfig`` (the pool fields, ``username``, ``ssl``
and ``url``, a ``redis://`` or ``rediss://`` URL), and a top-level ``url`` as shorthand for
``{"redisConfig": {"url": ...}}``. Missing fields get real defaults (``localhost:6379``, 2000 ms,
database 0), not the zeros a Java no-arg constructor gives. Timeouts are milliseconds; 0 means
none, as in Jedis. When a pool and a cluster are both configured the pool wins, as in Storm.

Errors are ``ProviderConfigError`` naming the field as a dotted path and what is allowed.
Passwords, and URLs since they may carry one, are ``SecretStr``: they never appear in a repr, a log
line or an error message.

``provider_config_fields`` is the one parse of the key's JSON (every provider, the serializer
fields the state tool and the stored shape record, the system states' config): one place, one
message, cached by text.

The same model validates every other Redis address in the project (a stream spout's URL or
host, a ``RedisBackingMap``'s URL): ``redis_endpoint_of`` turns a URL or a mapping of
``redisConfig`` fields into a ``RedisEndpoint`` with the same rules and messages, and
``providers.redis.connect`` makes the client.
"""

from __future__ import annotations

import difflib
import functools
import json
import logging
from collections.abc import Mapping
from types import MappingProxyType
from typing import Annotated, Any
from urllib.parse import unquote, urlsplit, urlunsplit

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SecretStr,
    ValidationError,
    field_validator,
    model_validator,
)

from providers.errors import ProviderConfigError

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PROVIDER",
    "DEFAULT_PORT",
    "DEFAULT_TIMEOUT_MS",
    "RedisClusterConfig",
    "RedisClusterEndpoint",
    "RedisConfig",
    "RedisEndpoint",
    "RedisPoolConfig",
    "SERIALIZER_FIELDS",
    "STATE_PROVIDER_CONFIG_KEY",
    "STATE_PROVIDER_KEY",
    "StateProviderConfig",
    "parse_provider_config",
    "provider_config_fields",
    "redacted_url",
    "redis_endpoint_of",
]

log = logging.getLogger(__name__)

STATE_PROVIDER_KEY = "topology.state.provider"
STATE_PROVIDER_CONFIG_KEY = "topology.state.provider.config"
DEFAULT_PROVIDER = "providers.memory.InMemoryKeyValueStateProvider"
# The fields of the provider config that choose how keys and values are encoded (Storm's names);
# every provider honours them (providers.resolve_serializers).
SERIALIZER_FIELDS = ("keyClass", "valueClass", "keySerializerClass", "valueSerializerClass")

DEFAULT_HOST = "localhost"
DEFAULT_PORT = 6379
DEFAULT_TIMEOUT_MS = 2000
DEFAULT_DATABASE = 0
DEFAULT_MAX_REDIRECTIONS = 5

Port = Annotated[int, Field(ge=1, le=65535)]
Millis = Annotated[int, Field(ge=0)]

# Field names whose input must never be echoed back in an error message.
_SECRET_FIELDS = frozenset({"password", "url"})


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=False)


class RedisEndpoint(_Model):
    """Where one Redis server is, resolved from the pool config (hashable: a pool cache key)."""

    host: str
    port: int
    database: int
    timeout_ms: int
    username: str | None = None
    password: SecretStr | None = None
    ssl: bool = False

    @property
    def address(self) -> str:
        """``host:port``, for messages (never the password)."""
        return f"{self.host}:{self.port}"

    @property
    def timeout_s(self) -> float | None:
        """The socket timeout in seconds; ``None`` when the config says 0 (no timeout)."""
        return self.timeout_ms / 1000 if self.timeout_ms else None


class RedisClusterEndpoint(_Model):
    """Where a Redis cluster is, resolved from the cluster config (hashable)."""

    nodes: tuple[tuple[str, int], ...]
    timeout_ms: int
    max_redirections: int
    password: SecretStr | None = None

    @property
    def address(self) -> str:
        """``host:port,host:port``, for messages (never the password)."""
        return ",".join(f"{host}:{port}" for host, port in self.nodes)

    @property
    def timeout_s(self) -> float | None:
        """The socket timeout in seconds; ``None`` when the config says 0 (no timeout)."""
        return self.timeout_ms / 1000 if self.timeout_ms else None


class RedisPoolConfig(_Model):
    """Storm's ``jedisPoolConfig``: one Redis server."""

    host: str = Field(default=DEFAULT_HOST, min_length=1)
    port: Port = DEFAULT_PORT
    timeout: Millis = DEFAULT_TIMEOUT_MS
    database: int = Field(default=DEFAULT_DATABASE, ge=0)
    password: SecretStr | None = None

    def endpoint(self) -> RedisEndpoint:
        """The server this config points at."""
        return RedisEndpoint(
            host=self.host,
            port=self.port,
            database=self.database,
            timeout_ms=self.timeout,
            password=self.password,
        )


class RedisConfig(RedisPoolConfig):
    """``redisConfig``: the pool fields, plus ``username``, ``ssl`` and a ``url``.

    A ``url`` (``redis://[[user]:password@]host[:port][/db]``, ``rediss://`` for TLS) says where
    the server is; host, port, database, username and password given beside it are an error, so
    the two can never disagree silently. ``timeout`` still applies.
    """

    username: str | None = None
    ssl: bool = False
    url: SecretStr | None = None

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            _split_url(value.get_secret_value())
        return value

    @model_validator(mode="after")
    def _url_excludes_fields(self) -> RedisConfig:
        if self.url is not None:
            clash = sorted(
                {"host", "port", "database", "username", "password", "ssl"} & self.model_fields_set
            )
            if clash:
                msg = (
                    f"give either url or {', '.join(clash)}, not both "
                    "(the url already says where the server is)"
                )
                raise ValueError(msg)
        return self

    def endpoint(self) -> RedisEndpoint:
        """The server this config points at, from ``url`` when one is given."""
        if self.url is None:
            return RedisEndpoint(
                host=self.host,
                port=self.port,
                database=self.database,
                timeout_ms=self.timeout,
                username=self.username,
                password=self.password,
                ssl=self.ssl,
            )
        parts = _split_url(self.url.get_secret_value())
        return RedisEndpoint(timeout_ms=self.timeout, **parts)


def _split_url(url: str) -> dict[str, Any]:
    """Parse a redis URL into endpoint fields; the message of a failure never quotes the URL."""
    try:
        split = urlsplit(url)
        port = split.port
    except ValueError as exc:
        msg = "must be redis://[[user]:password@]host[:port][/db] with a numeric port"
        raise ValueError(msg) from exc
    if split.scheme not in ("redis", "rediss"):
        msg = f"scheme must be 'redis' or 'rediss', got {split.scheme!r}"
        raise ValueError(msg)
    if split.query or split.fragment:
        msg = "query strings and fragments are not supported; use the redisConfig fields"
        raise ValueError(msg)
    path = split.path.strip("/")
    if path and not path.isdigit():
        msg = "the path must be a database number, as in redis://host:6379/0"
        raise ValueError(msg)
    return {
        "host": split.hostname or DEFAULT_HOST,
        "port": DEFAULT_PORT if port is None else port,
        "database": int(path) if path else DEFAULT_DATABASE,
        "username": unquote(split.username) if split.username else None,
        "password": SecretStr(unquote(split.password)) if split.password else None,
        "ssl": split.scheme == "rediss",
    }


def redacted_url(url: str) -> str:
    """``url`` with its password (if any) replaced by ``***``: for messages and logs.

    Example:
        >>> redacted_url("redis://app:s3cret@10.0.0.5:6379/0"), redacted_url("redis://h:1/0")
        ('redis://app:***@10.0.0.5:6379/0', 'redis://h:1/0')
    """
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return "<a URL that cannot be parsed>"
    if password is None:
        return url
    user, _, host = parts.netloc.rpartition("@")
    name = user.split(":", 1)[0]
    return urlunsplit(parts._replace(netloc=f"{name}:***@{host}"))


def redis_endpoint_of(
    target: str | Mapping[str, Any], *, where: str, timeout_ms: int = DEFAULT_TIMEOUT_MS
) -> RedisEndpoint:
    """The server a URL or a mapping of ``redisConfig`` fields names, validated as the provider's.

    Args:
        target: ``redis://[[user]:password@]host[:port][/db]`` (``rediss://`` for TLS), or
            ``{"host": ..., "port": ..., "database": ..., "timeout": ...}`` and the other
            ``redisConfig`` fields.
        where: who was given it, for messages (``RedisStreamSpout``, ``RedisBackingMap``).
        timeout_ms: the socket timeout when ``target`` sets none (0: none).

    Raises:
        ProviderConfigError: naming ``where`` and the field; never the password.

    Example:
        >>> redis_endpoint_of("rediss://:pw@10.0.0.5/2", where="doc").address
        '10.0.0.5:6379'
        >>> endpoint = redis_endpoint_of({"host": "h", "port": 7000}, where="doc", timeout_ms=0)
        >>> endpoint.address, endpoint.timeout_s
        ('h:7000', None)
    """
    if isinstance(target, str):
        try:
            parts = _split_url(target)
        except ValueError as exc:
            msg = f"{where}: {redacted_url(target)!r} is not a Redis URL: {exc}"
            raise ProviderConfigError(msg) from None
        return RedisEndpoint(timeout_ms=timeout_ms, **parts)
    if not isinstance(target, Mapping):
        msg = f"{where}: expected a Redis URL or a mapping of redisConfig fields, got {target!r}"
        raise ProviderConfigError(msg)
    try:
        config = RedisConfig.model_validate({"timeout": timeout_ms, **target})
    except ValidationError as exc:
        raise ProviderConfigError(_describe(exc, RedisConfig, where)) from None
    return config.endpoint()


class RedisClusterConfig(_Model):
    """Storm's ``jedisClusterConfig``: seed nodes of a Redis cluster."""

    nodes: list[str] = Field(min_length=1)
    timeout: Millis = DEFAULT_TIMEOUT_MS
    max_redirections: int = Field(default=DEFAULT_MAX_REDIRECTIONS, ge=1, alias="maxRedirections")
    password: SecretStr | None = None

    @field_validator("nodes")
    @classmethod
    def _check_nodes(cls, nodes: list[str]) -> list[str]:
        for node in nodes:
            _split_node(node)
        return nodes

    def endpoint(self) -> RedisClusterEndpoint:
        """The cluster this config points at."""
        return RedisClusterEndpoint(
            nodes=tuple(_split_node(node) for node in self.nodes),
            timeout_ms=self.timeout,
            max_redirections=self.max_redirections,
            password=self.password,
        )


def _split_node(node: str) -> tuple[str, int]:
    host, sep, port = node.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 1 <= int(port) <= 65535:
        msg = f"each node must be 'host:port' with a port from 1 to 65535, got {node!r}"
        raise ValueError(msg)
    return host, int(port)


class StateProviderConfig(_Model):
    """The whole ``topology.state.provider.config``.

    Example:
        >>> cfg = StateProviderConfig.parse('{"jedisPoolConfig": {"host": "10.0.0.5"}}')
        >>> cfg.redis_endpoint().address
        '10.0.0.5:6379'
    """

    key_class: str | None = Field(default=None, alias="keyClass")
    value_class: str | None = Field(default=None, alias="valueClass")
    key_serializer_class: str | None = Field(default=None, alias="keySerializerClass")
    value_serializer_class: str | None = Field(default=None, alias="valueSerializerClass")
    jedis_pool_config: RedisPoolConfig | None = Field(default=None, alias="jedisPoolConfig")
    jedis_cluster_config: RedisClusterConfig | None = Field(
        default=None, alias="jedisClusterConfig"
    )
    redis_config: RedisConfig | None = Field(default=None, alias="redisConfig")
    url: SecretStr | None = None

    @field_validator("url")
    @classmethod
    def _check_url(cls, value: SecretStr | None) -> SecretStr | None:
        if value is not None:
            _split_url(value.get_secret_value())
        return value

    @model_validator(mode="after")
    def _one_pool_spelling(self) -> StateProviderConfig:
        given = [
            name
            for name, value in (
                ("jedisPoolConfig", self.jedis_pool_config),
                ("redisConfig", self.redis_config),
                ("url", self.url),
            )
            if value is not None
        ]
        if len(given) > 1:
            msg = f"{' and '.join(given)} each configure the Redis server; give only one of them"
            raise ValueError(msg)
        return self

    def serializer_fields(self) -> dict[str, str | None]:
        """Storm's four serializer fields by their config names (``keyClass``, ...)."""
        return {
            "keyClass": self.key_class,
            "valueClass": self.value_class,
            "keySerializerClass": self.key_serializer_class,
            "valueSerializerClass": self.value_serializer_class,
        }

    @classmethod
    def parse(cls, raw: str | Mapping[str, Any] | None) -> StateProviderConfig:
        """Validate a JSON string, a dict or ``None`` (all defaults)."""
        if raw is None:
            return cls()
        if isinstance(raw, str | bytes):
            return _parse_json(raw if isinstance(raw, str) else raw.decode("utf-8"))
        return _validate(dict(provider_config_fields(raw)))

    def redis_endpoint(self) -> RedisEndpoint | RedisClusterEndpoint:
        """The Redis target: the pool config if any (Storm: the pool wins), else the cluster."""
        pool: RedisPoolConfig | None = self.redis_config or self.jedis_pool_config
        if pool is None and self.url is not None:
            return RedisConfig.model_validate({"url": self.url}).endpoint()
        if pool is not None:
            endpoint = pool.endpoint()
            if self.jedis_cluster_config is not None and endpoint not in _warned_both:
                _warned_both.add(endpoint)
                log.warning(
                    "%s configures both a Redis pool and a cluster; using the pool at %s "
                    "(as Storm does)",
                    STATE_PROVIDER_CONFIG_KEY,
                    endpoint.address,
                )
            return endpoint
        if self.jedis_cluster_config is not None:
            return self.jedis_cluster_config.endpoint()
        return RedisPoolConfig().endpoint()


# Pool endpoints already warned about (a provider is made per state: warn once, not per task).
_warned_both: set[RedisEndpoint] = set()


@functools.lru_cache(maxsize=128)
def _parse_json(text: str) -> StateProviderConfig:
    return _validate(dict(provider_config_fields(text)))


def provider_config_fields(raw: Any) -> Mapping[str, Any]:
    """``topology.state.provider.config`` as a read-only mapping of its fields: the one parse.

    Storm's JSON object string (or bytes), a mapping, or ``None`` / a blank string (no fields).
    Every provider's own validation starts from this; so do the serializer fields the state tool
    and the stored shape read. A JSON text is parsed once per process (cached by text).

    Raises:
        ProviderConfigError: not JSON (only the position is said: the text may hold a
            password), not an object, or neither a string nor a mapping.

    Example:
        >>> provider_config_fields('{"valueClass": "int"}')["valueClass"]
        'int'
        >>> try:
        ...     provider_config_fields("[1]")
        ... except ProviderConfigError as exc:
        ...     print(exc)
        topology.state.provider.config must be a JSON object, got list
    """
    if raw is None:
        return MappingProxyType({})
    if isinstance(raw, bytes):
        raw = raw.decode("utf-8", "replace")
    if isinstance(raw, str):
        return _json_fields(raw)
    if not isinstance(raw, Mapping):
        msg = (
            f"{STATE_PROVIDER_CONFIG_KEY} must be a JSON object string or a dict, "
            f"got {type(raw).__name__}"
        )
        raise ProviderConfigError(msg)
    return MappingProxyType(dict(raw))


@functools.lru_cache(maxsize=128)
def _json_fields(text: str) -> Mapping[str, Any]:
    try:
        data = json.loads(text) if text.strip() else {}
    except json.JSONDecodeError as exc:
        # The text may hold a password, so only the position is reported.
        msg = (
            f"{STATE_PROVIDER_CONFIG_KEY} is not valid JSON: {exc.msg} at line {exc.lineno} "
            f"column {exc.colno}"
        )
        raise ProviderConfigError(msg) from None
    if not isinstance(data, dict):
        msg = f"{STATE_PROVIDER_CONFIG_KEY} must be a JSON object, got {type(data).__name__}"
        raise ProviderConfigError(msg)
    return MappingProxyType(data)


def _validate(data: dict[str, Any]) -> StateProviderConfig:
    try:
        return StateProviderConfig.model_validate(data)
    except ValidationError as exc:
        raise ProviderConfigError(_describe(exc)) from None


def parse_provider_config(conf: Mapping[str, Any] | None) -> StateProviderConfig:
    """Validate ``conf[topology.state.provider.config]`` (missing: all defaults)."""
    return StateProviderConfig.parse((conf or {}).get(STATE_PROVIDER_CONFIG_KEY))


def _model_at(
    path: tuple[str | int, ...], root: type[BaseModel] = StateProviderConfig
) -> type[BaseModel] | None:
    """The model class that owns the field at ``path`` (for listing what is allowed there)."""
    model: type[BaseModel] | None = root
    for part in path:
        if model is None or isinstance(part, int):
            return None
        field = next((f for n, f in model.model_fields.items() if (f.alias or n) == part), None)
        if field is None:
            return None
        nested = field.annotation
        candidates = getattr(nested, "__args__", (nested,))
        model = next(
            (c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None
        )
    return model


def _allowed(model: type[BaseModel]) -> list[str]:
    return [f.alias or n for n, f in model.model_fields.items()]


def _dotted(loc: tuple[str | int, ...]) -> str:
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _describe(
    exc: ValidationError,
    root: type[BaseModel] = StateProviderConfig,
    label: str = STATE_PROVIDER_CONFIG_KEY,
) -> str:
    """One line per problem: the dotted field, what is wrong, what is allowed; never a secret.

    ``root`` is the model validated, ``label`` what the message starts with (whose config).
    """
    lines = []
    for err in exc.errors(include_url=False, include_input=True):
        loc = tuple(err["loc"])
        where = _dotted(loc)
        if err["type"] == "extra_forbidden":
            owner = _model_at(loc[:-1], root)
            allowed = _allowed(owner) if owner else []
            hint = difflib.get_close_matches(str(loc[-1]), allowed, n=1)
            line = f"unknown field {where!r}"
            if hint:
                line += f" (did you mean {hint[0]!r}?)"
            if allowed:
                line += f"; allowed fields here: {', '.join(allowed)}"
            lines.append(line)
            continue
        message = err["msg"].removeprefix("Value error, ")
        shown = ""
        secret = any(str(part) in _SECRET_FIELDS for part in loc)
        value = err.get("input")
        if not secret and isinstance(value, str | int | float | bool) and loc:
            shown = f" (got {value!r:.80})"
        target = f"field {where!r}: " if where else ""
        lines.append(f"{target}{message}{shown}")
    return f"{label}: " + "; ".join(lines)
