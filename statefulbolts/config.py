"""``Config``: Storm's dotted keys, validated into a frozen model.

Users write Storm's keys in a dict, a ``Config``, or a JSON / YAML file. The runtime validates them
into ``TopologyConfig``; a wrong type or value raises ``ConfigError`` naming the key and what is
allowed, and an unknown ``topology.*`` key warns with the closest known key.

Code that is handed a raw config (a spout's ``open``, a component's own settings) reads a key
with ``read_setting``, which validates it by the same model: one rule and one message per key,
and the model's default when the key is missing.
"""

from __future__ import annotations

import difflib
import json
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from statefulbolts.errors import ConfigError


class TopologyConfig(BaseModel):
    """The validated topology-level config.

    Types are strict, as Storm's validators are: ``True`` is not a count of ackers, ``"500"`` is
    not a number of milliseconds and ``"yes"`` is not a boolean (an int is a float, though).
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    state_provider: str = Field(
        "providers.memory.InMemoryKeyValueStateProvider", alias="topology.state.provider"
    )
    state_provider_config: str | dict[str, Any] | None = Field(
        None, alias="topology.state.provider.config"
    )
    checkpoint_interval_ms: int = Field(1000, gt=0, alias="topology.state.checkpoint.interval.ms")
    # When the next PREPARE may start (``checkpoint.spout``): as soon as tuples wait and the last
    # transaction committed, or (Storm's) once per interval.
    checkpoint_cadence: Literal["back-to-back", "interval"] = Field(
        "back-to-back", alias="topology.state.checkpoint.cadence"
    )
    # Whether a COMMIT without user code is done by the driver (``CheckpointJobs.commit_here``).
    state_commit_location: Literal["auto", "executors"] = Field(
        "auto", alias="topology.state.commit.location"
    )
    # Whether the driver runs a checkpoint job's stateless head itself (``checkpoint._head``):
    # ``auto`` when the head's measured cost for the batch fits the budget. On Spark the head
    # costs a stage boundary (20-40 ms on two cores) plus its run split over its tasks; in the
    # driver, its run: it pays to move up to twice the cheapest boundary. 10 and 20 ms left the
    # word count's split on Spark at 10,000 tuples/s, where moving it halved the p50
    # (docs/benchmarks.md).
    driver_head: Literal["auto", "always", "never"] = Field("auto", alias="topology.driver.head")
    driver_head_budget_ms: float = Field(
        40, ge=0, allow_inf_nan=False, alias="topology.driver.head.budget.ms"
    )
    # When a data job's spout tuples are cut (``statefulbolts.runtime._late``): when its first
    # Spark task starts and asks for them, so the tuples gathered while Spark scheduled the job
    # go with it; or when the job is submitted.
    input_cut: Literal["task-start", "submit"] = Field("task-start", alias="topology.input.cut")
    message_timeout_secs: float = Field(30, gt=0, alias="topology.message.timeout.secs")
    acker_executors: int | None = Field(None, ge=0, alias="topology.acker.executors")
    max_spout_pending: int | None = Field(None, ge=0, alias="topology.max.spout.pending")
    enable_message_timeouts: bool = Field(True, alias="topology.enable.message.timeouts")
    max_transaction_retries: int = Field(5, ge=1, alias="topology.max.transaction.retries")
    # Where a transactional batch's commit phase runs (``TransactionalJobs.commit_here``).
    transactional_commit_location: Literal["auto", "driver", "executors"] = Field(
        "auto", alias="topology.transactional.commit.location"
    )
    task_max_failures: int = Field(4, ge=1, alias="topology.spark.task.max.failures")
    extlib_dir: str | None = Field(None, alias="topology.state.extlib.dir")
    debug: bool = Field(False, alias="topology.debug")
    name: str | None = Field(None, alias="topology.name")
    faults: str | dict[str, Any] | None = Field(None, alias="topology.faults")
    state_backend_timeout_secs: float = Field(
        300, gt=0, alias="topology.state.backend.timeout.secs"
    )
    # One driver per topology (``recovery.lease``): how long its lease holds unrenewed.
    state_lease_timeout_secs: float = Field(
        20,
        ge=1,
        alias="topology.state.lease.timeout.secs",
        description=(
            "How long, in seconds, a driver's lease on its topology holds without renewal. The "
            "driver renews it four times per period; once a driver stopped renewing (it "
            "crashed, or hangs), another driver of the topology may start without "
            "--take-over after this long. A restart by the same supervisor, or on the same "
            "machine after the holder's process died, takes over at once. Only durable "
            "providers keep leases (Redis, SQLite)."
        ),
    )
    # Key groups of keyed state (``statefulbolts.keygroups``): the most tasks a stateful bolt
    # may have; a restart with another parallelism redistributes committed state by group.
    state_max_parallelism: int = Field(128, ge=1, le=32768, alias="topology.state.max.parallelism")
    # What a start does when the stored shape of the state differs from the topology's
    # (``statefulbolts.state.evolve``): ``auto`` changes the stored state (rescale, rename,
    # migrate), ``refuse`` stops with the command that would.
    state_evolve: Literal["auto", "refuse"] = Field("auto", alias="topology.state.evolve")
    # How often the runners count each stateful component's committed keys, at most
    # (``statefulbolts.runtime.StateKeyCounter``).
    state_size_interval_ms: int = Field(
        1000,
        ge=0,
        alias="topology.state.size.interval.ms",
        description=(
            "The least time, in ms, between two counts of each stateful component's committed "
            "keys (the dashboard's state size chart and `statefulbolts_state_keys`): a count "
            "follows a commit, and one that would come sooner waits for the next step after the "
            "interval, so the last commit is counted too. 0 counts after every commit."
        ),
    )
    # State time-to-live (``providers.StateTtl``), topology-wide; a component's own setting
    # (``add_configuration``, ``get_component_configuration``) wins. None: keys never expire.
    state_ttl_secs: float | None = Field(
        None,
        gt=0,
        alias="topology.state.ttl.secs",
        description=(
            "Seconds after its last write (or read, with topology.state.ttl.refresh = "
            "read_write) that a key of a stateful bolt's state expires, judged against the "
            "checkpoint transaction's timestamp; unset: keys never expire."
        ),
    )
    state_ttl_refresh: Literal["write", "read_write"] = Field(
        "write",
        alias="topology.state.ttl.refresh",
        description=(
            "What refreshes a key's time to live (topology.state.ttl.secs): `write` (a put), or "
            "`read_write` (also a get or get_many that finds the key; iteration never does). "
            "Topology-wide, or per component as the TTL is."
        ),
    )
    # Stored components renamed in the topology: {old id: new id}.
    state_renames: dict[str, str] = Field(default_factory=dict, alias="topology.state.renames")
    # Start even though stored state belongs to components the topology no longer has.
    state_allow_orphaned: bool = Field(False, alias="topology.state.allow.orphaned")
    # The live dashboard and /metrics (``statefulbolts.ui``): off unless a port is given.
    ui_port: int | None = Field(None, ge=0, le=65535, alias="topology.ui.port")
    ui_host: str = Field("127.0.0.1", min_length=1, alias="topology.ui.host")
    # Poison tuples (``statefulbolts.deadletter``): isolate them, or stop as before.
    deadletter_policy: Literal["isolate", "stop"] = Field(
        "isolate", alias="topology.deadletter.policy"
    )
    deadletter_after_failures: int = Field(2, ge=1, alias="topology.deadletter.after.failures")
    deadletter_max: int = Field(100, ge=1, alias="topology.deadletter.max")
    deadletter_replay_poll_secs: float = Field(
        5, gt=0, alias="topology.deadletter.replay.poll.secs"
    )
    # Seconds between tick tuples to every bolt (``statefulbolts.ticks``); a bolt's own
    # setting wins. None: no ticks.
    tick_tuple_freq_secs: int | None = Field(
        None,
        ge=1,
        alias="topology.tick.tuple.freq.secs",
        description=(
            "Seconds between tick tuples (component `__system`, stream `__tick`) to every bolt "
            "of a checkpointed or plain topology; a bolt's own setting (`add_configuration`, "
            "else its `get_component_configuration()`) wins. Each tick due goes, to every task "
            "of the bolt, with the next transaction, before its data. Refused on a "
            "transactional topology. None: no ticks."
        ),
    )
    # How many of the tuples a windowed bolt's task holds it keeps in memory
    # (``statefulbolts.windowing``); the rest are read back from the state provider.
    windowing_max_events_in_memory: int = Field(
        100_000,
        ge=1,
        alias="topology.state.windowing.max.events.in.memory",
        description=(
            "The most tuples a windowed bolt's task keeps in memory between the times its "
            "windows fire; every tuple a window holds is also in the state provider (namespace "
            "`<topology>/$window/<component>-<task>`), and those not in memory are read from "
            "it when their window fires."
        ),
    )

    @property
    def tracking(self) -> bool:
        """Whether tuple trees are tracked (``topology.acker.executors`` is not 0)."""
        return self.acker_executors != 0

    @property
    def acker_partitions(self) -> int:
        """Spark partitions of the acker reduce; 0 means the driver reduces (the default)."""
        return self.acker_executors or 0


KNOWN_KEYS: dict[str, str] = {
    str(f.alias): name for name, f in TopologyConfig.model_fields.items() if f.alias
}


class Config(dict[str, Any]):
    """A topology config: a dict with Storm's keys as constants.

    Example:
        >>> conf = Config()
        >>> conf[Config.TOPOLOGY_STATE_CHECKPOINT_INTERVAL] = 500
        >>> conf.set_num_ackers(2)
        >>> validate_config(conf).checkpoint_interval_ms
        500
    """

    TOPOLOGY_STATE_PROVIDER = "topology.state.provider"
    TOPOLOGY_STATE_PROVIDER_CONFIG = "topology.state.provider.config"
    TOPOLOGY_STATE_CHECKPOINT_INTERVAL = "topology.state.checkpoint.interval.ms"
    TOPOLOGY_STATE_CHECKPOINT_CADENCE = "topology.state.checkpoint.cadence"
    TOPOLOGY_STATE_COMMIT_LOCATION = "topology.state.commit.location"
    TOPOLOGY_DRIVER_HEAD = "topology.driver.head"
    TOPOLOGY_DRIVER_HEAD_BUDGET_MS = "topology.driver.head.budget.ms"
    TOPOLOGY_INPUT_CUT = "topology.input.cut"
    TOPOLOGY_MESSAGE_TIMEOUT_SECS = "topology.message.timeout.secs"
    TOPOLOGY_ACKER_EXECUTORS = "topology.acker.executors"
    TOPOLOGY_MAX_SPOUT_PENDING = "topology.max.spout.pending"
    TOPOLOGY_ENABLE_MESSAGE_TIMEOUTS = "topology.enable.message.timeouts"
    TOPOLOGY_MAX_TRANSACTION_RETRIES = "topology.max.transaction.retries"
    TOPOLOGY_TRANSACTIONAL_COMMIT_LOCATION = "topology.transactional.commit.location"
    TOPOLOGY_SPARK_TASK_MAX_FAILURES = "topology.spark.task.max.failures"
    TOPOLOGY_STATE_EXTLIB_DIR = "topology.state.extlib.dir"
    TOPOLOGY_DEBUG = "topology.debug"
    TOPOLOGY_NAME = "topology.name"
    TOPOLOGY_FAULTS = "topology.faults"
    TOPOLOGY_STATE_BACKEND_TIMEOUT_SECS = "topology.state.backend.timeout.secs"
    TOPOLOGY_STATE_LEASE_TIMEOUT_SECS = "topology.state.lease.timeout.secs"
    TOPOLOGY_STATE_MAX_PARALLELISM = "topology.state.max.parallelism"
    TOPOLOGY_STATE_EVOLVE = "topology.state.evolve"
    TOPOLOGY_STATE_SIZE_INTERVAL = "topology.state.size.interval.ms"
    TOPOLOGY_STATE_TTL_SECS = "topology.state.ttl.secs"
    TOPOLOGY_STATE_TTL_REFRESH = "topology.state.ttl.refresh"
    TOPOLOGY_STATE_RENAMES = "topology.state.renames"
    TOPOLOGY_STATE_ALLOW_ORPHANED = "topology.state.allow.orphaned"
    TOPOLOGY_UI_PORT = "topology.ui.port"
    TOPOLOGY_UI_HOST = "topology.ui.host"
    TOPOLOGY_DEADLETTER_POLICY = "topology.deadletter.policy"
    TOPOLOGY_DEADLETTER_AFTER_FAILURES = "topology.deadletter.after.failures"
    TOPOLOGY_DEADLETTER_MAX = "topology.deadletter.max"
    TOPOLOGY_DEADLETTER_REPLAY_POLL_SECS = "topology.deadletter.replay.poll.secs"
    TOPOLOGY_TICK_TUPLE_FREQ_SECS = "topology.tick.tuple.freq.secs"
    TOPOLOGY_STATE_WINDOWING_MAX_EVENTS_IN_MEMORY = "topology.state.windowing.max.events.in.memory"

    def set_num_ackers(self, n: int) -> None:
        """``topology.acker.executors``; 0 turns tuple tracking off."""
        self[self.TOPOLOGY_ACKER_EXECUTORS] = n

    def set_max_spout_pending(self, n: int) -> None:
        """``topology.max.spout.pending``, per spout task."""
        self[self.TOPOLOGY_MAX_SPOUT_PENDING] = n

    def set_message_timeout_secs(self, secs: float) -> None:
        """``topology.message.timeout.secs``."""
        self[self.TOPOLOGY_MESSAGE_TIMEOUT_SECS] = secs

    @classmethod
    def from_file(cls, path: str | Path) -> Config:
        """Read a JSON or YAML file of config keys."""
        return cls(load_config_file(path))


def load_config_file(path: str | Path) -> dict[str, Any]:
    """Read a config mapping from a ``.json``, ``.yaml`` or ``.yml`` file."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        msg = f"config file {str(p)!r} cannot be read: {exc}"
        raise ConfigError(msg) from exc
    try:
        if p.suffix.lower() in {".yaml", ".yml"}:
            data = yaml.safe_load(text)
        else:
            data = json.loads(text)
    except (ValueError, yaml.YAMLError) as exc:
        msg = f"config file {str(p)!r} is not valid: {exc}"
        raise ConfigError(msg) from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        msg = f"config file {str(p)!r} must hold a mapping of keys, got {type(data).__name__}"
        raise ConfigError(msg)
    return data


