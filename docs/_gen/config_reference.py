"""The configuration reference, generated from the config models.

Every key, its type, default and allowed values come from the models the runtime validates with:
``statefulbolts.config.TopologyConfig`` (the ``topology.*`` keys, also ``Config``'s constants) and
``providers._config.StateProviderConfig`` (the fields of ``topology.state.provider.config``),
and the connectors' config models (``CONNECTOR_MODELS``: the keys the sources read). Only the
meaning of each key is written here, in ``TOPOLOGY_MEANINGS`` / ``PROVIDER_MEANINGS`` (a model
field's own ``description`` wins, and the connectors' fields all have one): a key the models
gain without a meaning fails the build, and so does a meaning left for a key they no longer
have.

Used two ways:

- as an MkDocs hook (``hooks:`` in ``mkdocs.yml``): ``<!-- config-reference -->`` in a page is
  replaced by the tables when the site is built;
- as a script: ``python docs/_gen/config_reference.py`` prints the Markdown.
"""

from __future__ import annotations

import sys
import types
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

# The docs describe the code of this checkout, whatever else is installed.
ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import annotated_types  # noqa: E402
from pydantic import BaseModel, SecretStr  # noqa: E402
from pydantic.fields import FieldInfo  # noqa: E402
from pydantic_core import PydanticUndefined  # noqa: E402

MARKER = "<!-- config-reference -->"

