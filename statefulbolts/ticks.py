"""Tick tuples: Storm's system ``__tick`` stream, and which bolts get them, how often.

A bolt configured with ``topology.tick.tuple.freq.secs`` (topology-wide, or for the bolt alone)
gets, every that many seconds, a tuple from component ``__system`` (task -1) on stream
``__tick`` whose one value, ``rate_secs``, is the frequency. Bolts use it to flush, expire or
report on a schedule whatever their input rate. ``is_tick_tuple`` tells it from data.

Where a bolt's setting comes from, first found wins (Storm's order): the declarer's
``add_configuration``, then the bolt's ``get_component_configuration()``, then the topology
config. ``None`` (or no key) at one level falls through to the next. Spouts and the framework's
own components get no ticks. Which tick goes into which transaction is the checkpoint
protocol's decision (``checkpoint``); a transactional topology's batch bolts get none, as in
Storm, and the key is refused there (``refuse_ticks``).

Example:
    >>> tick = tick_tuple(5)
    >>> is_tick_tuple(tick), tick.get_value_by_field("rate_secs"), tick.source_component
    (True, 5, '__system')
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from statefulbolts.config import read_setting
from statefulbolts.errors import ConfigError
from statefulbolts.tuples import Fields, Tuple

__all__ = [
    "SYSTEM_COMPONENT_ID",
    "SYSTEM_TASK_ID",
    "TICK_FIELDS",
    "TICK_FREQ_KEY",
    "TICK_STREAM_ID",
    "is_tick_tuple",
    "refuse_ticks",
    "tick_frequencies",
    "tick_tuple",
]

TICK_FREQ_KEY = "topology.tick.tuple.freq.secs"
SYSTEM_COMPONENT_ID = "__system"
SYSTEM_TASK_ID = -1
TICK_STREAM_ID = "__tick"
TICK_FIELDS = Fields("rate_secs")


def is_tick_tuple(tuple_: Tuple) -> bool:
    """Whether ``tuple_`` is a tick tuple (from ``__system`` on stream ``__tick``).

    Example:
        >>> from statefulbolts import Fields, Tuple
        >>> is_tick_tuple(Tuple(["a"], Fields("word"), "split", 3))
        False
    """
    return (
        tuple_.source_component == SYSTEM_COMPONENT_ID and tuple_.source_stream_id == TICK_STREAM_ID
    )


def tick_tuple(rate_secs: int) -> Tuple:
    """A tick tuple as a bolt gets it: untracked (acking it is allowed and does nothing)."""
    return Tuple([rate_secs], TICK_FIELDS, SYSTEM_COMPONENT_ID, SYSTEM_TASK_ID, TICK_STREAM_ID)


def _own_setting(spec: Any) -> Any:
    """The bolt's own value of the key: the declarer's, else ``get_component_configuration``'s."""
    declared = (getattr(spec, "conf", None) or {}).get(TICK_FREQ_KEY)
    if declared is not None:
        return declared
    obj = getattr(spec, "obj", None)
    if obj is None:
        return None
    own = obj.get_component_configuration()
    if own is None:
        return None
    if not isinstance(own, Mapping):
        cls = type(obj)
        msg = (
            f"component {spec.id!r}: {cls.__module__}.{cls.__qualname__}."
            f"get_component_configuration() returned {type(own).__name__}, not a mapping of "
            "config keys (or None)"
        )
        raise ConfigError(msg)
    return own.get(TICK_FREQ_KEY)


def _frequency(spec: Any, default: int | None) -> int | None:
    own = _own_setting(spec)
    if own is None:
        return default
    try:
        value = read_setting({TICK_FREQ_KEY: own}, TICK_FREQ_KEY)  # the config model's rule
    except ConfigError as exc:
        msg = (
            f"component {spec.id!r}: {TICK_FREQ_KEY} must be an int >= 1 (seconds between "
            f"tick tuples) or None, got {own!r}"
        )
        raise ConfigError(msg) from exc
    return int(value)


def tick_frequencies(components: Mapping[str, Any], default: int | None) -> dict[str, int]:
    """Seconds between ticks of every bolt that gets them (bolts without ticks are left out).

    ``components`` are a topology's ``ComponentSpec`` by id; ``default`` is the topology's
    ``topology.tick.tuple.freq.secs`` (validated by the config model). Spouts and system
    components (``$...``) are left out.

    Raises:
        ConfigError: a bolt's own setting is not an int >= 1 (names the component and the key).
    """
    freqs: dict[str, int] = {}
    for cid in sorted(components):
        spec = components[cid]
        if spec.is_spout or cid.startswith(("$", "__")):
            continue
        freq = _frequency(spec, default)
        if freq is not None:
            freqs[cid] = freq
    return freqs


def refuse_ticks(components: Mapping[str, Any], default: int | None, topology: str) -> None:
    """Refuse ``topology.tick.tuple.freq.secs`` on a transactional topology.

    Storm's batch bolts get no tick tuples: a batch is processed and committed as a unit, and a
    tick between batches belongs to none. Asking for ticks there is a mistake to point out, not
    a setting to drop silently.

    Raises:
        ConfigError: the topology config or one of ``components`` sets the key.
    """
    where = [f"the topology config of {topology!r}"] if default is not None else []
    where += [
        f"component {cid!r}"
        for cid in sorted(components)
        if not cid.startswith(("$", "__")) and _own_setting(components[cid]) is not None
    ]
    if where:
        msg = (
            f"{TICK_FREQ_KEY} is set in {', '.join(where)}, a transactional topology: its batch "
            "bolts get no tick tuples (as in Storm); remove the key, or use a checkpointed "
            "topology (TopologyBuilder) for a bolt that needs ticks"
        )
        raise ConfigError(msg)