_PREFIX = "topology."


def closest_key(key: str) -> str | None:
    """The known ``topology.*`` key most like ``key``, or ``None`` when none is close.

    Keys are compared without the shared ``topology.`` prefix: with it, every short unknown key
    (``topology.workers``) looks close to every short known one (``topology.name``).

    Example:
        >>> closest_key("topology.acker.executor")
        'topology.acker.executors'
        >>> closest_key("topology.workers") is None
        True
    """
    rest = key.removeprefix(_PREFIX)
    by_rest = {k.removeprefix(_PREFIX): k for k in KNOWN_KEYS if k.startswith(_PREFIX)}
    close = difflib.get_close_matches(rest, by_rest, n=1)
    return by_rest[close[0]] if close else None


def validate_config(conf: Mapping[str, Any] | None) -> TopologyConfig:
    """Validate the ``topology.*`` keys of ``conf``; other keys pass through untouched."""
    conf = dict(conf or {})
    known = {k: v for k, v in conf.items() if k in KNOWN_KEYS}
    for key in conf:
        if isinstance(key, str) and key.startswith(_PREFIX) and key not in KNOWN_KEYS:
            close = closest_key(key)
            hint = f"; did you mean {close!r}?" if close else ""
            warnings.warn(f"unknown config key {key!r}{hint}", UserWarning, stacklevel=2)
    if known.get("topology.state.provider") is None:
        known.pop("topology.state.provider", None)
    try:
        tc = TopologyConfig.model_validate(known)
    except ValidationError as exc:
        raise _invalid(exc) from None
    _check_deadletter(tc)
    return tc