TOPOLOGY_MEANINGS: dict[str, str] = {
    "topology.state.provider": (
        "Dotted name of the state provider class. Installed modules are imported; a module that "
        "is not installed is looked for in the extlib folders (see `topology.state.extlib.dir`)."
    ),
    "topology.state.provider.config": (
        "The provider's own config, a JSON string (as in Storm) or a mapping; its fields are in "
        "the next table."
    ),
    "topology.state.checkpoint.interval.ms": (
        "Time between checkpoint transactions, in ms, under the `interval` cadence "
        "(`topology.state.checkpoint.cadence`); under `back-to-back` a transaction starts as "
        "soon as the last committed while tuples wait, and the interval bounds the first "
        "transaction's filling and how often a partitioned spout is asked for more. A "
        "transactional topology waits this long before it starts a new batch after one that "
        "emitted nothing."
    ),
    "topology.state.checkpoint.cadence": (
        "When the next checkpoint transaction starts. `back-to-back`: as soon as the last one "
        "committed, if tuples (or tick tuples) wait in the driver; with nothing waiting, no "
        "transaction runs, and a partitioned spout is asked for more once per interval. "
        "`interval` (Storm's): at most one PREPARE per `topology.state.checkpoint.interval.ms`."
    ),
    "topology.state.commit.location": (
        "`auto`: a COMMIT that runs no user code (no stateful bolt overrides `pre_commit`) is "
        "done by the driver through the provider, with no Spark job; `executors`: every COMMIT "
        "is a Spark job of the stateful tasks."
    ),
    "topology.driver.head": (
        "Whether the driver runs a checkpoint job's stateless head itself: the leading stages "
        "whose bolts are all stateless (no state, timers, windows or tick tuples), before a "
        "stage boundary, when the topology reads no partitioned spout. Spark runs the rest, so "
        "the word count's PREPARE is one Spark stage instead of two. `auto`: when the head's "
        "cost for the transaction (its tuples times the head's measured seconds per tuple) fits "
        "`topology.driver.head.budget.ms`, so large batches keep the head on Spark's parallel "
        "tasks; `always`; `never`. A `topology.faults` fault that needs a Spark worker in a "
        "head bolt is refused unless `never`."
    ),
    "topology.driver.head.budget.ms": (
        "Under `topology.driver.head` `auto`: the most time, in ms, the driver may spend "
        "running a transaction's head, estimated before it runs. On Spark the head costs a "
        "stage boundary (some 20-40 ms on 2 cores) plus its run split over its tasks; in the "
        "driver, its run: the default is twice the cheapest boundary."
    ),
    "topology.input.cut": (
        "When a data job (a PREPARE, or a batch of a topology without state) takes the spout "
        "tuples waiting in the driver. `task-start`: when the job's first Spark task starts and "
        "asks the driver for its input, so the tuples gathered while Spark scheduled the job "
        "(25-35 ms on two cores, more on a standalone cluster) go with it instead of waiting "
        "for the next job; the executors then connect to the driver (its `spark.driver.host`, "
        "a port of its own chosen per topology). `submit`: when the job is submitted. The "
        "inline engine, and a topology reading partitioned spouts, always cut at submit."
    ),
    "topology.message.timeout.secs": (
        "A spout tuple whose tree is still incomplete this long after its transaction ended is "
        "failed (and replayed by its spout)."
    ),
    "topology.acker.executors": (
        "Unset: the driver reduces the acks. `0`: tuple tracking off, a tuple is acked as it is "
        "emitted (at-most-once; checkpoints still run). N > 0: the acks are reduced over N Spark "
        "partitions."
    ),
    "topology.max.spout.pending": (
        "Checkpointed topology: the most tuples in flight per spout task (unset: no limit). "
        "Transactional topology: the most txids active at once (unset: 1)."
    ),
    "topology.enable.message.timeouts": "`false`: incomplete tuple trees never time out.",
    "topology.max.transaction.retries": (
        "Consecutive failed transactions (or batch attempts) before the topology stops with an "
        "error."
    ),
    "topology.transactional.commit.location": (
        "Where a transactional batch's commit phase (committers and the bolts after them) runs: "
        "`driver`, `executors` (a Spark job per commit), or `auto`: the driver, for every "
        "provider (a `topology.faults` fault there that needs a Spark worker is refused)."
    ),
    "topology.spark.task.max.failures": (
        "Attempts per Spark task before Spark gives up on it; a `local[N]` master becomes "
        "`local[N,F]`."
    ),
    "topology.state.extlib.dir": (
        "More folders of third-party providers, separated by `:` (also the environment variable "
        "`STATEFULBOLTS_EXTLIB`), looked in before `./extlib` and the project's `extlib/`. Only "
        "for a module that is not installed; never put on `sys.path`."
    ),
    "topology.debug": "Storm's key, accepted for compatibility; it changes nothing.",
    "topology.name": (
        "Set by the runtime to the name the topology was submitted under, so a component can "
        "read it from its `conf`; a value given here is replaced."
    ),
    "topology.faults": (
        "Chaos testing (`recovery.faults`): deterministic worker crashes, raised errors and "
        "driver kills at named protocol points. Not for production: a run without it never "
        "enters fault code."
    ),
    "topology.state.backend.timeout.secs": (
        "How long a state store *outage* (unreachable, timing out, busy or loading) is waited "
        "out, with backoff, before the topology stops. A *refusal* (Redis `OOM`, `READONLY`, "
        "`WRONGTYPE`, `NOAUTH`, `NOPERM`, a read-only or corrupt SQLite file) stops it at once."
    ),
    "topology.state.max.parallelism": (
        "Key groups of a fields-grouped stateful bolt: the most tasks it may ever have. Settable "
        "per component with `add_configuration`."
    ),
    "topology.state.evolve": (
        "A start that finds the stored state in another shape (parallelism, renames, "
        "`state_version`) changes it (`auto`) or refuses and names the offline command "
        "(`refuse`)."
    ),
    "topology.state.renames": (
        '`{"old id": "new id"}`: the stored state of a renamed component moves to its new id.'
    ),
    "topology.state.allow.orphaned": (
        "Start even though state of a component the topology no longer has is stored; it is "
        "kept, and reported."
    ),
    "topology.ui.port": (
        "Serve the dashboard and Prometheus `/metrics` on this port while the topology runs "
        "(`0`: a free port). Unset: no dashboard."
    ),
    "topology.ui.host": (
        "The address the dashboard listens on. It has no authentication: bind beyond loopback "
        "on purpose only."
    ),
    "topology.deadletter.policy": (
        "A tuple a component raises on every time: `isolate` it as a dead letter and go on, or "
        "`stop` the topology (once the tuple failed `topology.deadletter.after.failures` "
        "transactions)."
    ),
    "topology.deadletter.after.failures": (
        "Failed transactions attributed to one tuple (since the last commit) before it is "
        "dead-lettered; at most `topology.max.transaction.retries` + 1."
    ),
    "topology.deadletter.max": (
        "Dead letters a topology may hold; one more stops it, as a bug rather than poison."
    ),
    "topology.deadletter.replay.poll.secs": (
        "How often a running topology reads its store for replay requests (one read each time)."
    ),
}

