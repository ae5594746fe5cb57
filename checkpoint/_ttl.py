"""State time-to-live in the checkpoint protocol: each transaction's timestamp, each bolt's TTL.

Expiry is judged against the transaction's timestamp, never the clock at a read (the rules are
in ``providers._ttl``), so the driver fixes one timestamp per transaction and every task of it
sees the same:

1. When the checkpoint spout starts transaction ``t`` (it saves PREPARING(t)), it fixes ``t``'s
   timestamp, ``Clock.wall_ms()``, under ``TIME_KEY`` in its own state, in the same commit as
   PREPARING(t). If ``TIME_KEY`` already names ``t`` (``t`` failed, rolled back and is being
   replayed, after a driver restart too), that timestamp is kept: the replay reads and expires
   exactly the keys the first attempt did.
2. Every job of ``t`` (PREPARE, COMMIT, ROLLBACK, INITSTATE) carries the saved timestamp in
   its ``CheckpointTaskProgram``; a stateful task sets it on its state, with its component's
   TTL (``component_ttls``), before the bolt's first read.
3. The state stores the timestamp with the prepare; COMMIT(t) cleans up at it, so a COMMIT the
   driver runs itself (``CheckpointJobs.commit_here``) needs nothing more.

A bolt's TTL is configuration only: ``topology.state.ttl.secs`` and
``topology.state.ttl.refresh`` in the topology config, overridden per component by the
bolt's ``get_component_configuration()``, itself overridden by ``add_configuration`` on its
declarer. Known before the task starts, it is validated on the driver when the topology is
submitted.

Example:
    >>> from providers import InMemoryKeyValueState
    >>> state = InMemoryKeyValueState("demo/$checkpointspout-0")
    >>> fix_transaction_time(state, 3, 1_700_000_000_000)  # PREPARING(3) saved next
    1700000000000
    >>> fix_transaction_time(state, 3, 1_700_000_999_000)  # the replay of 3 keeps it
    1700000000000
    >>> saved_transaction_time(state, 3), saved_transaction_time(state, 4)
    (1700000000000, None)
"""

from __future__ import annotations

import reprlib
from collections.abc import Mapping
from typing import Any

from providers import KeyValueState, StateTtl, TtlRefresh
from statefulbolts.config import Config, read_setting
from statefulbolts.errors import CheckpointError, ConfigError, TopologyError
from statefulbolts.topology import StormTopology

__all__ = [
    "TIME_KEY",
    "component_ttls",
    "fix_transaction_time",
    "saved_transaction_time",
]

TIME_KEY = "__txtime"
_TTL_KEYS = (Config.TOPOLOGY_STATE_TTL_SECS, Config.TOPOLOGY_STATE_TTL_REFRESH)


def fix_transaction_time(state: KeyValueState, txid: int, now_ms: float) -> int:
    """The timestamp of transaction ``txid``: the saved one if any, else ``now_ms`` put.

    The caller commits the checkpoint spout's state, with PREPARING(``txid``).
    """
    saved = saved_transaction_time(state, txid)
    if saved is not None:
        return saved
    ms = int(now_ms)
    state.put(TIME_KEY, {"txid": txid, "ms": ms})
    return ms


def saved_transaction_time(state: KeyValueState, txid: int) -> int | None:
    """The saved timestamp of ``txid``, or ``None`` when the saved one is another txid's.

    Raises:
        CheckpointError: what is saved under ``TIME_KEY`` is not ``{"txid": int, "ms": int}``.
    """
    saved = state.get(TIME_KEY)
    if saved is None:
        return None
    got_txid = saved.get("txid") if isinstance(saved, dict) else None
    ms = saved.get("ms") if isinstance(saved, dict) else None
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (got_txid, ms)):
        msg = (
            f"saved transaction timestamp {TIME_KEY!r} is {reprlib.repr(saved)}, not "
            '{"txid": <int>, "ms": <int>}'
        )
        raise CheckpointError(msg)
    return ms if got_txid == txid else None


def component_ttls(topology: StormTopology, conf: Mapping[str, Any]) -> dict[str, StateTtl]:
    """The TTL of each stateful component that has one (see the module docstring).

    Raises:
        TopologyError: a component's setting is not allowed (names the component, the key, what
            is allowed and what was given).
    """
    ttls: dict[str, StateTtl] = {}
    for cid, spec in topology.components.items():
        if not spec.is_stateful:
            continue
        own = spec.obj.get_component_configuration() or {}
        layers = (spec.conf, own, conf)
        setting = {
            key: next((c[key] for c in layers if c.get(key) is not None), None) for key in _TTL_KEYS
        }
        try:
            secs = read_setting(setting, Config.TOPOLOGY_STATE_TTL_SECS)
            refresh = read_setting(setting, Config.TOPOLOGY_STATE_TTL_REFRESH)
        except ConfigError as exc:
            msg = f"component {cid!r}: {exc}"
            raise TopologyError(msg) from exc
        if secs is not None:
            ttls[cid] = StateTtl(max(1, round(secs * 1000)), TtlRefresh(refresh))
    return ttls