def _invalid(exc: ValidationError) -> ConfigError:
    """One message for every problem: each key, what is wrong, and what was given."""
    problems = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"])
        problems.append(f"{key}: {err['msg']} (got {err.get('input')!r})")
    return ConfigError("invalid topology config: " + "; ".join(problems))


def read_setting(conf: Mapping[str, Any] | None, key: str) -> Any:
    """The value of ``key`` in ``conf``, validated as ``TopologyConfig`` validates it.

    For code handed a raw config: a missing (or ``None``) key gives the model's default.

    Raises:
        ConfigError: the value is not allowed (names the key, what is allowed, what was got).
        KeyError: ``key`` is not a ``TopologyConfig`` key (a mistake in the caller).

    Example:
        >>> read_setting({"topology.max.spout.pending": 500}, Config.TOPOLOGY_MAX_SPOUT_PENDING)
        500
        >>> read_setting({}, Config.TOPOLOGY_STATE_CHECKPOINT_INTERVAL)
        1000
    """
    name = KNOWN_KEYS[key]
    value = (conf or {}).get(key)
    if value is None:
        return TopologyConfig.model_fields[name].get_default(call_default_factory=True)
    try:
        tc = TopologyConfig.model_validate({key: value})
    except ValidationError as exc:
        raise _invalid(exc) from None
    return getattr(tc, name)


def _check_deadletter(tc: TopologyConfig) -> None:
    """A poison tuple must be isolated before the retry budget stops the topology.

    The driver stops after ``topology.max.transaction.retries`` + 1 failed transactions in a
    row; a tuple is dead-lettered at its ``topology.deadletter.after.failures``-th failure.
    """
    limit = tc.max_transaction_retries + 1
    if tc.deadletter_policy == "isolate" and tc.deadletter_after_failures > limit:
        msg = (
            f"invalid topology config: topology.deadletter.after.failures = "
            f"{tc.deadletter_after_failures} is more than topology.max.transaction.retries + 1 "
            f"= {limit}: the topology would stop before a poison tuple is isolated; lower it, "
            "or raise topology.max.transaction.retries"
        )
        raise ConfigError(msg)