PROVIDER_MEANINGS: dict[str, str] = {
    "keyClass": "Dotted class (or a builtin such as `tuple`) that msgpack keys are rebuilt as.",
    "valueClass": "Dotted class (or a builtin) that msgpack values are rebuilt as.",
    "keySerializerClass": (
        "Dotted class with `serialize(obj) -> bytes` and `deserialize(data)`, made with no "
        "arguments; wins over `keyClass`. Default: msgpack."
    ),
    "valueSerializerClass": "The same for values; wins over `valueClass`. Default: msgpack.",
    "jedisPoolConfig": "One Redis server (Storm's spelling). Only one of `jedisPoolConfig`, "
    "`redisConfig` and `url` may be given.",
    "jedisPoolConfig.host": "The Redis server's host.",
    "jedisPoolConfig.port": "Its port.",
    "jedisPoolConfig.timeout": "Connect and socket timeout, ms; `0` is none.",
    "jedisPoolConfig.database": "Database number.",
    "jedisPoolConfig.password": "`AUTH` password (never printed).",
    "redisConfig": "One Redis server (the Python spelling): the pool fields, plus these.",
    "redisConfig.username": "ACL user name.",
    "redisConfig.ssl": "Connect with TLS.",
    "redisConfig.url": (
        "`redis://[[user]:password@]host[:port][/db]`, `rediss://` for TLS; excludes host, port, "
        "database, username, password and ssl (never printed)."
    ),
    "jedisClusterConfig": (
        "A Redis cluster. With a pool config as well, the pool wins (as in Storm), with a warning."
    ),
    "jedisClusterConfig.nodes": 'Seed nodes, `["host:port", ...]`.',
    "jedisClusterConfig.timeout": "Connect and socket timeout, ms; `0` is none.",
    "jedisClusterConfig.maxRedirections": "`MOVED` / `ASK` hops per command.",
    "jedisClusterConfig.password": "Cluster password (never printed).",
    "url": 'Shorthand for `{"redisConfig": {"url": ...}}` (never printed).',
}

# The connectors' config models, by dotted name: each field is a key, its alias, with its meaning
# as the field's description. A new connector's model goes here.
CONNECTOR_MODELS = (
    "statefulbolts.connectors.redis.RedisStreamConfig",
    "statefulbolts.connectors.redis.PartitionedRedisStreamConfig",
    "statefulbolts.connectors.kafka.KafkaSpoutConfig",
    "statefulbolts.connectors.kafka.KafkaSinkConfig",
    "statefulbolts.connectors.postgres.PostgresSinkConfig",
    "statefulbolts.connectors.redis.RedisSinkConfig",
    "statefulbolts.connectors.files.FileSinkConfig",
)


class Row(NamedTuple):
    """One key of the reference."""

    key: str
    type: str
    default: str
    allowed: str
    meaning: str


def _type_name(annotation: Any) -> str:
    """A reader's name for a field's type: ``integer or none``, ``one of `a`, `b```."""
    origin = typing.get_origin(annotation)
    if origin is typing.Literal:
        return "one of " + ", ".join(f"`{v}`" for v in typing.get_args(annotation))
    if origin in (typing.Union, types.UnionType):
        parts = [_type_name(a) for a in typing.get_args(annotation) if a is not type(None)]
        return " or ".join(parts)
    if origin is dict:
        return "mapping"
    if origin in (list, tuple):  # a tuple field (strict, frozen) is given as a list
        item = typing.get_args(annotation)[0]
        return f"list of {_type_name(item)}s"
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return "mapping"
    names = {str: "string", int: "integer", float: "number", bool: "boolean", SecretStr: "secret"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))


def _bounds(field: FieldInfo) -> str:
    """The numeric and length bounds pydantic enforces, as ``≥ 1``, ``1 to 65535``."""
    low = high = ""
    for item in field.metadata:
        if isinstance(item, annotated_types.Gt):
            low = f"> {item.gt}"
        elif isinstance(item, annotated_types.Ge):
            low = f"≥ {item.ge}"
        elif isinstance(item, annotated_types.Le):
            high = f"≤ {item.le}"
        elif isinstance(item, annotated_types.MinLen):
            low = f"at least {item.min_length} long"
    if low.startswith("≥") and high:
        return f"{low[2:]} to {high[2:]}"
    return ", ".join(b for b in (low, high) if b)


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    if value is None:
        return "none"
    if value == {}:
        return "`{}`"
    return f"`{str(value).lower() if isinstance(value, bool) else value}`"


def _meaning(key: str, field: FieldInfo, meanings: dict[str, str]) -> str:
    if field.description:
        return field.description
    if key not in meanings:
        msg = (
            f"config key {key!r} has no meaning in docs/_gen/config_reference.py: add it to "
            "the meanings there (or give the model field a description)"
        )
        raise KeyError(msg)
    return meanings[key]


def topology_rows() -> list[Row]:
    """The ``topology.*`` keys, in the order ``TopologyConfig`` declares them."""
    from statefulbolts.config import Config, TopologyConfig

    rows = []
    for field in TopologyConfig.model_fields.values():
        key = str(field.alias)
        rows.append(
            Row(
                key,
                _type_name(field.annotation),
                _default(field),
                _bounds(field),
                _meaning(key, field, TOPOLOGY_MEANINGS),
            )
        )
    keys = {row.key for row in rows}
    constants = {v for k, v in vars(Config).items() if k.startswith("TOPOLOGY_")}
    if constants != keys:
        msg = (
            f"Config's constants and TopologyConfig's keys differ: only constants "
            f"{sorted(constants - keys)}, only fields {sorted(keys - constants)}"
        )
        raise ValueError(msg)
    stale = set(TOPOLOGY_MEANINGS) - keys
    if stale:
        msg = f"meanings for keys TopologyConfig no longer has: {sorted(stale)}"
        raise ValueError(msg)
    return rows


def _model_rows(model: type[BaseModel], prefix: str, inherited: str) -> Iterator[Row]:
    for name, field in model.model_fields.items():
        key = f"{prefix}{field.alias or name}"
        nested = _nested_model(field.annotation)
        meanings = dict(PROVIDER_MEANINGS)
        if inherited and key not in meanings:
            fallback = inherited + key.removeprefix(prefix)
            if fallback in PROVIDER_MEANINGS:
                meanings[key] = PROVIDER_MEANINGS[fallback]
        allowed = "" if nested else _bounds(field)
        yield Row(
            key,
            _type_name(field.annotation),
            _default(field),
            allowed,
            _meaning(key, field, meanings),
        )
        if nested is not None:
            parent = "jedisPoolConfig." if key == "redisConfig" else ""
            yield from _model_rows(nested, key + ".", parent)


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    for candidate in typing.get_args(annotation) or (annotation,):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


def provider_rows() -> list[Row]:
    """The fields of ``topology.state.provider.config``, nested ones as dotted paths."""
    from providers._config import StateProviderConfig

    rows = list(_model_rows(StateProviderConfig, "", ""))
    stale = set(PROVIDER_MEANINGS) - {row.key for row in rows}
    if stale:
        msg = f"meanings for provider config fields the model no longer has: {sorted(stale)}"
        raise ValueError(msg)
    return rows


def connector_rows() -> list[Row]:
    """The keys the connectors read from the topology config, each once, in model order.

    A field's ``shown_default`` (its ``json_schema_extra``) says what an unset key means when
    that is not the field's own default (``None``: the topology name, a default URL).
    """
    from importlib import import_module

    rows: dict[str, Row] = {}
    for dotted in CONNECTOR_MODELS:
        module, _, name = dotted.rpartition(".")
        model: type[BaseModel] = getattr(import_module(module), name)
        for field in model.model_fields.values():
            key = str(field.alias)
            extra = field.json_schema_extra if isinstance(field.json_schema_extra, dict) else {}
            shown = extra.get("shown_default")
            rows.setdefault(
                key,
                Row(
                    key,
                    _type_name(field.annotation),
                    str(shown) if shown is not None else _default(field),
                    _bounds(field),
                    _meaning(key, field, {}),
                ),
            )
    return list(rows.values())


def _table(rows: list[Row]) -> str:
    lines = ["| key | type | default | allowed | meaning |", "|---|---|---|---|---|"]
    for row in rows:
        cells = [f"`{row.key}`", row.type, row.default, row.allowed, row.meaning]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines)


def render() -> str:
    """The whole reference, as Markdown."""
    return "\n\n".join(
        [
            "### Topology keys",
            "Validated by `TopologyConfig` (`statefulbolts/config.py`); each is also a constant "
            "of `Config` (`Config.TOPOLOGY_UI_PORT` is `topology.ui.port`). Types are strict: "
            '`"500"` is not a number and `"yes"` is not a boolean; an integer is a number.',
            _table(topology_rows()),
            "### Provider config: `topology.state.provider.config`",
            "Validated by `StateProviderConfig` (`providers/_config.py`) in the in-memory and "
            "Redis providers. Every field is optional; a wrong or unknown one raises "
            "`ProviderConfigError` naming the dotted field. The in-memory provider uses only the "
            "serializer fields. The SQLite provider (`extlib/sqlite_state.py`) reads its own "
            "`path` (the database file) and the serializer fields.",
            _table(provider_rows()),
            "### Keys read by connectors",
            "Validated by each connector's config model (`statefulbolts/connectors/`) when the "
            "connector reads them, with the same strict types; an argument given to the "
            "connector wins over its key.",
            _table(connector_rows()),
        ]
    )


def on_page_markdown(markdown: str, **_: Any) -> str:
    """MkDocs hook: put the generated reference where a page holds the marker."""
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, render())


if __name__ == "__main__":
    print(render())
